//! A message on its way to a device (devicebound.md §3): the delivery topic
//! `devices/{id}/messages/devicebound/{property bag}` with IoT Hub's URL-encoded
//! property bag, the same pairs as MQTT 5 user properties, and the Message
//! Expiry Interval.
//!
//! The bag is `key=value` pairs joined by `&`: `$.mid`, `$.lt`, `$.exp`, then
//! `$.ct` and `$.ce` when set, then the application properties in order. Keys
//! and values are percent-encoded byte by byte (UTF-8), everything but RFC
//! 3986's unreserved `A-Z a-z 0-9 - . _ ~` as `%XX` with upper-case hex, so
//! `$.mid` is `%24.mid` and a bag never contains `/`, `+` or `#`.
//!
//! **Topic length.** An MQTT topic is at most 65,535 bytes. A message whose
//! delivery topic could exceed that is refused when it is sent: SEND answers
//! `message too large` ([`check_delivery_fits`], which assumes the longest
//! possible lock token, so any token the node issues later fits).
//! [`delivery_topic`] still checks and returns the same error rather than a
//! topic the broker would refuse; a caller that gets it dead-letters the
//! message instead of publishing.

use super::ids::MAX_LOCK_TOKEN_BYTES;
use super::request::{ApplicationProperty, SendRequest};
use super::time::format_utc_millis;
use crate::ProtocolError;

/// The longest MQTT topic name, in bytes (MQTT 5 §1.5.4: a two-byte length).
pub const MAX_TOPIC_BYTES: usize = statestore_vocab::spec::MAX_MQTT_TOPIC_BYTES;

/// User property and bag key of the message id.
pub const MESSAGE_ID_PROPERTY: &str = "$.mid";
/// User property and bag key of the lock token.
pub const LOCK_TOKEN_PROPERTY: &str = "$.lt";
/// User property and bag key of the expiry time (ISO 8601 UTC).
pub const EXPIRY_PROPERTY: &str = "$.exp";
/// User property and bag key of the content type.
pub const CONTENT_TYPE_PROPERTY: &str = "$.ct";
/// User property and bag key of the content encoding.
pub const CONTENT_ENCODING_PROPERTY: &str = "$.ce";

/// Everything a delivery publish (or a pull reply) says about a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery<'a> {
    /// The device's id (one topic level; see [`super::ids::validate_device_id`]).
    pub device_id: &'a str,
    /// The sender's message id.
    pub message_id: &'a str,
    /// The lock token of this delivery.
    pub lock_token: &'a str,
    /// Absolute expiry, milliseconds since the Unix epoch.
    pub expires_at_ms: u64,
    /// `CONTENTTYPE` of the SEND.
    pub content_type: Option<&'a str>,
    /// `CONTENTENCODING` of the SEND.
    pub content_encoding: Option<&'a str>,
    /// The SEND's application properties, in order.
    pub application_properties: &'a [ApplicationProperty],
}

/// The fixed part of every delivery topic before the device id.
const DEVICES_PREFIX: &str = "devices/";
/// The fixed part between the device id and the property bag.
const DEVICEBOUND_INFIX: &str = "/messages/devicebound/";

/// The `(key, value)` pairs of a delivery, in bag order, handed to `use_pairs`
/// (the formatted expiry lives only for the call).
fn with_pairs<R>(delivery: &Delivery<'_>, use_pairs: impl FnOnce(&[(&str, &str)]) -> R) -> R {
    let expiry = format_utc_millis(delivery.expires_at_ms);
    let mut pairs = vec![
        (MESSAGE_ID_PROPERTY, delivery.message_id),
        (LOCK_TOKEN_PROPERTY, delivery.lock_token),
        (EXPIRY_PROPERTY, expiry.as_str()),
    ];
    if let Some(content_type) = delivery.content_type {
        pairs.push((CONTENT_TYPE_PROPERTY, content_type));
    }
    if let Some(content_encoding) = delivery.content_encoding {
        pairs.push((CONTENT_ENCODING_PROPERTY, content_encoding));
    }
    pairs.extend(
        delivery
            .application_properties
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str())),
    );
    use_pairs(&pairs)
}

/// The URL-encoded property bag, e.g.
/// `%24.mid=m1&%24.lt=t&%24.exp=2024-01-02T03%3A04%3A05.678Z&color=red`.
pub fn property_bag(delivery: &Delivery<'_>) -> String {
    with_pairs(delivery, |pairs| {
        let mut bag = String::with_capacity(encoded_bag_len(pairs));
        push_bag(&mut bag, pairs);
        bag
    })
}

/// Appends the encoded bag of `pairs` to `out`.
fn push_bag(out: &mut String, pairs: &[(&str, &str)]) {
    for (index, (key, value)) in pairs.iter().enumerate() {
        if index > 0 {
            out.push('&');
        }
        percent_encode_into(out, key);
        out.push('=');
        percent_encode_into(out, value);
    }
}

/// The exact length of the delivery topic of `pairs`, computed without building it.
fn topic_len(device_id: &str, pairs: &[(&str, &str)]) -> usize {
    DEVICES_PREFIX.len() + device_id.len() + DEVICEBOUND_INFIX.len() + encoded_bag_len(pairs)
}

/// The delivery topic of `pairs`, or [`ProtocolError::MessageTooLarge`].
fn topic_of(device_id: &str, pairs: &[(&str, &str)]) -> Result<String, ProtocolError> {
    let topic_len = topic_len(device_id, pairs);
    if topic_len > MAX_TOPIC_BYTES {
        return Err(ProtocolError::MessageTooLarge);
    }
    let mut topic = String::with_capacity(topic_len);
    topic.push_str(DEVICES_PREFIX);
    topic.push_str(device_id);
    topic.push_str(DEVICEBOUND_INFIX);
    push_bag(&mut topic, pairs);
    Ok(topic)
}

/// `devices/{deviceId}/messages/devicebound/{property bag}`, or
/// [`ProtocolError::MessageTooLarge`] when that is over [`MAX_TOPIC_BYTES`]
/// (see the module notes).
pub fn delivery_topic(delivery: &Delivery<'_>) -> Result<String, ProtocolError> {
    with_pairs(delivery, |pairs| topic_of(delivery.device_id, pairs))
}

/// The delivery's pairs as MQTT 5 user properties, unencoded and in bag order:
/// `$.mid`, `$.lt`, `$.exp`, `$.ct`/`$.ce` when set, then the application
/// properties.
pub fn delivery_user_properties(delivery: &Delivery<'_>) -> Vec<(String, String)> {
    with_pairs(delivery, owned_pairs)
}

/// `pairs` as owned strings (MQTT user properties).
fn owned_pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|&(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
}

/// The topic and user properties of a delivery publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryHeaders {
    /// [`delivery_topic`].
    pub topic: String,
    /// [`delivery_user_properties`].
    pub user_properties: Vec<(String, String)>,
}

/// [`delivery_topic`] and [`delivery_user_properties`] from one pass over the pairs (one
/// expiry formatted): what a push publishes.
pub fn delivery_headers(delivery: &Delivery<'_>) -> Result<DeliveryHeaders, ProtocolError> {
    with_pairs(delivery, |pairs| {
        Ok(DeliveryHeaders {
            topic: topic_of(delivery.device_id, pairs)?,
            user_properties: owned_pairs(pairs),
        })
    })
}

/// The Message Expiry Interval of a delivery publish: the remaining TTL in
/// whole seconds, rounded up, at least 1 (a message due now still gets one
/// second rather than none, which MQTT would read as "never expires").
pub fn message_expiry_interval_secs(expires_at_ms: u64, now_ms: u64) -> u32 {
    let remaining_secs = expires_at_ms.saturating_sub(now_ms).div_ceil(1_000);
    u32::try_from(remaining_secs).unwrap_or(u32::MAX).max(1)
}

/// Whether every delivery of `send` with `application_properties` fits in an
/// MQTT topic, whatever lock token and expiry it gets;
/// [`ProtocolError::MessageTooLarge`] otherwise (see the module notes). Costs
/// no allocation proportional to the properties.
pub fn check_delivery_fits(
    send: &SendRequest<'_>,
    application_properties: &[ApplicationProperty],
) -> Result<(), ProtocolError> {
    /// A lock token of the longest length whose bytes all need `%XX`.
    const WORST_LOCK_TOKEN: &str =
        "%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%";
    const _: () = assert!(WORST_LOCK_TOKEN.len() == MAX_LOCK_TOKEN_BYTES);
    let worst_case = Delivery {
        device_id: send.device_id,
        message_id: send.message_id,
        lock_token: WORST_LOCK_TOKEN,
        expires_at_ms: 0,
        content_type: send.content_type,
        content_encoding: send.content_encoding,
        application_properties,
    };
    if with_pairs(&worst_case, |pairs| topic_len(worst_case.device_id, pairs)) > MAX_TOPIC_BYTES {
        return Err(ProtocolError::MessageTooLarge);
    }
    Ok(())
}

/// The length of the encoded bag of `pairs`: each pair's encoded key and value
/// with its `=`, and one `&` between pairs. Every expiry encodes to the same
/// length (fixed-width digits, its two `:` as `%3A`), so the expiry chosen for a
/// length estimate does not matter.
fn encoded_bag_len(pairs: &[(&str, &str)]) -> usize {
    let pairs_len: usize = pairs
        .iter()
        .map(|(key, value)| percent_encoded_len(key) + 1 + percent_encoded_len(value))
        .sum();
    pairs_len + pairs.len().saturating_sub(1)
}

/// Whether RFC 3986 leaves `byte` as it is (unreserved: `A-Z a-z 0-9 - . _ ~`).
fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

/// The length of `text` once percent-encoded.
fn percent_encoded_len(text: &str) -> usize {
    text.bytes()
        .map(|byte| if is_unreserved(byte) { 1 } else { 3 })
        .sum()
}

/// Appends `text` percent-encoded (RFC 3986 unreserved set, upper-case hex).
pub fn percent_encode_into(out: &mut String, text: &str) {
    const HEX_DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    for byte in text.bytes() {
        if is_unreserved(byte) {
            out.push(char::from(byte));
        } else {
            out.push('%');
            out.push(char::from(HEX_DIGITS[usize::from(byte >> 4)]));
            out.push(char::from(HEX_DIGITS[usize::from(byte & 0x0F)]));
        }
    }
}
