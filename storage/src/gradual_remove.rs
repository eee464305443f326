//! Removing large files without holding up other files' `fdatasync`: the file is unlinked, then
//! cut down [`CUT_BYTES`] at a time with a pause between cuts, so its blocks are freed in small
//! file-system transactions instead of one.
//!
//! Why: on ext4 freeing a file's blocks is journalled, and a Raft log `fdatasync` issued
//! meanwhile waits for that journal commit. On this project's test machine (quiet, 221-byte
//! append + `fdatasync` in a loop, `bench/disk-latency/fsync_under_unlink.py`) one unlink of a
//! 640 MiB file held an append for up to 22-73 ms (median 56 of 7 runs), of 80 MiB for 15-22
//! ms; cut 16 MiB at a time, the worst append took 4-10 ms and 4-5 ms. A snapshot file of 10M
//! keys is about 600 MB, and the old one is removed after every new snapshot. RocksDB's `DeleteScheduler` (`bytes_max_delete_chunk`)
//! does the same.
//!
//! The cuts run on one background thread (`Reaper`): whoever removes a file only unlinks it.
//!
//! A file another handle may still read (a snapshot being sent to a follower) must not be cut:
//! readers of such files take a shared `flock` ([`lock_for_reading`]), and the remover cuts only
//! a file it could lock exclusively; otherwise it only unlinks it (its blocks are freed when the
//! last reader closes it, as before).

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rustix::fs::FlockOperation;

/// Bytes freed per cut.
pub const CUT_BYTES: u64 = 16 << 20;

/// Pause between two cuts (the journal commits in between).
pub const CUT_PAUSE: Duration = Duration::from_millis(5);

/// The lengths a file of `len` bytes is cut to, one after another, ending at 0 (nothing for an
/// empty file).
fn cut_lengths(len: u64, step: u64) -> impl Iterator<Item = u64> {
    let step = step.max(1);
    let mut left = len;
    std::iter::from_fn(move || {
        if left == 0 {
            return None;
        }
        left = left.saturating_sub(step);
        Some(left)
    })
}

/// A file unlinked from its directory whose blocks are still to be freed ([`Unlinked::free`]).
/// Dropped instead, its blocks are freed at once when its handle closes.
#[derive(Debug)]
struct Unlinked {
    file: File,
}

impl Unlinked {
    /// Frees the file's blocks, [`CUT_BYTES`] at a time, pausing [`CUT_PAUSE`] between cuts.
    /// Blocking: the [`Reaper`] calls it on its own thread.
    fn free(self) -> io::Result<()> {
        self.free_in_steps(CUT_BYTES, CUT_PAUSE)
    }

    fn free_in_steps(self, step: u64, pause: Duration) -> io::Result<()> {
        let len = self.file.metadata()?.len();
        for (i, cut_to) in cut_lengths(len, step).enumerate() {
            if i > 0 {
                std::thread::sleep(pause);
            }
            self.file.set_len(cut_to)?;
        }
        Ok(())
    }
}

/// Files whose blocks one background thread frees, one after another, so that no caller
/// (apply, the memtable's flush, an export, an install, an open) waits for the cuts or holds a
/// lock meanwhile.
struct Reaper {
    to_free: SyncSender<(Unlinked, u64)>,
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "joined by tests only: the process's reaper runs until exit"
        )
    )]
    thread: std::thread::JoinHandle<()>,
    pending: Arc<Pending>,
}

/// What a reaper has queued or is freeing.
#[derive(Debug, Default)]
struct Pending {
    files: AtomicU64,
    bytes: AtomicU64,
}

impl Pending {
    fn add(&self, bytes: u64) {
        self.files.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    fn done(&self, bytes: u64) {
        self.files.fetch_sub(1, Ordering::Relaxed);
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// Unlinked files waiting for the reaper; beyond this a file is freed at once (dropped), as an
/// unlink would. Each holds one file descriptor.
pub const REAPER_QUEUE: usize = 64;

impl Reaper {
    /// Starts the thread.
    fn start() -> io::Result<Reaper> {
        let (to_free, queue) = sync_channel::<(Unlinked, u64)>(REAPER_QUEUE);
        let pending = Arc::new(Pending::default());
        let freeing = pending.clone();
        let thread = std::thread::Builder::new()
            .name("file-reaper".into())
            .spawn(move || {
                for (unlinked, bytes) in queue {
                    if let Err(err) = unlinked.free() {
                        tracing::warn!(error = %err, "freeing a removed file's blocks gradually failed (they are freed as its handle closes)");
                    }
                    freeing.done(bytes);
                }
            })?;
        Ok(Reaper {
            to_free,
            thread,
            pending,
        })
    }

    /// Queues `unlinked` to be freed; false (and freed at once) if the queue is full.
    fn free_later(&self, unlinked: Unlinked) -> bool {
        let bytes = unlinked.file.metadata().map_or(0, |meta| meta.len());
        self.pending.add(bytes);
        match self.to_free.try_send((unlinked, bytes)) {
            Ok(()) => true,
            Err(TrySendError::Full((unlinked, _)) | TrySendError::Disconnected((unlinked, _))) => {
                tracing::debug!("the file reaper's queue is full; a removed file is freed at once");
                drop(unlinked);
                self.pending.done(bytes);
                false
            }
        }
    }

    /// Files queued or being freed, and their bytes when queued.
    fn pending(&self) -> (u64, u64) {
        (
            self.pending.files.load(Ordering::Relaxed),
            self.pending.bytes.load(Ordering::Relaxed),
        )
    }

    /// Frees what is queued, then stops the thread (the process's reaper runs until exit).
    #[cfg(test)]
    fn finish(self) {
        drop(self.to_free);
        if self.thread.join().is_err() {
            tracing::warn!("the file reaper panicked");
        }
    }
}

/// The process's reaper, started on first use (`None` if its thread could not be started:
/// files are then freed at once).
fn reaper() -> Option<&'static Reaper> {
    static REAPER: OnceLock<Option<Reaper>> = OnceLock::new();
    REAPER
        .get_or_init(|| {
            Reaper::start()
                .inspect_err(|err| {
                    tracing::warn!(error = %err, "no file reaper thread; removed files are freed at once");
                })
                .ok()
        })
        .as_ref()
}

/// Takes a shared lock on `file`, a snapshot handed out for reading, so that a removal does not
/// cut it while it is read (the lock goes with the handle). Take it before the file's name can
/// be removed, under the lock that orders both: then no remover holds the exclusive lock on it,
/// and a failure here means a file system without `flock`, where the remover's exclusive lock
/// fails too, and files are only unlinked.
pub fn lock_for_reading(file: &File) {
    if let Err(err) = rustix::fs::flock(file, FlockOperation::NonBlockingLockShared) {
        tracing::debug!(error = %err, "no shared lock on a snapshot handed out for reading");
    }
}

/// Unlinks `path`. Returns the file for [`Unlinked::free`] unless a reader holds it
/// ([`lock_for_reading`]): then its blocks are freed when the last reader closes it. `Ok(None)`
/// too if there was no such file.
fn unlink(path: &Path) -> io::Result<Option<Unlinked>> {
    let file = match OpenOptions::new().write(true).open(path) {
        Ok(file) => Some(file),
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        // Not openable for writing (permissions): removing the name still frees the space.
        Err(_) => None,
    };
    let unread =
        file.filter(|f| rustix::fs::flock(f, FlockOperation::NonBlockingLockExclusive).is_ok());
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err),
    }
    Ok(unread.map(|file| Unlinked { file }))
}

/// Files the process's reaper has queued or is freeing, and their bytes
/// (`statestore_disk_files_being_freed`, `statestore_disk_bytes_being_freed`).
pub fn pending() -> (u64, u64) {
    reaper().map_or((0, 0), Reaper::pending)
}

/// Removes `path` now and has the process's background thread free its blocks (unless a
/// reader holds it). Never waits for the freeing. `Ok` if there was no such file; an error only
/// if the name could not be removed.
pub fn remove(path: &Path) -> io::Result<()> {
    if let Some(unlinked) = unlink(path)?
        && let Some(reaper) = reaper()
    {
        reaper.free_later(unlinked);
    }
    Ok(())
}

/// Has the process's background thread free the blocks of `file`, whose last name is already
/// gone (a Raft log chunk the WAL unlinked while this handle held it open): the cuts run there,
/// not on the thread that removed the name. A file that still has a name is only closed:
/// cutting it would cut the named file. Never waits for the freeing (unless the reaper's queue
/// is full: then the blocks are freed as the handle closes, here). True if the file had no name
/// left (its blocks were not freed by whoever removed the name).
pub fn free_unlinked(file: File) -> bool {
    free_unlinked_by(reaper(), file)
}

fn free_unlinked_by(reaper: Option<&Reaper>, file: File) -> bool {
    use std::os::unix::fs::MetadataExt;
    let unnamed = file.metadata().is_ok_and(|meta| meta.nlink() == 0);
    if unnamed && let Some(reaper) = reaper {
        reaper.free_later(Unlinked { file });
    }
    unnamed
}

#[cfg(test)]
mod tests;
