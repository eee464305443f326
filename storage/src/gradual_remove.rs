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
//! A file another handle may still read (a snapshot being sent to a follower) must not be cut:
//! readers of such files take a shared `flock` ([`lock_for_reading`]), and the remover cuts only
//! a file it could lock exclusively; otherwise it only unlinks it (its blocks are freed when the
//! last reader closes it, as before).

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::time::Duration;

use rustix::fs::FlockOperation;

/// Bytes freed per cut.
pub const CUT_BYTES: u64 = 16 << 20;

/// Pause between two cuts (the journal commits in between).
pub const CUT_PAUSE: Duration = Duration::from_millis(5);

/// The lengths a file of `len` bytes is cut to, one after another, ending at 0 (nothing for an
/// empty file).
pub fn cut_lengths(len: u64, step: u64) -> impl Iterator<Item = u64> {
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
#[derive(Debug)]
pub struct Unlinked {
    file: File,
}

impl Unlinked {
    /// Frees the file's blocks, [`CUT_BYTES`] at a time, pausing [`CUT_PAUSE`] between cuts.
    /// Blocking: call it from a background thread, holding no lock others wait for.
    pub fn free(self) -> io::Result<()> {
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

/// Takes a shared lock on `file`, a snapshot handed out for reading, so that a removal does not
/// cut it while it is read (the lock goes with the handle). Take it before the file's name can
/// be removed (under the lock that orders both). On a file system without `flock` this does
/// nothing, and the remover's exclusive lock fails there too: files are then only unlinked.
pub fn lock_for_reading(file: &File) {
    if let Err(err) = rustix::fs::flock(file, FlockOperation::NonBlockingLockShared) {
        tracing::debug!(error = %err, "no shared lock on a snapshot handed out for reading");
    }
}

/// Unlinks `path`. Returns the file for [`Unlinked::free`] unless a reader holds it
/// ([`lock_for_reading`]): then its blocks are freed when the last reader closes it. `Ok(None)`
/// too if there was no such file.
pub fn unlink(path: &Path) -> io::Result<Option<Unlinked>> {
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

/// Removes `path`, a file no other handle reads, freeing its blocks gradually. Blocking. `Ok`
/// if there was no such file.
pub fn remove(path: &Path) -> io::Result<()> {
    match unlink(path)? {
        Some(unlinked) => unlinked.free(),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
