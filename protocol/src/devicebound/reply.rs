//! Reply shapes of the device-bound service and of device requests
//! (devicebound.md §2, §3): settlement (`:1` settled, `:0` unknown or expired
//! lock), pull (the message, or an empty payload with `__stat` 204), `QUEUE`
//! counts and `DEADLETTERS` lists, byte-exact. `-ERR` replies come from the
//! single error table, [`crate::ErrorReply`].
//!
//! A [`DeviceReply`] carries the payload and the user properties, `__stat`
//! first; the caller adds the envelope (response topic, correlation data,
//! QoS 1) as for state store replies.

use super::feedback::DeadLetterReason;
use super::property_bag::{Delivery, delivery_user_properties};
use crate::Reply;
use crate::resp3::encode_bulk;

/// The user property carrying the status (protocol.md §1.2).
pub const STATUS_PROPERTY: &str = "__stat";

/// Status of every answered request, errors included.
pub const STATUS_OK: u16 = 200;

/// Status of a pull that found no Enqueued message.
pub const STATUS_NO_CONTENT: u16 = 204;

/// A reply to publish: status, payload, user properties (`__stat` first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceReply {
    /// `__stat`: 200, or 204 for an empty pull.
    pub status: u16,
    /// The payload (empty only for a 204).
    pub payload: Vec<u8>,
    /// `__stat` then the reply's own properties.
    pub user_properties: Vec<(String, String)>,
}

impl DeviceReply {
    fn new(status: u16, payload: Vec<u8>, properties: Vec<(String, String)>) -> DeviceReply {
        let mut user_properties = Vec::with_capacity(properties.len() + 1);
        user_properties.push((STATUS_PROPERTY.to_owned(), status.to_string()));
        user_properties.extend(properties);
        DeviceReply {
            status,
            payload,
            user_properties,
        }
    }
}

/// `:1\r\n` when the lock token settled a message or batch, `:0\r\n` when it
/// is unknown or its lock expired (device settle topics and `FEEDBACK`).
pub fn settlement_payload(settled: bool) -> Vec<u8> {
    Reply::Integer(i64::from(settled)).encode()
}

/// The reply to a settle publish: `__stat` 200 and [`settlement_payload`].
pub fn settlement_reply(settled: bool) -> DeviceReply {
    DeviceReply::new(STATUS_OK, settlement_payload(settled), Vec::new())
}

/// The reply to a pull (`devices/{id}/messages/receive`): the locked message
/// (payload its body, user properties as a delivery's) with `__stat` 200, or
/// an empty payload with `__stat` 204 when no message is Enqueued.
pub fn pull_reply(pulled: Option<(&Delivery<'_>, &[u8])>) -> DeviceReply {
    match pulled {
        Some((delivery, body)) => {
            DeviceReply::new(STATUS_OK, body.to_vec(), delivery_user_properties(delivery))
        }
        None => DeviceReply::new(STATUS_NO_CONTENT, Vec::new(), Vec::new()),
    }
}

pub use statestore_vocab::devicebound::QueueStats;

/// `*4\r\n:<enqueued>\r\n:<invisible>\r\n:<deadlettered>\r\n:<oldest or -1>\r\n`.
pub fn encode_queue_stats(stats: &QueueStats) -> Vec<u8> {
    let oldest = stats.oldest_enqueued_ms.map_or(-1, saturating_integer);
    let mut payload = b"*4\r\n".to_vec();
    for number in [
        i64::from(stats.enqueued),
        i64::from(stats.invisible),
        i64::from(stats.dead_lettered),
        oldest,
    ] {
        payload.extend(Reply::Integer(number).encode());
    }
    payload
}

/// One dead letter in a `DEADLETTERS` reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadLetterEntry<'a> {
    /// The SEND's message id.
    pub message_id: &'a str,
    /// The body.
    pub body: &'a [u8],
    /// Why it was dead-lettered.
    pub reason: DeadLetterReason,
    /// When it was dead-lettered, ms since the epoch.
    pub dead_lettered_at_ms: u64,
}

/// `*<k>\r\n` then per entry, oldest first as given,
/// `*4\r\n$<n>\r\n<messageId>\r\n$<n>\r\n<body>\r\n$<n>\r\n<reason>\r\n:<time ms>\r\n`.
pub fn encode_dead_letters(entries: &[DeadLetterEntry<'_>]) -> Vec<u8> {
    let mut payload = format!("*{}\r\n", entries.len()).into_bytes();
    for entry in entries {
        payload.extend_from_slice(b"*4\r\n");
        encode_bulk(&mut payload, entry.message_id.as_bytes());
        encode_bulk(&mut payload, entry.body);
        encode_bulk(&mut payload, entry.reason.as_str().as_bytes());
        payload.extend(Reply::Integer(saturating_integer(entry.dead_lettered_at_ms)).encode());
    }
    payload
}

/// A count or time as a RESP integer (`i64`), saturating (never reached).
fn saturating_integer(number: u64) -> i64 {
    i64::try_from(number).unwrap_or(i64::MAX)
}
