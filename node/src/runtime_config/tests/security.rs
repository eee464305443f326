//! `[cluster.tls]`, `[admin.tls]` and `admin.token_file`: parsing, refusal of files that do
//! not load (naming the setting), and the warnings about what a node exposes.

use super::*;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

#[test]
fn security_sections_parse_and_reject_unknown_or_missing_keys() {
    let config: Config = Config::from_toml_str(
        r#"
        [cluster.tls]
        ca_file = "/pki/ca.pem"
        cert_file = "/pki/node.pem"
        key_file = "/pki/node.key"
        [admin]
        token_file = "/secrets/token"
        [admin.tls]
        cert_file = "/pki/http.pem"
        key_file = "/pki/http.key"
        "#,
    )
    .expect("parses");
    assert_eq!(
        config.cluster.tls,
        Some(PeerTlsConfig {
            ca_file: "/pki/ca.pem".into(),
            cert_file: "/pki/node.pem".into(),
            key_file: "/pki/node.key".into(),
        })
    );
    assert_eq!(
        config.admin.tls.as_ref().map(|t| t.cert_file.clone()),
        Some(PathBuf::from("/pki/http.pem"))
    );
    assert_eq!(
        config.admin.token_file,
        Some(PathBuf::from("/secrets/token"))
    );
    let defaults = Config::default();
    assert_eq!(
        (&defaults.cluster.tls, &defaults.admin),
        (&None, &AdminConfig::default()),
        "plain text and no token by default"
    );
    assert!(
        Config::from_toml_str("[cluster.tls]\nca_file = \"a\"\ncert_file = \"b\"\n").is_err(),
        "a peer TLS section without key_file"
    );
    assert!(Config::from_toml_str("[admin]\ntoken = \"inline\"\n").is_err());
    assert!(
        Config::from_toml_str(
            "[admin.tls]\ncert_file = \"a\"\nkey_file = \"b\"\nca_file = \"c\"\n"
        )
        .is_err()
    );
}

#[test]
fn files_that_do_not_load_are_refused_naming_the_setting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let garbage = write(dir.path(), "garbage.pem", "not a certificate\n");
    let missing = dir.path().join("missing");
    let cases: Vec<(&str, Config)> = vec![
        (
            "cluster.tls",
            Config {
                cluster: ClusterConfig {
                    tls: Some(PeerTlsConfig {
                        ca_file: missing.clone(),
                        cert_file: garbage.clone(),
                        key_file: garbage.clone(),
                    }),
                    ..ClusterConfig::default()
                },
                ..Config::default()
            },
        ),
        (
            "cluster.tls",
            Config {
                cluster: ClusterConfig {
                    tls: Some(PeerTlsConfig {
                        ca_file: garbage.clone(),
                        cert_file: garbage.clone(),
                        key_file: garbage.clone(),
                    }),
                    ..ClusterConfig::default()
                },
                ..Config::default()
            },
        ),
        (
            "admin.tls.cert_file",
            Config {
                admin: AdminConfig {
                    tls: Some(HttpTlsConfig {
                        cert_file: garbage.clone(),
                        key_file: garbage.clone(),
                    }),
                    token_file: None,
                    allow_insecure_http: false,
                },
                ..Config::default()
            },
        ),
        (
            "admin.tls.cert_file",
            Config {
                admin: AdminConfig {
                    tls: Some(HttpTlsConfig {
                        cert_file: missing.clone(),
                        key_file: garbage.clone(),
                    }),
                    token_file: None,
                    allow_insecure_http: false,
                },
                ..Config::default()
            },
        ),
        (
            "admin.token_file",
            Config {
                admin: AdminConfig {
                    tls: None,
                    token_file: Some(missing.clone()),
                    allow_insecure_http: false,
                },
                ..Config::default()
            },
        ),
        (
            "admin.token_file",
            Config {
                admin: AdminConfig {
                    tls: None,
                    token_file: Some(write(dir.path(), "short", "secret\n")),
                    allow_insecure_http: false,
                },
                ..Config::default()
            },
        ),
    ];
    for (setting, config) in cases {
        let err = config.validate().expect_err(setting);
        assert!(err.to_string().contains(setting), "{setting}: {err}");
    }
    let good = Config {
        admin: AdminConfig {
            tls: None,
            token_file: Some(write(dir.path(), "token", "0123456789abcdef0123\n")),
            allow_insecure_http: false,
        },
        ..Config::default()
    };
    good.validate().expect("a readable token of 20 characters");
    assert_eq!(
        good.admin_token()
            .expect("token")
            .map(|t| t.expose().to_owned()),
        Some("0123456789abcdef0123".to_owned())
    );
}

#[test]
fn exposure_is_warned_about_only_off_loopback_and_unprotected() {
    let loopback = Config::default();
    assert!(
        loopback.exposure_warnings().is_empty(),
        "{:?}",
        loopback.exposure_warnings()
    );
    let mut open = Config::default();
    open.listen.raft = "0.0.0.0:7481".parse().expect("addr");
    open.listen.http = "10.1.2.3:7480".parse().expect("addr");
    let warnings = open.exposure_warnings();
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert!(
        warnings[0].contains("Raft listener 0.0.0.0:7481"),
        "{warnings:?}"
    );
    assert!(warnings[1].contains("plain text"), "{warnings:?}");
    assert!(warnings[2].contains("/admin/members"), "{warnings:?}");

    let mut protected = open.clone();
    protected.cluster.tls = Some(PeerTlsConfig {
        ca_file: "ca".into(),
        cert_file: "cert".into(),
        key_file: "key".into(),
    });
    protected.admin = AdminConfig {
        tls: Some(HttpTlsConfig {
            cert_file: "cert".into(),
            key_file: "key".into(),
        }),
        token_file: Some("token".into()),
        allow_insecure_http: false,
    };
    assert!(protected.exposure_warnings().is_empty());
    protected.admin.token_file = None;
    assert_eq!(
        protected.exposure_warnings().len(),
        1,
        "HTTPS alone still leaves the membership endpoint open"
    );
}

#[test]
fn an_http_listener_off_loopback_needs_a_token_or_the_insecure_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token = write(dir.path(), "token", "0123456789abcdef0123\n");
    let with_http = |addr: &str| Config {
        listen: ListenConfig {
            http: addr.parse().expect("addr"),
            ..ListenConfig::default()
        },
        ..Config::default()
    };
    for loopback in ["127.0.0.1:7480", "[::1]:7480", "127.0.0.2:7480"] {
        with_http(loopback).validate().expect(loopback);
    }
    for open in ["0.0.0.0:7480", "10.1.2.3:7480", "[::]:7480"] {
        let err = with_http(open).validate().expect_err(open).to_string();
        assert!(
            err.contains(&format!("listen.http {}", with_http(open).listen.http))
                && err.contains("admin.token_file")
                && err.contains("admin.allow_insecure_http"),
            "{open}: {err}"
        );
        let mut allowed = with_http(open);
        allowed.admin.allow_insecure_http = true;
        allowed.validate().expect("said explicitly");
        assert!(
            allowed
                .exposure_warnings()
                .iter()
                .any(|w| w.contains("need no token")),
            "and warned about"
        );
        let mut guarded = with_http(open);
        guarded.admin.token_file = Some(token.clone());
        guarded.validate().expect("a token");
    }
    let parsed: Config =
        Config::from_toml_str("[admin]\nallow_insecure_http = true\n").expect("parses");
    assert!(parsed.admin.allow_insecure_http);
}
