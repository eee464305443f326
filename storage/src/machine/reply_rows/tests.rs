//! Unit tests of the reply memory's rows: size values round-trip, the borrowed reply twin
//! encodes like the record.

use super::*;
use crate::codec;
use crate::keyspace::Rejection;
use statestore_vocab::hlc::Hlc;

#[test]
fn reply_size_values_round_trip_and_stay_small() {
    for size in [
        0,
        1,
        127,
        128,
        300,
        16_383,
        16_384,
        u64::from(u32::MAX),
        u64::MAX,
    ] {
        let raw = reply_size_value(size);
        assert_eq!(parse_reply_size_value(&raw), Some(size), "{size}");
    }
    assert_eq!(reply_size_value(100).len(), 1);
    assert_eq!(reply_size_value(16_383).len(), 2);
    assert_eq!(reply_size_value(u64::MAX).len(), 10);
    for bad in [
        &[][..],       // empty (an index entry of an older layout)
        &[0x80],       // truncated
        &[0x05, 0x00], // trailing byte
        &[0x85, 0x00], // non-canonical zero continuation
        &[0xff; 10],   // more than 64 bits
        &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02], // 65 bits
    ] {
        assert_eq!(parse_reply_size_value(bad), None, "{bad:?}");
    }
}

#[test]
fn borrowed_reply_twin_uses_the_reply_encoding() {
    for outcome in [
        Outcome::Stored {
            version: Hlc::new(9, 1, "n2"),
        },
        Outcome::Rejected(Rejection::QuotaExceeded),
        Outcome::Missing,
    ] {
        let reply = RememberedReply {
            expires_at_ms: 1_234_567,
            digest: u128::MAX - 5,
            outcome: outcome.clone(),
        };
        let out = RememberedReplyOut {
            expires_at_ms: 1_234_567,
            digest: u128::MAX - 5,
            outcome: &outcome,
        };
        assert_eq!(codec::encode(&out), codec::encode(&reply));
    }
}
