//! The write-back layer in front of the state keyspace in fjall.
//!
//! The layer was added for sled 0.34, the state database before fjall, which copied a leaf and
//! its page fragments on every insert: under sustained writes the state machine spent about half
//! of a follower's CPU inside sled's `Tree::apply_batch` (see BENCHMARKS.md). Applied writes land
//! here first, in an ordered map that later writes to the same key overwrite; once it holds
//! [`MemtableConfig::flush_bytes`] (or the reply memory's changes since the last layer reach
//! [`MemtableConfig::flush_resident_bytes`]) or is [`MemtableConfig::flush_interval`] old it is
//! frozen, and a background thread writes frozen maps into fjall, oldest first, each as one
//! table file that joins the keyspace atomically
//! ([`Tree::ingest_layer`](crate::store::tree::Tree::ingest_layer)). Keys written many times
//! (hot keys, the keyspace counters) reach fjall once per interval.
//!
//! Every map holds the consensus records of the entries it covers and reaches fjall in one
//! table, so fjall's state is always the state after some prefix of the log. Whatever a stop
//! leaves of writes not yet in fjall is lost with the process: a clean stop writes every map and
//! syncs first, and after an unclean one the state is fjall's (the maps that reached it; the
//! Raft log after them is applied again) or rebuilt from a snapshot and the log.
//! Readers see the active map, then the frozen ones newest first, then fjall. If memory reaches
//! [`MemtableConfig::max_bytes`] the writer waits for the flush thread: memory stays bounded.
//!
//! A snapshot export ([`Memtable::begin_export`]) freezes the active map and takes the frozen
//! maps; the flush thread goes on writing newer maps into fjall, keeping the
//! [`preimage`](crate::store::preimage)s of the rows the export has not read yet, so the export
//! reads exactly the state at its start (fjall as it was, under the maps it took) while apply
//! and flushes go on.
//!
//! The [`resident`](crate::store::resident) tables bypass the layers: their rows stay in memory
//! and every frozen map carries what changed in them as an entry of the
//! [`resident_journal`](crate::store::resident_journal), which the flush thread writes to the
//! reply memory's own log before the map's fjall table (that table records the entry's number).
//!
//! A row a transaction created ([`TxnWrite::Create`]: absent before it) that is still in the
//! active map is *fresh*: nothing under the active map holds it. Removing a fresh row drops
//! it from the active map instead of writing a tombstone, so rows created and removed while
//! one map is active (a device-bound message delivered and completed, and its index entries)
//! never reach fjall, and range scans do not wade through their tombstones. A row
//! whose map froze in between is removed with a tombstone, as any other. The active map is a
//! plain map of writes (which keys are fresh is kept beside it), so freezing it moves the map
//! as it is, and the set of fresh keys is freed after the lock is let go: a commit that
//! freezes costs no time in proportion to the map's rows.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound::{self, Excluded, Included};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::engine::{TxnWrite, TxnWrites};
use crate::store::preimage::Preimages;
use crate::store::resident::{self, ResidentTables};
use crate::store::resident_journal::{self, PendingEntry, ResidentJournal};

/// Buffered writes: `None` removes the key.
pub type Writes = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// One buffered write: the key and its new value (`None`: removed).
pub type Write = (Vec<u8>, Option<Vec<u8>>);

/// Bytes a write is accounted at beyond its key and value (map node, vectors).
const ENTRY_OVERHEAD: usize = 64;

/// When the layer is written to fjall, and how large it may grow.
#[derive(Debug, Clone, Copy)]
pub struct MemtableConfig {
    /// Freeze the active map once it holds this many bytes...
    pub flush_bytes: usize,
    /// ... or once the resident tables' changes since the last layer are estimated at this
    /// many bytes (`ResidentJournal::pending_bytes`: a load that only rewrites a few keys
    /// still adds rows to the reply memory)...
    pub flush_resident_bytes: usize,
    /// ... or once its oldest write is this old.
    pub flush_interval: Duration,
    /// Writers wait while the maps and the resident tables' pending changes hold this many
    /// bytes in all.
    pub max_bytes: usize,
    /// The pre-images an export keeps hold at most this many bytes (see `store::preimage`).
    pub max_preimage_bytes: usize,
}

impl Default for MemtableConfig {
    fn default() -> Self {
        MemtableConfig {
            // Layers near 100k keys of 16-byte keys and 64-byte values, each ingested into
            // fjall as one table. Each table is a file of level 0 until compaction merges it, and
            // with keys spread over the keyspace every merge rewrites the tables of level 1:
            // 4 MiB layers left the tree larger at rest than 16 MiB ones (1M keys: 2.81-3.85×
            // the data on disk after a stop, against 2.56-2.79×; BENCHMARKS.md).
            flush_bytes: 16 << 20,
            // Each SET also adds a remembered reply and its expiry entry and, seconds later,
            // removes both: a 16 MiB layer of SETs carries about 50 MB of such changes
            // (`statestore-bench scale`), so the layer freezes on its map first.
            flush_resident_bytes: 64 << 20,
            flush_interval: Duration::from_secs(15),
            // Room for two frozen layers of SETs with their changes (about 67 MB each) beside
            // the active one: apply waits only once the flush thread is a whole layer behind.
            // At 64 MiB one frozen layer filled it, and apply waited for every layer's write
            // (10M keys: 57 waits of 50 ms or more, 21 s in all; BENCHMARKS.md).
            max_bytes: 192 << 20,
            max_preimage_bytes: 128 << 20,
        }
    }
}

fn entry_bytes(key: &[u8], value: &Option<Vec<u8>>) -> usize {
    key.len() + value.as_ref().map_or(0, Vec::len) + ENTRY_OVERHEAD
}

/// The resident tables as a restart found them.
#[derive(Default)]
pub struct ResidentState {
    /// The rows.
    pub tables: ResidentTables,
    /// The journal, its next entry a base.
    pub journal: ResidentJournal,
    /// The journal entry fjall's state records.
    pub written_entry: Option<u64>,
}

/// A frozen map for the flush thread: its writes, and the journal entry to log before them.
pub struct ToWrite {
    /// Its place in the sequence of maps.
    pub seq: u64,
    /// The writes, in key order.
    pub writes: Arc<Writes>,
    /// The resident tables' journal entry of this layer, if they changed (to encode).
    pub entry: Option<Arc<PendingEntry>>,
}

/// A frozen map and its place in the sequence of maps.
struct Frozen {
    seq: u64,
    writes: Arc<Writes>,
    /// The resident tables' journal entry of this layer, if they changed.
    entry: Option<Arc<PendingEntry>>,
    bytes: usize,
}

#[derive(Default)]
struct Layers {
    active: Writes,
    /// Keys of `active` created in it: no older map and not fjall holds them.
    fresh: BTreeSet<Vec<u8>>,
    active_bytes: usize,
    /// When the first write of `active` arrived.
    active_since: Option<Instant>,
    /// Frozen maps not yet in fjall, oldest first.
    frozen: VecDeque<Frozen>,
    frozen_bytes: usize,
    next_seq: u64,
    /// True while an export runs.
    exporting: bool,
    stopped: bool,
    /// Why the flush thread stopped for good (an error no retry gets past): writers stop
    /// waiting for room, and the state tree refuses further commits and syncs.
    failed: Option<String>,
    /// Writers currently waiting for room.
    waiting: usize,
    /// Times a writer had to wait for room.
    stalls: u64,
    /// The resident tables, current.
    resident: ResidentTables,
    /// What of the resident tables the log holds, and which rows changed since.
    journal: ResidentJournal,
    /// The journal entry of the newest layer written to fjall.
    written_entry: Option<u64>,
}

impl Layers {
    /// The maps, and the resident tables' changes not yet frozen into a layer.
    fn bytes(&self) -> usize {
        self.active_bytes + self.journal.pending_bytes(&self.resident) + self.frozen_bytes
    }

    /// True if the active map holds nothing to write: no write, and no change of the resident
    /// tables.
    fn nothing_active(&self) -> bool {
        self.active.is_empty() && !self.journal.has_changes()
    }
}

/// The maps and the hand-over between the writer, the readers and the flush thread.
pub struct Memtable {
    layers: Mutex<Layers>,
    /// Signalled when a frozen map was written or an export ended.
    changed: Condvar,
    /// Signalled when there is a frozen map to write, or on stop.
    to_write: Condvar,
    config: MemtableConfig,
    /// What fjall held at the start of the export in progress, for the rows written since.
    preimages: Preimages,
}

/// What a reader found in the maps.
pub enum Lookup {
    /// The key's newest write (`None`: removed).
    Found(Option<Vec<u8>>),
    /// Not in memory: read fjall.
    Absent,
}

/// The state at the start of a snapshot export: fjall as it was then (the flush thread keeps the
/// pre-images of what it writes meanwhile) under `layers` (oldest first), and the resident
/// tables of that moment.
pub struct ExportLayers {
    /// Frozen maps, oldest first.
    pub layers: Vec<Arc<Writes>>,
    /// The resident tables at the start of the export.
    pub resident: ResidentTables,
}

impl Memtable {
    /// An empty memtable over the resident tables as a restart found them.
    pub fn new(config: MemtableConfig, resident: ResidentState) -> Memtable {
        Memtable {
            layers: Mutex::new(Layers {
                resident: resident.tables,
                journal: resident.journal,
                written_entry: resident.written_entry,
                ..Layers::default()
            }),
            changed: Condvar::new(),
            to_write: Condvar::new(),
            config,
            preimages: Preimages::new(config.max_preimage_bytes),
        }
    }

    /// The pre-images of the export in progress (the flush thread keeps them, the export reads
    /// them).
    pub fn preimages(&self) -> &Preimages {
        &self.preimages
    }

    fn lock(&self) -> MutexGuard<'_, Layers> {
        self.layers.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait_changed<'a>(&self, layers: MutexGuard<'a, Layers>) -> MutexGuard<'a, Layers> {
        self.changed.wait(layers).unwrap_or_else(|p| p.into_inner())
    }

    /// True if committing now would wait for room.
    #[cfg(test)]
    fn is_full(&self) -> bool {
        self.full(&self.lock())
    }

    /// True if a commit must wait: the maps hold their limit and flushes are pending.
    fn full(&self, layers: &Layers) -> bool {
        layers.bytes() >= self.config.max_bytes && !layers.frozen.is_empty()
    }

    /// Waits while memory is full and flushes are pending (counted as a stall).
    fn room<'a>(&self, mut layers: MutexGuard<'a, Layers>) -> MutexGuard<'a, Layers> {
        if self.full(&layers) {
            let started = Instant::now();
            let (bytes, exporting) = (layers.bytes(), layers.exporting);
            layers.stalls += 1;
            layers.waiting += 1;
            while self.full(&layers) && layers.failed.is_none() {
                layers = self.wait_changed(layers);
            }
            layers.waiting -= 1;
            tracing::debug!(
                waited_ms = started.elapsed().as_millis() as u64,
                bytes,
                exporting,
                frozen = layers.frozen.len(),
                "memtable full: the writer waited for the flush thread"
            );
        }
        layers
    }

    /// Returns once a commit would not wait for room (the writer waits here, holding nothing
    /// else; with one writer, its next commit then does not wait).
    pub fn wait_for_room(&self) {
        drop(self.room(self.lock()));
    }

    /// Adds one transaction's writes. Freezes the active map when it is due, and waits while
    /// memory is full and flushes are pending.
    pub fn commit(&self, writes: TxnWrites) {
        let mut layers = self.room(self.lock());
        if layers.active_since.is_none() {
            layers.active_since = Some(Instant::now());
        }
        let Layers {
            active,
            fresh,
            active_bytes,
            resident,
            journal,
            ..
        } = &mut *layers;
        for (key, write) in writes {
            if resident::contains(&key) {
                match write.into_value() {
                    Some(value) => {
                        let (key, value): (Arc<[u8]>, Arc<[u8]>) = (key.into(), value.into());
                        journal.note_set(&key, &value);
                        resident.put_shared(key, value);
                    }
                    None => {
                        journal.note_removal(&key);
                        resident.remove(&key);
                    }
                }
                continue;
            }
            let created = matches!(write, TxnWrite::Create(_));
            let value = write.into_value();
            match active.entry(key) {
                // Created in this map and removed again: nothing below holds it.
                Entry::Occupied(entry) if value.is_none() && fresh.contains(entry.key()) => {
                    let freed = entry_bytes(entry.key(), entry.get());
                    fresh.remove(entry.key());
                    entry.remove();
                    *active_bytes = active_bytes.saturating_sub(freed);
                }
                // The key is in there already: only the value's size changes (and whether it
                // is fresh does not: a tombstone here means something below may hold it).
                Entry::Occupied(mut entry) => {
                    let new_value = value.as_ref().map_or(0, Vec::len);
                    let old = std::mem::replace(entry.get_mut(), value);
                    let old_value = old.as_ref().map_or(0, Vec::len);
                    *active_bytes = active_bytes.saturating_sub(old_value) + new_value;
                }
                Entry::Vacant(entry) => {
                    *active_bytes += entry_bytes(entry.key(), &value);
                    if created {
                        fresh.insert(entry.key().clone());
                    }
                    entry.insert(value);
                }
            }
        }
        if layers.nothing_active() {
            // Fresh removals emptied it: the interval starts again with the next write.
            layers.active_since = None;
        } else if self.due(&layers) {
            let fresh = self.freeze(&mut layers);
            drop(layers);
            drop(fresh);
        }
    }

    fn due(&self, layers: &Layers) -> bool {
        !layers.nothing_active()
            && (layers.active_bytes >= self.config.flush_bytes
                || layers.journal.pending_bytes(&layers.resident)
                    >= self.config.flush_resident_bytes
                || layers
                    .active_since
                    .is_some_and(|since| since.elapsed() >= self.config.flush_interval))
    }

    /// Freezes the active map; returns its set of fresh keys, for the caller to free once it let
    /// go of the lock.
    fn freeze(&self, layers: &mut Layers) -> BTreeSet<Vec<u8>> {
        let mut writes: Writes = std::mem::take(&mut layers.active);
        let fresh = std::mem::take(&mut layers.fresh);
        let mut bytes = std::mem::take(&mut layers.active_bytes);
        let Layers {
            resident, journal, ..
        } = &mut *layers;
        let entry = journal.take_layer(resident).map(|entry| {
            bytes += entry.held_bytes;
            writes.insert(
                resident_journal::seq_record(),
                Some(resident_journal::encode_seq(entry.seq)),
            );
            Arc::new(entry)
        });
        let seq = layers.next_seq;
        layers.next_seq += 1;
        layers.frozen.push_back(Frozen {
            seq,
            writes: Arc::new(writes),
            entry,
            bytes,
        });
        layers.frozen_bytes += bytes;
        layers.active_since = None;
        self.to_write.notify_all();
        fresh
    }

    /// The newest write of `key` in memory (a resident table's row, or its absence, is always
    /// known here).
    pub fn get(&self, key: &[u8]) -> Lookup {
        let layers = self.lock();
        if resident::contains(key) {
            return Lookup::Found(layers.resident.get(key).map(<[u8]>::to_vec));
        }
        if let Some(write) = layers.active.get(key) {
            return Lookup::Found(write.clone());
        }
        for frozen in layers.frozen.iter().rev() {
            if let Some(value) = frozen.writes.get(key) {
                return Lookup::Found(value.clone());
            }
        }
        Lookup::Absent
    }

    /// The writes in memory with `start <= key < end`, newest map winning, ascending.
    pub fn range(&self, start: &[u8], end: &[u8]) -> Vec<Write> {
        if start >= end {
            return Vec::new();
        }
        let bounds = (Included(start), Excluded(end));
        let layers = self.lock();
        let frozen = layers.frozen.iter().map(|f| entries_of(&f.writes, bounds));
        let active = entries_of(&layers.active, bounds);
        merge_entries(frozen.chain(std::iter::once(active)))
    }

    /// Up to `limit` resident rows with `start <= key < end`.
    pub fn resident_range(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.lock().resident.range(start, end, limit)
    }

    /// Makes the next layer's journal entry a base (the whole tables) if deltas were written
    /// since the last one or changes wait (see [`ResidentJournal::rebase_next`]): a clean stop
    /// leaves the reply memory's log at one base of the live rows instead of a base and up to
    /// [`resident_journal::REBASE_FACTOR`] times the rows in deltas.
    pub fn rebase_resident(&self) {
        self.lock().journal.rebase_next();
    }

    /// Remembered replies and bytes of the resident tables.
    pub fn resident_size(&self) -> (usize, usize) {
        let layers = self.lock();
        (layers.resident.replies(), layers.resident.bytes())
    }

    /// Bytes held (every map).
    pub fn bytes(&self) -> usize {
        self.lock().bytes()
    }

    /// Times a writer had to wait because memory was full while flushes were pending.
    pub fn stalls(&self) -> u64 {
        self.lock().stalls
    }

    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.lock().waiting
    }

    /// Frozen maps waiting for the flush thread.
    #[cfg(test)]
    fn writable(&self) -> usize {
        self.lock().frozen.len()
    }

    /// Freezes the active map now.
    #[cfg(test)]
    fn flush_now(&self) {
        let mut layers = self.lock();
        drop(self.freeze(&mut layers));
    }

    /// For the flush thread: waits until a frozen map may be written (freezing the active map
    /// itself when it has aged past the interval) and returns it; `None` once stopped.
    pub fn next_to_write(&self) -> Option<ToWrite> {
        let mut layers = self.lock();
        // Freed after the lock is let go: the writer may be waiting for it.
        let mut fresh = BTreeSet::new();
        loop {
            if let Some(oldest) = layers.frozen.front() {
                let next = ToWrite {
                    seq: oldest.seq,
                    writes: oldest.writes.clone(),
                    entry: oldest.entry.clone(),
                };
                drop(layers);
                drop(fresh);
                return Some(next);
            }
            if layers.stopped {
                return None;
            }
            if self.due(&layers) {
                fresh = self.freeze(&mut layers);
                continue;
            }
            let wait = layers
                .active_since
                .map_or(self.config.flush_interval, |since| {
                    self.config
                        .flush_interval
                        .saturating_sub(since.elapsed())
                        .max(Duration::from_millis(10))
                });
            layers = self
                .to_write
                .wait_timeout(layers, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// For the flush thread: the oldest frozen map is in fjall now.
    pub fn written(&self) {
        let mut layers = self.lock();
        if let Some(done) = layers.frozen.pop_front() {
            layers.frozen_bytes = layers.frozen_bytes.saturating_sub(done.bytes);
            if let Some(entry) = done.entry {
                layers.written_entry = Some(entry.seq);
            }
        }
        self.changed.notify_all();
    }

    /// The journal entry of the newest layer in fjall (what fjall's state records), if any.
    pub fn written_entry(&self) -> Option<u64> {
        self.lock().written_entry
    }

    /// Waits until every write committed so far is in fjall (the flush thread must run).
    pub fn flush_all(&self) {
        let mut layers = self.lock();
        if !layers.nothing_active() {
            drop(self.freeze(&mut layers));
        }
        let newest = layers.next_seq;
        drop(self.wait_written_locked(layers, newest));
    }

    /// Freezes the active map (if it holds anything) and returns the number below which every
    /// map holds the writes committed so far: what [`Memtable::wait_written_for`] waits for.
    pub fn freeze_all(&self) -> u64 {
        let mut layers = self.lock();
        // Freed after the lock is let go (the flush thread may be waiting for it).
        let fresh = if layers.nothing_active() {
            BTreeSet::new()
        } else {
            self.freeze(&mut layers)
        };
        let through = layers.next_seq;
        drop(layers);
        drop(fresh);
        through
    }

    /// Waits up to `within` until every map numbered below `through` is in fjall (the flush
    /// thread must run): `Ok(false)` if some still is not, `Failed` with the reason if the flush
    /// thread stopped for good first.
    pub fn wait_written_for(&self, through: u64, within: Duration) -> crate::error::Result<bool> {
        let deadline = Instant::now() + within;
        let mut layers = self.lock();
        loop {
            let pending = layers.frozen.front().is_some_and(|f| f.seq < through);
            if !pending {
                return Ok(true);
            }
            if let Some(reason) = &layers.failed {
                return Err(crate::error::StorageError::Failed(reason.clone()));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            layers = self
                .changed
                .wait_timeout(layers, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn wait_written_locked<'a>(
        &self,
        mut layers: MutexGuard<'a, Layers>,
        through: u64,
    ) -> MutexGuard<'a, Layers> {
        while layers.failed.is_none() && layers.frozen.front().is_some_and(|f| f.seq < through) {
            layers = self.wait_changed(layers);
        }
        layers
    }

    /// Starts a snapshot export: freezes the active map and hands out the frozen maps; from
    /// now until [`Memtable::end_export`] the flush thread keeps the pre-images of the rows it
    /// writes from newer maps ([`Memtable::preimages`]). One export at a time: a second one
    /// waits for the first to end.
    pub fn begin_export(&self) -> ExportLayers {
        let mut layers = self.lock();
        while layers.exporting {
            layers = self.wait_changed(layers);
        }
        let locked = Instant::now();
        // Freed after the lock is let go (exports run at a lower priority).
        let fresh = if layers.active.is_empty() {
            BTreeSet::new()
        } else {
            self.freeze(&mut layers)
        };
        layers.exporting = true;
        // Before any newer map can be frozen (this lock is held): the flush thread keeps the
        // pre-images of the rows of every map numbered from here on.
        self.preimages.begin(layers.next_seq);
        let export = ExportLayers {
            layers: layers.frozen.iter().map(|f| f.writes.clone()).collect(),
            resident: layers.resident.clone(),
        };
        tracing::debug!(
            held_us = locked.elapsed().as_micros() as u64,
            bytes = layers.bytes(),
            frozen = layers.frozen.len(),
            "snapshot export begun"
        );
        drop(layers);
        drop(fresh);
        export
    }

    /// Waits until no export is in progress, up to `within`; false if one still is.
    pub fn wait_export_ended(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let mut layers = self.lock();
        while layers.exporting {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            layers = self
                .changed
                .wait_timeout(layers, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }

    /// Ends the export begun last: its pre-images are dropped.
    pub fn end_export(&self) {
        let mut layers = self.lock();
        tracing::debug!(
            bytes = layers.bytes(),
            frozen = layers.frozen.len(),
            preimage_bytes = self.preimages.bytes(),
            "snapshot export ended"
        );
        layers.exporting = false;
        self.preimages.end();
        drop(layers);
        self.changed.notify_all();
    }

    /// Drops everything in memory (a snapshot replaces the state), after pending flushes; the
    /// resident tables' journal writes nothing until [`Memtable::set_resident`]. Returns the
    /// journal's next entry number.
    pub fn discard(&self) -> u64 {
        let mut layers = self.lock();
        while !layers.frozen.is_empty() || layers.exporting {
            layers = self.wait_changed(layers);
        }
        layers.active.clear();
        layers.fresh.clear();
        layers.active_bytes = 0;
        layers.active_since = None;
        layers.resident = ResidentTables::default();
        let next = layers.journal.next_seq();
        layers.journal = ResidentJournal::idle(next);
        next
    }

    /// Replaces the resident tables (after a snapshot install, which wrote `journal`'s base,
    /// entry `written`, and recorded it in the new tree).
    pub fn set_resident(&self, resident: ResidentTables, journal: ResidentJournal, written: u64) {
        let mut layers = self.lock();
        layers.resident = resident;
        layers.journal = journal;
        layers.written_entry = Some(written);
    }

    /// Stops the flush thread once nothing is frozen.
    pub fn stop(&self) {
        self.lock().stopped = true;
        self.to_write.notify_all();
    }

    /// For the flush thread, on an error no retry gets past: records `reason` and stops
    /// writing; whoever waits for room or for a flush goes on (and learns of it through
    /// [`Memtable::failure`]).
    pub fn fail(&self, reason: String) {
        let mut layers = self.lock();
        layers.failed = Some(reason);
        layers.stopped = true;
        drop(layers);
        self.changed.notify_all();
        self.to_write.notify_all();
    }

    /// Why the flush thread stopped for good, if it did.
    pub fn failure(&self) -> Option<String> {
        self.lock().failed.clone()
    }
}

/// One map's writes in a key range, ascending.
type Entries<'m> = Box<dyn Iterator<Item = (&'m [u8], &'m Option<Vec<u8>>)> + 'm>;

/// The writes of `maps` (oldest first) with `start <= key < end`, the newest winning.
pub fn merge_range<'m>(
    maps: impl Iterator<Item = &'m Writes>,
    start: &[u8],
    end: &[u8],
) -> Vec<Write> {
    if start >= end {
        return Vec::new();
    }
    let bounds = (Included(start), Excluded(end));
    merge_entries(maps.map(|map| entries_of(map, bounds)))
}

/// The writes of a frozen map within `bounds`.
fn entries_of<'m>(map: &'m Writes, bounds: (Bound<&[u8]>, Bound<&[u8]>)) -> Entries<'m> {
    Box::new(map.range::<[u8], _>(bounds).map(|(k, v)| (k.as_slice(), v)))
}

/// The entries of `layers` (oldest first), the newest winning on equal keys, ascending.
fn merge_entries<'m>(layers: impl Iterator<Item = Entries<'m>>) -> Vec<Write> {
    let mut merged: BTreeMap<&[u8], &Option<Vec<u8>>> = BTreeMap::new();
    for entries in layers {
        merged.extend(entries);
    }
    merged
        .into_iter()
        .map(|(k, v)| (k.to_vec(), v.clone()))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests;
