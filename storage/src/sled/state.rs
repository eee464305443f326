//! The state machine tree: every keyspace table in one sled tree (see
//! [`crate::keyspace::layout`]), written by atomic batches, plus snapshot export and install.
//!
//! Installing a snapshot loads it into a fresh tree and then switches the "active tree"
//! record, so a crash mid-install leaves the old state intact.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use crate::error::{Result, StorageError};
use crate::keyspace::layout::Table;
use crate::keyspace::{OrderedRead, RangeIter};
use crate::sled::snapshot::{self, SnapshotFile, SnapshotWriter};

const ACTIVE_TREE_RECORD: &str = "active_state_tree";
const CURRENT_SNAPSHOT_RECORD: &str = "current_snapshot";
const INSTALL_BATCH: usize = 10_000;

/// Read access to one version of the state tree (cheap to clone, no locks held).
#[derive(Clone)]
pub struct StateView(::sled::Tree);

impl OrderedRead for StateView {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.0.get(key)?.map(|v| v.to_vec()))
    }

    fn range<'a>(&'a self, start: &[u8], end: &[u8]) -> RangeIter<'a> {
        if start >= end {
            return Box::new(std::iter::empty());
        }
        let bounds = (
            Bound::Included(start.to_vec()),
            Bound::Excluded(end.to_vec()),
        );
        Box::new(self.0.range::<Vec<u8>, _>(bounds).map(|entry| {
            entry
                .map(|(k, v)| (k.to_vec(), v.to_vec()))
                .map_err(StorageError::from)
        }))
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
    active: RwLock<(String, ::sled::Tree)>,
    snapshot_dir: PathBuf,
}

impl StateTree {
    pub(crate) fn open(db: &::sled::Db, db_path: &Path, snapshot_dir: &Path) -> Result<StateTree> {
        let records = db.open_tree("store_records")?;
        let name = match records.get(ACTIVE_TREE_RECORD)? {
            Some(name) => String::from_utf8_lossy(&name).into_owned(),
            None => "state_0".to_owned(),
        };
        let tree = db.open_tree(&name)?;
        remove_temporary_files(snapshot_dir)?;
        Ok(StateTree {
            inner: Arc::new(Inner {
                db: db.clone(),
                db_path: db_path.to_owned(),
                records,
                active: RwLock::new((name, tree)),
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
        StateView(self.active().1)
    }

    /// Applies the writes of one transaction atomically (`None` removes).
    pub fn commit(&self, writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>) -> Result<()> {
        let mut batch = ::sled::Batch::default();
        for (key, write) in writes {
            match write {
                Some(value) => batch.insert(key, value),
                None => batch.remove(key),
            }
        }
        self.active().1.apply_batch(batch)?;
        Ok(())
    }

    /// Writes a snapshot of the whole keyspace (without the consensus records) named `id`,
    /// makes it the current snapshot and deletes older ones. Blocking; callers hold off
    /// applies while it runs so the dump is consistent.
    pub fn export_snapshot(&self, id: &str, header: &[u8]) -> Result<SnapshotFile> {
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

    /// Makes every write so far durable.
    fn sync(&self) -> Result<()> {
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
