//! [`RaftNode`]: the one handle the node crate uses — start, bootstrap, propose, linearizable
//! read barrier, leadership watch, membership changes, shutdown.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::watch::WatchReceiver;
use openraft::error::{Fatal, InitializeError, RaftError};
use openraft::network::NetSnapshot;
use openraft::network::RaftNetworkFactory;
use openraft::{BasicNode, Config, ServerState, SnapshotPolicy};
use prometheus::Registry;
use statestore_storage::machine::{Outcome, Proposal};
use statestore_storage::store::{StateView, Store};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use crate::batcher::Batcher;
use crate::error::{Error, Result, StopCause};
use crate::log_store::{LogConfig, LogStore};
use crate::membership::{self, MembershipChange};
use crate::metrics::{ConsensusMetrics, PeerRpcMetrics, RaftStorageMetrics};
use crate::network::{InboundLimits, NetworkFactory, PeerNames, PeerTimeouts, PeerTls, Transport};
use crate::read_barrier;
use crate::snapshot::SnapshotData;
use crate::state_machine::{EventSink, SnapshotTrigger, StateMachine};
use crate::types::{NodeId, Raft, RaftMetrics, StoredMembership, TypeConfig};

/// Consensus settings of one node.
#[derive(Debug, Clone)]
pub struct RaftConfig {
    /// This node's id (unique in the cluster, never reused).
    pub id: NodeId,
    /// Leader heartbeat interval.
    pub heartbeat_interval: Duration,
    /// Election timeout is drawn from `[min, max)`.
    pub election_timeout_min: Duration,
    /// Upper bound of the election timeout.
    pub election_timeout_max: Duration,
    /// Build a snapshot once this many proposals were applied since the last one.
    pub snapshot_after_proposals: u64,
    /// ... or once this many log entries were (an entry holds one or many proposals).
    pub snapshot_after_entries: u64,
    /// ... and not before the log since the last one holds this percentage of the state's
    /// bytes (see [`crate::state_machine::SnapshotTrigger`]; 0: no such condition).
    pub snapshot_after_state_percent: u64,
    /// Entries kept in the log after a snapshot, for followers that are only a little behind.
    pub entries_kept_after_snapshot: u64,
    /// Peer connection and replication deadlines.
    pub peer_timeouts: PeerTimeouts,
    /// How long a snapshot transfer and install may take.
    pub snapshot_timeout: Duration,
    /// Log payload bytes kept in memory for replication and apply.
    pub log_cache_bytes: usize,
    /// Mutual TLS between peers; `None`: plain TCP.
    pub peer_tls: Option<PeerTls>,
    /// Raft addresses (`host:port`) whose hosts a peer's TLS certificate may name besides the
    /// current members': the configured peers and this node's own advertised address (a
    /// joining node knows no members until the leader reaches it).
    pub known_peers: Vec<String>,
    /// Caps of the Raft listener: connections, snapshot size.
    pub inbound: InboundLimits,
}

impl Default for RaftConfig {
    fn default() -> Self {
        RaftConfig {
            id: 1,
            // Followers elect after the old leader's lease (= election_timeout_max) plus a
            // random election timeout: 0.75–1.0 s of silence with these values. The minimum
            // stays 2.5 heartbeats; pre-vote keeps one slow follower from deposing a leader.
            heartbeat_interval: Duration::from_millis(100),
            election_timeout_min: Duration::from_millis(250),
            election_timeout_max: Duration::from_millis(500),
            snapshot_after_proposals: 200_000,
            snapshot_after_entries: 50_000,
            snapshot_after_state_percent: 25,
            entries_kept_after_snapshot: 1_000,
            peer_timeouts: PeerTimeouts::default(),
            snapshot_timeout: Duration::from_secs(60),
            log_cache_bytes: 64 << 20,
            peer_tls: None,
            known_peers: Vec::new(),
            inbound: InboundLimits::default(),
        }
    }
}

/// Size at which a WAL chunk file is closed and the next one started. A purge removes only
/// whole chunks, so up to a chunk of purged entries stays on disk: 16 MiB chunks held 21-48 MiB
/// of log per node after a 1M-key load (0.3-0.6× the data), most of it already purged.
const WAL_CHUNK_BYTES: usize = 4 << 20;

/// Entries between two "is a snapshot due?" questions openraft asks the state machine.
const SNAPSHOT_CHECK_ENTRIES: u64 = 1_000;

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl RaftConfig {
    fn openraft(&self) -> Result<Config> {
        let heartbeat = millis(self.heartbeat_interval);
        let config = Config {
            cluster_name: "statestore".to_owned(),
            heartbeat_interval: heartbeat,
            // A follower that acknowledged replication recently needs no heartbeat: under load
            // replication itself keeps the leader's lease.
            heartbeat_min_interval: Some(heartbeat / 2),
            election_timeout_min: millis(self.election_timeout_min),
            election_timeout_max: millis(self.election_timeout_max),
            install_snapshot_timeout: millis(self.snapshot_timeout),
            // openraft asks this often; the state machine decides by proposals applied.
            snapshot_policy: SnapshotPolicy::LogsSinceLast(
                self.snapshot_after_entries.clamp(1, SNAPSHOT_CHECK_ENTRIES),
            ),
            max_in_snapshot_log_to_keep: self.entries_kept_after_snapshot,
            // Entries are proposal batches; purge in chunks of 64 of them.
            purge_batch_size: 64,
            max_payload_entries: 16,
            // A partitioned node that rejoins must not depose a healthy leader.
            enable_pre_vote: Some(true),
            // A restarted leader must win a new election, never resume its old term. The
            // leader replicates entries while it is still writing them to its own disk, so a
            // crash (a failed fdatasync, a full disk, a power cut) can lose the tail of its
            // log that followers already hold. Resuming the same term, it would write different
            // entries under the same log ids, and a follower that kept the old ones would never
            // see the conflict: the replicas diverge. The fault suite caught exactly this after
            // a full disk (t86, `DiskFullLeader`). In a new term the election restriction
            // keeps anything committed.
            enable_leader_restore: Some(false),
            ..Default::default()
        };
        config.validate().map_err(Error::Config)
    }
}

/// Who leads, as this node sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Leadership {
    /// The leader this node knows, if any.
    pub leader: Option<NodeId>,
    /// True when this node is the leader.
    pub is_leader: bool,
    /// Current term.
    pub term: u64,
}

/// A submitted write; await [`PendingWrite::outcome`] for its applied result.
pub struct PendingWrite(oneshot::Receiver<Result<Outcome>>);

impl PendingWrite {
    /// Waits until the proposal is committed and applied, and returns what apply decided.
    pub async fn outcome(self) -> Result<Outcome> {
        self.0
            .await
            .unwrap_or_else(|_| Err(StopCause::WriteDropped.into()))
    }
}

/// The running consensus of this node.
#[derive(Clone)]
pub struct RaftNode {
    id: NodeId,
    raft: Raft,
    store: Store,
    state: statestore_storage::store::StateTree,
    log: LogStore,
    /// How this node accepts peers and forwards membership changes (plain or TLS).
    transport: Transport,
    /// Hosts a peer's certificate may name (configured, members'), kept current.
    peer_names: PeerNames,
    /// Caps of the Raft listener.
    inbound: InboundLimits,
    leadership: watch::Receiver<Leadership>,
    /// Raft's fatal error, once it stopped on one.
    fatal: watch::Receiver<Option<Fatal<TypeConfig>>>,
    batcher: Batcher,
}

impl RaftNode {
    /// Opens the log (in `<data dir>/raft-log`) and the state machine on `store` and starts
    /// Raft over the TCP peer network. Committed key events are delivered to `sink`. Metrics
    /// (the peer RPC counters among them) are registered into `registry`. Serve peers with
    /// [`RaftNode::serve_peers`].
    pub async fn start(
        config: &RaftConfig,
        store: Store,
        sink: Arc<dyn EventSink>,
        registry: &Registry,
    ) -> Result<RaftNode> {
        let rpcs = PeerRpcMetrics::default();
        rpcs.register(registry)?;
        let network = NetworkFactory::new(config.id, config.peer_timeouts, rpcs.clone())
            .with_tls(config.peer_tls.clone());
        Self::start_inner(config, store, sink, registry, network, rpcs).await
    }

    /// [`RaftNode::start`] with another peer transport (in-process routers in tests).
    pub async fn start_with_network<N>(
        config: &RaftConfig,
        store: Store,
        sink: Arc<dyn EventSink>,
        registry: &Registry,
        network: N,
    ) -> Result<RaftNode>
    where
        N: RaftNetworkFactory<TypeConfig>,
        N::Network: NetSnapshot<TypeConfig, SnapshotData = SnapshotData>,
    {
        // The TCP listener and membership forwarding, should a test use them (their
        // counters are not registered).
        Self::start_inner(
            config,
            store,
            sink,
            registry,
            network,
            PeerRpcMetrics::default(),
        )
        .await
    }

    async fn start_inner<N>(
        config: &RaftConfig,
        store: Store,
        sink: Arc<dyn EventSink>,
        registry: &Registry,
        network: N,
        rpcs: PeerRpcMetrics,
    ) -> Result<RaftNode>
    where
        N: RaftNetworkFactory<TypeConfig>,
        N::Network: NetSnapshot<TypeConfig, SnapshotData = SnapshotData>,
    {
        // This node's own set of peer names: the TLS acceptor checks client certificates
        // against it, the metrics watch keeps the members' part current.
        let peer_names = PeerNames::default();
        peer_names.add_configured(config.known_peers.iter().map(String::as_str));
        let server_tls = config
            .peer_tls
            .as_ref()
            .map(|tls| tls.for_members(peer_names.clone()))
            .transpose()?;
        let transport = Transport::new(server_tls, rpcs, config.peer_timeouts.connect);
        let storage_metrics = Arc::new(RaftStorageMetrics::default());
        storage_metrics.register(registry)?;
        let consensus_metrics = Arc::new(ConsensusMetrics::default());
        consensus_metrics.register(registry)?;

        let log_config = LogConfig {
            dir: store.dir().join("raft-log"),
            cache_bytes: config.log_cache_bytes,
            // Purging frees whole chunks: smaller ones keep the log nearer to what the last
            // snapshot left.
            chunk_bytes: WAL_CHUNK_BYTES,
        };
        let log_metrics = storage_metrics.clone();
        let log_store =
            tokio::task::spawn_blocking(move || LogStore::open(&log_config, log_metrics))
                .await
                .map_err(StopCause::OpenLog)?
                .map_err(|err| match err {
                    Error::WalCorrupt(mut corruption) => {
                        corruption.node = Some(config.id);
                        tracing::error!("{corruption}");
                        Error::WalCorrupt(corruption)
                    }
                    other => other,
                })?;
        let trigger = SnapshotTrigger {
            after_proposals: config.snapshot_after_proposals,
            after_entries: config.snapshot_after_entries,
            state_percent: config.snapshot_after_state_percent,
        };
        let state_machine =
            StateMachine::new(store.clone(), sink, storage_metrics.clone(), trigger)
                .map_err(StopCause::StateMachine)?;
        let state = state_machine.state();
        let raft = Raft::new(
            config.id,
            Arc::new(config.openraft()?),
            network,
            log_store.clone(),
            state_machine,
        )
        .await
        .map_err(StopCause::Fatal)?;

        let (leadership_tx, leadership) = watch::channel(Leadership::default());
        // Before the listener serves: a restarted node accepts its members at once.
        peer_names.set_members(member_addrs(
            &raft.server_metrics().borrow_watched().membership_config,
        ));
        let (fatal_tx, fatal) = watch::channel(None);
        tokio::spawn(watch_metrics(
            raft.clone(),
            MetricsWatchers {
                leadership: leadership_tx,
                fatal: fatal_tx,
                peer_names: peer_names.clone(),
            },
            consensus_metrics,
        ));
        let batcher = Batcher::start(raft.clone());
        Ok(RaftNode {
            id: config.id,
            raft,
            store,
            state,
            log: log_store,
            transport,
            peer_names,
            inbound: config.inbound,
            leadership,
            fatal,
            batcher,
        })
    }

    /// The openraft handle (tests and tools).
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Serves peers on `listener` until `stop` turns true (mutual TLS when the config had
    /// [`RaftConfig::peer_tls`]), within [`RaftConfig::inbound`].
    pub async fn serve_peers(&self, listener: TcpListener, stop: watch::Receiver<bool>) {
        crate::network::serve(
            listener,
            self.transport.clone(),
            self.inbound,
            self.raft.clone(),
            self.state.clone(),
            stop,
        )
        .await
    }

    /// Initialises a new cluster with `members` (id -> Raft address) unless this node already
    /// has state. Returns whether it initialised. Every member may call it with the same set:
    /// the ones that already joined ignore it.
    pub async fn bootstrap(&self, members: BTreeMap<NodeId, String>) -> Result<bool> {
        // The members to be may dial this node before its own initialisation lands.
        self.peer_names
            .add_configured(members.values().map(String::as_str));
        if self.raft.is_initialized().await.map_err(StopCause::Fatal)? {
            return Ok(false);
        }
        let nodes: BTreeMap<NodeId, BasicNode> = members
            .into_iter()
            .map(|(id, addr)| (id, BasicNode::new(addr)))
            .collect();
        match self.raft.initialize(nodes).await {
            Ok(()) => Ok(true),
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(false),
            Err(e) => Err(Error::Bootstrap(e)),
        }
    }

    /// Appends a proposal to the log (in call order) and returns a handle to its outcome.
    pub fn submit(&self, proposal: Proposal) -> Result<PendingWrite> {
        Ok(PendingWrite(self.batcher.submit(proposal)?))
    }

    /// Returns once this node has confirmed with a quorum that it is the leader and has applied
    /// everything committed before the call: a read after this is linearizable.
    pub async fn ensure_linearizable(&self) -> Result<()> {
        read_barrier::wait(&self.raft).await
    }

    /// Returns once this node has confirmed with a quorum, after the call, that it is the
    /// leader, without waiting for its state machine to catch up.
    pub async fn confirm_leadership(&self) -> Result<()> {
        read_barrier::confirm_leadership(&self.raft).await
    }

    /// Leadership as seen by this node; changes are pushed as they happen.
    pub fn leadership(&self) -> watch::Receiver<Leadership> {
        self.leadership.clone()
    }

    /// openraft's metrics as they are now (a copy). To follow changes, use
    /// [`Self::leadership`] and [`Self::fatal`]: the full metrics change with every report (on a
    /// busy leader, with every heartbeat acknowledgement).
    pub fn metrics(&self) -> RaftMetrics {
        self.raft.metrics().borrow_watched().clone()
    }

    /// Read view of the state machine (read it after [`Self::ensure_linearizable`]).
    pub fn view(&self) -> StateView {
        self.state.view()
    }

    /// The underlying store (flush, size).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Bytes of the Raft log on disk.
    pub fn log_size_on_disk(&self) -> u64 {
        self.log.size_on_disk()
    }

    /// Changes membership; runs on the leader (forwarded there if this node is a follower).
    pub async fn change_membership(&self, change: &MembershipChange) -> Result<()> {
        membership::apply_anywhere(&self.raft, &self.transport, change).await
    }

    /// Index of the last committed log entry as this node knows it.
    pub async fn committed_index(&self) -> Option<u64> {
        self.raft
            .with_raft_state(|state| state.local_committed().map(|c| c.index))
            .await
            .ok()
            .flatten()
    }

    /// Current voter ids.
    pub fn voters(&self) -> BTreeSet<NodeId> {
        self.raft
            .server_metrics()
            .borrow_watched()
            .membership_config
            .membership()
            .voter_ids()
            .collect()
    }

    /// Asks Raft to build a snapshot now.
    pub async fn trigger_snapshot(&self) -> Result<()> {
        self.raft
            .trigger()
            .snapshot()
            .await
            .map_err(|fatal| StopCause::Fatal(fatal).into())
    }

    /// Resolves when Raft stopped on a fatal error (a failed log write or fsync, a failed
    /// apply, a panic in its core), with that error. Never resolves while Raft runs; also
    /// resolves if the metrics channel closes (Raft is gone).
    pub async fn fatal(&self) -> StopCause {
        let mut fatal = self.fatal.clone();
        match fatal.wait_for(Option::is_some).await {
            Ok(reason) => reason
                .clone()
                .map_or(StopCause::MetricsClosed, StopCause::Fatal),
            Err(_) => StopCause::MetricsClosed,
        }
    }

    /// Stops Raft.
    pub async fn shutdown(&self) -> Result<()> {
        self.raft
            .shutdown()
            .await
            .map_err(|err| StopCause::Shutdown(err).into())
    }

    /// For a leader: time since a quorum last acknowledged it (a heartbeat or replication
    /// reply). `None` on a follower, or on a leader no quorum has acknowledged yet. A leader
    /// that is the only voter is its own quorum: zero (openraft's figure for it only moves
    /// when its core gets round to it, which a busy core may not for a while).
    pub fn quorum_ack_age(&self) -> Option<Duration> {
        use openraft::Instant as _;
        let watch = self.raft.metrics();
        let metrics = watch.borrow_watched();
        let acked = metrics.last_quorum_acked?;
        let mut voters = metrics.membership_config.membership().voter_ids();
        if voters.next() == Some(self.id) && voters.next().is_none() {
            return Some(Duration::ZERO);
        }
        Some(acked.elapsed())
    }

    /// On the leader: asks the most up-to-date other voter to take over leadership (it
    /// elects itself at once, without waiting out this leader's lease). Returns the node
    /// asked, or `None` when there is no other voter (or this node does not lead).
    pub async fn transfer_leadership(&self) -> Result<Option<NodeId>> {
        let target = {
            let watch = self.raft.metrics();
            let metrics = watch.borrow_watched();
            let Some(replication) = metrics.replication.as_ref() else {
                return Ok(None);
            };
            metrics
                .membership_config
                .membership()
                .voter_ids()
                .filter(|id| *id != self.id)
                .max_by_key(|id| replication.get(id).cloned().flatten().map(|l| l.index))
        };
        let Some(target) = target else {
            return Ok(None);
        };
        self.raft
            .trigger()
            .transfer_leader(target)
            .await
            .map_err(StopCause::Fatal)?;
        Ok(Some(target))
    }

    /// Current role.
    pub fn server_state(&self) -> ServerState {
        self.raft.server_metrics().borrow_watched().state
    }
}

/// Where [`watch_metrics`] publishes what it reads from openraft's metrics.
struct MetricsWatchers {
    /// Changes only when leader, role or term do.
    leadership: watch::Sender<Leadership>,
    /// Set once, when Raft stops on a fatal error.
    fatal: watch::Sender<Option<Fatal<TypeConfig>>>,
    /// The members' Raft addresses, for the peer certificate check.
    peer_names: PeerNames,
}

/// The Raft addresses of every node in `membership` (voters and learners).
fn member_addrs(membership: &StoredMembership) -> impl Iterator<Item = &str> {
    membership
        .membership()
        .nodes()
        .map(|(_, node)| node.addr.as_str())
}

/// Publishes Raft's fatal error the first time `metrics` carry one.
fn note_fatal(fatal: &watch::Sender<Option<Fatal<TypeConfig>>>, metrics: &RaftMetrics) {
    if let Err(error) = &metrics.running_state {
        fatal.send_if_modified(|current| {
            let first = current.is_none();
            if first {
                *current = Some(error.clone());
            }
            first
        });
    }
}

/// How often [`watch_metrics`] refreshes the consensus gauges between role changes.
const GAUGE_REFRESH: Duration = Duration::from_millis(100);

/// Follows openraft's role reports (leader, role, term, membership: they change rarely) and
/// refreshes the gauges every [`GAUGE_REFRESH`]. It does not wait on openraft's full metrics:
/// those are sent again after every batch of work (every acknowledgement and log flush), and
/// following them cost a clone of the metrics and every gauge each time (7 % of the nodes' CPU
/// per lone write in alternating runs, BENCHMARKS.md "A lone write's thread hops").
async fn watch_metrics(raft: Raft, watchers: MetricsWatchers, gauges: Arc<ConsensusMetrics>) {
    let mut roles = raft.server_metrics();
    let everything = raft.metrics();
    let mut refresh = tokio::time::interval(GAUGE_REFRESH);
    refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut membership = None;
    loop {
        let now = {
            let role = roles.borrow_watched();
            let log_id = *role.membership_config.log_id();
            if membership.as_ref() != Some(&log_id) {
                watchers
                    .peer_names
                    .set_members(member_addrs(&role.membership_config));
                membership = Some(log_id);
            }
            Leadership {
                leader: role.current_leader,
                is_leader: role.state == ServerState::Leader
                    && role.current_leader == Some(role.id),
                term: role.vote.leader_id().term,
            }
        };
        watchers.leadership.send_if_modified(|current| {
            let changed = *current != now;
            *current = now;
            changed
        });
        {
            let all = everything.borrow_watched();
            gauges.observe(&all);
            note_fatal(&watchers.fatal, &all);
        }
        tokio::select! {
            changed = roles.changed() => {
                if changed.is_err() {
                    // Raft is gone: one last look for the fatal error it stopped on.
                    note_fatal(&watchers.fatal, &everything.borrow_watched());
                    return;
                }
            }
            _ = refresh.tick() => {}
        }
    }
}
