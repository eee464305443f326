//! Where replies may go: protocol §1 (reply prefixes, never the store's own topics) and
//! devicebound.md §3 (a device's pull or settlement: its own `devices/{deviceId}/` too, but
//! never its deliveries or a topic the leader reads).

use super::*;
use crate::transport::{DEVICEBOUND_REQUEST_TOPIC, PROBE_TOPIC, REQUEST_TOPIC};

const NOTIFY: &str = "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8";

/// (response topic, answered with the default prefixes `clients/`)
const SECTION_1_DEFAULT: &[(&str, bool)] = &[
    // The three SDK shapes (§1).
    (
        "clients/rust-client/services/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke/response",
        true,
    ),
    (
        "clients/676F2D636C69656E74/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke/response",
        true,
    ),
    (
        "clients/net-client/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke",
        true,
    ),
    ("clients/a/resp", true),
    ("clients/", true),
    // Outside the reply prefixes.
    ("replies/t50-anon/statestore", false),
    ("client/x", false),
    ("Clients/x", false),
    ("clients", false),
    ("/clients/x", false),
    // The store's request topics and probes (§1).
    (REQUEST_TOPIC, false),
    (DEVICEBOUND_REQUEST_TOPIC, false),
    (PROBE_TOPIC, false),
    ("statestore/anything", false),
    // The notification prefix: plain prefix, as before (§1, §7).
    (NOTIFY, false),
    (
        "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/636C/command/notify/6B",
        false,
    ),
    (
        "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8-suffix/x",
        false,
    ),
    // A sibling of the notification prefix is an ordinary client topic.
    ("clients/statestore/v2/x", true),
    // Device deliveries and feedback (issue 27: forged messages).
    (
        "devices/victim/messages/devicebound/%24.mid=x&%24.lt=y",
        false,
    ),
    ("devices/victim/messages/receive", false),
    ("messages/servicebound/feedback", false),
    // Wildcards, the broker's own topics, U+0000.
    ("clients/#", false),
    ("clients/+/x", false),
    ("clients/a#", false),
    ("$SYS/broker/x", false),
    ("clients/a\0b", false),
    ("", false),
];

#[test]
fn section_1_replies_only_under_the_reply_prefixes_and_never_on_store_topics() {
    let topics = ReplyTopics::default();
    for (topic, allowed) in SECTION_1_DEFAULT {
        assert_eq!(
            topics.allows(topic),
            *allowed,
            "§1 response topic {topic:?}"
        );
    }
}

/// (prefixes, response topic, answered): an operator's prefixes widen where replies go, but
/// never onto the store's own topics.
const SECTION_1_CONFIGURED: &[(&[&str], &str, bool)] = &[
    (
        &["clients/", "replies/"],
        "replies/t50-anon/statestore",
        true,
    ),
    (&["clients/", "replies/"], "clients/a", true),
    (&["replies/"], "clients/a", false),
    (&["app/a/"], "app/a/resp", true),
    (&["app/a/"], "app/b/resp", false),
    // A prefix that includes store topics does not open them.
    (
        &["devices/"],
        "devices/victim/messages/devicebound/x",
        false,
    ),
    (&["devices/"], "devices/d1/replies", false),
    (&["messages/"], "messages/servicebound/feedback", false),
    (&["messages/"], "messages/servicebound", false),
    (&["messages/"], "messages/serviceboundx", true),
    (&["statestore/"], REQUEST_TOPIC, false),
    (&["statestore"], "statestore", false),
    (&["statestore"], "statestorex/y", true),
    (&["devicebound/"], DEVICEBOUND_REQUEST_TOPIC, false),
    (&["clients/statestore/"], NOTIFY, false),
    (&["a"], "a/#", false),
];

#[test]
fn section_1_configured_prefixes_never_open_the_store_topics() {
    for (prefixes, topic, allowed) in SECTION_1_CONFIGURED {
        let topics = ReplyTopics::new(prefixes.iter().map(|p| (*p).to_owned()));
        assert_eq!(
            topics.allows(topic),
            *allowed,
            "§1 prefixes {prefixes:?}, response topic {topic:?}"
        );
    }
}

/// (device, response topic, answered) with the default prefixes.
const DEVICEBOUND_3_PULL: &[(&str, &str, bool)] = &[
    // Its own devices/{id}/, outside what the store publishes there or reads.
    ("d1", "devices/d1/replies/1", true),
    ("d1", "devices/d1/", true),
    ("d1", "devices/d1/messages/replies/1", true),
    ("d1", "devices/d1/messages/pull/answer", true),
    // Its delivery topics (the device would read a reply as a message).
    ("d1", "devices/d1/messages/devicebound", false),
    ("d1", "devices/d1/messages/devicebound/", false),
    (
        "d1",
        "devices/d1/messages/devicebound/%24.mid=x&%24.lt=y",
        false,
    ),
    // Topics the leader reads: a reply there would come back as a pull, settlement or activity.
    ("d1", "devices/d1/messages/receive", false),
    ("d1", "devices/d1/messages/events", false),
    ("d1", "devices/d1/messages/reply", false),
    ("d1", "devices/d1/messages/events/telemetry", false),
    ("d1", "devices/d1/messages/settle/complete/t", false),
    ("d1", "devices/d1/messages/settle", false),
    ("d1", "devices/d1/messages", true),
    // Another device, never (not even one whose id starts with this one's).
    ("d1", "devices/d2/replies/1", false),
    ("d1", "devices/d12/replies/1", false),
    ("d1", "devices/d/replies", false),
    ("d1", "devices/victim/messages/devicebound/%24.mid=x", false),
    ("d1", "devices", false),
    ("d1", "devices/d1", false),
    // The reply prefixes, with the same exclusions as §1.
    ("d1", "clients/d1/pull", true),
    ("d1", "clients/other/pull", true),
    ("d1", NOTIFY, false),
    ("d1", "messages/servicebound/feedback", false),
    ("d1", REQUEST_TOPIC, false),
    ("d1", "other/d1", false),
    // Wildcards and the broker's own topics, even under its own space.
    ("d1", "devices/d1/replies/#", false),
    ("d1", "devices/d1/+/x", false),
    ("d1", "devices/d1/a\0", false),
];

#[test]
fn devicebound_3_pull_replies_only_under_the_own_device_or_the_reply_prefixes() {
    let topics = ReplyTopics::default();
    for (device, topic, allowed) in DEVICEBOUND_3_PULL {
        assert_eq!(
            topics.allows_device(device, topic),
            *allowed,
            "devicebound §3 device {device:?}, response topic {topic:?}"
        );
    }
}

/// "devices/d1/messages" alone is not read by the leader (its filters all have a level
/// under `messages/`): the device-own rule allows it; checked here against the filters
/// themselves so the table above stays true if the subscriptions change.
#[test]
fn the_device_rule_follows_the_leaders_subscriptions() {
    for filter in DEVICE_FILTERS {
        let example = filter.replace('+', "d1").replace('#', "x/y");
        assert!(
            !ReplyTopics::default().allows_device("d1", &example),
            "{example} is read by the leader ({filter})"
        );
    }
}

#[test]
fn the_store_topics_cover_every_topic_the_store_serves_or_publishes() {
    for topic in [
        REQUEST_TOPIC,
        DEVICEBOUND_REQUEST_TOPIC,
        PROBE_TOPIC,
        statestore_protocol::devicebound::FEEDBACK_TOPIC,
    ] {
        assert!(is_store_topic(topic), "{topic}");
    }
}

#[test]
fn mqtt_filter_matching() {
    let cases: &[(&str, &str, bool)] = &[
        ("a/+/c", "a/b/c", true),
        ("a/+/c", "a/b/c/d", false),
        ("a/+/c", "a//c", true),
        ("a/#", "a", true),
        ("a/#", "a/b/c", true),
        ("a/#", "ab", false),
        ("a/b", "a/b", true),
        ("a/b", "a/b/", false),
    ];
    for (filter, topic, matches) in cases {
        assert_eq!(
            matches_filter(filter, topic),
            *matches,
            "{filter} ~ {topic}"
        );
    }
}

#[test]
fn reply_prefix_settings_are_validated() {
    assert_eq!(validate_prefix("clients/"), None);
    assert_eq!(validate_prefix("replies"), None);
    assert!(validate_prefix("").is_some());
    assert!(validate_prefix("clients/#").is_some());
    assert!(validate_prefix("clients/+/").is_some());
    assert!(validate_prefix("a\0").is_some());
}
