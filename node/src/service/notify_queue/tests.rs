use super::*;
use statestore_storage::keyspace::{Change, KeyEvent};
use statestore_vocab::hlc::Hlc;

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
