//! The queue between apply and the notifier, bounded in events and in bytes.
//!
//! Apply hands over one event per change of an observed key (its key and, for a SET, its
//! value), however many clients observe it. Writes of large values to observed keys can still
//! outrun the notifier (it publishes one message per observer), so the queue holds at most
//! [`QueueBounds::max_events`] events and [`QueueBounds::max_bytes`] bytes of keys and values
//! (one event is always admitted into an empty queue, so a value larger than the byte bound is
//! still notified). An event that does not fit is refused at once: apply never waits for the
//! notifier. The gauges follow every push and pop.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use prometheus::IntGauge;
use statestore_raft::TracedEvent;
use tokio::sync::mpsc;

/// How much the queue holds at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueBounds {
    /// Events queued.
    pub max_events: usize,
    /// Bytes of keys and values queued ([`statestore_storage::keyspace::KeyEvent::size_bytes`]).
    pub max_bytes: usize,
}

impl Default for QueueBounds {
    fn default() -> Self {
        QueueBounds {
            max_events: 65_536,
            max_bytes: 64 << 20,
        }
    }
}

/// The gauges the queue keeps current: events and bytes queued.
#[derive(Clone)]
pub struct QueueGauges {
    /// Events queued.
    pub pending: IntGauge,
    /// Bytes of keys and values queued.
    pub pending_bytes: IntGauge,
}

/// An event refused because the queue was full (by count or by bytes), or because the
/// notifier is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueFull;

struct Shared {
    bytes: AtomicUsize,
    max_bytes: usize,
    gauges: QueueGauges,
}

impl Shared {
    fn release(&self, size: usize) {
        self.bytes.fetch_sub(size, Ordering::SeqCst);
        self.gauges.pending.dec();
        self.gauges.pending_bytes.sub(gauge(size));
    }
}

fn gauge(size: usize) -> i64 {
    i64::try_from(size).unwrap_or(i64::MAX)
}

/// The apply side: never waits.
pub struct EventQueueSender {
    events: mpsc::Sender<(TracedEvent, usize)>,
    shared: Arc<Shared>,
}

/// The notifier's side.
pub struct EventQueueReceiver {
    events: mpsc::Receiver<(TracedEvent, usize)>,
    shared: Arc<Shared>,
}

/// A queue within `bounds` that keeps `gauges` current.
pub fn channel(bounds: QueueBounds, gauges: QueueGauges) -> (EventQueueSender, EventQueueReceiver) {
    let (tx, rx) = mpsc::channel(bounds.max_events.max(1));
    let shared = Arc::new(Shared {
        bytes: AtomicUsize::new(0),
        max_bytes: bounds.max_bytes,
        gauges,
    });
    (
        EventQueueSender {
            events: tx,
            shared: shared.clone(),
        },
        EventQueueReceiver { events: rx, shared },
    )
}

impl EventQueueSender {
    /// Queues `event` if it fits; otherwise refuses it at once.
    pub fn try_push(&self, event: TracedEvent) -> Result<(), QueueFull> {
        let size = event.event.size_bytes();
        let shared = &self.shared;
        let before = shared.bytes.fetch_add(size, Ordering::SeqCst);
        shared.gauges.pending.inc();
        shared.gauges.pending_bytes.add(gauge(size));
        if before != 0 && before.saturating_add(size) > shared.max_bytes {
            shared.release(size);
            return Err(QueueFull);
        }
        self.events.try_send((event, size)).map_err(|_| {
            shared.release(size);
            QueueFull
        })
    }
}

impl EventQueueReceiver {
    /// The next event, in the order they were pushed; `None` once every sender is gone.
    pub async fn recv(&mut self) -> Option<TracedEvent> {
        let (event, size) = self.events.recv().await?;
        self.shared.release(size);
        Some(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use statestore_storage::hlc::Hlc;
    use statestore_storage::keyspace::{Change, KeyEvent};

    fn gauges() -> QueueGauges {
        QueueGauges {
            pending: IntGauge::new("pending", "test").expect("gauge"),
            pending_bytes: IntGauge::new("pending_bytes", "test").expect("gauge"),
        }
    }

    fn event(key: &str, value_len: usize) -> TracedEvent {
        TracedEvent {
            event: KeyEvent {
                key: key.as_bytes().to_vec(),
                version: Hlc::new(1, 0, "n1"),
                change: Change::Set(vec![b'v'; value_len]),
            },
            trace: None,
        }
    }

    fn key_of(event: &TracedEvent) -> &[u8] {
        &event.event.key
    }

    #[tokio::test]
    async fn the_byte_bound_refuses_what_does_not_fit_and_pops_free_room() {
        let gauges = gauges();
        let (tx, mut rx) = channel(
            QueueBounds {
                max_events: 100,
                max_bytes: 100,
            },
            gauges.clone(),
        );
        assert_eq!(tx.try_push(event("a", 59)), Ok(())); // 60 bytes
        assert_eq!(tx.try_push(event("b", 39)), Ok(())); // 100: exactly full
        assert_eq!(tx.try_push(event("c", 0)), Err(QueueFull), "one byte more");
        assert_eq!((gauges.pending.get(), gauges.pending_bytes.get()), (2, 100));
        assert_eq!(rx.recv().await.as_ref().map(key_of), Some(&b"a"[..]));
        assert_eq!((gauges.pending.get(), gauges.pending_bytes.get()), (1, 40));
        assert_eq!(tx.try_push(event("d", 59)), Ok(()), "room again");
        assert_eq!(rx.recv().await.as_ref().map(key_of), Some(&b"b"[..]));
        assert_eq!(
            rx.recv().await.as_ref().map(key_of),
            Some(&b"d"[..]),
            "in order"
        );
        assert_eq!((gauges.pending.get(), gauges.pending_bytes.get()), (0, 0));
    }

    #[tokio::test]
    async fn an_event_larger_than_the_bound_enters_only_an_empty_queue() {
        let gauges = gauges();
        let (tx, mut rx) = channel(
            QueueBounds {
                max_events: 100,
                max_bytes: 10,
            },
            gauges.clone(),
        );
        assert_eq!(tx.try_push(event("big", 1_000)), Ok(()));
        assert_eq!(tx.try_push(event("x", 0)), Err(QueueFull));
        assert_eq!(gauges.pending_bytes.get(), 1_003);
        assert!(rx.recv().await.is_some());
        assert_eq!(tx.try_push(event("x", 0)), Ok(()));
    }

    #[tokio::test]
    async fn the_count_bound_refuses_the_event_past_it() {
        let gauges = gauges();
        let (tx, mut rx) = channel(
            QueueBounds {
                max_events: 2,
                max_bytes: 1 << 20,
            },
            gauges.clone(),
        );
        assert_eq!(tx.try_push(event("a", 0)), Ok(()));
        assert_eq!(tx.try_push(event("b", 0)), Ok(()));
        assert_eq!(tx.try_push(event("c", 0)), Err(QueueFull));
        assert_eq!((gauges.pending.get(), gauges.pending_bytes.get()), (2, 2));
        assert!(rx.recv().await.is_some());
        assert_eq!(tx.try_push(event("c", 0)), Ok(()));
        drop(rx);
        assert_eq!(tx.try_push(event("d", 0)), Err(QueueFull), "notifier gone");
    }
}
