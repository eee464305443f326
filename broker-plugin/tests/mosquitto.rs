//! Black-box: a real Mosquitto (the harness's broker, `statestore_harness::broker`) loads the
//! .so this build made, with a password file; `mosquitto_pub` publishes as user A with a forged
//! `__ssVouchedId`, `mosquitto_sub` (MQTT 5, `-F` with `%P` user properties and `%R` response
//! topic) sees A's user name instead, and a request whose response topic lies outside
//! `clients/<client id>/` is not delivered. Over a TLS listener with `use_identity_as_username`
//! the identity is the client certificate's CN.
//!
//! The test lives in the plugin's crate because `cargo test -p statestore-mosquitto-plugin`
//! (and `cargo test --workspace`) builds the crate's cdylib before its integration tests, so
//! the .so under test is always the one just built: in the `deps/` directory of cargo's target
//! directory (CARGO_TARGET_DIR honoured), next to this test's executable; or at
//! `STATESTORE_MOSQUITTO_PLUGIN`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use statestore_harness::broker::Broker;
use statestore_harness::pki::Pki;
use statestore_harness::plugin::{broker_with_plugin, plugin_path};

const SS: &str = "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke";
const DB: &str = "devicebound/v1/command/invoke";
const WAIT: Duration = Duration::from_secs(10);

/// A broker loading the plugin with `options` (`plugin_opt_` lines without the prefix),
/// users alice/pw-a and bob/pw-b, and anonymous clients allowed.
fn broker(dir: &Path, options: &[&str]) -> Broker {
    broker_with(dir, options, "")
}

/// Like [`broker`], with `listeners` (further listener sections) in the configuration.
fn broker_with(dir: &Path, options: &[&str], listeners: &str) -> Broker {
    broker_with_plugin(
        dir,
        &[("alice", "pw-a"), ("bob", "pw-b")],
        options,
        listeners,
    )
}

/// A `mosquitto_sub` on `topics` printing `topic|user properties|response topic|payload`, one
/// line per message, read by a thread into a channel; killed on drop.
struct Subscriber {
    child: Child,
    lines: Receiver<String>,
}

impl Subscriber {
    fn start(port: u16, topics: &[&str]) -> Subscriber {
        let mut cmd = Command::new("mosquitto_sub");
        cmd.args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-V",
            "mqttv5",
            "-q",
            "1",
        ])
        .args(["-u", "bob", "-P", "pw-b", "-F", "%t|%P|%R|%p"]);
        for t in topics {
            cmd.args(["-t", t]);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("mosquitto_sub (apt-get install -y mosquitto-clients)");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Subscriber { child, lines }
    }

    /// Every line until (and with) the first whose payload is `marker`.
    fn until(&self, marker: &str) -> Vec<String> {
        let deadline = Instant::now() + WAIT;
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let done = line.ends_with(&format!("|{marker}"));
                    seen.push(line);
                    if done {
                        return seen;
                    }
                }
                Err(_) => break,
            }
        }
        panic!("marker {marker} not received; saw {seen:?}");
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `mosquitto_pub` at QoS 1 (it waits for the PUBACK) with `args` added.
fn publish(port: u16, topic: &str, payload: &str, args: &[&str]) -> Output {
    Command::new("mosquitto_pub")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-V",
            "mqttv5",
            "-q",
            "1",
        ])
        .args(["-t", topic, "-m", payload])
        .args(args)
        .output()
        .expect("mosquitto_pub (apt-get install -y mosquitto-clients)")
}

/// Publishes on `ready` until the subscriber sees it (its subscription is in place).
fn wait_subscribed(port: u16, sub: &Subscriber) {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        publish(port, "ready", "ready", &[]);
        if let Ok(line) = sub.lines.recv_timeout(Duration::from_millis(200))
            && line.starts_with("ready|")
        {
            // Drain further ready lines.
            while sub.lines.recv_timeout(Duration::from_millis(100)).is_ok() {}
            return;
        }
    }
    panic!("mosquitto_sub did not subscribe");
}

fn line_for<'a>(lines: &'a [String], payload: &str) -> Option<&'a str> {
    lines
        .iter()
        .find(|l| l.ends_with(&format!("|{payload}")))
        .map(String::as_str)
}

#[test]
fn the_broker_vouches_and_refuses_foreign_response_topics() {
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = broker(
        dir.path(),
        &["check_response_topic true", "report_interval 1"],
    );
    let port = broker.port;
    let sub = Subscriber::start(port, &[SS, DB, "other/topic", "ready"]);
    wait_subscribed(port, &sub);

    let alice = ["-u", "alice", "-P", "pw-a", "-i", "app1"];
    let forged = [
        "-D",
        "publish",
        "user-property",
        "__ssVouchedId",
        "forged",
        "-D",
        "publish",
        "user-property",
        "__srcId",
        "app1",
        "-D",
        "publish",
        "response-topic",
        "clients/app1/statestore/response",
    ];
    // 1. A forged identity is replaced by the user name; the rest is kept, in order.
    let out = publish(port, SS, "forged-ss", &[&alice[..], &forged[..]].concat());
    assert!(out.status.success(), "{out:?}");
    // 2. The device-bound request topic too.
    publish(port, DB, "forged-db", &[&alice[..], &forged[..]].concat());
    // 3. No user name: the client id.
    publish(
        port,
        SS,
        "anonymous",
        &[
            "-i",
            "anon-7",
            "-D",
            "publish",
            "user-property",
            "__ssVouchedId",
            "bob",
        ],
    );
    // 4. A response topic in another client's prefix: refused (PUBACK "not authorized").
    let refused = publish(
        port,
        SS,
        "foreign-response",
        &[
            &alice[..],
            &[
                "-D",
                "publish",
                "response-topic",
                "clients/app2/statestore/response",
            ],
        ]
        .concat(),
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("Not authorized"),
        "{refused:?}"
    );
    // 5. Not a request topic: untouched, even a forged property.
    publish(
        port,
        "other/topic",
        "other",
        &[&alice[..], &forged[..]].concat(),
    );
    publish(port, SS, "marker", &alice);

    let lines = sub.until("marker");
    let got =
        |p: &str| line_for(&lines, p).unwrap_or_else(|| panic!("{p} not delivered: {lines:?}"));
    assert_eq!(
        got("forged-ss"),
        format!("{SS}|__srcId:app1 __ssVouchedId:alice|clients/app1/statestore/response|forged-ss")
    );
    assert_eq!(
        got("forged-db"),
        format!("{DB}|__srcId:app1 __ssVouchedId:alice|clients/app1/statestore/response|forged-db")
    );
    assert_eq!(
        got("anonymous"),
        format!("{SS}|__ssVouchedId:anon-7||anonymous")
    );
    assert_eq!(
        got("other"),
        "other/topic|__ssVouchedId:forged __srcId:app1|clients/app1/statestore/response|other"
    );
    assert!(
        !lines
            .iter()
            .filter(|l| l.starts_with(SS) || l.starts_with(DB))
            .any(|l| l.contains("__ssVouchedId:forged")),
        "{lines:?}"
    );
    assert_eq!(
        line_for(&lines, "foreign-response"),
        None,
        "refused request delivered"
    );

    // The drop and the forgeries are logged; the counters are reported (due after 1 s, checked
    // on the next message).
    std::thread::sleep(Duration::from_millis(1_100));
    publish(port, SS, "marker2", &alice);
    sub.until("marker2");
    let log = broker.log();
    assert!(
        log.contains("statestore-plugin: dropped a request from client 'app1'")
            && log.contains("response topic 'clients/app2/statestore/response'"),
        "{log}"
    );
    assert!(
        log.contains("removed 1 client-supplied __ssVouchedId"),
        "{log}"
    );
    assert!(
        log.contains(
            "statestore-plugin counters: vouched=4 forged_removed=3 refused_response_topic=1 \
             refused_no_identity=0 errors=0"
        ),
        "{log}"
    );
}

#[test]
fn options_choose_the_source_the_name_and_the_check() {
    let dir = tempfile::tempdir().expect("temp dir");
    let broker = broker(dir.path(), &["identity username", "property x-broker-id"]);
    let port = broker.port;
    let sub = Subscriber::start(port, &[SS, "ready"]);
    wait_subscribed(port, &sub);

    // The check is off by default: a foreign response topic passes.
    publish(
        port,
        SS,
        "foreign",
        &[
            "-u",
            "bob",
            "-P",
            "pw-b",
            "-i",
            "c1",
            "-D",
            "publish",
            "response-topic",
            "clients/x/r",
            "-D",
            "publish",
            "user-property",
            "x-broker-id",
            "alice",
        ],
    );
    // `identity username`: a client without a user name is refused.
    let refused = publish(port, SS, "no-user", &["-i", "anon"]);
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("Not authorized"),
        "{refused:?}"
    );
    publish(port, SS, "marker", &["-u", "bob", "-P", "pw-b"]);

    let lines = sub.until("marker");
    assert_eq!(
        line_for(&lines, "foreign"),
        Some(format!("{SS}|x-broker-id:bob|clients/x/r|foreign").as_str())
    );
    assert_eq!(line_for(&lines, "no-user"), None);
    assert!(
        broker
            .log()
            .contains("no identity for the configured source")
    );
}

#[test]
fn the_client_certificate_cn_is_the_identity() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pki = Pki::new();
    let ca = pki.ca("ca");
    let server = pki.leaf("ca", "broker", "IP:127.0.0.1");
    let device = pki.leaf("ca", "device-42", "DNS:device-42");
    let tls_port = statestore_harness::free_port();
    let broker = broker_with(
        dir.path(),
        &["check_response_topic true"],
        &format!(
            "listener {tls_port} 127.0.0.1\ncafile {}\ncertfile {}\nkeyfile {}\n\
             require_certificate true\nuse_identity_as_username true\n",
            ca.display(),
            server.cert.display(),
            server.key.display()
        ),
    );
    let port = broker.port;
    let sub = Subscriber::start(port, &[SS, "ready"]);
    wait_subscribed(port, &sub);

    // Over TLS with the device's certificate, claiming user alice and a forged property: the
    // broker takes the certificate's CN as the user name, and the plugin vouches for that.
    let tls = [
        "--cafile".to_string(),
        ca.display().to_string(),
        "--cert".to_string(),
        device.cert.display().to_string(),
        "--key".to_string(),
        device.key.display().to_string(),
        "-p".to_string(),
        tls_port.to_string(),
    ];
    let mut args: Vec<&str> = tls.iter().map(String::as_str).collect();
    args.extend([
        "-u",
        "alice",
        "-i",
        "dev-client",
        "-D",
        "publish",
        "user-property",
        "__ssVouchedId",
        "alice",
        "-D",
        "publish",
        "response-topic",
        "clients/dev-client/r",
    ]);
    let out = publish(port, SS, "over-tls", &args);
    assert!(out.status.success(), "{out:?}");
    publish(port, SS, "marker", &["-u", "bob", "-P", "pw-b"]);

    let lines = sub.until("marker");
    assert_eq!(
        line_for(&lines, "over-tls"),
        Some(format!("{SS}|__ssVouchedId:device-42|clients/dev-client/r|over-tls").as_str()),
        "{lines:?}"
    );
}

#[test]
fn a_bad_option_stops_the_broker() {
    let dir = tempfile::tempdir().expect("temp dir");
    let conf = dir.path().join("mosquitto.conf");
    std::fs::write(
        &conf,
        format!(
            "listener {} 127.0.0.1\nuser root\nplugin {}\nplugin_opt_identiy username\n",
            statestore_harness::free_port(),
            plugin_path().display()
        ),
    )
    .expect("write conf");
    let mosquitto = if Path::new("/usr/sbin/mosquitto").exists() {
        "/usr/sbin/mosquitto"
    } else {
        "mosquitto"
    };
    let log = dir.path().join("mosquitto.log");
    let mut child = Command::new(mosquitto)
        .arg("-c")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("mosquitto");
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait mosquitto") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("mosquitto still runs with a bad plugin option");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success());
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        stderr.contains("unknown option plugin_opt_identiy"),
        "{stderr}"
    );
}
