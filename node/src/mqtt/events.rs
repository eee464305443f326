//! Where the session's reports go: one bounded queue per consumer (departed KEYNOTIFY clients
//! to the forgetter; offline devices and unheard feedback batches to the device push).
//!
//! The session never waits on a consumer: a report that finds its queue full is dropped and
//! counted in `statestore_mqtt_session_events_dropped_total{kind}`. Nothing is lost for good by
//! that: a departed client is reported again by its next notification, an offline device's
//! delivery stays locked until its lock expires and is then delivered again, and an unheard
//! feedback batch is redelivered when its lock expires.

use prometheus::IntCounterVec;
use tokio::sync::mpsc;

use super::SessionEvent;

/// Reports queued per consumer before new ones are dropped.
pub const SESSION_EVENT_QUEUE: usize = 10_000;

/// The sending side, held by the session.
#[derive(Clone)]
pub struct SessionEvents {
    forget: mpsc::Sender<SessionEvent>,
    device: mpsc::Sender<SessionEvent>,
    dropped: IntCounterVec,
}

/// The receiving sides, one per consumer.
pub struct SessionEventQueues {
    /// Departed KEYNOTIFY clients (`NoMatchingSubscribers`).
    pub forget: mpsc::Receiver<SessionEvent>,
    /// Device-bound reports (`DeviceOffline`, `FeedbackUnheard`).
    pub device: mpsc::Receiver<SessionEvent>,
}

/// The `kind` label of `event`.
fn kind(event: &SessionEvent) -> &'static str {
    match event {
        SessionEvent::NoMatchingSubscribers { .. } => "client_gone",
        SessionEvent::DeviceOffline { .. } => "device_offline",
        SessionEvent::FeedbackUnheard { .. } => "feedback_unheard",
    }
}

impl SessionEvents {
    /// Queues of `capacity` reports each; drops are counted in `dropped` (label `kind`).
    pub fn new(capacity: usize, dropped: IntCounterVec) -> (SessionEvents, SessionEventQueues) {
        let (forget, forget_rx) = mpsc::channel(capacity.max(1));
        let (device, device_rx) = mpsc::channel(capacity.max(1));
        for label in ["client_gone", "device_offline", "feedback_unheard"] {
            dropped.with_label_values(&[label]);
        }
        (
            SessionEvents {
                forget,
                device,
                dropped,
            },
            SessionEventQueues {
                forget: forget_rx,
                device: device_rx,
            },
        )
    }

    /// Hands `event` to its consumer without waiting; false (and counted) if its queue is full
    /// or the consumer is gone.
    pub fn offer(&self, event: SessionEvent) -> bool {
        let label = kind(&event);
        let queue = match event {
            SessionEvent::NoMatchingSubscribers { .. } => &self.forget,
            SessionEvent::DeviceOffline { .. } | SessionEvent::FeedbackUnheard { .. } => {
                &self.device
            }
        };
        if queue.try_send(event).is_ok() {
            return true;
        }
        self.dropped.with_label_values(&[label]).inc();
        false
    }
}

#[cfg(test)]
mod tests;
