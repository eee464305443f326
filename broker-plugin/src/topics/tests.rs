//! Topic filters and the response-topic prefix.

use super::*;

#[test]
fn filter_validity() {
    let table = [
        ("a/b", true),
        ("+", true),
        ("#", true),
        ("a/+/c", true),
        ("a/#", true),
        ("/", true),
        ("", false),
        ("a/#/c", false),
        ("a#", false),
        ("a/b+", false),
        ("+a", false),
        ("a\0b", false),
    ];
    for (filter, ok) in table {
        assert_eq!(TopicFilter::parse(filter).is_ok(), ok, "{filter:?}");
    }
    assert_eq!(
        TopicFilter::parse(&"a".repeat(MAX_NAME_BYTES + 1)),
        Err(FilterError::Length)
    );
}

#[test]
fn filter_matching() {
    let table = [
        ("a/b", "a/b", true),
        ("a/b", "a/b/c", false),
        ("a/b", "a", false),
        ("a/+", "a/b", true),
        ("a/+", "a/", true),
        ("a/+", "a/b/c", false),
        ("a/#", "a", true),
        ("a/#", "a/b/c", true),
        ("#", "x/y", true),
        ("#", "$SYS/x", false),
        ("+/x", "$SYS/x", false),
        ("$SYS/#", "$SYS/x", true),
        (
            "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke",
            "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke",
            true,
        ),
        (
            "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke",
            "statestore/v1/fa9ae35f-2f64-47cd-9bff-08e2b32a0fe8/command/invoke",
            false,
        ),
    ];
    for (filter, topic, want) in table {
        let f = TopicFilter::parse(filter).expect("valid filter");
        assert_eq!(f.matches(topic), want, "{filter:?} vs {topic:?}");
    }
}

#[test]
fn request_topics() {
    let filters: Vec<TopicFilter> = ["a/b", "c/#"]
        .iter()
        .filter_map(|f| TopicFilter::parse(f).ok())
        .collect();
    assert!(is_request(&filters, "a/b"));
    assert!(is_request(&filters, "c/d/e"));
    assert!(!is_request(&filters, "a/c"));
    assert!(!is_request(&[], "a/b"));
}

#[test]
fn response_topic_prefix() {
    let table = [
        ("app1", "clients/app1/statestore/response", true),
        ("app1", "clients/app1/x", true),
        ("app1", "clients/app1/", false),
        ("app1", "clients/app1", false),
        ("app1", "clients/app10/x", false),
        ("app1", "clients/app/x", false),
        ("app1", "clients/app2/x", false),
        ("app1", "Clients/app1/x", false),
        ("app1", "other/app1/x", false),
        ("app1", "app1/x", false),
        ("app1", "clients/app1/+", false),
        ("app1", "clients/app1/#", false),
        ("app1", "clients/app1/x\0", false),
        ("a/b", "clients/a/b/x", false),
        ("a", "clients/a/b/x", true),
        ("", "clients//x", false),
        ("+", "clients/+/x", false),
        ("#", "clients/#/x", false),
    ];
    for (client_id, rt, want) in table {
        assert_eq!(
            response_topic_inside(client_id, rt),
            want,
            "{client_id:?} {rt:?}"
        );
    }
}
