use super::*;
use statestore_policy::KeyAccess;

const ALICE_READS_A: &str = r#"
[[state_store]]
principals = ["alice"]
key_type = "pattern"
keys = ["a/*"]
method = "Read"
"#;

const ALICE_WRITES_A: &str = r#"
[[state_store]]
principals = ["alice"]
key_type = "pattern"
keys = ["a/*"]
method = "Write"
"#;

fn parse(text: &str) -> Policy {
    Policy::parse(text).expect("valid policy")
}

#[test]
fn an_open_authorizer_allows_everything_and_caches_nothing() {
    let metrics = AuthzMetrics::new();
    let authorizer = Authorizer::new(Policy::open(), metrics.clone());
    assert!(authorizer.is_open());
    let grants = authorizer.grants(Some("anyone"));
    assert!(grants.allows_key(KeyAccess::Write, b"any"));
    assert!(authorizer.grants(None).allows_key(KeyAccess::Read, b"any"));
    assert_eq!(metrics.grants_cached.get(), 0);
    assert_eq!(metrics.policy_rules.get(), 0);
}

#[test]
fn grants_follow_the_policy_in_force_and_a_replace_drops_the_cache() {
    let metrics = AuthzMetrics::new();
    let authorizer = Authorizer::new(parse(ALICE_READS_A), metrics.clone());
    assert_eq!(metrics.policy_rules.get(), 1);
    let before = authorizer.grants(Some("alice"));
    assert!(before.allows_key(KeyAccess::Read, b"a/1"));
    assert!(!before.allows_key(KeyAccess::Write, b"a/1"));
    assert!(
        !authorizer
            .grants(Some("bob"))
            .allows_key(KeyAccess::Read, b"a/1")
    );
    assert!(!authorizer.grants(None).allows_key(KeyAccess::Read, b"a/1"));
    assert_eq!(metrics.grants_cached.get(), 3);
    assert!(metrics.grants_cached_bytes.get() > 0);

    authorizer.replace(parse(ALICE_WRITES_A));
    assert_eq!(metrics.grants_cached.get(), 0, "cache dropped");
    let after = authorizer.grants(Some("alice"));
    assert!(after.allows_key(KeyAccess::Write, b"a/1"));
    assert!(!after.allows_key(KeyAccess::Read, b"a/1"));

    authorizer.replace(Policy::open());
    assert!(authorizer.is_open());
    assert!(
        authorizer
            .grants(Some("bob"))
            .allows_key(KeyAccess::Write, b"z")
    );
}

#[test]
fn reloads_are_counted_by_result() {
    let metrics = AuthzMetrics::new();
    let authorizer = Authorizer::new(Policy::open(), metrics.clone());
    authorizer.count_reload("ok");
    authorizer.count_reload("error");
    authorizer.count_reload("error");
    let count = |result: &str| {
        metrics
            .policy_reloads_total
            .with_label_values(&[result])
            .get()
    };
    assert_eq!((count("ok"), count("error")), (1, 2));
}
