//! Property tests: valid requests round-trip through the encoder and the
//! parser; arbitrary bytes and topics never panic; what the parser accepts
//! respects every limit; property bags decode back to the user properties;
//! ISO 8601 formatting agrees with a naive calendar; feedback JSON parses back.

use proptest::prelude::*;

use super::encode_elements;
use crate::devicebound::DeviceboundLimits;
use crate::devicebound::feedback::{FeedbackRecord, FeedbackStatus, encode_feedback_batch};
use crate::devicebound::ids::{
    MAX_DEVICE_ID_BYTES, MAX_MESSAGE_ID_BYTES, as_mqtt_text, is_valid_lock_token,
};
use crate::devicebound::property_bag::{
    Delivery, DeliveryHeaders, check_delivery_fits, delivery_headers, delivery_topic,
    delivery_user_properties, property_bag,
};
use crate::devicebound::request::{
    Ack, ApplicationProperty, DeviceRequest, Expiry, FeedbackSettlement, SendRequest,
    encode_device_request, parse_device_request, sniff_device_verb,
};
use crate::devicebound::time::{MAX_FORMATTED_UNIX_MS, format_utc_millis};
use crate::devicebound::topic::{DeviceTopicError, device_activity, parse_device_topic};

/// An owned request, so that strategies can produce it; borrowed by [`Model::request`].
#[derive(Debug, Clone)]
enum Model {
    Send {
        device_id: String,
        message_id: String,
        body: Vec<u8>,
        expiry: Expiry,
        ack: Ack,
        generation: Option<String>,
        content_type: Option<String>,
        content_encoding: Option<String>,
    },
    Purge(String),
    Forget(String),
    Queue(String),
    DeadLetters(String, u32),
    Feedback(FeedbackSettlement, String),
}

impl Model {
    fn request(&self) -> DeviceRequest<'_> {
        match self {
            Model::Send {
                device_id,
                message_id,
                body,
                expiry,
                ack,
                generation,
                content_type,
                content_encoding,
            } => DeviceRequest::Send(SendRequest {
                device_id,
                message_id,
                body,
                expiry: *expiry,
                ack: *ack,
                generation: generation.as_deref(),
                content_type: content_type.as_deref(),
                content_encoding: content_encoding.as_deref(),
            }),
            Model::Purge(device_id) => DeviceRequest::Purge { device_id },
            Model::Forget(device_id) => DeviceRequest::Forget { device_id },
            Model::Queue(device_id) => DeviceRequest::Queue { device_id },
            Model::DeadLetters(device_id, count) => DeviceRequest::DeadLetters {
                device_id,
                count: *count,
            },
            Model::Feedback(settlement, lock_token) => DeviceRequest::Feedback {
                settlement: *settlement,
                lock_token,
            },
        }
    }
}

fn device_id() -> impl Strategy<Value = String> {
    "[A-Za-z0-9\\-.%_*?!(),:=@$']{1,128}"
}

/// 1–128 bytes of text an MQTT 5 user property can carry.
fn mqtt_text(max_bytes: usize) -> impl Strategy<Value = String> {
    "\\PC{1,40}".prop_filter("fits and is MQTT text", move |text| {
        text.len() <= max_bytes && as_mqtt_text(text.as_bytes()).is_some()
    })
}

fn lock_token() -> impl Strategy<Value = String> {
    "[!-\"$-*,-.0-~]{1,64}"
}

fn expiry() -> impl Strategy<Value = Expiry> {
    prop_oneof![
        Just(Expiry::Default),
        (1..=MAX_FORMATTED_UNIX_MS).prop_map(Expiry::Ttl),
        (0..=MAX_FORMATTED_UNIX_MS).prop_map(Expiry::At),
    ]
}

fn valid_request() -> impl Strategy<Value = Model> {
    let send = (
        device_id(),
        mqtt_text(MAX_MESSAGE_ID_BYTES),
        proptest::collection::vec(any::<u8>(), 0..256),
        expiry(),
        proptest::sample::select(Ack::ALL.to_vec()),
        proptest::option::of(mqtt_text(128)),
        proptest::option::of(mqtt_text(128)),
        proptest::option::of(mqtt_text(128)),
    )
        .prop_map(
            |(
                device_id,
                message_id,
                body,
                expiry,
                ack,
                generation,
                content_type,
                content_encoding,
            )| Model::Send {
                device_id,
                message_id,
                body,
                expiry,
                ack,
                generation,
                content_type,
                content_encoding,
            },
        );
    prop_oneof![
        4 => send,
        1 => device_id().prop_map(Model::Purge),
        1 => device_id().prop_map(Model::Forget),
        1 => device_id().prop_map(Model::Queue),
        1 => (device_id(), 1..=u32::MAX).prop_map(|(id, count)| Model::DeadLetters(id, count)),
        1 => (
            prop_oneof![Just(FeedbackSettlement::Complete), Just(FeedbackSettlement::Abandon)],
            lock_token(),
        )
            .prop_map(|(settlement, token)| Model::Feedback(settlement, token)),
    ]
}

/// Words the parser knows, numbers, ids and noise: near-valid requests.
fn request_element() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::sample::select(vec![
            "SEND",
            "purge",
            "FORGET",
            "Queue",
            "DEADLETTERS",
            "FEEDBACK",
            "COMPLETE",
            "abandon",
            "TTL",
            "EXPIRES",
            "ack",
            "full",
            "none",
            "GENERATION",
            "CONTENTTYPE",
            "CONTENTENCODING",
            "COUNT",
        ])
        .prop_map(|word| word.as_bytes().to_vec()),
        "[0-9]{0,22}".prop_map(String::into_bytes),
        device_id().prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 0..24),
    ]
}

/// Topic levels a device (or an attacker) might publish to.
fn topic_level() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(vec![
            "devices",
            "messages",
            "settle",
            "complete",
            "abandon",
            "reject",
            "receive",
            "devicebound",
            "events",
            "",
            "+",
            "#",
        ])
        .prop_map(str::to_owned),
        device_id(),
        lock_token(),
        any::<String>(),
    ]
}

/// A decoder for the bag, independent of the encoder.
fn decode_bag(bag: &str) -> Vec<(String, String)> {
    fn decode(text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = Vec::new();
        let mut index = 0;
        while index < bytes.len() {
            if bytes[index] == b'%' {
                let hex = std::str::from_utf8(&bytes[index + 1..index + 3]).expect("ASCII hex");
                out.push(u8::from_str_radix(hex, 16).expect("hex digits"));
                index += 3;
            } else {
                out.push(bytes[index]);
                index += 1;
            }
        }
        String::from_utf8(out).expect("UTF-8")
    }
    bag.split('&')
        .map(|pair| {
            let (key, value) = pair.split_once('=').expect("key=value");
            (decode(key), decode(value))
        })
        .collect()
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` back to ms, by counting days year by year.
fn naive_parse_iso(text: &str) -> u64 {
    let number = |range: std::ops::Range<usize>| -> u64 { text[range].parse().expect("digits") };
    let (year, month, day) = (number(0..4), number(5..7), number(8..10));
    let is_leap = |year: u64| {
        (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400)
    };
    let mut days: u64 = (1970..year)
        .map(|y| if is_leap(y) { 366 } else { 365 })
        .sum();
    let month_days = [
        31,
        if is_leap(year) { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    days += month_days[..usize::try_from(month - 1).expect("month")]
        .iter()
        .sum::<u64>();
    days += day - 1;
    let seconds = days * 86_400 + number(11..13) * 3_600 + number(14..16) * 60 + number(17..19);
    seconds * 1_000 + number(20..23)
}

proptest! {
    #[test]
    fn section_2_valid_requests_round_trip(model in valid_request()) {
        let request = model.request();
        let payload = encode_device_request(&request);
        prop_assert_eq!(parse_device_request(&payload, &DeviceboundLimits::default()), Ok(request.clone()));
        prop_assert_eq!(sniff_device_verb(&payload), request.verb());
    }

    #[test]
    fn section_2_arbitrary_bytes_never_panic(payload in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_device_request(&payload, &DeviceboundLimits::default());
        let _ = parse_device_request(&payload, &DeviceboundLimits { max_message_bytes: 0 });
        let _ = sniff_device_verb(&payload);
    }

    #[test]
    fn section_2_near_valid_requests_never_panic_and_respect_limits(
        elements in proptest::collection::vec(request_element(), 0..18),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
        max_message_bytes in 0usize..32,
    ) {
        let slices: Vec<&[u8]> = elements.iter().map(Vec::as_slice).collect();
        let mut payload = encode_elements(&slices);
        if truncate {
            payload.truncate(cut.index(payload.len() + 1));
        }
        let limits = DeviceboundLimits { max_message_bytes };
        if let Ok(request) = parse_device_request(&payload, &limits) {
            prop_assert_eq!(request.verb(), sniff_device_verb(&payload));
            if let Some(device_id) = request.device_id() {
                prop_assert!((1..=MAX_DEVICE_ID_BYTES).contains(&device_id.len()));
            }
            match &request {
                DeviceRequest::Send(send) => {
                    prop_assert!(send.body.len() <= max_message_bytes);
                    prop_assert!(as_mqtt_text(send.message_id.as_bytes()).is_some());
                }
                DeviceRequest::Feedback { lock_token, .. } => {
                    prop_assert!(is_valid_lock_token(lock_token));
                }
                DeviceRequest::DeadLetters { count, .. } => prop_assert!(*count >= 1),
                _ => {}
            }
            // What was accepted re-encodes to an equivalent request.
            let reencoded = encode_device_request(&request);
            prop_assert_eq!(parse_device_request(&reencoded, &limits), Ok(request));
        }
    }

    #[test]
    fn section_3_topics_never_panic(
        levels in proptest::collection::vec(topic_level(), 0..8),
        raw in any::<String>(),
    ) {
        let topic = levels.join("/");
        for topic in [topic.as_str(), raw.as_str()] {
            match parse_device_topic(topic) {
                Ok(parsed) => prop_assert_eq!(device_activity(topic), Some(parsed.device_id())),
                Err(DeviceTopicError::NotDeviceMessages | DeviceTopicError::InvalidDeviceId
                    | DeviceTopicError::DeliveryTopic) => {
                    prop_assert_eq!(device_activity(topic), None);
                }
                Err(_) => prop_assert!(device_activity(topic).is_some()),
            }
        }
    }

    #[test]
    fn section_3_settle_topics_round_trip(device_id in device_id(), token in lock_token()) {
        let topic = format!("devices/{device_id}/messages/settle/reject/{token}");
        let parsed = parse_device_topic(&topic);
        prop_assert!(
            matches!(parsed, Ok(crate::devicebound::topic::DeviceTopic::Settle { device_id: id, lock_token, .. })
                if id == device_id && lock_token == token),
            "{:?}", parsed
        );
    }

    #[test]
    fn section_3_bag_decodes_to_the_user_properties(
        device_id in device_id(),
        message_id in mqtt_text(128),
        token in lock_token(),
        expires_at_ms in 0..=MAX_FORMATTED_UNIX_MS,
        content_type in proptest::option::of(mqtt_text(128)),
        content_encoding in proptest::option::of(mqtt_text(128)),
        application_properties in proptest::collection::vec((any::<String>(), any::<String>()), 0..6),
    ) {
        let application_properties: Vec<ApplicationProperty> = application_properties;
        let delivery = Delivery {
            device_id: &device_id,
            message_id: &message_id,
            lock_token: &token,
            expires_at_ms,
            content_type: content_type.as_deref(),
            content_encoding: content_encoding.as_deref(),
            application_properties: &application_properties,
        };
        let bag = property_bag(&delivery);
        prop_assert!(!bag.contains(['/', '+', '#']), "one topic level: {}", bag);
        prop_assert_eq!(decode_bag(&bag), delivery_user_properties(&delivery));
        let topic = delivery_topic(&delivery).expect("small properties fit");
        prop_assert_eq!(
            delivery_headers(&delivery),
            Ok(DeliveryHeaders {
                topic: topic.clone(),
                user_properties: delivery_user_properties(&delivery),
            }),
            "a push publishes the same topic and properties"
        );
        prop_assert_eq!(parse_device_topic(&topic), Err(DeviceTopicError::DeliveryTopic));
        prop_assert_eq!(device_activity(&topic), None);
        // A SEND that passes the fit check delivers with any token.
        let send = SendRequest {
            device_id: &device_id,
            message_id: &message_id,
            body: b"",
            expiry: Expiry::Default,
            ack: Ack::None,
            generation: None,
            content_type: content_type.as_deref(),
            content_encoding: content_encoding.as_deref(),
        };
        prop_assert_eq!(check_delivery_fits(&send, &application_properties), Ok(()));
    }

    #[test]
    fn iso_8601_agrees_with_a_naive_calendar(unix_ms in 0..=MAX_FORMATTED_UNIX_MS) {
        let formatted = format_utc_millis(unix_ms);
        prop_assert_eq!(naive_parse_iso(&formatted), unix_ms, "{}", formatted);
    }

    #[test]
    fn section_4_feedback_json_parses_back(
        message_id in any::<String>(),
        device_id in device_id(),
        generation in proptest::option::of(any::<String>()),
        status in proptest::sample::select(FeedbackStatus::ALL.to_vec()),
        outcome_at_ms in 0..=MAX_FORMATTED_UNIX_MS,
    ) {
        let record = FeedbackRecord {
            original_message_id: &message_id,
            outcome_at_ms,
            status,
            device_id: &device_id,
            device_generation_id: generation.as_deref(),
        };
        let parsed: serde_json::Value =
            serde_json::from_slice(&encode_feedback_batch(&[record])).expect("valid JSON");
        prop_assert_eq!(&parsed[0]["originalMessageId"], &serde_json::Value::from(message_id.as_str()));
        prop_assert_eq!(&parsed[0]["deviceId"], &serde_json::Value::from(device_id.as_str()));
        prop_assert_eq!(
            &parsed[0]["deviceGenerationId"],
            &serde_json::Value::from(generation.as_deref().unwrap_or(""))
        );
        prop_assert_eq!(&parsed[0]["statusCode"], &serde_json::Value::from(status.as_str()));
        prop_assert_eq!(
            &parsed[0]["enqueuedTimeUtc"],
            &serde_json::Value::from(format_utc_millis(outcome_at_ms))
        );
    }
}
