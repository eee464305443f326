//! One keyspace of the state database (fjall) and the few operations the store makes on it:
//! point reads, ordered range reads copied out, atomic batches of writes through fjall's
//! journal, memtable layers and snapshots ingested as table files, and a wait for compaction.
//!
//! A [`Tree`] carries its database: a fjall keyspace alone does not keep the journal and worker
//! threads alive, and a handle that outlived them would fail its writes.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::engine::KvPair;
use crate::error::{Result, StorageError};

/// Longest key fjall stores (`lsm_tree::InternalKey::new` asserts it: a longer key would panic
/// the thread that writes or seeks it). [`Tree`] refuses longer keys as errors and maps longer
/// range bounds to equivalent ones.
pub const MAX_STORED_KEY_BYTES: usize = u16::MAX as usize;

/// fjall's memtable per keyspace (its default is 64 MiB). It holds only the few writes that go
/// through fjall's journal ([`Tree::write`], [`Tree::insert`]): the store's own memtable layers
/// are ingested as table files ([`Tree::ingest_layer`]), and each ingestion flushes this one
/// first.
const MEMTABLE_BYTES: u64 = 16 << 20;

/// Size of the table files compaction writes (fjall's default is 64 MiB). fjall writes a table
/// and then `fsync`s it whole, so the disk takes a table's bytes at once, and a Raft log
/// `fdatasync` queued behind them waits: with 64 MiB tables the nodes' worst log fsync in a
/// 1M-key load was 196-198 ms. Tables the size of a memtable layer bound that burst. (An
/// ingestion, [`Tree::ingest_layer`] and [`Tree::load_sorted`], cuts its tables at 64 MiB:
/// lsm-tree's ingestion does not take the strategy's size. A layer is far smaller; a bulk load
/// of a snapshot writes 64 MiB tables.)
const TABLE_BYTES: u64 = 16 << 20;

/// How often [`Tree::wait_for_level0_below`] looks at level 0 again.
const LEVEL0_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// A keyspace and the database that owns it (cheap to clone: both are shared handles).
#[derive(Clone)]
pub struct Tree {
    db: fjall::Database,
    keyspace: fjall::Keyspace,
}

/// The options of a state keyspace but its compaction strategy.
fn keyspace_options() -> fjall::KeyspaceCreateOptions {
    fjall::KeyspaceCreateOptions::default()
        .max_memtable_size(MEMTABLE_BYTES)
        // LZ4 at every level: fjall's default compresses only from level 2, and the layers are
        // ingested with the first level's policy (a 1M-key store kept all its tables in levels 0
        // and 1). Even with random 64-byte values, each record's version (the node's name) and
        // the keys compress: `state/` after a 1M-key load and stop went from 95 to 78 MiB, the
        // load rate unchanged (issue 30, BENCHMARKS.md). fjall records these options when it
        // creates a keyspace: a state keyspace made by an earlier build keeps its policy until a
        // snapshot install or a rebuild replaces it.
        .data_block_compression_policy(fjall::config::CompressionPolicy::all(
            fjall::CompressionType::Lz4,
        ))
}

impl Tree {
    /// Opens (or creates) the keyspace `name` of `db`, its directory's entry durable.
    pub fn open(db: &fjall::Database, name: &str) -> Result<Tree> {
        let keyspace = db.keyspace(name, || {
            keyspace_options().compaction_strategy(std::sync::Arc::new(
                fjall::compaction::Leveled::default().with_table_target_size(TABLE_BYTES),
            ))
        })?;
        // fjall 3.1.13 creates a keyspace's directory (`keyspaces/<id>`) without syncing the
        // directory that holds it: a power cut could drop the keyspace with every table in it,
        // while the database still names it (t93 found a kept state empty after a cut).
        if let Some(keyspaces) = keyspace.path().parent() {
            crate::dirs::sync_dir(keyspaces)?;
        }
        Ok(Tree {
            db: db.clone(),
            keyspace,
        })
    }

    /// Removes the keyspace `name` of `db` if it exists (its files go once no handle is left).
    pub fn drop_named(db: &fjall::Database, name: &str) -> Result<()> {
        if db.keyspace_exists(name) {
            let tree = Tree::open(db, name)?;
            db.delete_keyspace(tree.keyspace)?;
        }
        Ok(())
    }

    /// Removes this keyspace (its files go once no handle is left).
    pub fn delete(self) -> Result<()> {
        self.db.delete_keyspace(self.keyspace)?;
        Ok(())
    }

    /// The value of `key`, copied out (a key too long to be stored has none).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if key.len() > MAX_STORED_KEY_BYTES {
            return Ok(None);
        }
        Ok(self.keyspace.get(key)?.map(|value| value.to_vec()))
    }

    /// Sets `key` to `value` on its own (one batch of one write).
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_stored_key(key)?;
        self.keyspace.insert(key, value)?;
        Ok(())
    }

    /// The rows with `start <= key < end`, in key order, copied out. The iterator reads the table
    /// files as they were when it was created (so no layer ingested after that), but fjall's
    /// memtable, which holds only journalled writes ([`Tree::write`]), as it is when read.
    pub fn range(&self, start: &[u8], end: &[u8]) -> impl Iterator<Item = Result<KvPair>> + use<> {
        // An empty range is asked of fjall as `start..start`, which it answers empty.
        let end = end.max(start);
        let bounds = (stored_lower_bound(start), stored_upper_bound(end));
        self.keyspace.range(bounds).map(|guard| {
            let (key, value) = guard.into_inner()?;
            Ok((key.to_vec(), value.to_vec()))
        })
    }

    /// Writes `writes` (`None` removes the key) as one atomic batch: readers see all of them or
    /// none. Not durable until [`crate::store::db::sync`].
    pub fn write<'a>(
        &self,
        writes: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    ) -> Result<()> {
        let mut batch = self.db.batch();
        for (key, value) in writes {
            check_stored_key(key)?;
            match value {
                Some(value) => batch.insert(&self.keyspace, key, value),
                None => batch.remove(&self.keyspace, key),
            }
        }
        batch.commit()?;
        Ok(())
    }

    /// Writes `layer` (`None` removes the key) straight into a new table file: fjall's
    /// ingestion, which bypasses its journal and memtable. Readers see all of the writes or none
    /// (the table joins the keyspace in one version change), and they are durable when this
    /// returns: lsm-tree `fsync`s the table and the version file naming it. The keys come in
    /// ascending order, as ingestion requires, because a `BTreeMap` holds them.
    ///
    /// Through the journal, every layer was written twice (journal, then fjall's memtable
    /// flushed to a table), and the active journal file, which fjall rotates only past
    /// 64,000,000 bytes, held up to 61 MiB per node at rest (BENCHMARKS.md).
    pub fn ingest_layer(&self, layer: &BTreeMap<Vec<u8>, Option<Vec<u8>>>) -> Result<()> {
        if layer.is_empty() {
            // lsm-tree would leave the table file it creates up front, empty.
            return Ok(());
        }
        for key in layer.keys() {
            check_stored_key(key)?;
        }
        let mut ingestion = self.keyspace.start_ingestion()?;
        for (key, value) in layer {
            match value {
                Some(value) => ingestion.write(key.as_slice(), value.as_slice())?,
                None => ingestion.write_tombstone(key.as_slice())?,
            }
        }
        ingestion.finish()?;
        Ok(())
    }

    /// Bulk-loads an empty keyspace: `fill` is handed a sink for rows in strictly ascending key
    /// order, which fjall writes straight into sorted table files (no journal, no memtable). A
    /// row out of order is refused (as a corrupt snapshot): fjall would panic on it. If `fill`
    /// fails, the rows loaded so far stay in the keyspace: delete it.
    pub fn load_sorted<T>(
        &self,
        fill: impl FnOnce(&mut dyn FnMut(&[u8], &[u8]) -> Result<()>) -> Result<T>,
    ) -> Result<T> {
        let mut ingestion = self.keyspace.start_ingestion()?;
        let mut rows = SortedRows::default();
        let filled = fill(&mut |key, value| {
            rows.admit(key)?;
            ingestion.write(key, value)?;
            Ok(())
        })?;
        ingestion.finish()?;
        Ok(filled)
    }

    /// Tables in level 0 (each ingested layer is one until compaction merges it down).
    pub fn level0_tables(&self) -> usize {
        self.keyspace.l0_table_count()
    }

    /// Waits while level 0 holds `max` tables or more, for compaction to merge them down;
    /// whether it waited. Logs each wait, and warns once after 10 s.
    pub fn wait_for_level0_below(&self, max: usize) -> bool {
        let tables = self.level0_tables();
        if tables < max {
            return false;
        }
        let started = std::time::Instant::now();
        let mut warned = false;
        while self.level0_tables() >= max {
            if !warned && started.elapsed() > std::time::Duration::from_secs(10) {
                tracing::warn!(
                    tables,
                    "the state flush has waited 10 s for compaction of level 0"
                );
                warned = true;
            }
            std::thread::sleep(LEVEL0_POLL);
        }
        tracing::info!(
            tables,
            waited_ms = started.elapsed().as_millis() as u64,
            "the state flush waited for compaction of level 0"
        );
        true
    }

    /// This keyspace's table files: in its directory (one listing) and in its current set.
    pub fn table_files(&self) -> Result<TableFiles> {
        let on_disk = match std::fs::read_dir(self.keyspace.path().join("tables")) {
            Ok(files) => files.count(),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => 0,
            Err(err) => return Err(err.into()),
        };
        Ok(TableFiles {
            on_disk,
            in_set: self.keyspace.table_count(),
        })
    }

    /// Lets fjall delete the table files its compactions replaced, in every keyspace of the
    /// database; whether it asked fjall to (not while the memtable an earlier call rotated is
    /// still waiting for fjall's flush: fjall halts a keyspace's writes at four of them, and
    /// its workers flush only between compactions).
    ///
    /// lsm-tree keeps every version of a tree's table set that an open read may still use,
    /// and forgets old versions only in a compaction or memtable flush, up to the watermark of
    /// the reads open when that started: a compaction's own input tables outlive it until the
    /// next compaction, and after the last compaction of a load, until a restart (at the end of
    /// a 1M-key load, 27-48 MiB of them per node, 0.36-0.63× the data). When a keyspace's
    /// memtable is rotated, fjall moves the watermark up (to the newest write if no read is open
    /// anywhere, else to the oldest open read) and forgets the versions older than it in all
    /// keyspaces; a table file goes once no reader holds it. So this writes one small record
    /// into this keyspace (a rotation needs something to rotate) and rotates its memtable
    /// (fjall flushes it to a small table). Call it on a keyspace of few journalled writes (the
    /// store's records).
    pub fn release_replaced_tables(&self) -> Result<bool> {
        if self.keyspace.sealed_memtable_count() > 0 {
            return Ok(false);
        }
        self.insert(RELEASE_MARKER, &[])?;
        Ok(self.keyspace.rotate_memtable()?)
    }
}

/// A keyspace's table files: in its directory and in its current table set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableFiles {
    /// Files in the keyspace's `tables/` directory.
    pub on_disk: usize,
    /// Tables in its current set.
    pub in_set: usize,
}

impl TableFiles {
    /// Files beyond the current set: replaced by a compaction and not deleted yet, or being
    /// written (a compaction's output, an ingestion's table) and not in the set yet.
    pub fn beyond_set(&self) -> usize {
        self.on_disk.saturating_sub(self.in_set)
    }
}

/// The record [`Tree::release_replaced_tables`] writes so that there is a memtable to rotate.
const RELEASE_MARKER: &[u8] = b"release_replaced_tables";

/// Checks the rows of a bulk load ([`Tree::load_sorted`]) one at a time, before fjall sees
/// them: keys strictly ascending and storable (fjall would panic on either). A refused row is a
/// corrupt snapshot.
#[derive(Default)]
pub(crate) struct SortedRows {
    last: Option<Vec<u8>>,
}

impl SortedRows {
    /// Admits `key` as the next row's, or refuses it.
    pub(crate) fn admit(&mut self, key: &[u8]) -> Result<()> {
        if self.last.as_deref().is_some_and(|last| key <= last) {
            return Err(StorageError::Corrupt {
                what: "snapshot",
                reason: "rows are not in ascending key order".to_owned(),
            });
        }
        if key.is_empty() || key.len() > MAX_STORED_KEY_BYTES {
            return Err(StorageError::Corrupt {
                what: "snapshot",
                reason: format!("a key of {} bytes", key.len()),
            });
        }
        let last = self.last.get_or_insert_with(Vec::new);
        last.clear();
        last.extend_from_slice(key);
        Ok(())
    }
}

/// Refuses a key fjall cannot store (it asserts keys are neither empty nor too long).
fn check_stored_key(key: &[u8]) -> Result<()> {
    if key.is_empty() || key.len() > MAX_STORED_KEY_BYTES {
        return Err(StorageError::UnstorableKey {
            len: key.len(),
            max: MAX_STORED_KEY_BYTES,
        });
    }
    Ok(())
}

/// `key >= start` for every storable key, as a bound fjall accepts: a longer `start` is
/// replaced by its first [`MAX_STORED_KEY_BYTES`] bytes, excluded (a storable key at least
/// `start` is greater than that prefix, and the prefix itself is less than `start`).
fn stored_lower_bound(start: &[u8]) -> Bound<Vec<u8>> {
    match start.get(..MAX_STORED_KEY_BYTES) {
        Some(prefix) if start.len() > MAX_STORED_KEY_BYTES => Bound::Excluded(prefix.to_vec()),
        _ => Bound::Included(start.to_vec()),
    }
}

/// `key < end` for every storable key, as a bound fjall accepts: a longer `end` is replaced by
/// its first [`MAX_STORED_KEY_BYTES`] bytes, included (that prefix is less than `end`, and a
/// storable key greater than it is greater than `end`).
fn stored_upper_bound(end: &[u8]) -> Bound<Vec<u8>> {
    match end.get(..MAX_STORED_KEY_BYTES) {
        Some(prefix) if end.len() > MAX_STORED_KEY_BYTES => Bound::Included(prefix.to_vec()),
        _ => Bound::Excluded(end.to_vec()),
    }
}

/// A tree named `t` in a temporary fjall database, removed when the database is dropped.
#[cfg(test)]
pub(crate) fn temporary_tree() -> Tree {
    // The directory is kept past this function: fjall removes it when the database is dropped.
    let dir = tempfile::tempdir().expect("tempdir").keep();
    let db = fjall::Database::builder(dir)
        .temporary(true)
        .open()
        .expect("temporary fjall");
    Tree::open(&db, "t").expect("tree")
}

#[cfg(test)]
mod tests;
