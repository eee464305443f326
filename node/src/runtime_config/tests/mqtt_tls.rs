//! `mqtt.broker` and `[mqtt.tls]`: which addresses parse, when TLS is on, which combinations
//! are refused (and with what message), and that unusable files stop the session settings.

use super::*;

/// A `[mqtt]` table (TOML body) and what it must give: `Ok((host, port, tls))` or
/// `Err(part of the message)`.
type Case = (
    &'static str,
    Result<(&'static str, u16, bool), &'static str>,
);

const CASES: &[Case] = &[
    ("broker = \"broker:1884\"", Ok(("broker", 1884, false))),
    ("broker = \"10.0.0.1:1883\"", Ok(("10.0.0.1", 1883, false))),
    ("broker = \"broker\"", Ok(("broker", 1883, false))),
    ("broker = \"mqtt://broker\"", Ok(("broker", 1883, false))),
    ("broker = \"mqtts://broker\"", Ok(("broker", 8883, true))),
    (
        "broker = \"mqtts://broker:9000\"",
        Ok(("broker", 9000, true)),
    ),
    ("broker = \"[::1]:1883\"", Ok(("::1", 1883, false))),
    (
        "broker = \"mqtts://[fd00::5]\"",
        Ok(("fd00::5", 8883, true)),
    ),
    (
        "broker = \"broker\"\ntls = { enabled = true }",
        Ok(("broker", 8883, true)),
    ),
    (
        "broker = \"broker:8884\"\ntls = { ca_file = \"ca.pem\" }",
        Ok(("broker", 8884, true)),
    ),
    (
        "broker = \"10.1.2.3:8883\"\ntls = { server_name = \"broker.internal\" }",
        Ok(("10.1.2.3", 8883, true)),
    ),
    (
        "broker = \"b:8883\"\ntls = { cert_file = \"c.pem\", key_file = \"c.key\" }",
        Ok(("b", 8883, true)),
    ),
    ("broker = \"ssl://broker:8883\"", Err("mqtt:// or mqtts://")),
    ("broker = \"::1:1883\"", Err("brackets")),
    ("broker = \"[::1\"", Err("unclosed")),
    ("broker = \"[::1]1883\"", Err(":PORT")),
    ("broker = \":1883\"", Err("HOST:PORT")),
    ("broker = \"broker:0\"", Err("1 to 65535")),
    ("broker = \"broker:http\"", Err("1 to 65535")),
    ("broker = \"broker:70000\"", Err("1 to 65535")),
    (
        "broker = \"mqtt://broker\"\ntls = { enabled = true }",
        Err("use mqtts://"),
    ),
    (
        "broker = \"b:8883\"\ntls = { cert_file = \"c.pem\" }",
        Err("cert_file needs mqtt.tls.key_file"),
    ),
    (
        "broker = \"b:8883\"\ntls = { key_file = \"c.key\" }",
        Err("key_file needs mqtt.tls.cert_file"),
    ),
    (
        "broker = \"b:8883\"\ntls = { server_name = \"not a name!\" }",
        Err("mqtt.tls.server_name \"not a name!\""),
    ),
    (
        "broker = \"mqtts://bad!host:1\"",
        Err("the broker host \"bad!host\""),
    ),
];

#[test]
fn broker_addresses_and_tls_settings_are_checked() {
    for (table, expected) in CASES {
        let config: Config = Config::from_toml_str(&format!("[mqtt]\n{table}\n"))
            .unwrap_or_else(|e| panic!("{table}: {e}"));
        let outcome = config.validate().and_then(|()| config.mqtt.endpoint());
        match (expected, outcome) {
            (Ok((host, port, tls)), Ok(endpoint)) => assert_eq!(
                (
                    endpoint.address.host.as_str(),
                    endpoint.address.port,
                    endpoint.tls
                ),
                (*host, *port, *tls),
                "{table}"
            ),
            (Err(part), Err(err)) => {
                let message = err.to_string();
                assert!(
                    message.contains(part),
                    "{table}: {message:?} lacks {part:?}"
                );
            }
            (expected, outcome) => panic!("{table}: expected {expected:?}, got {outcome:?}"),
        }
    }
}

#[test]
fn unusable_tls_files_stop_the_session_settings_naming_the_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let garbage = dir.path().join("ca.pem");
    std::fs::write(&garbage, "-----BEGIN NOTHING-----\n").expect("write");
    let missing = dir.path().join("missing.pem");
    for (file, what) in [(&garbage, "CA file"), (&missing, "CA file")] {
        let mut config = Config::default();
        config.mqtt.broker = "mqtts://127.0.0.1:8883".into();
        config.mqtt.tls.ca_file = Some(file.clone());
        config
            .validate()
            .expect("the settings themselves are valid");
        let message = config
            .session()
            .err()
            .unwrap_or_else(|| panic!("{} must be refused", file.display()))
            .to_string();
        assert!(
            message.contains(what) && message.contains(&file.display().to_string()),
            "{message:?}"
        );
    }
}

#[test]
fn plain_brokers_need_no_tls_files_and_tls_ones_follow_them() {
    let plain = Config::default().session().expect("plain session settings");
    assert!(plain.tls.is_none());
    assert_eq!(plain.broker.to_string(), "127.0.0.1:1883");

    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/tls/testdata");
    let mut config = Config::default();
    config.mqtt.broker = "mqtts://[::1]".into();
    config.mqtt.tls.ca_file = Some(data.join("ca.pem"));
    config.mqtt.tls.cert_file = Some(data.join("client.pem"));
    config.mqtt.tls.key_file = Some(data.join("client.key"));
    config.mqtt.tls.reload_interval_ms = 0;
    let session = config.session().expect("TLS session settings");
    assert_eq!(session.broker.to_string(), "[::1]:8883");
    let tls = session.tls.expect("TLS on");
    assert_eq!(tls.server_name.to_str(), "::1");
    assert_eq!(tls.reload_interval, None, "0 turns reloading off");
    assert!(tls.config.current().client_not_after.is_some());
}
