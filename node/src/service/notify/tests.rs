use super::*;
use crate::service::notify_queue::{self, QueueBounds, QueueGauges};
use statestore_storage::engine::Overlay;
use statestore_storage::machine::{Machine, Proposal};
use statestore_vocab::hlc::Hlc;
use statestore_vocab::keyspace::SetCondition;
use std::collections::BTreeMap;

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
fn section_7_a_notification_carries_the_version_and_the_exact_payload() {
    let event = KeyEvent {
        key: b"k".to_vec(),
        version: Hlc::new(5, 1, "n1"),
        change: Change::Set(b"v\r\n".to_vec()),
    };
    let announcement = Announcement::of(&event);
    let message = announcement.to("b", &event.key);
    assert_eq!(
        &message.payload[..],
        b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$3\r\nv\r\n\r\n"
    );
    assert_eq!(message.topic, notify_topic("b", b"k"));
    assert_eq!(
        message.kind,
        OutboundKind::Notification {
            client_id: "b".into()
        }
    );
    assert!(
        message
            .user_properties
            .contains(&("__ts".into(), "000000000000005:00001:n1".to_owned()))
    );
    assert_eq!(message.content_type, Some("application/octet-stream"));
    let delete = KeyEvent {
        key: b"k".to_vec(),
        version: Hlc::new(6, 0, "n1"),
        change: Change::Delete,
    };
    assert_eq!(
        &Announcement::of(&delete).to("a", b"k").payload[..],
        b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n"
    );
}

/// An outbox that records what it is given (and accepts it, or refuses everything).
struct Recorder {
    sent: std::sync::Mutex<Vec<OutboundMessage>>,
    accept: bool,
}

impl Recorder {
    fn new(accept: bool) -> Arc<Self> {
        Arc::new(Recorder {
            sent: std::sync::Mutex::new(Vec::new()),
            accept,
        })
    }

    fn clients(&self) -> Vec<String> {
        self.sent
            .lock()
            .expect("lock")
            .iter()
            .map(|message| match &message.kind {
                OutboundKind::Notification { client_id } => client_id.clone(),
                other => panic!("not a notification: {other:?}"),
            })
            .collect()
    }
}

impl Outbox for Recorder {
    fn publish(&self, message: OutboundMessage) -> impl std::future::Future<Output = bool> + Send {
        self.sent.lock().expect("lock").push(message);
        std::future::ready(self.accept)
    }
}

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

/// Applies each mutation as its own committed entry; returns the events.
fn apply(map: &mut Map, mutations: impl IntoIterator<Item = Mutation>) -> Vec<KeyEvent> {
    let mut events = Vec::new();
    for mutation in mutations {
        let stamp = read::meta(&*map)
            .expect("meta")
            .max_version
            .map_or(Hlc::new(1_000, 0, "n1"), |v| v.successor("n1"));
        let proposal = Proposal {
            stamp,
            wall_ms: 1_000,
            request: None,
            token_seed: None,
            mutation,
        };
        let mut txn = Overlay::new(&*map);
        let mut machine = Machine::open(&mut txn).expect("open");
        events.extend(machine.apply(&proposal).expect("apply").events);
        machine.finish();
        for (key, write) in txn.into_writes() {
            match write {
                Some(value) => map.insert(key, value),
                None => map.remove(&key),
            };
        }
    }
    events
}

fn observe(client: &str) -> Mutation {
    Mutation::Observe {
        client: client.to_owned(),
        key: b"k".to_vec(),
    }
}

fn set(value: &[u8]) -> Mutation {
    Mutation::Set {
        key: b"k".to_vec(),
        value: value.to_vec(),
        condition: SetCondition::Always,
        expire_after_ms: None,
        fencing_token: None,
    }
}

fn queue(events: Vec<KeyEvent>, metrics: &NodeMetrics) -> EventQueueReceiver {
    let (tx, rx) = notify_queue::channel(
        QueueBounds::default(),
        QueueGauges {
            pending: metrics.store.notify_pending.clone(),
            pending_bytes: metrics.store.notify_pending_bytes.clone(),
        },
    );
    for event in events {
        tx.try_push(TracedEvent { event, trace: None })
            .expect("room");
    }
    queue_closed_after(tx, rx)
}

/// The receiver of a queue whose sender is gone, so the notifier ends when it is drained.
fn queue_closed_after(tx: EventQueueSender, rx: EventQueueReceiver) -> EventQueueReceiver {
    drop(tx);
    rx
}

#[tokio::test]
async fn section_7_the_notifier_pages_through_observers_registered_before_the_change() {
    let mut map = Map::new();
    let clients: Vec<String> = (0..600).map(|i| format!("c{i:03}")).collect();
    apply(&mut map, clients.iter().map(|c| observe(c)));
    let events = apply(&mut map, [set(b"v1")]);
    assert_eq!(events.len(), 1, "apply emits one event for 600 observers");
    // After the change and before the notifier reads: one registers (in the middle of the
    // second page), one stops.
    apply(
        &mut map,
        [
            observe("c300-late"),
            Mutation::Unobserve {
                client: "c001".into(),
                key: b"k".to_vec(),
            },
        ],
    );
    let metrics = Arc::new(NodeMetrics::new().expect("metrics"));
    let outbox = Recorder::new(true);
    run_notifier(
        queue(events, &metrics),
        map,
        outbox.clone(),
        metrics.clone(),
    )
    .await;

    let expected: Vec<String> = clients.into_iter().filter(|c| c != "c001").collect();
    assert_eq!(
        outbox.clients(),
        expected,
        "every page, in id order, without the late registration or the stopped one"
    );
    let store = &metrics.store;
    assert_eq!(
        store.notify_sent_total.with_label_values(&["set"]).get(),
        599
    );
    assert_eq!(store.notify_observers_per_event.get_sample_count(), 1);
    assert_eq!(store.notify_observers_per_event.get_sample_sum(), 599.0);
    assert_eq!(
        (store.notify_pending.get(), store.notify_pending_bytes.get()),
        (0, 0)
    );
}

#[tokio::test]
async fn section_7_events_are_published_in_commit_order_and_refusals_counted() {
    let mut map = Map::new();
    apply(&mut map, [observe("a"), observe("b")]);
    let events = apply(
        &mut map,
        [
            set(b"1"),
            Mutation::Del {
                key: b"k".to_vec(),
                fencing_token: None,
            },
        ],
    );
    let metrics = Arc::new(NodeMetrics::new().expect("metrics"));
    let outbox = Recorder::new(false);
    run_notifier(
        queue(events, &metrics),
        map,
        outbox.clone(),
        metrics.clone(),
    )
    .await;
    assert_eq!(outbox.clients(), vec!["a", "b", "a", "b"]);
    let deletes: Vec<bool> = outbox
        .sent
        .lock()
        .expect("lock")
        .iter()
        .map(|m| &m.payload[..] == NOTIFY_DELETE_PAYLOAD)
        .collect();
    assert_eq!(
        deletes,
        vec![false, false, true, true],
        "the DELETE after the SET"
    );
    let dropped = metrics
        .store
        .notify_dropped_total
        .with_label_values(&["publish_failed"])
        .get();
    assert_eq!(dropped, 4, "each refused publish is counted");
}

#[test]
fn the_sink_drops_and_counts_what_the_full_queue_refuses_and_ignores_followers() {
    let metrics = Arc::new(NodeMetrics::new().expect("metrics"));
    let (tx, _rx) = notify_queue::channel(
        QueueBounds {
            max_events: 2,
            max_bytes: 1 << 20,
        },
        QueueGauges {
            pending: metrics.store.notify_pending.clone(),
            pending_bytes: metrics.store.notify_pending_bytes.clone(),
        },
    );
    let serving = Arc::new(AtomicBool::new(false));
    let sink = NotifySink::new(tx, serving.clone(), metrics.clone());
    let event = |value: &[u8]| TracedEvent {
        event: KeyEvent {
            key: b"k".to_vec(),
            version: Hlc::new(1, 0, "n1"),
            change: Change::Set(value.to_vec()),
        },
        trace: None,
    };
    sink.deliver(vec![event(b"1"), event(b"2")]);
    assert_eq!(
        metrics.store.notify_pending.get(),
        0,
        "a follower queues nothing"
    );
    serving.store(true, Ordering::SeqCst);
    sink.deliver(vec![event(b"1"), event(b"2"), event(b"3"), event(b"4")]);
    assert_eq!(
        (
            metrics.store.notify_pending.get(),
            metrics.store.notify_pending_bytes.get()
        ),
        (2, 4)
    );
    assert_eq!(
        metrics
            .store
            .notify_dropped_total
            .with_label_values(&["queue_full"])
            .get(),
        2,
        "one per event refused"
    );
}
