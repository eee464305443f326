//! Fuzz target for the device-bound codecs (devicebound.md §2, §3): the RPC
//! parser and the device topic parser must never panic; an accepted request
//! respects every limit, agrees with `sniff_device_verb` and re-encodes to a
//! payload that parses to the same request; every parse error encodes as
//! `-ERR ...\r\n`; a parsed topic agrees with `device_activity`; the same bytes
//! as user properties give application properties without `__` or `$.` names,
//! or `invalid property name` exactly when a name starts with `$.`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use statestore_protocol::devicebound::{
    DeviceRequest, DeviceTopicError, DeviceboundLimits, MAX_DEVICE_ID_BYTES, MAX_MESSAGE_ID_BYTES,
    application_properties, device_activity, encode_device_request, is_valid_lock_token,
    parse_device_request, parse_device_topic, sniff_device_verb,
};
use statestore_protocol::{ErrorReply, ProtocolError, Reply};

fn check_request(payload: &[u8], limits: &DeviceboundLimits) {
    match parse_device_request(payload, limits) {
        Ok(request) => {
            assert_eq!(request.verb(), sniff_device_verb(payload));
            if let Some(device_id) = request.device_id() {
                assert!((1..=MAX_DEVICE_ID_BYTES).contains(&device_id.len()));
            }
            match &request {
                DeviceRequest::Send(send) => {
                    assert!(send.body.len() <= limits.max_message_bytes);
                    assert!((1..=MAX_MESSAGE_ID_BYTES).contains(&send.message_id.len()));
                }
                DeviceRequest::Feedback { lock_token, .. } => {
                    assert!(is_valid_lock_token(lock_token));
                }
                DeviceRequest::DeadLetters { count, .. } => assert!(*count >= 1),
                DeviceRequest::Purge { .. }
                | DeviceRequest::Forget { .. }
                | DeviceRequest::Queue { .. } => {}
            }
            let reencoded = encode_device_request(&request);
            assert_eq!(parse_device_request(&reencoded, limits), Ok(request));
        }
        Err(error) => {
            let encoded = Reply::Error(ErrorReply::from(error)).encode();
            assert!(encoded.starts_with(b"-ERR ") && encoded.ends_with(b"\r\n"));
            assert!(ErrorReply::DEVICEBOUND.contains(&ErrorReply::from(error)));
        }
    }
}

fn check_topic(topic: &str) {
    match parse_device_topic(topic) {
        Ok(parsed) => assert_eq!(device_activity(topic), Some(parsed.device_id())),
        Err(
            DeviceTopicError::NotDeviceMessages
            | DeviceTopicError::InvalidDeviceId
            | DeviceTopicError::DeliveryTopic,
        ) => assert_eq!(device_activity(topic), None),
        Err(_) => assert!(device_activity(topic).is_some()),
    }
}

/// `text` as user properties: one `name=value` per line (a line without `=` is
/// a name with an empty value).
fn check_properties(text: &str) {
    let pairs: Vec<(&str, &str)> = text
        .split('\n')
        .map(|line| line.split_once('=').unwrap_or((line, "")))
        .collect();
    let system_name = pairs
        .iter()
        .any(|(name, _)| !name.starts_with("__") && name.starts_with("$."));
    match application_properties(pairs.iter().copied()) {
        Ok(kept) => {
            assert!(!system_name);
            let expected: Vec<(String, String)> = pairs
                .iter()
                .filter(|(name, _)| !name.starts_with("__"))
                .map(|&(name, value)| (name.to_owned(), value.to_owned()))
                .collect();
            assert_eq!(kept, expected);
        }
        Err(error) => {
            assert!(system_name);
            assert_eq!(error, ProtocolError::InvalidPropertyName);
        }
    }
}

fuzz_target!(|payload: &[u8]| {
    check_request(payload, &DeviceboundLimits::default());
    check_request(
        payload,
        &DeviceboundLimits {
            max_message_bytes: 4,
        },
    );
    // The same bytes as a topic (MQTT topics are UTF-8), lossily and, when they
    // are UTF-8, as they are.
    check_topic(&String::from_utf8_lossy(payload));
    if let Ok(topic) = std::str::from_utf8(payload) {
        check_topic(topic);
    }
    check_properties(&String::from_utf8_lossy(payload));
});
