//! The state machine tree: every keyspace table in one sled tree (see
//! [`crate::keyspace::layout`]) behind a write-back [`Memtable`], plus snapshot export and
//! install.
//!
//! Installing a snapshot loads it into a fresh tree and then switches the "active tree"
//! record, so a crash mid-install leaves the old state intact.

use std::iter::Peekable;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::error::{Result, StorageError};
use crate::keyspace::layout::Table;
use crate::keyspace::{KvPair, OrderedRead, RangeIter};
use crate::sled::memtable::{Lookup, Memtable, MemtableConfig, Write, Writes};
use crate::sled::snapshot::{self, SnapshotFile, SnapshotWriter};

const ACTIVE_TREE_RECORD: &str = "active_state_tree";
const CURRENT_SNAPSHOT_RECORD: &str = "current_snapshot";
const INSTALL_BATCH: usize = 10_000;

/// Read access to the state (cheap to clone, no locks held between reads): the memtable's
/// writes over the sled tree.
#[derive(Clone)]
pub struct StateView {
    memtable: Arc<Memtable>,
    tree: ::sled::Tree,
}

impl OrderedRead for StateView {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.memtable.get(key) {
            Lookup::Found(value) => Ok(value),
            Lookup::Absent => Ok(self.tree.get(key)?.map(|v| v.to_vec())),
        }
    }

    fn range<'a>(&'a self, start: &[u8], end: &[u8]) -> RangeIter<'a> {
        if start >= end {
            return Box::new(std::iter::empty());
        }
        let bounds = (
            Bound::Included(start.to_vec()),
            Bound::Excluded(end.to_vec()),
        );
        let base: RangeIter<'a> = Box::new(self.tree.range::<Vec<u8>, _>(bounds).map(|entry| {
            entry
                .map(|(k, v)| (k.to_vec(), v.to_vec()))
                .map_err(StorageError::from)
        }));
        Box::new(Layered {
            base: base.peekable(),
            memory: self.memtable.range(start, end).into_iter().peekable(),
        })
    }
}

/// Merges sled's entries with the memtable's writes; the memtable wins on equal keys and its
/// removals hide sled's entries.
struct Layered<'a> {
    base: Peekable<RangeIter<'a>>,
    memory: Peekable<std::vec::IntoIter<Write>>,
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
    db: ::sled::Db,
    db_path: PathBuf,
    records: ::sled::Tree,
    active: Arc<RwLock<(String, ::sled::Tree)>>,
    memtable: Arc<Memtable>,
    snapshot_dir: PathBuf,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.memtable.stop();
    }
}

/// Moves frozen memtable layers into the active sled tree, one atomic batch each. A failed
/// write is retried (the layer stays readable and writers eventually wait): nothing is dropped.
fn flush_loop(memtable: Arc<Memtable>, active: std::sync::Weak<RwLock<(String, ::sled::Tree)>>) {
    while let Some(frozen) = memtable.next_to_write() {
        let Some(active) = active.upgrade() else {
            return;
        };
        let tree = match active.read() {
            Ok(guard) => guard.1.clone(),
            Err(poisoned) => poisoned.into_inner().1.clone(),
        };
        let mut batch = ::sled::Batch::default();
        for (key, write) in frozen.iter() {
            match write {
                Some(value) => batch.insert(key.as_slice(), value.as_slice()),
                None => batch.remove(key.as_slice()),
            }
        }
        match tree.apply_batch(batch) {
            Ok(()) => memtable.written(),
            Err(err) => {
                tracing::error!(error = %err, "writing the state machine's memtable to sled failed; retrying");
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
}

impl StateTree {
    pub(crate) fn open(
        db: &::sled::Db,
        db_path: &Path,
        snapshot_dir: &Path,
        memtable: MemtableConfig,
    ) -> Result<StateTree> {
        let records = db.open_tree("store_records")?;
        let name = match records.get(ACTIVE_TREE_RECORD)? {
            Some(name) => String::from_utf8_lossy(&name).into_owned(),
            None => "state_0".to_owned(),
        };
        let tree = db.open_tree(&name)?;
        remove_temporary_files(snapshot_dir)?;
        let active = Arc::new(RwLock::new((name, tree)));
        let memtable = Arc::new(Memtable::new(memtable));
        {
            let memtable = memtable.clone();
            let active = Arc::downgrade(&active);
            std::thread::Builder::new()
                .name("state-flush".into())
                .spawn(move || flush_loop(memtable, active))?;
        }
        Ok(StateTree {
            inner: Arc::new(Inner {
                db: db.clone(),
                db_path: db_path.to_owned(),
                records,
                active,
                memtable,
                snapshot_dir: snapshot_dir.to_owned(),
            }),
        })
    }

    fn active(&self) -> (String, ::sled::Tree) {
        match self.inner.active.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// A read view of the current state.
    pub fn view(&self) -> StateView {
        StateView {
            memtable: self.inner.memtable.clone(),
            tree: self.active().1,
        }
    }

    /// Applies the writes of one transaction atomically (`None` removes): readers see all of
    /// them or none; sled receives them with the rest of their memtable layer.
    pub fn commit(&self, writes: Writes) -> Result<()> {
        self.inner.memtable.commit(writes);
        Ok(())
    }

    /// Waits until every committed write is in sled (not yet fsynced: see [`Self::sync`]).
    pub fn flush_memtable(&self) {
        self.inner.memtable.flush_all();
    }

    /// Bytes of applied writes not yet in sled.
    pub fn memtable_bytes(&self) -> usize {
        self.inner.memtable.bytes()
    }

    /// Times apply waited for the memtable to make room.
    pub fn memtable_stalls(&self) -> u64 {
        self.inner.memtable.stalls()
    }

    /// Writes a snapshot of the whole keyspace (without the consensus records) named `id`,
    /// makes it the current snapshot and deletes older ones. Blocking; callers hold off
    /// applies while it runs so the dump is consistent.
    pub fn export_snapshot(&self, id: &str, header: &[u8]) -> Result<SnapshotFile> {
        self.flush_memtable();
        let view = self.view();
        let tmp = self
            .inner
            .snapshot_dir
            .join(format!("{}.tmp", sanitize(id)));
        let final_path = self
            .inner
            .snapshot_dir
            .join(format!("snapshot-{}.bin", sanitize(id)));
        let mut writer = SnapshotWriter::create(&tmp, header)?;
        let start = [0u8];
        let end = [Table::ConsensusState.prefix()];
        for entry in view.range(&start, &end) {
            let (key, value) = entry?;
            writer.push(&key, &value)?;
        }
        let file = writer.finish(&final_path, header)?;
        self.set_current_snapshot(&file.path)?;
        Ok(file)
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

    /// Replaces the state with the snapshot at `received` (verified first), adds the
    /// consensus layer's records, keeps the file as the current snapshot under `id`.
    /// Blocking. Crash-safe: the switch to the new tree is one durable record update.
    pub fn install_snapshot(
        &self,
        received: &Path,
        id: &str,
        consensus_records: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<SnapshotFile> {
        std::fs::File::open(received)?.sync_all()?; // it stays on as the current snapshot
        snapshot::read_entries(received, |_| Ok(()))?; // verify before touching anything
        self.inner.memtable.discard(); // the snapshot replaces everything applied so far

        let (old_name, _) = self.active();
        let generation = old_name
            .strip_prefix("state_")
            .and_then(|g| g.parse::<u64>().ok())
            .unwrap_or(0);
        let new_name = format!("state_{}", generation + 1);
        self.inner.db.drop_tree(&new_name)?; // leftover of an interrupted install
        let tree = self.inner.db.open_tree(&new_name)?;
        let mut batch = ::sled::Batch::default();
        let mut pending = 0;
        let file = snapshot::read_entries(received, |(key, value)| {
            batch.insert(key, value);
            pending += 1;
            if pending >= INSTALL_BATCH {
                tree.apply_batch(std::mem::take(&mut batch))?;
                pending = 0;
            }
            Ok(())
        })?;
        for (key, value) in consensus_records {
            batch.insert(key, value);
        }
        tree.apply_batch(batch)?;
        self.sync()?;
        self.inner
            .records
            .insert(ACTIVE_TREE_RECORD, new_name.as_bytes())?;
        self.sync()?;
        match self.inner.active.write() {
            Ok(mut guard) => *guard = (new_name, tree),
            Err(poisoned) => *poisoned.into_inner() = (new_name, tree),
        }
        self.inner.db.drop_tree(&old_name)?;

        let final_path = self
            .inner
            .snapshot_dir
            .join(format!("snapshot-{}.bin", sanitize(id)));
        std::fs::rename(received, &final_path)?;
        std::fs::File::open(&self.inner.snapshot_dir)?.sync_all()?;
        self.set_current_snapshot(&final_path)?;
        Ok(SnapshotFile {
            path: final_path,
            ..file
        })
    }

    /// Makes every write so far durable (memtable included).
    pub fn sync(&self) -> Result<()> {
        self.flush_memtable();
        crate::sled::db::sync(&self.inner.db, &self.inner.db_path)
    }

    /// The current snapshot, if one was built or installed.
    pub fn current_snapshot(&self) -> Result<Option<SnapshotFile>> {
        let Some(name) = self.inner.records.get(CURRENT_SNAPSHOT_RECORD)? else {
            return Ok(None);
        };
        let path = self
            .inner
            .snapshot_dir
            .join(String::from_utf8_lossy(&name).as_ref());
        if !path.exists() {
            return Ok(None);
        }
        snapshot::read_header(&path).map(Some)
    }

    fn set_current_snapshot(&self, path: &Path) -> Result<()> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        self.inner
            .records
            .insert(CURRENT_SNAPSHOT_RECORD, name.as_bytes())?;
        self.sync()?;
        for entry in std::fs::read_dir(&self.inner.snapshot_dir)? {
            let entry = entry?;
            let file_name = entry.file_name().to_string_lossy().into_owned();
            let stale_snapshot = file_name.starts_with("snapshot-") && file_name != name;
            let stale_temp = file_name.ends_with(".tmp") && !file_name.starts_with("incoming-");
            if stale_snapshot || stale_temp {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(())
    }
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
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sled::{Store, StoreConfig};

    fn writes(pairs: &[(&str, Option<&str>)]) -> Writes {
        pairs
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec())))
            .collect()
    }

    fn scan(view: &StateView) -> Vec<(String, String)> {
        view.range(b"a", b"z")
            .map(|entry| {
                let (k, v) = entry.expect("read");
                (
                    String::from_utf8_lossy(&k).into_owned(),
                    String::from_utf8_lossy(&v).into_owned(),
                )
            })
            .collect()
    }

    /// Reads see the newest write whether it is in memory or in sled, across a flush.
    #[test]
    fn reads_merge_the_memtable_over_sled_before_and_after_a_flush() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&StoreConfig::new(dir.path(), 4 << 20)).expect("store");
        let state = store.state().expect("state");
        state
            .commit(writes(&[
                ("a", Some("1")),
                ("b", Some("2")),
                ("c", Some("3")),
            ]))
            .expect("commit");
        state.flush_memtable();
        assert_eq!(state.memtable_bytes(), 0, "everything moved to sled");
        // now in memory only: an overwrite, a removal and a new key between sled's keys
        state
            .commit(writes(&[
                ("a", Some("one")),
                ("b", None),
                ("bb", Some("22")),
            ]))
            .expect("commit");
        let view = state.view();
        let expected = vec![
            ("a".to_owned(), "one".to_owned()),
            ("bb".to_owned(), "22".to_owned()),
            ("c".to_owned(), "3".to_owned()),
        ];
        assert_eq!(scan(&view), expected);
        assert_eq!(
            view.get(b"b").expect("read"),
            None,
            "the removal hides sled's value"
        );
        assert!(state.memtable_bytes() > 0);
        state.flush_memtable();
        assert_eq!(state.memtable_bytes(), 0);
        assert_eq!(scan(&state.view()), expected, "same state once in sled");
    }
}
