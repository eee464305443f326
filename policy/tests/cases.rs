//! The decision table (`cases.toml`: policies and rows of identity, verb, key or device,
//! expected decision) and the error table (`errors.toml`: bad policies and their messages).

use serde::Deserialize;
use statestore_policy::{DeviceAction, KeyAccess, Policy};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Cases {
    suite: Vec<Suite>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Suite {
    name: String,
    policy: String,
    rows: Vec<Row>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Row {
    id: Option<String>,
    op: String,
    key: Option<String>,
    key_hex: Option<String>,
    device: Option<String>,
    allow: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Errors {
    case: Vec<ErrorCase>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ErrorCase {
    name: String,
    policy: String,
    error: String,
    also: Option<String>,
}

/// A request as the node sees it: a verb on a key or on a device.
enum Request {
    Key(KeyAccess),
    Device(DeviceAction),
}

/// The node's mapping of verbs (AIO stateStoreResources for the state store).
fn request(op: &str) -> Request {
    match op {
        "GET" | "KEYNOTIFY" | "SCAN" => Request::Key(KeyAccess::Read),
        "SET" | "DEL" | "VDEL" => Request::Key(KeyAccess::Write),
        "SEND" => Request::Device(DeviceAction::Send),
        "PURGE" => Request::Device(DeviceAction::Purge),
        "FORGET" => Request::Device(DeviceAction::Forget),
        "QUEUE" | "DEADLETTERS" => Request::Device(DeviceAction::Read),
        "FEEDBACK" => Request::Device(DeviceAction::Feedback),
        other => panic!("unknown op {other} in cases.toml"),
    }
}

#[test]
fn decision_table() {
    let cases: Cases =
        toml::from_str(include_str!("cases.toml")).expect("cases.toml is a valid table");
    let mut rows = 0;
    for suite in &cases.suite {
        let policy = Policy::parse(&suite.policy)
            .unwrap_or_else(|error| panic!("{}: policy refused: {error}", suite.name));
        for row in &suite.rows {
            let grants = policy.grants(row.id.as_deref());
            let decision = match request(&row.op) {
                Request::Key(access) => {
                    let key = match (&row.key, &row.key_hex) {
                        (Some(key), None) => key.as_bytes().to_vec(),
                        (None, Some(hex_key)) => hex::decode(hex_key).expect("key_hex is hex"),
                        _ => panic!("{}: a key row needs key or key_hex", suite.name),
                    };
                    grants.allows_key(access, &key)
                }
                Request::Device(action) => grants.allows_device(action, row.device.as_deref()),
            };
            assert_eq!(
                decision, row.allow,
                "{}: {:?} {} {:?}{:?}{:?}",
                suite.name, row.id, row.op, row.key, row.key_hex, row.device
            );
            rows += 1;
        }
    }
    assert!(rows >= 100, "{rows} rows");
}

#[test]
fn error_table() {
    let errors: Errors =
        toml::from_str(include_str!("errors.toml")).expect("errors.toml is a valid table");
    assert!(errors.case.len() >= 30);
    for case in &errors.case {
        let message = match Policy::parse(&case.policy) {
            Ok(policy) => panic!("{}: accepted ({policy:?})", case.name),
            Err(error) => error.to_string(),
        };
        for fragment in std::iter::once(&case.error).chain(&case.also) {
            assert!(
                message.contains(fragment.as_str()),
                "{}: {message:?} lacks {fragment:?}",
                case.name
            );
        }
    }
}
