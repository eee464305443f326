//! `RaftLogStorage` over [`raft_log`], databend's segmented write-ahead log for openraft.
//!
//! Durability: [`RaftLogStorage::append`] buffers the entries in the WAL's open chunk and hands
//! a flush request to the WAL's flush thread; the thread writes every request queued meanwhile
//! with one vectored write and one `fdatasync`, and only then completes their callbacks (group
//! commit). A vote, a truncation and the first commit of a term are made durable before the call
//! returns. The WAL keeps recent payloads in a cache bounded in bytes, so replication and apply
//! read batches without decoding them again.
//!
//! Why not sled: sled 0.34 "flushes" with `sync_file_range` (no device cache flush) and writes
//! nodes larger than a quarter segment as separate blob files it never fsyncs; batched entries
//! of 10–80 KB put most log nodes there. See raft/README.md for the measurements.

use std::fmt::Debug;
use std::io::{self, Read};
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use codeq::{Decode, Encode};
use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{EntryPayload as Payload, OptionalSend};
use raft_log::api::raft_log_writer::RaftLogWriter;
use statestore_storage::codec;
use tokio::sync::oneshot;

use crate::error::Error;
use crate::metrics::RaftStorageMetrics;
use crate::purged_chunks;
use crate::trace;
use crate::types::{Entry, EntryPayload, LogId, TypeConfig, Vote};
use crate::wal_check::{self, record::MAX_ID_FRAME_BYTES, record::MAX_PAYLOAD_FRAME_BYTES};

/// Bytes of entries returned by one `limited_get_log_entries` call (bounds replication reads).
const MAX_READ_BYTES: usize = 16 << 20;

/// How the log is laid out and cached.
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// Directory of the WAL chunks.
    pub dir: std::path::PathBuf,
    /// Payload bytes kept in memory for replication and apply.
    pub cache_bytes: usize,
    /// Size at which a chunk file is closed and a new one started (purge frees whole chunks).
    pub chunk_bytes: usize,
}

/// The WAL's view of statestore's types.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WalTypes;

/// A log id as the WAL stores it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct WalLogId(pub LogId);

/// A vote as the WAL stores it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd)]
pub struct WalVote(pub Vote);

/// An entry payload as the WAL stores it (cloning shares the batch).
#[derive(Debug, Clone)]
pub struct WalPayload(pub EntryPayload);

impl raft_log::Types for WalTypes {
    type LogId = WalLogId;
    type LogPayload = WalPayload;
    type Vote = WalVote;
    type Callback = Flushed;
    type UserData = ();

    fn log_index(log_id: &WalLogId) -> u64 {
        log_id.0.index
    }

    fn payload_size(payload: &WalPayload) -> u64 {
        match &payload.0 {
            Payload::Normal(batch) => batch.encoded().len() as u64,
            Payload::Blank => 8,
            Payload::Membership(_) => 256,
        }
    }
}

/// Writes `value` as a u32 length and its versioned encoding, refusing a frame longer than
/// `max` (the log check treats a longer length on disk as damage).
fn encode_framed<T: serde::Serialize, W: io::Write>(
    value: &T,
    max: u32,
    mut w: W,
) -> io::Result<usize> {
    let bytes = codec::encode(value);
    let len = u32::try_from(bytes.len())
        .ok()
        .filter(|len| *len <= max)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                Error::FrameTooLong {
                    what: "log record",
                    len: bytes.len(),
                    max,
                },
            )
        })?;
    w.write_all(&len.to_be_bytes())?;
    w.write_all(&bytes)?;
    Ok(4 + bytes.len())
}

/// Reads a frame written by [`encode_framed`]. A length over `max` is damage; the buffer grows
/// with the bytes actually read, so a damaged length cannot make it allocate more than the file
/// holds.
fn decode_framed<T: serde::de::DeserializeOwned, R: io::Read>(
    what: &'static str,
    max: u32,
    mut r: R,
) -> io::Result<T> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len);
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            Error::FrameLengthOver { what, len, max },
        ));
    }
    let mut bytes = Vec::with_capacity((len as usize).min(1 << 20));
    r.take(u64::from(len)).read_to_end(&mut bytes)?;
    if bytes.len() != len as usize {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            Error::FrameCutShort { what },
        ));
    }
    codec::decode(what, &bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

impl Encode for WalLogId {
    fn encode<W: io::Write>(&self, w: W) -> io::Result<usize> {
        encode_framed(&self.0, MAX_ID_FRAME_BYTES, w)
    }
}

impl Decode for WalLogId {
    fn decode<R: io::Read>(r: R) -> io::Result<Self> {
        decode_framed("log id", MAX_ID_FRAME_BYTES, r).map(WalLogId)
    }
}

impl Encode for WalVote {
    fn encode<W: io::Write>(&self, w: W) -> io::Result<usize> {
        encode_framed(&self.0, MAX_ID_FRAME_BYTES, w)
    }
}

impl Decode for WalVote {
    fn decode<R: io::Read>(r: R) -> io::Result<Self> {
        decode_framed("vote", MAX_ID_FRAME_BYTES, r).map(WalVote)
    }
}

impl Encode for WalPayload {
    fn encode<W: io::Write>(&self, w: W) -> io::Result<usize> {
        encode_framed(&self.0, MAX_PAYLOAD_FRAME_BYTES, w)
    }
}

impl Decode for WalPayload {
    fn decode<R: io::Read>(r: R) -> io::Result<Self> {
        decode_framed("log entry payload", MAX_PAYLOAD_FRAME_BYTES, r).map(WalPayload)
    }
}

/// What the WAL's flush thread completes once an fdatasync covered a request.
pub enum Flushed {
    /// An append openraft waits for.
    Append {
        /// openraft's completion.
        callback: IOFlushed<TypeConfig>,
        /// When the entries were handed over.
        started: Instant,
        /// Where the time to durability is recorded.
        metrics: Arc<RaftStorageMetrics>,
        /// The `raft.fsync` span of traced entries (ends when this completes).
        span: Option<tracing::Span>,
    },
    /// A caller awaiting durability itself (votes, truncations).
    Wait(oneshot::Sender<io::Result<()>>),
}

impl raft_log::Callback for Flushed {
    fn send(self, result: io::Result<()>) {
        match self {
            Flushed::Append {
                callback,
                started,
                metrics,
                span,
            } => {
                let took = started.elapsed();
                metrics.log_fsync_seconds.observe(took.as_secs_f64());
                metrics.log_slow_flushes.observe(took);
                if let Err(err) = &result {
                    metrics.disk_errors_total.inc();
                    tracing::error!(error = %err, "raft log fdatasync failed; entries not acknowledged");
                }
                // The span ends at durability, before Raft learns of it.
                drop(span);
                callback.io_completed(result);
            }
            Flushed::Wait(tx) => {
                let _ = tx.send(result);
            }
        }
    }
}

type Wal = raft_log::RaftLog<WalTypes>;

/// The Raft log (cheap to clone: clones are the log readers replication tasks use).
#[derive(Clone)]
pub struct LogStore {
    wal: Arc<Mutex<Wal>>,
    metrics: Arc<RaftStorageMetrics>,
}

impl LogStore {
    /// Opens (or creates) the log in `config.dir`. Blocking: checks every chunk
    /// ([`wal_check`]), then replays the WAL. Damage that is not a torn last write is
    /// [`Error::WalCorrupt`].
    pub fn open(config: &LogConfig, metrics: Arc<RaftStorageMetrics>) -> crate::Result<LogStore> {
        statestore_storage::dirs::create_durable(&config.dir)?;
        let dir = config
            .dir
            .to_str()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "log dir is not UTF-8"))?;
        wal_check::check_dir(&config.dir)?;
        let mut wal_config = raft_log::Config::new(dir);
        // What the check left for raft-log to trim is a torn last write (or an interrupted
        // chunk rotation); without trimming, every crash during a write would stop the node from
        // starting. Set explicitly: the check above is what makes trimming safe.
        wal_config.wal.truncate_incomplete_record = Some(true);
        wal_config.log_cache_capacity = Some(config.cache_bytes);
        wal_config.log_cache_max_items = Some(1 << 20);
        wal_config.wal.chunk_max_size = Some(config.chunk_bytes);
        wal_config.wal.read_buffer_size = Some(4 << 20);
        // Group commit without waiting: while one fdatasync runs, the next batch gathers.
        wal_config.wal.flush_batch_wait = Some(Duration::ZERO);
        let wal = Wal::open(Arc::new(wal_config)).map_err(Error::Io)?;
        Ok(LogStore {
            wal: Arc::new(Mutex::new(wal)),
            metrics,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Wal> {
        self.wal.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a durable flush of everything written so far and waits for it.
    async fn sync(&self) -> io::Result<()> {
        let (tx, rx) = oneshot::channel();
        self.lock().flush(true, Some(Flushed::Wait(tx)))?;
        rx.await
            .unwrap_or_else(|_| Err(io::Error::other("log flush thread stopped")))
    }

    /// Bytes of WAL chunk files on disk.
    pub fn size_on_disk(&self) -> u64 {
        self.lock().on_disk_size()
    }

    fn read(&self, start: u64, end: u64, max_bytes: usize) -> io::Result<Vec<Entry>> {
        let wal = self.lock();
        let mut entries = Vec::new();
        let mut bytes = 0usize;
        for item in wal.read(start, end) {
            let (log_id, payload) = item?;
            bytes += <WalTypes as raft_log::Types>::payload_size(&payload) as usize;
            entries.push(Entry {
                log_id: log_id.0,
                payload: payload.0,
            });
            if bytes >= max_bytes {
                break;
            }
        }
        Ok(entries)
    }
}

fn first_index(bound: Bound<&u64>) -> u64 {
    match bound {
        Bound::Included(i) => *i,
        Bound::Excluded(i) => i.saturating_add(1),
        Bound::Unbounded => 0,
    }
}

fn end_index(bound: Bound<&u64>) -> u64 {
    match bound {
        Bound::Included(i) => i.saturating_add(1),
        Bound::Excluded(i) => *i,
        Bound::Unbounded => u64::MAX,
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> io::Result<Vec<Entry>> {
        self.read(
            first_index(range.start_bound()),
            end_index(range.end_bound()),
            usize::MAX,
        )
    }

    async fn read_vote(&mut self) -> io::Result<Option<Vote>> {
        Ok(self.lock().log_state().vote().map(|v| v.0))
    }

    async fn limited_get_log_entries(&mut self, start: u64, end: u64) -> io::Result<Vec<Entry>> {
        self.read(start, end, MAX_READ_BYTES)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> io::Result<LogState<TypeConfig>> {
        let wal = self.lock();
        let state = wal.log_state();
        let last_purged_log_id = state.purged().map(|l| l.0);
        Ok(LogState {
            last_purged_log_id,
            last_log_id: state.last().map(|l| l.0).or(last_purged_log_id),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> io::Result<()> {
        self.lock().save_vote(WalVote(*vote))?;
        self.sync().await
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> io::Result<()> {
        // Not a durability point on its own: it rides on the next append's fdatasync, and a
        // lost commit index is learnt again from the leader.
        if let Some(committed) = committed {
            self.lock().commit(WalLogId(committed))?;
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> io::Result<Option<LogId>> {
        Ok(self.lock().log_state().committed().map(|l| l.0))
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> io::Result<()>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let started = Instant::now();
        let entries: Vec<Entry> = entries.into_iter().collect();
        let traces: Vec<_> = entries
            .iter()
            .filter_map(|entry| match &entry.payload {
                Payload::Normal(batch) => Some(batch.traces().contexts()),
                _ => None,
            })
            .flatten()
            .collect();
        let append_span = (!traces.is_empty()).then(|| {
            let span =
                tracing::debug_span!(target: trace::TARGET, "raft.append", entries = entries.len());
            trace::attach(&span, &traces);
            span
        });
        let mut wal = self.lock();
        let mut bytes = 0u64;
        {
            let _entered = append_span.as_ref().map(|span| span.enter());
            wal.append(entries.into_iter().map(|entry| {
                let payload = WalPayload(entry.payload);
                bytes += <WalTypes as raft_log::Types>::payload_size(&payload);
                (WalLogId(entry.log_id), payload)
            }))?;
        }
        drop(append_span);
        self.metrics
            .log_append_seconds
            .observe(started.elapsed().as_secs_f64());
        // From hand-over to the fdatasync that covers these entries (ends in `Flushed::send`).
        let span = (!traces.is_empty()).then(|| {
            let span = tracing::debug_span!(target: trace::TARGET, "raft.fsync", bytes);
            trace::attach(&span, &traces);
            span
        });
        wal.flush(
            true,
            Some(Flushed::Append {
                callback,
                started,
                metrics: self.metrics.clone(),
                span,
            }),
        )?;
        self.metrics.log_written_bytes_total.inc_by(bytes);
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> io::Result<()> {
        let from = last_log_id.map_or(0, |l| l.index + 1);
        {
            let mut wal = self.lock();
            let last = wal.log_state().last().map(|l| l.0.index);
            if last.is_none_or(|last| from > last) {
                return Ok(()); // nothing after `last_log_id`
            }
            wal.truncate(from)?;
        }
        self.sync().await
    }

    async fn purge(&mut self, log_id: LogId) -> io::Result<()> {
        let (held, removed) = {
            let mut wal = self.lock();
            let closed_before = purged_chunks::closed_chunk_paths(&wal);
            wal.purge(WalLogId(log_id))?;
            let removed = purged_chunks::removed_by_purge(
                closed_before,
                &purged_chunks::closed_chunk_paths(&wal),
            );
            // Held open, their unlink on the flush thread frees nothing (`purged_chunks`).
            let held = purged_chunks::hold(&removed);
            // The WAL removes chunk files only after the purge record is durable.
            wal.flush(true, None)?;
            if held.is_empty() {
                return Ok(());
            }
            // The flush thread works in order: this completes once the removal queued by the
            // flush above has run.
            let (tx, removed) = oneshot::channel();
            wal.flush(true, Some(Flushed::Wait(tx)))?;
            (held, removed)
        };
        let freed = self.metrics.log_chunks_freed_in_background_total.clone();
        tokio::spawn(async move {
            // Even if the flush failed, closing or freeing the handles is what is left to do.
            let _removed = removed.await;
            freed.inc_by(purged_chunks::release(held) as u64);
        });
        Ok(())
    }
}
