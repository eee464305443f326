//! The state machine tree: every table of the state in one fjall keyspace (see
//! [`crate::layout`]) behind a write-back [`Memtable`], plus snapshot export and install.
//!
//! Installing a snapshot loads it into a fresh keyspace and then switches the "active tree"
//! record, so a crash mid-install leaves the old state intact.

use std::iter::Peekable;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use crate::devicebound::DeviceIndex;
use crate::engine::{KvPair, OrderedRead, RangeIter, TxnWrites};
use crate::error::{Result, StorageError};
use crate::layout::Table;
use crate::store::memtable::{Lookup, Memtable, MemtableConfig, Write, Writes, merge_range};
use crate::store::memtable::{ResidentState, ToWrite};
use crate::store::preimage::{Exported, Preimages};
use crate::store::resident::{self, ResidentTables};
use crate::store::resident_journal::{self, PendingEntry, ResidentJournal};
use crate::store::resident_log::ResidentLog;
use crate::store::snapshot::{self, SnapshotFile, SnapshotWriter};
use crate::store::table_release::TableRelease;
use crate::store::tree::{SortedRows, Tree};

const ACTIVE_TREE_RECORD: &str = "active_state_tree";

/// Read access to the state (cheap to clone, no locks held between reads): the memtable's
/// writes over the database's keyspace, and the device queues' index.
#[derive(Clone)]
pub struct StateView {
    memtable: Arc<Memtable>,
    /// The active keyspace, looked up at every read: a view may outlive a snapshot install
    /// (the notifier keeps one for its whole life), and the keyspace it replaced is deleted.
    active: Arc<RwLock<(String, Tree)>>,
    devices: Arc<Mutex<DeviceIndex>>,
}

impl OrderedRead for StateView {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.memtable.get(key) {
            Lookup::Found(value) => Ok(value),
            Lookup::Absent => self.tree().get(key),
        }
    }

    fn range<'a>(&'a self, start: &[u8], end: &[u8]) -> RangeIter<'a> {
        if start >= end {
            return Box::new(std::iter::empty());
        }
        // Below, inside and above the resident tables, in key order.
        let (resident_start, resident_end) = resident::bounds();
        let below = self.layered(start, end.min(resident_start.as_slice()));
        let inside = ResidentIter {
            memtable: &self.memtable,
            next: start.max(resident_start.as_slice()).to_vec(),
            end: end.min(resident_end.as_slice()).to_vec(),
            chunk: Vec::new().into_iter(),
        };
        let above = self.layered(start.max(resident_end.as_slice()), end);
        Box::new(below.chain(inside).chain(above))
    }
}

/// Resident rows read lazily, [`RESIDENT_CHUNK`] at a time (callers often take only a few).
struct ResidentIter<'a> {
    memtable: &'a Memtable,
    next: Vec<u8>,
    end: Vec<u8>,
    chunk: std::vec::IntoIter<(Vec<u8>, Vec<u8>)>,
}

/// Rows copied out of the resident tables per lock.
const RESIDENT_CHUNK: usize = 64;

impl Iterator for ResidentIter<'_> {
    type Item = Result<KvPair>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(row) = self.chunk.next() {
            return Some(Ok(row));
        }
        if self.next >= self.end {
            return None;
        }
        let rows = self
            .memtable
            .resident_range(&self.next, &self.end, RESIDENT_CHUNK);
        match rows.last() {
            // Continue right after the last row returned.
            Some((last, _)) if rows.len() == RESIDENT_CHUNK => {
                self.next.clone_from(last);
                self.next.push(0);
            }
            _ => self.next.clone_from(&self.end),
        }
        self.chunk = rows.into_iter();
        self.chunk.next().map(Ok)
    }
}

impl StateView {
    /// The keyspace the state is in now.
    fn tree(&self) -> Tree {
        match self.active.read() {
            Ok(guard) => guard.1.clone(),
            Err(poisoned) => poisoned.into_inner().1.clone(),
        }
    }

    /// The device queues' index as of the last committed transaction: apply holds it for a
    /// whole transaction, from its first proposal to its commit (CPU work only: it waits for
    /// memtable room before it takes the lock), and a snapshot install holds it until the index
    /// of the new state is built. Hold the guard briefly: apply waits for it.
    pub fn device_index(&self) -> MutexGuard<'_, DeviceIndex> {
        lock_index(&self.devices)
    }

    /// The database's entries in `[start, end)` under the memtable's writes.
    fn layered<'a>(&'a self, start: &[u8], end: &[u8]) -> RangeIter<'a> {
        if start >= end {
            return Box::new(std::iter::empty());
        }
        Layered::over(&self.tree(), start, end, self.memtable.range(start, end))
    }
}

/// Merges the database's entries with the memtable's writes; the memtable wins on equal keys
/// and its removals hide the database's entries.
struct Layered<'a> {
    base: Peekable<RangeIter<'a>>,
    memory: Peekable<std::vec::IntoIter<Write>>,
}

impl<'a> Layered<'a> {
    /// `tree`'s entries in `[start, end)` (`start < end`) under `memory`, the in-memory writes
    /// of the same range in ascending order.
    fn over(tree: &Tree, start: &[u8], end: &[u8], memory: Vec<Write>) -> RangeIter<'a> {
        Layered::on(Box::new(tree.range(start, end)), memory)
    }

    /// `base`'s entries under `memory`, both ascending over the same range.
    fn on(base: RangeIter<'a>, memory: Vec<Write>) -> RangeIter<'a> {
        Box::new(Layered {
            base: base.peekable(),
            memory: memory.into_iter().peekable(),
        })
    }
}

impl Iterator for Layered<'_> {
    type Item = Result<KvPair>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let from_memory = match (self.base.peek(), self.memory.peek()) {
                (None, None) => return None,
                (Some(Err(_)), _) => return self.base.next(),
                (None, Some(_)) => true,
                (Some(_), None) => false,
                (Some(Ok((base_key, _))), Some((memory_key, _))) => {
                    if base_key == memory_key {
                        self.base.next(); // shadowed by the newer write
                        true
                    } else {
                        memory_key < base_key
                    }
                }
            };
            if !from_memory {
                return self.base.next();
            }
            if let Some((key, Some(value))) = self.memory.next() {
                return Some(Ok((key, value)));
            }
        }
    }
}

/// The state machine's storage (cheap to clone; clones share the active tree).
#[derive(Clone)]
pub struct StateTree {
    inner: Arc<Inner>,
}

struct Inner {
    db: fjall::Database,
    /// The data directory's lock (see `db`): held while this tree uses the database.
    _lock: Arc<std::fs::File>,
    records: Tree,
    active: Arc<RwLock<(String, Tree)>>,
    memtable: Arc<Memtable>,
    snapshot_dir: PathBuf,
    /// The device queues' index of the committed state (see [`StateTree::device_index`]).
    devices: Arc<Mutex<DeviceIndex>>,
    /// The reply memory's log (the flush thread appends, syncs prune).
    log: Arc<Mutex<ResidentLog>>,
    /// Bytes of the log's files.
    log_bytes: Arc<std::sync::atomic::AtomicU64>,
    /// The state-flush thread, joined when the tree is dropped: a store dropped and opened
    /// again at once must find the database released.
    flusher: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The thread letting fjall delete the tables compactions replaced; stopped before a clean
    /// stop's last sync ([`StateTree::stop_table_release`]) and with the tree, for the same
    /// reason.
    table_release: Mutex<Option<TableRelease>>,
    /// Set by [`StateTree::abandon_exports`]: a snapshot export in progress stops and removes
    /// its unfinished file.
    closing: std::sync::atomic::AtomicBool,
    /// Times the flush thread waited for compaction before ingesting a layer.
    compaction_waits: Arc<std::sync::atomic::AtomicU64>,
}

/// Locks the reply memory's log (a panic while appending leaves it usable: an append that
/// failed part-way is a torn frame the next base supersedes).
fn lock_log(log: &Mutex<ResidentLog>) -> MutexGuard<'_, ResidentLog> {
    log.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Locks the index. Only the apply thread changes it, and a panic there stops the node (its
/// state machine fails), so a poisoned lock is taken over rather than propagated.
fn lock_index(devices: &Mutex<DeviceIndex>) -> MutexGuard<'_, DeviceIndex> {
    devices
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Drop for Inner {
    fn drop(&mut self) {
        drop(
            self.table_release
                .get_mut()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .take(),
        );
        self.memtable.stop();
        let flusher = match self.flusher.get_mut() {
            Ok(flusher) => flusher.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(flusher) = flusher
            && flusher.join().is_err()
        {
            tracing::error!("the state-flush thread panicked");
        }
    }
}

/// Checks a received snapshot file end to end and changes nothing: its framing and checksum,
/// and that the rows [`StateTree::install_snapshot`] bulk-loads come in strictly ascending key
/// order with keys fjall can store: what damage in transit or on disk breaks. (It does not
/// decode the rows' records or the header: a file that passes and still fails the install came
/// from a faulty leader.) An install of such a file would fail too, leaving the state as it was,
/// but openraft stops a node's Raft on any state-machine error: the receiving side checks first,
/// and refuses a corrupt transfer, which the leader sends again.
pub fn verify_snapshot(path: &Path) -> Result<SnapshotFile> {
    let mut rows = SortedRows::default();
    snapshot::read_entries(path, |(key, _)| {
        if resident::contains(&key) {
            Ok(())
        } else {
            rows.admit(&key)
        }
    })
}

/// Writes a frozen memtable layer into `tree` as one table file ([`Tree::ingest_layer`]), first
/// keeping the pre-image of each row an export in progress still has to read (see `preimage`).
fn write_layer(tree: &Tree, preimages: &Preimages, layer: &ToWrite) -> Result<()> {
    for key in layer.writes.keys() {
        preimages.keep(tree, layer.seq, key)?;
    }
    tree.ingest_layer(&layer.writes)
}

/// Level-0 tables of the state keyspace at which the flush thread waits for compaction before
/// it ingests another layer. fjall stalls its journalled writes at 20 runs of level 0, but an
/// ingestion bypasses that check: without this wait level 0 would grow without bound whenever
/// compaction falls behind, and every read would look through more tables. The layers wait in
/// memory meanwhile, and apply waits once they fill it (`statestore_disk_memtable_stalls_total`).
const MAX_LEVEL0_TABLES: usize = 20;

/// Consecutive failed writes of one layer after which the state machine stops instead of
/// retrying (one a second): each failed ingestion may leave a table file behind (removed at the
/// next open), and a disk that keeps failing is not trusted. The node then stops uncleanly and
/// rebuilds at its next start.
const MAX_LAYER_ATTEMPTS: u32 = 5;

/// Moves frozen memtable layers into the active keyspace, one table file each ([`write_layer`]),
/// after their reply memory entry is durable in its log, and once level 0 holds fewer than
/// [`MAX_LEVEL0_TABLES`] tables. A failed write is retried, up to [`MAX_LAYER_ATTEMPTS`] (the layer
/// stays readable and writers eventually wait): nothing is dropped, and an entry already in the
/// log is not appended again.
fn flush_loop(
    memtable: Arc<Memtable>,
    active: std::sync::Weak<RwLock<(String, Tree)>>,
    log: Arc<Mutex<ResidentLog>>,
    compaction_waits: &std::sync::atomic::AtomicU64,
) {
    // A panic here fails the memtable, so that whoever waits for a layer (a flush, a snapshot
    // export, a writer waiting for room) stops waiting.
    let _failing = FailOnPanic(memtable.clone());
    // The journal entry appended last (a retried layer must not log it twice).
    let mut logged: Option<u64> = None;
    // Failed writes of the layer at the front, in a row.
    let mut failures = 0u32;
    // Failed appends of its reply memory entry, in a row.
    let mut append_failures = 0u32;
    while let Some(frozen) = memtable.next_to_write() {
        if let Some(pending) = &frozen.entry
            && logged != Some(pending.seq)
        {
            match append_entry(&log, pending) {
                Ok(()) => {
                    append_failures = 0;
                    logged = Some(pending.seq);
                }
                Err((err, for_good)) => {
                    append_failures += 1;
                    if for_good || append_failures >= MAX_LAYER_ATTEMPTS {
                        tracing::error!(error = %err, "writing the reply memory's log failed for good; the state machine stops");
                        memtable.fail(err.to_string());
                        return;
                    }
                    tracing::error!(error = %err, "writing the reply memory's log failed; retrying");
                    std::thread::sleep(Duration::from_secs(1));
                    continue;
                }
            }
        }
        let Some(tree) = active.upgrade().map(|active| match active.read() {
            Ok(guard) => guard.1.clone(),
            Err(poisoned) => poisoned.into_inner().1.clone(),
        }) else {
            return;
        };
        if tree.wait_for_level0_below(MAX_LEVEL0_TABLES) {
            compaction_waits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let started = std::time::Instant::now();
        let written = write_layer(&tree, memtable.preimages(), &frozen);
        if written.is_ok()
            && let Some(pending) = frozen.entry.as_ref().filter(|pending| pending.is_base())
            && let Err(err) = prune_log_to_base(&log, pending.seq)
        {
            // The layer is written: the next base or sync prunes again.
            tracing::warn!(error = %err, "removing the reply memory's older log files failed");
        }
        tracing::debug!(
            keys = frozen.writes.len(),
            ms = started.elapsed().as_millis() as u64,
            "memtable layer written to the state database"
        );
        // Let go of the tree before telling anyone: a waiter of the last flush may drop the
        // store and open it again at once, which fjall refuses while a handle is alive.
        drop(tree);
        failures = if written.is_ok() { 0 } else { failures + 1 };
        match written {
            Ok(()) => memtable.written(),
            Err(err) if is_permanent(&err) || failures >= MAX_LAYER_ATTEMPTS => {
                tracing::error!(error = %err, "writing the state machine's memtable to the state database failed for good; the state machine stops");
                memtable.fail(err.to_string());
                return;
            }
            Err(err) => {
                tracing::error!(error = %err, "writing the state machine's memtable to the state database failed; retrying");
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
}

/// Fails the memtable if the flush thread unwinds.
struct FailOnPanic(Arc<Memtable>);

impl Drop for FailOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0
                .fail("the state database's flush thread panicked".to_owned());
        }
    }
}

/// Appends a layer's reply memory entry (encoded here, outside every lock the writer takes). A
/// new base the disk has no room for (it holds every live reply) is appended as a delta to the
/// current file instead, when there is one: the next base replaces the file later, and a clean
/// stop on a nearly full disk still ends with everything durable.
/// On failure, the error and whether the log refuses appends for good.
fn append_entry(
    log: &Mutex<ResidentLog>,
    pending: &PendingEntry,
) -> std::result::Result<(), (StorageError, bool)> {
    // Encoded outside every lock (a base is every live reply).
    let entry = pending.encode();
    let mut log = lock_log(log);
    let appended = match log.append(&entry) {
        Err(err) if pending.is_base() && log.has_base() && log.broken().is_none() => {
            tracing::warn!(error = %err, seq = pending.seq, "the reply memory's new base could not be written; its changes are appended to the current file instead");
            log.append(&pending.encode_as_delta())
        }
        appended => appended,
    };
    appended.map_err(|err| (err, log.broken().is_some()))
}

/// Whether a failed layer write would fail the same way however often it is retried: fjall
/// refuses every write after a failed journal write or sync (it is poisoned), and a key it
/// cannot store stays one. (Other failures, an ingestion's I/O errors among them, are retried up
/// to [`MAX_LAYER_ATTEMPTS`] times.)
fn is_permanent(err: &StorageError) -> bool {
    matches!(
        err,
        StorageError::Engine(fjall::Error::Poisoned | fjall::Error::Unrecoverable)
            | StorageError::UnstorableKey { .. }
    )
}

/// After a layer that starts a new base of the reply memory's log is written (and so durable:
/// an ingested layer is, and it records the base's sequence number): removes the log's older
/// files, which no restart can need any more. Without this, the log grew by every delta and base
/// until the next sync (303 MiB per node during a 1M-key load, against 26 MiB after the clean
/// stop).
fn prune_log_to_base(log: &Mutex<ResidentLog>, base: u64) -> Result<()> {
    lock_log(log).prune(base)
}

impl StateTree {
    /// Reads back a state database an unclean stop left, before it is trusted: the active
    /// keyspace row by row (fjall checks every block it reads) and the reply memory's log up to
    /// the entry the keyspace names, its replies decoded. Returns the rows read; an error means
    /// it is not to be kept. Changes nothing but what an open would (reply log files the state
    /// never reached are removed).
    pub(crate) fn check_kept(db: &fjall::Database, log_dir: &Path) -> Result<u64> {
        let (_, _, tree) = open_active(db)?;
        let mut rows = 0u64;
        for row in tree.range(&[], &[u8::MAX; 2]) {
            row?;
            rows += 1;
        }
        load_resident(&tree, log_dir)?;
        Ok(rows)
    }

    pub(crate) fn open(
        db: &fjall::Database,
        lock: Arc<std::fs::File>,
        snapshot_dir: &Path,
        log_dir: &Path,
        memtable: MemtableConfig,
    ) -> Result<StateTree> {
        let (records, name, tree) = open_active(db)?;
        remove_temporary_files(snapshot_dir)?;
        let (resident, log) = load_resident(&tree, log_dir)?;
        let log_bytes = log.size_on_disk();
        let log = Arc::new(Mutex::new(log));
        let active = Arc::new(RwLock::new((name, tree.clone())));
        let memtable = Arc::new(Memtable::new(memtable, resident));
        let devices = Arc::new(Mutex::new(DeviceIndex::default()));
        *lock_index(&devices) = DeviceIndex::load(&StateView {
            memtable: memtable.clone(),
            active: active.clone(),
            devices: devices.clone(),
        })?;
        let compaction_waits = Arc::new(std::sync::atomic::AtomicU64::new(0));
        // Before the flush thread: it is stopped only by the tree's drop.
        let table_release = TableRelease::start(records.clone(), Arc::downgrade(&active))?;
        let flusher = {
            let memtable = memtable.clone();
            let active = Arc::downgrade(&active);
            let log = log.clone();
            let compaction_waits = compaction_waits.clone();
            // At the serving threads' priority, not niced like an export: the memtable is
            // bounded, so whatever this thread does not get done, apply waits for. Niced, in
            // `statestore-bench scale --keys 10000000` on two busy cores, it was runnable but
            // waiting for a CPU 73-93 % of the time (/proc/<pid>/task/<tid>/schedstat over 20 s
            // at 3.2M and 6M keys) and apply waited 122-257 s for memtable room per load.
            std::thread::Builder::new()
                .name("state-flush".to_owned())
                .spawn(move || flush_loop(memtable, active, log, &compaction_waits))?
        };
        Ok(StateTree {
            inner: Arc::new(Inner {
                db: db.clone(),
                _lock: lock,
                records,
                active,
                memtable,
                snapshot_dir: snapshot_dir.to_owned(),
                devices,
                log,
                log_bytes,
                flusher: Mutex::new(Some(flusher)),
                table_release: Mutex::new(Some(table_release)),
                compaction_waits,
                closing: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }

    fn active(&self) -> (String, Tree) {
        match self.inner.active.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// A read view of the current state.
    pub fn view(&self) -> StateView {
        StateView {
            memtable: self.inner.memtable.clone(),
            active: self.inner.active.clone(),
            devices: self.inner.devices.clone(),
        }
    }

    /// The device queues' index of the committed state, for apply: lock it for a whole
    /// transaction (apply, then [`StateTree::commit`]), hand it to
    /// `Machine::open_with_index`, and [`StateTree::reload_device_index`] if the transaction
    /// fails.
    pub fn device_index(&self) -> Arc<Mutex<DeviceIndex>> {
        self.inner.devices.clone()
    }

    /// Rebuilds the device queues' index from the committed rows into `index` (the guard of
    /// [`StateTree::device_index`]'s lock).
    pub fn reload_device_index(&self, index: &mut DeviceIndex) -> Result<()> {
        *index = DeviceIndex::load(&self.view())?;
        Ok(())
    }

    /// Returns once [`StateTree::commit`] would not wait for the memtable to make room: the one
    /// writer calls it before it locks the device queues' index, so the index is never held
    /// across a wait for the disk.
    pub fn wait_for_room(&self) {
        self.inner.memtable.wait_for_room();
    }

    /// Applies the writes of one transaction atomically: readers see all of them or none; fjall
    /// receives them in one table file with the rest of their memtable layer (rows created and
    /// removed again while one layer is active never reach it).
    pub fn commit(&self, writes: TxnWrites) -> Result<()> {
        if let Some(reason) = self.inner.memtable.failure() {
            return Err(StorageError::Failed(reason));
        }
        self.inner.memtable.commit(writes);
        Ok(())
    }

    /// Waits until every committed write is in fjall (the layers' tables are fsynced as they are
    /// written; [`Self::sync`] also syncs fjall's journal and prunes the reply memory's log).
    pub fn flush_memtable(&self) {
        self.inner.memtable.flush_all();
    }

    /// Bytes of applied writes not yet in fjall.
    pub fn memtable_bytes(&self) -> usize {
        self.inner.memtable.bytes()
    }

    /// Remembered replies, and bytes of the tables kept in memory (the reply memory).
    pub fn resident_size(&self) -> (usize, usize) {
        self.inner.memtable.resident_size()
    }

    /// Bytes of the reply memory's log on disk (see `resident_log`).
    pub fn reply_log_bytes(&self) -> u64 {
        self.inner
            .log_bytes
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Times apply waited for the memtable to make room.
    pub fn memtable_stalls(&self) -> u64 {
        self.inner.memtable.stalls()
    }

    /// Bytes of the pre-images a snapshot export in progress keeps (see `preimage`).
    pub fn preimage_bytes(&self) -> usize {
        self.inner.memtable.preimages().bytes()
    }

    /// Times the flush thread waited for compaction of level 0 before ingesting a layer.
    pub fn compaction_waits(&self) -> u64 {
        self.inner
            .compaction_waits
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Tables in level 0 of the active state keyspace (compaction merges them into the levels
    /// below).
    pub fn level0_tables(&self) -> usize {
        self.active().1.level0_tables()
    }

    /// Times the flush thread waited because an export's pre-images were at their cap.
    pub fn preimage_waits(&self) -> u64 {
        self.inner.memtable.preimages().cap_waits()
    }

    /// Marks the state applied so far as a snapshot point: freezes the memtable's active map,
    /// so that [`Checkpoint::wait_durable`] can wait until everything applied up to now is in
    /// fjall (whose layers are fsynced as they are written). A snapshot build is this and
    /// nothing more: the state database is the snapshot, and the log it covers may be purged
    /// once the wait returns. Cheap (no copy): call it where nothing is applied concurrently.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            through: self.inner.memtable.freeze_all(),
            state: self.clone(),
        }
    }

    /// Writes a snapshot of the whole state as it is now (without the consensus records) to
    /// `outgoing-<id>.tmp` in the snapshot directory (see [`SnapshotExport::write_outgoing`]).
    /// Blocking.
    pub fn export_snapshot(&self, id: &str, header: &[u8]) -> Result<SnapshotFile> {
        self.begin_export().write_outgoing(id, header, &|| true)
    }

    /// Starts a snapshot export of the state as it is now, without stopping apply or the
    /// flushes: the export reads fjall as it was at this moment (pre-images of the rows written
    /// since, see `preimage`) under the memtable maps of this moment (see
    /// [`Memtable::begin_export`]). Read what the snapshot covers from
    /// [`SnapshotExport::view`], then [`SnapshotExport::write`] it (from any thread).
    pub fn begin_export(&self) -> SnapshotExport {
        let layers = self.inner.memtable.begin_export();
        SnapshotExport {
            view: ExportView {
                tree: self.active().1,
                layers: layers.layers,
                resident: layers.resident,
                memtable: self.inner.memtable.clone(),
            },
            state: self.clone(),
        }
    }

    /// A path to receive a snapshot from a peer into.
    pub fn incoming_snapshot_path(&self) -> PathBuf {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        self.inner
            .snapshot_dir
            .join(format!("incoming-{nanos}.tmp"))
    }

    /// Replaces the state with the snapshot at `received` and adds the consensus layer's
    /// records. Blocking. The entries are loaded into a fresh keyspace as they are read and the
    /// checksum is checked at the end (one read of the file): a damaged file leaves the old
    /// state as it was. Crash-safe: the switch to the new keyspace is one durable record update,
    /// made after the new keyspace's tables and records are durable; a crash before it leaves
    /// the old state (the leader sends the snapshot again), after it the new one. The file is
    /// the caller's: nothing keeps it once this returns.
    pub fn install_snapshot(
        &self,
        received: &Path,
        consensus_records: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<SnapshotFile> {
        let (old_name, _) = self.active();
        let generation = old_name
            .strip_prefix("state_")
            .and_then(|g| g.parse::<u64>().ok())
            .unwrap_or(0);
        let new_name = format!("state_{}", generation + 1);
        Tree::drop_named(&self.inner.db, &new_name)?; // leftover of an interrupted install
        let tree = Tree::open(&self.inner.db, &new_name)?;
        let mut resident = ResidentTables::default();
        // A snapshot's rows are in key order (an export reads them so): bulk-loaded.
        let loaded = tree.load_sorted(|load| {
            snapshot::read_entries(received, |(key, value)| {
                if resident::contains(&key) {
                    resident.put(key, value);
                    return Ok(());
                }
                load(&key, &value)
            })
        });
        let file = match loaded {
            Ok(file) => file,
            Err(err) => {
                if let Err(deleting) = tree.delete() {
                    tracing::warn!(keyspace = %new_name, error = %deleting, "could not remove the keyspace of a failed snapshot install");
                }
                return Err(err);
            }
        };
        // Readers of the index wait until it describes the new state.
        let devices = self.inner.devices.clone();
        let mut index = lock_index(&devices);
        // The snapshot replaces everything applied so far.
        let next_entry = self.inner.memtable.discard();
        let mut records: Vec<(Vec<u8>, Vec<u8>)> = consensus_records;
        // The new tree's reply memory starts a new file of the log; the old tree's files stay
        // until the switch below is durable.
        let mut journal = ResidentJournal::starting_at(next_entry);
        let base = journal.base(&resident);
        lock_log(&self.inner.log).append(&base)?;
        records.push((
            resident_journal::seq_record(),
            resident_journal::encode_seq(base.seq),
        ));
        tree.write(
            records
                .iter()
                .map(|(key, value)| (key.as_slice(), Some(value.as_slice()))),
        )?;
        crate::store::db::sync(&self.inner.db)?;
        self.inner
            .records
            .insert(ACTIVE_TREE_RECORD.as_bytes(), new_name.as_bytes())?;
        crate::store::db::sync(&self.inner.db)?;
        match self.inner.active.write() {
            Ok(mut guard) => *guard = (new_name, tree),
            Err(poisoned) => *poisoned.into_inner() = (new_name, tree),
        }
        self.inner
            .memtable
            .set_resident(resident, journal, base.seq);
        lock_log(&self.inner.log).prune(base.seq)?;
        self.reload_device_index(&mut index)?;
        drop(index);
        // The switch is durable: a keyspace left behind costs disk, not correctness.
        if let Err(err) = Tree::drop_named(&self.inner.db, &old_name) {
            tracing::warn!(keyspace = %old_name, error = %err, "could not remove the state's previous keyspace");
        }
        Ok(file)
    }

    /// Makes the next layer write the reply memory's log a new base (see
    /// [`Memtable::rebase_resident`]); once that layer is durable, [`Self::sync`] removes the
    /// older file. For a clean stop: after it the log holds the live rows once (at a 1M-key
    /// load, 59 MB of base and deltas for 35 MB of rows).
    pub fn rebase_reply_log(&self) {
        self.inner.memtable.rebase_resident();
    }

    /// Stops the thread that lets fjall delete replaced tables ([`TableRelease`]) and waits for
    /// it: for a clean stop, after which nothing may be written. It is not started again.
    pub fn stop_table_release(&self) {
        let mut release = self
            .inner
            .table_release
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        drop(release.take());
    }

    /// Stops a snapshot export in progress and waits (up to [`EXPORT_STOP_WAIT`]) until it has
    /// removed its unfinished file; none starts after this. For a clean stop: the file would be
    /// garbage once the process exits (removed only at the next open), up to a whole snapshot of
    /// disk (at 1M keys, a stop during an export left 0.75× the data in a `.tmp` file). False
    /// if an export was still running at the deadline.
    pub fn abandon_exports(&self) -> bool {
        self.inner
            .closing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let ended = self.inner.memtable.wait_export_ended(EXPORT_STOP_WAIT);
        if !ended {
            tracing::warn!(
                waited_ms = EXPORT_STOP_WAIT.as_millis() as u64,
                "a snapshot export did not stop in time; its unfinished file is removed at the next start"
            );
        }
        ended
    }

    fn is_closing(&self) -> bool {
        self.inner.closing.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Makes every write so far durable (memtable included).
    pub fn sync(&self) -> Result<()> {
        self.flush_memtable();
        if let Some(reason) = self.inner.memtable.failure() {
            return Err(StorageError::Failed(reason));
        }
        crate::store::db::sync(&self.inner.db)?;
        // The database's durable state now records the newest written entry: older log files are
        // no longer needed.
        if let Some(durable) = self.inner.memtable.written_entry() {
            lock_log(&self.inner.log).prune(durable)?;
        }
        Ok(())
    }
}

/// Rows an export writes between two looks at whether the store is closing (a few ms of work).
const EXPORT_CLOSING_CHECK_ROWS: usize = 4_096;

/// How long [`StateTree::abandon_exports`] waits for an export to stop: one blocked on a slow
/// disk is left behind (its file is removed at the next open).
const EXPORT_STOP_WAIT: Duration = Duration::from_secs(5);

/// How often an export waiting for its maps to reach fjall looks whether the store is closing.
const EXPORT_WAIT_STEP: Duration = Duration::from_millis(100);

/// A snapshot point (see [`StateTree::checkpoint`]).
pub struct Checkpoint {
    /// The memtable maps below this number hold the state applied up to the checkpoint.
    through: u64,
    state: StateTree,
}

impl Checkpoint {
    /// Waits until the state applied up to the checkpoint is in fjall (blocking); fails if the
    /// flush thread stopped for good first, or once the store is closing.
    pub fn wait_durable(&self) -> Result<()> {
        let memtable = &self.state.inner.memtable;
        loop {
            match memtable.wait_written_for(self.through, EXPORT_WAIT_STEP) {
                Ok(true) => return Ok(()),
                Ok(false) if self.state.is_closing() => {
                    return Err(StorageError::Failed(
                        "the store is closing: snapshot build abandoned".to_owned(),
                    ));
                }
                Ok(false) => {}
                Err(err) => return Err(err),
            }
        }
    }
}

/// A snapshot export in progress (see [`StateTree::begin_export`]); dropping it ends the export.
pub struct SnapshotExport {
    view: ExportView,
    state: StateTree,
}

impl SnapshotExport {
    /// The state being exported (fixed: later applies do not show here).
    pub fn view(&self) -> &ExportView {
        &self.view
    }

    /// Writes the view to `tmp`, then durably to `final_path`. Stops with an error once the
    /// store is closing ([`StateTree::abandon_exports`]) or `wanted` says nobody waits for it.
    fn write_file(
        &self,
        tmp: &Path,
        final_path: &Path,
        header: &[u8],
        wanted: &dyn Fn() -> bool,
    ) -> Result<SnapshotFile> {
        let mut writer = SnapshotWriter::create(tmp, header)?;
        let start = [0u8];
        let end = [Table::ConsensusState.prefix()];
        for (row, entry) in self.view.range(&start, &end).enumerate() {
            if row % EXPORT_CLOSING_CHECK_ROWS == 0 {
                if self.state.is_closing() {
                    return Err(StorageError::Failed(
                        "the store is closing: snapshot export abandoned".to_owned(),
                    ));
                }
                if !wanted() {
                    return Err(StorageError::Failed(
                        "nobody waits for the snapshot any more: export abandoned".to_owned(),
                    ));
                }
            }
            let (key, value) = entry?;
            writer.push(&key, &value)?;
        }
        writer.finish(final_path, header)
    }

    /// Writes the snapshot named `id` with `header` to a file of its own for sending to peers
    /// (`outgoing-<id>.tmp` in the snapshot directory: the caller removes it once it is sent;
    /// an open removes what a stopped process left). The export ends (its pre-images dropped)
    /// when this returns. It stops with an error as soon as `wanted` returns false (asked every
    /// few thousand rows: nobody waits for it any more). A failed write removes its unfinished
    /// file. Blocking.
    pub fn write_outgoing(
        self,
        id: &str,
        header: &[u8],
        wanted: &dyn Fn() -> bool,
    ) -> Result<SnapshotFile> {
        let dir = &self.state.inner.snapshot_dir;
        let partial = dir.join(format!("outgoing-{}.part.tmp", sanitize(id)));
        let final_path = dir.join(format!("outgoing-{}.tmp", sanitize(id)));
        let written = self.write_file(&partial, &final_path, header, wanted);
        drop(self);
        if written.is_err()
            && let Err(removing) = crate::gradual_remove::remove(&partial)
        {
            tracing::warn!(path = %partial.display(), error = %removing, "could not remove a failed snapshot export");
        }
        written
    }
}

impl Drop for SnapshotExport {
    fn drop(&mut self) {
        self.state.inner.memtable.end_export();
    }
}

/// The state at the start of an export: fjall as it was then (its rows written since read from
/// their pre-images) under the memtable maps of that moment, and the resident tables of that
/// moment. Ranges are read in key order, each once (see [`Exported`]).
pub struct ExportView {
    tree: Tree,
    layers: Vec<Arc<Writes>>,
    resident: ResidentTables,
    /// Whose pre-images the export reads.
    memtable: Arc<Memtable>,
}

impl OrderedRead for ExportView {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if resident::contains(key) {
            return Ok(self.resident.get(key).map(<[u8]>::to_vec));
        }
        for layer in self.layers.iter().rev() {
            if let Some(write) = layer.get(key) {
                return Ok(write.clone());
            }
        }
        self.memtable.preimages().get(&self.tree, key)
    }

    fn range<'a>(&'a self, start: &[u8], end: &[u8]) -> RangeIter<'a> {
        if start >= end {
            return Box::new(std::iter::empty());
        }
        let (resident_start, resident_end) = resident::bounds();
        let below = self.layered(start, end.min(resident_start.as_slice()));
        let inside = self.resident.range(
            start.max(resident_start.as_slice()),
            end.min(resident_end.as_slice()),
            usize::MAX,
        );
        let above = self.layered(start.max(resident_end.as_slice()), end);
        Box::new(below.chain(inside.into_iter().map(Ok)).chain(above))
    }
}

impl ExportView {
    fn layered<'a>(&'a self, start: &[u8], end: &[u8]) -> RangeIter<'a> {
        if start >= end {
            return Box::new(std::iter::empty());
        }
        let memory = merge_range(self.layers.iter().map(|l| l.as_ref()), start, end);
        let stored = self.tree.range(start, end);
        Layered::on(
            Box::new(Exported::new(stored, self.memtable.preimages(), start, end)),
            memory,
        )
    }
}

/// The store's records keyspace, and the name and keyspace of the active state tree.
fn open_active(db: &fjall::Database) -> Result<(Tree, String, Tree)> {
    let records = Tree::open(db, "store_records")?;
    let name = match records.get(ACTIVE_TREE_RECORD.as_bytes())? {
        Some(name) => String::from_utf8_lossy(&name).into_owned(),
        None => "state_0".to_owned(),
    };
    let tree = Tree::open(db, &name)?;
    Ok((records, name, tree))
}

/// The resident tables as the state in `tree` records them: rebuilt from the reply memory's log
/// (in `log_dir`) up to the entry the tree names, then the reply-expiry index from the replies.
fn load_resident(tree: &Tree, log_dir: &Path) -> Result<(ResidentState, ResidentLog)> {
    let at = tree
        .get(&resident_journal::seq_record())?
        .map(|bytes| resident_journal::decode_seq(&bytes))
        .transpose()?;
    let opened = ResidentLog::open(log_dir, at)?;
    let mut tables = opened.tables;
    tables.derive_index()?;
    let state = ResidentState {
        tables,
        journal: ResidentJournal::starting_at(opened.next_seq),
        written_entry: at,
    };
    Ok((state, opened.log))
}

/// Keeps snapshot ids usable as file names.
fn sanitize(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Removes snapshot files left half-written by an earlier run (`*.tmp`: exports and transfers
/// in progress when the process stopped).
fn remove_temporary_files(snapshot_dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(snapshot_dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "tmp") {
            tracing::info!(path = %path.display(), "removing an unfinished snapshot file");
            crate::gradual_remove::remove(&path)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
