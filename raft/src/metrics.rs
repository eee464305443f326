//! Metrics of the consensus layer, defined next to the code that records them and registered
//! into the registry the node owns (names follow `statestore_<subsystem>_<name>_<unit>`).

use prometheus::{
    Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};

use crate::network::refusal::{ConnectionRefusal, SnapshotRefusal};
use crate::slow_io::SlowFlushReporter;
use crate::types::RaftMetrics;

fn histogram(name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
    Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))
        .unwrap_or_else(|e| unreachable!("static metric {name}: {e}"))
}

fn counter(name: &str, help: &str) -> IntCounter {
    IntCounter::new(name, help).unwrap_or_else(|e| unreachable!("static metric {name}: {e}"))
}

fn gauge(name: &str, help: &str) -> IntGauge {
    IntGauge::new(name, help).unwrap_or_else(|e| unreachable!("static metric {name}: {e}"))
}

/// 0.1 ms .. ~3.3 s, doubling.
fn disk_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(0.0001, 2.0, 16).unwrap_or_default()
}

/// Disk-side metrics of the log and the state machine.
pub struct RaftStorageMetrics {
    /// `statestore_disk_log_fsync_duration_seconds`
    pub log_fsync_seconds: Histogram,
    /// `statestore_disk_log_append_duration_seconds`
    pub log_append_seconds: Histogram,
    /// `statestore_disk_log_written_bytes_total`
    pub log_written_bytes_total: IntCounter,
    /// `statestore_disk_log_chunks_freed_in_background_total`: purged Raft log chunks whose
    /// blocks the background reaper freed, not the WAL's flush thread (`purged_chunks`).
    pub log_chunks_freed_in_background_total: IntCounter,
    /// `statestore_disk_apply_commit_duration_seconds`
    pub apply_commit_seconds: Histogram,
    /// `statestore_disk_snapshot_duration_seconds{op=begin|build|install}` (`begin`: the part
    /// of a build that holds the memory layers, which apply waits for)
    pub snapshot_seconds: HistogramVec,
    /// `statestore_apply_stall_seconds{waiting_on}`: the apply thread, with work, made no
    /// progress for at least [`crate::applier::STALL`] (see `applier::Progress`).
    pub apply_stall_seconds: HistogramVec,
    /// `statestore_disk_errors_total`
    pub disk_errors_total: IntCounter,
    /// `statestore_disk_log_slow_flushes_total`, and the rate-limited WARN line about them.
    pub log_slow_flushes: SlowFlushReporter,
    /// `statestore_disk_snapshot_own_corrupt_total` (see `snapshot::Outgoing::refuse`).
    pub own_snapshot_corrupt_total: IntCounter,
    /// `statestore_storage_unclean_restarts_total`: opens that found no clean-stop marker (0 or
    /// 1 per process), whether they kept the state database or rebuilt the state machine.
    pub unclean_restarts_total: IntCounter,
    /// `statestore_storage_open{kind=new|clean|unclean|unclean_kept}`: 1 for how this process's
    /// open went.
    pub open_kind: IntGaugeVec,
    /// `statestore_storage_rebuild_duration_seconds`: how long this process's open took to keep
    /// or rebuild the state (0 unless unclean).
    pub rebuild_seconds: Gauge,
}

impl Default for RaftStorageMetrics {
    fn default() -> Self {
        RaftStorageMetrics {
            log_fsync_seconds: histogram(
                "statestore_disk_log_fsync_duration_seconds",
                "Time to fsync the Raft log (one fsync covers every append queued meanwhile).",
                disk_buckets(),
            ),
            log_append_seconds: histogram(
                "statestore_disk_log_append_duration_seconds",
                "Time to write a batch of entries to the log before the fsync.",
                disk_buckets(),
            ),
            log_written_bytes_total: counter(
                "statestore_disk_log_written_bytes_total",
                "Bytes of encoded entries appended to the log.",
            ),
            log_chunks_freed_in_background_total: counter(
                "statestore_disk_log_chunks_freed_in_background_total",
                "Purged Raft log chunks held open through their removal, so that the WAL's flush thread only removed their names and a background thread freed their blocks.",
            ),
            apply_commit_seconds: histogram(
                "statestore_disk_apply_commit_duration_seconds",
                "Time to apply a batch of committed entries and write it to the state machine.",
                disk_buckets(),
            ),
            snapshot_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "statestore_disk_snapshot_duration_seconds",
                    "Time to build or install a snapshot; op=\"begin\" is the start of a build, which holds the state machine's memory layers (apply and reads wait meanwhile).",
                )
                .buckets(prometheus::exponential_buckets(0.01, 2.0, 14).unwrap_or_default()),
                &["op"],
            )
            .unwrap_or_else(|e| unreachable!("static metric: {e}")),
            apply_stall_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "statestore_apply_stall_seconds",
                    "Waits of at least 50 ms in which the apply thread, with entries to apply, made no progress, by what it waited on (memtable_room, device_index, apply: reading the state, commit).",
                )
                .buckets(vec![0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),
                &["waiting_on"],
            )
            .unwrap_or_else(|e| unreachable!("static metric: {e}")),
            disk_errors_total: counter(
                "statestore_disk_errors_total",
                "Storage operations that failed.",
            ),
            own_snapshot_corrupt_total: counter(
                "statestore_disk_snapshot_own_corrupt_total",
                "Snapshots this node wrote for a peer that the peer refused as corrupt (damaged here while written or read, in transit, or at the peer); each is replaced by a new export for the next transfer.",
            ),
            log_slow_flushes: SlowFlushReporter::new(counter(
                "statestore_disk_log_slow_flushes_total",
                "Log appends that took longer than 50 ms from hand-over to fdatasync.",
            )),
            unclean_restarts_total: counter(
                "statestore_storage_unclean_restarts_total",
                "Opens that found no clean-stop marker: the state database was kept as of its last durable layer if it read back whole, else discarded and the state machine rebuilt from the newest snapshot (the Raft log after either is applied again).",
            ),
            open_kind: IntGaugeVec::new(
                Opts::new(
                    "statestore_storage_open",
                    "How this process found its data directory: new, clean (the state database was used), unclean_kept (no clean stop, the state database read back whole and was kept) or unclean (rebuilt); 1 for the one that applies.",
                ),
                &["kind"],
            )
            .unwrap_or_else(|e| unreachable!("static metric: {e}")),
            rebuild_seconds: Gauge::new(
                "statestore_storage_rebuild_duration_seconds",
                "Time the open of this process took after an unclean stop: to read the state database back and keep it, or to set it aside and load the newest snapshot (0 otherwise; the log replay after it is not included).",
            )
            .unwrap_or_else(|e| unreachable!("static metric: {e}")),
        }
    }
}

impl RaftStorageMetrics {
    /// Registers every metric into `registry`.
    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.log_fsync_seconds.clone()))?;
        registry.register(Box::new(self.log_append_seconds.clone()))?;
        registry.register(Box::new(self.log_written_bytes_total.clone()))?;
        registry.register(Box::new(self.log_chunks_freed_in_background_total.clone()))?;
        registry.register(Box::new(self.apply_commit_seconds.clone()))?;
        registry.register(Box::new(self.snapshot_seconds.clone()))?;
        for phase in crate::applier::Phase::ALL {
            // Every series from the start, so a dashboard sees zero rather than nothing.
            let _ = self.apply_stall_seconds.with_label_values(&[phase.label()]);
        }
        registry.register(Box::new(self.apply_stall_seconds.clone()))?;
        registry.register(Box::new(self.disk_errors_total.clone()))?;
        registry.register(Box::new(self.own_snapshot_corrupt_total.clone()))?;
        registry.register(Box::new(self.log_slow_flushes.counter()))?;
        registry.register(Box::new(self.unclean_restarts_total.clone()))?;
        registry.register(Box::new(self.open_kind.clone()))?;
        registry.register(Box::new(self.rebuild_seconds.clone()))?;
        Ok(())
    }

    /// Records how the store's open went (`kind`: an `OpenKind` label) and what the rebuild
    /// took.
    pub fn record_open(&self, kind: &str, rebuild_seconds: f64) {
        for label in ["new", "clean", "unclean", "unclean_kept"] {
            self.open_kind
                .with_label_values(&[label])
                .set(i64::from(label == kind));
        }
        if kind.starts_with("unclean") {
            self.unclean_restarts_total.inc();
        }
        self.rebuild_seconds.set(rebuild_seconds);
    }
}

/// Kinds of peer RPC, the `kind` label of `statestore_raft_rpcs_sent_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcKind {
    /// An AppendEntries of a replication stream (entries, or an empty one moving the commit).
    Append,
    /// An empty AppendEntries sent as a heartbeat (periodic, or for a read barrier).
    Heartbeat,
    /// A RequestVote.
    Vote,
    /// A pre-vote (asks whether a vote would be granted, changes nothing).
    PreVote,
    /// A whole snapshot transfer.
    Snapshot,
    /// A request to take over leadership.
    TransferLeader,
}

impl RpcKind {
    /// Every kind, in label order.
    pub const ALL: [RpcKind; 6] = [
        RpcKind::Append,
        RpcKind::Heartbeat,
        RpcKind::Vote,
        RpcKind::PreVote,
        RpcKind::Snapshot,
        RpcKind::TransferLeader,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            RpcKind::Append => "append",
            RpcKind::Heartbeat => "heartbeat",
            RpcKind::Vote => "vote",
            RpcKind::PreVote => "pre_vote",
            RpcKind::Snapshot => "snapshot",
            RpcKind::TransferLeader => "transfer_leader",
        }
    }
}

/// RPCs the TCP peer network sent to other nodes. A heartbeat to each follower is one quorum
/// round's cost on an idle leader, so `{kind="heartbeat"}` shows whether linearizable reads
/// share rounds. Also what the Raft listener refused: TLS handshakes, connections (over the
/// cap, no hello in time, an oversized or wrong first frame) and inbound snapshots, and the
/// inbound connections open.
#[derive(Clone)]
pub struct PeerRpcMetrics {
    /// `statestore_raft_rpcs_sent_total{kind}`
    sent: IntCounterVec,
    /// `statestore_raft_peer_tls_failures_total{side}`
    tls_failures: IntCounterVec,
    /// `statestore_raft_peer_connections_refused_total{reason}`
    connections_refused: IntCounterVec,
    /// `statestore_raft_peer_connections_open`
    connections_open: IntGauge,
    /// `statestore_raft_snapshots_refused_total{reason}`
    snapshots_refused: IntCounterVec,
    /// `statestore_raft_peer_answers_overdue_total`
    answers_overdue: IntCounter,
}

/// The `reason` label of `statestore_raft_peer_connections_refused_total`: `limit` (the
/// listener already had its cap of open peer connections), `timeout` (no hello within the
/// connect deadline after the TCP accept or the TLS handshake), `oversized` (a first frame
/// larger than a hello may be), `bad_hello` (a first frame that is no hello, or a hello of
/// another protocol version). TLS handshake failures are counted in
/// `statestore_raft_peer_tls_failures_total{side="server"}` instead.
pub const CONNECTION_REFUSALS: [&str; 4] = [
    ConnectionRefusal::ALL[0].label(),
    ConnectionRefusal::ALL[1].label(),
    ConnectionRefusal::ALL[2].label(),
    ConnectionRefusal::ALL[3].label(),
];

/// The `reason` label of `statestore_raft_snapshots_refused_total`: `too_large` (the transfer
/// passed `cluster.max_snapshot_mb`; the partial file is removed), `busy` (another snapshot was
/// still being received), `corrupt` (the received file failed its checks before Raft saw it; it
/// is removed and the leader sends it again).
pub const SNAPSHOT_REFUSALS: [&str; 3] = SnapshotRefusal::LABELS;

/// The `side` label of `statestore_raft_peer_tls_failures_total`: `client` (this node dialled
/// a peer and the handshake failed, e.g. the peer's certificate is not of the cluster CA or
/// not for its address), `server` (a connection to this node's Raft listener failed the
/// handshake, e.g. without a client certificate of the cluster CA). With TLS 1.3 a client
/// learns that its own certificate was refused only when reading the hello's answer: that
/// failure shows on the server's side only.
pub const TLS_SIDES: [&str; 2] = ["client", "server"];

impl Default for PeerRpcMetrics {
    fn default() -> Self {
        let sent = IntCounterVec::new(
            Opts::new(
                "statestore_raft_rpcs_sent_total",
                "Peer RPCs this node sent (written to the connection), by kind.",
            ),
            &["kind"],
        )
        .unwrap_or_else(|e| unreachable!("static metric: {e}"));
        for kind in RpcKind::ALL {
            sent.with_label_values(&[kind.label()]).reset();
        }
        let tls_failures = IntCounterVec::new(
            Opts::new(
                "statestore_raft_peer_tls_failures_total",
                "Peer connections whose TLS handshake failed (refused certificate, timeout), by side.",
            ),
            &["side"],
        )
        .unwrap_or_else(|e| unreachable!("static metric: {e}"));
        for side in TLS_SIDES {
            tls_failures.with_label_values(&[side]).reset();
        }
        let connections_refused = IntCounterVec::new(
            Opts::new(
                "statestore_raft_peer_connections_refused_total",
                "Inbound peer connections closed before their hello was accepted, by reason.",
            ),
            &["reason"],
        )
        .unwrap_or_else(|e| unreachable!("static metric: {e}"));
        for reason in CONNECTION_REFUSALS {
            connections_refused.with_label_values(&[reason]).reset();
        }
        let snapshots_refused = IntCounterVec::new(
            Opts::new(
                "statestore_raft_snapshots_refused_total",
                "Inbound snapshot transfers refused, by reason.",
            ),
            &["reason"],
        )
        .unwrap_or_else(|e| unreachable!("static metric: {e}"));
        for reason in SNAPSHOT_REFUSALS {
            snapshots_refused.with_label_values(&[reason]).reset();
        }
        PeerRpcMetrics {
            sent,
            tls_failures,
            connections_refused,
            connections_open: gauge(
                "statestore_raft_peer_connections_open",
                "Inbound peer connections open on the Raft listener (handshaking ones included).",
            ),
            snapshots_refused,
            answers_overdue: IntCounter::new(
                "statestore_raft_peer_answers_overdue_total",
                "Inbound peer connections closed because an answer (an append, a vote) was not ready within 30 s.",
            )
            .unwrap_or_else(|e| unreachable!("static metric: {e}")),
        }
    }
}

impl PeerRpcMetrics {
    /// Registers every metric into `registry`.
    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.sent.clone()))?;
        registry.register(Box::new(self.tls_failures.clone()))?;
        registry.register(Box::new(self.connections_refused.clone()))?;
        registry.register(Box::new(self.connections_open.clone()))?;
        registry.register(Box::new(self.snapshots_refused.clone()))?;
        registry.register(Box::new(self.answers_overdue.clone()))
    }

    /// The counter of RPCs of `kind`.
    pub fn sent(&self, kind: RpcKind) -> IntCounter {
        self.sent.with_label_values(&[kind.label()])
    }

    /// The counter of failed TLS handshakes on `side` (one of [`TLS_SIDES`]).
    pub fn tls_failures(&self, side: &str) -> IntCounter {
        self.tls_failures.with_label_values(&[side])
    }

    /// The counter of inbound connections refused for `reason` (one of
    /// [`CONNECTION_REFUSALS`]).
    pub fn connections_refused(&self, reason: &str) -> IntCounter {
        self.connections_refused.with_label_values(&[reason])
    }

    /// The gauge of open inbound peer connections.
    pub fn connections_open(&self) -> &IntGauge {
        &self.connections_open
    }

    /// The counter of inbound connections closed with an answer overdue.
    pub fn answers_overdue(&self) -> &IntCounter {
        &self.answers_overdue
    }

    /// The counter of inbound snapshots refused for `reason` (one of [`SNAPSHOT_REFUSALS`]).
    pub fn snapshots_refused(&self, reason: &str) -> IntCounter {
        self.snapshots_refused.with_label_values(&[reason])
    }
}

/// Gauges mirroring openraft's own metrics.
pub struct ConsensusMetrics {
    has_leader: IntGauge,
    is_leader: IntGauge,
    current_leader_id: IntGauge,
    leader_changes_seen_total: IntCounter,
    term: IntGauge,
    last_log_index: IntGauge,
    applied_index: IntGauge,
    snapshot_index: IntGauge,
    purged_index: IntGauge,
    state: IntGaugeVec,
    last_leader: std::sync::Mutex<Option<u64>>,
}

const STATES: [&str; 5] = ["leader", "follower", "candidate", "learner", "shutdown"];

impl Default for ConsensusMetrics {
    fn default() -> Self {
        let state = IntGaugeVec::new(
            Opts::new(
                "statestore_raft_state",
                "1 for the Raft role this node is in.",
            ),
            &["state"],
        )
        .unwrap_or_else(|e| unreachable!("static metric: {e}"));
        for s in STATES {
            state.with_label_values(&[s]).set(0);
        }
        ConsensusMetrics {
            has_leader: gauge(
                "statestore_server_has_leader",
                "1 if this node knows a leader.",
            ),
            is_leader: gauge(
                "statestore_server_is_leader",
                "1 if this node is the leader.",
            ),
            current_leader_id: gauge(
                "statestore_server_current_leader_id",
                "Id of the leader this node knows (0: none).",
            ),
            leader_changes_seen_total: counter(
                "statestore_server_leader_changes_seen_total",
                "Leader changes this node has seen.",
            ),
            term: gauge("statestore_raft_term", "Current Raft term."),
            last_log_index: gauge(
                "statestore_raft_last_log_index",
                "Index of the last log entry.",
            ),
            applied_index: gauge(
                "statestore_raft_applied_index",
                "Index of the last applied entry.",
            ),
            snapshot_index: gauge(
                "statestore_raft_snapshot_index",
                "Last log index covered by the current snapshot.",
            ),
            purged_index: gauge("statestore_raft_purged_index", "Last purged log index."),
            state,
            last_leader: std::sync::Mutex::new(None),
        }
    }
}

impl ConsensusMetrics {
    /// Registers every metric into `registry`.
    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        registry.register(Box::new(self.has_leader.clone()))?;
        registry.register(Box::new(self.is_leader.clone()))?;
        registry.register(Box::new(self.current_leader_id.clone()))?;
        registry.register(Box::new(self.leader_changes_seen_total.clone()))?;
        registry.register(Box::new(self.term.clone()))?;
        registry.register(Box::new(self.last_log_index.clone()))?;
        registry.register(Box::new(self.applied_index.clone()))?;
        registry.register(Box::new(self.snapshot_index.clone()))?;
        registry.register(Box::new(self.purged_index.clone()))?;
        registry.register(Box::new(self.state.clone()))?;
        Ok(())
    }

    /// Updates the gauges from one openraft metrics snapshot.
    pub fn observe(&self, m: &RaftMetrics) {
        let as_gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.has_leader.set(i64::from(m.current_leader.is_some()));
        self.is_leader
            .set(i64::from(m.current_leader == Some(m.id)));
        self.current_leader_id
            .set(as_gauge(m.current_leader.unwrap_or(0)));
        if let Ok(mut last) = self.last_leader.lock()
            && *last != m.current_leader
        {
            if m.current_leader.is_some() {
                self.leader_changes_seen_total.inc();
            }
            *last = m.current_leader;
        }
        self.term.set(as_gauge(m.current_term));
        self.last_log_index
            .set(as_gauge(m.last_log_index.unwrap_or(0)));
        self.applied_index
            .set(as_gauge(m.last_applied.map_or(0, |l| l.index)));
        self.snapshot_index
            .set(as_gauge(m.snapshot.map_or(0, |l| l.index)));
        self.purged_index
            .set(as_gauge(m.purged.map_or(0, |l| l.index)));
        let current = match m.state {
            openraft::ServerState::Leader => "leader",
            openraft::ServerState::Follower => "follower",
            openraft::ServerState::Candidate => "candidate",
            openraft::ServerState::Learner => "learner",
            openraft::ServerState::Shutdown => "shutdown",
        };
        for s in STATES {
            self.state
                .with_label_values(&[s])
                .set(i64::from(s == current));
        }
    }
}
