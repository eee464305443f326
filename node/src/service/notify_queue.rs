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
mod tests;
