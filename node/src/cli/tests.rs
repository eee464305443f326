//! The `statestore run` flags: over the file, the hand-written ones, and the errors.

use super::*;

#[test]
fn flags_override_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("node.toml");
    std::fs::write(
        &path,
        "id = 3\n[mqtt]\nbroker = \"a:1\"\n[limits]\nmax_keys = 5\n",
    )
    .expect("write");
    let cli = Cli::try_parse_from([
        "statestore",
        "run",
        "--config",
        path.to_str().expect("utf8"),
        "--broker",
        "b:2",
        "--peer",
        "3=127.0.0.1:1",
        "--peer",
        "4=127.0.0.1:2",
        "--max-registrations",
        "7",
        "--max-observers-per-key",
        "6",
        "--max-remembered-replies",
        "8",
        "--max-remembered-reply-bytes",
        "9",
    ])
    .expect("parses");
    let CliCommand::Run(args) = cli.command else {
        panic!("run expected")
    };
    let config = args.into_config().expect("valid");
    assert_eq!(config.id, 3, "from the file");
    assert_eq!(config.mqtt.broker, "b:2", "flag wins");
    assert_eq!(config.limits.max_keys, 5);
    let quota = config.quota();
    assert_eq!(
        (
            quota.max_registrations,
            u64::from(quota.max_observers_per_key),
            quota.max_remembered_replies,
            quota.max_remembered_reply_bytes
        ),
        (7, 6, 8, 9)
    );
    assert_eq!(config.initial_members().expect("members").len(), 2);
}

#[test]
fn security_flags_set_their_sections_and_go_in_sets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("token");
    std::fs::write(&token, "0123456789abcdef0123\n").expect("write");
    let parse = |flags: &[&str]| {
        let mut argv = vec!["statestore", "run"];
        argv.extend(flags);
        let CliCommand::Run(args) = Cli::try_parse_from(argv).expect("parses").command else {
            panic!("run expected")
        };
        args.into_config()
    };
    let config = parse(&["--admin-token-file", token.to_str().expect("utf8")]).expect("valid");
    assert_eq!(config.admin.token_file.as_deref(), Some(token.as_path()));
    // Off loopback without a token: refused unless said explicitly.
    let open = parse(&["--http", "0.0.0.0:7480"]).expect_err("no token off loopback");
    assert!(
        open.to_string().contains("admin.token_file")
            && open.to_string().contains("--allow-insecure-http"),
        "{open}"
    );
    let config = parse(&["--http", "0.0.0.0:7480", "--allow-insecure-http"]).expect("allowed");
    assert!(config.admin.allow_insecure_http);
    parse(&[
        "--http",
        "0.0.0.0:7480",
        "--admin-token-file",
        token.to_str().expect("utf8"),
    ])
    .expect("a token is enough");
    assert_eq!(config.cluster.tls, None, "peer TLS stays off");
    let partial =
        parse(&["--peer-tls-ca", "/ca.pem", "--peer-tls-cert", "/node.pem"]).expect_err("no key");
    assert!(partial.to_string().contains("go together"), "{partial}");
    let partial = parse(&["--http-tls-key", "/http.key"]).expect_err("no cert");
    assert!(partial.to_string().contains("go together"), "{partial}");
    // A whole set is taken, and then its files must load.
    let missing = parse(&[
        "--peer-tls-ca",
        "/nonexistent/ca.pem",
        "--peer-tls-cert",
        "/nonexistent/node.pem",
        "--peer-tls-key",
        "/nonexistent/node.key",
    ])
    .expect_err("files missing");
    assert!(missing.to_string().contains("cluster.tls"), "{missing}");
}

#[test]
fn reply_topic_prefix_flags_replace_the_default_and_are_validated() {
    let parse = |flags: &[&str]| {
        let mut argv = vec!["statestore", "run"];
        argv.extend(flags);
        let CliCommand::Run(args) = Cli::try_parse_from(argv).expect("parses").command else {
            panic!("run expected")
        };
        args.into_config()
    };
    assert_eq!(
        parse(&[]).expect("valid").mqtt.reply_topic_prefixes,
        vec!["clients/".to_owned()]
    );
    let config = parse(&[
        "--reply-topic-prefix",
        "clients/",
        "--reply-topic-prefix",
        "replies/",
    ])
    .expect("valid");
    assert_eq!(
        config.mqtt.reply_topic_prefixes,
        vec!["clients/".to_owned(), "replies/".to_owned()]
    );
    assert!(config.service().reply_topics.allows("replies/a"));
    for bad in ["", "clients/#", "+/x"] {
        let err = parse(&["--reply-topic-prefix", bad]).expect_err("refused");
        assert!(
            err.to_string().contains("mqtt.reply_topic_prefixes"),
            "{bad:?}: {err}"
        );
    }
}

#[test]
fn bad_peer_flag_is_an_error() {
    let args = RunArgs {
        peers: vec!["nonsense".into()],
        ..RunArgs::default()
    };
    assert!(args.into_config().is_err());
}
