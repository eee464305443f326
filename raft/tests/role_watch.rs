//! The node's view of openraft's metrics: the role watch follows openraft's role reports, the
//! consensus gauges follow applied writes (refreshed on a period, not on every report), and the
//! watcher notices when Raft is gone.
//!
//! One voter over the real TCP peer listener, so it elects itself at once.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prometheus::Registry;
use statestore_raft::RaftConfig;
use statestore_storage::keyspace::SetCondition;
use statestore_storage::machine::{Mutation, Proposal};
use statestore_vocab::hlc::Hlc;

/// Writes applied before the gauges are checked.
const WRITES: usize = 50;
/// How long the gauges may lag the applied state: several refresh periods on a loaded machine.
const GAUGE_LAG: Duration = Duration::from_secs(5);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn set(index: usize) -> Proposal {
    Proposal {
        stamp: Hlc::new(now_ms(), 0, "test"),
        wall_ms: now_ms(),
        request: None,
        mutation: Mutation::Set {
            key: format!("key-{index}").into_bytes(),
            value: b"value".to_vec(),
            condition: SetCondition::Always,
            expire_after_ms: None,
            fencing_token: None,
        },
        token_seed: None,
    }
}

/// Polls `registry`'s gauge until `wanted` holds for it or [`GAUGE_LAG`] passes (gauges have
/// no change notification: they are refreshed on a period).
async fn gauge_reaches(
    registry: &Registry,
    family: &str,
    label: Option<(&str, &str)>,
    wanted: impl Fn(i64) -> bool,
) -> Option<i64> {
    let deadline = Instant::now() + GAUGE_LAG;
    loop {
        let value = support::gauge(registry, family, label);
        if value.is_some_and(&wanted) || Instant::now() > deadline {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_watch_and_gauges_follow_raft_and_the_watcher_sees_it_stop() {
    let config = RaftConfig {
        id: 1,
        ..RaftConfig::default()
    };
    let served = support::serve_one(&config).await;
    let (node, registry, stop) = (served.node, served.registry, served.stop);
    node.bootstrap(BTreeMap::from([(1, served.addr)]))
        .await
        .expect("bootstrap");

    // The role watch: this node leads, in the term openraft reports.
    let mut leadership = node.leadership();
    let led = tokio::time::timeout(
        Duration::from_secs(30),
        leadership.wait_for(|l| l.is_leader),
    )
    .await
    .expect("the only voter leads within 30 s")
    .map(|l| *l)
    .expect("the role watch is open");
    assert_eq!(led.leader, Some(1));
    assert!(led.term >= 1, "{led:?}");
    // openraft sends its role report and its full metrics on two watches: the metrics reach
    // the same term, if not at the same instant.
    node.raft()
        .wait(Some(Duration::from_secs(30)))
        .metrics(
            |m| m.current_term == led.term,
            "openraft's metrics reach the role watch's term",
        )
        .await
        .expect("openraft's metrics in the role watch's term within 30 s");

    // The gauges catch up with what was applied.
    for index in 0..WRITES {
        node.submit(set(index))
            .expect("queued")
            .outcome()
            .await
            .expect("applied");
    }
    let applied = node
        .metrics()
        .last_applied
        .map(|l| l.index)
        .expect("something applied");
    assert!(applied >= WRITES as u64, "applied index {applied}");
    let applied = i64::try_from(applied).expect("small index");
    // At least what the writes reached (Raft may have applied an entry of its own since).
    let gauge = gauge_reaches(&registry, "statestore_raft_applied_index", None, |v| {
        v >= applied
    })
    .await;
    assert!(
        gauge.is_some_and(|v| v >= applied),
        "the applied-index gauge within {GAUGE_LAG:?}: {gauge:?}, applied {applied}"
    );
    let leader_state = gauge_reaches(
        &registry,
        "statestore_raft_state",
        Some(("state", "leader")),
        |v| v == 1,
    )
    .await;
    assert_eq!(
        leader_state,
        Some(1),
        "statestore_raft_state{{state=\"leader\"}}"
    );
    let term = gauge_reaches(&registry, "statestore_raft_term", None, |v| {
        v == led.term as i64
    })
    .await;
    assert_eq!(term, Some(led.term as i64), "the term gauge");

    // Raft stops: the watcher notices (its fatal watch closes), so `fatal` resolves.
    let _ = stop.send(true);
    node.shutdown().await.expect("shutdown");
    tokio::time::timeout(Duration::from_secs(30), node.fatal())
        .await
        .expect("fatal() resolves once Raft is gone");
}
