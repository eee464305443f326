//! `RaftLogStorage` over the sled log tree.
//!
//! Durability: entries are written by [`RaftLogStorage::append`] and reported persisted only
//! after an fsync that covers them. A single flusher task does the fsyncs and lets every append
//! that arrived meanwhile ride on the same one (group commit), completing callbacks in order.
//! Votes are fsynced before `save_vote` returns.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;
use std::time::Instant;

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{OptionalSend, RaftLogId, StorageIOError};
use statestore_storage::codec;
use statestore_storage::sled::LogTree;
use tokio::sync::mpsc;

use crate::error::io_error;
use crate::log_cache::LogCache;
use crate::metrics::RaftStorageMetrics;
use crate::types::{Entry, LogId, StorageError, TypeConfig, Vote};

const VOTE: &str = "vote";
const COMMITTED: &str = "committed";
const LAST_PURGED: &str = "last_purged";
/// Entries returned by one `limited_get_log_entries` call (bounds replication batches).
const MAX_READ_ENTRIES: usize = 4096;

/// The Raft log (cheap to clone: clones are the log readers replication tasks use).
#[derive(Clone)]
pub struct LogStore {
    tree: LogTree,
    cache: Arc<LogCache>,
    flusher: mpsc::UnboundedSender<LogFlushed<TypeConfig>>,
    metrics: Arc<RaftStorageMetrics>,
}

impl LogStore {
    /// Wraps `tree` and starts the flusher task (needs a Tokio runtime).
    pub fn new(tree: LogTree, metrics: Arc<RaftStorageMetrics>) -> Self {
        let (flusher, pending) = mpsc::unbounded_channel();
        tokio::spawn(flush_loop(tree.clone(), pending, metrics.clone()));
        LogStore {
            tree,
            cache: Arc::default(),
            flusher,
            metrics,
        }
    }

    fn record<T: serde::de::DeserializeOwned>(
        &self,
        name: &str,
    ) -> Result<Option<T>, StorageError> {
        let Some(bytes) = self
            .tree
            .record(name)
            .map_err(|e| StorageIOError::read(&io_error(&e)))?
        else {
            return Ok(None);
        };
        codec::decode(name_of(name), &bytes)
            .map(Some)
            .map_err(|e| StorageIOError::read(&io_error(&e)).into())
    }
}

fn name_of(record: &str) -> &'static str {
    match record {
        VOTE => "vote",
        COMMITTED => "committed log id",
        LAST_PURGED => "last purged log id",
        _ => "log store record",
    }
}

/// Fsyncs on behalf of every append queued since the previous fsync, then completes their
/// callbacks in order. An fsync failure is reported to every waiting append (openraft then
/// stops the node: an unpersisted log must never be acknowledged).
async fn flush_loop(
    tree: LogTree,
    mut pending: mpsc::UnboundedReceiver<LogFlushed<TypeConfig>>,
    metrics: Arc<RaftStorageMetrics>,
) {
    let mut batch = Vec::new();
    while let Some(first) = pending.recv().await {
        batch.push(first);
        while let Ok(more) = pending.try_recv() {
            batch.push(more);
        }
        let started = Instant::now();
        let result = tree.flush().await;
        metrics
            .log_fsync_seconds
            .observe(started.elapsed().as_secs_f64());
        match result {
            Ok(()) => batch
                .drain(..)
                .for_each(|callback| callback.log_io_completed(Ok(()))),
            Err(err) => {
                tracing::error!(error = %err, "raft log fsync failed; refusing to acknowledge entries");
                metrics.disk_errors_total.inc();
                batch
                    .drain(..)
                    .for_each(|callback| callback.log_io_completed(Err(io_error(&err))));
            }
        }
    }
}

fn first_index(bound: Bound<u64>) -> u64 {
    match bound {
        Bound::Included(i) => i,
        Bound::Excluded(i) => i.saturating_add(1),
        Bound::Unbounded => 0,
    }
}

fn end_index(bound: Bound<u64>) -> u64 {
    match bound {
        Bound::Included(i) => i.saturating_add(1),
        Bound::Excluded(i) => i,
        Bound::Unbounded => u64::MAX,
    }
}

fn decode_entry(bytes: &[u8]) -> Result<Entry, StorageError> {
    codec::decode("raft log entry", bytes)
        .map_err(|e| StorageIOError::read_logs(&io_error(&e)).into())
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let start = range.start_bound().cloned();
        let end = range.end_bound().cloned();
        if let Some(cached) = self
            .cache
            .range(first_index(start), end_index(end), usize::MAX)
        {
            return Ok(cached);
        }
        let raw = self
            .tree
            .range(start, end, usize::MAX)
            .map_err(|e| StorageIOError::read_logs(&io_error(&e)))?;
        raw.iter().map(|(_, bytes)| decode_entry(bytes)).collect()
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, StorageError> {
        if let Some(cached) = self.cache.range(start, end, MAX_READ_ENTRIES) {
            return Ok(cached);
        }
        let raw = self
            .tree
            .range(
                Bound::Included(start),
                Bound::Excluded(end),
                MAX_READ_ENTRIES,
            )
            .map_err(|e| StorageIOError::read_logs(&io_error(&e)))?;
        raw.iter().map(|(_, bytes)| decode_entry(bytes)).collect()
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged_log_id: Option<LogId> = self.record(LAST_PURGED)?;
        let last = self
            .tree
            .last()
            .map_err(|e| StorageIOError::read_logs(&io_error(&e)))?;
        let last_log_id = match last {
            Some((_, bytes)) => Some(*decode_entry(&bytes)?.get_log_id()),
            None => last_purged_log_id,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        self.tree
            .set_record(VOTE, codec::encode(vote))
            .map_err(|e| StorageIOError::write_vote(&io_error(&e)))?;
        self.tree
            .flush()
            .await
            .map_err(|e| StorageIOError::write_vote(&io_error(&e)))?;
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        self.record(VOTE)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // Not a durability point: losing it only means re-learning the commit index.
        self.tree
            .set_record(COMMITTED, codec::encode(&committed))
            .map_err(|e| StorageIOError::write(&io_error(&e)))?;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.record::<Option<LogId>>(COMMITTED)?.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let started = Instant::now();
        let entries: Vec<Entry> = entries.into_iter().collect();
        let encoded = entries
            .iter()
            .map(|entry| (entry.get_log_id().index, codec::encode(entry)));
        let bytes = self
            .tree
            .append(encoded)
            .map_err(|e| StorageIOError::write_logs(&io_error(&e)))?;
        self.cache.append(&entries);
        self.metrics
            .log_append_seconds
            .observe(started.elapsed().as_secs_f64());
        self.metrics.log_written_bytes_total.inc_by(bytes as u64);
        if let Err(returned) = self.flusher.send(callback) {
            // The flusher only stops with the runtime; report instead of hanging the caller.
            returned
                .0
                .log_io_completed(Err(std::io::Error::other("log flusher stopped")));
        }
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.cache.truncate_from(log_id.index);
        self.tree
            .truncate_from(log_id.index)
            .map_err(|e| StorageIOError::write_logs(&io_error(&e)))?;
        self.tree
            .flush()
            .await
            .map_err(|e| StorageIOError::write_logs(&io_error(&e)))?;
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // Record the purge point first: a crash in between leaves extra entries, never a hole.
        self.tree
            .set_record(LAST_PURGED, codec::encode(&log_id))
            .map_err(|e| StorageIOError::write_logs(&io_error(&e)))?;
        self.tree
            .purge_upto(log_id.index)
            .map_err(|e| StorageIOError::write_logs(&io_error(&e)))?;
        self.cache.purge_upto(log_id.index);
        Ok(())
    }
}
