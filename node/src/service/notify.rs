//! KEYNOTIFY fan-out (§7): committed key events arrive from apply (through [`NotifySink`])
//! and the notifier publishes one message per registered client, in commit order, only while
//! this node serves as leader. A PUBACK with reason 0x10 (no subscriber) makes the leader drop
//! that client's registrations through the log.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use statestore_raft::{EventSink, TracedEvent};
use statestore_storage::keyspace::{Change, KeyEvent, Mutation};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::Instrument;

use crate::metrics::NodeMetrics;
use crate::mqtt::SessionEvent;
use crate::protocol::{NOTIFY_DELETE_PAYLOAD, notify_set_payload};
use crate::service::Service;
use crate::service::envelope::{CONTENT_TYPE, PROTOCOL_VERSION};
use crate::transport::{NOTIFY_TOPIC_PREFIX, OutboundKind, OutboundMessage, Outbox};

/// Hands committed events to the notifier while this node serves as leader.
pub struct NotifySink {
    events: mpsc::Sender<TracedEvent>,
    serving: Arc<AtomicBool>,
    metrics: Arc<NodeMetrics>,
}

impl NotifySink {
    /// A sink feeding `events`, gated by `serving`.
    pub fn new(
        events: mpsc::Sender<TracedEvent>,
        serving: Arc<AtomicBool>,
        metrics: Arc<NodeMetrics>,
    ) -> Self {
        NotifySink {
            events,
            serving,
            metrics,
        }
    }
}

impl EventSink for NotifySink {
    fn deliver(&self, events: Vec<TracedEvent>) {
        if !self.serving.load(Ordering::SeqCst) {
            return; // followers (and a leader still taking over) never notify
        }
        for event in events {
            let observers = event.event.observers.len() as u64;
            match self.events.try_send(event) {
                Ok(()) => self.metrics.store.notify_pending.inc(),
                Err(_) => {
                    self.metrics
                        .store
                        .notify_dropped_total
                        .with_label_values(&["queue_full"])
                        .inc_by(observers);
                }
            }
        }
    }
}

/// The longest topic MQTT can carry (a two-byte length).
pub const MAX_TOPIC_BYTES: usize = 65_535;

/// Length of [`notify_topic`] for `client_id` and `key`, without building it.
pub fn notify_topic_len(client_id: &str, key: &[u8]) -> usize {
    NOTIFY_TOPIC_PREFIX.len()
        + "/".len()
        + 2 * client_id.len()
        + "/command/notify/".len()
        + 2 * key.len()
}

/// Whether notifications to `client_id` about `key` fit in an MQTT topic: with 64 KiB keys
/// allowed, a KEYNOTIFY on a key longer than about 32 KiB cannot be served and is refused.
pub fn notify_topic_fits(client_id: &str, key: &[u8]) -> bool {
    notify_topic_len(client_id, key) <= MAX_TOPIC_BYTES
}

/// The notification topic of `client_id` and `key`: upper-case hex of both (§7).
pub fn notify_topic(client_id: &str, key: &[u8]) -> String {
    format!(
        "{NOTIFY_TOPIC_PREFIX}/{}/command/notify/{}",
        hex::encode_upper(client_id),
        hex::encode_upper(key)
    )
}

/// The messages announcing `event`, one per observer.
pub fn notifications(event: KeyEvent) -> Vec<OutboundMessage> {
    let payload = match &event.change {
        Change::Set(value) => Bytes::from(notify_set_payload(value)),
        Change::Delete => Bytes::from_static(NOTIFY_DELETE_PAYLOAD),
    };
    let version = event.version.to_string();
    event
        .observers
        .into_iter()
        .map(|client_id| OutboundMessage {
            topic: notify_topic(&client_id, &event.key),
            payload: payload.clone(),
            correlation_data: None,
            response_topic: None,
            message_expiry_secs: None,
            content_type: Some(CONTENT_TYPE),
            user_properties: vec![
                ("__ts".into(), version.clone()),
                ("__protVer".into(), PROTOCOL_VERSION.to_owned()),
            ],
            kind: OutboundKind::Notification { client_id },
        })
        .collect()
}

/// Publishes queued events in order. An event whose write was traced gets a `notify` span in
/// that write's trace.
pub async fn run_notifier<O: Outbox>(
    mut events: mpsc::Receiver<TracedEvent>,
    outbox: Arc<Service<O>>,
) {
    let metrics = outbox.metrics().clone();
    while let Some(TracedEvent { event, trace }) = events.recv().await {
        metrics.store.notify_pending.dec();
        let op = match event.change {
            Change::Set(_) => "set",
            Change::Delete => "delete",
        };
        let span = trace.map(|parent| {
            let span = tracing::debug_span!("notify", op, observers = event.observers.len());
            statestore_raft::trace::attach(&span, &[parent]);
            span
        });
        let publish = async {
            for message in notifications(event) {
                if outbox.outbox().publish(message).await {
                    metrics
                        .store
                        .notify_sent_total
                        .with_label_values(&[op])
                        .inc();
                } else {
                    metrics
                        .store
                        .notify_dropped_total
                        .with_label_values(&["publish_failed"])
                        .inc();
                }
            }
        };
        match span {
            Some(span) => publish.instrument(span).await,
            None => publish.await,
        }
    }
}

/// Drops the registrations of clients the broker says are gone. Repeated reports for the same
/// client within a few seconds are coalesced into one proposal.
pub async fn run_forgetter<O: Outbox>(
    mut events: mpsc::Receiver<SessionEvent>,
    service: Arc<Service<O>>,
    mut stop: watch::Receiver<bool>,
) {
    const COALESCE: Duration = Duration::from_secs(5);
    let mut recent: HashMap<String, Instant> = HashMap::new();
    loop {
        let event = tokio::select! {
            event = events.recv() => match event { Some(event) => event, None => return },
            _ = stop.changed() => return,
        };
        let SessionEvent::NoMatchingSubscribers { client_id } = event else {
            continue; // device-bound events go to the device push
        };
        let now = Instant::now();
        recent.retain(|_, at| now.duration_since(*at) < COALESCE);
        if recent.contains_key(&client_id) || !service.is_serving() {
            continue;
        }
        recent.insert(client_id.clone(), now);
        match service
            .propose_internal(Mutation::ForgetClient {
                client: client_id.clone(),
            })
            .await
        {
            Ok(_) => {
                service.metrics().store.clients_forgotten_total.inc();
                tracing::info!(
                    client_id,
                    "client has no subscription any more: dropped its KEYNOTIFY registrations"
                );
            }
            Err(err) => tracing::debug!(client_id, error = %err, "could not drop registrations"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use statestore_storage::hlc::Hlc;

    #[test]
    fn section_7_topic_is_upper_case_hex_of_client_and_key() {
        assert_eq!(
            notify_topic("client-id1", b"SOMEKEY"),
            "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/636C69656E742D696431/command/notify/534F4D454B4559"
        );
        assert!(notify_topic("c", &[0xab, 0xcd]).ends_with("/ABCD"));
    }

    #[test]
    fn notify_topic_length_is_computed_exactly_and_bounded_by_mqtt() {
        for (client, key_len) in [("c", 0usize), ("client-id1", 17), ("x", 32_000)] {
            let key = vec![b'k'; key_len];
            assert_eq!(
                notify_topic_len(client, &key),
                notify_topic(client, &key).len()
            );
        }
        // The longest key whose topic fits, for this client, and one byte more.
        let client = "client-1";
        let fixed = notify_topic_len(client, b"");
        let longest = (MAX_TOPIC_BYTES - fixed) / 2;
        assert!(notify_topic_fits(client, &vec![b'k'; longest]));
        assert!(!notify_topic_fits(client, &vec![b'k'; longest + 1]));
    }

    #[test]
    fn section_7_one_message_per_observer_with_version_and_exact_payload() {
        let event = KeyEvent {
            key: b"k".to_vec(),
            version: Hlc::new(5, 1, "n1"),
            change: Change::Set(b"v\r\n".to_vec()),
            observers: vec!["a".into(), "b".into()],
        };
        let messages = notifications(event);
        assert_eq!(messages.len(), 2);
        assert_eq!(
            &messages[0].payload[..],
            b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$3\r\nv\r\n\r\n"
        );
        assert_eq!(
            messages[1].kind,
            OutboundKind::Notification {
                client_id: "b".into()
            }
        );
        assert!(
            messages[0]
                .user_properties
                .contains(&("__ts".into(), "000000000000005:00001:n1".to_owned()))
        );
        assert_eq!(messages[0].content_type, Some("application/octet-stream"));
        let delete = KeyEvent {
            key: b"k".to_vec(),
            version: Hlc::new(6, 0, "n1"),
            change: Change::Delete,
            observers: vec!["a".into()],
        };
        assert_eq!(
            &notifications(delete)[0].payload[..],
            b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n"
        );
    }
}
