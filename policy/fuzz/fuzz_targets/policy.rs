//! Fuzz target for authorization policies (`Policy::parse`, `Policy::grants`,
//! `Grants::allows_key`, `Grants::allows_device`): parsing never panics, and when a text parses,
//! every decision agrees with a naive model that reads the same text with `toml` on its own and
//! evaluates each rule directly (no index, no merging).
//!
//! Input: the policy text (bytes, read as UTF-8 with invalid sequences replaced). Its first
//! line, if it starts with `#@` (a TOML comment, so seeds stay valid TOML), is a probe:
//! `#@identity<TAB>key`; without a tab the identity is `None` and the whole rest is the key.
//! The key is also probed as a device id (when UTF-8) and without one. Besides the probe, every
//! principal and group member of the document is tried as an identity, and every key and
//! device of the document as a key and a device id (at most 8 of each).

#![no_main]

use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use statestore_policy::{DeviceAction, KeyAccess, Policy};
use statestore_protocol::glob::Glob;
use toml::Value;

const ACTIONS: [(DeviceAction, &str); 5] = [
    (DeviceAction::Send, "send"),
    (DeviceAction::Purge, "purge"),
    (DeviceAction::Forget, "forget"),
    (DeviceAction::Read, "read"),
    (DeviceAction::Feedback, "feedback"),
];

/// Most identities, keys and devices taken from the document.
const MAX_PROBES: usize = 8;

/// One rule as written: principals and group members together, what it covers.
struct Rule {
    subjects: Vec<String>,
    /// Keys (`Text` for patterns, exact bytes otherwise) or devices (as `Text`).
    targets: Vec<Target>,
    /// Methods (`Read`, `Write`) or actions, by name.
    grants: Vec<&'static str>,
}

enum Target {
    Glob(String),
    Bytes(Vec<u8>),
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|array| {
            array
                .iter()
                .filter_map(|item| item.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn text(value: Option<&Value>) -> Option<&str> {
    value.and_then(Value::as_str)
}

/// The rule's principals plus the members of its groups.
fn subjects(rule: &Value, groups: Option<&Value>) -> Vec<String> {
    let mut subjects = strings(rule.get("principals"));
    for group in strings(rule.get("groups")) {
        subjects.extend(strings(groups.and_then(|groups| groups.get(&group))));
    }
    subjects
}

fn decode(key: &str, encoding: Option<&str>) -> Vec<u8> {
    let base64 = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    match encoding {
        Some("hex") => hex::decode(key).expect("the policy parsed: valid hex"),
        _ => base64.decode(key).expect("the policy parsed: valid base64"),
    }
}

/// The document's rules, read naively (the policy parsed, so every field is valid).
fn rules(document: &Value) -> (Vec<Rule>, Vec<Rule>) {
    let groups = document.get("groups");
    let tables = |name: &str| {
        document
            .get(name)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let state_store = tables("state_store")
        .iter()
        .map(|rule| {
            let key_type = text(rule.get("key_type")).unwrap_or("pattern");
            let encoding = text(rule.get("encoding"));
            let targets = strings(rule.get("keys"))
                .into_iter()
                .map(|key| match key_type {
                    "pattern" => Target::Glob(key),
                    "string" => Target::Bytes(key.into_bytes()),
                    _ => Target::Bytes(decode(&key, encoding)),
                })
                .collect();
            let grants = match text(rule.get("method")) {
                Some("Read") => vec!["Read"],
                Some("Write") => vec!["Write"],
                _ => vec!["Read", "Write"],
            };
            Rule {
                subjects: subjects(rule, groups),
                targets,
                grants,
            }
        })
        .collect();
    let devicebound = tables("devicebound")
        .iter()
        .map(|rule| {
            let actions = strings(rule.get("actions"));
            Rule {
                subjects: subjects(rule, groups),
                targets: strings(rule.get("devices"))
                    .into_iter()
                    .map(Target::Glob)
                    .collect(),
                grants: ACTIONS
                    .iter()
                    .filter(|(_, name)| actions.iter().any(|action| action == name))
                    .map(|&(_, name)| name)
                    .collect(),
            }
        })
        .collect();
    (state_store, devicebound)
}

fn glob_matches(pattern: &str, candidate: &[u8]) -> bool {
    Glob::compile(pattern.as_bytes())
        .expect("the policy parsed: its globs compile")
        .matches(candidate)
        .matched
}

fn target_matches(target: &Target, candidate: &[u8]) -> bool {
    match target {
        Target::Glob(pattern) => glob_matches(pattern, candidate),
        Target::Bytes(bytes) => bytes == candidate,
    }
}

fn applies(rule: &Rule, identity: Option<&str>) -> bool {
    identity.is_some_and(|identity| {
        rule.subjects
            .iter()
            .any(|subject| glob_matches(subject, identity.as_bytes()))
    })
}

fn naive_key(rules: &[Rule], open: bool, identity: Option<&str>, access: &str, key: &[u8]) -> bool {
    open || rules.iter().any(|rule| {
        applies(rule, identity)
            && rule.grants.contains(&access)
            && rule
                .targets
                .iter()
                .any(|target| target_matches(target, key))
    })
}

fn naive_device(
    rules: &[Rule],
    open: bool,
    identity: Option<&str>,
    action: &str,
    device: Option<&str>,
) -> bool {
    open || rules.iter().any(|rule| {
        applies(rule, identity)
            && rule.grants.contains(&action)
            && (action == "feedback"
                || device.is_some_and(|device| {
                    rule.targets
                        .iter()
                        .any(|target| target_matches(target, device.as_bytes()))
                }))
    })
}

fuzz_target!(|input: &[u8]| {
    let text = String::from_utf8_lossy(input);
    let Ok(policy) = Policy::parse(&text) else {
        return;
    };
    let document: Value = toml::from_str(&text).expect("the policy parsed: it is TOML");
    let (state_store, devicebound) = rules(&document);
    let open = state_store.is_empty() && devicebound.is_empty();
    assert_eq!(policy.is_open(), open);
    assert_eq!(policy.rule_count(), state_store.len() + devicebound.len());

    let mut identities: Vec<Option<String>> = vec![None];
    let mut keys: Vec<Vec<u8>> = Vec::new();
    if let Some(probe) = input.strip_prefix(b"#@") {
        let line = probe
            .split(|&byte| byte == b'\n')
            .next()
            .unwrap_or_default();
        match line.iter().position(|&byte| byte == b'\t') {
            Some(tab) => {
                let identity = std::str::from_utf8(&line[..tab]).ok().map(str::to_owned);
                identities.push(identity);
                keys.push(line[tab + 1..].to_vec());
            }
            None => keys.push(line.to_vec()),
        }
    }
    let all_rules = state_store.iter().chain(&devicebound);
    identities.extend(
        all_rules
            .clone()
            .flat_map(|rule| rule.subjects.iter())
            .take(MAX_PROBES)
            .map(|subject| Some(subject.clone())),
    );
    keys.extend(
        all_rules
            .flat_map(|rule| rule.targets.iter())
            .take(MAX_PROBES)
            .map(|target| match target {
                Target::Glob(text) => text.as_bytes().to_vec(),
                Target::Bytes(bytes) => bytes.clone(),
            }),
    );
    let mut devices: Vec<Option<&str>> = vec![None];
    devices.extend(
        keys.iter()
            .filter_map(|key| std::str::from_utf8(key).ok())
            .map(Some),
    );

    for identity in &identities {
        let identity = identity.as_deref();
        let grants = policy.grants(identity);
        assert!(grants.approx_bytes() >= std::mem::size_of_val(&grants));
        for key in &keys {
            for (access, name) in [(KeyAccess::Read, "Read"), (KeyAccess::Write, "Write")] {
                assert_eq!(
                    grants.allows_key(access, key),
                    naive_key(&state_store, open, identity, name, key),
                    "{identity:?} {access:?} {key:?}"
                );
            }
        }
        for &device in &devices {
            for (action, name) in ACTIONS {
                assert_eq!(
                    grants.allows_device(action, device),
                    naive_device(&devicebound, open, identity, name, device),
                    "{identity:?} {action:?} {device:?}"
                );
            }
        }
    }
});
