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
            check(
                &m,
                now,
                &ReplyTopics::default(),
                &RequesterIdentity::Claimed
            ),
            Err(expected),
            "§1 {name}"
        );
    }
    assert!(
        check(
            &message(),
            now,
            &ReplyTopics::default(),
            &RequesterIdentity::Claimed
        )
        .is_ok()
    );
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
    let unsupported = |requested: &str| {
        Err(UnsupportedVersion {
            requested: requested.to_owned(),
        })
    };
    assert_eq!(with(Some("2.0")), unsupported("2.0"));
    assert_eq!(with(Some("x")), unsupported("x"));
}

#[test]
fn section_1_2_reply_carries_every_required_property() {
    let m = message();
    let envelope = check(
        &m,
        Instant::now(),
        &ReplyTopics::default(),
        &RequesterIdentity::Claimed,
    )
    .expect("valid");
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

fn vouched() -> RequesterIdentity {
    RequesterIdentity::Vouched {
        property: "__ssVouchedId".to_owned(),
    }
}

#[test]
fn a_broker_vouched_identity_replaces_the_claimed_one() {
    let mut m = message();
    m.user_properties
        .push(("__ssVouchedId".to_owned(), "alice".to_owned()));
    let topics = ReplyTopics::default();
    let claimed = check(&m, Instant::now(), &topics, &RequesterIdentity::Claimed).expect("valid");
    assert_eq!(
        claimed.client_id.as_deref(),
        Some("c1"),
        "claimed ignores the property"
    );
    let envelope = check(&m, Instant::now(), &topics, &vouched()).expect("valid");
    assert_eq!(envelope.client_id.as_deref(), Some("alice"));
}

#[test]
fn without_a_vouched_identity_a_request_gets_no_reply() {
    let topics = ReplyTopics::default();
    let cases: [(&str, Vec<(&str, &str)>); 4] = [
        ("no property", vec![("__srcId", "c1")]),
        ("empty property", vec![("__ssVouchedId", "")]),
        ("another name", vec![("__ssvouchedid", "alice")]),
        ("only __srcId", vec![("__srcId", "alice")]),
    ];
    for (case, properties) in cases {
        let mut m = message();
        m.user_properties = properties
            .into_iter()
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
            .collect();
        assert_eq!(
            check(&m, Instant::now(), &topics, &vouched()),
            Err(Refusal::NoVouchedIdentity),
            "{case}"
        );
    }
}

#[test]
fn envelope_refusals_come_before_the_identity_check() {
    let mut m = message();
    m.qos = 0;
    assert_eq!(
        check(&m, Instant::now(), &ReplyTopics::default(), &vouched()),
        Err(Refusal::Qos0)
    );
}
