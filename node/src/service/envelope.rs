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
    /// The requester's client id, if it can be known (§1.1 `__srcId`).
    pub client_id: Option<String>,
}

/// Checks the envelope of `message` at `now` (§1, §5.2); its Response Topic must be one
/// `reply_topics` allows.
pub fn check(
    message: &InboundMessage,
    now: Instant,
    reply_topics: &ReplyTopics,
) -> Result<Envelope, Refusal> {
    check_with(message, now, |topic| reply_topics.allows(topic))
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

/// `Err(requested)` when `__protVer` names a major version other than 1 (§5.3).
pub fn check_protocol_version(message: &InboundMessage) -> Result<(), String> {
    let Some(requested) = message.user_property("__protVer") else {
        return Ok(());
    };
    let major = requested.split('.').next().unwrap_or_default();
    if major == "1" {
        Ok(())
    } else {
        Err(requested.to_owned())
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
mod tests {
    use super::*;
    use crate::transport::{NOTIFY_TOPIC_PREFIX, REQUEST_TOPIC};

    fn message() -> InboundMessage {
        InboundMessage {
            topic: REQUEST_TOPIC.to_owned(),
            qos: 1,
            response_topic: Some(
                "clients/c1/services/statestore/v1/x/command/invoke/response".to_owned(),
            ),
            correlation_data: Some(Bytes::from_static(&[1; 16])),
            message_expiry_secs: Some(10),
            content_type: Some(CONTENT_TYPE.to_owned()),
            user_properties: vec![("__srcId".to_owned(), "c1".to_owned())],
            payload: Bytes::new(),
            received_at: Instant::now(),
        }
    }

    #[test]
    fn section_1_requests_without_a_way_to_answer_get_no_reply() {
        let now = Instant::now();
        type Mutate = Box<dyn Fn(&mut InboundMessage)>;
        let cases: Vec<(&str, Mutate, Refusal)> = vec![
            ("QoS 0", Box::new(|m| m.qos = 0), Refusal::Qos0),
            (
                "no response topic",
                Box::new(|m| m.response_topic = None),
                Refusal::NoResponseTopic,
            ),
            (
                "empty response topic",
                Box::new(|m| m.response_topic = Some(String::new())),
                Refusal::NoResponseTopic,
            ),
            (
                "no correlation data",
                Box::new(|m| m.correlation_data = None),
                Refusal::NoCorrelationData,
            ),
            (
                "response topic = request topic",
                Box::new(|m| m.response_topic = Some(REQUEST_TOPIC.to_owned())),
                Refusal::ForbiddenResponseTopic,
            ),
            (
                "response topic under the notify prefix",
                Box::new(|m| {
                    m.response_topic = Some(format!("{NOTIFY_TOPIC_PREFIX}/41/command/notify/42"))
                }),
                Refusal::ForbiddenResponseTopic,
            ),
            (
                "wildcard response topic",
                Box::new(|m| m.response_topic = Some("clients/#".to_owned())),
                Refusal::ForbiddenResponseTopic,
            ),
            (
                "response topic outside the reply prefixes",
                Box::new(|m| m.response_topic = Some("replies/c1".to_owned())),
                Refusal::ForbiddenResponseTopic,
            ),
            (
                "response topic on a device's delivery topic",
                Box::new(|m| {
                    m.response_topic =
                        Some("devices/victim/messages/devicebound/%24.mid=x&%24.lt=y".to_owned())
                }),
                Refusal::ForbiddenResponseTopic,
            ),
            (
                "response topic on the feedback topic",
                Box::new(|m| m.response_topic = Some("messages/servicebound/feedback".to_owned())),
                Refusal::ForbiddenResponseTopic,
            ),
            (
                "expired before being taken up",
                Box::new(|m| {
                    m.message_expiry_secs = Some(1);
                    m.received_at = Instant::now() - Duration::from_secs(2);
                }),
                Refusal::Expired,
            ),
        ];
        for (name, mutate, expected) in cases {
            let mut m = message();
            mutate(&mut m);
            assert_eq!(
                check(&m, now, &ReplyTopics::default()),
                Err(expected),
                "§1 {name}"
            );
        }
        assert!(check(&message(), now, &ReplyTopics::default()).is_ok());
    }

    /// devicebound.md §3: a pull or settlement is answered under the device's own
    /// `devices/{id}/` or the reply prefixes; a forbidden Response Topic refuses the publish,
    /// a missing envelope only means no reply.
    #[test]
    fn devicebound_3_device_envelopes() {
        let now = Instant::now();
        let topics = ReplyTopics::default();
        let with = |topic: Option<&str>| {
            let mut m = message();
            m.topic = "devices/d1/messages/receive".to_owned();
            m.response_topic = topic.map(str::to_owned);
            check_device(&m, now, "d1", &topics)
        };
        let own = with(Some("devices/d1/replies")).expect("own space");
        assert_eq!(
            own.map(|e| e.response_topic).as_deref(),
            Some("devices/d1/replies")
        );
        assert!(matches!(with(Some("clients/d1/pull")), Ok(Some(_))));
        assert_eq!(with(None), Ok(None), "no envelope: settled without a reply");
        for forbidden in [
            "devices/d2/replies",
            "devices/d1/messages/devicebound/%24.mid=x",
            "devices/d1/messages/receive",
            "messages/servicebound/feedback",
        ] {
            assert_eq!(
                with(Some(forbidden)),
                Err(Refusal::ForbiddenResponseTopic),
                "{forbidden}"
            );
        }
    }

    #[test]
    fn section_1_1_client_id_from_src_id_or_each_sdk_response_topic() {
        let rust = "clients/rust-client/services/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke/response";
        let go = "clients/676F2D636C69656E74/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke/response";
        let dotnet =
            "clients/net-client/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke";
        assert_eq!(client_id(Some("src"), rust).as_deref(), Some("src"));
        assert_eq!(client_id(None, rust).as_deref(), Some("rust-client"));
        assert_eq!(client_id(None, go).as_deref(), Some("go-client"));
        assert_eq!(client_id(None, dotnet).as_deref(), Some("net-client"));
        assert_eq!(client_id(Some(""), "other/topic"), None);
        assert_eq!(client_id(None, "clients//x"), None);
    }

    #[test]
    fn section_5_3_protocol_major_version_must_be_1() {
        let with = |v: Option<&str>| {
            let mut m = message();
            if let Some(v) = v {
                m.user_properties
                    .push(("__protVer".to_owned(), v.to_owned()));
            }
            check_protocol_version(&m)
        };
        assert_eq!(with(None), Ok(()));
        assert_eq!(with(Some("1.0")), Ok(()));
        assert_eq!(with(Some("1.7")), Ok(()));
        assert_eq!(with(Some("2.0")), Err("2.0".to_owned()));
        assert_eq!(with(Some("x")), Err("x".to_owned()));
    }

    #[test]
    fn section_1_2_reply_carries_every_required_property() {
        let m = message();
        let envelope = check(&m, Instant::now(), &ReplyTopics::default()).expect("valid");
        let out = reply(
            &envelope,
            b"+OK\r\n".to_vec(),
            Some("v".to_owned()),
            "node-1",
            Some(3),
        );
        assert_eq!(out.topic, envelope.response_topic);
        assert_eq!(out.correlation_data, m.correlation_data);
        assert_eq!(out.content_type, Some(CONTENT_TYPE));
        assert_eq!(out.message_expiry_secs, Some(3));
        let props: Vec<(&str, &str)> = out
            .user_properties
            .iter()
            .map(|(k, v)| (k.as_ref(), v.as_str()))
            .collect();
        assert!(props.contains(&("__stat", "200")));
        assert!(props.contains(&("__protVer", "1.0")));
        assert!(props.contains(&("__ts", "v")));
        let miss = reply(&envelope, b"$-1\r\n".to_vec(), None, "node-1", None);
        assert!(
            !miss.user_properties.iter().any(|(k, _)| *k == "__ts"),
            "§1.2 no __ts on a GET miss"
        );
    }

    #[test]
    fn section_1_2_remaining_expiry_rounds_up() {
        let now = Instant::now();
        assert_eq!(remaining_expiry_secs(None, now), None);
        assert_eq!(
            remaining_expiry_secs(Some(now + Duration::from_millis(1_200)), now),
            Some(2)
        );
        assert_eq!(
            remaining_expiry_secs(Some(now + Duration::from_secs(3)), now),
            Some(3)
        );
        assert_eq!(remaining_expiry_secs(Some(now), now), Some(0));
    }
}
