//! `Config`: the defaults, a TOML file over them, and the settings refused with a message.
//! More under `tests/`: the device-bound section and the peer listener's settings.

use super::*;

mod devicebound;
mod peers;

#[test]
fn defaults_are_valid_and_match_the_spec_limits() {
    let config = Config::default();
    config.validate().expect("defaults validate");
    assert_eq!(config.limits.max_key_bytes, 60 * 1024);
    assert_eq!(config.limits.max_value_bytes, 4 << 20);
    assert_eq!(config.limits.max_array_len, 8);
    assert_eq!(config.limits.max_keys, 1_000_000);
    assert_eq!(config.limits.max_bytes, 1 << 30);
    assert_eq!(config.limits.max_registrations_per_client, 1_000);
    assert_eq!(config.limits.max_registrations, 1_000_000);
    assert_eq!(config.limits.max_observers_per_key, 1_000);
    assert_eq!(config.limits.bulk_egress_mb_per_sec, 8);
    assert_eq!(config.limits.bulk_egress_messages_per_sec, 20_000);
    assert_eq!(config.limits.max_remembered_replies, 1_000_000);
    assert_eq!(config.limits.max_remembered_reply_bytes, 256 << 20);
    assert_eq!(
        config.quota(),
        Limits::default(),
        "the replicated caps are the storage defaults"
    );
    assert_eq!(config.limits.max_px_ms, 30 * 24 * 3600 * 1000);
    assert_eq!(
        config.initial_members().expect("members"),
        BTreeMap::from([(1, "127.0.0.1:7481".to_owned())])
    );
}

#[test]
fn toml_file_overrides_defaults_and_rejects_unknown_keys() {
    let config: Config = Config::from_toml_str(
        r#"
        id = 2
        data_dir = "/tmp/x"
        [mqtt]
        broker = "broker:1884"
        [cluster.peers]
        1 = "10.0.0.1:7481"
        2 = "10.0.0.2:7481"
        [limits]
        max_keys = 10
        max_registrations = 20
        max_observers_per_key = 25
        max_remembered_replies = 30
        max_remembered_reply_bytes = 40
        "#,
    )
    .expect("parses");
    assert_eq!(config.id, 2);
    assert_eq!(config.mqtt.broker, "broker:1884");
    assert_eq!(config.limits.max_keys, 10);
    let quota = config.quota();
    assert_eq!(
        (
            quota.max_registrations,
            u64::from(quota.max_observers_per_key),
            quota.max_remembered_replies,
            quota.max_remembered_reply_bytes
        ),
        (20, 25, 30, 40),
        "the caps reach the replicated limits"
    );
    assert_eq!(
        config.limits.max_key_bytes,
        60 * 1024,
        "unset keys keep defaults"
    );
    assert_eq!(config.initial_members().expect("members").len(), 2);
    assert!(Config::from_toml_str("idd = 2").is_err());
}

#[test]
fn invalid_settings_are_refused_with_a_message() {
    let bad: Vec<(&str, Config)> = vec![
        (
            "id 0",
            Config {
                id: 0,
                ..Config::default()
            },
        ),
        (
            "name with ':'",
            Config {
                name: Some("a:b".into()),
                ..Config::default()
            },
        ),
        (
            "election below heartbeat",
            Config {
                cluster: ClusterConfig {
                    heartbeat_ms: 500,
                    election_timeout_min_ms: 400,
                    ..ClusterConfig::default()
                },
                ..Config::default()
            },
        ),
        (
            "peers without this node",
            Config {
                cluster: ClusterConfig {
                    peers: BTreeMap::from([("2".into(), "x:1".into())]),
                    ..ClusterConfig::default()
                },
                ..Config::default()
            },
        ),
        (
            "no reply memory",
            Config {
                limits: LimitsConfig {
                    max_remembered_replies: 0,
                    ..LimitsConfig::default()
                },
                ..Config::default()
            },
        ),
        (
            "no bytes for the reply memory",
            Config {
                limits: LimitsConfig {
                    max_remembered_reply_bytes: 0,
                    ..LimitsConfig::default()
                },
                ..Config::default()
            },
        ),
        (
            "no observers per key",
            Config {
                limits: LimitsConfig {
                    max_observers_per_key: 0,
                    ..LimitsConfig::default()
                },
                ..Config::default()
            },
        ),
        (
            "observers per key above a million",
            Config {
                limits: LimitsConfig {
                    max_observers_per_key: 1_000_001,
                    ..LimitsConfig::default()
                },
                ..Config::default()
            },
        ),
        (
            "a bulk lane paced at zero bytes",
            Config {
                limits: LimitsConfig {
                    bulk_egress_mb_per_sec: 0,
                    ..LimitsConfig::default()
                },
                ..Config::default()
            },
        ),
        (
            "a bulk lane paced at zero messages",
            Config {
                limits: LimitsConfig {
                    bulk_egress_messages_per_sec: 0,
                    ..LimitsConfig::default()
                },
                ..Config::default()
            },
        ),
        (
            "array too short for SET NX PX",
            Config {
                limits: LimitsConfig {
                    max_array_len: 4,
                    ..LimitsConfig::default()
                },
                ..Config::default()
            },
        ),
        (
            "trace sample ratio above 1",
            Config {
                telemetry: TelemetryConfig {
                    trace_sample_ratio: 1.5,
                    ..TelemetryConfig::default()
                },
                ..Config::default()
            },
        ),
        (
            "negative trace sample ratio",
            Config {
                telemetry: TelemetryConfig {
                    trace_sample_ratio: -0.1,
                    ..TelemetryConfig::default()
                },
                ..Config::default()
            },
        ),
    ];
    for (name, config) in bad {
        assert!(config.validate().is_err(), "{name} must be refused");
    }
}
