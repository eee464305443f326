//! What an open does about how the node last stopped.
//!
//! After a clean stop, which [`write_clean_marker`] records as the last act of a graceful
//! shutdown (after the final sync), the state database is used as it is. An open removes the
//! marker durably before anything is written ([`take_clean_marker`]), so a crash after that
//! open is unclean again.
//!
//! Without the marker (a crash, `kill -9`, a power cut, a fatal stop), the state database is
//! read back first (`StateTree::check_kept`: fjall opens, every row of the active keyspace
//! reads, the reply memory's log reaches the entry the keyspace names and its replies decode).
//! If it does, it is kept ([`OpenKind::UncleanKept`]): fjall's ingestion makes each memtable
//! layer durable at once (its tables and the version naming them fsynced, `current` replaced
//! atomically), layers are ingested in order, and each carries its last applied log id, so
//! `state/` is the state as of some layer, and the consensus layer applies its log after that
//! id again. The log is never purged past it: a snapshot build returns (and the log behind it
//! may be purged) only once what it covers is in fjall (`StateTree::checkpoint`). The rule that
//! the state database is trusted only after a clean stop came from sled 0.34, the state
//! database before fjall, which was not crash consistent across a power cut (its flush was
//! `sync_file_range`, it rewrote segments in place).
//!
//! If it does not read back whole (or a data directory of a build before the marker), `state/`
//! is set aside and removed ([`set_aside_state`]) before fjall opens, and the state machine
//! starts empty; the consensus layer applies its whole log after it, which it can only if the
//! log was never purged: otherwise the node cannot start and is wiped to rejoin (it receives a
//! snapshot). This build keeps no snapshot file (the database is the snapshot, see
//! `StateTree::checkpoint`); a directory of an earlier build may hold its standing snapshot
//! files (`snapshot-*.bin`): the state is then rebuilt from the newest that is complete and
//! verified, chosen by the log position its header covers ([`newest_snapshots`]), and such a
//! kept state behind the newest file (a crash of a build that purged the log before its layers
//! were in fjall) is rebuilt from it too; the files are removed after the open
//! ([`remove_standing_snapshots`]).
//!
//! The reply memory (`replies/`) goes with the database's state: it is part of every snapshot
//! (its tables are exported with the others), and its journal files are an extension of the
//! database's state (they record the entries the database's layers name). A kept state reads
//! its journal up to the entry its last layer names (files after it are removed). A new
//! database names none, so opening the state tree removes every old journal file, and a rebuild starts
//! the journal afresh with a base of the snapshot's reply memory, as a snapshot install does;
//! replaying the log re-applies the requests after the snapshot, remembering their replies
//! again.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::dirs;
use crate::engine::KvPair;
use crate::error::{Result, StorageError};
use crate::store::snapshot;

/// The clean-stop marker, in the data directory.
pub const CLEAN_STOP_FILE: &str = "CLEAN_STOP";
/// The state database's (fjall's) directory, in the data directory.
pub const STATE_DIR: &str = "state";
/// Prefix of a `state/` set aside after an unclean stop (removed at once; one left by a crash
/// during the removal is removed by the next open).
const SET_ASIDE_PREFIX: &str = "state.unclean-";
/// Files of the data directory that are not data.
const NOT_DATA: [&str; 4] = ["FORMAT", "FORMAT.tmp", "LOCK", CLEAN_STOP_FILE];

/// How the open found the data directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenKind {
    /// Nothing stored yet (a first start): nothing to trust or rebuild.
    New,
    /// A clean stop: the state database is used as it is.
    Clean,
    /// No clean stop: the state database was discarded, the state machine is rebuilt from the
    /// newest snapshot and the log.
    Unclean,
    /// No clean stop, but the state database read back whole and is not behind the newest
    /// snapshot: kept as of its last durable layer; the log after it is applied again.
    UncleanKept,
}

impl OpenKind {
    /// A name for logs and metric labels.
    pub fn label(self) -> &'static str {
        match self {
            OpenKind::New => "new",
            OpenKind::Clean => "clean",
            OpenKind::Unclean => "unclean",
            OpenKind::UncleanKept => "unclean_kept",
        }
    }
}

/// What the consensus layer reads from a snapshot header: how far the snapshot reaches (to pick
/// the newest) and the consensus records the rebuilt state must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotCovers {
    /// Index of the last log entry the snapshot covers (`None`: none).
    pub last_index: Option<u64>,
    /// Records of the consensus layer written with the snapshot's rows (last applied id,
    /// membership).
    pub records: Vec<KvPair>,
}

/// What [`crate::store::Store::recover`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// How the open found the directory.
    pub kind: OpenKind,
    /// The snapshot the state was rebuilt from (unclean opens only; `None` there: no usable
    /// snapshot, the state starts empty and the whole log is applied).
    pub rebuilt_from: Option<PathBuf>,
    /// Rows loaded from it.
    pub entries: u64,
    /// Time from setting `state/` aside to the rebuilt state (zero unless unclean).
    pub took: Duration,
}

/// Removes the clean-stop marker durably (unlink, then fsync of `dir`); true if it was there.
pub fn take_clean_marker(dir: &Path) -> Result<bool> {
    match std::fs::remove_file(dir.join(CLEAN_STOP_FILE)) {
        Ok(()) => {
            dirs::sync_dir(dir)?;
            Ok(true)
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(err.into()),
    }
}

/// Records a clean stop: the marker file, fsynced, and `dir` fsynced.
pub fn write_clean_marker(dir: &Path) -> Result<()> {
    let path = dir.join(CLEAN_STOP_FILE);
    std::fs::write(&path, b"statestore stopped cleanly\n")?;
    std::fs::File::open(&path)?.sync_all()?;
    dirs::sync_dir(dir)?;
    Ok(())
}

/// Whether `dir` holds anything but markers and empty directories.
pub fn holds_data(dir: &Path) -> Result<bool> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if NOT_DATA.iter().any(|n| name == *n) {
            continue;
        }
        if !entry.file_type()?.is_dir() || std::fs::read_dir(entry.path())?.next().is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Renames `dir/state` aside (durably) and removes it; removes any earlier set-aside copy too.
pub fn set_aside_state(dir: &Path) -> Result<()> {
    let state = dir.join(STATE_DIR);
    if state.exists() {
        let aside = (0u32..)
            .map(|n| dir.join(format!("{SET_ASIDE_PREFIX}{n}")))
            .find(|path| !path.exists())
            .ok_or_else(|| StorageError::DataDir("no free name to set state/ aside".into()))?;
        std::fs::rename(&state, &aside)?;
        dirs::sync_dir(dir)?;
    }
    remove_set_aside(dir)
}

/// Removes the `state.unclean-*` directories in `dir` (durably).
pub fn remove_set_aside(dir: &Path) -> Result<()> {
    let mut removed = false;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with(SET_ASIDE_PREFIX)
        {
            std::fs::remove_dir_all(entry.path())?;
            removed = true;
        }
    }
    if removed {
        dirs::sync_dir(dir)?;
    }
    Ok(())
}

/// The snapshot files in `snapshot_dir` whose header reads and decodes, newest (furthest log
/// position) first; on equal positions the later name (ids end in the time they were made).
/// Files that do not read are skipped with a warning. The entries are not checked here: the
/// rebuild verifies each as it loads it.
pub fn newest_snapshots(
    snapshot_dir: &Path,
    covers: &dyn Fn(&[u8]) -> Result<SnapshotCovers>,
) -> Result<Vec<(PathBuf, SnapshotCovers)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(snapshot_dir)? {
        let path = entry?.path();
        if !is_standing_snapshot(&path) {
            continue;
        }
        match snapshot::read_header(&path).and_then(|file| covers(&file.header)) {
            Ok(covered) => found.push((path, covered)),
            Err(err) => {
                tracing::warn!(path = %path.display(), error = %err, "skipping a snapshot file whose header does not read");
            }
        }
    }
    found.sort_by(|(a_path, a), (b_path, b)| {
        (b.last_index, b_path.file_name()).cmp(&(a.last_index, a_path.file_name()))
    });
    Ok(found)
}

/// Whether `path` names a standing snapshot file an earlier build kept (`snapshot-*.bin`).
fn is_standing_snapshot(path: &Path) -> bool {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .is_some_and(|name| name.starts_with("snapshot-") && name.ends_with(".bin"))
}

/// Removes the standing snapshot files an earlier build kept in `snapshot_dir` (this build
/// keeps none; they are only read by the open right after an upgrade). Their blocks are freed
/// gradually ([`crate::gradual_remove`]).
pub fn remove_standing_snapshots(snapshot_dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(snapshot_dir)? {
        let path = entry?.path();
        if is_standing_snapshot(&path) {
            tracing::info!(path = %path.display(), "removing a snapshot file an earlier build kept (this build keeps none)");
            crate::gradual_remove::remove(&path)?;
        }
    }
    Ok(())
}

/// Whether a failed load means the file is damaged (try an older one) rather than the disk
/// failing.
pub fn is_damage(err: &StorageError) -> bool {
    match err {
        StorageError::Corrupt { .. } => true,
        StorageError::Io(io) => io.kind() == std::io::ErrorKind::UnexpectedEof,
        _ => false,
    }
}

#[cfg(test)]
mod tests;
