//! Reply shapes (devicebound.md §2, §3): settlement, pull, QUEUE, DEADLETTERS,
//! byte-exact.

use crate::devicebound::feedback::DeadLetterReason;
use crate::devicebound::property_bag::Delivery;
use crate::devicebound::reply::{
    DeadLetterEntry, DeviceReply, QueueStats, encode_dead_letters, encode_queue_stats, pull_reply,
    settlement_payload, settlement_reply,
};

fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|&(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

#[test]
fn section_3_settlement_replies() {
    assert_eq!(settlement_payload(true), b":1\r\n");
    assert_eq!(settlement_payload(false), b":0\r\n");
    assert_eq!(
        settlement_reply(true),
        DeviceReply {
            status: 200,
            payload: b":1\r\n".to_vec(),
            user_properties: owned(&[("__stat", "200")]),
        }
    );
    assert_eq!(
        settlement_reply(false),
        DeviceReply {
            status: 200,
            payload: b":0\r\n".to_vec(),
            user_properties: owned(&[("__stat", "200")]),
        }
    );
}

#[test]
fn section_3_pull_replies() {
    assert_eq!(
        pull_reply(None),
        DeviceReply {
            status: 204,
            payload: Vec::new(),
            user_properties: owned(&[("__stat", "204")]),
        }
    );
    let application_properties = owned(&[("color", "red")]);
    let delivery = Delivery {
        device_id: "d1",
        message_id: "m1",
        lock_token: "lt1",
        expires_at_ms: 1_438_100_688_789,
        content_type: Some("text/plain"),
        content_encoding: None,
        application_properties: &application_properties,
    };
    assert_eq!(
        pull_reply(Some((&delivery, b"body\r\n\x00"))),
        DeviceReply {
            status: 200,
            payload: b"body\r\n\x00".to_vec(),
            user_properties: owned(&[
                ("__stat", "200"),
                ("$.mid", "m1"),
                ("$.lt", "lt1"),
                ("$.exp", "2015-07-28T16:24:48.789Z"),
                ("$.ct", "text/plain"),
                ("color", "red"),
            ]),
        }
    );
    let empty_body = pull_reply(Some((&delivery, b"")));
    assert_eq!(
        (empty_body.status, empty_body.payload.len()),
        (200, 0),
        "an empty body is still a 200"
    );
}

#[test]
fn section_2_queue_reply() {
    let cases: &[(QueueStats, &[u8])] = &[
        (QueueStats::default(), b"*4\r\n:0\r\n:0\r\n:0\r\n:-1\r\n"),
        (
            QueueStats {
                enqueued: 3,
                invisible: 1,
                dead_lettered: 12,
                oldest_enqueued_ms: Some(1_700_000_000_000),
            },
            b"*4\r\n:3\r\n:1\r\n:12\r\n:1700000000000\r\n",
        ),
        (
            QueueStats {
                enqueued: 0,
                invisible: 0,
                dead_lettered: 0,
                oldest_enqueued_ms: Some(0),
            },
            b"*4\r\n:0\r\n:0\r\n:0\r\n:0\r\n",
        ),
        (
            QueueStats {
                enqueued: u32::MAX,
                invisible: 0,
                dead_lettered: 0,
                oldest_enqueued_ms: None,
            },
            b"*4\r\n:4294967295\r\n:0\r\n:0\r\n:-1\r\n",
        ),
        (
            QueueStats {
                enqueued: 0,
                invisible: 0,
                dead_lettered: 0,
                oldest_enqueued_ms: Some(u64::MAX),
            },
            b"*4\r\n:0\r\n:0\r\n:0\r\n:9223372036854775807\r\n",
        ),
    ];
    for (stats, wire) in cases {
        assert_eq!(encode_queue_stats(stats), *wire, "{stats:?}");
    }
}

#[test]
fn section_2_dead_letters_reply() {
    assert_eq!(encode_dead_letters(&[]), b"*0\r\n");
    let entries = [
        DeadLetterEntry {
            message_id: "m1",
            body: b"hi",
            reason: DeadLetterReason::Expired,
            dead_lettered_at_ms: 1_700_000_000_000,
        },
        DeadLetterEntry {
            message_id: "m\u{e9}",
            body: b"",
            reason: DeadLetterReason::DeliveryCountExceeded,
            dead_lettered_at_ms: 5,
        },
        DeadLetterEntry {
            message_id: "m3",
            body: b"a\r\nb",
            reason: DeadLetterReason::Rejected,
            dead_lettered_at_ms: 6,
        },
    ];
    let expected: &[u8] = b"*3\r\n\
        *4\r\n$2\r\nm1\r\n$2\r\nhi\r\n$7\r\nExpired\r\n:1700000000000\r\n\
        *4\r\n$3\r\nm\xc3\xa9\r\n$0\r\n\r\n$21\r\nDeliveryCountExceeded\r\n:5\r\n\
        *4\r\n$2\r\nm3\r\n$4\r\na\r\nb\r\n$8\r\nRejected\r\n:6\r\n";
    assert_eq!(encode_dead_letters(&entries), expected);
}
