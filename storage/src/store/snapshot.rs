//! Snapshot files: a streamed, checksummed dump of the state machine tree.
//!
//! Layout: magic `SSSNAP01`, `u32` header length, header (opaque bytes from the consensus
//! layer: which log id the snapshot covers), then entries `u32 klen, key, u32 vlen, value`,
//! an end marker `u32::MAX`, the entry count `u64`, and an xxh3-64 of every byte before it.
//! Written to a temporary name, fsynced, then renamed, so a crash never leaves a torn
//! snapshot under a final name; its writeback starts as it is written (`write_behind`), so
//! the final fsync does not put the whole file on the disk at once. Read back with bounded
//! allocations: a corrupt or hostile file is an error, never an out-of-memory.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::Xxh3;

use crate::engine::KvPair;
use crate::error::{Result, StorageError};
use crate::write_behind::WriteBehindFile;

const MAGIC: &[u8; 8] = b"SSSNAP01";
const END_MARKER: u32 = u32::MAX;
/// Largest header or entry part accepted when reading (keys and values are far smaller).
const MAX_PART_BYTES: u32 = 256 << 20;

/// A finished snapshot on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFile {
    /// Where it is.
    pub path: PathBuf,
    /// The consensus layer's header.
    pub header: Vec<u8>,
    /// Entries in it.
    pub entries: u64,
    /// Size in bytes.
    pub size: u64,
}

/// Streams entries into a new snapshot file.
pub struct SnapshotWriter {
    out: HashingWriter<BufWriter<WriteBehindFile>>,
    tmp_path: PathBuf,
    entries: u64,
}

impl SnapshotWriter {
    /// Starts `tmp_path` with `header`.
    pub fn create(tmp_path: &Path, header: &[u8]) -> Result<Self> {
        let file = File::create(tmp_path)?;
        let mut out = HashingWriter::new(BufWriter::with_capacity(
            1 << 20,
            WriteBehindFile::new(file),
        ));
        out.write_all(MAGIC)?;
        write_part(&mut out, header)?;
        Ok(SnapshotWriter {
            out,
            tmp_path: tmp_path.to_owned(),
            entries: 0,
        })
    }

    /// Appends one entry.
    pub fn push(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        write_part(&mut self.out, key)?;
        write_part(&mut self.out, value)?;
        self.entries += 1;
        Ok(())
    }

    /// Writes the trailer, fsyncs and renames to `final_path`; fsyncs the directory.
    pub fn finish(mut self, final_path: &Path, header: &[u8]) -> Result<SnapshotFile> {
        self.out.write_all(&END_MARKER.to_be_bytes())?;
        self.out.write_all(&self.entries.to_be_bytes())?;
        let checksum = self.out.digest();
        let mut inner = self.out.into_inner();
        inner.write_all(&checksum.to_be_bytes())?;
        let file = inner.into_inner().map_err(|e| e.into_error())?.into_inner();
        file.sync_all()?;
        let size = file.metadata()?.len();
        drop(file);
        std::fs::rename(&self.tmp_path, final_path)?;
        sync_dir(final_path)?;
        Ok(SnapshotFile {
            path: final_path.to_owned(),
            header: header.to_vec(),
            entries: self.entries,
            size,
        })
    }
}

fn sync_dir(path: &Path) -> Result<()> {
    Ok(crate::dirs::sync_parent(path)?)
}

/// Reads the header of a snapshot file without reading the entries.
pub fn read_header(path: &Path) -> Result<SnapshotFile> {
    let file = File::open(path)?;
    let size = file.metadata()?.len();
    let mut input = BufReader::new(file);
    let mut magic = [0u8; 8];
    input.read_exact(&mut magic)?;
    if &magic != MAGIC {
        return Err(corrupt("bad magic"));
    }
    let header = read_part(&mut input)?.ok_or_else(|| corrupt("missing header"))?;
    Ok(SnapshotFile {
        path: path.to_owned(),
        header,
        entries: 0,
        size,
    })
}

/// Streams every entry of a snapshot file to `sink`, then checks the trailer and checksum.
/// Callers that must not act on a corrupt file call it twice: once with a no-op sink to
/// verify, once to load.
pub fn read_entries(
    path: &Path,
    mut sink: impl FnMut(KvPair) -> Result<()>,
) -> Result<SnapshotFile> {
    let file = File::open(path)?;
    let size = file.metadata()?.len();
    let mut input = HashingReader::new(BufReader::with_capacity(1 << 20, file));
    let mut magic = [0u8; 8];
    input.read_exact(&mut magic)?;
    if &magic != MAGIC {
        return Err(corrupt("bad magic"));
    }
    let header = read_part(&mut input)?.ok_or_else(|| corrupt("missing header"))?;
    let mut entries = 0u64;
    while let Some(key) = read_part(&mut input)? {
        let value = read_part(&mut input)?.ok_or_else(|| corrupt("entry without value"))?;
        sink((key, value))?;
        entries += 1;
    }
    let mut count = [0u8; 8];
    input.read_exact(&mut count)?;
    if u64::from_be_bytes(count) != entries {
        return Err(corrupt("entry count mismatch"));
    }
    let expected = input.digest();
    let mut checksum = [0u8; 8];
    input.into_inner().read_exact(&mut checksum)?;
    if u64::from_be_bytes(checksum) != expected {
        return Err(corrupt("checksum mismatch"));
    }
    Ok(SnapshotFile {
        path: path.to_owned(),
        header,
        entries,
        size,
    })
}

fn corrupt(reason: &str) -> StorageError {
    StorageError::Corrupt {
        what: "snapshot file",
        reason: reason.to_owned(),
    }
}

fn write_part(out: &mut impl Write, bytes: &[u8]) -> Result<()> {
    let len = u32::try_from(bytes.len())
        .ok()
        .filter(|len| *len < MAX_PART_BYTES)
        .ok_or_else(|| corrupt("part too large to write"))?;
    out.write_all(&len.to_be_bytes())?;
    out.write_all(bytes)?;
    Ok(())
}

/// Reads one length-prefixed part; `None` at the end marker.
fn read_part(input: &mut impl Read) -> Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    input.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len);
    if len == END_MARKER {
        return Ok(None);
    }
    if len > MAX_PART_BYTES {
        return Err(corrupt("part length out of bounds"));
    }
    let mut bytes = vec![0u8; len as usize];
    input.read_exact(&mut bytes)?;
    Ok(Some(bytes))
}

struct HashingWriter<W: Write> {
    inner: W,
    hasher: Xxh3,
}

impl<W: Write> HashingWriter<W> {
    fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hasher: Xxh3::new(),
        }
    }
    fn digest(&self) -> u64 {
        self.hasher.digest()
    }
    fn into_inner(self) -> W {
        self.inner
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

struct HashingReader<R: Read> {
    inner: R,
    hasher: Xxh3,
}

impl<R: Read> HashingReader<R> {
    fn new(inner: R) -> Self {
        HashingReader {
            inner,
            hasher: Xxh3::new(),
        }
    }
    fn digest(&self) -> u64 {
        self.hasher.digest()
    }
    fn into_inner(self) -> R {
        self.inner
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
