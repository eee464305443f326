//! What of the [`resident`](crate::store::resident) tables each memtable layer must persist:
//! a journal of entries, pure (the [`resident_log`](crate::store::resident_log) writes them to
//! their own files).
//!
//! A *base* entry holds every row; each later *delta* holds the changes of rows since the layer
//! before, in the order apply made them (a removed row as a tombstone; a row changed twice is
//! there twice). Replaying the newest base up to some entry and the deltas after it, in order,
//! gives the tables as of that entry's layer. Once the base, counted at the tables' size in
//! memory ([`ResidentTables::bytes`]: index rows and bookkeeping included, about twice what a
//! base writes), and the deltas since it, counted at what they write, would pass
//! [`REBASE_FACTOR`] times the tables' size in memory (plus [`REBASE_SLACK`]), the layer writes
//! a new base instead: the journal stays within a few times the reply memory (deltas up to
//! about twice the live replies' written size), and each remembered reply is written about once
//! instead of once per layer (the whole tables were one record rewritten by every layer: 8 MiB
//! every few seconds at 5,000 writes/s).
//!
//! The rows of the reply-expiry index are not written: they follow from the replies
//! ([`resident::is_derived`]), and a restart rebuilds them after replaying the journal.
//!
//! Every entry has a sequence number; the layer's fjall batch records it (see
//! [`seq_record`]), so a restart knows which entry fjall's state goes with.
//!
//! A layer freezes under the memtable's lock, so it only *takes* its entry there, in time that
//! does not grow with the rows ([`ResidentJournal::take_layer`]: the changes apply recorded,
//! moved out, and for a base the tables as they are, a clone that copies nothing); the flush
//! thread encodes them ([`PendingEntry::encode`]) before it logs the entry. Apply records each
//! change as it makes it ([`ResidentJournal::note_set`], [`ResidentJournal::note_removal`]): a
//! push of two shared byte slices.
//! Earlier designs cost more: a set of the changed keys, kept by apply under the memtable's
//! lock, cost a follower 10-15 % of its CPU at SET 64×8 (`perf`: two to four probes per write
//! into a set of ~400,000 keys, each a cache miss); reading the rows under the lock cost the
//! writer 64-234 ms per layer at 25,000 changed rows in `statestore-bench scale --keys 3000000`;
//! comparing the tables as of two layers on the flush thread, skipping the nodes they share,
//! cost a follower 4-6 % of its CPU (a walk of the reply memory, which turns over in seconds)
//! and made every write after a layer copy the tree nodes the two versions shared.
//!
//! Memory: the recorded changes share the rows' bytes (reference-counted) with the tables; what
//! they keep apart is a pointer pair per change and the rows removed since, which the changes
//! count (at the tables' mean row size, at least [`MIN_DELTA_ROW_BYTES`] each, and never below
//! the changes' own bytes: [`ResidentJournal::pending_bytes`], `held_bytes`). A
//! pending base's version of the tables shares every node with the live ones but those changed
//! since (16 rows each, a pointer pair per row: at most about 40 bytes per row, less than the
//! 48 bytes of bookkeeping each row is already counted at).
//!
//! Whether an entry is a base or a delta is decided when it is taken, from a bound of the
//! delta's encoded size: the key and value bytes of every journaled change, plus framing at
//! most. Derived rows do not count, and a removal counts its key only. (The bound was the
//! changes at the mean row size, derived rows and removals included: under SET 64×8 about three
//! times the real delta, so a node wrote a base of the whole reply memory nearly every layer,
//! 6-14 % of its CPU in `perf`.)

use std::sync::Arc;

use serde_bytes::ByteBuf;

use crate::codec;
use crate::error::{Result, StorageError};
use crate::layout;
use crate::store::resident::{self, ResidentTables};

/// A new base is written once the last base (at the tables' size in memory) and the deltas
/// since it (at what they write) would exceed this many times the tables' size in memory...
pub const REBASE_FACTOR: usize = 2;
/// ... plus this many bytes (small tables are rebased rarely).
pub const REBASE_SLACK: usize = 1 << 20;
/// A changed row is estimated at no less than this (a removal still writes its key).
pub const MIN_DELTA_ROW_BYTES: usize = 32;
/// What an entry's encoding adds to its rows' bytes, at most: per row, the two length prefixes
/// and the `Option` tag...
const ROW_FRAMING_BYTES: usize = 11;
/// ... and per entry, the format version and the row count.
const ENTRY_FRAMING_BYTES: usize = 11;

/// Key of the record in fjall that names the journal entry the state tree's resident tables are
/// at (a consensus-layer record: not part of the keyspace digest or snapshot dumps).
pub fn seq_record() -> Vec<u8> {
    layout::consensus_key(b"resident_seq")
}

/// The value of [`seq_record`].
pub fn encode_seq(seq: u64) -> Vec<u8> {
    codec::encode(&seq)
}

/// Reads a value of [`seq_record`].
pub fn decode_seq(bytes: &[u8]) -> Result<u64> {
    codec::decode("resident journal sequence", bytes)
}

/// One entry of the journal, encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    /// Its place in the journal (increasing, never reused).
    pub seq: u64,
    /// True for a base (every row), false for a delta.
    pub base: bool,
    /// The rows ([`decode_rows`]).
    pub rows: Vec<u8>,
}

/// Rows as an entry stores them: `None` removes the row (deltas only).
type Rows = Vec<(ByteBuf, Option<ByteBuf>)>;

/// An entry taken when its layer froze, encoded later by the flush thread.
#[derive(Debug, Clone)]
pub struct PendingEntry {
    /// Its place in the journal.
    pub seq: u64,
    /// A base's rows, `None` for a delta: the tables as of the layer (sharing their nodes with
    /// the live tables).
    tables: Option<ResidentTables>,
    /// The journaled changes since the layer before, in the order apply made them: a delta's
    /// rows (a base keeps them too, for [`PendingEntry::encode_as_delta`]).
    changes: ChangeLog,
    /// About the memory it holds until the flush thread has written it, what the memtable
    /// accounts it at: the changes counted at the tables' mean row size, for a base too. (A
    /// base's version of the tables shares every node with the live tables but those changed
    /// since; a base's encoding, a buffer of the whole tables, exists only while the flush
    /// thread writes it, one at a time.)
    pub held_bytes: usize,
}

/// A changed row: set (`Some`) or removed (`None`), its bytes shared with the tables
/// (reference-counted).
type Change = (Arc<[u8]>, Option<Arc<[u8]>>);
/// Changed rows in the order they changed; a row changed twice is there twice, and replaying in
/// order leaves its last state.
type ChangeLog = Vec<Change>;

impl PendingEntry {
    /// True for a base (every row), false for a delta.
    pub fn is_base(&self) -> bool {
        self.tables.is_some()
    }

    /// The entry, encoded (a delta's rows: the changes since the layer before).
    pub fn encode(&self) -> JournalEntry {
        match &self.tables {
            Some(tables) => JournalEntry {
                seq: self.seq,
                base: true,
                rows: encode_base(tables),
            },
            None => self.encode_as_delta(),
        }
    }

    /// The entry encoded as a delta from the layer before, a base too (one the disk has no
    /// room for: its delta is what the file it would have replaced needs).
    pub fn encode_as_delta(&self) -> JournalEntry {
        let rows: Vec<(&serde_bytes::Bytes, Option<&serde_bytes::Bytes>)> = self
            .changes
            .iter()
            .map(|(key, value)| {
                (
                    serde_bytes::Bytes::new(key),
                    value.as_deref().map(serde_bytes::Bytes::new),
                )
            })
            .collect();
        JournalEntry {
            seq: self.seq,
            base: false,
            rows: codec::encode(&rows),
        }
    }
}

/// Every row of `tables`, as a base stores them.
fn encode_base(tables: &ResidentTables) -> Vec<u8> {
    let rows: Vec<(&serde_bytes::Bytes, Option<&serde_bytes::Bytes>)> = tables
        .iter()
        .filter(|(key, _)| !resident::is_derived(key))
        .map(|(k, v)| (serde_bytes::Bytes::new(k), Some(serde_bytes::Bytes::new(v))))
        .collect();
    codec::encode(&rows)
}

/// Applies the rows of an entry (a base replaces `tables` first). Derived rows are skipped:
/// entries of format 9 hold them, and [`ResidentTables::derive_index`] rebuilds them once the
/// journal is replayed.
pub fn replay(tables: &mut ResidentTables, entry: &JournalEntry) -> Result<()> {
    let rows: Rows = codec::decode("resident journal entry", &entry.rows)?;
    if entry.base {
        *tables = ResidentTables::default();
    }
    for (key, value) in rows {
        if resident::is_derived(&key) {
            continue;
        }
        match value {
            Some(value) => tables.put(key.into_vec(), value.into_vec()),
            None if entry.base => {
                return Err(StorageError::Corrupt {
                    what: "resident journal entry",
                    reason: "a base removes a row".into(),
                });
            }
            None => tables.remove(&key),
        }
    }
    Ok(())
}

/// The journal's bookkeeping: the next sequence number, what was written since the last base,
/// and the changes apply made since the last layer.
#[derive(Default)]
pub struct ResidentJournal {
    next_seq: u64,
    /// Bytes of the entries since the last base (the base at the tables' size in memory, deltas
    /// at what they write);
    /// `None` before the first base, which the next layer then writes.
    since_base: Option<usize>,
    /// The journaled changes since the last layer taken (or base written): the next delta.
    logged: ChangeLog,
    /// Changes of rows since then, each counted (a row set then removed counts twice; derived
    /// rows too).
    changes: usize,
    /// What the next delta writes at most: the key and value bytes (and framing) of each
    /// journaled change since then, each counted (derived rows are not journaled).
    logged_bytes: usize,
    /// Deltas taken since the last base.
    deltas_since_base: usize,
    /// Replaced soon (a snapshot install in progress): writes nothing ([`Self::idle`]).
    idle: bool,
}

impl std::fmt::Debug for ResidentJournal {
    /// Without the recorded changes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResidentJournal")
            .field("next_seq", &self.next_seq)
            .field("since_base", &self.since_base)
            .field("logged", &self.logged.len())
            .field("changes", &self.changes)
            .field("logged_bytes", &self.logged_bytes)
            .field("deltas_since_base", &self.deltas_since_base)
            .field("idle", &self.idle)
            .finish()
    }
}

impl ResidentJournal {
    /// A journal whose next entry is `next_seq` and must be a base (after a restart, a snapshot
    /// install, or for a new store).
    pub fn starting_at(next_seq: u64) -> ResidentJournal {
        ResidentJournal {
            next_seq,
            ..ResidentJournal::default()
        }
    }

    /// A journal with nothing to write until it is replaced (while a snapshot install swaps the
    /// state under it).
    pub fn idle(next_seq: u64) -> ResidentJournal {
        ResidentJournal {
            next_seq,
            since_base: Some(0),
            idle: true,
            ..ResidentJournal::default()
        }
    }

    /// Records that row `key` of the tables was set to `value`, sharing their bytes. O(1): a push
    /// onto the next delta (a derived row is only counted); the flush thread encodes it
    /// ([`PendingEntry::encode`]).
    pub fn note_set(&mut self, key: &Arc<[u8]>, value: &Arc<[u8]>) {
        self.changes = self.changes.saturating_add(1);
        if !resident::is_derived(key) {
            self.log(key.clone(), Some(value.clone()));
        }
    }

    /// Records that row `key` of the tables was removed. O(1); only a journaled row's key is
    /// copied (a derived row is only counted).
    pub fn note_removal(&mut self, key: &[u8]) {
        self.changes = self.changes.saturating_add(1);
        if !resident::is_derived(key) {
            self.log(Arc::from(key), None);
        }
    }

    fn log(&mut self, key: Arc<[u8]>, value: Option<Arc<[u8]>>) {
        let row = key.len() + value.as_ref().map_or(0, |v| v.len()) + ROW_FRAMING_BYTES;
        self.logged_bytes = self.logged_bytes.saturating_add(row);
        self.logged.push((key, value));
    }

    /// [`ResidentJournal::note_set`] or [`ResidentJournal::note_removal`] of copies.
    #[cfg(test)]
    pub fn note(&mut self, key: &[u8], value: Option<&[u8]>) {
        match value {
            Some(value) => self.note_set(&Arc::from(key), &Arc::from(value)),
            None => self.note_removal(key),
        }
    }

    /// About what the changes since the last layer hold in memory (the nodes of the tables they
    /// changed and, once the layer freezes, its entry): the changes at the tables' mean row
    /// size (at least [`MIN_DELTA_ROW_BYTES`] each), and never less than the recorded changes'
    /// own bytes, a slot each included (a burst of large replies stored and removed among many
    /// small ones holds more than the mean says). O(1).
    pub fn pending_bytes(&self, tables: &ResidentTables) -> usize {
        let row_bytes = (tables.bytes() / tables.len().max(1)).max(MIN_DELTA_ROW_BYTES);
        let estimate = self.changes.saturating_mul(row_bytes);
        let slots = self
            .logged
            .len()
            .saturating_mul(std::mem::size_of::<Change>());
        estimate.max(self.logged_bytes.saturating_add(slots))
    }

    /// True if the next layer has something to write.
    pub fn has_changes(&self) -> bool {
        self.changes > 0 || self.since_base.is_none()
    }

    /// The sequence number the next entry gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The entry that brings the persisted journal up to `tables` (the tables as of the layer
    /// being frozen), encoded at once: [`ResidentJournal::take_layer`] then
    /// [`PendingEntry::encode`].
    #[cfg(test)]
    pub fn layer_entry(&mut self, tables: &ResidentTables) -> Option<JournalEntry> {
        self.take_layer(tables).map(|pending| pending.encode())
    }

    /// The entry that brings the persisted journal up to `tables` (the tables as of the layer
    /// being frozen): a delta of the changed rows, or a new base once the deltas since the last
    /// one would exceed [`REBASE_FACTOR`] times the tables (plus [`REBASE_SLACK`]). `None` if
    /// nothing changed. Reads and encodes no row (the flush thread does): its time does not grow
    /// with the rows.
    pub fn take_layer(&mut self, tables: &ResidentTables) -> Option<PendingEntry> {
        if !self.has_changes() {
            return None;
        }
        let delta_bytes = self.pending_bytes(tables);
        let logged_bytes =
            std::mem::take(&mut self.logged_bytes).saturating_add(ENTRY_FRAMING_BYTES);
        self.changes = 0;
        // The next layer's log starts at this one's length: it does not regrow by doubling,
        // copying what it holds, under the memtable's lock.
        let next_log = ChangeLog::with_capacity(self.logged.len());
        let changes = std::mem::replace(&mut self.logged, next_log);
        let limit = REBASE_FACTOR
            .saturating_mul(tables.bytes())
            .saturating_add(REBASE_SLACK);
        let base = match self.since_base {
            None => true,
            Some(written) => written.saturating_add(logged_bytes) > limit,
        };
        self.since_base = if base {
            Some(tables.bytes())
        } else {
            self.since_base.map(|w| w.saturating_add(logged_bytes))
        };
        self.deltas_since_base = if base {
            0
        } else {
            self.deltas_since_base.saturating_add(1)
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        Some(PendingEntry {
            seq,
            tables: base.then(|| tables.clone()),
            changes,
            held_bytes: delta_bytes,
        })
    }

    /// Makes the next layer's entry a base, whatever the deltas since the last one. Nothing to
    /// do when the log already ends at a base and nothing changed since (the next layer
    /// writes nothing), or while the journal is idle: a snapshot install replaces it with its
    /// own base, and a base taken meanwhile would be the install's entry number written empty.
    pub fn rebase_next(&mut self) {
        let at_a_base = self.since_base.is_some() && self.deltas_since_base == 0;
        if self.idle || (at_a_base && self.changes == 0) {
            return;
        }
        self.since_base = None;
    }

    /// A base entry of `tables` (what a snapshot install starts the journal with).
    pub fn base(&mut self, tables: &ResidentTables) -> JournalEntry {
        self.changes = 0;
        self.logged_bytes = 0;
        self.logged = ChangeLog::new();
        self.deltas_since_base = 0;
        self.idle = false;
        self.since_base = Some(tables.bytes());
        let seq = self.next_seq;
        self.next_seq += 1;
        JournalEntry {
            seq,
            base: true,
            rows: encode_base(tables),
        }
    }
}

#[cfg(test)]
mod tests;
