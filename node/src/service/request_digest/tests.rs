use super::*;
use crate::transport::{DEVICEBOUND_REQUEST_TOPIC, REQUEST_TOPIC};

fn message(topic: &str, payload: &[u8], properties: &[(&str, &str)]) -> InboundMessage {
    InboundMessage {
        topic: topic.to_owned(),
        qos: 1,
        response_topic: Some("clients/c/resp".to_owned()),
        correlation_data: Some(bytes::Bytes::from_static(b"corr")),
        message_expiry_secs: Some(10),
        content_type: None,
        user_properties: properties
            .iter()
            .map(|&(n, v)| (n.to_owned(), v.to_owned()))
            .collect(),
        payload: bytes::Bytes::copy_from_slice(payload),
        received_at: tokio::time::Instant::now(),
    }
}

#[test]
fn what_a_retry_may_change_does_not_count_and_what_changes_the_effect_does() {
    let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n".as_slice();
    let base = message(REQUEST_TOPIC, set, &[("__ts", "1:0:c"), ("__ft", "5:0:c")]);
    let digest = |m: &InboundMessage| request_digest(m, EffectProperties::StateStore);
    let original = digest(&base);
    // A retry: the same PUBLISH, or one whose stamp, trace or identity properties changed.
    for retry in [
        base.clone(),
        message(
            REQUEST_TOPIC,
            set,
            &[
                ("__ts", "2:0:c"),
                ("__ft", "5:0:c"),
                ("traceparent", "00-x-y-01"),
                ("tracestate", "a=b"),
                ("__srcId", "c"),
                ("__protVer", "1.0"),
                ("__fwd", "node-2"),
            ],
        ),
        InboundMessage {
            correlation_data: Some(bytes::Bytes::from_static(b"other")),
            message_expiry_secs: None,
            ..base.clone()
        },
    ] {
        assert_eq!(digest(&retry), original, "{retry:?}");
    }
    // Another request: other payload, other fencing token, none, other topic.
    for other in [
        message(
            REQUEST_TOPIC,
            b"*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n",
            &[("__ft", "5:0:c")],
        ),
        message(REQUEST_TOPIC, set, &[("__ft", "6:0:c")]),
        message(REQUEST_TOPIC, set, &[]),
        message(DEVICEBOUND_REQUEST_TOPIC, set, &[("__ft", "5:0:c")]),
    ] {
        assert_ne!(digest(&other), original, "{other:?}");
    }
    // Fields are length-prefixed: moving bytes from the topic to the payload changes it.
    assert_ne!(
        request_digest(&message("ab", b"c", &[]), EffectProperties::None),
        request_digest(&message("a", b"bc", &[]), EffectProperties::None)
    );
}

#[test]
fn a_send_counts_its_application_properties_in_order() {
    let send = b"*4\r\n$4\r\nSEND\r\n$1\r\nd\r\n$1\r\nm\r\n$1\r\nb\r\n".as_slice();
    let digest = |properties: &[(&str, &str)]| {
        request_digest(
            &message(DEVICEBOUND_REQUEST_TOPIC, send, properties),
            EffectProperties::DeviceSend,
        )
    };
    let original = digest(&[("color", "red"), ("size", "L"), ("__ts", "1:0:c")]);
    assert_eq!(
        digest(&[("color", "red"), ("size", "L"), ("__ts", "9:0:c")]),
        original
    );
    assert_ne!(digest(&[("color", "blue"), ("size", "L")]), original);
    assert_ne!(digest(&[("size", "L"), ("color", "red")]), original);
    assert_ne!(digest(&[("color", "red")]), original);
    // Outside a SEND the same properties change nothing.
    assert_eq!(
        request_digest(
            &message(DEVICEBOUND_REQUEST_TOPIC, b"x", &[("color", "red")]),
            EffectProperties::None
        ),
        request_digest(
            &message(DEVICEBOUND_REQUEST_TOPIC, b"x", &[]),
            EffectProperties::None
        )
    );
}
