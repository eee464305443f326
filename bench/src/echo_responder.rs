//! The broker floor: an MQTT client subscribed to the request topic that answers every request
//! at once, without storage, with `+OK\r\n`, `__stat`=200, `__protVer`=1.0 and the request's
//! correlation data on its response topic. No store behind the same broker can beat it. It runs
//! on its own thread and single-threaded runtime (like statestore's MQTT session) so it does
//! not share the load generator's scheduler; dropping it stops it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, Publish, PublishProperties};
use rumqttc::v5::{AsyncClient, Event};
use tokio::sync::watch;

use crate::mqtt_load::{self, Broker, REQUEST_TOPIC};

/// The reply payload.
pub const REPLY: &[u8] = b"+OK\r\n";

/// The name of its thread (what `/proc/self/task/*/stat` shows, so its CPU can be told apart
/// from the load generator's).
pub const THREAD_NAME: &str = "echo-responder";

/// A running echo responder; stopped on drop.
pub struct EchoResponder {
    stop: watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
    answered: Arc<AtomicU64>,
}

impl EchoResponder {
    /// Connects to `broker`, subscribes to the request topic, and returns once subscribed.
    pub fn start(broker: &Broker) -> anyhow::Result<EchoResponder> {
        let (stop, stop_rx) = watch::channel(false);
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
        let answered = Arc::new(AtomicU64::new(0));
        let broker = broker.clone();
        let counter = answered.clone();
        let thread = std::thread::Builder::new()
            .name(THREAD_NAME.to_owned())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(err) => {
                        let _ = ready_tx.send(Err(format!("runtime: {err}")));
                        return;
                    }
                };
                runtime.block_on(serve(broker, stop_rx, ready_tx, counter));
            })
            .context("spawn the echo responder thread")?;
        let responder = EchoResponder {
            stop,
            thread: Some(thread),
            answered,
        };
        match ready_rx.recv_timeout(Duration::from_secs(15)) {
            Ok(Ok(())) => Ok(responder),
            Ok(Err(err)) => bail!("echo responder: {err}"),
            Err(_) => Err(anyhow!("echo responder: not subscribed within 15 s")),
        }
    }

    /// Requests answered so far.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }
}

impl Drop for EchoResponder {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The reply to `request`, or `None` when it cannot be answered (no response topic or no
/// correlation data, spec §5.2).
pub fn reply_to(request: &Publish) -> Option<(String, PublishProperties)> {
    let props = request.properties.as_ref()?;
    let topic = props.response_topic.clone()?;
    let correlation = props.correlation_data.clone()?;
    Some((
        topic,
        PublishProperties {
            correlation_data: Some(correlation),
            content_type: Some("application/octet-stream".to_owned()),
            user_properties: vec![
                ("__stat".to_owned(), "200".to_owned()),
                ("__protVer".to_owned(), "1.0".to_owned()),
            ],
            ..Default::default()
        },
    ))
}

async fn serve(
    broker: Broker,
    mut stop: watch::Receiver<bool>,
    ready: mpsc::Sender<Result<(), String>>,
    answered: Arc<AtomicU64>,
) {
    let id = mqtt_load::unique_id("bench-echo");
    let (client, mut eventloop) = AsyncClient::new(mqtt_load::options(&broker, &id, 1024), 4096);
    if let Err(err) = client.try_subscribe(REQUEST_TOPIC, QoS::AtLeastOnce) {
        let _ = ready.send(Err(format!("subscribe: {err}")));
        return;
    }
    let mut ready = Some(ready);
    let mut connections = 0u64;
    let reply = Bytes::from_static(REPLY);
    loop {
        let event = tokio::select! {
            event = eventloop.poll() => event,
            _ = stop.changed() => break,
        };
        match event {
            Ok(Event::Incoming(Packet::Publish(request))) => {
                if let Some((topic, properties)) = reply_to(&request) {
                    answered.fetch_add(1, Ordering::Relaxed);
                    // publishing awaits room in the request channel that this loop drains:
                    // hand it to a task instead of awaiting here
                    let client = client.clone();
                    let payload = reply.clone();
                    tokio::spawn(async move {
                        let _ = client
                            .publish_with_properties(
                                topic,
                                QoS::AtLeastOnce,
                                false,
                                payload,
                                properties,
                            )
                            .await;
                    });
                }
            }
            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                connections += 1;
                if connections > 1 {
                    let _ = client.try_subscribe(REQUEST_TOPIC, QoS::AtLeastOnce);
                }
            }
            Ok(Event::Incoming(Packet::SubAck(ack))) => {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(crate::mqtt_load::suback_result(&ack));
                }
            }
            Ok(_) => {}
            Err(err) => {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(Err(err.to_string()));
                    return;
                }
                eprintln!("warning: echo responder connection: {err}; reconnecting");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let _ = client.try_disconnect();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_carry_status_and_correlation() {
        let mut request = Publish::new(REQUEST_TOPIC, QoS::AtLeastOnce, "x", None);
        assert!(reply_to(&request).is_none());
        request.properties = Some(PublishProperties {
            response_topic: Some("clients/a/resp".to_owned()),
            ..Default::default()
        });
        assert!(reply_to(&request).is_none(), "no correlation data");
        request.properties = Some(PublishProperties {
            response_topic: Some("clients/a/resp".to_owned()),
            correlation_data: Some(Bytes::from_static(&[1, 2, 3])),
            ..Default::default()
        });
        let (topic, props) = reply_to(&request).expect("answerable");
        assert_eq!(topic, "clients/a/resp");
        assert_eq!(props.correlation_data.as_deref(), Some(&[1u8, 2, 3][..]));
        assert!(
            props
                .user_properties
                .contains(&("__stat".to_owned(), "200".to_owned()))
        );
    }
}
