//! Node lifecycle against a real broker: it reconnects (and takes the request subscription
//! back) when the broker goes away, it shuts down cleanly on SIGTERM, it exits non-zero
//! when one of its tasks dies, and after a kill it does not trust its state database.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use statestore_tests::broker::Broker;
use statestore_tests::node::{NodeSpec, StatestoreNode};
use statestore_tests::raw::{RawClient, resp};
use statestore_tests::wait_for;

/// After the broker restarts, the node reconnects with backoff, re-subscribes to the request
/// topic and answers requests again; data written before the outage is still there.
#[tokio::test]
async fn node_reconnects_after_the_broker_restarts() {
    let mut broker = Broker::start();
    let node = StatestoreNode::start(&broker, NodeSpec::default());
    node.wait_ready(Duration::from_secs(30)).await;
    let mut client = RawClient::connect(broker.port, "reconnect-client").await;
    let reply = client
        .request(&resp(&[b"SET", b"k", b"before"]))
        .await
        .expect("reply before the outage");
    assert_eq!(&reply.payload[..], b"+OK\r\n");
    drop(client);

    broker.kill();
    let lost = wait_for(Duration::from_secs(10), || async {
        (!node.is_ready().await).then_some(())
    })
    .await;
    assert!(
        lost.is_some(),
        "readiness must drop while the broker is gone"
    );
    assert_eq!(
        node.metric("statestore_mqtt_request_subscription_active")
            .await,
        Some(0.0)
    );

    broker.restart();
    node.wait_ready(Duration::from_secs(30)).await;
    assert_eq!(
        node.metric("statestore_mqtt_request_subscription_active")
            .await,
        Some(1.0)
    );
    let mut client = RawClient::connect(broker.port, "reconnect-client-2").await;
    let reply = client
        .request(&resp(&[b"GET", b"k"]))
        .await
        .expect("reply after the outage");
    assert_eq!(&reply.payload[..], b"$6\r\nbefore\r\n");
    let reconnects = node
        .metric("statestore_mqtt_connects_total{result=\"success\"}")
        .await
        .expect("metric");
    assert!(reconnects >= 2.0, "connected twice, got {reconnects}");
}

/// SIGTERM: the node releases the request subscription, exits with status 0 within the grace
/// period, and everything it acknowledged is there after a restart.
#[tokio::test]
async fn sigterm_shuts_down_cleanly_and_keeps_acknowledged_writes() {
    let broker = Broker::start();
    let mut node = StatestoreNode::start(&broker, NodeSpec::default());
    node.wait_ready(Duration::from_secs(30)).await;
    let mut client = RawClient::connect(broker.port, "shutdown-client").await;
    for i in 0..50u32 {
        let key = format!("key-{i}");
        let reply = client
            .request(&resp(&[b"SET", key.as_bytes(), &i.to_be_bytes()]))
            .await
            .expect("reply");
        assert_eq!(&reply.payload[..], b"+OK\r\n");
    }
    let status = node
        .terminate(Duration::from_secs(15))
        .expect("exits within the grace period");
    assert!(
        status.success(),
        "exit status {status:?}; log:\n{}",
        node.log_tail(30)
    );
    assert!(
        node.log().contains("released the request subscription") || node.log().contains("stopped")
    );
    assert!(
        !node.log().contains('\x1b'),
        "no colour escapes in a log written to a file:\n{}",
        node.log_tail(5)
    );
    assert!(
        !node.log().contains("did not stop in time and were aborted"),
        "every task stopped by itself on SIGTERM:\n{}",
        node.log_tail(30)
    );

    node.spawn();
    node.wait_ready(Duration::from_secs(30)).await;
    for i in 0..50u32 {
        let key = format!("key-{i}");
        let reply = client
            .request(&resp(&[b"GET", key.as_bytes()]))
            .await
            .expect("reply");
        let mut expected = b"$4\r\n".to_vec();
        expected.extend_from_slice(&i.to_be_bytes());
        expected.extend_from_slice(b"\r\n");
        assert_eq!(&reply.payload[..], &expected[..], "{key}");
    }
}

/// A node whose task panics does not stay up half dead: with the failpoint
/// `STATESTORE_FAILPOINT_PANIC=<task>` (a panic one second after the task starts) the node
/// exits non-zero by itself, its log naming the task at ERROR; restarted without the failpoint
/// it serves the data it had.
#[tokio::test]
async fn a_panicking_task_makes_the_node_exit_non_zero() {
    let broker = Broker::start();
    let mut node = StatestoreNode::start(&broker, NodeSpec::default());
    node.wait_ready(Duration::from_secs(30)).await;
    let mut client = RawClient::connect(broker.port, "task-failure-client").await;
    let reply = client
        .request(&resp(&[b"SET", b"kept", b"v"]))
        .await
        .expect("reply");
    assert_eq!(&reply.payload[..], b"+OK\r\n");
    for task in ["expiry", "notifier", "dispatcher"] {
        node.kill();
        node.set_env(vec![(
            "STATESTORE_FAILPOINT_PANIC".to_string(),
            task.to_string(),
        )]);
        node.spawn();
        let status = node
            .wait_exit(Duration::from_secs(30))
            .await
            .expect("the node exits by itself");
        assert!(!status.success(), "{task}: exit status {status:?}");
        let log = node.log();
        let named = format!("task {task} panicked");
        assert!(
            log.lines()
                .any(|line| line.contains("ERROR") && line.contains(&named)),
            "{task}: no ERROR line naming the task:\n{}",
            node.log_tail(30)
        );
    }
    node.set_env(Vec::new());
    node.spawn();
    node.wait_ready(Duration::from_secs(30)).await;
    let reply = client
        .request(&resp(&[b"GET", b"kept"]))
        .await
        .expect("reply");
    assert_eq!(&reply.payload[..], b"$1\r\nv\r\n");
}

/// `--log-format json`: every line the node writes is one JSON object with a timestamp, a
/// level, a target and the event's fields, so a log pipeline can read it.
#[tokio::test]
async fn json_logs_are_one_object_per_line() {
    let broker = Broker::start();
    let mut node = StatestoreNode::start(
        &broker,
        NodeSpec {
            extra_args: vec!["--log-format".into(), "json".into()],
            ..NodeSpec::default()
        },
    );
    node.wait_ready(Duration::from_secs(30)).await;
    let mut client = RawClient::connect(broker.port, "json-log-client").await;
    let reply = client
        .request(&resp(&[b"SET", b"k", b"v"]))
        .await
        .expect("reply");
    assert_eq!(&reply.payload[..], b"+OK\r\n");
    let status = node
        .terminate(Duration::from_secs(15))
        .expect("exits within the grace period");
    assert!(status.success(), "exit status {status:?}");
    let log = node.log();
    let mut messages = Vec::new();
    for line in log.lines().filter(|line| !line.is_empty()) {
        let event: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|err| panic!("not a JSON object ({err}): {line}"));
        for field in ["timestamp", "level", "target", "fields"] {
            assert!(event.get(field).is_some(), "no {field:?} in {line}");
        }
        if let Some(message) = event["fields"]["message"].as_str() {
            messages.push(message.to_owned());
        }
    }
    for expected in ["statestore node started", "stopped"] {
        assert!(
            messages.iter().any(|message| message == expected),
            "no {expected:?} event among {messages:?}"
        );
    }
}

/// SIGKILL under writes, then the state database damaged (every file of it cut to a third, as a
/// damaged disk can leave it): the restart finds no clean-stop marker, reads the state database
/// back, finds it damaged and sets it aside, starts the state machine empty and applies the
/// whole Raft log again (never purged: no snapshot was due), and serves every acknowledged
/// write. (With a purged log the node cannot rebuild on its own, keeping no snapshot file: it
/// is wiped and rejoins, see the runbook.) The SIGTERM after that is a clean stop: the next
/// start uses the state database as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_node_with_a_damaged_state_database_rebuilds_it_and_keeps_acknowledged_writes() {
    let broker = Broker::start();
    let mut node = StatestoreNode::start(&broker, NodeSpec::default());
    node.wait_ready(Duration::from_secs(30)).await;
    let acked: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    let stopped = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4u32 {
        let mut client = RawClient::connect(broker.port, &format!("t70-crash-writer-{w}")).await;
        let acked = acked.clone();
        let stopped = stopped.clone();
        writers.push(tokio::spawn(async move {
            for i in 0u32.. {
                if stopped.load(Ordering::Relaxed) {
                    break;
                }
                let key = format!("w{w}-{i}");
                let value = format!("value {w} {i}");
                match client
                    .request(&resp(&[b"SET", key.as_bytes(), value.as_bytes()]))
                    .await
                {
                    Some(reply) if &reply.payload[..] == b"+OK\r\n" => {
                        acked.lock().expect("acked").insert(key, value);
                    }
                    _ => break,
                }
            }
        }));
    }
    let written = wait_for(Duration::from_secs(120), || async {
        let count = acked.lock().expect("acked").len();
        (count >= 3_000).then_some(count)
    })
    .await;
    assert!(
        written.is_some(),
        "3,000 writes; log:\n{}",
        node.log_tail(30)
    );
    node.kill();
    stopped.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.await.expect("writer");
    }
    truncate_files(&node.data_dir.join("state"));

    node.spawn();
    node.wait_ready(Duration::from_secs(60)).await;
    assert!(
        node.log().contains("no usable state after an unclean stop"),
        "log:\n{}",
        node.log_tail(30)
    );
    assert_eq!(
        node.metric("statestore_storage_unclean_restarts_total")
            .await,
        Some(1.0)
    );
    assert_eq!(
        node.metric("statestore_storage_open{kind=\"unclean\"}")
            .await,
        Some(1.0)
    );
    let acked = acked.lock().expect("acked").clone();
    let mut reader = RawClient::connect(broker.port, "t70-crash-reader").await;
    let read_all = async |reader: &mut RawClient, when: &str| {
        for (key, value) in &acked {
            let reply = reader
                .request(&resp(&[b"GET", key.as_bytes()]))
                .await
                .expect("reply");
            let expected = format!("${}\r\n{value}\r\n", value.len());
            assert_eq!(
                String::from_utf8_lossy(&reply.payload),
                expected,
                "acknowledged {key} {when}"
            );
        }
    };
    read_all(&mut reader, "after the rebuild").await;

    let status = node
        .terminate(Duration::from_secs(15))
        .expect("exits within the grace period");
    assert!(status.success(), "exit status {status:?}");
    assert!(
        node.data_dir.join("CLEAN_STOP").exists(),
        "the clean-stop marker"
    );
    node.spawn();
    node.wait_ready(Duration::from_secs(30)).await;
    assert_eq!(
        node.metric("statestore_storage_open{kind=\"clean\"}").await,
        Some(1.0)
    );
    assert_eq!(
        node.metric("statestore_storage_unclean_restarts_total")
            .await,
        Some(0.0)
    );
    read_all(&mut reader, "after the clean restart").await;
}

/// Cuts every file under `dir` (the state database's journals and tables) to a third of its
/// length.
fn truncate_files(dir: &std::path::Path) {
    for entry in std::fs::read_dir(dir).expect("list") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            truncate_files(&path);
            continue;
        }
        let len = std::fs::metadata(&path).expect("metadata").len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open")
            .set_len(len / 3)
            .expect("truncate");
    }
}
