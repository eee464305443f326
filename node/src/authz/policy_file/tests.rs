use super::*;

const ONE_RULE: &str = r#"
[[state_store]]
principals = ["alice"]
key_type = "pattern"
keys = ["a/*"]
method = "ReadWrite"
"#;

const TWO_RULES: &str = r#"
[[state_store]]
principals = ["alice"]
key_type = "pattern"
keys = ["a/*"]
method = "ReadWrite"

[[state_store]]
principals = ["bob"]
key_type = "string"
keys = ["b"]
method = "Read"
"#;

fn write(path: &Path, text: &[u8]) {
    std::fs::write(path, text).expect("write policy");
}

#[test]
fn load_reads_a_valid_file_and_names_the_file_in_its_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("policy.toml");
    write(&path, ONE_RULE.as_bytes());
    let (policy, bytes) = load(&path).expect("valid");
    assert_eq!(policy.rule_count(), 1);
    assert_eq!(bytes, ONE_RULE.as_bytes());

    write(&path, b"[[state_store]]\nprincipals = 3\n");
    let err = load(&path).expect_err("invalid").to_string();
    assert!(err.contains("policy.toml"), "{err}");

    let err = load(&dir.path().join("absent.toml"))
        .expect_err("absent")
        .to_string();
    assert!(
        err.contains("absent.toml") && err.contains("cannot be read"),
        "{err}"
    );
}

#[test]
fn a_file_over_the_limit_or_not_text_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("policy.toml");
    let mut large = b"# ".to_vec();
    large.resize(MAX_POLICY_BYTES + 1, b'x');
    write(&path, &large);
    assert!(matches!(
        load(&path),
        Err(NodeError::Policy {
            reason: PolicyFileError::TooLarge,
            ..
        })
    ));
    write(&path, b"# \xff\xfe\n");
    assert!(matches!(
        load(&path),
        Err(NodeError::Policy {
            reason: PolicyFileError::NotText,
            ..
        })
    ));
}

#[test]
fn the_follower_reports_each_change_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("policy.toml");
    write(&path, ONE_RULE.as_bytes());
    let (_, bytes) = load(&path).expect("valid");
    let follower = Follower::new(path.clone(), bytes);
    assert!(matches!(follower.check(), Check::Unchanged));

    write(&path, TWO_RULES.as_bytes());
    match follower.check() {
        Check::Changed(policy) => assert_eq!(policy.rule_count(), 2),
        other => panic!("expected a change, got {other:?}"),
    }
    assert!(matches!(follower.check(), Check::Unchanged));

    write(&path, b"[[state_store]]\nnot = \"a rule\"\n");
    assert!(matches!(
        follower.check(),
        Check::Refused(PolicyFileError::Invalid(_))
    ));
    assert!(
        matches!(follower.check(), Check::Unchanged),
        "reported once"
    );

    std::fs::remove_file(&path).expect("remove");
    assert!(matches!(
        follower.check(),
        Check::Refused(PolicyFileError::Read(_))
    ));
    assert!(
        matches!(follower.check(), Check::Unchanged),
        "reported once"
    );

    write(&path, ONE_RULE.as_bytes());
    assert!(matches!(follower.check(), Check::Changed(_)));
}
