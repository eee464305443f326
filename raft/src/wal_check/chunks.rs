//! The rules over a whole log: which chunk is the last one written, and what may be trimmed.
//!
//! chunked-wal names each chunk file by the log offset it starts at. When a chunk fills up it is
//! synced, a successor is created, and the successor's first record (a checkpoint) is written
//! only after that sync. At open, chunked-wal removes trailing chunks without a whole first
//! record (an interrupted rotation) and trims a torn write at the end of the last remaining one.
//! This check decides the same things first, strictly:
//!
//! - the *tail* is the last chunk whose first record is whole; chunks after it are an interrupted
//!   rotation, acceptable only when their first record is torn by [`judge_tail`]'s rules (empty,
//!   incomplete, zeros);
//! - every chunk before the tail was closed whole: any damaged record in it is corruption, and
//!   its records must end exactly where the next chunk starts;
//! - in the tail, the first damaged record is judged by [`judge_tail`]: a torn last write is
//!   trimmed (by raft-log, or by the check itself when the tear left a hole that raft-log
//!   would refuse), anything else is corruption.

use super::record::Defect;
use super::walk::{
    ChunkWalk, Corruption, FrameCodec, Problem, TailVerdict, judge_tail, walk_chunk,
};

/// The chunks of a log, in log order.
pub trait ChunkSource {
    /// Why a chunk could not be read.
    type Error;

    /// The number of chunks.
    fn count(&self) -> usize;

    /// The log offset chunk `i` starts at (its name).
    fn start(&self, i: usize) -> u64;

    /// The bytes of chunk `i`.
    fn load(&mut self, i: usize) -> Result<Vec<u8>, Self::Error>;
}

/// A torn write at the end of the tail chunk, which raft-log trims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trim {
    /// The chunk.
    pub chunk: usize,
    /// Offset of the torn record.
    pub at: usize,
    /// Bytes from there to the end of the file.
    pub bytes: usize,
    /// Those bytes are all zero.
    pub zero_filled: bool,
    /// The torn record has a hole (see [`TailVerdict::TornWithHole`]): raft-log would refuse
    /// it, so the check truncates the chunk at `at` before raft-log opens the log.
    pub truncate_first: bool,
}

/// A log that may be opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accepted {
    /// Whole records in the chunks raft-log keeps.
    pub records: u64,
    /// The torn write raft-log trims, if any.
    pub trim: Option<Trim>,
    /// Chunks after the tail that raft-log removes (an interrupted rotation).
    pub interrupted_rotation: Vec<usize>,
}

/// Why the log must not be opened.
#[derive(Debug)]
pub enum Refused<E> {
    /// A chunk could not be read.
    Read(E),
    /// Chunk `chunk` is damaged.
    Corrupt {
        /// The chunk.
        chunk: usize,
        /// Where and what.
        corruption: Corruption,
    },
}

/// Checks every chunk of `source`.
pub fn check_chunks<S: ChunkSource, C: FrameCodec>(
    source: &mut S,
    codec: &C,
) -> Result<Accepted, Refused<S::Error>> {
    let count = source.count();
    let mut walks: Vec<(usize, ChunkWalk<C::LogId>)> = Vec::with_capacity(count);
    let mut last = None;
    for i in 0..count {
        let bytes = source.load(i).map_err(Refused::Read)?;
        let walk = walk_chunk(&bytes, codec, last);
        last = walk.last.clone();
        walks.push((bytes.len(), walk));
    }
    let refuse = |chunk, at, problem| Refused::Corrupt {
        chunk,
        corruption: Corruption { at, problem },
    };

    let tail = walks.iter().rposition(|(_, walk)| walk.records > 0);
    let closed = tail.unwrap_or(0);
    for (i, (len, walk)) in walks.iter().enumerate().take(closed) {
        if let Some(damage) = &walk.damage {
            let problem = match damage.defect {
                Defect::Incomplete => Problem::RunsPastChunkEnd,
                ref defect => Problem::Damaged(defect.clone()),
            };
            return Err(refuse(i, damage.at, problem));
        }
        let end = source.start(i).saturating_add(*len as u64);
        let next = source.start(i + 1);
        if end != next {
            return Err(refuse(i, *len, Problem::ChunkGap { end, next }));
        }
    }

    let mut accepted = Accepted::default();
    let mut anchor = None;
    if let Some(t) = tail {
        let (len, walk) = &walks[t];
        accepted.records = walks[..=t].iter().map(|(_, walk)| walk.records).sum();
        anchor = walk.last.clone();
        if let Some(damage) = &walk.damage {
            let bytes = source.load(t).map_err(Refused::Read)?;
            match judge_tail(&bytes, damage, walk.last.as_ref(), codec) {
                TailVerdict::Torn { at, zero_filled } => {
                    accepted.trim = Some(Trim {
                        chunk: t,
                        at,
                        bytes: len.saturating_sub(at),
                        zero_filled,
                        truncate_first: false,
                    });
                }
                TailVerdict::TornWithHole { at, .. } => {
                    accepted.trim = Some(Trim {
                        chunk: t,
                        at,
                        bytes: len.saturating_sub(at),
                        zero_filled: false,
                        truncate_first: true,
                    });
                }
                TailVerdict::Corrupt(corruption) => {
                    return Err(Refused::Corrupt {
                        chunk: t,
                        corruption,
                    });
                }
            }
        }
    }
    let after = tail.map_or(0, |t| t + 1);
    for (i, (_, walk)) in walks.iter().enumerate().skip(after) {
        if let Some(damage) = &walk.damage {
            let bytes = source.load(i).map_err(Refused::Read)?;
            if let TailVerdict::Corrupt(corruption) =
                judge_tail(&bytes, damage, anchor.as_ref(), codec)
            {
                return Err(Refused::Corrupt {
                    chunk: i,
                    corruption,
                });
            }
        }
        accepted.interrupted_rotation.push(i);
    }
    Ok(accepted)
}

#[cfg(test)]
mod tests;
