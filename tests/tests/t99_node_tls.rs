//! TLS from the node to the broker, black-box: Mosquitto with a TLS listener that requires a
//! client certificate (`require_certificate true`, `use_identity_as_username true`) and a plain
//! one for the SDK client. A node with the right CA, certificate and server name serves; one
//! with another CA, the wrong host name or no certificate never connects; unusable settings
//! stop the node at start; changed certificate files are reloaded (a bad change is refused and
//! counted), used from the next connection on, and carry the node through a broker restart
//! with a new CA. A three-node cluster on the TLS listener fails over.

use std::path::{Path, PathBuf};
use std::time::Duration;

use azure_iot_operations_services::state_store::SetOptions;
use statestore_tests::broker::Broker;
use statestore_tests::cluster::{Cluster, TEST_TIMING};
use statestore_tests::node::{NodeSpec, StatestoreNode};
use statestore_tests::pki::{make_pki, not_after, replace_contents, replace_file};
use statestore_tests::sdk::{SdkClient, TIMEOUT};
use statestore_tests::{free_port, wait_for};

const CONNECTED: &str = "statestore_mqtt_connection_state{state=\"connected\"}";
const CONNECT_OK: &str = "statestore_mqtt_connects_total{result=\"success\"}";
const CONNECT_FAILED: &str = "statestore_mqtt_connects_total{result=\"failure\"}";
const RELOAD_OK: &str = "statestore_mqtt_tls_reloads_total{result=\"ok\"}";
const RELOAD_ERROR: &str = "statestore_mqtt_tls_reloads_total{result=\"error\"}";

/// Mosquitto with its usual plain listener plus a TLS one on `tls_port` that verifies client
/// certificates against `ca` and takes their CN as the user name.
fn tls_broker(tls_port: u16, ca: &Path, cert: &Path, key: &Path) -> Broker {
    Broker::start_with(
        "127.0.0.1",
        &format!(
            "listener {tls_port} 127.0.0.1\ncafile {}\ncertfile {}\nkeyfile {}\n\
             require_certificate true\nuse_identity_as_username true\n",
            ca.display(),
            cert.display(),
            key.display()
        ),
    )
}

/// A node on `broker`'s TLS listener with `tls_args`.
fn tls_node(broker: &Broker, id: u64, tls_port: u16, tls_args: &[String]) -> StatestoreNode {
    StatestoreNode::start(
        broker,
        NodeSpec {
            id,
            broker: Some(format!("mqtts://127.0.0.1:{tls_port}")),
            extra_args: tls_args.to_vec(),
            ..NodeSpec::default()
        },
    )
}

fn arg(path: &Path) -> String {
    path.display().to_string()
}

fn args(pairs: &[(&str, String)]) -> Vec<String> {
    pairs
        .iter()
        .flat_map(|(flag, value)| [(*flag).to_owned(), value.clone()])
        .collect()
}

async fn metric(node: &StatestoreNode, series: &str) -> f64 {
    node.metric(series)
        .await
        .unwrap_or_else(|| panic!("node {} has no {series}", node.id))
}

/// Waits until `series` of `node` reaches at least `at_least`; panics with the log if not.
async fn wait_metric(node: &StatestoreNode, series: &str, at_least: f64, timeout: Duration) {
    let reached = wait_for(timeout, || async {
        (node.metric(series).await? >= at_least).then_some(())
    })
    .await;
    assert!(
        reached.is_some(),
        "node {}: {series} did not reach {at_least} in {timeout:?}; log:\n{}",
        node.id,
        node.log_tail(40)
    );
}

/// SET then GET of `key` through the SDK client on the plain listener.
async fn set_and_get(sdk: &SdkClient, key: &[u8], value: &[u8]) {
    let set = sdk
        .client
        .set(
            key.to_vec(),
            value.to_vec(),
            TIMEOUT,
            None,
            SetOptions::default(),
        )
        .await
        .expect("set");
    assert!(set.response, "SET {key:?}");
    let get = sdk.client.get(key.to_vec(), TIMEOUT).await.expect("get");
    assert_eq!(get.response, Some(value.to_vec()), "GET {key:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_serves_through_a_broker_that_requires_its_certificate() {
    let pki = tempfile::tempdir().expect("temp dir");
    let dir = pki.path();
    // The broker's certificate names only broker.test: connecting to 127.0.0.1 needs the
    // server name set to it.
    make_pki(
        dir,
        "good",
        2,
        &[("broker", "DNS:broker.test"), ("node", "DNS:node")],
    );
    make_pki(dir, "other", 2, &[]);
    let path = |file: &str| dir.join(file);
    let tls_port = free_port();
    let broker = tls_broker(
        tls_port,
        &path("good-ca.pem"),
        &path("broker.pem"),
        &path("broker.key"),
    );
    let identity = [
        ("--mqtt-tls-cert-file", arg(&path("node.pem"))),
        ("--mqtt-tls-key-file", arg(&path("node.key"))),
    ];
    let good_ca = ("--mqtt-tls-ca-file", arg(&path("good-ca.pem")));
    let server_name = ("--mqtt-tls-server-name", "broker.test".to_owned());

    let node = tls_node(
        &broker,
        1,
        tls_port,
        &args(&[
            good_ca.clone(),
            server_name.clone(),
            identity[0].clone(),
            identity[1].clone(),
        ]),
    );
    // Refused: the broker's certificate does not name 127.0.0.1 (no server name given) ...
    let wrong_name = tls_node(
        &broker,
        2,
        tls_port,
        &args(&[good_ca.clone(), identity[0].clone(), identity[1].clone()]),
    );
    // ... it is not signed by the CA this node trusts ...
    let wrong_ca = tls_node(
        &broker,
        3,
        tls_port,
        &args(&[
            ("--mqtt-tls-ca-file", arg(&path("other-ca.pem"))),
            server_name.clone(),
            identity[0].clone(),
            identity[1].clone(),
        ]),
    );
    // ... and without a client certificate the broker refuses this one.
    let anonymous = tls_node(&broker, 4, tls_port, &args(&[good_ca, server_name]));

    node.wait_ready(Duration::from_secs(30)).await;
    assert_eq!(metric(&node, CONNECTED).await, 1.0);
    let sdk = SdkClient::connect(broker.port, "tls-test-client").await;
    set_and_get(&sdk, b"secure", b"yes").await;
    sdk.shutdown().await;
    // Mosquitto took the node's certificate CN as its user name: X.509 authentication.
    assert!(
        broker
            .log()
            .lines()
            .any(|line| line.contains("as statestore-node-1") && line.contains("u'node'")),
        "mosquitto log:\n{}",
        broker.log()
    );
    let expiry = format!(
        "statestore_mqtt_tls_client_cert_not_after_seconds{{file=\"{}\"}}",
        path("node.pem").display()
    );
    assert_eq!(
        metric(&node, &expiry).await,
        not_after(&path("node.pem")) as f64
    );

    // Each says why: rustls's reason for the broker's certificate, or the broker's alert.
    for (refused, reason) in [
        (&wrong_name, "certificate not valid for name"),
        (&wrong_ca, "UnknownIssuer"),
        (&anonymous, "CertificateRequired"),
    ] {
        // Tried (and failed) at least twice: it had every chance to connect.
        wait_metric(refused, CONNECT_FAILED, 2.0, Duration::from_secs(30)).await;
        assert_eq!(
            metric(refused, CONNECT_OK).await,
            0.0,
            "node {}",
            refused.id
        );
        assert_eq!(metric(refused, CONNECTED).await, 0.0, "node {}", refused.id);
        assert!(
            !refused.is_ready().await,
            "node {} is not ready",
            refused.id
        );
        assert!(
            refused.log().contains(reason),
            "node {}: {reason} expected in the log:\n{}",
            refused.id,
            refused.log_tail(20)
        );
    }
    assert!(
        node.is_ready().await,
        "the refused nodes did not disturb the good one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_tls_settings_stop_the_node_at_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").expect("write");
    make_pki(dir.path(), "some", 2, &[("node", "DNS:node")]);
    let broker = Broker::start();
    let cases: [(Vec<String>, Vec<String>); 3] = [
        (
            args(&[("--mqtt-tls-cert-file", arg(&dir.path().join("node.pem")))]),
            vec!["mqtt.tls.cert_file needs mqtt.tls.key_file".to_owned()],
        ),
        (
            args(&[("--mqtt-tls-ca-file", arg(&garbage))]),
            vec!["CA file".to_owned(), arg(&garbage)],
        ),
        (
            args(&[
                ("--mqtt-tls-cert-file", arg(&dir.path().join("node.pem"))),
                ("--mqtt-tls-key-file", arg(&dir.path().join("some-ca.key"))),
            ]),
            vec![arg(&dir.path().join("some-ca.key"))],
        ),
    ];
    for (flags, expected) in cases {
        let mut node = tls_node(&broker, 1, broker.port, &flags);
        let status = node
            .wait_exit(Duration::from_secs(20))
            .await
            .unwrap_or_else(|| panic!("{flags:?}: the node must exit"));
        assert!(!status.success(), "{flags:?}: non-zero exit");
        let log = node.log();
        for part in expected {
            assert!(log.contains(&part), "{flags:?}: {part:?} not in\n{log}");
        }
    }
}

/// The node's and the broker's TLS files, at fixed paths whose contents the test replaces.
struct Files {
    node_ca: PathBuf,
    node_cert: PathBuf,
    node_key: PathBuf,
    broker_ca: PathBuf,
    broker_cert: PathBuf,
    broker_key: PathBuf,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_certificates_are_reloaded_and_carry_the_node_to_a_new_ca() {
    let pki = tempfile::tempdir().expect("temp dir");
    let dir = pki.path();
    let path = |file: &str| dir.join(file);
    make_pki(
        dir,
        "one",
        2,
        &[("one-broker", "IP:127.0.0.1"), ("one-node", "DNS:node")],
    );
    make_pki(
        dir,
        "two",
        3,
        &[("two-broker", "IP:127.0.0.1"), ("two-node", "DNS:node")],
    );
    let files = Files {
        node_ca: path("node-ca.pem"),
        node_cert: path("node.pem"),
        node_key: path("node.key"),
        broker_ca: path("broker-ca.pem"),
        broker_cert: path("broker.pem"),
        broker_key: path("broker.key"),
    };
    for (from, to) in [
        ("one-ca.pem", &files.node_ca),
        ("one-node.pem", &files.node_cert),
        ("one-node.key", &files.node_key),
        ("one-ca.pem", &files.broker_ca),
        ("one-broker.pem", &files.broker_cert),
        ("one-broker.key", &files.broker_key),
    ] {
        std::fs::copy(path(from), to).expect("copy");
    }
    let tls_port = free_port();
    let mut broker = tls_broker(
        tls_port,
        &files.broker_ca,
        &files.broker_cert,
        &files.broker_key,
    );
    let node = tls_node(
        &broker,
        1,
        tls_port,
        &args(&[
            ("--mqtt-tls-ca-file", arg(&files.node_ca)),
            ("--mqtt-tls-cert-file", arg(&files.node_cert)),
            ("--mqtt-tls-key-file", arg(&files.node_key)),
            ("--mqtt-tls-reload-interval-ms", "100".to_owned()),
        ]),
    );
    node.wait_ready(Duration::from_secs(30)).await;
    let sdk = SdkClient::connect(broker.port, "tls-reload-client").await;
    set_and_get(&sdk, b"before", b"1").await;
    let expiry = format!(
        "statestore_mqtt_tls_client_cert_not_after_seconds{{file=\"{}\"}}",
        files.node_cert.display()
    );
    assert_eq!(
        metric(&node, &expiry).await,
        not_after(&path("one-node.pem")) as f64
    );
    assert_eq!(metric(&node, RELOAD_OK).await, 0.0);
    assert_eq!(metric(&node, RELOAD_ERROR).await, 0.0);

    // A broken certificate file is refused, counted and logged; the node keeps serving.
    replace_contents(&files.node_cert, b"-----BEGIN CERTIFICATE-----\ngarbage\n");
    wait_metric(&node, RELOAD_ERROR, 1.0, Duration::from_secs(30)).await;
    assert_eq!(metric(&node, RELOAD_OK).await, 0.0);
    assert!(
        node.log()
            .lines()
            .any(|l| l.contains("WARN") && l.contains("cannot be used") && l.contains("node.pem")),
        "a WARN naming the file:\n{}",
        node.log_tail(20)
    );
    set_and_get(&sdk, b"during", b"2").await;

    // The new key, then its certificate: the first successful reload has both (a check that
    // saw the new key with the broken certificate failed).
    replace_file(&path("two-node.key"), &files.node_key);
    replace_file(&path("two-node.pem"), &files.node_cert);
    wait_metric(&node, RELOAD_OK, 1.0, Duration::from_secs(30)).await;
    assert_eq!(
        metric(&node, &expiry).await,
        not_after(&path("two-node.pem")) as f64,
        "the new certificate is the one in use"
    );
    // Then the new CA.
    let reloads = metric(&node, RELOAD_OK).await;
    replace_file(&path("two-ca.pem"), &files.node_ca);
    wait_metric(&node, RELOAD_OK, reloads + 1.0, Duration::from_secs(30)).await;
    assert!(
        node.log().contains("broker TLS files changed: reloaded"),
        "an INFO line for the reload"
    );
    // A reload does not drop the connection made with the old files.
    assert_eq!(metric(&node, CONNECT_OK).await, 1.0);
    assert_eq!(metric(&node, CONNECTED).await, 1.0);
    set_and_get(&sdk, b"reloaded", b"3").await;
    sdk.shutdown().await;

    // The broker moves to the new CA (its own certificate and the one it checks clients
    // against) and restarts: the node's next connection uses the reloaded files.
    replace_file(&path("two-ca.pem"), &files.broker_ca);
    replace_file(&path("two-broker.pem"), &files.broker_cert);
    replace_file(&path("two-broker.key"), &files.broker_key);
    broker.restart();
    wait_metric(&node, CONNECT_OK, 2.0, Duration::from_secs(30)).await;
    node.wait_ready(Duration::from_secs(30)).await;
    let sdk = SdkClient::connect(broker.port, "tls-reload-client-2").await;
    set_and_get(&sdk, b"after", b"4").await;
    let before = sdk
        .client
        .get(b"before".to_vec(), TIMEOUT)
        .await
        .expect("get");
    assert_eq!(before.response, Some(b"1".to_vec()));
    sdk.shutdown().await;
}

/// Three nodes, each on the TLS listener with its own certificate: the cluster serves, and
/// after the leader is killed another node takes the request subscription over TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_on_the_tls_listener_fails_over() {
    let pki = tempfile::tempdir().expect("temp dir");
    let dir = pki.path();
    let path = |file: &str| dir.join(file);
    make_pki(
        dir,
        "cluster",
        2,
        &[
            ("broker", "IP:127.0.0.1"),
            ("node-1", "DNS:node-1"),
            ("node-2", "DNS:node-2"),
            ("node-3", "DNS:node-3"),
        ],
    );
    let tls_port = free_port();
    let broker = tls_broker(
        tls_port,
        &path("cluster-ca.pem"),
        &path("broker.pem"),
        &path("broker.key"),
    );
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let peers: Vec<(u64, String)> = (1..=3)
        .zip(&ports)
        .map(|(id, port)| (id, format!("127.0.0.1:{port}")))
        .collect();
    let nodes = (1..=3u64)
        .zip(&ports)
        .map(|(id, port)| {
            let mut extra: Vec<String> = TEST_TIMING.iter().map(|s| (*s).to_owned()).collect();
            extra.extend(args(&[
                ("--mqtt-tls-ca-file", arg(&path("cluster-ca.pem"))),
                (
                    "--mqtt-tls-cert-file",
                    arg(&path(&format!("node-{id}.pem"))),
                ),
                ("--mqtt-tls-key-file", arg(&path(&format!("node-{id}.key")))),
            ]));
            StatestoreNode::start(
                &broker,
                NodeSpec {
                    id,
                    peers: peers.clone(),
                    raft_port: Some(*port),
                    extra_args: extra,
                    broker: Some(format!("mqtts://127.0.0.1:{tls_port}")),
                    ..NodeSpec::default()
                },
            )
        })
        .collect();
    let mut cluster = Cluster {
        broker,
        nodes,
        admin: Default::default(),
        join_args: Vec::new(),
    };
    cluster.wait_ready(Duration::from_secs(60)).await;
    let leader = cluster.wait_serving_leader(Duration::from_secs(30)).await;
    let sdk = SdkClient::connect(cluster.broker.port, "tls-cluster-client").await;
    set_and_get(&sdk, b"first", b"1").await;
    // Every node connected with its own identity.
    let log = cluster.broker.log();
    for id in 1..=3 {
        assert!(
            log.lines()
                .any(|line| line.contains(&format!("as statestore-node-{id} "))
                    && line.contains(&format!("u'node-{id}'"))),
            "node {id} on the TLS listener as node-{id}:\n{log}"
        );
    }

    cluster.nodes[leader].kill();
    let next = cluster.wait_serving_leader(Duration::from_secs(30)).await;
    assert_ne!(next, leader, "another node took over");
    set_and_get(&sdk, b"second", b"2").await;
    let first = sdk
        .client
        .get(b"first".to_vec(), TIMEOUT)
        .await
        .expect("get");
    assert_eq!(first.response, Some(b"1".to_vec()));
    sdk.shutdown().await;
}
