//! Compiling a policy: the principal index (exact, globs, groups), shared keys and globs, and
//! merging an identity's rules.

use super::*;
use crate::KeyAccess;

fn policy(text: &str) -> Policy {
    Policy::parse(text).expect("valid policy")
}

#[test]
fn open_policies_have_no_rules() {
    for text in ["", "# nothing\n", "[groups]\nops = [\"a\"]\n"] {
        let policy = policy(text);
        assert!(policy.is_open());
        assert_eq!(policy.rule_count(), 0);
        assert!(policy.grants(None).allows_key(KeyAccess::Write, b"\xff"));
    }
    assert!(Policy::open().is_open());
    assert!(
        Policy::open()
            .grants(None)
            .allows_device(DeviceAction::Send, None)
    );
}

#[test]
fn principals_are_indexed_exact_or_glob_once_each() {
    let policy = policy(
        "[groups]\n\
         ops = [\"alice\", \"ops-*\", \"alice\"]\n\
         [[state_store]]\nprincipals = [\"bob\", \"alice\", \"s-*\", \"bob\"]\n\
         groups = [\"ops\", \"ops\"]\nkeys = [\"k\"]\nmethod = \"Read\"\n\
         [[devicebound]]\nprincipals = [\"s-*\"]\ndevices = [\"d\"]\nactions = [\"send\"]\n",
    );
    assert_eq!(policy.rule_count(), 2);
    assert!(!policy.is_open());
    let mut exact: Vec<&str> = policy.exact_principals.keys().map(|key| &**key).collect();
    exact.sort_unstable();
    assert_eq!(exact, ["alice", "bob"]);
    assert_eq!(policy.exact_principals["bob"].rules, [0]);
    assert_eq!(policy.exact_principals["alice"].rules, [0]);
    assert_eq!(policy.exact_principals["alice"].groups, [0]);
    // `s-*` once, pointing at both rules; `ops-*` once, pointing at the group.
    assert_eq!(policy.glob_principals.len(), 2);
    let rules: Vec<&[u32]> = policy
        .glob_principals
        .iter()
        .map(|(_, targets)| targets.rules.as_slice())
        .collect();
    assert_eq!(rules, [&[][..], &[0, 1]]);
    assert_eq!(policy.groups, [vec![0]]);
}

#[test]
fn keys_and_globs_are_shared_between_rules() {
    let policy = policy(
        "[[state_store]]\nprincipals = [\"a\"]\nkeys = [\"k\", \"g*\"]\nmethod = \"Read\"\n\
         [[state_store]]\nprincipals = [\"b\"]\nkeys = [\"k\", \"g*\", \"h?\"]\n\
         method = \"Write\"\n\
         [[state_store]]\nprincipals = [\"c\"]\nkey_type = \"binary\"\nencoding = \"hex\"\n\
         keys = [\"6b\"]\nmethod = \"Write\"\n",
    );
    assert_eq!(policy.key_patterns.len(), 2);
    assert_eq!(policy.state_rules[1].patterns, [0, 1]);
    // The exact key `k` (and the binary key 0x6b, the same bytes) is stored once.
    assert!(Arc::ptr_eq(
        &policy.state_rules[0].exact[0],
        &policy.state_rules[1].exact[0]
    ));
    assert!(Arc::ptr_eq(
        &policy.state_rules[0].exact[0],
        &policy.state_rules[2].exact[0]
    ));
}

#[test]
fn grants_merge_every_rule_of_the_identity() {
    let policy = policy(
        "[groups]\ng = [\"x*\"]\n\
         [[state_store]]\nprincipals = [\"xa\"]\nkeys = [\"k\", \"p*\"]\nmethod = \"Read\"\n\
         [[state_store]]\ngroups = [\"g\"]\nkeys = [\"k\", \"p*\", \"q\"]\nmethod = \"Write\"\n\
         [[state_store]]\nprincipals = [\"other\"]\nkeys = [\"z\"]\nmethod = \"ReadWrite\"\n",
    );
    let grants = policy.grants(Some("xa"));
    let data = grants.inner_for_tests();
    assert_eq!(data.keys.len(), 2);
    assert_eq!(data.keys.get(&b"k"[..]), Some(&0b11));
    assert_eq!(data.keys.get(&b"q"[..]), Some(&0b10));
    assert_eq!(data.key_patterns.len(), 1);
    assert!(
        grants.allows_key(KeyAccess::Read, b"pp"),
        "the glob's bits are merged"
    );
    assert!(grants.allows_key(KeyAccess::Write, b"pp"));
    assert!(!grants.allows_key(KeyAccess::Read, b"z"));
    // Only the group's rule.
    let grants = policy.grants(Some("xb"));
    assert!(grants.allows_key(KeyAccess::Write, b"k"));
    assert!(!grants.allows_key(KeyAccess::Read, b"k"));
    assert!(!policy.grants(None).allows_key(KeyAccess::Read, b"z"));
}

#[test]
fn feedback_only_rules_add_no_devices() {
    let policy = policy(
        "[[devicebound]]\nprincipals = [\"f\"]\ndevices = [\"d\", \"e*\"]\n\
         actions = [\"feedback\"]\n",
    );
    let grants = policy.grants(Some("f"));
    assert!(grants.inner_for_tests().devices.is_empty());
    assert!(grants.inner_for_tests().device_patterns.is_empty());
    assert!(grants.allows_device(DeviceAction::Feedback, None));
    assert!(!grants.allows_device(DeviceAction::Send, Some("d")));
}

#[test]
fn debug_is_a_summary() {
    let policy = policy("[[state_store]]\nprincipals = [\"a\"]\nkeys = [\"k\"]\nmethod = \"Read\"");
    let text = format!("{policy:?}");
    assert!(
        text.starts_with("Policy { state_store_rules: 1, devicebound_rules: 0"),
        "{text}"
    );
    let text = format!("{:?}", policy.grants(Some("a")));
    assert!(text.contains("exact_keys: 1"), "{text}");
}
