//! The outbound budget with a fake session (the test reads the lanes and "acknowledges" by
//! dropping what it read): publishers wait for room, room comes back on acknowledgement and on
//! drop, and a full bulk lane never holds up a small reply.

use std::borrow::Cow;

use bytes::Bytes;

use super::*;

fn gauge() -> prometheus::IntGaugeVec {
    prometheus::IntGaugeVec::new(
        prometheus::Opts::new("test_outbound_bytes", "test"),
        &["lane"],
    )
    .expect("gauge")
}

fn counter() -> prometheus::IntCounterVec {
    prometheus::IntCounterVec::new(
        prometheus::Opts::new("test_outbound_waits", "test"),
        &["lane"],
    )
    .expect("counter")
}

struct Fake {
    outlet: Outlet,
    lanes: LaneQueues,
    charged: prometheus::IntGaugeVec,
    waits: prometheus::IntCounterVec,
}

/// An outlet of `total_bytes` (two lanes of half each) read by the test.
fn fake(total_bytes: usize) -> Fake {
    let charged = gauge();
    let waits = counter();
    let (outlet, lanes) = Outlet::new(OutboundBudget::new(total_bytes, &charged, &waits), 64);
    Fake {
        outlet,
        lanes,
        charged,
        waits,
    }
}

impl Fake {
    fn charged(&self, lane: Lane) -> i64 {
        self.charged.with_label_values(&[lane.label()]).get()
    }

    fn waits(&self, lane: Lane) -> u64 {
        self.waits.with_label_values(&[lane.label()]).get()
    }
}

/// A message of `kind` whose charge is exactly `bytes` (at least the fixed overhead).
fn message(kind: OutboundKind, bytes: usize) -> OutboundMessage {
    let payload = bytes.saturating_sub(MESSAGE_OVERHEAD_BYTES);
    let message = OutboundMessage {
        topic: String::new(),
        payload: Bytes::from(vec![0; payload]),
        correlation_data: None,
        response_topic: None,
        message_expiry_secs: None,
        content_type: None,
        user_properties: Vec::new(),
        kind,
    };
    assert_eq!(message_bytes(&message), bytes.max(MESSAGE_OVERHEAD_BYTES));
    message
}

fn notification() -> OutboundKind {
    OutboundKind::Notification {
        client_id: "c".to_owned(),
    }
}

/// Lets the spawned publishers run up to where they wait (single-threaded test runtime).
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[test]
fn a_message_is_charged_for_all_it_holds() {
    let message = OutboundMessage {
        topic: "t".repeat(10),
        payload: Bytes::from_static(b"12345"),
        correlation_data: Some(Bytes::from_static(&[0; 16])),
        response_topic: None,
        message_expiry_secs: Some(3),
        content_type: Some("application/octet-stream"),
        user_properties: vec![
            (Cow::Borrowed("__stat"), "200".to_owned()),
            (Cow::Owned("k".repeat(100)), "v".repeat(1000)),
        ],
        kind: OutboundKind::Response,
    };
    assert_eq!(
        message_bytes(&message),
        5 + 10
            + 16
            + 24
            + (6 + 3)
            + (100 + 1000)
            + 2 * PROPERTY_OVERHEAD_BYTES
            + MESSAGE_OVERHEAD_BYTES
    );
}

#[test]
fn lanes_by_kind_and_reply_size() {
    let of = |kind: OutboundKind| Lane::of(&message(kind, MESSAGE_OVERHEAD_BYTES));
    assert_eq!(of(OutboundKind::Response), Lane::Replies);
    assert_eq!(of(OutboundKind::Probe), Lane::Replies);
    assert_eq!(of(notification()), Lane::Bulk);
    assert_eq!(
        of(OutboundKind::DeviceMessage {
            device: "d".to_owned(),
            token: "t".to_owned(),
        }),
        Lane::Bulk
    );
    assert_eq!(
        of(OutboundKind::Feedback {
            token: "t".to_owned(),
        }),
        Lane::Bulk
    );
    // Issue 27: a small reply never waits behind large ones (a GET of a 4 MiB value).
    let reply = |bytes| Lane::of(&message(OutboundKind::Response, bytes));
    assert_eq!(reply(LARGE_REPLY_BYTES), Lane::Replies);
    assert_eq!(reply(LARGE_REPLY_BYTES + 1), Lane::Bulk);
    assert_eq!(Lane::for_reply(LARGE_REPLY_BYTES + 1), Lane::Bulk);
}

/// A publisher waits while its lane is spent and goes on once an earlier message is
/// acknowledged (its queued entry dropped); the wait is counted.
#[tokio::test]
async fn a_publisher_waits_for_room_and_proceeds_when_the_broker_acknowledges() {
    let mut fake = fake(8192); // 4 KiB per lane
    assert!(
        fake.outlet
            .publish(message(notification(), 3000), None)
            .await
    );
    assert_eq!(fake.charged(Lane::Bulk), 3000);
    let waiting = tokio::spawn({
        let outlet = fake.outlet.clone();
        async move { outlet.publish(message(notification(), 2000), None).await }
    });
    settle().await;
    assert!(!waiting.is_finished(), "queued beyond the lane's budget");
    assert_eq!(fake.waits(Lane::Bulk), 1);
    assert_eq!(
        fake.charged(Lane::Bulk),
        3000,
        "a waiting publisher holds nothing"
    );

    let first = fake.lanes.bulk.recv().await.expect("queued");
    assert_eq!(first.charge.bytes(), 3000);
    // Sent and in flight: still charged until its PUBACK.
    settle().await;
    assert!(
        !waiting.is_finished(),
        "room comes back on the PUBACK, not on sending"
    );
    drop(first); // the PUBACK
    assert!(waiting.await.expect("task"), "queued once room came back");
    assert_eq!(fake.charged(Lane::Bulk), 2000);
    let second = fake.lanes.bulk.recv().await.expect("queued");
    drop(second);
    assert_eq!(fake.charged(Lane::Bulk), 0);
    assert_eq!(fake.outlet.budget().lane(Lane::Bulk).available(), 4096);
}

/// A message the session drops (disconnected, publish failed) or can no longer take (the
/// session is gone) gives its room back.
#[tokio::test]
async fn room_comes_back_when_a_message_is_dropped() {
    let Fake {
        outlet,
        mut lanes,
        charged,
        ..
    } = fake(8192);
    assert!(
        outlet
            .publish(message(OutboundKind::Response, 1000), None)
            .await
    );
    assert_eq!(charged.with_label_values(&["replies"]).get(), 1000);
    drop(lanes.replies.recv().await.expect("queued")); // dropped while offline
    assert_eq!(charged.with_label_values(&["replies"]).get(), 0);
    drop(lanes);
    assert!(
        !outlet
            .publish(message(OutboundKind::Response, 1000), None)
            .await,
        "the session is gone"
    );
    assert_eq!(charged.with_label_values(&["replies"]).get(), 0);
    assert_eq!(outlet.budget().lane(Lane::Replies).available(), 4096);
}

/// Issue 27: the bulk lane full (notifications the broker has not acknowledged) does not
/// hold up a reply; the replies lane full does not hold up a notification.
#[tokio::test]
async fn a_full_lane_never_blocks_the_other() {
    let mut fake = fake(8192);
    assert!(
        fake.outlet
            .publish(message(notification(), 4096), None)
            .await
    );
    let blocked = tokio::spawn({
        let outlet = fake.outlet.clone();
        async move { outlet.publish(message(notification(), 1000), None).await }
    });
    settle().await;
    assert!(!blocked.is_finished(), "the bulk lane is full");
    assert!(
        fake.outlet
            .publish(message(OutboundKind::Response, 4096), None)
            .await,
        "a reply goes out while the bulk lane is full"
    );
    assert_eq!(fake.charged(Lane::Replies), 4096);
    assert_eq!(fake.waits(Lane::Replies), 0);
    let reply = fake.lanes.replies.recv().await.expect("reply queued");
    assert_eq!(reply.message.kind, OutboundKind::Response);
    drop(reply);
    drop(fake.lanes.bulk.recv().await.expect("first notification"));
    assert!(blocked.await.expect("task"));
}

/// A message larger than its whole lane is charged the whole lane and goes alone.
#[tokio::test]
async fn a_message_larger_than_its_lane_goes_alone() {
    let mut fake = fake(8192);
    assert!(
        fake.outlet
            .publish(message(notification(), 1 << 20), None)
            .await
    );
    assert_eq!(fake.charged(Lane::Bulk), 4096);
    assert!(
        fake.outlet
            .budget()
            .lane(Lane::Bulk)
            .try_charge(1)
            .is_none()
    );
    drop(fake.lanes.bulk.recv().await.expect("queued"));
    assert_eq!(fake.outlet.budget().lane(Lane::Bulk).available(), 4096);
}

/// Room taken before a reply is built is used as it is when it covers the reply, and given
/// back (room taken anew) when it does not.
#[tokio::test]
async fn prepaid_room_is_used_when_it_covers_the_message() {
    let mut fake = fake(8192);
    let lane = fake.outlet.budget().lane(Lane::Replies).clone();
    let prepaid = lane.try_charge(2000).expect("room");
    assert!(
        fake.outlet
            .publish(message(OutboundKind::Response, 1500), Some(prepaid))
            .await
    );
    assert_eq!(
        fake.charged(Lane::Replies),
        2000,
        "the prepaid room, nothing more"
    );
    drop(fake.lanes.replies.recv().await.expect("queued"));
    let short = lane.try_charge(300).expect("room");
    assert!(
        fake.outlet
            .publish(message(OutboundKind::Response, 1500), Some(short))
            .await
    );
    assert_eq!(
        fake.charged(Lane::Replies),
        1500,
        "too small: given back, charged anew"
    );
    drop(fake.lanes.replies.recv().await.expect("queued"));
    assert_eq!(fake.charged(Lane::Replies), 0);
}

/// Within a lane, messages keep the order they were published in.
#[tokio::test]
async fn order_within_a_lane_is_kept() {
    let mut fake = fake(1 << 20);
    for n in 0..10 {
        let mut m = message(notification(), 300);
        m.topic = n.to_string();
        assert!(fake.outlet.publish(m, None).await);
    }
    for n in 0..10 {
        let queued = fake.lanes.bulk.recv().await.expect("queued");
        assert_eq!(queued.message.topic, n.to_string());
    }
}
