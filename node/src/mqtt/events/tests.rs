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
