//! Helpers shared by the raft crate's integration tests.

use std::sync::Arc;

use prometheus::Registry;
use prometheus::proto::Metric;
use statestore_raft::types::{CommittedLeaderId, LogId, SnapshotMeta, StoredMembership};
use statestore_raft::{DiscardEvents, RaftConfig, RaftNode};
use statestore_storage::codec;
use statestore_storage::keyspace::SetCondition;
use statestore_storage::machine::{Mutation, Proposal};
use statestore_storage::store::{SnapshotWriter, Store, StoreConfig};
use statestore_vocab::hlc::Hlc;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// One node started with `config` on a fresh store, serving peers on a loopback port.
#[allow(dead_code)] // each test binary compiles this module; not all of them start a lone node
pub struct Served {
    /// The node.
    pub node: RaftNode,
    /// Where its metrics are registered.
    pub registry: Registry,
    /// Its peer listener's address.
    pub addr: String,
    /// Its data directory (removed on drop).
    pub dir: tempfile::TempDir,
    /// Stops the peer listener when sent `true` (or dropped).
    pub stop: watch::Sender<bool>,
}

/// Starts [`Served`].
#[allow(dead_code)] // see `Served`
pub async fn serve_one(config: &RaftConfig) -> Served {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&StoreConfig::new(dir.path().to_owned(), 16 << 20)).expect("store");
    let registry = Registry::new();
    let node = RaftNode::start(config, store, Arc::new(DiscardEvents), &registry)
        .await
        .expect("start");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address").to_string();
    let (stop, stopped) = watch::channel(false);
    {
        let node = node.clone();
        tokio::spawn(async move { node.serve_peers(listener, stopped).await });
    }
    Served {
        node,
        registry,
        addr,
        dir,
        stop,
    }
}

/// The series of `family` in `registry` that carry `label="value"` (all of them when `None`).
fn series<'a>(
    registry: &Registry,
    family: &'a str,
    label: Option<(&'a str, &'a str)>,
) -> impl Iterator<Item = Metric> + 'a {
    registry
        .gather()
        .into_iter()
        .filter(move |gathered| gathered.name() == family)
        .flat_map(|gathered| gathered.get_metric().to_vec())
        .filter(move |metric| {
            label.is_none_or(|(name, value)| {
                metric
                    .get_label()
                    .iter()
                    .any(|l| l.name() == name && l.value() == value)
            })
        })
}

/// The counter `family{label="value"}` as read from `registry` (summed over its other labels).
#[allow(dead_code)] // each test binary compiles this module; not all of them read counters
pub fn counter(registry: &Registry, family: &str, label: &str, value: &str) -> u64 {
    series(registry, family, Some((label, value)))
        .map(|metric| metric.get_counter().get_value() as u64)
        .sum()
}

/// A proposal that sets `key` to `value`, stamped now.
#[allow(dead_code)] // each test binary compiles this module; not all of them write
pub fn set(key: &[u8], value: &[u8]) -> Proposal {
    let now = statestore_harness::now_ms();
    Proposal {
        stamp: Hlc::new(now, 0, "test"),
        wall_ms: now,
        request: None,
        mutation: Mutation::Set {
            key: key.to_vec(),
            value: value.to_vec(),
            condition: SetCondition::Always,
            expire_after_ms: None,
            fencing_token: None,
        },
        token_seed: None,
    }
}

/// True once `condition` holds, false if it did not within `timeout`.
#[allow(dead_code)] // see `set`
pub async fn eventually(timeout: std::time::Duration, mut condition: impl FnMut() -> bool) -> bool {
    statestore_harness::wait_for(timeout, || std::future::ready(condition().then_some(())))
        .await
        .is_some()
}

/// The counter `family`, all its series summed.
#[allow(dead_code)] // each test binary compiles this module; not all of them read totals
pub fn total(registry: &Registry, family: &str) -> u64 {
    series(registry, family, None)
        .map(|metric| metric.get_counter().get_value() as u64)
        .sum()
}

/// The gauge `family` (with `label="value"` when given) as read from `registry`; `None` when
/// the registry has no such series.
#[allow(dead_code)] // each test binary compiles this module; not all of them read gauges
pub fn gauge(registry: &Registry, family: &str, label: Option<(&str, &str)>) -> Option<i64> {
    series(registry, family, label)
        .next()
        .map(|metric| metric.get_gauge().get_value() as i64)
}

/// A snapshot file in `dir` as leader `node_id` of `term` would send it: one row, covering the
/// log up to `index`.
#[allow(dead_code)] // see `Served`
pub fn leader_snapshot(
    dir: &std::path::Path,
    term: u64,
    node_id: u64,
    index: u64,
) -> (SnapshotMeta, std::path::PathBuf) {
    let meta = SnapshotMeta {
        last_log_id: Some(LogId::new(CommittedLeaderId { term, node_id }, index)),
        last_membership: StoredMembership::default(),
    };
    let header = codec::encode(&meta);
    let path = dir.join(format!("leader-{index}.bin"));
    let mut writer =
        SnapshotWriter::create(&dir.join(format!("leader-{index}.tmp")), &header).expect("create");
    writer.push(b"\x01leader", b"629").expect("row");
    writer.finish(&path, &header).expect("finish");
    (meta, path)
}
