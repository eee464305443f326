//! The delivery topic, property bag, user properties and Message Expiry
//! Interval (devicebound.md §3), and the 65,535-byte topic limit.

use super::send;
use crate::ProtocolError;
use crate::devicebound::property_bag::{
    Delivery, MAX_TOPIC_BYTES, check_delivery_fits, delivery_topic, delivery_user_properties,
    message_expiry_interval_secs, percent_encode_into, property_bag,
};
use crate::devicebound::request::{ApplicationProperty, SendRequest};

/// A case: name, delivery, expected bag, expected user properties.
type BagCase<'a> = (&'a str, Delivery<'a>, &'a str, Vec<(&'a str, &'a str)>);

/// 2015-07-28T16:24:48.789Z, IoT Hub's documentation example time.
const EXAMPLE_MS: u64 = 1_438_100_688_789;

fn properties(pairs: &[(&str, &str)]) -> Vec<ApplicationProperty> {
    pairs
        .iter()
        .map(|&(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

fn delivery<'a>(application_properties: &'a [ApplicationProperty]) -> Delivery<'a> {
    Delivery {
        device_id: "d1",
        message_id: "m1",
        lock_token: "lt1",
        expires_at_ms: EXAMPLE_MS,
        content_type: None,
        content_encoding: None,
        application_properties,
    }
}

#[test]
fn section_3_bag_topic_and_user_properties_table() {
    let none = properties(&[]);
    let app = properties(&[("color", "red"), ("a b", "x&y=z/#+%"), ("color", "blue")]);
    let specials = properties(&[("\u{e9}", "\u{2603}"), ("$.mid", "spoof"), ("", "")]);
    let cases: Vec<BagCase> = vec![
        (
            "§3 system properties only",
            delivery(&none),
            "%24.mid=m1&%24.lt=lt1&%24.exp=2015-07-28T16%3A24%3A48.789Z",
            vec![
                ("$.mid", "m1"),
                ("$.lt", "lt1"),
                ("$.exp", "2015-07-28T16:24:48.789Z"),
            ],
        ),
        (
            "§3 content type and encoding, then application properties in order",
            Delivery {
                content_type: Some("application/json"),
                content_encoding: Some("utf-8"),
                ..delivery(&app)
            },
            "%24.mid=m1&%24.lt=lt1&%24.exp=2015-07-28T16%3A24%3A48.789Z\
             &%24.ct=application%2Fjson&%24.ce=utf-8\
             &color=red&a%20b=x%26y%3Dz%2F%23%2B%25&color=blue",
            vec![
                ("$.mid", "m1"),
                ("$.lt", "lt1"),
                ("$.exp", "2015-07-28T16:24:48.789Z"),
                ("$.ct", "application/json"),
                ("$.ce", "utf-8"),
                ("color", "red"),
                ("a b", "x&y=z/#+%"),
                ("color", "blue"),
            ],
        ),
        (
            "§3 content encoding without content type",
            Delivery {
                content_encoding: Some("gzip"),
                ..delivery(&none)
            },
            "%24.mid=m1&%24.lt=lt1&%24.exp=2015-07-28T16%3A24%3A48.789Z&%24.ce=gzip",
            vec![
                ("$.mid", "m1"),
                ("$.lt", "lt1"),
                ("$.exp", "2015-07-28T16:24:48.789Z"),
                ("$.ce", "gzip"),
            ],
        ),
        (
            "§3 UTF-8 percent-encoded byte by byte, upper-case hex; empty name and value",
            Delivery {
                message_id: "~m._-\u{e9}:$*'()",
                lock_token: "a%b",
                expires_at_ms: 0,
                ..delivery(&specials)
            },
            "%24.mid=~m._-%C3%A9%3A%24%2A%27%28%29&%24.lt=a%25b&%24.exp=1970-01-01T00%3A00%3A00.000Z\
             &%C3%A9=%E2%98%83&%24.mid=spoof&=",
            vec![
                ("$.mid", "~m._-\u{e9}:$*'()"),
                ("$.lt", "a%b"),
                ("$.exp", "1970-01-01T00:00:00.000Z"),
                ("\u{e9}", "\u{2603}"),
                ("$.mid", "spoof"),
                ("", ""),
            ],
        ),
    ];
    for (name, delivery, bag, user_properties) in cases {
        assert_eq!(property_bag(&delivery), bag, "case: {name}");
        assert_eq!(
            delivery_topic(&delivery),
            Ok(format!("devices/d1/messages/devicebound/{bag}")),
            "case: {name}"
        );
        let expected: Vec<(String, String)> = user_properties
            .iter()
            .map(|&(key, value)| (key.to_owned(), value.to_owned()))
            .collect();
        assert_eq!(
            delivery_user_properties(&delivery),
            expected,
            "case: {name}"
        );
    }
}

#[test]
fn section_3_device_id_is_a_raw_topic_level() {
    let none = properties(&[]);
    let delivery = Delivery {
        device_id: "d%1$'(x)",
        ..delivery(&none)
    };
    let topic = delivery_topic(&delivery).expect("fits");
    assert!(
        topic.starts_with("devices/d%1$'(x)/messages/devicebound/%24.mid=m1&"),
        "{topic}"
    );
}

/// RFC 3986 §2.3: only `A-Z a-z 0-9 - . _ ~` stay as they are.
#[test]
fn section_3_percent_encoding_of_every_ascii_byte() {
    let unreserved = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~";
    for byte in 0u8..=0x7F {
        let character = char::from(byte);
        let mut encoded = String::new();
        percent_encode_into(&mut encoded, &character.to_string());
        let expected = if unreserved.contains(character) {
            character.to_string()
        } else {
            format!("%{byte:02X}")
        };
        assert_eq!(encoded, expected, "byte {byte:#04x}");
        assert!(
            !encoded.contains(['/', '+', '#', '&', '=']),
            "byte {byte:#04x}"
        );
    }
}

#[test]
fn section_3_message_expiry_interval_rounds_up_and_is_at_least_one() {
    let cases: &[(&str, u64, u64, u32)] = &[
        ("whole seconds", 10_000, 0, 10),
        ("a millisecond more rounds up", 10_001, 0, 11),
        ("one millisecond left", 1_001, 1_000, 1),
        ("exactly one second", 2_000, 1_000, 1),
        ("one second and a ms", 2_001, 1_000, 2),
        ("due now", 5_000, 5_000, 1),
        ("already past", 5_000, 9_000, 1),
        ("default TTL", EXAMPLE_MS + 3_600_000, EXAMPLE_MS, 3_600),
        ("largest interval", u64::from(u32::MAX) * 1_000, 0, u32::MAX),
        ("beyond u32 saturates", u64::MAX, 0, u32::MAX),
    ];
    for (name, expires_at_ms, now_ms, expected) in cases {
        assert_eq!(
            message_expiry_interval_secs(*expires_at_ms, *now_ms),
            *expected,
            "case: {name}"
        );
    }
}

/// A property of `filler` unreserved bytes makes the topic exactly `target` long.
fn padded_properties(base: &Delivery<'_>, target: usize) -> Vec<ApplicationProperty> {
    let base_len = delivery_topic(base).expect("base fits").len();
    // `&k=` plus the value.
    let filler = target - base_len - 3;
    vec![("k".to_owned(), "v".repeat(filler))]
}

#[test]
fn section_3_topic_of_65535_bytes_fits_and_one_more_does_not() {
    let none = properties(&[]);
    let base = delivery(&none);
    let exact = padded_properties(&base, MAX_TOPIC_BYTES);
    let fits = Delivery {
        application_properties: &exact,
        ..base.clone()
    };
    assert_eq!(
        delivery_topic(&fits).map(|topic| topic.len()),
        Ok(MAX_TOPIC_BYTES)
    );
    let one_more = padded_properties(&base, MAX_TOPIC_BYTES + 1);
    let too_long = Delivery {
        application_properties: &one_more,
        ..base
    };
    assert_eq!(
        delivery_topic(&too_long),
        Err(ProtocolError::MessageTooLarge)
    );
}

#[test]
fn section_3_send_is_refused_when_no_lock_token_could_fit() {
    let request = SendRequest {
        content_type: Some("text/plain"),
        ..send("device-1", "message-1", b"body")
    };
    let none = properties(&[]);
    let worst_token = "%".repeat(64);
    let worst_case = Delivery {
        device_id: request.device_id,
        message_id: request.message_id,
        lock_token: &worst_token,
        expires_at_ms: 0,
        content_type: request.content_type,
        content_encoding: None,
        application_properties: &none,
    };
    let exact = padded_properties(&worst_case, MAX_TOPIC_BYTES);
    assert_eq!(check_delivery_fits(&request, &exact), Ok(()));
    let worst_fits = Delivery {
        application_properties: &exact,
        ..worst_case.clone()
    };
    assert_eq!(
        delivery_topic(&worst_fits).map(|topic| topic.len()),
        Ok(MAX_TOPIC_BYTES),
        "the estimate is exact for the worst token"
    );
    let one_more = padded_properties(&worst_case, MAX_TOPIC_BYTES + 1);
    assert_eq!(
        check_delivery_fits(&request, &one_more),
        Err(ProtocolError::MessageTooLarge)
    );
    // A real token is shorter once encoded, so a SEND that passed always delivers.
    let real = Delivery {
        lock_token: "0123456789abcdef0123456789abcdef",
        expires_at_ms: 253_402_300_799_999,
        application_properties: &exact,
        ..worst_case
    };
    assert!(delivery_topic(&real).is_ok());
}
