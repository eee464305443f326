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

/// Counts the bytes written to a file and starts their writeback every
/// [`WRITE_BEHIND_BYTES`].
#[derive(Debug, Default)]
pub struct WriteBehind {
    /// Bytes written so far (the file's length when written from its start).
    written: u64,
    /// Bytes whose writeback has been started.
    started: u64,
    /// Whether a failed advice was already logged.
    warned: bool,
}

impl WriteBehind {
    /// Nothing written yet.
    pub fn new() -> WriteBehind {
        WriteBehind::default()
    }

    /// `len` more bytes were written to `file` (at its end); starts their writeback once
    /// [`WRITE_BEHIND_BYTES`] have gathered. Returns whether it advised the kernel.
    pub fn wrote(&mut self, file: impl AsFd, len: usize) -> bool {
        self.written += len as u64;
        let Some(pending) = self.due() else {
            return false;
        };
        if let Err(err) = rustix::fs::fadvise(file, self.started, Some(pending), Advice::DontNeed)
            && !self.warned
        {
            self.warned = true;
            tracing::debug!(error = %err, "cannot start the writeback of a snapshot file early");
        }
        self.started = self.written;
        true
    }

    /// The written bytes whose writeback is due, if [`WRITE_BEHIND_BYTES`] have gathered.
    fn due(&self) -> Option<NonZeroU64> {
        let pending = self.written - self.started;
        if pending >= WRITE_BEHIND_BYTES {
            NonZeroU64::new(pending)
        } else {
            None
        }
    }
}

/// A [`File`] whose writes go through a [`WriteBehind`] (put a `BufWriter` on top: writes of
/// a few bytes each would cost a system call each).
#[derive(Debug)]
pub struct WriteBehindFile {
    file: File,
    behind: WriteBehind,
}

impl WriteBehindFile {
    /// Writes to `file` from its start.
    pub fn new(file: File) -> WriteBehindFile {
        WriteBehindFile {
            file,
            behind: WriteBehind::new(),
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
        self.behind.wrote(&self.file, written);
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
    fn writeback_starts_every_mebibyte_and_covers_every_byte_once() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let file = File::create(dir.path().join("f"))?;
        let mut behind = WriteBehind::new();
        let mut advised = Vec::new();
        let step = 300 * 1024;
        for _ in 0..10 {
            let before = behind.started;
            if behind.wrote(&file, step) {
                advised.push((before, behind.started));
            }
        }
        // 10 × 300 KiB: due at 1,200 KiB and 2,400 KiB; the last 600 KiB wait for the fsync.
        assert_eq!(advised, [(0, 1_228_800), (1_228_800, 2_457_600)]);
        assert_eq!(behind.written, 3_072_000);
        assert!(!behind.warned, "fadvise on a regular file succeeds");
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
