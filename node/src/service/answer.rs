//! From what apply decided ([`Outcome`]) to what the client reads ([`Reply`] plus the `__ts`
//! version, protocol §1.2 and §2). The one place this mapping lives.

use statestore_storage::devicebound::{DeviceRejection, DeviceResult};
use statestore_storage::keyspace::Rejection;
use statestore_storage::machine::Outcome;

use statestore_protocol::{ErrorReply, Reply};

use crate::verdict::Answer;

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
    Answer::Reply { reply, version }
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
mod tests;
