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
mod tests {
    use super::*;
    use prometheus::Opts;

    fn counter() -> IntCounterVec {
        IntCounterVec::new(Opts::new("dropped", "test"), &["kind"]).expect("metric")
    }

    fn gone(client: &str) -> SessionEvent {
        SessionEvent::NoMatchingSubscribers {
            client_id: client.to_owned(),
        }
    }

    fn offline(device: &str) -> SessionEvent {
        SessionEvent::DeviceOffline {
            device: device.to_owned(),
            token: "m80000000000000000000000000000001".to_owned(),
        }
    }

    #[test]
    fn each_consumer_gets_its_reports_and_a_full_queue_drops_and_counts_only_its_own() {
        let dropped = counter();
        let (events, mut queues) = SessionEvents::new(2, dropped.clone());
        assert!(events.offer(gone("a")));
        assert!(events.offer(gone("b")));
        assert!(!events.offer(gone("c")), "the forget queue holds 2");
        assert!(
            events.offer(offline("d1")),
            "a full forget queue does not block device reports"
        );
        assert!(events.offer(SessionEvent::FeedbackUnheard {
            token: "f0000000000000001".to_owned()
        }));
        assert!(!events.offer(offline("d2")));
        assert_eq!(dropped.with_label_values(&["client_gone"]).get(), 1);
        assert_eq!(dropped.with_label_values(&["device_offline"]).get(), 1);
        assert_eq!(dropped.with_label_values(&["feedback_unheard"]).get(), 0);
        assert_eq!(queues.forget.try_recv().ok(), Some(gone("a")));
        assert_eq!(queues.forget.try_recv().ok(), Some(gone("b")));
        assert!(queues.forget.try_recv().is_err(), "c was dropped");
        assert_eq!(queues.device.try_recv().ok(), Some(offline("d1")));
        assert!(events.offer(gone("e")), "room again once consumed");
    }

    #[test]
    fn a_gone_consumer_is_a_counted_drop_not_a_panic() {
        let dropped = counter();
        let (events, queues) = SessionEvents::new(4, dropped.clone());
        drop(queues);
        assert!(!events.offer(offline("d")));
        assert_eq!(dropped.with_label_values(&["device_offline"]).get(), 1);
    }
}
