//! Unit tests of [`super`]: the refusals' metric labels and the texts they log and send.

use super::*;
use crate::metrics::{CONNECTION_REFUSALS, SNAPSHOT_REFUSALS};

#[test]
fn labels_are_the_metrics_reason_values() {
    assert_eq!(
        CONNECTION_REFUSALS,
        ["limit", "timeout", "oversized", "bad_hello"]
    );
    assert_eq!(SNAPSHOT_REFUSALS, ["too_large", "busy", "corrupt"]);
    assert_eq!(SnapshotRefusal::TooLarge { max: 1 }.label(), "too_large");
    assert_eq!(SnapshotRefusal::Busy.label(), "busy");
    assert_eq!(SnapshotRefusal::Corrupt.label(), "corrupt");
}

#[test]
fn hello_refusals_are_counted_logged_and_answered_as_before() {
    let other = HelloRefusal::OtherProtocol {
        protocol: PROTOCOL_VERSION - 1,
        from: Some(4),
    };
    assert_eq!(other.counted_as(), Some(ConnectionRefusal::BadHello));
    let text = format!(
        "peer protocol {} from node Some(4), this node speaks {PROTOCOL_VERSION}",
        PROTOCOL_VERSION - 1
    );
    assert_eq!(other.to_string(), text);
    assert_eq!(other.answer(), Some(text));

    assert_eq!(HelloRefusal::NotAHello.to_string(), "no hello");
    assert_eq!(
        HelloRefusal::NotAHello.answer().as_deref(),
        Some("the first frame must be a hello")
    );
    assert_eq!(HelloRefusal::Closed.counted_as(), None);
    assert_eq!(HelloRefusal::Closed.answer(), None);
    assert_eq!(
        HelloRefusal::AnswerTimeout.counted_as(),
        Some(ConnectionRefusal::Timeout)
    );
    assert_eq!(
        HelloRefusal::Oversized.to_string(),
        format!("a first frame over {HELLO_FRAME_BYTES} bytes")
    );
    assert_eq!(HelloRefusal::Oversized.answer(), None);
}
