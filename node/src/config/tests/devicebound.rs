//! The `[devicebound]` settings (devicebound.md §5): defaults, every range edge
//! through the TOML file, unknown keys, the flags, and the limits handed on.

use super::*;
use crate::cli::{Cli, CliCommand};
use clap::Parser;

/// devicebound.md §5 (defaults) and the ranges the brief and README give:
/// (setting, default, minimum, maximum).
const SETTINGS: [(&str, u64, u64, u64); 12] = [
    ("max_queue_depth", 50, 1, 5_000),
    ("max_message_bytes", 65_536, 1, 262_144),
    ("default_ttl_ms", 3_600_000, 60_000, 172_800_000),
    ("max_delivery_count", 10, 1, 100),
    ("lock_duration_ms", 60_000, 5_000, 300_000),
    ("device_window", 1, 1, 32),
    ("feedback_ttl_ms", 3_600_000, 60_000, 172_800_000),
    ("feedback_max_delivery_count", 10, 1, 100),
    ("feedback_lock_duration_ms", 60_000, 5_000, 300_000),
    ("max_dead_letters_per_device", 100, 1, 1_000),
    ("max_devices", 1_000_000, 1, 10_000_000),
    ("max_messages", 1_000_000, 1, 100_000_000),
];

/// The `[devicebound]` settings of a config by name, in the settings table's order.
fn devicebound_values(config: &Config) -> Vec<(&'static str, u64)> {
    let tree = toml::Table::try_from(config).expect("serialises");
    table::SETTINGS
        .iter()
        .filter_map(|row| {
            let name = row.path.strip_prefix("devicebound.")?;
            let value = setting::lookup(&tree, row.path)?.as_integer()?;
            Some((name, u64::try_from(value).ok()?))
        })
        .collect()
}

fn from_toml(setting: &str, value: u64) -> Config {
    Config::from_toml_str(&format!("[devicebound]\n{setting} = {value}\n")).expect("parses")
}

#[test]
fn section_5_defaults() {
    let config = Config::default();
    config.validate().expect("defaults validate");
    let defaults = devicebound_values(&config);
    let expected: Vec<(&str, u64)> = SETTINGS
        .iter()
        .map(|(name, default, _, _)| (*name, *default))
        .collect();
    assert_eq!(defaults, expected);
    assert_eq!(config.devicebound_limits().max_message_bytes, 65_536);
}

#[test]
fn section_5_every_range_edge_from_the_file() {
    for (setting, _, minimum, maximum) in SETTINGS {
        for accepted in [minimum, maximum] {
            let config = from_toml(setting, accepted);
            assert_eq!(
                config.validate().map_err(|e| e.to_string()),
                Ok(()),
                "{setting} = {accepted}"
            );
            let value = devicebound_values(&config)
                .into_iter()
                .find(|(name, _)| *name == setting)
                .map(|(_, value)| value);
            assert_eq!(value, Some(accepted), "{setting} reaches its field");
        }
        for refused in [minimum - 1, maximum + 1] {
            let error = from_toml(setting, refused)
                .validate()
                .map_err(|e| e.to_string());
            assert_eq!(
                error,
                Err(format!(
                    "configuration: devicebound.{setting} must be between {minimum} and {maximum} (got {refused})"
                )),
                "{setting} = {refused}"
            );
        }
    }
}

#[test]
fn section_5_unknown_keys_and_negative_values_are_refused() {
    assert!(Config::from_toml_str("[devicebound]\nmax_queue_size = 5\n").is_err());
    assert!(Config::from_toml_str("[devicebound]\nmax_queue_depth = -1\n").is_err());
    let config: Config =
        Config::from_toml_str("[devicebound]\nmax_message_bytes = 1024\ndevice_window = 4\n")
            .expect("parses");
    assert_eq!(config.devicebound.device_window, 4);
    assert_eq!(
        config.devicebound.max_queue_depth, 50,
        "unset keys keep defaults"
    );
    assert_eq!(config.devicebound_limits().max_message_bytes, 1_024);
}

#[test]
fn section_5_flags_override_the_file_and_are_range_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("node.toml");
    std::fs::write(
        &path,
        "[devicebound]\nmax_queue_depth = 5\nlock_duration_ms = 6000\n",
    )
    .expect("write");
    let path = path.to_str().expect("utf8");
    let run = |flags: &[&str]| {
        let mut arguments = vec!["statestore", "run", "--config", path];
        arguments.extend(flags);
        let CliCommand::Run(args) = Cli::try_parse_from(arguments).expect("parses").command else {
            panic!("run expected")
        };
        args.into_config().map_err(|e| e.to_string())
    };
    let config = run(&[
        "--devicebound-max-queue-depth",
        "7",
        "--devicebound-max-message-bytes",
        "100",
        "--devicebound-default-ttl-ms",
        "60000",
        "--devicebound-max-delivery-count",
        "3",
        "--devicebound-device-window",
        "32",
        "--devicebound-feedback-ttl-ms",
        "172800000",
        "--devicebound-feedback-max-delivery-count",
        "100",
        "--devicebound-feedback-lock-duration-ms",
        "5000",
        "--devicebound-max-dead-letters-per-device",
        "1000",
        "--devicebound-max-devices",
        "10",
        "--devicebound-max-messages",
        "20",
    ])
    .expect("valid");
    assert_eq!(
        config.devicebound,
        DeviceboundConfig {
            max_queue_depth: 7,
            max_message_bytes: 100,
            default_ttl_ms: 60_000,
            max_delivery_count: 3,
            lock_duration_ms: 6_000,
            device_window: 32,
            feedback_ttl_ms: 172_800_000,
            feedback_max_delivery_count: 100,
            feedback_lock_duration_ms: 5_000,
            max_dead_letters_per_device: 1_000,
            max_devices: 10,
            max_messages: 20,
        },
        "flags win; lock_duration_ms comes from the file"
    );
    assert_eq!(
        run(&["--devicebound-device-window", "33"]),
        Err(
            "configuration: devicebound.device_window must be between 1 and 32 (got 33)".to_owned()
        )
    );
    assert_eq!(
        run(&["--devicebound-lock-duration-ms", "4999"]),
        Err("configuration: devicebound.lock_duration_ms must be between 5000 and 300000 (got 4999)".to_owned())
    );
}
