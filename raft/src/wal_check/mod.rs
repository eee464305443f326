//! The Raft log check run before raft-log opens the log: a damaged record is refused with the
//! file, the offset and the way out, instead of being trimmed as a torn write.
//!
//! chunked-wal trims the last chunk at the first record it cannot read when the read ran past
//! the end of the file, taking that for a torn write. A damaged frame length in a record that
//! was written and synced long ago (a flipped bit) reads the same way, and the trim then drops
//! that record and every one after it: entries this node acknowledged, with only a warning.
//! This check walks every chunk with the same framing ([`record`]), decides what a torn last
//! write may look like ([`walk`], [`chunks`]), and returns [`Error::WalCorrupt`] for anything
//! else. The parsing is pure over bytes; this module lists and reads the chunk files.

pub mod chunks;
pub mod record;
pub mod walk;

use std::fmt;
use std::path::{Path, PathBuf};

use raft_log::chunked_wal::Config as WalConfig;
use statestore_storage::codec;

use self::chunks::{Accepted, ChunkSource, Refused, check_chunks};
use self::record::FrameKind;
use self::walk::{FrameCodec, Problem};
use crate::error::Error;
use crate::types::{EntryPayload, LogId, NodeId, Vote};

/// Damage in the Raft log that is not a torn last write: the node refuses to start.
#[derive(Debug)]
pub struct WalCorruption {
    /// The chunk file.
    pub path: PathBuf,
    /// Byte offset in that file.
    pub offset: u64,
    /// What is wrong there.
    pub problem: Problem,
    /// This node's id, when known (it goes into the commands of the way out).
    pub node: Option<NodeId>,
}

impl fmt::Display for WalCorruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let id = self
            .node
            .map_or_else(|| "<this node's id>".to_owned(), |id| id.to_string());
        write!(
            f,
            "the raft log is corrupt: {} at byte {}: {}. This is not a torn last write, and \
             trimming it would drop entries this node acknowledged, so the node refuses to \
             start. Rejoin the cluster from a snapshot: move the data directory aside (keep it \
             for inspection), remove this member through a healthy node (`statestore cluster \
             --endpoint <healthy node> remove-node --id {id}`), then start this host with an \
             empty data directory, a new id and `--join`, and add it (`statestore cluster \
             --endpoint <healthy node> add-node --id <new id> --raft <its raft address>`); it \
             receives a snapshot from the leader (README, \"Running a cluster\")",
            self.path.display(),
            self.offset,
            self.problem,
        )
    }
}

/// The log store's frame values, decoded as `log_store` encodes them.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogFrames;

impl FrameCodec for LogFrames {
    type LogId = LogId;

    fn natural_len(&self, kind: FrameKind, bytes: &[u8]) -> Option<usize> {
        let decoded = match kind {
            FrameKind::Vote => codec::decode_prefix::<Vote>("vote", bytes).map(|(_, n)| n),
            FrameKind::LogId => codec::decode_prefix::<LogId>("log id", bytes).map(|(_, n)| n),
            FrameKind::Payload => {
                codec::decode_prefix::<EntryPayload>("log entry payload", bytes).map(|(_, n)| n)
            }
        };
        decoded.ok()
    }

    fn log_id(&self, value: &[u8]) -> Option<LogId> {
        codec::decode("log id", value).ok()
    }

    fn index(&self, log_id: &LogId) -> u64 {
        log_id.index
    }
}

/// The chunk files of a log directory, in log order.
struct ChunkFiles {
    files: Vec<(u64, PathBuf)>,
}

impl ChunkFiles {
    /// Lists `dir` as chunked-wal does: `r-<offset>.wal` files; other names are ignored.
    fn list(dir: &Path) -> std::io::Result<ChunkFiles> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            if let Ok(start) = WalConfig::parse_chunk_file_name(&name.to_string_lossy()) {
                files.push((start, entry.path()));
            }
        }
        files.sort();
        Ok(ChunkFiles { files })
    }
}

impl ChunkSource for ChunkFiles {
    type Error = (PathBuf, std::io::Error);

    fn count(&self) -> usize {
        self.files.len()
    }

    fn start(&self, i: usize) -> u64 {
        self.files[i].0
    }

    fn load(&mut self, i: usize) -> Result<Vec<u8>, Self::Error> {
        let path = &self.files[i].1;
        std::fs::read(path).map_err(|err| (path.clone(), err))
    }
}

/// Checks the log in `dir` (absent: nothing to check). `Ok` says raft-log may open it, and what
/// it will trim; a torn write is logged here with its file and offset.
pub fn check_dir(dir: &Path) -> Result<Accepted, Error> {
    if !dir.exists() {
        return Ok(Accepted::default());
    }
    let mut files = ChunkFiles::list(dir)?;
    match check_chunks(&mut files, &LogFrames) {
        Ok(accepted) => {
            if let Some(trim) = accepted.trim.as_ref().filter(|t| t.truncate_first) {
                let path = &files.files[trim.chunk].1;
                truncate_durably(path, trim.at as u64).map_err(|source| {
                    Error::Io(std::io::Error::new(
                        source.kind(),
                        format!(
                            "trimming the torn raft log chunk {}: {source}",
                            path.display()
                        ),
                    ))
                })?;
                tracing::warn!(
                    file = %path.display(),
                    offset = trim.at,
                    bytes = trim.bytes,
                    "the raft log's last write was torn with a hole (zeros where a sector of \
                     its first damaged record should be: pages reached the disk out of order \
                     before the crash); the chunk is truncated there"
                );
            } else if let Some(trim) = &accepted.trim {
                tracing::warn!(
                    file = %files.files[trim.chunk].1.display(),
                    offset = trim.at,
                    bytes = trim.bytes,
                    zero_filled = trim.zero_filled,
                    "the raft log ends in a torn write (a crash while writing); it is trimmed"
                );
            }
            for &i in &accepted.interrupted_rotation {
                tracing::warn!(
                    file = %files.files[i].1.display(),
                    "a raft log chunk without a whole first record (a crash while starting it) is removed"
                );
            }
            Ok(accepted)
        }
        Err(Refused::Read((path, source))) => Err(Error::ReadWal { path, source }),
        Err(Refused::Corrupt { chunk, corruption }) => {
            Err(Error::WalCorrupt(Box::new(WalCorruption {
                path: files.files[chunk].1.clone(),
                offset: corruption.at as u64,
                problem: corruption.problem,
                node: None,
            })))
        }
    }
}

/// Cuts `path` to `len` bytes and syncs the file (its size is metadata: `sync_all`).
fn truncate_durably(path: &Path, len: u64) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new().write(true).open(path)?;
    file.set_len(len)?;
    file.sync_all()
}

#[cfg(test)]
mod tests;
