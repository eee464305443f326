//! Opening the state-machine database (fjall, an LSM tree) and the handles the rest of the crate
//! uses; the data-directory format marker and lock; what an open does after an unclean stop
//! (see `recovery`: the database's state is trusted only after a clean stop); and [`sync`], the
//! durability point.
//!
//! The memtable layers, nearly every byte the state machine writes, bypass fjall's journal: each
//! is ingested as a table file of its own, which fjall `fsync`s with the version naming it (see
//! [`Tree::ingest_layer`](crate::store::tree::Tree::ingest_layer)), and fjall compacts tables in
//! its own worker threads. The few other writes (the record naming the current snapshot, the
//! switch to a freshly installed tree) are batches through fjall's journal, without a flush per
//! batch (`manual_journal_persist`); where one must be durable, and at a clean stop, statestore
//! calls [`sync`]: fjall's `persist(SyncAll)`, which `fsync`s the journal.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::dirs;
use crate::error::{Result, StorageError};
use crate::store::memtable::MemtableConfig;
use crate::store::recovery::{self, OpenKind, Recovery, STATE_DIR, SnapshotCovers};
use crate::store::state::{StateTree, StateView};

/// Name of the marker file that records the data-directory layout.
const FORMAT_FILE: &str = "FORMAT";
/// Layout written by this build: fjall holds the state machine only; the Raft log is a WAL in
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
/// record rewritten whole by every memtable layer; format 8 held the state machine in
/// sled 0.34. Both are converted on open by rebuilding the state from their newest snapshot and
/// the Raft log, as after an unclean stop: their snapshots and log entries are this build's.
/// Format 9 wrote the reply-expiry index into the reply memory's log, which this build
/// rebuilds from the replies instead (`resident::is_derived`); it reads such a log as it is, so
/// a format 9 directory only gets the new marker. A build of format 9 would lose the index
/// reading this one's log: the marker keeps it out.)
const FORMAT: &str = "statestore-data 10\n";

/// Formats this build converts on open by rebuilding the state machine (see [`FORMAT`]).
const CONVERTED_FORMATS: [&str; 2] = ["statestore-data 8\n", "statestore-data 7\n"];

/// Formats this build reads as they are: only the marker is rewritten (see [`FORMAT`]).
const READ_AS_IS_FORMATS: [&str; 1] = ["statestore-data 9\n"];

/// Where and how to open the store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Data directory; holds `state/` (fjall), `snapshots/` and the consensus layer's files.
    pub dir: PathBuf,
    /// fjall's block cache in bytes.
    pub cache_capacity_bytes: u64,
    /// The write-back layer in front of fjall.
    pub memtable: MemtableConfig,
}

impl StoreConfig {
    /// A store in `dir` with a block cache of `cache_capacity_bytes` and default memtable.
    pub fn new(dir: impl Into<PathBuf>, cache_capacity_bytes: u64) -> StoreConfig {
        StoreConfig {
            dir: dir.into(),
            cache_capacity_bytes,
            memtable: MemtableConfig::default(),
        }
    }
}

/// Name of the lock file that keeps a second process off the data directory.
const LOCK_FILE: &str = "LOCK";

/// The opened store: the state-machine database and the snapshot directory.
#[derive(Clone)]
pub struct Store {
    db: fjall::Database,
    dir: PathBuf,
    memtable: MemtableConfig,
    state: Arc<OnceLock<StateTree>>,
    /// The data directory's lock, held while any handle (the state tree's too) lives.
    lock: Arc<std::fs::File>,
    /// How the open found the directory, and whether the rebuild is still to run.
    opened: Arc<Opened>,
}

/// What [`Store::open`] found, for [`Store::recover`].
struct Opened {
    kind: OpenKind,
    /// When setting `state/` aside started (unclean opens).
    started: Instant,
    /// Set once [`Store::recover`] ran.
    recovered: Mutex<Option<Recovery>>,
}

impl Store {
    /// Opens (or creates) the store under `config.dir`. Refuses a data directory written in
    /// another layout, or one another process holds. Without the clean-stop marker of the last
    /// run (or when converting an earlier format), the database's state is read back first
    /// ([`StateTree::check_kept`]): whole, it is kept as of its last durable layer; otherwise it
    /// is set aside and the store opens empty. Call [`Store::recover`] before using the state
    /// (see `recovery`).
    pub fn open(config: &StoreConfig) -> Result<Store> {
        dirs::create_durable(&config.dir)?;
        let lock = lock_when_released(&config.dir)?;
        check_format(&config.dir)?;
        let started = Instant::now();
        let kind = if recovery::take_clean_marker(&config.dir)? {
            OpenKind::Clean
        } else if recovery::holds_data(&config.dir)? {
            match check_kept_state(config) {
                Ok(rows) => {
                    tracing::warn!(
                        dir = %config.dir.display(),
                        rows,
                        took_ms = started.elapsed().as_millis() as u64,
                        "the last run did not stop cleanly (no clean-stop marker: a crash, kill, \
                         power cut or fatal error); its state database read back whole and is \
                         kept as of its last durable layer; the Raft log after it is applied again"
                    );
                    OpenKind::UncleanKept
                }
                Err(reason) => {
                    tracing::warn!(
                        dir = %config.dir.display(),
                        reason = %reason,
                        "the last run did not stop cleanly (no clean-stop marker: a crash, kill, \
                         power cut or fatal error) and its state database does not read back \
                         whole: it is removed and the state rebuilt from the newest snapshot and \
                         the Raft log"
                    );
                    OpenKind::Unclean
                }
            }
        } else {
            OpenKind::New
        };
        if kind == OpenKind::Unclean {
            recovery::set_aside_state(&config.dir)?;
        } else {
            recovery::remove_set_aside(&config.dir)?;
        }
        dirs::create_durable(&config.dir.join("snapshots"))?;
        dirs::create_durable(&config.dir.join(STATE_DIR))?;
        let db = open_when_released(&config.dir.join(STATE_DIR), config.cache_capacity_bytes)?;
        Ok(Store {
            db,
            dir: config.dir.clone(),
            memtable: config.memtable,
            state: Arc::default(),
            lock: Arc::new(lock),
            opened: Arc::new(Opened {
                kind,
                started,
                recovered: Mutex::new(None),
            }),
        })
    }

    /// How the open found the data directory.
    pub fn open_kind(&self) -> OpenKind {
        self.opened.kind
    }

    /// After an unclean open whose state database did not read back whole, rebuilds the state
    /// machine from the newest snapshot file in `snapshots/` that is complete and verified
    /// (newest by the log position `covers` reads from its header; a damaged one is skipped for
    /// the next older); with none, the state stays empty. This build keeps no snapshot file
    /// (the database is the snapshot), so such files are those an earlier build left: after
    /// an upgrade. The rebuilt state holds the snapshot's rows and `covers`' consensus records
    /// only. A state kept after an unclean stop is rebuilt so too if it is behind the newest
    /// snapshot (`applied` reads the log index its consensus records say it applied: a crash
    /// of an earlier build that purged the log past its layers). Then every such file is
    /// removed. Runs once (later calls return the first report). Blocking.
    pub fn recover(
        &self,
        covers: &dyn Fn(&[u8]) -> Result<SnapshotCovers>,
        applied: &dyn Fn(&StateView) -> Result<Option<u64>>,
    ) -> Result<Recovery> {
        let mut recovered = self
            .opened
            .recovered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(done) = recovered.as_ref() {
            return Ok(done.clone());
        }
        let report = self.rebuild_if_needed(covers, applied)?;
        *recovered = Some(report.clone());
        // Only disk space is at stake: the next open tries again.
        if let Err(err) = recovery::remove_standing_snapshots(&self.dir.join("snapshots")) {
            tracing::warn!(error = %err, "could not remove the snapshot files an earlier build kept");
        }
        Ok(report)
    }

    fn rebuild_if_needed(
        &self,
        covers: &dyn Fn(&[u8]) -> Result<SnapshotCovers>,
        applied: &dyn Fn(&StateView) -> Result<Option<u64>>,
    ) -> Result<Recovery> {
        let mut report = Recovery {
            kind: self.opened.kind,
            rebuilt_from: None,
            entries: 0,
            took: Duration::ZERO,
        };
        if matches!(self.opened.kind, OpenKind::New | OpenKind::Clean) {
            return Ok(report);
        }
        let state = self.state()?;
        let snapshots = recovery::newest_snapshots(&self.dir.join("snapshots"), covers)?;
        if self.opened.kind == OpenKind::UncleanKept {
            let applied = applied(&state.view())?;
            let newest = snapshots
                .first()
                .and_then(|(_, covered)| covered.last_index);
            if newest <= applied {
                report.took = self.opened.started.elapsed();
                return Ok(report);
            }
            tracing::warn!(
                ?applied,
                ?newest,
                "the kept state database is behind the newest snapshot: rebuilt from it"
            );
            report.kind = OpenKind::Unclean;
        }
        for (path, covered) in snapshots {
            match state.install_snapshot(&path, covered.records) {
                Ok(file) => {
                    report.rebuilt_from = Some(file.path);
                    report.entries = file.entries;
                    break;
                }
                Err(err) if recovery::is_damage(&err) => {
                    tracing::warn!(path = %path.display(), error = %err, "a snapshot file is damaged; trying an older one");
                }
                Err(err) => return Err(err),
            }
        }
        report.took = self.opened.started.elapsed();
        match &report.rebuilt_from {
            Some(path) => tracing::warn!(
                snapshot = %path.display(),
                rows = report.entries,
                took_ms = report.took.as_millis() as u64,
                "state rebuilt from the newest snapshot after an unclean stop; the Raft log after it is applied again"
            ),
            None if self.opened.kind == OpenKind::UncleanKept => {
                report.kind = OpenKind::UncleanKept;
                tracing::error!(
                    took_ms = report.took.as_millis() as u64,
                    "no snapshot file installs: the kept state database stays as it is, behind the newest snapshot; if the Raft log is purged past it the node cannot start (wipe it and let it rejoin)"
                );
            }
            None => tracing::warn!(
                took_ms = report.took.as_millis() as u64,
                "no usable state after an unclean stop: the state starts empty and the whole Raft log is applied again; if the log is purged the node cannot start (wipe it and let it rejoin)"
            ),
        }
        Ok(report)
    }

    /// Records a clean stop: stops a snapshot export in progress (its unfinished file removed:
    /// [`StateTree::abandon_exports`]) and the table-release thread, writes every buffered change
    /// durably (as [`Store::flush`]; the reply memory's log as one new base, its older file
    /// removed: [`StateTree::rebase_reply_log`]), then
    /// the clean-stop marker (fsynced with its directory), so the next open trusts the state
    /// database. The last thing a graceful shutdown does with the store: nothing may be
    /// written after it.
    pub fn close_clean(&self) -> Result<()> {
        if let Some(state) = self.state.get() {
            state.abandon_exports();
            state.stop_table_release();
            state.rebase_reply_log();
        }
        self.flush()?;
        recovery::write_clean_marker(&self.dir)
    }

    /// The state machine tree and snapshot directory (one per store: every call returns the
    /// same tree).
    pub fn state(&self) -> Result<StateTree> {
        if let Some(state) = self.state.get() {
            return Ok(state.clone());
        }
        let opened = StateTree::open(
            &self.db,
            self.lock.clone(),
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
            None => sync(&self.db),
        }
    }

    /// Bytes the state-machine database occupies on disk (its journals and table files).
    pub fn size_on_disk(&self) -> Result<u64> {
        Ok(self.db.disk_space()?)
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// [`StateTree::check_kept`] on the data directory's `state/`, in a database opened for it
/// alone and closed again; a panic of the database's own recovery counts as a failure.
fn check_kept_state(config: &StoreConfig) -> Result<u64> {
    let state_dir = config.dir.join(STATE_DIR);
    if !state_dir.is_dir() {
        return Err(StorageError::Failed("no state database".to_owned()));
    }
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let db = open_when_released(&state_dir, config.cache_capacity_bytes)?;
        StateTree::check_kept(&db, &config.dir.join("replies"))
    }))
    .unwrap_or_else(|_| {
        Err(StorageError::Failed(
            "the state database's own recovery panicked".to_owned(),
        ))
    })
}

/// The most fjall keeps in its journals (the smallest it accepts).
const JOURNAL_CAP_BYTES: u64 = 64 << 20;

/// How long [`open_when_released`] waits for an earlier handle's threads to let go.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Takes the data directory's lock; while another handle holds it, tries again for up to
/// [`RELEASE_WAIT`] (a store dropped in this process lets go only once its last handle does).
/// Another process holding the directory is refused, after the wait.
fn lock_when_released(dir: &Path) -> Result<std::fs::File> {
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    let deadline = std::time::Instant::now() + RELEASE_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StorageError::DataDir(format!(
                    "{} is locked: another statestore uses this data directory",
                    path.display()
                )));
            }
            Err(std::fs::TryLockError::Error(err)) => return Err(err.into()),
        }
    }
}

/// Opens fjall in `path` with a block cache of `cache_bytes`; while its lock is held, tries
/// again for up to [`RELEASE_WAIT`]: a database dropped in this process releases its lock only
/// once fjall's worker threads stop (a restart in tests). Another process holding the directory
/// is still refused, after the wait.
fn open_when_released(path: &Path, cache_bytes: u64) -> Result<fjall::Database> {
    let deadline = std::time::Instant::now() + RELEASE_WAIT;
    loop {
        let opened = fjall::Database::builder(path)
            .cache_size(cache_bytes)
            // Batches stay in fjall's journal buffer until [`sync`]: the state's layers bypass
            // the journal (each is an ingestion), so only a clean stop and the records `sync`
            // covers (the current snapshot's name, an install's switch) need it on disk.
            .manual_journal_persist(true)
            // fjall's smallest cap on its journals (default 512 MiB): past it, it flushes the
            // memtables the oldest journal holds so the journal can go. Disk, not durability.
            .max_journaling_size(JOURNAL_CAP_BYTES)
            .open();
        match opened {
            Err(fjall::Error::Locked) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            opened => return Ok(opened?),
        }
    }
}

/// Makes every batch written to `db` so far durable: the durability point of the state machine
/// (fjall `fsync`s its journal; its table files were synced when written).
pub(crate) fn sync(db: &fjall::Database) -> Result<()> {
    db.persist(fjall::PersistMode::SyncAll)?;
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

/// Accepts an empty directory or one of this format (writing the marker if new) or of
/// [`READ_AS_IS_FORMATS`] (rewriting it), converts one of [`CONVERTED_FORMATS`]; refuses
/// anything else. A conversion removes the clean-stop marker and the old state database
/// (durably, before the new format's marker is written), so the open that follows rebuilds the
/// state from the snapshot and the log.
fn check_format(dir: &Path) -> Result<()> {
    dirs::create_durable(dir)?;
    let marker = dir.join(FORMAT_FILE);
    match std::fs::read_to_string(&marker) {
        Ok(found) if found == FORMAT => Ok(()),
        Ok(found) if READ_AS_IS_FORMATS.contains(&found.as_str()) => {
            tracing::info!(
                dir = %dir.display(),
                from = found.trim(),
                to = FORMAT.trim(),
                "upgrading the data directory's marker: its files are read as they are"
            );
            write_marker(dir, &marker)
        }
        Ok(found) if CONVERTED_FORMATS.contains(&found.as_str()) => {
            tracing::info!(
                dir = %dir.display(),
                from = found.trim(),
                to = FORMAT.trim(),
                "converting the data directory: the state machine is rebuilt into fjall from the \
                 newest snapshot and the Raft log"
            );
            recovery::take_clean_marker(dir)?;
            // Its state database (sled's files) goes before the new marker is written, so no
            // open of this build ever reads it back.
            recovery::set_aside_state(dir)?;
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
    dirs::sync_dir(dir)?;
    Ok(())
}

#[cfg(test)]
mod tests;
