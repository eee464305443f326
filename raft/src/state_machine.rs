//! `RaftStateMachine` over the keyspace semantics and the sled state tree.
//!
//! Apply runs the entries openraft hands over through [`Keyspace`] inside one overlay
//! transaction and commits it as one atomic sled batch together with the last-applied log id and
//! membership (at most [`MAX_PROPOSALS_PER_COMMIT`] proposals per batch, so a long catch-up never
//! builds one huge transaction). Only then are the waiting clients answered and the key events
//! handed to the [`EventSink`] (post-commit, in log order); only a leader's sink publishes them.
//!
//! Snapshots are decided here: openraft asks every `snapshot_check_entries` entries, and a
//! snapshot is built only once enough proposals or entries were applied since the last one
//! (an entry can hold one proposal or a thousand).

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use futures::{Stream, StreamExt};
use openraft::storage::{ApplyResponder, EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use statestore_storage::codec;
use statestore_storage::keyspace::layout;
use statestore_storage::keyspace::{Carry, KeyEvent, Keyspace, OrderedRead, Overlay, Txn};
use statestore_storage::sled::{StateTree, StateView, Store};

use crate::metrics::RaftStorageMetrics;
use crate::snapshot::SnapshotData;
use crate::types::{LogId, Snapshot, SnapshotMeta, StoredMembership, TypeConfig};

const LAST_APPLIED: &[u8] = b"last_applied";
const MEMBERSHIP: &[u8] = b"membership";
/// Proposals applied in one sled batch at most.
const MAX_PROPOSALS_PER_COMMIT: usize = 16_384;

/// Receives the key events of every applied batch, in commit order.
pub trait EventSink: Send + Sync + 'static {
    /// Called after the batch is committed to the state tree.
    fn deliver(&self, events: Vec<KeyEvent>);
}

/// A sink that drops everything (followers in tests, tools).
pub struct DiscardEvents;

impl EventSink for DiscardEvents {
    fn deliver(&self, _events: Vec<KeyEvent>) {}
}

/// When a snapshot is worth building.
#[derive(Debug, Clone, Copy)]
pub struct SnapshotTrigger {
    /// Proposals applied since the last snapshot.
    pub after_proposals: u64,
    /// Log entries applied since the last snapshot.
    pub after_entries: u64,
}

impl Default for SnapshotTrigger {
    fn default() -> Self {
        SnapshotTrigger {
            after_proposals: 100_000,
            after_entries: 10_000,
        }
    }
}

/// The state machine.
pub struct StateMachine {
    store: Store,
    state: StateTree,
    sink: Arc<dyn EventSink>,
    metrics: Arc<RaftStorageMetrics>,
    trigger: SnapshotTrigger,
    proposals_since_snapshot: u64,
    entries_since_snapshot: u64,
    /// What the last transaction learnt about the keyspace (reset by a snapshot install).
    carry: Carry,
}

fn io_err(err: impl std::fmt::Display) -> io::Error {
    io::Error::other(err.to_string())
}

impl StateMachine {
    /// A state machine on `store`'s state tree, delivering events to `sink`.
    pub fn new(
        store: Store,
        sink: Arc<dyn EventSink>,
        metrics: Arc<RaftStorageMetrics>,
        trigger: SnapshotTrigger,
    ) -> io::Result<Self> {
        let state = store.state().map_err(io_err)?;
        Ok(StateMachine {
            store,
            state,
            sink,
            metrics,
            trigger,
            proposals_since_snapshot: 0,
            entries_since_snapshot: 0,
            carry: Carry::default(),
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
        view: &StateView,
        name: &[u8],
    ) -> io::Result<Option<T>> {
        let bytes = view.get(&layout::consensus_key(name)).map_err(io_err)?;
        bytes
            .map(|b| codec::decode("state machine consensus record", &b))
            .transpose()
            .map_err(io_err)
    }

    /// Applies `entries` in one transaction, commits it, then answers and notifies.
    fn apply_chunk(
        &mut self,
        entries: Vec<(crate::types::Entry, Option<ApplyResponder<TypeConfig>>)>,
    ) -> io::Result<()> {
        let started = Instant::now();
        let view = self.state.view();
        let mut txn = Overlay::new(&view);
        let mut answers = Vec::with_capacity(entries.len());
        let mut events = Vec::new();
        let mut last_applied = None;
        let mut membership = None;
        let carry;
        {
            let mut keyspace = Keyspace::open_carrying(&mut txn, &self.carry).map_err(io_err)?;
            for (entry, responder) in entries {
                let log_id = entry.log_id;
                last_applied = Some(log_id);
                self.entries_since_snapshot += 1;
                let outcomes = match entry.payload {
                    EntryPayload::Blank => Vec::new(),
                    EntryPayload::Normal(batch) => {
                        self.proposals_since_snapshot += batch.len() as u64;
                        let mut outcomes = Vec::with_capacity(batch.len());
                        for proposal in batch.proposals() {
                            let applied = keyspace
                                .apply(proposal)
                                .map_err(|e| io_err(format!("applying entry {log_id}: {e}")))?;
                            events.extend(applied.events);
                            outcomes.push(applied.outcome);
                        }
                        outcomes
                    }
                    EntryPayload::Membership(m) => {
                        membership = Some(StoredMembership::new(Some(log_id), m));
                        Vec::new()
                    }
                };
                if let Some(responder) = responder {
                    answers.push((responder, outcomes));
                }
            }
            carry = keyspace.carry();
            keyspace.finish();
        }
        if let Some(last) = &last_applied {
            txn.put(layout::consensus_key(LAST_APPLIED), codec::encode(last));
        }
        if let Some(m) = &membership {
            txn.put(layout::consensus_key(MEMBERSHIP), codec::encode(m));
        }
        let writes = txn.into_writes();
        self.state.commit(writes).map_err(|e| {
            self.metrics.disk_errors_total.inc();
            io_err(e)
        })?;
        self.carry = carry;
        self.metrics
            .apply_commit_seconds
            .observe(started.elapsed().as_secs_f64());
        for (responder, outcomes) in answers {
            responder.send(outcomes);
        }
        if !events.is_empty() {
            self.sink.deliver(events);
        }
        Ok(())
    }

    async fn export_snapshot(&mut self) -> io::Result<Snapshot> {
        let started = Instant::now();
        let view = self.state.view();
        let last_applied: Option<LogId> = Self::consensus_record(&view, LAST_APPLIED)?;
        let membership: StoredMembership =
            Self::consensus_record(&view, MEMBERSHIP)?.unwrap_or_default();
        let id = snapshot_id(last_applied.as_ref());
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership: membership,
        };
        let header = codec::encode(&meta);
        let state = self.state.clone();
        let file = tokio::task::spawn_blocking(move || state.export_snapshot(&id, &header))
            .await
            .map_err(io_err)?
            .map_err(io_err)?;
        // The snapshot file is durable (fsynced, renamed, directory fsynced); the log it covers
        // may be purged from now on.
        self.proposals_since_snapshot = 0;
        self.entries_since_snapshot = 0;
        self.metrics
            .snapshot_seconds
            .with_label_values(&["build"])
            .observe(started.elapsed().as_secs_f64());
        tracing::info!(entries = file.entries, bytes = file.size, last_log_id = ?meta.last_log_id, "snapshot built");
        Ok(Snapshot {
            meta,
            snapshot: SnapshotData::open(file.path).await?,
        })
    }

    /// Where a snapshot received from a peer is written before it is installed.
    pub fn incoming_snapshot_path(&self) -> PathBuf {
        self.state.incoming_snapshot_path()
    }
}

fn snapshot_id(log_id: Option<&LogId>) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    match log_id {
        Some(id) => format!("{}-{}-{}", id.leader_id.term, id.index, nanos),
        None => format!("empty-{nanos}"),
    }
}

/// Hands over a snapshot that was already exported while apply was held off.
pub struct SnapshotBuilder {
    built: Option<io::Result<Snapshot>>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> io::Result<Snapshot> {
        self.built
            .take()
            .unwrap_or_else(|| Err(io::Error::other("snapshot already taken")))
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
            if let EntryPayload::Normal(batch) = &entry.payload {
                proposals += batch.len();
            }
            chunk.push((entry, responder));
            if proposals >= MAX_PROPOSALS_PER_COMMIT {
                self.apply_chunk(std::mem::take(&mut chunk))?;
                proposals = 0;
            }
        }
        if !chunk.is_empty() {
            self.apply_chunk(chunk)?;
        }
        Ok(())
    }

    async fn try_create_snapshot_builder(&mut self, force: bool) -> Option<SnapshotBuilder> {
        let due = self.proposals_since_snapshot >= self.trigger.after_proposals
            || self.entries_since_snapshot >= self.trigger.after_entries;
        if !force && !due {
            return None;
        }
        Some(self.get_snapshot_builder().await)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        // Exported here, while the state machine worker holds off applies, so the dump is
        // consistent.
        SnapshotBuilder {
            built: Some(self.export_snapshot().await),
        }
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotData,
    ) -> io::Result<()> {
        let started = Instant::now();
        let SnapshotData { path, file } = snapshot;
        drop(file);
        let mut records = vec![(
            layout::consensus_key(MEMBERSHIP),
            codec::encode(&meta.last_membership),
        )];
        if let Some(last) = &meta.last_log_id {
            records.push((layout::consensus_key(LAST_APPLIED), codec::encode(last)));
        }
        let state = self.state.clone();
        let id = snapshot_id(meta.last_log_id.as_ref());
        let file = tokio::task::spawn_blocking(move || state.install_snapshot(&path, &id, records))
            .await
            .map_err(io_err)?
            .map_err(|e| {
                self.metrics.disk_errors_total.inc();
                io_err(e)
            })?;
        self.proposals_since_snapshot = 0;
        self.entries_since_snapshot = 0;
        self.carry = Carry::default();
        self.metrics
            .snapshot_seconds
            .with_label_values(&["install"])
            .observe(started.elapsed().as_secs_f64());
        tracing::info!(entries = file.entries, bytes = file.size, last_log_id = ?meta.last_log_id, "snapshot installed");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> io::Result<Option<Snapshot>> {
        let Some(file) = self.state.current_snapshot().map_err(io_err)? else {
            return Ok(None);
        };
        let meta: SnapshotMeta = codec::decode("snapshot header", &file.header).map_err(io_err)?;
        Ok(Some(Snapshot {
            meta,
            snapshot: SnapshotData::open(file.path).await?,
        }))
    }
}

impl StateMachine {
    /// The store this state machine writes (flush, size).
    pub fn store(&self) -> &Store {
        &self.store
    }
}
