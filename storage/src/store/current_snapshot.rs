//! Which snapshot file is current, made current in log order only.
//!
//! Two writers finish snapshots independently: a locally built export (on its own thread) and
//! an install of a leader's snapshot. Each makes its file current (one durable record) and
//! deletes the other `snapshot-*` files. Unordered, a build begun before an install and
//! finished after it would make the older file current and delete the installed one, or find
//! its own file deleted by the install before it opens it. So the compare ("is mine at least
//! as far in the log as the current one?") and the set happen under one lock, comparing the
//! last log index each file covers; every read of the current file and its opening happen
//! under the same lock, so a returned handle is always to a file that existed and stays
//! readable (an open file outlives its deletion).
//!
//! A file is reserved under its final name before it gets that name (see
//! [`CurrentSnapshot::reserve`]) and offered through the reservation: making another file
//! current deletes every other `snapshot-*` file except reserved ones, so a finished file
//! waiting for its offer (an install renames its file into place before the state switches to
//! it, for crash safety) is never deleted under it.
//!
//! A file no longer current is unlinked under the lock and its blocks freed gradually by a
//! background thread ([`gradual_remove`]: one unlink of 640 MiB held a Raft log `fdatasync` for
//! up to 22-73 ms), unless a handle handed out for reading still holds it: every handle this
//! module opens takes a shared lock on its file, under the same lock, so a file being sent to a
//! follower is only unlinked and stays whole for it.
//!
//! The position of the current file is known from the first time this process sets it. Before
//! that it is unknown and any new file wins: after an open, the state is at least as far as the
//! current snapshot file (a clean open keeps the state that built or installed it; an unclean
//! one rebuilds from the newest file), so a build or an install from it is never older.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use crate::error::{Result, StorageError};
use crate::gradual_remove;
use crate::store::snapshot::{self, SnapshotFile};
use crate::store::tree::Tree;

/// The store record naming the current snapshot file.
const CURRENT_SNAPSHOT_RECORD: &str = "current_snapshot";

/// A snapshot file opened while it was current: its header and a handle to read it from.
#[derive(Debug)]
pub struct OpenSnapshot {
    /// What the file holds (`entries` is 0 when only the header was read).
    pub file: SnapshotFile,
    /// The file, open at its start.
    pub handle: File,
}

/// What became of a finished snapshot offered as the current one.
#[derive(Debug)]
pub enum Offered {
    /// It is the current snapshot now.
    Current(OpenSnapshot),
    /// A snapshot further in the log was already current: the offered file was deleted and
    /// this is the current one.
    Superseded(OpenSnapshot),
}

impl Offered {
    /// The current snapshot, whichever it is.
    pub fn into_current(self) -> OpenSnapshot {
        match self {
            Offered::Current(open) | Offered::Superseded(open) => open,
        }
    }
}

/// Whether the offered snapshot must be at least as far in the log as the current one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// A local build: it loses to a newer current snapshot.
    IfNotOlder,
    /// An install: the state is the installed snapshot now, so its file is current whatever
    /// was current before.
    Always,
}

/// What the record of the current snapshot names.
enum Recorded {
    /// No snapshot was made.
    None,
    /// The named file, opened.
    Open(OpenSnapshot),
    /// The named file is gone.
    Missing(PathBuf),
}

/// How far the current snapshot reaches, as far as this process knows.
#[derive(Debug, Clone, Copy)]
enum Position {
    /// Not set by this process yet (see the module documentation).
    Unknown,
    /// Covers the log up to this index (`None`: no entry).
    Covers(Option<u64>),
}

/// What the lock guards besides the record and the files.
#[derive(Debug)]
struct Order {
    position: Position,
    /// Names of finished files reserved and not offered yet.
    reserved: BTreeSet<String>,
}

/// The current snapshot of one store: its record, its directory, and the lock ordering both.
pub struct CurrentSnapshot {
    records: Tree,
    snapshot_dir: PathBuf,
    order: Mutex<Order>,
}

/// A snapshot file name kept from deletion until it is offered or the reservation is dropped.
pub struct Reservation<'a> {
    current: &'a CurrentSnapshot,
    name: String,
}

impl CurrentSnapshot {
    /// The current snapshot of the store whose records are in `records`.
    pub fn new(records: &Tree, snapshot_dir: &Path) -> Self {
        CurrentSnapshot {
            records: records.clone(),
            snapshot_dir: snapshot_dir.to_owned(),
            order: Mutex::new(Order {
                position: Position::Unknown,
                reserved: BTreeSet::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Order> {
        // A panic while setting leaves the record and files as one of the two snapshots.
        self.order
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Reserves `path`'s name before a finished snapshot is renamed to it; offer the file
    /// through the reservation.
    pub fn reserve(&self, path: &Path) -> Reservation<'_> {
        let name = file_name(path);
        self.lock().reserved.insert(name.clone());
        Reservation {
            current: self,
            name,
        }
    }

    /// The current snapshot, opened (`None`: none was made). A recorded file that is gone (only
    /// a hand or a damaged file system removes it: a file is in place before the record names
    /// it, and removed only after the record moves on) is [`StorageError::Corrupt`], as is one
    /// whose header does not read: the caller replaces it.
    pub fn open(&self) -> Result<Option<OpenSnapshot>> {
        let _order = self.lock();
        match self.open_recorded()? {
            Recorded::None => Ok(None),
            Recorded::Open(open) => Ok(Some(open)),
            Recorded::Missing(path) => Err(StorageError::Corrupt {
                what: "current snapshot",
                reason: format!("its file {} is missing", path.display()),
            }),
        }
    }

    fn open_recorded(&self) -> Result<Recorded> {
        let Some(name) = self.records.get(CURRENT_SNAPSHOT_RECORD.as_bytes())? else {
            return Ok(Recorded::None);
        };
        let path = self
            .snapshot_dir
            .join(String::from_utf8_lossy(&name).as_ref());
        match File::open(&path) {
            Ok(handle) => {
                gradual_remove::lock_for_reading(&handle);
                Ok(Recorded::Open(OpenSnapshot {
                    file: snapshot::read_header(&path)?,
                    handle,
                }))
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(Recorded::Missing(path)),
            Err(err) => Err(err.into()),
        }
    }

    fn offer(&self, file: SnapshotFile, last_index: Option<u64>, rule: Rule) -> Result<Offered> {
        let mut order = self.lock();
        let name = file_name(&file.path);
        order.reserved.remove(&name);
        // If the newer file is gone (removed from outside), the offered one is better than none.
        if let (Rule::IfNotOlder, Position::Covers(current)) = (rule, order.position)
            && current > last_index
            && let Recorded::Open(current) = self.open_recorded()?
        {
            remove_if_present(&file.path);
            tracing::info!(
                superseded = %file.path.display(),
                current = %current.file.path.display(),
                "a snapshot finished after a newer one became current; keeping the newer one"
            );
            return Ok(Offered::Superseded(current));
        }
        self.records
            .insert(CURRENT_SNAPSHOT_RECORD.as_bytes(), name.as_bytes())?;
        // The record names the new file from here on, even if the sync below fails.
        order.position = Position::Covers(last_index);
        crate::store::db::sync(self.records.db())?;
        for entry in std::fs::read_dir(&self.snapshot_dir)? {
            let entry = entry?;
            let file_name = entry.file_name().to_string_lossy().into_owned();
            if file_name.starts_with("snapshot-")
                && file_name != name
                && !order.reserved.contains(&file_name)
            {
                remove_if_present(&entry.path());
            }
        }
        let handle = File::open(&file.path)?;
        gradual_remove::lock_for_reading(&handle);
        Ok(Offered::Current(OpenSnapshot { file, handle }))
    }
}

impl Reservation<'_> {
    /// Offers the finished, durable snapshot `file` (at the reserved name) covering the log up
    /// to `last_index` as the current one under `rule`. When it becomes current the record
    /// says so durably and every other `snapshot-*` file not reserved is deleted; when it is
    /// superseded its own file is deleted. Unfinished `*.tmp` files are left alone: they
    /// belong to exports and transfers still running (an open removes those a stopped process
    /// left).
    pub fn offer(self, file: SnapshotFile, last_index: Option<u64>, rule: Rule) -> Result<Offered> {
        self.current.offer(file, last_index, rule)
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.current.lock().reserved.remove(&self.name);
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Deletes a snapshot file no longer current: unlinked now, its blocks freed gradually in the
/// background unless a reader still holds it (see [`gradual_remove`]). A failure only leaves
/// disk space in use (the next snapshot made current tries again), so it is logged, not
/// returned.
fn remove_if_present(path: &Path) {
    if let Err(err) = gradual_remove::remove(path) {
        tracing::warn!(path = %path.display(), error = %err, "could not delete an old snapshot file");
    }
}

#[cfg(test)]
mod tests;
