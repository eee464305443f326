//! A 3-node cluster in one process over an in-memory router that can cut links.
//!
//! Invariant: a leader cut off from the majority never passes the linearizable-read barrier,
//! even though its local state machine still holds the old value (so a read without the
//! barrier would be stale); the majority elects a new leader and commits; after healing, the
//! old leader converges. The barrier of a cut-off leader that heard of no newer term keeps
//! trying (its callers bound the wait) and never lets a read through.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::OptionalSend;
use openraft::error::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::v2::RaftNetworkV2;
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use statestore_harness::now_ms;
use statestore_raft::snapshot::SnapshotData;
use statestore_raft::types::{Node, NodeId, Raft, Snapshot, TypeConfig, Vote};
use statestore_raft::{DiscardEvents, RaftConfig, RaftNode};
use statestore_storage::keyspace::read;
use statestore_storage::machine::Outcome;
use statestore_storage::store::{Store, StoreConfig};
use support::set;

mod support;

#[derive(Default)]
struct RouterState {
    nodes: BTreeMap<NodeId, Raft>,
    cut: BTreeSet<(NodeId, NodeId)>,
}

#[derive(Clone, Default)]
struct Router(Arc<Mutex<RouterState>>);

impl Router {
    fn reach(&self, from: NodeId, to: NodeId) -> Result<Raft, Unreachable<TypeConfig>> {
        let state = self.0.lock().expect("router lock");
        if state.cut.contains(&(from, to)) {
            return Err(Unreachable::from_string(format!("link {from}->{to} cut")));
        }
        state
            .nodes
            .get(&to)
            .cloned()
            .ok_or_else(|| Unreachable::from_string("no such node"))
    }

    fn isolate(&self, id: NodeId, ids: &[NodeId]) {
        let mut state = self.0.lock().expect("router lock");
        for other in ids.iter().filter(|o| **o != id) {
            state.cut.insert((id, *other));
            state.cut.insert((*other, id));
        }
    }

    fn heal(&self) {
        self.0.lock().expect("router lock").cut.clear();
    }
}

struct RouterFactory {
    router: Router,
    from: NodeId,
}

struct RouterClient {
    router: Router,
    from: NodeId,
    to: NodeId,
}

impl RaftNetworkFactory<TypeConfig> for RouterFactory {
    type Network = RouterClient;
    async fn new_client(&mut self, target: NodeId, _node: &Node) -> RouterClient {
        RouterClient {
            router: self.router.clone(),
            from: self.from,
            to: target,
        }
    }
}

fn stopped(err: impl std::fmt::Display) -> RPCError<TypeConfig> {
    RPCError::Unreachable(Unreachable::from_string(err.to_string()))
}

impl RaftNetworkV2<TypeConfig> for RouterClient {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let raft = self.router.reach(self.from, self.to)?;
        raft.append_entries(rpc).await.map_err(stopped)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        _: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let raft = self.router.reach(self.from, self.to)?;
        raft.vote(rpc).await.map_err(stopped)
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        _cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let raft = self
            .router
            .reach(self.from, self.to)
            .map_err(StreamingError::Unreachable)?;
        // The receiver installs from a file of its own, as the peer server receives one.
        let network =
            |e: std::io::Error| StreamingError::Network(openraft::error::NetworkError::new(&e));
        let SnapshotData::Outgoing(outgoing) = &snapshot.snapshot else {
            return Err(network(std::io::Error::other("not an outgoing snapshot")));
        };
        let mut source = outgoing.open().await.map_err(network)?;
        let copy = tempfile::NamedTempFile::new()
            .map_err(network)?
            .into_temp_path();
        let mut target = tokio::fs::File::create(&copy).await.map_err(network)?;
        tokio::io::copy(&mut source, &mut target)
            .await
            .map_err(network)?;
        let data = SnapshotData::Received {
            path: copy.to_path_buf(),
        };
        let installed = raft
            .install_full_snapshot(
                vote,
                Snapshot {
                    meta: snapshot.meta,
                    snapshot: data,
                },
            )
            .await
            .map_err(|e| StreamingError::Unreachable(Unreachable::from_string(e.to_string())));
        drop(copy);
        installed
    }
}

fn value(node: &RaftNode, key: &[u8]) -> Option<Vec<u8>> {
    read::live_record(&node.view(), key, now_ms())
        .expect("read")
        .map(|r| r.value)
}

async fn wait_leader(nodes: &[RaftNode], among: &[usize], timeout: Duration) -> usize {
    let deadline = Instant::now() + timeout;
    loop {
        for i in among {
            let leadership = *nodes[*i].leadership().borrow();
            if leadership.is_leader && nodes[*i].ensure_linearizable().await.is_ok() {
                return *i;
            }
        }
        assert!(Instant::now() < deadline, "no leader among {among:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts and bootstraps one node per id, connected through `router`; the temporary
/// directories must outlive the nodes.
async fn start_cluster(router: &Router, ids: &[NodeId]) -> (Vec<RaftNode>, Vec<tempfile::TempDir>) {
    let members: BTreeMap<NodeId, String> =
        ids.iter().map(|id| (*id, format!("node-{id}"))).collect();
    let mut dirs = Vec::new();
    let mut nodes = Vec::new();
    for &id in ids {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&StoreConfig::new(dir.path().to_owned(), 16 << 20)).expect("store");
        let config = RaftConfig {
            id,
            heartbeat_interval: Duration::from_millis(50),
            election_timeout_min: Duration::from_millis(300),
            election_timeout_max: Duration::from_millis(600),
            ..RaftConfig::default()
        };
        let network = RouterFactory {
            router: router.clone(),
            from: id,
        };
        let node = RaftNode::start_with_network(
            &config,
            store,
            Arc::new(DiscardEvents),
            &prometheus::Registry::new(),
            network,
        )
        .await
        .expect("start");
        router
            .0
            .lock()
            .expect("router")
            .nodes
            .insert(id, node.raft().clone());
        nodes.push(node);
        dirs.push(dir);
    }
    for node in &nodes {
        node.bootstrap(members.clone()).await.expect("bootstrap");
    }
    (nodes, dirs)
}

/// An isolated leader's read barrier never passes while a new majority leader serves; healing
/// converges the old leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isolated_leader_never_passes_the_read_barrier() {
    let router = Router::default();
    let ids = [1u64, 2, 3];
    let (nodes, _dirs) = start_cluster(&router, &ids).await;

    let old = wait_leader(&nodes, &[0, 1, 2], Duration::from_secs(10)).await;
    assert_eq!(
        nodes[old]
            .submit(set(b"k", b"v1"))
            .expect("submit")
            .outcome()
            .await
            .map(|o| matches!(o, Outcome::Stored { .. }))
            .ok(),
        Some(true)
    );

    router.isolate(ids[old], &ids);
    let majority: Vec<usize> = (0..3).filter(|i| *i != old).collect();
    let new = wait_leader(&nodes, &majority, Duration::from_secs(10)).await;
    let outcome = nodes[new]
        .submit(set(b"k", b"v2"))
        .expect("submit")
        .outcome()
        .await
        .expect("committed by the majority");
    assert!(matches!(outcome, Outcome::Stored { .. }));

    // The old leader still holds v1 locally: a read there without the barrier would be stale.
    assert_eq!(value(&nodes[old], b"k").as_deref(), Some(&b"v1"[..]));
    for _ in 0..5 {
        let outcome =
            tokio::time::timeout(Duration::from_millis(500), nodes[old].ensure_linearizable())
                .await;
        assert!(
            !matches!(outcome, Ok(Ok(()))),
            "an isolated leader must not confirm a linearizable read"
        );
    }
    assert!(nodes[new].ensure_linearizable().await.is_ok());
    // The isolated leader still calls itself leader, but it can see that no quorum has
    // acknowledged it for longer than the election timeout (the node steps down on that),
    // while the new leader's acknowledgements are fresh.
    assert!(nodes[old].leadership().borrow().is_leader);
    let stale = nodes[old]
        .quorum_ack_age()
        .expect("a leader that was acknowledged once");
    assert!(stale > Duration::from_millis(600), "{stale:?}");
    let fresh = nodes[new]
        .quorum_ack_age()
        .expect("the new leader was acknowledged");
    assert!(fresh < Duration::from_millis(600), "{fresh:?}");

    router.heal();
    let deadline = Instant::now() + Duration::from_secs(10);
    while value(&nodes[old], b"k").as_deref() != Some(&b"v2"[..]) {
        assert!(
            Instant::now() < deadline,
            "old leader did not converge after healing"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Healed, the old leader has heard the new term: it follows the new leader and refuses
    // to serve reads itself.
    let new_id = ids[new];
    let deadline = Instant::now() + Duration::from_secs(10);
    while nodes[old].leadership().borrow().leader != Some(new_id) {
        assert!(
            Instant::now() < deadline,
            "old leader does not follow the new one"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!nodes[old].leadership().borrow().is_leader);
    assert!(matches!(
        nodes[old].ensure_linearizable().await,
        Err(statestore_raft::Error::NotLeader { leader: Some(l) }) if l == new_id
    ));
    assert_eq!(
        nodes[old].quorum_ack_age(),
        None,
        "a follower has no quorum age"
    );
    for node in &nodes {
        let _ = node.shutdown().await;
    }
}

/// A leader whose links to both followers are cut never passes its read barrier: it keeps
/// asking for a quorum (a slow quorum is not a lost one) until its caller gives up, and once
/// the links heal the barrier ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_leader_read_barrier_waits_until_healed() {
    let router = Router::default();
    let ids = [1u64, 2, 3];
    let (nodes, _dirs) = start_cluster(&router, &ids).await;
    let leader = wait_leader(&nodes, &[0, 1, 2], Duration::from_secs(10)).await;

    router.isolate(ids[leader], &ids);
    for _ in 0..2 {
        let outcome =
            tokio::time::timeout(Duration::from_secs(3), nodes[leader].ensure_linearizable()).await;
        assert!(
            outcome.is_err(),
            "a cut-off leader's barrier must not return while no quorum answers: {outcome:?}"
        );
    }
    // It never heard of a newer term, so it still believes it leads: the wait is the
    // barrier's own, not a redirect.
    assert!(nodes[leader].leadership().borrow().is_leader);
    // Healed, the barrier ends: passed if it still leads, redirected if the others elected a
    // new leader meanwhile.
    router.heal();
    let outcome =
        tokio::time::timeout(Duration::from_secs(20), nodes[leader].ensure_linearizable())
            .await
            .expect("once healed, the barrier ends");
    assert!(
        matches!(
            outcome,
            Ok(()) | Err(statestore_raft::Error::NotLeader { .. })
        ),
        "{outcome:?}"
    );
    for node in &nodes {
        let _ = node.shutdown().await;
    }
}
