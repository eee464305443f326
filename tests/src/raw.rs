//! A raw MQTT 5 client (rumqttc, Nagle off) that sends hand-built requests and sees every
//! byte and property of what comes back: what the SDK hides.
//!
//! rumqttc reconnects with a clean start and does not subscribe again; a client that the
//! broker dropped (a fault test that pauses the broker for longer than the keep-alive) would
//! then send requests and never see a reply. So the client restores its subscriptions after
//! every connection that came back without a session.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PublishProperties};
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use tokio::sync::mpsc;

/// The request topic.
pub const REQUEST_TOPIC: &str = "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke";

/// A message as received.
#[derive(Debug, Clone)]
pub struct Received {
    /// Topic.
    pub topic: String,
    /// Payload bytes.
    pub payload: Bytes,
    /// Properties (default if none).
    pub properties: PublishProperties,
    /// QoS it was delivered with.
    pub qos: QoS,
}

impl Received {
    /// First user property `name`.
    pub fn user_property(&self, name: &str) -> Option<&str> {
        self.properties
            .user_properties
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Subscribes `client` (named `id`) to every filter in `filters` again, after a reconnect that
/// found no session. Not awaited: the event loop calling this is what drains the request queue.
fn subscribe_again(client: &AsyncClient, filters: &Mutex<Vec<String>>, id: &str) {
    let filters = filters.lock().unwrap_or_else(|p| p.into_inner()).clone();
    eprintln!("raw client {id}: reconnected without its session; subscribing again to {filters:?}");
    for filter in filters {
        let _ = client.try_subscribe(filter, QoS::AtLeastOnce);
    }
}

/// A connected raw client that receives on `clients/<id>/#` and anything else it subscribes to.
pub struct RawClient {
    client: AsyncClient,
    /// Its client id.
    pub id: String,
    incoming: mpsc::UnboundedReceiver<Received>,
    /// Messages received while waiting for a reply, kept for [`RawClient::next`].
    pending: std::collections::VecDeque<Received>,
    next_correlation: u64,
    /// Every filter subscribed so far, subscribed again after a reconnect without a session.
    filters: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RawClient {
    /// Connects to 127.0.0.1:`port` as `id` and subscribes to `clients/<id>/#`.
    pub async fn connect(port: u16, id: &str) -> RawClient {
        RawClient::connect_as(port, id, None).await
    }

    /// [`RawClient::connect`] with a user name and password.
    pub async fn connect_as(port: u16, id: &str, login: Option<(&str, &str)>) -> RawClient {
        let mut options = MqttOptions::new(id, "127.0.0.1", port);
        if let Some((user, password)) = login {
            options.set_credentials(user, password);
        }
        options.set_keep_alive(Duration::from_secs(30));
        options.set_max_packet_size(Some(16 << 20));
        let mut network = options.network_options();
        network.set_tcp_nodelay(true);
        options.set_network_options(network);
        let (client, mut eventloop) = AsyncClient::new(options, 1024);
        let (tx, incoming) = mpsc::unbounded_channel();
        let (ready_tx, ready) = tokio::sync::oneshot::channel();
        let mut ready_tx = Some(ready_tx);
        let own = format!("clients/{id}/#");
        let filters = Arc::new(Mutex::new(vec![own.clone()]));
        let task = tokio::spawn({
            let (client, filters, id) = (client.clone(), filters.clone(), id.to_owned());
            async move {
                let mut connected_before = false;
                loop {
                    match eventloop.poll().await {
                        Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                            if connected_before && !ack.session_present {
                                subscribe_again(&client, &filters, &id);
                            }
                            connected_before = true;
                        }
                        Ok(Event::Incoming(Packet::Publish(p))) => {
                            let received = Received {
                                topic: String::from_utf8_lossy(&p.topic).into_owned(),
                                payload: p.payload.clone(),
                                properties: p.properties.clone().unwrap_or_default(),
                                qos: p.qos,
                            };
                            if tx.send(received).is_err() {
                                return;
                            }
                        }
                        Ok(Event::Incoming(Packet::SubAck(_))) => {
                            if let Some(ready) = ready_tx.take() {
                                let _ = ready.send(());
                            }
                        }
                        Ok(_) => {}
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
            }
        });
        client
            .subscribe(own, QoS::AtLeastOnce)
            .await
            .expect("subscribe");
        tokio::time::timeout(Duration::from_secs(10), ready)
            .await
            .expect("SUBACK in time")
            .expect("event loop alive");
        RawClient {
            client,
            id: id.to_owned(),
            incoming,
            pending: Default::default(),
            next_correlation: 1,
            filters,
            task,
        }
    }

    /// Subscribes to one more filter (waits a moment for the SUBACK).
    pub async fn subscribe(&self, filter: &str) {
        self.filters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(filter.to_owned());
        self.client
            .subscribe(filter, QoS::AtLeastOnce)
            .await
            .expect("subscribe");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    /// The response topic this client uses (Rust SDK shape).
    pub fn response_topic(&self) -> String {
        format!(
            "clients/{}/services/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke/response",
            self.id
        )
    }

    /// A fresh 16-byte correlation id.
    pub fn correlation(&mut self) -> Bytes {
        self.next_correlation += 1;
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&self.next_correlation.to_be_bytes());
        bytes[8..].copy_from_slice(&crate::now_ms().to_be_bytes());
        Bytes::copy_from_slice(&bytes)
    }

    /// Properties of a well-formed request: response topic, correlation, 10 s expiry,
    /// `__srcId`, `__ts` (now), `__protVer` 1.0.
    pub fn request_properties(&self, correlation: Bytes) -> PublishProperties {
        PublishProperties {
            response_topic: Some(self.response_topic()),
            correlation_data: Some(correlation),
            message_expiry_interval: Some(10),
            content_type: Some("application/octet-stream".to_owned()),
            user_properties: vec![
                ("__srcId".to_owned(), self.id.clone()),
                (
                    "__ts".to_owned(),
                    format!("{:015}:{:05}:{}", crate::now_ms(), 0, self.id),
                ),
                ("__protVer".to_owned(), "1.0".to_owned()),
            ],
            ..Default::default()
        }
    }

    /// Publishes anything.
    pub async fn publish(
        &self,
        topic: &str,
        qos: QoS,
        payload: Bytes,
        properties: PublishProperties,
    ) {
        self.client
            .publish_with_properties(topic, qos, false, payload, properties)
            .await
            .expect("publish");
    }

    /// Sends a request with `properties` and waits up to `wait` for the reply carrying its
    /// correlation data; other messages received meanwhile are kept for [`RawClient::next`].
    pub async fn request_with(
        &mut self,
        payload: &[u8],
        properties: PublishProperties,
        wait: Duration,
    ) -> Option<Received> {
        self.request_on(REQUEST_TOPIC, payload, properties, wait)
            .await
    }

    /// Like [`RawClient::request_with`], published on `topic`.
    pub async fn request_on(
        &mut self,
        topic: &str,
        payload: &[u8],
        properties: PublishProperties,
        wait: Duration,
    ) -> Option<Received> {
        let correlation = properties.correlation_data.clone();
        self.publish(
            topic,
            QoS::AtLeastOnce,
            Bytes::copy_from_slice(payload),
            properties,
        )
        .await;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let received = tokio::time::timeout_at(deadline, self.incoming.recv())
                .await
                .ok()??;
            if received.properties.correlation_data == correlation {
                return Some(received);
            }
            self.pending.push_back(received);
        }
    }

    /// Sends a well-formed request and waits up to 10 s for its reply.
    pub async fn request(&mut self, payload: &[u8]) -> Option<Received> {
        let correlation = self.correlation();
        let properties = self.request_properties(correlation);
        self.request_with(payload, properties, Duration::from_secs(10))
            .await
    }

    /// The next message received within `wait`.
    pub async fn next(&mut self, wait: Duration) -> Option<Received> {
        if let Some(received) = self.pending.pop_front() {
            return Some(received);
        }
        tokio::time::timeout(wait, self.incoming.recv())
            .await
            .ok()
            .flatten()
    }
}

impl Drop for RawClient {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Encodes a request array of bulk strings.
pub fn resp(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", parts.len()).into_bytes();
    for part in parts {
        out.extend_from_slice(format!("${}\r\n", part.len()).as_bytes());
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    }
    out
}
