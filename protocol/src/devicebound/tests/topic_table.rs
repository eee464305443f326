//! Device topics (devicebound.md §3): settle, receive, activity, and every
//! malformed shape, which must be a typed error and never a panic.

use crate::devicebound::topic::{
    DEVICE_INBOUND_FILTER, DeviceTopic, DeviceTopicError, SettleAction, device_activity,
    device_subscription_filter, parse_device_topic,
};

type Expected = Result<DeviceTopic<'static>, DeviceTopicError>;

fn settle(device_id: &'static str, action: SettleAction, lock_token: &'static str) -> Expected {
    Ok(DeviceTopic::Settle {
        device_id,
        action,
        lock_token,
    })
}

#[test]
fn section_3_topic_table() {
    use DeviceTopicError::*;
    use SettleAction::*;
    let token_64 = "t".repeat(64);
    let token_65 = "t".repeat(65);
    let id_128 = "d".repeat(128);
    let id_129 = "d".repeat(129);
    let settle_64 = format!("devices/d1/messages/settle/complete/{token_64}");
    let settle_65 = format!("devices/d1/messages/settle/complete/{token_65}");
    let receive_128 = format!("devices/{id_128}/messages/receive");
    let receive_129 = format!("devices/{id_129}/messages/receive");
    let cases: Vec<(&str, &str, Expected)> = vec![
        // --- well-formed ---
        (
            "§3 complete",
            "devices/d1/messages/settle/complete/lt1",
            settle("d1", Complete, "lt1"),
        ),
        (
            "§3 abandon",
            "devices/d1/messages/settle/abandon/lt1",
            settle("d1", Abandon, "lt1"),
        ),
        (
            "§3 reject",
            "devices/d1/messages/settle/reject/lt1",
            settle("d1", Reject, "lt1"),
        ),
        (
            "§1 token with printable punctuation",
            "devices/d1/messages/settle/complete/a!\"$%&'()*,-.:;<=>?@[\\]^_`{|}~",
            settle("d1", Complete, "a!\"$%&'()*,-.:;<=>?@[\\]^_`{|}~"),
        ),
        (
            "§1 device id with every punctuation",
            "devices/-.%_*?!(),:=@$'/messages/receive",
            Ok(DeviceTopic::Receive {
                device_id: "-.%_*?!(),:=@$'",
            }),
        ),
        (
            "§3 receive",
            "devices/d1/messages/receive",
            Ok(DeviceTopic::Receive { device_id: "d1" }),
        ),
        (
            "§3 activity: events",
            "devices/d1/messages/events",
            Ok(DeviceTopic::Activity { device_id: "d1" }),
        ),
        (
            "§3 activity: IoT Hub telemetry with a bag",
            "devices/d1/messages/events/a=b&c=d",
            Ok(DeviceTopic::Activity { device_id: "d1" }),
        ),
        (
            "§3 activity: empty level",
            "devices/d1/messages/",
            Ok(DeviceTopic::Activity { device_id: "d1" }),
        ),
        (
            "§3 activity: Receive is not receive",
            "devices/d1/messages/Receive",
            Ok(DeviceTopic::Activity { device_id: "d1" }),
        ),
        (
            "§3 activity: settles is not settle",
            "devices/d1/messages/settles/complete/t",
            Ok(DeviceTopic::Activity { device_id: "d1" }),
        ),
        (
            "§3 activity: deviceboundx",
            "devices/d1/messages/deviceboundx",
            Ok(DeviceTopic::Activity { device_id: "d1" }),
        ),
        // --- malformed settle ---
        (
            "§3 settle alone",
            "devices/d1/messages/settle",
            Err(MalformedSettle),
        ),
        (
            "§3 settle/",
            "devices/d1/messages/settle/",
            Err(MalformedSettle),
        ),
        (
            "§3 settle without token",
            "devices/d1/messages/settle/complete",
            Err(MalformedSettle),
        ),
        (
            "§3 settle with extra level",
            "devices/d1/messages/settle/complete/t/x",
            Err(MalformedSettle),
        ),
        (
            "§3 settle with trailing slash",
            "devices/d1/messages/settle/complete/t/",
            Err(MalformedSettle),
        ),
        (
            "§3 settle unknown action",
            "devices/d1/messages/settle/accept/t",
            Err(UnknownSettleAction),
        ),
        (
            "§3 settle action is case-sensitive",
            "devices/d1/messages/settle/Complete/t",
            Err(UnknownSettleAction),
        ),
        (
            "§3 settle empty action",
            "devices/d1/messages/settle//t",
            Err(UnknownSettleAction),
        ),
        (
            "§1 settle empty token",
            "devices/d1/messages/settle/complete/",
            Err(InvalidLockToken),
        ),
        (
            "§1 settle token with space",
            "devices/d1/messages/settle/complete/a b",
            Err(InvalidLockToken),
        ),
        (
            "§1 settle token with +",
            "devices/d1/messages/settle/complete/a+b",
            Err(InvalidLockToken),
        ),
        (
            "§1 settle token with #",
            "devices/d1/messages/settle/complete/#",
            Err(InvalidLockToken),
        ),
        (
            "§1 settle token not ASCII",
            "devices/d1/messages/settle/complete/\u{e9}",
            Err(InvalidLockToken),
        ),
        (
            "§1 settle token with control",
            "devices/d1/messages/settle/complete/a\u{1}",
            Err(InvalidLockToken),
        ),
        (
            "§1 settle token of 64 bytes",
            &settle_64,
            Ok(DeviceTopic::Settle {
                device_id: "d1",
                action: Complete,
                lock_token: "",
            }),
        ),
        (
            "§1 settle token of 65 bytes",
            &settle_65,
            Err(InvalidLockToken),
        ),
        // --- malformed receive ---
        (
            "§3 receive with extra level",
            "devices/d1/messages/receive/x",
            Err(MalformedReceive),
        ),
        (
            "§3 receive with trailing slash",
            "devices/d1/messages/receive/",
            Err(MalformedReceive),
        ),
        // --- deliveries ---
        (
            "§3 a delivery",
            "devices/d1/messages/devicebound/%24.mid=m",
            Err(DeliveryTopic),
        ),
        (
            "§3 devicebound alone",
            "devices/d1/messages/devicebound",
            Err(DeliveryTopic),
        ),
        // --- device id ---
        (
            "§1 device id of 128 bytes",
            &receive_128,
            Ok(DeviceTopic::Receive { device_id: "" }),
        ),
        (
            "§1 device id of 129 bytes",
            &receive_129,
            Err(InvalidDeviceId),
        ),
        (
            "§1 empty device id",
            "devices//messages/receive",
            Err(InvalidDeviceId),
        ),
        (
            "§1 device id with space",
            "devices/d 1/messages/receive",
            Err(InvalidDeviceId),
        ),
        (
            "§1 device id with +",
            "devices/+/messages/receive",
            Err(InvalidDeviceId),
        ),
        (
            "§1 device id not ASCII",
            "devices/d\u{e9}/messages/receive",
            Err(InvalidDeviceId),
        ),
        // --- not a device messages topic ---
        ("§3 empty", "", Err(NotDeviceMessages)),
        ("§3 devices alone", "devices", Err(NotDeviceMessages)),
        ("§3 devices/", "devices/", Err(NotDeviceMessages)),
        ("§3 no messages level", "devices/d1", Err(NotDeviceMessages)),
        (
            "§3 messages without slash",
            "devices/d1/messages",
            Err(NotDeviceMessages),
        ),
        (
            "§3 twin topic",
            "devices/d1/twin/res",
            Err(NotDeviceMessages),
        ),
        (
            "§3 Devices is case-sensitive",
            "Devices/d1/messages/receive",
            Err(NotDeviceMessages),
        ),
        (
            "§3 leading slash",
            "/devices/d1/messages/receive",
            Err(NotDeviceMessages),
        ),
        (
            "§3 IoT Hub $iothub topic",
            "$iothub/twin/GET/?$rid=1",
            Err(NotDeviceMessages),
        ),
        (
            "§2 the service request topic",
            "devicebound/v1/command/invoke",
            Err(NotDeviceMessages),
        ),
    ];
    for (name, topic, expected) in &cases {
        let parsed = parse_device_topic(topic);
        match (expected, &parsed) {
            // Cases with long ids/tokens only check the shape and the lengths.
            (
                Ok(DeviceTopic::Settle { lock_token: "", .. }),
                Ok(DeviceTopic::Settle { lock_token, .. }),
            ) => {
                assert_eq!(lock_token.len(), 64, "case: {name}");
            }
            (
                Ok(DeviceTopic::Receive { device_id: "" }),
                Ok(DeviceTopic::Receive { device_id }),
            ) => {
                assert_eq!(device_id.len(), 128, "case: {name}");
            }
            _ => assert_eq!(&parsed, expected, "case: {name}"),
        }
        if let Ok(topic_kind) = parsed {
            assert_eq!(
                device_activity(topic),
                Some(topic_kind.device_id()),
                "case: {name}"
            );
        }
    }
}

#[test]
fn section_3_activity_includes_malformed_device_publishes_but_not_deliveries() {
    let cases: &[(&str, Option<&str>)] = &[
        ("devices/d1/messages/events", Some("d1")),
        ("devices/d1/messages/receive", Some("d1")),
        ("devices/d1/messages/receive/x", Some("d1")),
        ("devices/d1/messages/settle/complete/t", Some("d1")),
        ("devices/d1/messages/settle/bogus/t", Some("d1")),
        ("devices/d1/messages/settle/complete/a b", Some("d1")),
        ("devices/d1/messages/settle", Some("d1")),
        ("devices/d1/messages/", Some("d1")),
        ("devices/d1/messages/devicebound/%24.mid=m", None),
        ("devices/d1/messages/devicebound", None),
        ("devices/d1/messages", None),
        ("devices/d1/twin", None),
        ("devices//messages/events", None),
        ("devices/d 1/messages/events", None),
        ("other/d1/messages/events", None),
        ("", None),
    ];
    for (topic, device_id) in cases {
        assert_eq!(device_activity(topic), *device_id, "topic: {topic:?}");
    }
}

#[test]
fn section_3_filters_and_levels() {
    assert_eq!(DEVICE_INBOUND_FILTER, "devices/+/messages/#");
    assert_eq!(
        device_subscription_filter("d1"),
        "devices/d1/messages/devicebound/#"
    );
    let levels: Vec<&str> = SettleAction::ALL
        .iter()
        .map(|action| action.topic_level())
        .collect();
    assert_eq!(levels, ["complete", "abandon", "reject"]);
    let labels: Vec<&str> = DeviceTopicError::ALL
        .iter()
        .map(|error| error.label())
        .collect();
    assert_eq!(
        labels,
        [
            "not_device_messages",
            "invalid_device_id",
            "delivery_topic",
            "malformed_settle",
            "unknown_settle_action",
            "invalid_lock_token",
            "malformed_receive"
        ]
    );
}
