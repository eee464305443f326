//! Option parsing: defaults, every key, and the refusals.

use super::*;

#[test]
fn no_options_give_the_defaults() {
    let o = Options::parse(&[]).expect("defaults");
    assert_eq!(o.identity, IdentitySource::UsernameOrClientId);
    assert_eq!(o.property, "__ssVouchedId");
    let topics: Vec<&str> = o.request_topics.iter().map(TopicFilter::as_str).collect();
    assert_eq!(
        topics,
        [STATE_STORE_REQUEST_TOPIC, DEVICEBOUND_REQUEST_TOPIC]
    );
    assert!(!o.check_response_topic);
    assert_eq!(o.report_interval_s, DEFAULT_REPORT_INTERVAL_S);
}

#[test]
fn the_topics_match_the_vocabulary() {
    assert_eq!(
        STATE_STORE_REQUEST_TOPIC,
        "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke"
    );
    assert_eq!(DEVICEBOUND_REQUEST_TOPIC, "devicebound/v1/command/invoke");
}

#[test]
fn identity_values() {
    let table = [
        (
            "username_or_client_id",
            Some(IdentitySource::UsernameOrClientId),
        ),
        ("username", Some(IdentitySource::Username)),
        ("client_id", Some(IdentitySource::ClientId)),
        (" client_id ", Some(IdentitySource::ClientId)),
        ("cn", None),
        ("", None),
        ("Username", None),
    ];
    for (value, want) in table {
        let got = Options::parse(&[("identity", value)])
            .ok()
            .map(|o| o.identity);
        assert_eq!(got, want, "identity {value:?}");
    }
}

#[test]
fn property_values() {
    let long = "p".repeat(MAX_NAME_BYTES + 1);
    let table: [(&str, Option<&str>); 5] = [
        ("__ssVouchedId", Some("__ssVouchedId")),
        ("x-who", Some("x-who")),
        ("", None),
        ("a\nb", None),
        (&long, None),
    ];
    for (value, want) in table {
        let got = Options::parse(&[("property", value)])
            .ok()
            .map(|o| o.property);
        assert_eq!(got.as_deref(), want, "property {value:?}");
    }
}

#[test]
fn request_topics_values() {
    let many = vec!["a"; MAX_REQUEST_TOPICS + 1].join(",");
    let table: [(&str, Option<Vec<&str>>); 7] = [
        ("a/b", Some(vec!["a/b"])),
        ("a/b, c/+/d ,e/#", Some(vec!["a/b", "c/+/d", "e/#"])),
        ("a,,b,", Some(vec!["a", "b"])),
        ("", None),
        (" , ", None),
        ("a/#/b", None),
        (&many, None),
    ];
    for (value, want) in table {
        let got = Options::parse(&[("request_topics", value)]).ok().map(|o| {
            o.request_topics
                .iter()
                .map(|t| t.as_str().to_string())
                .collect::<Vec<_>>()
        });
        let want = want.map(|w| w.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(got, want, "request_topics {value:?}");
    }
}

#[test]
fn check_response_topic_and_report_interval_values() {
    let table = [
        ("true", Some(true)),
        ("on", Some(true)),
        ("1", Some(true)),
        ("false", Some(false)),
        ("off", Some(false)),
        ("maybe", None),
    ];
    for (value, want) in table {
        let got = Options::parse(&[("check_response_topic", value)])
            .ok()
            .map(|o| o.check_response_topic);
        assert_eq!(got, want, "check_response_topic {value:?}");
    }
    let table = [
        ("0", Some(0)),
        ("60", Some(60)),
        ("86400", Some(86_400)),
        ("86401", None),
        ("-1", None),
        ("1m", None),
    ];
    for (value, want) in table {
        let got = Options::parse(&[("report_interval", value)])
            .ok()
            .map(|o| o.report_interval_s);
        assert_eq!(got, want, "report_interval {value:?}");
    }
}

#[test]
fn refusals() {
    assert_eq!(
        Options::parse(&[("identiy", "username")]),
        Err(OptionError::UnknownKey("identiy".into()))
    );
    assert_eq!(
        Options::parse(&[("identity", "username"), ("identity", "client_id")]),
        Err(OptionError::Repeated("identity".into()))
    );
    let many = vec![("x", "y"); MAX_OPTIONS + 1];
    assert_eq!(
        Options::parse(&many),
        Err(OptionError::TooMany(MAX_OPTIONS + 1))
    );
    let e = Options::parse(&[("identity", "cn")]).expect_err("bad value");
    assert!(e.to_string().contains("plugin_opt_identity 'cn'"), "{e}");
}

#[test]
fn describe_names_every_setting() {
    let o =
        Options::parse(&[("check_response_topic", "true"), ("identity", "username")]).expect("ok");
    let d = o.describe();
    for part in [
        "identity=username",
        "property=__ssVouchedId",
        "check_response_topic=true",
        "devicebound/v1/command/invoke",
    ] {
        assert!(d.contains(part), "{d}");
    }
}
