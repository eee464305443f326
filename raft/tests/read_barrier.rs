//! Concurrent linearizable reads share quorum rounds.
//!
//! A 3-node cluster in one process over the real TCP peer network (loopback listeners), so the
//! leader's RPCs are counted by the network client itself in
//! `statestore_raft_rpcs_sent_total{kind}`. On an idle leader a ReadIndex barrier needs a quorum
//! acknowledgement of an RPC sent after the read arrived: every RPC to a follower during the
//! reads is part of a round some read waited for. A round is one AppendEntries to each
//! follower, so rounds = RPCs / 2 (a quorum needs only one follower, so a round may end before
//! its second RPC is sent: RPCs / 2 slightly undercounts what a round-per-read leader would pay,
//! but never by half). Sequential reads pay a round each (this shows the counter sees rounds
//! at all); many concurrent reads must pay far fewer. How many depends on how spread out the
//! reads reach the leader, against the round trip: 4 to 13 rounds for 200 reads on a loaded
//! 2-core machine, once 21 (a CI run on 2026-12-06), where one round per read would be 200.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus::Registry;
use statestore_raft::{DiscardEvents, RaftConfig, RaftNode};
use statestore_storage::store::{Store, StoreConfig};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Concurrent reads issued at once.
const READS: usize = 200;
/// Sequential reads of the control measurement.
const SEQUENTIAL_READS: u64 = 20;
/// A quorum round on a 3-voter leader is one AppendEntries to each of its 2 followers.
const FOLLOWERS: u64 = 2;
/// The most rounds the concurrent reads may cost: each round must serve 5 reads on average
/// (a leader that sent a round per read would pay 200; 10 reads a round failed once in CI on
/// two busy cores, at 21 rounds).
const MAX_ROUNDS: u64 = READS as u64 / 5;

struct Member {
    node: RaftNode,
    registry: Registry,
    _dir: tempfile::TempDir,
}

struct Cluster {
    members: Vec<Member>,
    stop: watch::Sender<bool>,
}

impl Cluster {
    /// Three voters on loopback ports. The heartbeat interval is long next to the reads, so
    /// periodic heartbeats add at most a round or two to what the reads cost.
    async fn start() -> Cluster {
        let (stop, stopped) = watch::channel(false);
        let mut members = Vec::new();
        let mut addrs = BTreeMap::new();
        for id in 1..=3u64 {
            let dir = tempfile::tempdir().expect("tempdir");
            let store =
                Store::open(&StoreConfig::new(dir.path().to_owned(), 16 << 20)).expect("store");
            let config = RaftConfig {
                id,
                heartbeat_interval: Duration::from_millis(300),
                election_timeout_min: Duration::from_millis(1_000),
                election_timeout_max: Duration::from_millis(2_000),
                ..RaftConfig::default()
            };
            let registry = Registry::new();
            let node = RaftNode::start(&config, store, Arc::new(DiscardEvents), &registry)
                .await
                .expect("start");
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            addrs.insert(
                id,
                listener.local_addr().expect("local address").to_string(),
            );
            {
                let node = node.clone();
                let stopped = stopped.clone();
                tokio::spawn(async move { node.serve_peers(listener, stopped).await });
            }
            members.push(Member {
                node,
                registry,
                _dir: dir,
            });
        }
        for member in &members {
            member
                .node
                .bootstrap(addrs.clone())
                .await
                .expect("bootstrap");
        }
        Cluster { members, stop }
    }

    /// The leader, once it passed a read barrier and every follower holds its whole log.
    async fn idle_leader(&self) -> &Member {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            for member in &self.members {
                if member.node.leadership().borrow().is_leader
                    && member.node.ensure_linearizable().await.is_ok()
                    && caught_up(&member.node)
                {
                    return member;
                }
            }
            assert!(Instant::now() < deadline, "no idle leader");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn shutdown(self) {
        let _ = self.stop.send(true);
        for member in &self.members {
            let _ = member.node.shutdown().await;
        }
    }
}

/// True when every follower has acknowledged the leader's last log entry.
fn caught_up(leader: &RaftNode) -> bool {
    let metrics = leader.metrics();
    let Some(replication) = metrics.replication.as_ref() else {
        return false;
    };
    let last = metrics.last_log_index;
    replication.len() == 3
        && replication
            .values()
            .all(|matched| matched.as_ref().map(|l| l.index) == last)
}

/// `statestore_raft_rpcs_sent_total{kind}` as read from `registry`.
fn rpcs_sent(registry: &Registry, kind: &str) -> u64 {
    support::counter(registry, "statestore_raft_rpcs_sent_total", "kind", kind)
}

/// AppendEntries the leader sent to followers: heartbeats and replication.
fn appends_sent(registry: &Registry) -> u64 {
    rpcs_sent(registry, "heartbeat") + rpcs_sent(registry, "append")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_read_barriers_share_quorum_rounds() {
    let cluster = Cluster::start().await;
    let leader = cluster.idle_leader().await;
    assert!(
        rpcs_sent(&leader.registry, "heartbeat") > 0,
        "the leader's heartbeats are counted"
    );

    // Control: a sequential read can never reuse an earlier round, so each costs at least one
    // RPC. The counter therefore sees every round a read waits for.
    let before = appends_sent(&leader.registry);
    for _ in 0..SEQUENTIAL_READS {
        leader.node.ensure_linearizable().await.expect("read");
    }
    let sequential = appends_sent(&leader.registry) - before;
    assert!(
        sequential >= SEQUENTIAL_READS,
        "{SEQUENTIAL_READS} sequential reads cost only {sequential} RPCs: the counter misses rounds"
    );

    // The measurement: READS reads in flight at once on an idle leader. They start together
    // (spawned one by one, they would reach the leader spread over the spawning, and a read
    // arriving after a round was sent needs the next one).
    let start = Arc::new(tokio::sync::Barrier::new(READS + 1));
    let reads: Vec<_> = (0..READS)
        .map(|_| {
            let node = leader.node.clone();
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                node.ensure_linearizable().await
            })
        })
        .collect();
    let before = appends_sent(&leader.registry);
    start.wait().await;
    let mut passed = 0;
    for read in reads {
        match read.await.expect("read task") {
            Ok(()) => passed += 1,
            Err(err) => panic!("a concurrent read barrier failed: {err}"),
        }
    }
    let concurrent = appends_sent(&leader.registry) - before;
    let rounds = concurrent.div_ceil(FOLLOWERS);
    eprintln!(
        "read barriers: {SEQUENTIAL_READS} sequential -> {sequential} RPCs; \
         {READS} concurrent -> {concurrent} RPCs to {FOLLOWERS} followers = {rounds} rounds"
    );
    assert_eq!(passed, READS);
    assert!(
        concurrent >= 1,
        "a ReadIndex read needs a fresh quorum round"
    );
    assert!(
        rounds <= MAX_ROUNDS,
        "{READS} concurrent reads cost {rounds} rounds ({concurrent} RPCs): they did not share \
         rounds"
    );
    cluster.shutdown().await;
}
