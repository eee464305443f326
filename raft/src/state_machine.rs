//! `RaftStateMachine` over the keyspace semantics and the sled state tree.
//!
//! Apply runs every entry of a batch through [`Keyspace`] inside one overlay transaction and
//! commits it as one atomic sled batch together with the last-applied log id and membership.
//! The key events of the batch are then handed to the [`EventSink`] (post-commit, in log
//! order); only a leader's sink publishes them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageIOError};
use statestore_storage::codec;
use statestore_storage::keyspace::layout;
use statestore_storage::keyspace::{KeyEvent, Keyspace, OrderedRead, Outcome, Overlay, Txn};
use statestore_storage::sled::{StateTree, StateView, Store};
use tokio::io::{AsyncSeekExt, AsyncWriteExt};

use crate::error::io_error;
use crate::metrics::RaftStorageMetrics;
use crate::types::{Entry, LogId, SnapshotMeta, StorageError, StoredMembership, TypeConfig};

const LAST_APPLIED: &[u8] = b"last_applied";
const MEMBERSHIP: &[u8] = b"membership";

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

/// The state machine.
pub struct StateMachine {
    store: Store,
    state: StateTree,
    sink: Arc<dyn EventSink>,
    metrics: Arc<RaftStorageMetrics>,
    receiving: Option<PathBuf>,
}

impl StateMachine {
    /// A state machine on `store`'s state tree, delivering events to `sink`.
    pub fn new(
        store: Store,
        sink: Arc<dyn EventSink>,
        metrics: Arc<RaftStorageMetrics>,
    ) -> Result<Self, StorageError> {
        let state = store
            .state()
            .map_err(|e| StorageIOError::read_state_machine(&io_error(&e)))?;
        Ok(StateMachine {
            store,
            state,
            sink,
            metrics,
            receiving: None,
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
    ) -> Result<Option<T>, StorageError> {
        let bytes = view
            .get(&layout::consensus_key(name))
            .map_err(|e| StorageIOError::read_state_machine(&io_error(&e)))?;
        bytes
            .map(|b| codec::decode("state machine consensus record", &b))
            .transpose()
            .map_err(|e| StorageIOError::read_state_machine(&io_error(&e)).into())
    }
}

/// Builds a snapshot that was already exported while apply was held off.
pub struct SnapshotBuilder {
    built: Option<Result<Snapshot<TypeConfig>, StorageError>>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        self.built.take().unwrap_or_else(|| {
            Err(StorageIOError::write_snapshot(
                None,
                &std::io::Error::other("snapshot already taken"),
            )
            .into())
        })
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

impl StateMachine {
    async fn export_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let started = Instant::now();
        // Make the state at the snapshot point durable before the log it covers may be purged.
        self.store
            .flush()
            .await
            .map_err(|e| StorageIOError::write_snapshot(None, &io_error(&e)))?;
        let view = self.state.view();
        let last_applied: Option<LogId> = Self::consensus_record(&view, LAST_APPLIED)?;
        let membership: StoredMembership =
            Self::consensus_record(&view, MEMBERSHIP)?.unwrap_or_default();
        let snapshot_id = snapshot_id(last_applied.as_ref());
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership: membership,
            snapshot_id: snapshot_id.clone(),
        };
        let header = codec::encode(&meta);
        let state = self.state.clone();
        let file =
            tokio::task::spawn_blocking(move || state.export_snapshot(&snapshot_id, &header))
                .await
                .map_err(|e| {
                    StorageIOError::write_snapshot(None, &std::io::Error::other(e.to_string()))
                })?
                .map_err(|e| StorageIOError::write_snapshot(None, &io_error(&e)))?;
        let data = tokio::fs::File::open(&file.path)
            .await
            .map_err(|e| StorageIOError::read_snapshot(None, &e))?;
        self.metrics
            .snapshot_seconds
            .with_label_values(&["build"])
            .observe(started.elapsed().as_secs_f64());
        tracing::info!(entries = file.entries, bytes = file.size, last_log_id = ?meta.last_log_id, "snapshot built");
        Ok(Snapshot {
            meta,
            snapshot: Box::new(data),
        })
    }
}

/// True if `file` is the file at `path` (same device and inode).
async fn same_file(file: &tokio::fs::File, path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata().await, tokio::fs::metadata(path).await) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let view = self.state.view();
        let last_applied = Self::consensus_record(&view, LAST_APPLIED)?;
        let membership = Self::consensus_record(&view, MEMBERSHIP)?.unwrap_or_default();
        Ok((last_applied, membership))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Vec<Outcome>>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let started = Instant::now();
        let view = self.state.view();
        let mut txn = Overlay::new(&view);
        let mut outcomes = Vec::new();
        let mut events = Vec::new();
        let mut last_applied = None;
        let mut membership = None;
        {
            let mut keyspace = Keyspace::open(&mut txn)
                .map_err(|e| StorageIOError::read_state_machine(&io_error(&e)))?;
            for entry in entries {
                let log_id = entry.log_id;
                last_applied = Some(log_id);
                match entry.payload {
                    EntryPayload::Blank => outcomes.push(Vec::new()),
                    EntryPayload::Normal(batch) => {
                        let mut batch_outcomes = Vec::with_capacity(batch.len());
                        for proposal in batch.iter() {
                            let applied = keyspace
                                .apply(proposal)
                                .map_err(|e| StorageIOError::apply(log_id, &io_error(&e)))?;
                            events.extend(applied.events);
                            batch_outcomes.push(applied.outcome);
                        }
                        outcomes.push(batch_outcomes);
                    }
                    EntryPayload::Membership(m) => {
                        membership = Some(StoredMembership::new(Some(log_id), m));
                        outcomes.push(Vec::new());
                    }
                }
            }
            keyspace.finish();
        }
        if let Some(last) = last_applied {
            txn.put(layout::consensus_key(LAST_APPLIED), codec::encode(&last));
        }
        if let Some(m) = &membership {
            txn.put(layout::consensus_key(MEMBERSHIP), codec::encode(m));
        }
        let writes = txn.into_writes();
        self.state.commit(writes).map_err(|e| {
            self.metrics.disk_errors_total.inc();
            StorageIOError::write_state_machine(&io_error(&e))
        })?;
        self.metrics
            .apply_commit_seconds
            .observe(started.elapsed().as_secs_f64());
        if !events.is_empty() {
            self.sink.deliver(events);
        }
        Ok(outcomes)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        // Exported here, while openraft holds off applies, so the dump is consistent.
        SnapshotBuilder {
            built: Some(self.export_snapshot().await),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<tokio::fs::File>, StorageError> {
        let path = self.state.incoming_snapshot_path();
        let file = tokio::fs::File::create(&path)
            .await
            .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        self.receiving = Some(path);
        Ok(Box::new(file))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        mut snapshot: Box<tokio::fs::File>,
    ) -> Result<(), StorageError> {
        let started = Instant::now();
        let signature = Some(meta.signature());
        snapshot
            .flush()
            .await
            .map_err(|e| StorageIOError::write_snapshot(signature.clone(), &e))?;
        let received = self
            .receiving
            .take()
            .unwrap_or_else(|| self.state.incoming_snapshot_path());
        if !same_file(&snapshot, &received).await {
            // The data arrived in another file than the one we handed out: copy it over.
            snapshot
                .seek(std::io::SeekFrom::Start(0))
                .await
                .map_err(|e| StorageIOError::read_snapshot(signature.clone(), &e))?;
            let mut copy = tokio::fs::File::create(&received)
                .await
                .map_err(|e| StorageIOError::write_snapshot(signature.clone(), &e))?;
            tokio::io::copy(&mut snapshot, &mut copy)
                .await
                .map_err(|e| StorageIOError::write_snapshot(signature.clone(), &e))?;
            copy.flush()
                .await
                .map_err(|e| StorageIOError::write_snapshot(signature.clone(), &e))?;
        }
        drop(snapshot);
        let mut records = vec![(
            layout::consensus_key(MEMBERSHIP),
            codec::encode(&meta.last_membership),
        )];
        if let Some(last) = &meta.last_log_id {
            records.push((layout::consensus_key(LAST_APPLIED), codec::encode(last)));
        }
        let state = self.state.clone();
        let id = meta.snapshot_id.clone();
        let file =
            tokio::task::spawn_blocking(move || state.install_snapshot(&received, &id, records))
                .await
                .map_err(|e| {
                    StorageIOError::write_snapshot(
                        signature.clone(),
                        &std::io::Error::other(e.to_string()),
                    )
                })?
                .map_err(|e| {
                    self.metrics.disk_errors_total.inc();
                    StorageIOError::write_snapshot(signature, &io_error(&e))
                })?;
        self.metrics
            .snapshot_seconds
            .with_label_values(&["install"])
            .observe(started.elapsed().as_secs_f64());
        tracing::info!(entries = file.entries, bytes = file.size, last_log_id = ?meta.last_log_id, "snapshot installed");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let Some(file) = self
            .state
            .current_snapshot()
            .map_err(|e| StorageIOError::read_snapshot(None, &io_error(&e)))?
        else {
            return Ok(None);
        };
        let meta: SnapshotMeta = codec::decode("snapshot header", &file.header)
            .map_err(|e| StorageIOError::read_snapshot(None, &io_error(&e)))?;
        let data = tokio::fs::File::open(&file.path)
            .await
            .map_err(|e| StorageIOError::read_snapshot(None, &e))?;
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(data),
        }))
    }
}
