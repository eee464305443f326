//! Device-bound message queues (Azure IoT Hub cloud-to-device semantics,
//! `devicebound.md`): the node-side codecs, as pure data transformations.
//!
//! - [`request`]: the service RPC (`SEND`, `PURGE`, `FORGET`, `QUEUE`,
//!   `DEADLETTERS`, `FEEDBACK`) parsed from and encoded to RESP3 (§2), and the
//!   application properties taken from a request's user properties.
//! - [`ids`]: device ids, message ids, lock tokens and the text MQTT 5 can carry.
//! - [`topic`]: the device topics a node receives (settle, receive, activity, §3).
//! - [`property_bag`]: the delivery topic with IoT Hub's URL-encoded property
//!   bag, the same pairs as user properties, the Message Expiry Interval (§3).
//! - [`feedback`]: feedback records and batches as JSON (§4).
//! - [`reply`]: settlement, pull, `QUEUE` and `DEADLETTERS` reply shapes (§2, §3).
//! - [`time`]: ISO 8601 UTC timestamps with milliseconds.
//!
//! Pure like the rest of the crate: no async, no MQTT client, no I/O, no clocks
//! (callers pass `now`), no global state, no panics on any input. It builds on
//! the state store codecs at the crate root (RESP3 framing, the error table).

pub mod feedback;
pub mod ids;
pub mod property_bag;
pub mod reply;
pub mod request;
pub mod time;
pub mod topic;

#[cfg(test)]
mod tests;

pub use feedback::{
    DeadLetterReason, FEEDBACK_CONTENT_TYPE, FEEDBACK_TOPIC, FeedbackRecord, FeedbackStatus,
    encode_feedback_batch, feedback_user_properties,
};
pub use ids::{
    MAX_DEVICE_ID_BYTES, MAX_LOCK_TOKEN_BYTES, MAX_MESSAGE_ID_BYTES, is_valid_lock_token,
    validate_device_id, validate_message_id,
};
pub use property_bag::{
    Delivery, DeliveryHeaders, MAX_TOPIC_BYTES, check_delivery_fits, delivery_headers,
    delivery_topic, delivery_user_properties, message_expiry_interval_secs, property_bag,
};
pub use reply::{
    DeadLetterEntry, DeviceReply, QueueStats, encode_dead_letters, encode_queue_stats, pull_reply,
    settlement_payload, settlement_reply,
};
pub use request::{
    Ack, ApplicationProperty, DeviceRequest, DeviceVerb, Expiry, FeedbackSettlement, REQUEST_TOPIC,
    SendRequest, application_properties, encode_device_request, parse_device_request,
    sniff_device_verb,
};
pub use time::format_utc_millis;
pub use topic::{
    DEVICE_INBOUND_FILTER, DeviceTopic, DeviceTopicError, SettleAction, device_activity,
    device_subscription_filter, parse_device_topic,
};

/// The settings the codecs need (devicebound.md §5); the node builds it from
/// its `[devicebound]` configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceboundLimits {
    /// Largest SEND body accepted, in bytes; a larger one is `message too large`.
    pub max_message_bytes: usize,
}

impl DeviceboundLimits {
    /// Default body limit: 65,536 bytes (devicebound.md §1, §5).
    pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 65_536;
}

impl Default for DeviceboundLimits {
    fn default() -> Self {
        Self {
            max_message_bytes: Self::DEFAULT_MAX_MESSAGE_BYTES,
        }
    }
}
