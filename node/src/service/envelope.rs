//! The MQTT 5 envelope rules of protocol §1: which requests get no reply at all, who the
//! requester is, which protocol version it speaks, and the properties of every reply.
//! Pure functions of the received message, the current instant (a [`tokio::time::Instant`],
//! like [`InboundMessage::received_at`]) and where replies may go ([`ReplyTopics`]).

use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::reply_topic::ReplyTopics;
use crate::transport::{InboundMessage, OutboundKind, OutboundMessage};

/// Content type of every reply and notification (§1.2, §7).
pub const CONTENT_TYPE: &str = "application/octet-stream";
/// The protocol version we speak.
pub const PROTOCOL_VERSION: &str = "1.0";

pub use crate::verdict::Refusal;

/// What a valid request's envelope says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// Where to answer (exactly this topic, §1).
    pub response_topic: String,
    /// Echoed unchanged.
    pub correlation_data: Bytes,
    /// When the request expires, if it has a Message Expiry.
    pub deadline: Option<Instant>,
    /// Who asks, if it can be known: the client id it claims (§1.1 `__srcId`), or the identity
    /// the broker vouches for ([`RequesterIdentity`]).
    pub client_id: Option<String>,
}

/// Who a state store or device-bound service request comes from (`auth.identity`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequesterIdentity {
    /// What the client claims ([`client_id`]): `__srcId`, else its response topic's
    /// `clients/<id>/`.
    Claimed,
    /// The value of this user property, which the broker's statestore plugin writes (after
    /// removing any copy the client sent); a request without it is refused.
    Vouched {
        /// The property's name (`auth.vouched_property`).
        property: String,
    },
}

/// Checks the envelope of `message` at `now` (§1, §5.2); its Response Topic must be one
/// `reply_topics` allows, and its requester known as `identity` says.
pub fn check(
    message: &InboundMessage,
    now: Instant,
    reply_topics: &ReplyTopics,
    identity: &RequesterIdentity,
) -> Result<Envelope, Refusal> {
    let mut envelope = check_with(message, now, |topic| reply_topics.allows(topic))?;
    if let RequesterIdentity::Vouched { property } = identity {
        // The plugin removes the client's copies and appends its own: exactly one is left.
        let vouched = message
            .user_properties
            .iter()
            .rev()
            .find(|(name, _)| name == property)
            .map(|(_, value)| value)
            .filter(|value| !value.is_empty());
        let Some(vouched) = vouched else {
            return Err(Refusal::NoVouchedIdentity);
        };
        envelope.client_id = Some(vouched.clone());
    }
    Ok(envelope)
}

/// The envelope of a pull or settlement `device_id` published (devicebound.md §3): `Ok(None)`
/// when it has none that could be answered (a settlement needs none; a pull without one is
/// dropped), `Err` when its Response Topic is one no reply may go to (the publish is refused).
pub fn check_device(
    message: &InboundMessage,
    now: Instant,
    device_id: &str,
    reply_topics: &ReplyTopics,
) -> Result<Option<Envelope>, Refusal> {
    match check_with(message, now, |topic| {
        reply_topics.allows_device(device_id, topic)
    }) {
        Ok(envelope) => Ok(Some(envelope)),
        Err(Refusal::ForbiddenResponseTopic) => Err(Refusal::ForbiddenResponseTopic),
        Err(_) => Ok(None),
    }
}

fn check_with(
    message: &InboundMessage,
    now: Instant,
    allowed: impl Fn(&str) -> bool,
) -> Result<Envelope, Refusal> {
    if message.qos == 0 {
        return Err(Refusal::Qos0);
    }
    let response_topic = match &message.response_topic {
        Some(topic) if !topic.is_empty() => topic,
        _ => return Err(Refusal::NoResponseTopic),
    };
    let Some(correlation_data) = message.correlation_data.clone() else {
        return Err(Refusal::NoCorrelationData);
    };
    if !allowed(response_topic) {
        return Err(Refusal::ForbiddenResponseTopic);
    }
    let deadline = message
        .message_expiry_secs
        .map(|secs| message.received_at + Duration::from_secs(u64::from(secs)));
    if deadline.is_some_and(|d| d <= now) {
        return Err(Refusal::Expired);
    }
    Ok(Envelope {
        response_topic: response_topic.clone(),
        correlation_data,
        deadline,
        client_id: client_id(message.user_property("__srcId"), response_topic),
    })
}

/// The requester id: `__srcId`, else the `{id}` of a `clients/{id}/...` response topic
/// (hex-decoded for the Go SDK's `clients/{HEX(id)}/statestore/.../response` form).
pub fn client_id(source_id: Option<&str>, response_topic: &str) -> Option<String> {
    if let Some(id) = source_id.filter(|id| !id.is_empty()) {
        return Some(id.to_owned());
    }
    let mut levels = response_topic.split('/');
    if levels.next() != Some("clients") {
        return None;
    }
    let id = levels.next().filter(|id| !id.is_empty())?;
    let go_form = levels.next() == Some("statestore") && response_topic.ends_with("/response");
    if go_form
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
        && let Ok(bytes) = hex::decode(id)
        && let Ok(decoded) = String::from_utf8(bytes)
    {
        return Some(decoded);
    }
    Some(id.to_owned())
}

/// A request's `__protVer` names a major version other than 1 (§5.3): answered `__stat` 505
/// with the version it asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported protocol version {requested:?}")]
pub struct UnsupportedVersion {
    /// The `__protVer` the request carried.
    pub requested: String,
}

/// Refuses a `__protVer` whose major version is not 1 (§5.3).
pub fn check_protocol_version(message: &InboundMessage) -> Result<(), UnsupportedVersion> {
    let Some(requested) = message.user_property("__protVer") else {
        return Ok(());
    };
    let major = requested.split('.').next().unwrap_or_default();
    if major == "1" {
        Ok(())
    } else {
        Err(UnsupportedVersion {
            requested: requested.to_owned(),
        })
    }
}

/// Seconds left until `deadline`, rounded up (§1.2); `None` without a deadline, `Some(0)`
/// once it passed.
pub fn remaining_expiry_secs(deadline: Option<Instant>, now: Instant) -> Option<u32> {
    let left = deadline?.saturating_duration_since(now);
    let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
    Some(u32::try_from(secs).unwrap_or(u32::MAX))
}

/// A state store reply (`__stat` 200) to `envelope` (§1.2).
pub fn reply(
    envelope: &Envelope,
    payload: Vec<u8>,
    version: Option<String>,
    node_client_id: &str,
    expiry_secs: Option<u32>,
) -> OutboundMessage {
    let mut user_properties = vec![
        ("__stat".into(), "200".to_owned()),
        ("__protVer".into(), PROTOCOL_VERSION.to_owned()),
    ];
    if let Some(version) = version {
        user_properties.push(("__ts".into(), version));
    }
    user_properties.push(("__srcId".into(), node_client_id.to_owned()));
    OutboundMessage {
        topic: envelope.response_topic.clone(),
        payload: Bytes::from(payload),
        correlation_data: Some(envelope.correlation_data.clone()),
        response_topic: None,
        message_expiry_secs: expiry_secs,
        content_type: Some(CONTENT_TYPE),
        user_properties,
        kind: OutboundKind::Response,
    }
}

/// The `__stat` 505 reply to a request for another protocol major version (§5.3).
pub fn unsupported_version(
    envelope: &Envelope,
    requested: String,
    expiry_secs: Option<u32>,
) -> OutboundMessage {
    OutboundMessage {
        topic: envelope.response_topic.clone(),
        payload: Bytes::new(),
        correlation_data: Some(envelope.correlation_data.clone()),
        response_topic: None,
        message_expiry_secs: expiry_secs,
        content_type: None,
        user_properties: vec![
            ("__stat".into(), "505".to_owned()),
            ("__protVer".into(), PROTOCOL_VERSION.to_owned()),
            ("__supProtMajVer".into(), "1".to_owned()),
            ("__requestProtVer".into(), requested),
        ],
        kind: OutboundKind::Response,
    }
}

#[cfg(test)]
mod tests;
