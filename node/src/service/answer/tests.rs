use super::*;
use statestore_storage::devicebound::DeviceOutcome;
use statestore_vocab::hlc::Hlc;

fn device(result: DeviceResult) -> Outcome {
    Outcome::Device(Box::new(DeviceOutcome {
        result,
        counters: Default::default(),
    }))
}

#[test]
fn outcomes_map_to_the_byte_exact_replies_of_section_2() {
    let v = Hlc::new(1, 2, "n");
    let cases = vec![
        (Outcome::Stored { version: v.clone() }, b"+OK\r\n".to_vec(), true),
        (Outcome::NotStored { version: v.clone() }, b":-1\r\n".to_vec(), true),
        (Outcome::Deleted { version: v.clone() }, b":1\r\n".to_vec(), true),
        (Outcome::Missing, b":0\r\n".to_vec(), false),
        (Outcome::ValueDiffers, b":-1\r\n".to_vec(), false),
        (Outcome::Observing, b"+OK\r\n".to_vec(), false),
        (Outcome::StoppedObserving, b"+OK\r\n".to_vec(), false),
        (Outcome::NotObserving, b":0\r\n".to_vec(), false),
        (
            Outcome::Rejected(Rejection::FencingTokenRequired),
            b"-ERR a fencing token is required for this request\r\n".to_vec(),
            false,
        ),
        (
            Outcome::Rejected(Rejection::FencingTokenLower),
            b"-ERR the request fencing token is a lower version than the fencing token protecting the resource\r\n".to_vec(),
            false,
        ),
        (Outcome::Rejected(Rejection::QuotaExceeded), b"-ERR the quota has been exceeded\r\n".to_vec(), false),
        (device(DeviceResult::Sent { expires_at_ms: 5 }), b"+OK\r\n".to_vec(), false),
        (device(DeviceResult::Rejected(DeviceRejection::QueueFull)), b"-ERR device queue is full\r\n".to_vec(), false),
        (device(DeviceResult::Rejected(DeviceRejection::MessageTooLarge)), b"-ERR message too large\r\n".to_vec(), false),
        (device(DeviceResult::Rejected(DeviceRejection::TooManyDevices)), b"-ERR the quota has been exceeded\r\n".to_vec(), false),
        (device(DeviceResult::Rejected(DeviceRejection::TooManyMessages)), b"-ERR the quota has been exceeded\r\n".to_vec(), false),
        (device(DeviceResult::Purged { messages: 3 }), b":3\r\n".to_vec(), false),
        (device(DeviceResult::Forgot { messages: 2, dead_letters: 4, feedback_records: 9 }), b":6\r\n".to_vec(), false),
        (device(DeviceResult::Settled { settled: true }), b":1\r\n".to_vec(), false),
        (device(DeviceResult::Settled { settled: false }), b":0\r\n".to_vec(), false),
        (device(DeviceResult::SentAndDelivered { expires_at_ms: 5, messages: Vec::new() }), b"+OK\r\n".to_vec(), false),
        (device(DeviceResult::SettledAndDelivered { settled: true, messages: Vec::new() }), b":1\r\n".to_vec(), false),
        (device(DeviceResult::SettledAndDelivered { settled: false, messages: Vec::new() }), b":0\r\n".to_vec(), false),
    ];
    for (outcome, bytes, has_version) in cases {
        let answer = from_outcome(outcome.clone());
        assert_eq!(
            answer.version().is_some(),
            has_version,
            "{outcome:?} __ts presence"
        );
        assert_eq!(answer.into_payload(), bytes, "{outcome:?}");
    }
}
