use super::*;
use statestore_policy::Policy;

/// A policy granting `reader-N` (for any N) one key, so every identity has small grants.
fn policy() -> Policy {
    Policy::parse(
        r#"
[[state_store]]
principals = ["reader-*"]
key_type = "string"
keys = ["k"]
method = "Read"
"#,
    )
    .expect("valid policy")
}

fn grants(policy: &Policy, identity: &str) -> Arc<Grants> {
    Arc::new(policy.grants(Some(identity)))
}

#[test]
fn keeps_at_most_max_entries_dropping_the_oldest_first() {
    let policy = policy();
    let mut cache = GrantsCache::new(3, MAX_BYTES);
    for n in 0..5 {
        let identity = format!("reader-{n}");
        cache.insert(Some(&identity), grants(&policy, &identity));
        assert!(cache.len() <= 3);
    }
    assert_eq!(cache.len(), 3);
    assert!(cache.get(Some("reader-0")).is_none());
    assert!(cache.get(Some("reader-1")).is_none());
    for n in 2..5 {
        assert!(
            cache.get(Some(&format!("reader-{n}"))).is_some(),
            "reader-{n}"
        );
    }
}

#[test]
fn keeps_at_most_max_bytes() {
    let policy = policy();
    let one = ENTRY_OVERHEAD_BYTES + "reader-0".len() + grants(&policy, "reader-0").approx_bytes();
    let mut cache = GrantsCache::new(MAX_ENTRIES, 2 * one + one / 2);
    for n in 0..6 {
        let identity = format!("reader-{n}");
        cache.insert(Some(&identity), grants(&policy, &identity));
        assert!(
            cache.bytes() <= 2 * one + one / 2,
            "{} bytes",
            cache.bytes()
        );
    }
    assert_eq!(cache.len(), 2);
    assert!(cache.get(Some("reader-5")).is_some());
}

#[test]
fn an_entry_larger_than_the_budget_is_not_kept() {
    let policy = policy();
    let mut cache = GrantsCache::new(MAX_ENTRIES, 16);
    cache.insert(Some("reader-0"), grants(&policy, "reader-0"));
    assert!(cache.is_empty());
    assert_eq!(cache.bytes(), 0);
}

#[test]
fn the_unknown_requester_is_an_entry_of_its_own() {
    let policy = policy();
    let mut cache = GrantsCache::new(2, MAX_BYTES);
    cache.insert(None, Arc::new(policy.grants(None)));
    cache.insert(Some("reader-0"), grants(&policy, "reader-0"));
    assert!(cache.get(None).is_some());
    assert_eq!(cache.len(), 2);
    // Full: the named entries go first (the anonymous one is shared by every unknown requester).
    cache.insert(Some("reader-1"), grants(&policy, "reader-1"));
    assert_eq!(cache.len(), 2);
    assert!(cache.get(Some("reader-0")).is_none());
    assert!(cache.get(None).is_some());
    // With room for one, it goes too.
    let mut one = GrantsCache::new(1, MAX_BYTES);
    one.insert(None, Arc::new(policy.grants(None)));
    one.insert(Some("reader-0"), grants(&policy, "reader-0"));
    assert_eq!(one.len(), 1);
    assert!(one.get(None).is_none());
    cache.clear();
    assert!(cache.is_empty());
    assert_eq!(cache.bytes(), 0);
}

#[test]
fn inserting_an_identity_again_changes_nothing() {
    let policy = policy();
    let mut cache = GrantsCache::new(MAX_ENTRIES, MAX_BYTES);
    cache.insert(Some("reader-0"), grants(&policy, "reader-0"));
    let bytes = cache.bytes();
    cache.insert(Some("reader-0"), grants(&policy, "reader-0"));
    assert_eq!((cache.len(), cache.bytes()), (1, bytes));
}
