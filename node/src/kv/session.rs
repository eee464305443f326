//! `statestore kv`'s MQTT 5 connection: one rumqttc client that sends requests with the
//! envelope of spec §1 (response topic, correlation data, Message Expiry, `__srcId`, `__ts`,
//! `__protVer`) and hands back replies and notifications.
//!
//! A request without a reply is sent again with the same correlation data every
//! [`RESEND_EVERY`] until the deadline: the store remembers replies (§6), so a retried write
//! takes effect once, and a retry reaches the next leader after a failover. The correlation
//! data of each request is 16 random bytes ([`new_correlation`]): whoever could guess it could
//! claim this client's identity and correlation data for a request of its own.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PublishProperties};
use rumqttc::v5::{AsyncClient, ConnectionError, Event, MqttOptions};
use rumqttc::{TlsConfiguration, Transport};
use statestore_vocab::hlc::{Hlc, SystemClock, WallClock};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::error::NodeError;
use crate::transport::REQUEST_TOPIC;

/// The correlation data of a new request: 16 bytes from the thread's CSPRNG (kept across the
/// request's own resends).
pub fn new_correlation() -> Bytes {
    Bytes::copy_from_slice(&rand::random::<[u8; 16]>())
}

/// A request without a reply is published again this often (same correlation data).
pub const RESEND_EVERY: Duration = Duration::from_secs(2);
/// Message Expiry of a request, seconds.
const REQUEST_EXPIRY_SECS: u32 = 10;

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct Target {
    /// Broker host.
    pub host: String,
    /// Broker port.
    pub port: u16,
    /// MQTT username and password.
    pub credentials: Option<(String, String)>,
    /// MQTT client id.
    pub client_id: String,
    /// TLS (`mqtts`), when asked for: the broker's certificate is checked for `host`.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

/// What the event loop hands over.
enum Incoming {
    Publish {
        topic: String,
        payload: Bytes,
        correlation: Option<Bytes>,
    },
    Subscribed(bool),
    Lost(String),
}

/// A connected client.
pub struct Session {
    client: AsyncClient,
    client_id: String,
    incoming: mpsc::Receiver<Incoming>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn client_error(what: &str, err: impl std::fmt::Display) -> NodeError {
    NodeError::Client(format!("{what}: {err}"))
}

impl Session {
    /// Connects (waiting up to `within` for the CONNACK) and subscribes to its response topic.
    pub async fn connect(target: &Target, within: Duration) -> Result<Session, NodeError> {
        let mut options = MqttOptions::new(&target.client_id, &target.host, target.port);
        options.set_keep_alive(Duration::from_secs(30));
        options.set_clean_start(true);
        options.set_max_packet_size(Some(16 << 20));
        if let Some((username, password)) = &target.credentials {
            options.set_credentials(username, password);
        }
        if let Some(tls) = &target.tls {
            options.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(
                tls.clone(),
            )));
        }
        let mut network = options.network_options();
        network.set_tcp_nodelay(true);
        network.set_connection_timeout(within.as_secs().max(1));
        options.set_network_options(network);
        let (client, mut eventloop) = AsyncClient::new(options, 64);
        let (tx, incoming) = mpsc::channel(1024);
        let (connected_tx, connected) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut connected_tx = Some(connected_tx);
            loop {
                let incoming = match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::ConnAck(_))) => {
                        if let Some(tx) = connected_tx.take() {
                            let _ = tx.send(Ok(()));
                        }
                        continue;
                    }
                    Ok(Event::Incoming(Packet::Publish(p))) => Incoming::Publish {
                        topic: String::from_utf8_lossy(&p.topic).into_owned(),
                        payload: p.payload,
                        correlation: p.properties.and_then(|props| props.correlation_data),
                    },
                    Ok(Event::Incoming(Packet::SubAck(ack))) => {
                        Incoming::Subscribed(ack.return_codes.iter().all(|code| {
                            matches!(
                                code,
                                rumqttc::v5::mqttbytes::v5::SubscribeReasonCode::Success(_)
                            )
                        }))
                    }
                    Ok(_) => continue,
                    Err(err) => {
                        let message = describe(&err);
                        if let Some(tx) = connected_tx.take() {
                            let _ = tx.send(Err(message));
                            return;
                        }
                        Incoming::Lost(message)
                    }
                };
                let lost = matches!(incoming, Incoming::Lost(_));
                if tx.send(incoming).await.is_err() || lost {
                    return;
                }
            }
        });
        match tokio::time::timeout(within, connected).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(message))) => return Err(NodeError::Client(message)),
            Ok(Err(_)) => return Err(NodeError::Client("MQTT event loop stopped".into())),
            Err(_) => {
                return Err(NodeError::Client(format!(
                    "no CONNACK from {}:{} within {within:?}",
                    target.host, target.port
                )));
            }
        }
        let mut session = Session {
            client,
            client_id: target.client_id.clone(),
            incoming,
            task,
        };
        session.subscribe(&session.response_topic(), within).await?;
        Ok(session)
    }

    /// This client's id.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    fn response_topic(&self) -> String {
        format!("clients/{}/statestore/response", self.client_id)
    }

    /// Subscribes to `filter` and waits for a successful SUBACK.
    pub async fn subscribe(&mut self, filter: &str, within: Duration) -> Result<(), NodeError> {
        self.client
            .subscribe(filter, QoS::AtLeastOnce)
            .await
            .map_err(|e| client_error("subscribe", e))?;
        let deadline = Instant::now() + within;
        loop {
            match self.next_until(deadline).await? {
                Incoming::Subscribed(true) => return Ok(()),
                Incoming::Subscribed(false) => {
                    return Err(NodeError::Client(format!(
                        "the broker refused the subscription to {filter} (not authorized?)"
                    )));
                }
                _ => continue,
            }
        }
    }

    async fn next_until(&mut self, deadline: Instant) -> Result<Incoming, NodeError> {
        match tokio::time::timeout_at(deadline, self.incoming.recv()).await {
            Ok(Some(Incoming::Lost(message))) => Err(NodeError::Client(message)),
            Ok(Some(incoming)) => Ok(incoming),
            Ok(None) => Err(NodeError::Client("connection closed".into())),
            Err(_) => Err(NodeError::Client("timed out".into())),
        }
    }

    /// Sends `payload` to the state store and waits up to `within` for its reply, resending
    /// it every [`RESEND_EVERY`]. Other messages received meanwhile are dropped (`watch`
    /// registers its keys before it reads notifications).
    pub async fn request(
        &mut self,
        payload: &[u8],
        extra_user_properties: &[(&str, &str)],
        within: Duration,
    ) -> Result<Bytes, NodeError> {
        let correlation = new_correlation();
        let deadline = Instant::now() + within;
        loop {
            self.publish(payload, correlation.clone(), extra_user_properties)
                .await?;
            let resend_at = (Instant::now() + RESEND_EVERY).min(deadline);
            loop {
                match tokio::time::timeout_at(resend_at, self.incoming.recv()).await {
                    Err(_) if Instant::now() >= deadline => {
                        return Err(NodeError::Client(format!(
                            "no reply from the state store within {within:?} (is a statestore node connected to this broker?)"
                        )));
                    }
                    Err(_) => break,
                    Ok(None) => return Err(NodeError::Client("connection closed".into())),
                    Ok(Some(Incoming::Lost(message))) => return Err(NodeError::Client(message)),
                    Ok(Some(Incoming::Publish {
                        payload,
                        correlation: Some(c),
                        ..
                    })) if c == correlation => return Ok(payload),
                    Ok(Some(Incoming::Publish { .. } | Incoming::Subscribed(_))) => {}
                }
            }
        }
    }

    async fn publish(
        &self,
        payload: &[u8],
        correlation: Bytes,
        extra_user_properties: &[(&str, &str)],
    ) -> Result<(), NodeError> {
        let now_ms = SystemClock.now_ms();
        let properties = PublishProperties {
            response_topic: Some(self.response_topic()),
            correlation_data: Some(correlation),
            message_expiry_interval: Some(REQUEST_EXPIRY_SECS),
            content_type: Some("application/octet-stream".to_owned()),
            user_properties: vec![
                ("__srcId".to_owned(), self.client_id.clone()),
                (
                    "__ts".to_owned(),
                    Hlc::new(now_ms, 0, &self.client_id).to_string(),
                ),
                ("__protVer".to_owned(), "1.0".to_owned()),
            ]
            .into_iter()
            .chain(
                extra_user_properties
                    .iter()
                    .map(|(name, value)| ((*name).to_owned(), (*value).to_owned())),
            )
            .collect(),
            ..Default::default()
        };
        self.client
            .publish_with_properties(
                REQUEST_TOPIC,
                QoS::AtLeastOnce,
                false,
                Bytes::copy_from_slice(payload),
                properties,
            )
            .await
            .map_err(|e| client_error("publish", e))
    }

    /// The next message that is not a reply (a notification), or an error if the connection
    /// is lost.
    pub async fn next_message(&mut self) -> Result<(String, Bytes), NodeError> {
        loop {
            match self.incoming.recv().await {
                Some(Incoming::Publish { topic, payload, .. }) => return Ok((topic, payload)),
                Some(Incoming::Lost(message)) => return Err(NodeError::Client(message)),
                Some(Incoming::Subscribed(_)) => {}
                None => return Err(NodeError::Client("connection closed".into())),
            }
        }
    }
}

/// A connection error as a user reads it.
fn describe(err: &ConnectionError) -> String {
    match err {
        ConnectionError::ConnectionRefused(code) => {
            format!("the broker refused the connection: {code:?}")
        }
        other => format!("MQTT connection: {other}"),
    }
}

#[cfg(test)]
mod tests;
