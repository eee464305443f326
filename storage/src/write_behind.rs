//! Write-behind for large files written in one stream (snapshot exports and received
//! snapshots): the writeback of every [`WRITE_BEHIND_BYTES`] written starts at once instead of
//! all at the file's final `fsync`.
//!
//! Why: the Raft log's `fdatasync` shares the disk with these files. A snapshot of 1M keys is
//! 50-100 MB; left dirty until its `fsync`, it reaches the disk in one burst, and every log
//! `fdatasync` issued meanwhile waits behind it (a node then answers heartbeats and appends
//! late). On this project's test machine a 221-byte append + `fdatasync` took up to 53-58 ms
//! while another file was written at 70 MiB/s and synced every 3 s, and at most 1.0-1.1 ms when
//! that file's writeback was started after every MiB (`bench/disk-latency`). RocksDB's
//! `bytes_per_sync` and PostgreSQL's `backend_flush_after` do the same.
//!
//! How: `posix_fadvise(POSIX_FADV_DONTNEED)` on the range just written. On Linux it starts the
//! writeback of the range's dirty pages without waiting for it (and drops pages already clean,
//! which a snapshot file does not need in memory). It is advice: durability still comes from
//! the `fsync` at the end, and a failed advice is only logged once per file.

use std::fs::File;
use std::io::{self, Write};
use std::num::NonZeroU64;
use std::os::fd::AsFd;

use rustix::fs::Advice;

/// Bytes written between two starts of writeback.
pub const WRITE_BEHIND_BYTES: u64 = 1 << 20;

/// Counts the bytes written to a file (from its start, in order) and says when the writeback
/// of the ones not yet started is due: every [`WRITE_BEHIND_BYTES`].
#[derive(Debug, Default)]
pub struct WriteBehind {
    /// Bytes written so far (the file's length).
    written: u64,
    /// Bytes whose writeback has been started.
    started: u64,
}

/// A range of a file whose writeback is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// First byte.
    pub offset: u64,
    /// Bytes.
    pub len: NonZeroU64,
}

impl WriteBehind {
    /// Nothing written yet.
    pub fn new() -> WriteBehind {
        WriteBehind::default()
    }

    /// `len` more bytes were written at the file's end; returns the range whose writeback is
    /// due once [`WRITE_BEHIND_BYTES`] have gathered (it then counts as started).
    pub fn wrote(&mut self, len: usize) -> Option<Due> {
        self.written += len as u64;
        let pending = self.written - self.started;
        if pending < WRITE_BEHIND_BYTES {
            return None;
        }
        let due = Due {
            offset: self.started,
            len: NonZeroU64::new(pending)?,
        };
        self.started = self.written;
        Some(due)
    }
}

/// Starts the writeback of `due` in `file` without waiting for it (advice: the caller's
/// `fsync` is still what makes the bytes durable).
pub fn start_writeback(file: impl AsFd, due: Due) -> io::Result<()> {
    rustix::fs::fadvise(file, due.offset, Some(due.len), Advice::DontNeed)?;
    Ok(())
}

/// A [`File`] whose writes go through a [`WriteBehind`] (put a `BufWriter` on top: writes of
/// a few bytes each would cost a system call each).
#[derive(Debug)]
pub struct WriteBehindFile {
    file: File,
    behind: WriteBehind,
    /// Whether a failed advice was already logged.
    warned: bool,
}

impl WriteBehindFile {
    /// Writes to `file` from its start.
    pub fn new(file: File) -> WriteBehindFile {
        WriteBehindFile {
            file,
            behind: WriteBehind::new(),
            warned: false,
        }
    }

    /// The file, for its final `fsync`.
    pub fn into_inner(self) -> File {
        self.file
    }
}

impl Write for WriteBehindFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = self.file.write(buf)?;
        if let Some(due) = self.behind.wrote(written)
            && let Err(err) = start_writeback(&self.file, due)
            && !self.warned
        {
            self.warned = true;
            tracing::debug!(error = %err, "cannot start the writeback of a snapshot file early");
        }
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writeback_is_due_every_mebibyte_and_covers_every_byte_once() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let file = File::create(dir.path().join("f"))?;
        let mut behind = WriteBehind::new();
        let mut due = Vec::new();
        for _ in 0..10 {
            if let Some(range) = behind.wrote(300 * 1024) {
                start_writeback(&file, range)?;
                due.push((range.offset, range.len.get()));
            }
        }
        // 10 × 300 KiB: due at 1,200 KiB and 2,400 KiB; the last 600 KiB wait for the fsync.
        assert_eq!(due, [(0, 1_228_800), (1_228_800, 1_228_800)]);
        assert_eq!(behind.written, 3_072_000);
        Ok(())
    }

    #[test]
    fn a_write_behind_file_keeps_every_byte() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("f");
        let mut out = WriteBehindFile::new(File::create(&path)?);
        let block: Vec<u8> = (0..=255u8).cycle().take(700 * 1024).collect();
        for _ in 0..4 {
            out.write_all(&block)?;
        }
        out.into_inner().sync_all()?;
        let read = std::fs::read(&path)?;
        assert_eq!(read.len(), 4 * block.len());
        assert!(
            read.chunks(block.len())
                .all(|chunk| chunk == block.as_slice())
        );
        Ok(())
    }
}
