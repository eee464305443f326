//! Shared parts of the raft crate's fuzz targets: reading an input as a sequence of choices,
//! building Raft log chunks with raft-log's own record encoder (checkpoints by hand, as
//! chunked-wal writes them), and the invariants every verdict of the log check must satisfy.

use std::convert::Infallible;
use std::io::Write;

use codeq::Encode;
use codeq::config::{CodeqConfig, Crc32fast};
use statestore_raft::log_store::{WalLogId, WalTypes};
use statestore_raft::types::LogId;
use statestore_raft::wal_check::LogFrames;
use statestore_raft::wal_check::chunks::{Accepted, ChunkSource, Refused, check_chunks};
use statestore_raft::wal_check::record::parse;
use statestore_raft::wal_check::walk::{Corruption, TailVerdict, judge_tail, walk_chunk};

/// An input read front to back; past its end every read is zero.
pub struct Choices<'a>(pub &'a [u8]);

impl<'a> Choices<'a> {
    /// The next byte.
    pub fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    /// The next two bytes, little-endian.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    /// The next `n` bytes (fewer at the end).
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        head
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        self.take(self.0.len())
    }
}

/// A log's chunks in memory: (start offset, bytes).
pub type Chunks = Vec<(u64, Vec<u8>)>;

struct Memory<'a>(&'a Chunks);

impl ChunkSource for Memory<'_> {
    type Error = Infallible;

    fn count(&self) -> usize {
        self.0.len()
    }

    fn start(&self, i: usize) -> u64 {
        self.0[i].0
    }

    fn load(&mut self, i: usize) -> Result<Vec<u8>, Infallible> {
        Ok(self.0[i].1.clone())
    }
}

/// The check's verdict on `chunks`.
pub fn check(chunks: &Chunks) -> Result<Accepted, (usize, Corruption)> {
    check_chunks(&mut Memory(chunks), &LogFrames).map_err(|refused| match refused {
        Refused::Corrupt { chunk, corruption } => (chunk, corruption),
        Refused::Read(never) => match never {},
    })
}

/// A raft-log action record, encoded by raft-log.
pub fn action(action: raft_log::RaftLogAction<WalTypes>) -> Vec<u8> {
    let mut out = Vec::new();
    let record = raft_log::RaftLogRecord::<WalTypes>::Action(action);
    if record.encode(&mut out).is_err() {
        out.clear();
    }
    out
}

/// A chunk's first record as chunked-wal writes it for raft-log's state: version 1, no vote,
/// `last`, no committed or purged log id, no user data.
pub fn checkpoint(last: Option<LogId>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut writer = Crc32fast::new_writer(&mut out);
    let mut body = vec![0, 0, 0, 5, 1, 0];
    match last {
        Some(id) => {
            body.push(1);
            if WalLogId(id).encode(&mut body).is_err() {
                return Vec::new();
            }
        }
        None => body.push(0),
    }
    body.extend([0, 0, 0]);
    if writer.write_all(&body).is_err() || writer.write_checksum().is_err() {
        return Vec::new();
    }
    out
}

/// What every verdict must satisfy, whatever the bytes:
///
/// - a chunk walk that stops at `end` walks the prefix up to `end` whole, to the same records
///   and last log id, and the record at `end` does not parse;
/// - a torn-tail verdict starts at the damaged record; a corruption lies within the chunk;
/// - an accepted log, with its torn write trimmed and its interrupted rotation removed, is
///   accepted again with nothing to trim and the same records;
/// - a refusal names a chunk that exists and an offset within it.
pub fn check_invariants(chunks: &Chunks) -> Result<Accepted, (usize, Corruption)> {
    for (_, bytes) in chunks {
        let walk = walk_chunk(bytes, &LogFrames, None);
        let again = walk_chunk(&bytes[..walk.end], &LogFrames, None);
        assert_eq!(again.damage, None);
        assert_eq!(again.records, walk.records);
        assert_eq!(again.end, walk.end);
        assert_eq!(again.last, walk.last);
        match &walk.damage {
            None => assert_eq!(walk.end, bytes.len()),
            Some(damage) => {
                assert_eq!(damage.record_at, walk.end);
                assert!(damage.at >= damage.record_at && damage.at <= bytes.len());
                assert!(parse(bytes, walk.end).is_err());
                match judge_tail(bytes, damage, walk.last.as_ref(), &LogFrames) {
                    TailVerdict::Torn { at, zero_filled } => {
                        assert_eq!(at, walk.end);
                        assert_eq!(zero_filled, bytes[at..].iter().all(|b| *b == 0));
                    }
                    TailVerdict::Corrupt(corruption) => assert!(corruption.at <= bytes.len()),
                }
            }
        }
    }
    let verdict = check(chunks);
    match &verdict {
        Ok(accepted) => {
            let mut trimmed: Chunks = chunks
                .iter()
                .enumerate()
                .filter(|(i, _)| !accepted.interrupted_rotation.contains(i))
                .map(|(_, chunk)| chunk.clone())
                .collect();
            if let Some(trim) = &accepted.trim {
                assert!(trim.chunk < chunks.len());
                assert_eq!(trim.at + trim.bytes, chunks[trim.chunk].1.len());
                if let Some((_, bytes)) = trimmed.get_mut(trim.chunk) {
                    bytes.truncate(trim.at);
                }
            }
            let again = check(&trimmed).expect("the trimmed log is accepted");
            assert_eq!(again.trim, None);
            assert!(again.interrupted_rotation.is_empty());
            assert_eq!(again.records, accepted.records);
        }
        Err((chunk, corruption)) => {
            assert!(*chunk < chunks.len());
            assert!(corruption.at <= chunks[*chunk].1.len());
        }
    }
    verdict
}
