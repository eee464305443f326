//! Opening the state-machine database and the handles the rest of the crate uses; the
//! data-directory format marker; and [`sync`], a flush that really reaches the disk.
//!
//! sled 0.34 "flushes" with `sync_file_range`, which neither flushes the device's write cache
//! nor the file's metadata, and writes large nodes as files under `blobs/` that it never
//! fsyncs. Where statestore needs a state-machine write to be durable (the record naming the
//! current snapshot, the switch to a freshly installed tree) it calls [`sync`]: sled's flush,
//! then `fdatasync` of the data file, every blob file and the directories.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::error::{Result, StorageError};
use crate::sled::memtable::MemtableConfig;
use crate::sled::state::StateTree;

/// Name of the marker file that records the data-directory layout.
const FORMAT_FILE: &str = "FORMAT";
/// Layout written by this build: sled holds the state machine only; the Raft log is a WAL in
/// `raft-log/`; the keyspace meta counts registrations and the reply memory, the replicated
/// limits include their caps, and reply-expiry index entries hold the reply's counted size;
/// the device-bound queue tables and their meta record sit next to the keyspace, and log
/// entries may carry `Mutation::Device`; a device row carries its queued messages' delivery
/// state and message rows only their content (the queues' indexes live in memory); a
/// KEYNOTIFY registration row holds the store's highest version when it was made, each observed
/// key has a registration count, and the replicated limits carry the per-key observer cap.
/// (Format 1 kept the Raft log in sled; format 2 had none of the counters and caps, so neither
/// its state, nor its snapshots, nor the `SetLimits` entries of its log decode here; format 3
/// has no device-bound queues, and a build of format 3 cannot read the log or snapshots of this
/// one, so the two must not share a cluster; format 4 kept a lock-token index for messages and
/// tokens without the message's place, so a settlement applies differently there and replicas
/// of the two would diverge; format 5 stored each message's delivery state in its message row
/// and kept four index tables of the queues in sled, which this build neither writes nor reads;
/// format 6 has no per-key observer cap in its limits and meta, issued lock tokens without a
/// secret and remembered replies without the digest of their request, so neither its state,
/// nor its snapshots, nor its log entries decode here; format 7 kept the reply memory in one
/// record rewritten whole by every memtable layer, which this build reads and converts to the
/// resident-tables journal when it opens such a directory.)
const FORMAT: &str = "statestore-data 8\n";

/// Formats this build converts on open (their snapshots and log entries are this build's).
const CONVERTED_FORMATS: [&str; 1] = ["statestore-data 7\n"];

/// Where and how to open the store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Data directory; holds `state/` (sled), `snapshots/` and the consensus layer's files.
    pub dir: PathBuf,
    /// sled page cache size in bytes (sled's own default is 1 GiB; set it explicitly).
    pub cache_capacity_bytes: u64,
    /// The write-back layer in front of sled.
    pub memtable: MemtableConfig,
}

impl StoreConfig {
    /// A store in `dir` with a sled cache of `cache_capacity_bytes` and default memtable.
    pub fn new(dir: impl Into<PathBuf>, cache_capacity_bytes: u64) -> StoreConfig {
        StoreConfig {
            dir: dir.into(),
            cache_capacity_bytes,
            memtable: MemtableConfig::default(),
        }
    }
}

/// The opened store: the state-machine database and the snapshot directory.
#[derive(Clone)]
pub struct Store {
    db: ::sled::Db,
    dir: PathBuf,
    memtable: MemtableConfig,
    state: Arc<OnceLock<StateTree>>,
}

impl Store {
    /// Opens (or creates) the store under `config.dir`. Refuses a data directory written in
    /// another layout.
    pub fn open(config: &StoreConfig) -> Result<Store> {
        check_format(&config.dir)?;
        std::fs::create_dir_all(config.dir.join("snapshots"))?;
        let sled_config = ::sled::Config::new()
            .path(config.dir.join("state"))
            .cache_capacity(config.cache_capacity_bytes)
            // The state machine is rebuilt from the last snapshot and the Raft log after a
            // crash, so its own flushes only bound how much replay a restart costs.
            .flush_every_ms(Some(1_000))
            .mode(::sled::Mode::HighThroughput);
        let db = open_when_released(&sled_config)?;
        Ok(Store {
            db,
            dir: config.dir.clone(),
            memtable: config.memtable,
            state: Arc::default(),
        })
    }

    /// The state machine tree and snapshot directory (one per store: every call returns the
    /// same tree).
    pub fn state(&self) -> Result<StateTree> {
        if let Some(state) = self.state.get() {
            return Ok(state.clone());
        }
        let opened = StateTree::open(
            &self.db,
            &self.dir.join("state"),
            &self.dir.join("snapshots"),
            &self.dir.join("replies"),
            self.memtable,
        )?;
        Ok(self.state.get_or_init(|| opened).clone())
    }

    /// Writes every buffered change (the memtable included) to disk and makes it durable
    /// (see [`sync`]). Blocking.
    pub fn flush(&self) -> Result<()> {
        match self.state.get() {
            Some(state) => state.sync(),
            None => sync(&self.db, &self.dir.join("state")),
        }
    }

    /// Bytes the state-machine database occupies on disk.
    pub fn size_on_disk(&self) -> Result<u64> {
        Ok(self.db.size_on_disk()?)
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// How long [`open_when_released`] waits for an earlier handle's threads to let go.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Opens sled; while its file lock is held, tries again for up to [`RELEASE_WAIT`]: a store
/// dropped in this process releases the lock only once sled's own I/O threads finish (a
/// restart in tests, a snapshot install's reopen). Another process holding the directory is
/// still refused, after the wait.
fn open_when_released(config: &::sled::Config) -> Result<::sled::Db> {
    let deadline = std::time::Instant::now() + RELEASE_WAIT;
    loop {
        match config.open() {
            Err(::sled::Error::Io(err))
                if is_lock_held(&err) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            opened => return Ok(opened?),
        }
    }
}

/// Whether sled refused to open because another handle holds its file lock. sled 0.34 reports
/// it only as an `Other` error whose text names it (`config.rs`: "could not acquire lock on
/// ...: Os { code: 11, kind: WouldBlock, .. }"), so the text is what can be matched.
fn is_lock_held(err: &std::io::Error) -> bool {
    err.kind() == std::io::ErrorKind::WouldBlock
        || err.to_string().starts_with("could not acquire lock on")
}

/// Flushes `db` (stored at `path`) and fsyncs its files: the durability point of the state
/// machine.
pub(crate) fn sync(db: &::sled::Db, path: &Path) -> Result<()> {
    db.flush()?;
    sync_files(path)
}

fn sync_files(path: &Path) -> Result<()> {
    File::open(path.join("db"))?.sync_data()?;
    let blobs = path.join("blobs");
    if let Ok(entries) = std::fs::read_dir(&blobs) {
        for entry in entries {
            // sled deletes blobs it no longer needs at any time: a vanished one needs no sync.
            match File::open(entry?.path()) {
                Ok(blob) => blob.sync_data()?,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => return Err(err.into()),
            }
        }
        File::open(&blobs)?.sync_all()?;
    }
    File::open(path)?.sync_all()?;
    Ok(())
}

/// The data formats of earlier builds, each with what this build changed since.
const EARLIER_FORMATS: [(&str, &str); 5] = [
    (
        "statestore-data 6\n",
        "before the per-key observer cap and the registration floors, whose lock tokens \
         carried no secret and whose remembered replies did not hold the digest of their request",
    ),
    (
        "statestore-data 5\n",
        "whose device-bound queues kept their indexes in the database and each message's \
         delivery state in its message row",
    ),
    (
        "statestore-data 4\n",
        "whose message lock tokens did not name their message",
    ),
    (
        "statestore-data 3\n",
        "before the device-bound message queues",
    ),
    (
        "statestore-data 2\n",
        "before the registration and reply-memory caps",
    ),
];

/// What changed since `marker`, when it names an earlier format.
fn earlier_format(marker: &str) -> Option<&'static str> {
    EARLIER_FORMATS
        .iter()
        .find(|(format, _)| *format == marker)
        .map(|(_, why)| *why)
}

/// Accepts an empty directory or one of this format (writing the marker if new), converts one
/// of [`CONVERTED_FORMATS`]; refuses anything else.
fn check_format(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let marker = dir.join(FORMAT_FILE);
    match std::fs::read_to_string(&marker) {
        Ok(found) if found == FORMAT => Ok(()),
        Ok(found) if CONVERTED_FORMATS.contains(&found.as_str()) => {
            tracing::info!(
                dir = %dir.display(),
                from = found.trim(),
                to = FORMAT.trim(),
                "converting the data directory (the reply memory moves to its journal)"
            );
            write_marker(dir, &marker)
        }
        Ok(found) if let Some(why) = earlier_format(&found) => Err(StorageError::DataDir(format!(
            "{} says `{}`: written by an earlier statestore, {why}; this build reads `{}` \
                 and does not convert it (nodes of the two formats cannot share a cluster). \
                 Move it aside and start this node empty with --join (it receives a snapshot \
                 from a cluster of this build), or start a new cluster",
            marker.display(),
            found.trim(),
            FORMAT.trim()
        ))),
        Ok(found) => Err(StorageError::DataDir(format!(
            "{} says `{}`; this build reads `{}`",
            marker.display(),
            found.trim(),
            FORMAT.trim()
        ))),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            if dir.join("db").exists() {
                return Err(StorageError::DataDir(format!(
                    "{} holds a data directory of an older statestore (Raft log in sled); \
                     move it aside and start this node empty with --join, or restore it from \
                     a snapshot of the cluster",
                    dir.display()
                )));
            }
            write_marker(dir, &marker)
        }
        Err(err) => Err(err.into()),
    }
}

/// Writes this build's format marker durably (through a temporary name, so a crash never leaves
/// a torn marker).
fn write_marker(dir: &Path, marker: &Path) -> Result<()> {
    let tmp = dir.join(format!("{FORMAT_FILE}.tmp"));
    std::fs::write(&tmp, FORMAT)?;
    File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, marker)?;
    File::open(dir)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests;
