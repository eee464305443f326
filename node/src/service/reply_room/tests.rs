use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::*;
use crate::outbound::{OutboundBudget, Outlet};
use crate::transport::OutboundMessage;

fn envelope() -> Envelope {
    Envelope {
        response_topic: "clients/c1/services/statestore/v1/x/command/invoke/response".into(),
        correlation_data: Bytes::from_static(&[7; 16]),
        deadline: Some(Instant::now() + Duration::from_secs(10)),
        client_id: Some("c1".into()),
    }
}

/// The room a reply takes before it is built covers the reply as it is then published,
/// `__ts` included: the outlet uses it as it is and charges nothing more.
#[test]
fn the_room_covers_the_reply_built_afterwards() {
    let envelope = envelope();
    let room = ReplyRoom::new(&envelope, "statestore-node-1");
    for (value, version) in [
        (vec![], None),
        (
            vec![b'v'; 10],
            Some("001795315360516:00000:statestore-1".to_owned()),
        ),
        (
            vec![b'v'; 4 << 20],
            Some("001795315360516:00042:a-long-node-name".to_owned()),
        ),
    ] {
        let payload = statestore_protocol::Reply::Bulk(value.clone()).encode();
        let reply: OutboundMessage = envelope::reply(
            &envelope,
            payload,
            version.clone(),
            "statestore-node-1",
            Some(10),
        );
        let bytes = room.reply_bytes(value.len(), version.as_ref().map(String::len));
        assert!(
            bytes >= outbound::message_bytes(&reply),
            "{} bytes of room for a reply of {}",
            bytes,
            outbound::message_bytes(&reply)
        );
        assert!(bytes <= outbound::message_bytes(&reply) + 64, "close to it");
    }
}

/// The estimate is never below the encoding (array headers included).
#[test]
fn payload_estimates_cover_the_encoding() {
    use statestore_protocol::scan::Page;
    let key = |n: usize| vec![b'k'; n];
    let replies = [
        Reply::Ok,
        Reply::Nil,
        Reply::Integer(-1),
        Reply::Bulk(vec![]),
        Reply::Bulk(key(100_000)),
        Reply::Keys(Page {
            keys: vec![],
            next_token: None,
        }),
        Reply::Keys(Page {
            keys: (0..1000).map(|n| key(n % 7)).collect(),
            next_token: Some(key(3)),
        }),
        Reply::Keys(Page {
            keys: vec![key(65_536)],
            next_token: Some(key(65_536)),
        }),
    ];
    for reply in replies {
        let encoded = reply.encode().len();
        let estimate = payload_bytes(&reply) + PAYLOAD_FRAMING_BYTES;
        assert!(estimate >= encoded, "{estimate} < {encoded}");
    }
}

struct Budgeted(Outlet);

impl Outbox for Budgeted {
    async fn publish(&self, message: OutboundMessage) -> bool {
        self.0.publish(message, None).await
    }

    fn try_charge(&self, lane: Lane, bytes: usize) -> Option<Charge> {
        self.0.budget().lane(lane).try_charge(bytes)
    }

    async fn charge(&self, lane: Lane, bytes: usize) -> Charge {
        self.0.budget().lane(lane).charge(bytes).await
    }
}

/// Room is kept while it covers what is asked, given back before waiting for more, and
/// taken once the lane has it.
#[tokio::test]
async fn room_is_taken_kept_or_waited_for_holding_nothing() {
    let charged =
        prometheus::IntGaugeVec::new(prometheus::Opts::new("test_room_bytes", "test"), &["lane"])
            .expect("gauge");
    let waits =
        prometheus::IntCounterVec::new(prometheus::Opts::new("test_room_waits", "test"), &["lane"])
            .expect("counter");
    let (outlet, _lanes) = Outlet::new(OutboundBudget::new(2 << 20, &charged, &waits), 8);
    let outbox = Budgeted(outlet);
    let lane = || outbox.0.budget().lane(Lane::Replies);
    let mut room = ReplyRoom::new(&envelope(), "n");
    assert!(room.fits(&outbox, 1000));
    assert_eq!(lane().available(), (1 << 20) - 1000);
    assert!(room.fits(&outbox, 900), "kept: it covers less");
    assert_eq!(lane().available(), (1 << 20) - 1000);
    let hog = lane().try_charge((1 << 20) - 1000).expect("the rest");
    assert!(!room.fits(&outbox, 2000), "no room for more");
    assert_eq!(
        lane().available(),
        1000,
        "what it held was given back before it failed"
    );
    let waiting = tokio::spawn({
        let outbox = Budgeted(outbox.0.clone());
        async move {
            let mut room = room;
            room.wait(&outbox, 2000).await;
            room.take().map(|c| c.bytes())
        }
    });
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(!waiting.is_finished(), "waits for room");
    drop(hog);
    assert_eq!(waiting.await.expect("task"), Some(2000));
}
