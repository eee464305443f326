//! Registrations of clients that are gone are dropped (protocol §7): when the broker answers a
//! notification with PUBACK 0x10 (no matching subscribers), the leader removes that client's
//! registrations through the log.

use std::time::Duration;

use statestore_tests::broker::Broker;
use statestore_tests::node::{NodeSpec, StatestoreNode};
use statestore_tests::raw::{RawClient, resp};
use statestore_tests::wait_for;

/// A client registers for a key but never subscribes to its notification topic; the first
/// change makes the broker answer 0x10, the node forgets the client (its STOP then answers
/// `:0`, "not observed"), while a subscribed observer of the same key keeps its registration.
#[tokio::test]
async fn section_7_puback_0x10_drops_the_departed_clients_registrations() {
    let broker = Broker::start();
    let node = StatestoreNode::start(&broker, NodeSpec::default());
    node.wait_ready(Duration::from_secs(30)).await;

    // "ghost" registers with __srcId but nobody subscribes to its notify topic.
    let mut ghost = RawClient::connect(broker.port, "ghost").await;
    assert_eq!(
        &ghost
            .request(&resp(&[b"KEYNOTIFY", b"watched"]))
            .await
            .expect("reply")
            .payload[..],
        b"+OK\r\n"
    );
    assert_eq!(
        &ghost
            .request(&resp(&[b"KEYNOTIFY", b"other"]))
            .await
            .expect("reply")
            .payload[..],
        b"+OK\r\n"
    );
    // "present" registers and does subscribe.
    let mut present = RawClient::connect(broker.port, "present").await;
    let filter = format!(
        "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/{}/command/notify/+",
        hex::encode_upper("present")
    );
    present.subscribe(&filter).await;
    assert_eq!(
        &present
            .request(&resp(&[b"KEYNOTIFY", b"watched"]))
            .await
            .expect("reply")
            .payload[..],
        b"+OK\r\n"
    );

    assert_eq!(
        &present
            .request(&resp(&[b"SET", b"watched", b"1"]))
            .await
            .expect("reply")
            .payload[..],
        b"+OK\r\n"
    );
    let notification = present
        .next(Duration::from_secs(5))
        .await
        .expect("the subscribed observer is notified");
    assert!(notification.topic.ends_with(&hex::encode_upper("watched")));

    let forgotten = wait_for(Duration::from_secs(10), || async {
        (node
            .metric("statestore_notify_clients_forgotten_total")
            .await?
            >= 1.0)
            .then_some(())
    })
    .await;
    assert!(forgotten.is_some(), "the node reacted to PUBACK 0x10");
    // Both of the ghost's registrations are gone; STOP on an unobserved key answers :0.
    assert_eq!(
        &ghost
            .request(&resp(&[b"KEYNOTIFY", b"watched", b"STOP"]))
            .await
            .expect("reply")
            .payload[..],
        b":0\r\n"
    );
    assert_eq!(
        &ghost
            .request(&resp(&[b"KEYNOTIFY", b"other", b"STOP"]))
            .await
            .expect("reply")
            .payload[..],
        b":0\r\n"
    );
    // The present observer still is registered.
    assert_eq!(
        &present
            .request(&resp(&[b"SET", b"watched", b"2"]))
            .await
            .expect("reply")
            .payload[..],
        b"+OK\r\n"
    );
    assert!(
        present.next(Duration::from_secs(5)).await.is_some(),
        "still notified"
    );
}
