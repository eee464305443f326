//! Feedback (devicebound.md §4): IoT Hub's feedback records, a batch as a
//! JSON array published to `messages/servicebound/feedback`, and the batch's
//! user properties. Dead-letter reasons share the status codes' text.
//!
//! A record, field names and order as IoT Hub sends them:
//! `{"originalMessageId":"m1","enqueuedTimeUtc":"2015-07-28T16:24:48.789Z",
//! "statusCode":"Success","description":"Success","deviceId":"d1",
//! "deviceGenerationId":"g1"}`. A message sent without `GENERATION` reports
//! `"deviceGenerationId":""` (IoT Hub always has one; an empty string keeps the
//! field a string for typed clients).

use serde::Serialize;

use super::property_bag::LOCK_TOKEN_PROPERTY;
use super::time::format_utc_millis;

/// Where feedback batches are published.
pub const FEEDBACK_TOPIC: &str = statestore_vocab::spec::FEEDBACK_TOPIC;

/// The Content Type of a feedback batch.
pub const FEEDBACK_CONTENT_TYPE: &str = "application/vnd.microsoft.iothub.feedback.json";

/// User property holding the time the batch was cut (ISO 8601 UTC).
pub const ENQUEUED_TIME_PROPERTY: &str = "iothub-enqueuedtime";

/// A batch is cut when it holds this many records ...
pub const MAX_RECORDS_PER_BATCH: usize = 64;

/// ... or this long after the previous batch was cut, whichever comes first.
pub const BATCH_INTERVAL_MS: u64 = 15_000;

pub use statestore_vocab::devicebound::{DeadLetterReason, FeedbackStatus};

/// One feedback record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedbackRecord<'a> {
    /// The message id of the SEND.
    pub original_message_id: &'a str,
    /// When the outcome happened, ms since the Unix epoch (`enqueuedTimeUtc`).
    pub outcome_at_ms: u64,
    /// The outcome.
    pub status: FeedbackStatus,
    /// The device the message was for.
    pub device_id: &'a str,
    /// The SEND's `GENERATION`, if any.
    pub device_generation_id: Option<&'a str>,
}

/// A record as JSON: field names and order as IoT Hub's.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FeedbackRecordJson<'a> {
    original_message_id: &'a str,
    enqueued_time_utc: String,
    status_code: &'static str,
    description: &'static str,
    device_id: &'a str,
    device_generation_id: &'a str,
}

impl<'a> From<&FeedbackRecord<'a>> for FeedbackRecordJson<'a> {
    fn from(record: &FeedbackRecord<'a>) -> Self {
        FeedbackRecordJson {
            original_message_id: record.original_message_id,
            enqueued_time_utc: format_utc_millis(record.outcome_at_ms),
            status_code: record.status.as_str(),
            description: record.status.as_str(),
            device_id: record.device_id,
            device_generation_id: record.device_generation_id.unwrap_or(""),
        }
    }
}

/// The body of a feedback batch: a JSON array of the records, in order.
pub fn encode_feedback_batch(records: &[FeedbackRecord<'_>]) -> Vec<u8> {
    let records: Vec<FeedbackRecordJson<'_>> = records.iter().map(Into::into).collect();
    // Serializing a sequence of structs of strings cannot fail (no maps with
    // non-string keys, no I/O); the fallback is an empty batch, never a panic.
    serde_json::to_vec(&records).unwrap_or_else(|_| b"[]".to_vec())
}

/// The user properties of a feedback batch publish: `$.lt` (the batch's lock
/// token, for `FEEDBACK COMPLETE`) and `iothub-enqueuedtime` (when the batch
/// was cut, ISO 8601 UTC).
pub fn feedback_user_properties(lock_token: &str, batch_cut_at_ms: u64) -> Vec<(String, String)> {
    vec![
        (LOCK_TOKEN_PROPERTY.to_owned(), lock_token.to_owned()),
        (
            ENQUEUED_TIME_PROPERTY.to_owned(),
            format_utc_millis(batch_cut_at_ms),
        ),
    ]
}
