//! `RaftStateMachine` over the state machine ([`statestore_storage::machine::Machine`]) and the
//! store's state tree (fjall behind a write-back memtable).
//!
//! Apply runs the entries openraft hands over through the machine inside one overlay
//! transaction and commits it to the state tree atomically together with the last-applied log
//! id and membership (at most [`MAX_PROPOSALS_PER_COMMIT`] proposals per batch, so a long
//! catch-up never builds one huge transaction). Only then are the waiting clients answered and
//! the key events handed to the [`EventSink`] (post-commit, in log order); only a leader's sink
//! publishes them.
//!
//! Snapshots are decided here: openraft asks every `snapshot_check_entries` entries, and a
//! snapshot is built only once enough proposals or entries were applied since the last one
//! (an entry can hold one proposal or a thousand). A build writes no file: the state database
//! is the snapshot, and a build returns once what it covers is durable there (openraft then
//! purges the log behind it). The snapshot openraft sends to a peer is an export of the state
//! as it is when asked for, written to a file only for the transfer (see [`crate::snapshot`]).

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Instant;

use futures::{Stream, StreamExt};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use statestore_storage::codec;
use statestore_storage::engine::OrderedRead;
use statestore_storage::keyspace;
use statestore_storage::machine::{KeyEvent, consensus_key, read};
use statestore_storage::store::{
    Checkpoint, OpenKind, SnapshotCovers, StateTree, StateView, Store, background,
};

use crate::applier::Applier;
use crate::metrics::RaftStorageMetrics;
use crate::snapshot::{Outgoing, SnapshotData};
use crate::types::{LogId, Snapshot, SnapshotMeta, StoredMembership, TypeConfig};

/// Consensus record: the last applied log id.
pub(crate) const LAST_APPLIED: &[u8] = b"last_applied";
/// Consensus record: the last applied membership.
pub(crate) const MEMBERSHIP: &[u8] = b"membership";
/// Proposals applied in one transaction (one commit to the state tree) at most.
const MAX_PROPOSALS_PER_COMMIT: usize = 16_384;

/// A committed key event and the trace context of the proposal that caused it (on the leader,
/// when that proposal was sampled; see [`crate::trace`]).
pub struct TracedEvent {
    /// What changed (the notifier reads who observes it).
    pub event: KeyEvent,
    /// The causing proposal's trace context.
    pub trace: Option<opentelemetry::Context>,
}

/// Receives the key events of every applied batch, in commit order.
pub trait EventSink: Send + Sync + 'static {
    /// Called after the batch is committed to the state tree.
    fn deliver(&self, events: Vec<TracedEvent>);
}

/// A sink that drops everything (followers in tests, tools).
pub struct DiscardEvents;

impl EventSink for DiscardEvents {
    fn deliver(&self, _events: Vec<TracedEvent>) {}
}

/// When a snapshot is worth building: after [`SnapshotTrigger::after_proposals`] proposals or
/// [`SnapshotTrigger::after_entries`] entries, and not before the log since the last snapshot
/// holds [`SnapshotTrigger::state_percent`] % of the state's bytes.
///
/// The last condition keeps the cost of snapshots in proportion to the writes that make them
/// necessary. Every snapshot writes the whole state; with a fixed count, loading N keys wrote
/// snapshots of about N²/(2·after_proposals) keys in all (at 3,000,000 keys each node exported
/// one snapshot right after the other), while with a share of the state the sizes grow
/// geometrically and the total stays a few times the final state. The price: a node that
/// stopped uncleanly replays up to that share of the state from its log.
#[derive(Debug, Clone, Copy)]
pub struct SnapshotTrigger {
    /// Proposals applied since the last snapshot.
    pub after_proposals: u64,
    /// Log entries applied since the last snapshot.
    pub after_entries: u64,
    /// Bytes of log entries applied since the last snapshot, in percent of the bytes the state
    /// holds (keys and values, remembered replies); 0: no such condition.
    pub state_percent: u64,
}

impl SnapshotTrigger {
    /// True if a snapshot is due after `proposals` proposals in `entries` entries of
    /// `log_bytes` bytes since the last one; `state_bytes` is asked only when the counts are
    /// reached.
    pub(crate) fn due(
        &self,
        proposals: u64,
        entries: u64,
        log_bytes: u64,
        state_bytes: impl FnOnce() -> u64,
    ) -> bool {
        let counted = proposals >= self.after_proposals || entries >= self.after_entries;
        counted
            && (self.state_percent == 0
                || u128::from(log_bytes) * 100
                    >= u128::from(state_bytes()) * u128::from(self.state_percent))
    }

    /// The same trigger raised by a random 0–50 %: replicas reach a threshold at the same log
    /// position, and building all their snapshots at once would load every node together.
    fn jittered(self) -> SnapshotTrigger {
        use std::hash::{BuildHasher, Hasher};
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let percent = random % 51;
        let raise = |n: u64| n.saturating_add(n.saturating_mul(percent) / 100);
        SnapshotTrigger {
            after_proposals: raise(self.after_proposals),
            after_entries: raise(self.after_entries),
            state_percent: raise(self.state_percent),
        }
    }
}

impl Default for SnapshotTrigger {
    fn default() -> Self {
        SnapshotTrigger {
            after_proposals: 200_000,
            after_entries: 50_000,
            state_percent: 25,
        }
    }
}

/// The state machine.
pub struct StateMachine {
    store: Store,
    state: StateTree,
    metrics: Arc<RaftStorageMetrics>,
    trigger: SnapshotTrigger,
    /// The snapshot handed out for peers last, while a sender or its grace period holds it
    /// (see [`crate::snapshot::Outgoing`]).
    outgoing: Weak<Outgoing>,
    /// The log id the last build covers: an outgoing snapshot older than it is not handed out
    /// again (the log after it may be purged).
    last_built: Option<LogId>,
    proposals_since_snapshot: u64,
    entries_since_snapshot: u64,
    /// Bytes of the proposal batches applied since the last snapshot.
    log_bytes_since_snapshot: u64,
    /// Applies entries on its own thread.
    applier: Applier,
}

/// `err` as the `io::Error` openraft's storage traits take (its message and source kept).
fn io_err(err: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> io::Error {
    io::Error::other(err)
}

impl StateMachine {
    /// A state machine on `store`'s state tree, delivering events to `sink`.
    pub fn new(
        store: Store,
        sink: Arc<dyn EventSink>,
        metrics: Arc<RaftStorageMetrics>,
        trigger: SnapshotTrigger,
    ) -> io::Result<Self> {
        recover(&store, &metrics)?;
        let state = store.state().map_err(io_err)?;
        let applier = Applier::start(state.clone(), sink, metrics.clone())?;
        Ok(StateMachine {
            store,
            state,
            metrics,
            trigger: trigger.jittered(),
            outgoing: Weak::new(),
            last_built: None,
            proposals_since_snapshot: 0,
            entries_since_snapshot: 0,
            log_bytes_since_snapshot: 0,
            applier,
        })
    }

    /// A read view for the leader's read path.
    pub fn view(&self) -> StateView {
        self.state.view()
    }

    /// The state tree handle (shared with readers).
    pub fn state(&self) -> StateTree {
        self.state.clone()
    }

    fn consensus_record<T: serde::de::DeserializeOwned>(
        view: &impl OrderedRead,
        name: &[u8],
    ) -> io::Result<Option<T>> {
        let bytes = read::consensus_record(view, name).map_err(io_err)?;
        bytes
            .map(|b| codec::decode("state machine consensus record", &b))
            .transpose()
            .map_err(io_err)
    }

    /// Reads the consensus records of `view`: what a snapshot of it covers.
    fn meta_of(view: &impl OrderedRead) -> io::Result<SnapshotMeta> {
        let last_log_id: Option<LogId> = Self::consensus_record(view, LAST_APPLIED)?;
        let last_membership: StoredMembership =
            Self::consensus_record(view, MEMBERSHIP)?.unwrap_or_default();
        Ok(SnapshotMeta {
            last_log_id,
            last_membership,
        })
    }

    /// Starts a snapshot of the state as applied so far: a checkpoint of the state database
    /// (no copy); the builder waits until it is durable while apply goes on.
    fn snapshot_builder(&mut self) -> SnapshotBuilder {
        let started = Instant::now();
        let state = self.state.clone();
        // Nothing is applied meanwhile (openraft's state-machine worker runs this between
        // applies): the view's records are what the checkpoint covers.
        let meta = Self::meta_of(&self.state.view());
        let checkpoint = blocking(move || state.checkpoint());
        self.metrics
            .snapshot_seconds
            .with_label_values(&["begin"])
            .observe(started.elapsed().as_secs_f64());
        if let Ok(meta) = &meta {
            self.last_built = self.last_built.max(meta.last_log_id);
        }
        self.proposals_since_snapshot = 0;
        self.entries_since_snapshot = 0;
        self.log_bytes_since_snapshot = 0;
        SnapshotBuilder {
            prepared: Some(meta.map(|meta| (checkpoint, meta))),
            metrics: self.metrics.clone(),
            started,
        }
    }

    /// The outgoing snapshot handed out last, if a holder still keeps it, no peer refused it,
    /// its write did not fail, and it is not older than the last build (the log after it may
    /// be purged: a peer that installed it would need another). One older is still handed out
    /// while it is being written: a new export would wait for it to end.
    fn reusable_outgoing(&self) -> Option<Arc<Outgoing>> {
        let outgoing = self.outgoing.upgrade()?;
        if outgoing.is_refused() {
            if outgoing.take_refusal() {
                self.metrics.own_snapshot_corrupt_total.inc();
                tracing::error!(last_log_id = ?outgoing.meta.last_log_id, "a peer refused this node's snapshot as corrupt (damaged while written or read here, in transit, or at the peer): exporting a new one for the next transfer");
            }
            return None;
        }
        let stale = outgoing.meta.last_log_id < self.last_built;
        if outgoing.failed() || (stale && outgoing.is_written()) {
            return None;
        }
        Some(outgoing)
    }

    /// Where a snapshot received from a peer is written before it is installed.
    pub fn incoming_snapshot_path(&self) -> PathBuf {
        self.state.incoming_snapshot_path()
    }
}

/// Bytes the state holds: keys and values, and remembered replies (what a snapshot mostly
/// writes; the device-bound queues are not counted). 0 if the record does not read: the
/// snapshot is then due by its counts alone.
fn state_bytes(state: &StateTree) -> u64 {
    match keyspace::read::meta(&state.view()) {
        Ok(meta) => meta.bytes.saturating_add(meta.remembered_reply_bytes),
        Err(err) => {
            tracing::warn!(error = %err, "cannot read the keyspace's size for the snapshot trigger");
            0
        }
    }
}

/// The consensus records a state installed or rebuilt from a snapshot of `meta` carries: its
/// membership and last applied log id, exactly (so openraft applies every entry after it).
fn consensus_records(meta: &SnapshotMeta) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut records = vec![(
        consensus_key(MEMBERSHIP),
        codec::encode(&meta.last_membership),
    )];
    if let Some(last) = &meta.last_log_id {
        records.push((consensus_key(LAST_APPLIED), codec::encode(last)));
    }
    records
}

/// What a snapshot header says, for the store's rebuild after an unclean stop.
fn snapshot_covers(header: &[u8]) -> statestore_storage::Result<SnapshotCovers> {
    let meta: SnapshotMeta = codec::decode("snapshot header", header)?;
    Ok(SnapshotCovers {
        last_index: meta.last_log_id.as_ref().map(|id| id.index),
        records: consensus_records(&meta),
    })
}

/// The log index the state's consensus records say it has applied (for the store's check of a
/// state kept after an unclean stop).
fn applied_index(view: &StateView) -> statestore_storage::Result<Option<u64>> {
    read::consensus_record(view, LAST_APPLIED)?
        .map(|bytes| codec::decode::<LogId>("last applied log id", &bytes).map(|id| id.index))
        .transpose()
}

/// Runs the store's rebuild after an unclean stop (see `statestore_storage::store::Store::recover`)
/// before anything reads the state, and records how the open went.
fn recover(store: &Store, metrics: &RaftStorageMetrics) -> io::Result<()> {
    let report = store
        .recover(&snapshot_covers, &applied_index)
        .map_err(io_err)?;
    metrics.record_open(report.kind.label(), report.took.as_secs_f64());
    if report.kind == OpenKind::Clean {
        tracing::info!("the last run stopped cleanly: the state database is used as it is");
    }
    Ok(())
}

/// Waits until the state applied when the builder was made is durable in the state database
/// (apply goes on meanwhile: see `statestore_storage::store::StateTree::checkpoint`).
pub struct SnapshotBuilder {
    prepared: Option<io::Result<(Checkpoint, SnapshotMeta)>>,
    metrics: Arc<RaftStorageMetrics>,
    started: Instant,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> io::Result<Snapshot> {
        let (checkpoint, meta) = self
            .prepared
            .take()
            .unwrap_or_else(|| Err(io::Error::other("snapshot already built")))?;
        let (done, durable) = tokio::sync::oneshot::channel();
        background::spawn("snapshot-checkpoint", move || {
            let _ = done.send(checkpoint.wait_durable());
        })?;
        durable
            .await
            .map_err(|_| io::Error::other("snapshot checkpoint thread ended"))?
            .map_err(io_err)?;
        // What the snapshot covers is durable in the state database; the log it covers may be
        // purged from now on.
        let took = self.started.elapsed();
        self.metrics
            .snapshot_seconds
            .with_label_values(&["build"])
            .observe(took.as_secs_f64());
        tracing::info!(took_ms = took.as_millis() as u64, last_log_id = ?meta.last_log_id, "snapshot built (the state database holds it)");
        Ok(Snapshot {
            meta,
            snapshot: SnapshotData::InDatabase,
        })
    }
}

/// Runs `work`, which may block on storage, without stalling the other tasks of a Tokio worker
/// thread.
fn blocking<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> io::Result<(Option<LogId>, StoredMembership)> {
        let view = self.state.view();
        let last_applied = Self::consensus_record(&view, LAST_APPLIED)?;
        let membership = Self::consensus_record(&view, MEMBERSHIP)?.unwrap_or_default();
        Ok((last_applied, membership))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> io::Result<()>
    where
        Strm: Stream<Item = io::Result<EntryResponder<TypeConfig>>> + Unpin + OptionalSend,
    {
        let mut chunk = Vec::new();
        let mut proposals = 0usize;
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            self.entries_since_snapshot += 1;
            if let EntryPayload::Normal(batch) = &entry.payload {
                proposals += batch.len();
                self.proposals_since_snapshot += batch.len() as u64;
                self.log_bytes_since_snapshot += batch.encoded().len() as u64;
            }
            chunk.push((entry, responder));
            if proposals >= MAX_PROPOSALS_PER_COMMIT {
                self.applier.apply(std::mem::take(&mut chunk)).await?;
                proposals = 0;
            }
        }
        if !chunk.is_empty() {
            self.applier.apply(chunk).await?;
        }
        Ok(())
    }

    async fn try_create_snapshot_builder(&mut self, force: bool) -> Option<SnapshotBuilder> {
        let state = &self.state;
        let due = self.trigger.due(
            self.proposals_since_snapshot,
            self.entries_since_snapshot,
            self.log_bytes_since_snapshot,
            || state_bytes(state),
        );
        if !force && !due {
            return None;
        }
        Some(self.snapshot_builder())
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        self.snapshot_builder()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotData,
    ) -> io::Result<()> {
        let started = Instant::now();
        // openraft installs a peer's snapshot; a node's own export only in tests of the trait
        // (at startup it installs the current snapshot only if it is newer than the state,
        // which this node's export never is). It is written first, and held until installed.
        let (path, _held) = match snapshot {
            SnapshotData::Received { path } => (path, None),
            SnapshotData::Outgoing(outgoing) => (outgoing.written_path().await?, Some(outgoing)),
            SnapshotData::InDatabase => {
                return Err(io::Error::other(
                    "a build's result holds no data to install",
                ));
            }
        };
        let records = consensus_records(meta);
        let state = self.state.clone();
        let file = tokio::task::spawn_blocking(move || state.install_snapshot(&path, records))
            .await
            .map_err(io_err)?
            .map_err(|e| {
                self.metrics.disk_errors_total.inc();
                io_err(e)
            })?;
        self.proposals_since_snapshot = 0;
        self.entries_since_snapshot = 0;
        self.log_bytes_since_snapshot = 0;
        self.applier.reset();
        self.last_built = self.last_built.max(meta.last_log_id);
        let took = started.elapsed();
        self.metrics
            .snapshot_seconds
            .with_label_values(&["install"])
            .observe(took.as_secs_f64());
        tracing::info!(entries = file.entries, bytes = file.size, took_ms = took.as_millis() as u64, last_log_id = ?meta.last_log_id, "snapshot installed");
        Ok(())
    }

    /// A snapshot of the state as applied so far, for a peer (`None` before anything is
    /// applied): an export begun now (O(1)) and written when the sender first reads it, shared
    /// with every sender while one holds it (see [`crate::snapshot::Outgoing`]). openraft also
    /// asks at startup, where it only compares the meta with the applied state (equal: nothing
    /// to install) and nothing is written.
    async fn get_current_snapshot(&mut self) -> io::Result<Option<Snapshot>> {
        if let Some(outgoing) = self.reusable_outgoing() {
            return Ok(Some(Snapshot {
                meta: outgoing.meta.clone(),
                snapshot: SnapshotData::Outgoing(outgoing),
            }));
        }
        let state = self.state.clone();
        let export = blocking(move || state.begin_export());
        let meta = Self::meta_of(export.view())?;
        if meta.last_log_id.is_none() {
            return Ok(None);
        }
        let header = codec::encode(&meta);
        let outgoing = Outgoing::new(meta.clone(), export, header);
        self.outgoing = Arc::downgrade(&outgoing);
        Ok(Some(Snapshot {
            meta,
            snapshot: SnapshotData::Outgoing(outgoing),
        }))
    }
}

impl StateMachine {
    /// The store this state machine writes (flush, size).
    pub fn store(&self) -> &Store {
        &self.store
    }
}

#[cfg(test)]
mod tests;
