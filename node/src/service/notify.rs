//! KEYNOTIFY fan-out (§7): committed key events arrive from apply (through [`NotifySink`], one
//! event per change of an observed key, into a queue bounded in events and bytes) and the
//! notifier publishes one message per registered client, in commit order, only while this node
//! serves as leader. A PUBACK with reason 0x10 (no subscriber) makes the leader drop that
//! client's registrations through the log.
//!
//! # Who is notified
//!
//! Apply does not list a key's observers (a key may have up to `limits.max_observers_per_key`
//! of them, and apply runs on every replica for every write). The notifier reads them itself
//! from the committed state, [`OBSERVERS_PAGE`] at a time and off the async workers (the read
//! may wait for the disk), after the change was committed: so it sees every registration made
//! before the change and not yet stopped, and possibly some made after it. Each registration
//! stores the store's highest version when it was made (its floor); a change of version `v` is
//! sent only to registrations whose floor is below `v`, which are exactly those made before
//! the change (§7: changes before KEYNOTIFY are not notified).
//!
//! A registration stopped (KEYNOTIFY STOP, or dropped after PUBACK 0x10) after a change but
//! before the notifier reads it is not told of that change. Like a notification lost in a
//! failover, that is within "at most once": the client asked to stop, or is gone.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use statestore_raft::{EventSink, TracedEvent};
use statestore_storage::engine::OrderedRead;
use statestore_storage::keyspace::read::{self, Observer};
use statestore_storage::keyspace::{Change, KeyEvent};
use statestore_storage::machine::Mutation;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::Instrument;

use crate::metrics::NodeMetrics;
use crate::mqtt::SessionEvent;
use crate::service::Service;
use crate::service::envelope::{CONTENT_TYPE, PROTOCOL_VERSION};
use crate::service::notify_queue::{EventQueueReceiver, EventQueueSender};
use crate::transport::{NOTIFY_TOPIC_PREFIX, OutboundKind, OutboundMessage, Outbox};
use statestore_protocol::{NOTIFY_DELETE_PAYLOAD, notify_set_payload};

/// Registrations the notifier reads at a time.
pub const OBSERVERS_PAGE: usize = 256;

/// Hands committed events to the notifier while this node serves as leader.
pub struct NotifySink {
    events: EventQueueSender,
    serving: Arc<AtomicBool>,
    metrics: Arc<NodeMetrics>,
}

impl NotifySink {
    /// A sink feeding `events`, gated by `serving`.
    pub fn new(
        events: EventQueueSender,
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
            // Its observers are not known yet (the notifier reads them): one event, one drop.
            if self.events.try_push(event).is_err() {
                self.metrics
                    .store
                    .notify_dropped_total
                    .with_label_values(&["queue_full"])
                    .inc();
            }
        }
    }
}

/// The longest topic MQTT can carry (a two-byte length).
pub const MAX_TOPIC_BYTES: usize = statestore_vocab::spec::MAX_MQTT_TOPIC_BYTES;

/// Length of [`notify_topic`] for `client_id` and `key`, without building it.
pub fn notify_topic_len(client_id: &str, key: &[u8]) -> usize {
    NOTIFY_TOPIC_PREFIX.len()
        + "/".len()
        + 2 * client_id.len()
        + "/command/notify/".len()
        + 2 * key.len()
}

/// Whether notifications to `client_id` about `key` fit in an MQTT topic: with keys of up to
/// 60 KiB allowed (65,526 at most), a KEYNOTIFY on a key longer than about 32 KiB cannot be
/// served and is refused.
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

/// What every notification of one change carries: its payload and version.
pub struct Announcement {
    payload: Bytes,
    version: String,
}

impl Announcement {
    /// The payload and version of `event`'s notifications.
    pub fn of(event: &KeyEvent) -> Self {
        let payload = match &event.change {
            Change::Set(value) => Bytes::from(notify_set_payload(value)),
            Change::Delete => Bytes::from_static(NOTIFY_DELETE_PAYLOAD),
        };
        Announcement {
            payload,
            version: event.version.to_string(),
        }
    }

    /// The message telling `client_id` of the change of `key`.
    pub fn to(&self, client_id: &str, key: &[u8]) -> OutboundMessage {
        OutboundMessage {
            topic: notify_topic(client_id, key),
            payload: self.payload.clone(),
            correlation_data: None,
            response_topic: None,
            message_expiry_secs: None,
            content_type: Some(CONTENT_TYPE),
            user_properties: vec![
                ("__ts".into(), self.version.clone()),
                ("__protVer".into(), PROTOCOL_VERSION.to_owned()),
            ],
            kind: OutboundKind::Notification {
                client_id: client_id.to_owned(),
            },
        }
    }
}

/// Reads one page of `key`'s registrations from `view`, on a blocking thread (a read that
/// misses the memtable may wait for the disk).
async fn observers_page<V>(
    view: &V,
    key: &[u8],
    after: Option<String>,
) -> Result<Vec<Observer>, String>
where
    V: OrderedRead + Clone + Send + Sync + 'static,
{
    let view = view.clone();
    let key = key.to_vec();
    tokio::task::spawn_blocking(move || {
        read::observers_page(&view, &key, after.as_deref(), OBSERVERS_PAGE)
            .map_err(|err| err.to_string())
    })
    .await
    .map_err(|err| err.to_string())?
}

/// Publishes `event` to every client registered for its key before the change, reading the
/// registrations page by page from `view`; returns how many were addressed.
async fn publish_event<V, O>(event: &KeyEvent, view: &V, outbox: &O, metrics: &NodeMetrics) -> u64
where
    V: OrderedRead + Clone + Send + Sync + 'static,
    O: Outbox,
{
    let op = match event.change {
        Change::Set(_) => "set",
        Change::Delete => "delete",
    };
    let announcement = Announcement::of(event);
    let mut after = None;
    let mut addressed = 0u64;
    loop {
        let page = match observers_page(view, &event.key, after.take()).await {
            Ok(page) => page,
            Err(error) => {
                tracing::warn!(%error, "reading a key's observers failed: its notification is dropped");
                metrics
                    .store
                    .notify_dropped_total
                    .with_label_values(&["read_failed"])
                    .inc();
                return addressed;
            }
        };
        let last_page = page.len() < OBSERVERS_PAGE;
        after = page.last().map(|observer| observer.client.clone());
        for observer in page {
            if !observer.is_notified_of(&event.version) {
                continue; // registered after the change
            }
            addressed += 1;
            let (result, reason) = if outbox
                .publish(announcement.to(&observer.client, &event.key))
                .await
            {
                (&metrics.store.notify_sent_total, op)
            } else {
                (&metrics.store.notify_dropped_total, "publish_failed")
            };
            result.with_label_values(&[reason]).inc();
        }
        if last_page {
            return addressed;
        }
    }
}

/// Publishes queued events in order, reading each one's observers from `view` (the committed
/// state). An event whose write was traced gets a `notify` span in that write's trace.
pub async fn run_notifier<V, O>(
    mut events: EventQueueReceiver,
    view: V,
    outbox: Arc<O>,
    metrics: Arc<NodeMetrics>,
) where
    V: OrderedRead + Clone + Send + Sync + 'static,
    O: Outbox,
{
    while let Some(TracedEvent { event, trace }) = events.recv().await {
        let span = trace.map(|parent| {
            let op = match event.change {
                Change::Set(_) => "set",
                Change::Delete => "delete",
            };
            let span = tracing::debug_span!("notify", op, observers = tracing::field::Empty);
            statestore_raft::trace::attach(&span, &[parent]);
            span
        });
        let publish = publish_event(&event, &view, &*outbox, &metrics);
        let addressed = match &span {
            Some(span) => publish.instrument(span.clone()).await,
            None => publish.await,
        };
        if let Some(span) = &span {
            span.record("observers", addressed);
        }
        metrics
            .store
            .notify_observers_per_event
            .observe(addressed as f64);
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
mod tests;
