//! From what apply decided ([`Outcome`]) to what the client reads ([`Reply`] plus the `__ts`
//! version, protocol §1.2 and §2). The one place this mapping lives.

use statestore_storage::devicebound::{DeviceRejection, DeviceResult};
use statestore_storage::hlc::Hlc;
use statestore_storage::keyspace::Rejection;
use statestore_storage::machine::Outcome;

use crate::protocol::{ErrorReply, Reply};

/// A reply and the version to send as `__ts` with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Payload to encode.
    pub reply: Reply,
    /// `__ts`, when the protocol requires one.
    pub version: Option<Hlc>,
}

impl Answer {
    /// An `-ERR` reply (no `__ts`).
    pub fn error(error: ErrorReply) -> Self {
        Answer {
            reply: Reply::Error(error),
            version: None,
        }
    }
}

/// The reply to a mutation's outcome.
pub fn from_outcome(outcome: Outcome) -> Answer {
    let (reply, version) = match outcome {
        Outcome::Stored { version } => (Reply::Ok, Some(version)),
        Outcome::NotStored { version } => (Reply::NotApplied, Some(version)),
        Outcome::Deleted { version } => (Reply::Integer(1), Some(version)),
        Outcome::Missing => (Reply::Integer(0), None),
        Outcome::ValueDiffers => (Reply::NotApplied, None),
        Outcome::Observing | Outcome::StoppedObserving => (Reply::Ok, None),
        Outcome::NotObserving => (Reply::Integer(0), None),
        Outcome::Rejected(rejection) => (Reply::Error(rejection_error(rejection)), None),
        Outcome::Expired { .. }
        | Outcome::ForgotClient { .. }
        | Outcome::LimitsSet
        | Outcome::Nothing => (Reply::Ok, None),
        Outcome::Device(device) => (device_reply(&device.result), None),
    };
    Answer { reply, version }
}

/// The reply to a device-bound command (devicebound §2, §3). QUEUE and DEADLETTERS are reads
/// and never come through here. Results of leader-internal commands (deliveries, sweeps,
/// feedback cuts) answer no client; they map to `+OK` like the keyspace's sweeps.
fn device_reply(result: &DeviceResult) -> Reply {
    let count = |n: u32| Reply::Integer(i64::from(n));
    match result {
        DeviceResult::Sent { .. }
        | DeviceResult::SentAndDelivered { .. }
        | DeviceResult::SettingsSet => Reply::Ok,
        DeviceResult::Rejected(rejection) => Reply::Error(match rejection {
            DeviceRejection::QueueFull => ErrorReply::DeviceQueueFull,
            DeviceRejection::MessageTooLarge => ErrorReply::MessageTooLarge,
            DeviceRejection::TooManyDevices | DeviceRejection::TooManyMessages => {
                ErrorReply::QuotaExceeded
            }
        }),
        DeviceResult::Purged { messages } => count(*messages),
        DeviceResult::Forgot {
            messages,
            dead_letters,
            ..
        } => count(messages.saturating_add(*dead_letters)),
        DeviceResult::Settled { settled } | DeviceResult::SettledAndDelivered { settled, .. } => {
            count(u32::from(*settled))
        }
        DeviceResult::Delivered { .. }
        | DeviceResult::Received(_)
        | DeviceResult::Undelivered { .. }
        | DeviceResult::LocksExpired { .. }
        | DeviceResult::Expired { .. }
        | DeviceResult::FeedbackCut { .. }
        | DeviceResult::FeedbackDelivered { .. } => Reply::Ok,
    }
}

fn rejection_error(rejection: Rejection) -> ErrorReply {
    match rejection {
        Rejection::FencingTokenRequired => ErrorReply::FencingTokenRequired,
        Rejection::FencingTokenLower => ErrorReply::FencingTokenLower,
        Rejection::QuotaExceeded => ErrorReply::QuotaExceeded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use statestore_storage::devicebound::DeviceOutcome;

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
            assert_eq!(answer.reply.encode(), bytes, "{outcome:?}");
            assert_eq!(
                answer.version.is_some(),
                has_version,
                "{outcome:?} __ts presence"
            );
        }
    }
}
