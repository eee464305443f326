//! The files the [`resident_journal`](crate::store::resident_journal)'s entries are written to:
//! the reply memory's own log, beside the state database (fjall).
//!
//! The reply memory changes by some megabytes a second under load (every write request adds a
//! remembered reply, and removes it seconds later). In sled, the state database before fjall,
//! whose log-structured segments were reclaimed only once half of them was garbage and only as
//! fast as pages were rewritten, that churn stayed on disk: as one record per layer it left
//! 400 MiB of blob files after a million SETs, as journal records inside sled it grew the
//! database to 630 MiB for 100 MiB of keys (BENCHMARKS.md, issue 30). Here every entry is
//! appended to a plain file and a new base starts a new file; files older than the newest base
//! that fjall's durable state has reached are deleted.
//!
//! Layout: `replies-<base seq, 20 digits>.log`, starting with [`MAGIC`]; then frames of
//! `u32 length, body, u64 xxh3(body)`, the body being `u64 seq, u8 base` and the entry's rows.
//! The first frame of a file is its base. Each append is `fdatasync`ed before the layer's fjall
//! table is written, so every entry fjall's state names is on disk; a torn last frame can only
//! belong to an entry fjall never recorded, and is ignored.
//!
//! A failed append leaves nothing behind for a retry to trip over: a frame cut short (a full
//! disk) is cut off the file again, so the retry's frame follows the last whole one, and a base
//! file that could not be written is removed (its bytes are what a full disk needs back). After
//! a failed `fdatasync`, what reached the disk is unknown (the kernel may have dropped the pages
//! it could not write, and a later `fdatasync` would not say so): the log refuses every later
//! append, and the state machine stops.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use xxhash_rust::xxh3::xxh3_64;

use crate::error::{Result, StorageError};
use crate::store::resident::ResidentTables;
use crate::store::resident_journal::{self, JournalEntry};

/// First bytes of every file.
pub const MAGIC: &[u8; 8] = b"SSREPL01";
/// Longest frame body accepted when reading (the reply memory's byte cap is far below).
const MAX_FRAME_BYTES: u32 = 1 << 30;
/// Shortest frame body: the layer sequence (8 bytes) and the base flag (1 byte).
const MIN_FRAME_BYTES: u32 = 9;

/// The reply memory's log: its directory and the file being appended to.
pub struct ResidentLog {
    dir: PathBuf,
    /// The file entries are appended to, once a base started it.
    current: Option<File>,
    /// Base sequence numbers of the files in the directory, ascending.
    files: Vec<u64>,
    /// Bytes of those files (readable without the log's lock).
    bytes: Arc<AtomicU64>,
    /// Why the log refuses appends for good: a failed sync, or a failed append it could not
    /// undo.
    broken: Option<String>,
}

fn corrupt(reason: String) -> StorageError {
    StorageError::Corrupt {
        what: "reply memory log",
        reason,
    }
}

fn file_name(base_seq: u64) -> String {
    format!("replies-{base_seq:020}.log")
}

fn base_seq_of(name: &str) -> Option<u64> {
    name.strip_prefix("replies-")?
        .strip_suffix(".log")?
        .parse()
        .ok()
}

fn sync_dir(dir: &Path) -> Result<()> {
    Ok(crate::dirs::sync_dir(dir)?)
}

/// What opening the log found.
pub struct Opened {
    /// The log, ready to append (its next entry must be a base).
    pub log: ResidentLog,
    /// The tables as of the requested entry, without their derived rows (the caller rebuilds
    /// them: [`ResidentTables::derive_index`]).
    pub tables: ResidentTables,
    /// The sequence number of the next entry (above every one on disk).
    pub next_seq: u64,
}

impl ResidentLog {
    /// Opens the log in `dir` and rebuilds the tables as of entry `at`, but for their derived
    /// rows (the entry fjall's state records; `None`: fjall has none, the tables are empty and
    /// any file is a leftover).
    /// Files that start after `at` belong to layers fjall never recorded and are removed.
    pub fn open(dir: &Path, at: Option<u64>) -> Result<Opened> {
        crate::dirs::create_durable(dir)?;
        let mut files: Vec<u64> = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if let Some(seq) = base_seq_of(&name) {
                files.push(seq);
            }
        }
        files.sort_unstable();
        let keep = at.map_or(0, |at| files.partition_point(|base| *base <= at));
        for stale in files.drain(keep..) {
            tracing::info!(
                file = file_name(stale),
                "removing a reply memory log file the state database never reached"
            );
            std::fs::remove_file(dir.join(file_name(stale)))?;
        }
        sync_dir(dir)?;
        let mut bytes = 0;
        for base in &files {
            bytes += std::fs::metadata(dir.join(file_name(*base)))?.len();
        }
        let log = ResidentLog {
            dir: dir.to_owned(),
            current: None,
            files,
            bytes: Arc::new(AtomicU64::new(bytes)),
            broken: None,
        };
        let Some(at) = at else {
            return Ok(Opened {
                log,
                tables: ResidentTables::default(),
                next_seq: 0,
            });
        };
        let Some(&base) = log.files.last() else {
            return Err(corrupt(format!(
                "the state needs entry {at} and {} holds no log file",
                dir.display()
            )));
        };
        let mut tables = ResidentTables::default();
        let mut reached = None;
        let mut highest = at;
        log.read_file(base, |entry| {
            highest = highest.max(entry.seq);
            if entry.seq > at {
                return Ok(());
            }
            match reached {
                None if !(entry.base && entry.seq == base) => {
                    return Err(corrupt(format!(
                        "{} does not start with its base",
                        file_name(base)
                    )));
                }
                Some(last) if entry.seq != last + 1 => {
                    return Err(corrupt(format!(
                        "{} skips from entry {last} to {}",
                        file_name(base),
                        entry.seq
                    )));
                }
                _ => {}
            }
            resident_journal::replay(&mut tables, &entry)?;
            reached = Some(entry.seq);
            Ok(())
        })?;
        if reached != Some(at) {
            return Err(corrupt(format!(
                "the state needs entry {at}, {} ends at {reached:?}",
                file_name(base)
            )));
        }
        Ok(Opened {
            log,
            tables,
            next_seq: highest + 1,
        })
    }

    /// Reads every whole frame of the file that starts at `base` (a torn tail ends it).
    fn read_file(&self, base: u64, each: impl FnMut(JournalEntry) -> Result<()>) -> Result<()> {
        read_path(&self.dir.join(file_name(base)), each)
    }

    /// Appends `entry` (a base starts a new file) and makes it durable. A failed append leaves
    /// the files as they were, so the same entry may be appended again; but after a failed sync
    /// (or a failure it cannot undo) every later append fails too ([`ResidentLog::broken`]).
    pub fn append(&mut self, entry: &JournalEntry) -> Result<()> {
        if let Some(reason) = &self.broken {
            return Err(StorageError::Failed(format!(
                "the reply memory's log refuses appends after an earlier failure: {reason}"
            )));
        }
        if entry.base {
            self.append_base(entry)
        } else {
            self.append_delta(entry)
        }
    }

    fn append_base(&mut self, entry: &JournalEntry) -> Result<()> {
        let path = self.dir.join(file_name(entry.seq));
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)?;
        let written = file
            .write_all(MAGIC)
            .map_err(StorageError::from)
            .and_then(|()| write_frame(&mut file, entry));
        let written = match written {
            Ok(written) => written,
            Err(err) => {
                drop(file);
                // Durably gone: a torn file brought back by a power cut would end the log there.
                if let Err(removing) =
                    std::fs::remove_file(&path).and_then(|()| crate::dirs::sync_dir(&self.dir))
                {
                    self.broken = Some(format!(
                        "a base it could not write ({err}) could not be removed: {removing}"
                    ));
                }
                return Err(err);
            }
        };
        if let Err(err) = sync_file(&file)
            .map_err(StorageError::from)
            .and_then(|()| sync_dir(&self.dir))
        {
            self.broken = Some(format!("syncing a new base failed: {err}"));
            return Err(err);
        }
        if self.files.last() != Some(&entry.seq) {
            self.files.push(entry.seq);
        }
        self.current = Some(file);
        self.bytes
            .fetch_add((MAGIC.len() + written) as u64, Ordering::Relaxed);
        Ok(())
    }

    fn append_delta(&mut self, entry: &JournalEntry) -> Result<()> {
        let file = self
            .current
            .as_mut()
            .ok_or_else(|| corrupt(format!("delta {} with no base before it", entry.seq)))?;
        let end = file.stream_position()?;
        let written = match write_frame(file, entry) {
            Ok(written) => written,
            Err(err) => {
                // A frame cut short would end every later read of the file there.
                let cut = file
                    .set_len(end)
                    .and_then(|()| file.seek(SeekFrom::Start(end)).map(drop));
                if let Err(cutting) = cut {
                    self.broken = Some(format!(
                        "a frame cut short ({err}) could not be cut off: {cutting}"
                    ));
                }
                return Err(err);
            }
        };
        if let Err(err) = sync_file(file) {
            self.broken = Some(format!("syncing an entry failed: {err}"));
            return Err(err.into());
        }
        self.bytes.fetch_add(written as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Why the log refuses every append, if it does.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// True once a base started a file in this run: a delta may follow.
    pub fn has_base(&self) -> bool {
        self.current.is_some()
    }

    /// Removes the files before the newest one whose base is at or below `durable` (the entry
    /// fjall's durable state records): nothing a restart can need.
    pub fn prune(&mut self, durable: u64) -> Result<()> {
        let keep_from = self
            .files
            .partition_point(|base| *base <= durable)
            .saturating_sub(1);
        if keep_from == 0 {
            return Ok(());
        }
        for old in self.files.drain(..keep_from) {
            let path = self.dir.join(file_name(old));
            let size = std::fs::metadata(&path).map_or(0, |meta| meta.len());
            // Tens of MiB each: freed gradually, not to hold up the Raft log's fdatasync.
            crate::gradual_remove::remove(&path)?;
            self.bytes.fetch_sub(
                size.min(self.bytes.load(Ordering::Relaxed)),
                Ordering::Relaxed,
            );
        }
        sync_dir(&self.dir)
    }

    /// Bytes of the log's files on disk, readable while the log is in use.
    pub fn size_on_disk(&self) -> Arc<AtomicU64> {
        self.bytes.clone()
    }

    /// Base sequence numbers of the files kept.
    #[cfg(test)]
    pub fn files(&self) -> &[u64] {
        &self.files
    }
}

/// Reads every whole frame of the log file at `path` (a torn tail ends it).
fn read_path(path: &Path, mut each: impl FnMut(JournalEntry) -> Result<()>) -> Result<()> {
    let mut input = BufReader::with_capacity(1 << 20, File::open(path)?);
    let mut magic = [0u8; 8];
    input.read_exact(&mut magic)?;
    if &magic != MAGIC {
        return Err(corrupt(format!("{} has no log header", path.display())));
    }
    while let Some(entry) = read_frame(&mut input)? {
        each(entry)?;
    }
    Ok(())
}

/// Sequence number and base flag of every whole entry in the log file at `path` (tests look at
/// what a stop left).
#[cfg(test)]
pub(crate) fn entries_in(path: &Path) -> Result<Vec<(u64, bool)>> {
    let mut entries = Vec::new();
    read_path(path, |entry| {
        entries.push((entry.seq, entry.base));
        Ok(())
    })?;
    Ok(entries)
}

/// Writes one frame; its length in bytes.
fn write_frame(out: &mut File, entry: &JournalEntry) -> Result<usize> {
    let mut body = Vec::with_capacity(MIN_FRAME_BYTES as usize + entry.rows.len());
    body.extend_from_slice(&entry.seq.to_be_bytes());
    body.push(u8::from(entry.base));
    body.extend_from_slice(&entry.rows);
    let len = u32::try_from(body.len())
        .ok()
        .filter(|len| *len <= MAX_FRAME_BYTES)
        .ok_or_else(|| corrupt(format!("entry {} of {} bytes", entry.seq, body.len())))?;
    let mut frame = Vec::with_capacity(body.len() + 12);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&body);
    frame.extend_from_slice(&xxh3_64(&body).to_be_bytes());
    write_out(out, &frame)?;
    Ok(frame.len())
}

#[cfg(not(test))]
fn write_out(out: &mut File, bytes: &[u8]) -> std::io::Result<()> {
    out.write_all(bytes)
}

#[cfg(not(test))]
fn sync_file(file: &File) -> std::io::Result<()> {
    file.sync_data()
}

/// The disk faults the tests make happen on their own thread: a write that stops after some
/// bytes with the disk full, a failed `fdatasync`.
#[cfg(test)]
pub(crate) mod fault {
    use std::cell::Cell;

    /// The next fault on this thread.
    #[derive(Debug, Clone, Copy)]
    pub(crate) enum Fault {
        /// The next write stores this many bytes, then fails: no space left.
        DiskFullAfter(usize),
        /// The next sync fails (an I/O error).
        SyncFails,
    }

    thread_local! {
        pub(crate) static NEXT: Cell<Option<Fault>> = const { Cell::new(None) };
    }

    /// Makes `fault` happen at the next write or sync of this thread.
    pub(crate) fn arm(fault: Fault) {
        NEXT.with(|next| next.set(Some(fault)));
    }
}

#[cfg(test)]
fn write_out(out: &mut File, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(fault::Fault::DiskFullAfter(stored)) = fault::NEXT.with(|next| next.get()) {
        fault::NEXT.with(|next| next.set(None));
        out.write_all(&bytes[..stored.min(bytes.len())])?;
        return Err(std::io::Error::new(
            std::io::ErrorKind::StorageFull,
            "no space left on device (test fault)",
        ));
    }
    out.write_all(bytes)
}

#[cfg(test)]
fn sync_file(file: &File) -> std::io::Result<()> {
    if let Some(fault::Fault::SyncFails) = fault::NEXT.with(|next| next.get()) {
        fault::NEXT.with(|next| next.set(None));
        return Err(std::io::Error::other("fdatasync failed (test fault)"));
    }
    file.sync_data()
}

/// The next whole frame, or `None` at the end of the file or at a torn or damaged last frame.
fn read_frame(input: &mut impl Read) -> Result<Option<JournalEntry>> {
    let mut len = [0u8; 4];
    if !read_all(input, &mut len)? {
        return Ok(None);
    }
    let len = u32::from_be_bytes(len);
    if !(MIN_FRAME_BYTES..=MAX_FRAME_BYTES).contains(&len) {
        return Ok(None);
    }
    let mut body = Vec::with_capacity((len as usize).min(1 << 20));
    input.take(u64::from(len)).read_to_end(&mut body)?;
    let mut checksum = [0u8; 8];
    if body.len() != len as usize || !read_all(input, &mut checksum)? {
        return Ok(None);
    }
    if xxh3_64(&body) != u64::from_be_bytes(checksum) {
        return Ok(None);
    }
    let (head, rows) = body.split_at(MIN_FRAME_BYTES as usize);
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&head[..8]);
    Ok(Some(JournalEntry {
        seq: u64::from_be_bytes(seq),
        base: head[8] != 0,
        rows: rows.to_vec(),
    }))
}

/// Fills `buf`; false if the input ended before (or at) its first byte or part-way.
fn read_all(input: &mut impl Read, buf: &mut [u8]) -> Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..])? {
            0 => return Ok(false),
            n => filled += n,
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests;
