//! Property test against an independent model: random small policies are generated as
//! structs, rendered to TOML text and parsed by [`Policy::parse`]; a naive evaluator reads the
//! generated *document* (for each rule: does a principal or group member, compiled as a SCAN
//! glob, match the identity; does the method or action cover the access; does a key or device
//! match) and must agree with `grants(identity).allows_*` for random identities, keys and
//! devices. The model knows nothing of the exact/glob split, the index, the merging or the
//! decoders (binary keys are generated as bytes and rendered to base64 or hex here).

use base64::Engine as _;
use proptest::prelude::*;
use statestore_policy::{DeviceAction, KeyAccess, Policy};
use statestore_protocol::glob::Glob;

/// Pieces of principals, keys and devices: literals and every glob construct.
const PIECES: &[&str] = &["a", "b", "/", "*", "?", "[ab]", "[!a]", "[", "]", "é"];

const IDENTITIES: &[&str] = &["a", "b", "ab", "ba", "aa", "a/b", "", "é", "[", "*"];

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(PIECES), 1..4).prop_map(|pieces| pieces.concat())
}

#[derive(Debug, Clone, Copy)]
enum KeyType {
    /// `key_type` absent (the default) or `"pattern"`.
    Pattern {
        explicit: bool,
    },
    String,
    /// Base64 (encoding absent or explicit, padded or not) or hex (lower or upper case).
    Base64 {
        explicit: bool,
        padded: bool,
    },
    Hex {
        upper: bool,
    },
}

#[derive(Debug, Clone)]
enum Keys {
    Text(Vec<String>),
    Binary(Vec<Vec<u8>>),
}

#[derive(Debug, Clone)]
struct Subjects {
    principals: Option<Vec<String>>,
    groups: Option<Vec<usize>>,
}

#[derive(Debug, Clone)]
struct StateRule {
    subjects: Subjects,
    key_type: KeyType,
    keys: Keys,
    /// 1: Read, 2: Write, 3: ReadWrite.
    method: u8,
}

#[derive(Debug, Clone)]
struct DeviceRule {
    subjects: Subjects,
    devices: Vec<String>,
    actions: Vec<DeviceAction>,
}

#[derive(Debug, Clone)]
struct Document {
    groups: Vec<Vec<String>>,
    state_store: Vec<StateRule>,
    devicebound: Vec<DeviceRule>,
}

const ACTIONS: [DeviceAction; 5] = [
    DeviceAction::Send,
    DeviceAction::Purge,
    DeviceAction::Forget,
    DeviceAction::Read,
    DeviceAction::Feedback,
];

fn action_name(action: DeviceAction) -> &'static str {
    match action {
        DeviceAction::Send => "send",
        DeviceAction::Purge => "purge",
        DeviceAction::Forget => "forget",
        DeviceAction::Read => "read",
        DeviceAction::Feedback => "feedback",
    }
}

/// Principals and groups (indices below `groups`), at least one non-empty.
fn subjects(groups: usize) -> impl Strategy<Value = Subjects> {
    let principals = prop::option::of(prop::collection::vec(text(), 0..3));
    let group_refs = if groups == 0 {
        Just(None).boxed()
    } else {
        prop::option::of(prop::collection::vec(0..groups, 0..3)).boxed()
    };
    (principals, group_refs).prop_map(|(principals, groups)| {
        let nobody = principals.as_ref().is_none_or(Vec::is_empty)
            && groups.as_ref().is_none_or(Vec::is_empty);
        if nobody {
            Subjects {
                principals: Some(vec!["a".to_owned()]),
                groups,
            }
        } else {
            Subjects { principals, groups }
        }
    })
}

fn key_type() -> impl Strategy<Value = KeyType> {
    prop_oneof![
        any::<bool>().prop_map(|explicit| KeyType::Pattern { explicit }),
        Just(KeyType::String),
        (any::<bool>(), any::<bool>())
            .prop_map(|(explicit, padded)| KeyType::Base64 { explicit, padded }),
        any::<bool>().prop_map(|upper| KeyType::Hex { upper }),
    ]
}

/// A short byte string, often UTF-8 from the same alphabet as the keys.
fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        text().prop_map(String::into_bytes),
        prop::collection::vec(
            prop::sample::select(&[b'a', b'b', b'/', 0xff, 0x00][..]),
            1..4
        ),
    ]
}

fn state_rule(groups: usize) -> impl Strategy<Value = StateRule> {
    (subjects(groups), key_type(), 1u8..=3).prop_flat_map(|(subjects, key_type, method)| {
        let keys = match key_type {
            KeyType::Pattern { .. } | KeyType::String => prop::collection::vec(text(), 1..4)
                .prop_map(Keys::Text)
                .boxed(),
            _ => prop::collection::vec(bytes(), 1..4)
                .prop_map(Keys::Binary)
                .boxed(),
        };
        keys.prop_map(move |keys| StateRule {
            subjects: subjects.clone(),
            key_type,
            keys,
            method,
        })
    })
}

fn device_rule(groups: usize) -> impl Strategy<Value = DeviceRule> {
    (
        subjects(groups),
        prop::collection::vec(text(), 1..3),
        prop::collection::vec(prop::sample::select(&ACTIONS[..]), 1..4),
    )
        .prop_map(|(subjects, devices, actions)| DeviceRule {
            subjects,
            devices,
            actions,
        })
}

fn document() -> impl Strategy<Value = Document> {
    prop::collection::vec(prop::collection::vec(text(), 0..3), 0..3).prop_flat_map(|groups| {
        let count = groups.len();
        (
            Just(groups),
            prop::collection::vec(state_rule(count), 0..4),
            prop::collection::vec(device_rule(count), 0..3),
        )
            .prop_map(|(groups, state_store, devicebound)| Document {
                groups,
                state_store,
                devicebound,
            })
    })
}

fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

fn toml_list<T: AsRef<str>>(items: &[T]) -> String {
    let items: Vec<String> = items
        .iter()
        .map(|item| toml_string(item.as_ref()))
        .collect();
    format!("[{}]", items.join(", "))
}

fn render_subjects(text: &mut String, subjects: &Subjects) {
    if let Some(principals) = &subjects.principals {
        text.push_str(&format!("principals = {}\n", toml_list(principals)));
    }
    if let Some(groups) = &subjects.groups {
        let names: Vec<String> = groups.iter().map(|group| format!("g{group}")).collect();
        text.push_str(&format!("groups = {}\n", toml_list(&names)));
    }
}

fn render(document: &Document) -> String {
    let mut text = String::new();
    if !document.groups.is_empty() {
        text.push_str("[groups]\n");
        for (index, members) in document.groups.iter().enumerate() {
            text.push_str(&format!("g{index} = {}\n", toml_list(members)));
        }
    }
    for rule in &document.state_store {
        text.push_str("\n[[state_store]]\n");
        render_subjects(&mut text, &rule.subjects);
        let (header, keys) = match (&rule.key_type, &rule.keys) {
            (KeyType::Pattern { explicit }, Keys::Text(keys)) => (
                if *explicit {
                    "key_type = \"pattern\"\n"
                } else {
                    ""
                },
                keys.clone(),
            ),
            (KeyType::String, Keys::Text(keys)) => ("key_type = \"string\"\n", keys.clone()),
            (KeyType::Base64 { explicit, padded }, Keys::Binary(keys)) => {
                let engine = if *padded {
                    base64::engine::general_purpose::STANDARD
                } else {
                    base64::engine::general_purpose::STANDARD_NO_PAD
                };
                (
                    if *explicit {
                        "key_type = \"binary\"\nencoding = \"base64\"\n"
                    } else {
                        "key_type = \"binary\"\n"
                    },
                    keys.iter().map(|key| engine.encode(key)).collect(),
                )
            }
            (KeyType::Hex { upper }, Keys::Binary(keys)) => (
                "key_type = \"binary\"\nencoding = \"hex\"\n",
                keys.iter()
                    .map(|key| {
                        if *upper {
                            hex::encode_upper(key)
                        } else {
                            hex::encode(key)
                        }
                    })
                    .collect(),
            ),
            _ => unreachable!("keys generated for their type"),
        };
        text.push_str(header);
        text.push_str(&format!("keys = {}\n", toml_list(&keys)));
        let method = ["", "Read", "Write", "ReadWrite"][usize::from(rule.method)];
        text.push_str(&format!("method = \"{method}\"\n"));
    }
    for rule in &document.devicebound {
        text.push_str("\n[[devicebound]]\n");
        render_subjects(&mut text, &rule.subjects);
        text.push_str(&format!("devices = {}\n", toml_list(&rule.devices)));
        let actions: Vec<&str> = rule
            .actions
            .iter()
            .map(|&action| action_name(action))
            .collect();
        text.push_str(&format!("actions = {}\n", toml_list(&actions)));
    }
    text
}

/// Naive: every entry compiled as a SCAN glob (one without `*`, `?`, `[` matches exactly
/// itself). Not "equal or glob": a glob such as `[ab]` does not match its own text.
fn naive_match(pattern: &str, candidate: &[u8]) -> bool {
    Glob::compile(pattern.as_bytes())
        .expect("generated globs compile")
        .matches(candidate)
        .matched
}

fn naive_subject(document: &Document, subjects: &Subjects, identity: Option<&str>) -> bool {
    let Some(identity) = identity else {
        return false;
    };
    let named = subjects
        .principals
        .iter()
        .flatten()
        .any(|principal| naive_match(principal, identity.as_bytes()));
    let grouped = subjects.groups.iter().flatten().any(|&group| {
        document.groups[group]
            .iter()
            .any(|member| naive_match(member, identity.as_bytes()))
    });
    named || grouped
}

fn is_open(document: &Document) -> bool {
    document.state_store.is_empty() && document.devicebound.is_empty()
}

fn naive_key(document: &Document, identity: Option<&str>, access: KeyAccess, key: &[u8]) -> bool {
    if is_open(document) {
        return true;
    }
    let bit = match access {
        KeyAccess::Read => 1,
        KeyAccess::Write => 2,
    };
    document.state_store.iter().any(|rule| {
        naive_subject(document, &rule.subjects, identity)
            && rule.method & bit != 0
            && match (&rule.key_type, &rule.keys) {
                (KeyType::Pattern { .. }, Keys::Text(keys)) => {
                    keys.iter().any(|pattern| naive_match(pattern, key))
                }
                (KeyType::String, Keys::Text(keys)) => {
                    keys.iter().any(|text| text.as_bytes() == key)
                }
                (_, Keys::Binary(keys)) => keys.iter().any(|bytes| bytes == key),
                _ => false,
            }
    })
}

fn naive_device(
    document: &Document,
    identity: Option<&str>,
    action: DeviceAction,
    device: Option<&str>,
) -> bool {
    if is_open(document) {
        return true;
    }
    document.devicebound.iter().any(|rule| {
        naive_subject(document, &rule.subjects, identity)
            && rule.actions.contains(&action)
            && (action == DeviceAction::Feedback
                || device.is_some_and(|device| {
                    rule.devices
                        .iter()
                        .any(|pattern| naive_match(pattern, device.as_bytes()))
                }))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn policy_agrees_with_the_naive_model(
        document in document(),
        identities in prop::collection::vec(
            prop::option::weighted(0.9, prop_oneof![prop::sample::select(IDENTITIES)
                .prop_map(str::to_owned), text()]),
            1..4,
        ),
        keys in prop::collection::vec(bytes(), 1..6),
        devices in prop::collection::vec(prop::option::weighted(0.9, text()), 1..4),
    ) {
        let text = render(&document);
        let policy = Policy::parse(&text).map_err(|error| {
            TestCaseError::fail(format!("refused {text:?}: {error}"))
        })?;
        prop_assert_eq!(policy.is_open(), is_open(&document));
        prop_assert_eq!(
            policy.rule_count(),
            document.state_store.len() + document.devicebound.len()
        );
        // Keys the rules name, so that grants are often exercised, plus the random ones.
        let mut probes = keys;
        for rule in &document.state_store {
            match &rule.keys {
                Keys::Text(keys) => probes.extend(keys.iter().map(|key| key.as_bytes().to_vec())),
                Keys::Binary(keys) => probes.extend(keys.iter().cloned()),
            }
        }
        let mut device_probes = devices;
        for rule in &document.devicebound {
            device_probes.extend(rule.devices.iter().cloned().map(Some));
        }
        let mut identity_probes = identities;
        for rule in &document.state_store {
            identity_probes.extend(rule.subjects.principals.iter().flatten().cloned().map(Some));
        }
        for identity in &identity_probes {
            let grants = policy.grants(identity.as_deref());
            for key in &probes {
                for access in [KeyAccess::Read, KeyAccess::Write] {
                    prop_assert_eq!(
                        grants.allows_key(access, key),
                        naive_key(&document, identity.as_deref(), access, key),
                        "{:?} {:?} {:?} in\n{}", identity, access, key, text
                    );
                }
            }
            for device in &device_probes {
                for action in ACTIONS {
                    prop_assert_eq!(
                        grants.allows_device(action, device.as_deref()),
                        naive_device(&document, identity.as_deref(), action, device.as_deref()),
                        "{:?} {:?} {:?} in\n{}", identity, action, device, text
                    );
                }
            }
        }
    }
}
