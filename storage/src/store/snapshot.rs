//! Snapshot files: a streamed, compressed, checksummed dump of the state machine tree.
//!
//! Layout: magic `SSSNAP02`, then one LZ4 frame (256 KiB linked blocks) holding the body:
//! `u32` header length, header (opaque bytes from the consensus layer: which log id the
//! snapshot covers), then entries `u32 klen, key, u32 vlen, value`, an end marker `u32::MAX`,
//! the entry count `u64`, and an xxh3-64 of the magic and every body byte before it. Files of
//! the format before (magic `SSSNAP01`: the same body, not compressed) are still read: a data
//! directory converted from sled is rebuilt from one.
//! Written to a temporary name, fsynced, then renamed, so a crash never leaves a torn
//! snapshot under a final name; its writeback starts as it is written (`write_behind`), so
//! the final fsync does not put the whole file on the disk at once. Read back with bounded
//! allocations: a corrupt or hostile file is an error ([`StorageError::Corrupt`]), never an
//! out-of-memory or a panic.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use lz4_flex::frame::{BlockMode, BlockSize, FrameDecoder, FrameEncoder, FrameInfo};
use xxhash_rust::xxh3::Xxh3;

use crate::engine::KvPair;
use crate::error::{Result, StorageError};
use crate::write_behind::WriteBehindFile;

/// The magic of the files this build writes: the body is one LZ4 frame.
const MAGIC: &[u8; 8] = b"SSSNAP02";
/// The magic of files written before compression: the body is not compressed.
const PLAIN_MAGIC: &[u8; 8] = b"SSSNAP01";
const END_MARKER: u32 = u32::MAX;
/// Largest header or entry part accepted (keys and values are far smaller).
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
    out: HashingWriter<FrameEncoder<BufWriter<WriteBehindFile>>>,
    tmp_path: PathBuf,
    entries: u64,
}

impl SnapshotWriter {
    /// Starts `tmp_path` with `header`.
    pub fn create(tmp_path: &Path, header: &[u8]) -> Result<Self> {
        let file = File::create(tmp_path)?;
        let mut raw = BufWriter::with_capacity(1 << 20, WriteBehindFile::new(file));
        raw.write_all(MAGIC)?;
        // Linked blocks: each block may refer to the 64 KiB before it (sorted keys repeat).
        let frame = FrameInfo::new()
            .block_size(BlockSize::Max256KB)
            .block_mode(BlockMode::Linked);
        let mut out = HashingWriter::new(FrameEncoder::with_frame_info(frame, raw));
        out.hasher.update(MAGIC);
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
        let mut frame = self.out.into_inner();
        frame.write_all(&checksum.to_be_bytes())?;
        let raw = frame.finish().map_err(io::Error::from)?;
        let file = raw.into_inner().map_err(|e| e.into_error())?.into_inner();
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
    let (size, mut input) = open_body(path, 64 << 10)?;
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
    let (size, mut input) = open_body(path, 1 << 20)?;
    let header = read_part(&mut input)?.ok_or_else(|| corrupt("missing header"))?;
    let mut entries = 0u64;
    while let Some(key) = read_part(&mut input)? {
        let value = read_part(&mut input)?.ok_or_else(|| corrupt("entry without value"))?;
        sink((key, value))?;
        entries += 1;
    }
    let mut count = [0u8; 8];
    read_exact(&mut input, &mut count)?;
    if u64::from_be_bytes(count) != entries {
        return Err(corrupt("entry count mismatch"));
    }
    let expected = input.digest();
    let mut rest = input.into_inner();
    let mut checksum = [0u8; 8];
    read_exact(&mut rest, &mut checksum)?;
    if u64::from_be_bytes(checksum) != expected {
        return Err(corrupt("checksum mismatch"));
    }
    rest.finish()?;
    Ok(SnapshotFile {
        path: path.to_owned(),
        header,
        entries,
        size,
    })
}

/// A snapshot file's bytes after its magic: decompressed, or as they are in a file of the
/// format before compression.
enum Body {
    Compressed(FrameDecoder<FrameSource>),
    Plain(BufReader<File>),
}

impl Read for Body {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Body::Compressed(frame) => frame.read(buf),
            Body::Plain(input) => input.read(buf),
        }
    }
}

impl Body {
    /// Checks that the body ends where its checksum was read: nothing more decodes, and a
    /// compressed file ends with its frame's end mark. The decoder takes the end of the file
    /// where a block should start for an end mark, and stops at the end of a frame without
    /// looking for another: a frame that ends properly never makes it reach the end of the
    /// file, and after it the file must be at its end.
    fn finish(mut self) -> Result<()> {
        if self.read(&mut [0u8; 1]).map_err(read_failure)? != 0 {
            return Err(corrupt("bytes after the checksum"));
        }
        let Body::Compressed(mut frame) = self else {
            return Ok(());
        };
        let source = frame.get_mut();
        if source.reached_end {
            return Err(corrupt("the compressed body has no end mark"));
        }
        if source.read(&mut [0u8; 1]).map_err(read_failure)? != 0 {
            return Err(corrupt("bytes after the compressed body"));
        }
        Ok(())
    }
}

/// The file under the frame decoder, noting whether the decoder reached its end.
struct FrameSource {
    inner: BufReader<File>,
    reached_end: bool,
}

impl Read for FrameSource {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.reached_end = true;
        }
        Ok(n)
    }
}

/// Opens `path` (reading through a buffer of `buffer_bytes`), checks its magic and returns its
/// size on disk and its body, hashed from the magic on.
fn open_body(path: &Path, buffer_bytes: usize) -> Result<(u64, HashingReader<Body>)> {
    let file = File::open(path)?;
    let size = file.metadata()?.len();
    let mut input = BufReader::with_capacity(buffer_bytes, file);
    let mut magic = [0u8; 8];
    read_exact(&mut input, &mut magic)?;
    let body = match &magic {
        MAGIC => Body::Compressed(FrameDecoder::new(FrameSource {
            inner: input,
            reached_end: false,
        })),
        PLAIN_MAGIC => Body::Plain(input),
        _ => return Err(corrupt("bad magic")),
    };
    let mut body = HashingReader::new(body);
    body.hasher.update(&magic);
    Ok((size, body))
}

/// Fills `buf` (see [`read_failure`]).
fn read_exact(input: &mut impl Read, buf: &mut [u8]) -> Result<()> {
    input.read_exact(buf).map_err(read_failure)
}

/// A file that ends early or a compressed body that does not decode is corrupt; any other
/// failure is the disk's.
fn read_failure(err: io::Error) -> StorageError {
    if err.kind() == io::ErrorKind::UnexpectedEof {
        corrupt("truncated")
    } else if err
        .get_ref()
        .is_some_and(|inner| inner.is::<lz4_flex::frame::Error>())
    {
        corrupt(&format!("compressed body: {err}"))
    } else {
        err.into()
    }
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
    read_exact(input, &mut len)?;
    let len = u32::from_be_bytes(len);
    if len == END_MARKER {
        return Ok(None);
    }
    if len > MAX_PART_BYTES {
        return Err(corrupt("part length out of bounds"));
    }
    // Grown as the bytes arrive: a length the file does not back allocates little.
    let mut bytes = Vec::with_capacity((len as usize).min(64 << 10));
    Read::take(&mut *input, u64::from(len))
        .read_to_end(&mut bytes)
        .map_err(read_failure)?;
    if bytes.len() != len as usize {
        return Err(corrupt("truncated"));
    }
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
