//! Walking one chunk's records, and the verdict on a damaged record at the end of the log: a
//! torn last write (trimmed) or damage that would drop acknowledged records (refused).
//!
//! A crash while the WAL writes leaves a *prefix* of what was being written (ext4 `data=ordered`,
//! XFS, btrfs), or on ext4 `data=writeback` a file whose new length reached the disk before its
//! data (zeros). So the damage a torn write leaves is (a) one record that runs past the end of
//! the file, with nothing after it but the rest of that record, or (b) zeros to the end of the
//! file. Everything else is damage to bytes that were already written and synced:
//!
//! - a frame length beyond what this build ever writes ([`Defect::FrameTooLong`]), anywhere;
//! - a checksum mismatch, unknown type or bad tag followed by anything but zeros;
//! - a record that runs past the end of the file, when the bytes after it hold a whole record:
//!   either the damaged record itself once its frame lengths are taken from the values they
//!   frame (a damaged length: the values decode, and the checksum over the record rewritten with
//!   those lengths matches, which a torn record's bytes cannot do), or a later Append record
//!   with a matching checksum whose log index continues the log (the next index, or the one
//!   after it when the damaged record was itself that Append);
//! - a record near the end of the file that runs past it, when flipping one of its bits back
//!   makes it whole with a matching checksum (a flipped type or option tag in a small last
//!   record, a vote or a truncation, reads past the end like a torn write).
//!
//! Without a prefix order: page writeback before the sync (ext4 `delalloc` writes back pages of
//! one file in any order, and a disk without a flush persists any subset of the sectors of a
//! write) can leave a later page of the last write on disk and an earlier one not, so the
//! first damaged record holds a *hole*: an aligned [`SECTOR_BYTES`] sector that reads all
//! zeros, with written bytes after it. A damaged record of the last chunk that overlaps such a
//! sector is a torn write too ([`TailVerdict::TornWithHole`]), however the bytes after it look
//! (everything after a record that was not synced was not synced either); etcd's WAL makes the
//! same call (`isTornEntry`). The cost: a synced record that holds 512 aligned zero bytes *and*
//! is damaged elsewhere is taken for a torn one, so its entries are trimmed instead of refused.
//!
//! The sector that holds the end of the last sync is a hole too when it did not reach the disk:
//! it reads as it was synced, the last synced record and then zeros to the sector's end. So a
//! damaged record that *starts* with zeros running to the end of its sector is a torn write
//! when that run holds at least [`SYNC_END_HOLE_MIN_ZEROS`] bytes, which no record written
//! whole, nor one with a single flipped bit, starts with (100 single-node power cuts, cycle 92: 23 zero bytes from the record's start to its
//! sector's end, then the rest of the lost page, then pages of the same write that did reach
//! the disk, parsed as an empty vote with a zero checksum and were refused as a checksum
//! mismatch: the node did not start). A shorter run is still refused: it cannot be told from a
//! vote record's type and length with a flipped bit.
//! The bit-flip and damaged-length rules are tried first, so damage they can name is still
//! refused.
//!
//! The last rule does not accept *any* checksum-valid record after the damage: a torn record's
//! own payload holds client data, which may embed bytes that form a valid record, and a crash
//! tearing such a value must not stop the node. A record found there counts only when its log
//! index is the one the log expects next, which a client does not choose.

use std::fmt;

use super::record::{
    CHECKSUM_BYTES, Damage, Defect, Field, FrameKind, MAX_ID_FRAME_BYTES, Record, RecordType,
    parse, parse_with,
};

/// The sector of the hole rule: the smallest unit a disk writes whole (and a divisor of the page
/// size, so a page that did not reach the disk is a run of such sectors).
pub const SECTOR_BYTES: usize = 512;

/// Zeros from a damaged record's start to the end of its sector that make it the lost end of a
/// sync. A record written whole starts with at most 7 zero bytes: a vote record's type (u32 0)
/// and the three high bytes of its vote frame's length, then the length's low byte (a vote
/// encodes in under 256 bytes, never in none) and the value's format version (1); every other
/// record type is non-zero in its fourth byte. One flipped bit makes at most 8.
pub const SYNC_END_HOLE_MIN_ZEROS: usize = 9;

/// A damaged record with at most this many bytes from its start to the end of the chunk is
/// also tried with each single bit flipped: a flipped type or option tag in a small last record
/// (a vote, a truncation) makes it read past the end of the file like a torn write does.
pub const BIT_FLIP_SEARCH_BYTES: usize = 1 << 10;

/// At most this many candidate records after a damaged one get their checksum verified (each
/// costs up to the rest of the chunk); candidates are only those whose log index is the next
/// one expected.
pub const MAX_VERIFIED_CANDIDATES: usize = 16;

/// How the values in frames decode (the log store's types; a stand-in in tests).
pub trait FrameCodec {
    /// A decoded log id, in log order.
    type LogId: Ord + Clone + fmt::Debug;

    /// The number of bytes the value of `kind` at the start of `bytes` occupies, found by
    /// decoding it (its stored length not consulted); `None` when `bytes` does not start with a
    /// whole value.
    fn natural_len(&self, kind: FrameKind, bytes: &[u8]) -> Option<usize>;

    /// The log id in a log-id frame's value, if it decodes.
    fn log_id(&self, value: &[u8]) -> Option<Self::LogId>;

    /// The index of a log id.
    fn index(&self, log_id: &Self::LogId) -> u64;
}

/// The records of one chunk up to its end or to the first damaged one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkWalk<Id> {
    /// Whole records from the start.
    pub records: u64,
    /// End of the last whole record (the chunk's length when nothing is damaged).
    pub end: usize,
    /// The log's last log id after those records.
    pub last: Option<Id>,
    /// The first damaged record, if any.
    pub damage: Option<Damage>,
}

/// Walks `chunk` from its start; `last` is the log's last log id before it.
pub fn walk_chunk<C: FrameCodec>(
    chunk: &[u8],
    codec: &C,
    mut last: Option<C::LogId>,
) -> ChunkWalk<C::LogId> {
    let mut at = 0;
    let mut records = 0;
    while at < chunk.len() {
        match parse(chunk, at) {
            Ok(record) => {
                follow_last(&record, chunk, codec, &mut last);
                records += 1;
                at = record.range.end;
            }
            Err(damage) => {
                return ChunkWalk {
                    records,
                    end: at,
                    last,
                    damage: Some(damage),
                };
            }
        }
    }
    ChunkWalk {
        records,
        end: at,
        last,
        damage: None,
    }
}

/// Tracks the log's last log id as raft-log's state does (`RaftLogState::apply`).
fn follow_last<C: FrameCodec>(
    record: &Record,
    chunk: &[u8],
    codec: &C,
    last: &mut Option<C::LogId>,
) {
    let decode = |field: Field| {
        record
            .frame(field)
            .and_then(|frame| chunk.get(frame.value.clone()))
            .and_then(|value| codec.log_id(value))
    };
    match record.record_type {
        RecordType::Append => {
            if let Some(id) = decode(Field::LogId) {
                *last = Some(id);
            }
        }
        RecordType::TruncateAfter => {
            let keep = decode(Field::LogId);
            if *last > keep {
                *last = keep;
            }
        }
        RecordType::PurgeUpto => {
            let purged = decode(Field::LogId);
            if purged > *last {
                *last = purged;
            }
        }
        RecordType::Checkpoint => *last = decode(Field::LastLogId),
        RecordType::SaveVote | RecordType::Commit => {}
    }
}

/// What is wrong with a chunk, in words for the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// A record damaged in place (not a torn write).
    Damaged(Defect),
    /// A record runs past the end of a chunk that is not the last one written.
    RunsPastChunkEnd,
    /// A frame length differs from the length of the value it frames, and with the right
    /// length the record is whole and its checksum matches.
    LengthDamaged {
        /// The frame.
        field: Field,
        /// The length on disk.
        stored: u32,
        /// The length of the value.
        actual: u32,
    },
    /// The damaged record runs past the end of the file, yet with one bit of the byte at the
    /// offset flipped back it is whole and its checksum matches.
    BitFlipped {
        /// The bit (0 is the least significant).
        bit: u8,
    },
    /// The damaged record runs past the end of the file, yet a whole record continuing the log
    /// follows it.
    RecordFollows {
        /// Offset of that record.
        follows_at: usize,
        /// Its log index.
        index: u64,
    },
    /// A chunk ends before or after the offset the next chunk starts at.
    ChunkGap {
        /// Global offset where this chunk's records end.
        end: u64,
        /// Global offset the next chunk starts at.
        next: u64,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Damaged(defect) => write!(f, "{defect}"),
            Problem::RunsPastChunkEnd => f.write_str(
                "a record runs past the end of a chunk that is not the last one (it was closed whole)",
            ),
            Problem::LengthDamaged {
                field,
                stored,
                actual,
            } => write!(
                f,
                "the {field} length says {stored} bytes but the value takes {actual}, and with \
                 {actual} the record is whole and its checksum matches (a damaged length, not a \
                 torn write)"
            ),
            Problem::BitFlipped { bit } => write!(
                f,
                "bit {bit} of this byte is flipped: the record runs past the end of the file, \
                 but with the bit restored it is whole and its checksum matches (damage, not a \
                 torn write)"
            ),
            Problem::RecordFollows { follows_at, index } => write!(
                f,
                "the record runs past the end of the file, yet a whole record for log index \
                 {index} follows at byte {follows_at} (damage, not a torn write)"
            ),
            Problem::ChunkGap { end, next } => write!(
                f,
                "the chunk's records end at log offset {end} but the next chunk starts at {next}"
            ),
        }
    }
}

/// Damage found in a chunk: where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    /// Offset in the chunk file.
    pub at: usize,
    /// What is wrong.
    pub problem: Problem,
}

/// The verdict on the first damaged record of the last chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TailVerdict {
    /// A torn last write: the bytes from `at` are trimmed.
    Torn {
        /// Where the torn record starts.
        at: usize,
        /// The bytes from `at` are all zero.
        zero_filled: bool,
    },
    /// A torn last write with a hole: the first damaged record overlaps an all-zero sector, or
    /// starts with [`SYNC_END_HOLE_MIN_ZEROS`] or more zero bytes running to the end of its sector,
    /// and bytes that are not zero follow. chunked-wal trims only a record cut by the end of the
    /// file or zeros to the end, so the check truncates the chunk at `at` itself.
    TornWithHole {
        /// Where the torn record starts.
        at: usize,
        /// Offset of the hole: the record's start (zeros to the end of its sector) or the first
        /// all-zero sector it overlaps.
        hole_at: usize,
    },
    /// Damage to written records: the node must not trim it.
    Corrupt(Corruption),
}

/// Judges `damage`, the first damaged record of the last chunk; `last` is the log's last log id
/// before it.
pub fn judge_tail<C: FrameCodec>(
    chunk: &[u8],
    damage: &Damage,
    last: Option<&C::LogId>,
    codec: &C,
) -> TailVerdict {
    let start = damage.record_at;
    let zero_filled = chunk.get(start..).unwrap_or(&[]).iter().all(|b| *b == 0);
    let corrupt = |at, problem| TailVerdict::Corrupt(Corruption { at, problem });
    let with_hole = |extent_end: usize| {
        zero_sector_rest(chunk, start)
            .or_else(|| zero_sector(chunk, start, extent_end))
            .map(|hole_at| TailVerdict::TornWithHole { at: start, hole_at })
    };
    match &damage.defect {
        Defect::FrameTooLong { .. } => corrupt(damage.at, Problem::Damaged(damage.defect.clone())),
        Defect::Incomplete => {
            if let Some(found) = recover_lengths(chunk, start, codec) {
                return TailVerdict::Corrupt(found);
            }
            if let Some(found) = recover_bit_flip(chunk, start) {
                return TailVerdict::Corrupt(found);
            }
            if !zero_filled && let Some(torn) = with_hole(chunk.len()) {
                return torn;
            }
            if let Some(found) = record_after(chunk, start, last, codec) {
                return TailVerdict::Corrupt(found);
            }
            TailVerdict::Torn {
                at: start,
                zero_filled,
            }
        }
        _ if zero_filled => TailVerdict::Torn {
            at: start,
            zero_filled,
        },
        // The record ends at its checksum (or, for a bad type or tag, at least past the byte
        // that failed).
        defect => {
            let extent_end = match defect {
                Defect::ChecksumMismatch { .. } => damage.at.saturating_add(CHECKSUM_BYTES),
                _ => damage.at.saturating_add(1),
            };
            with_hole(extent_end)
                .unwrap_or_else(|| corrupt(damage.at, Problem::Damaged(defect.clone())))
        }
    }
}

/// `start` when the bytes from it to the end of its sector (wholly inside the chunk, and
/// `start` not the sector's first byte) are at least [`SYNC_END_HOLE_MIN_ZEROS`] zeros.
fn zero_sector_rest(chunk: &[u8], start: usize) -> Option<usize> {
    let sector_end = start.next_multiple_of(SECTOR_BYTES);
    (sector_end - start >= SYNC_END_HOLE_MIN_ZEROS)
        .then(|| chunk.get(start..sector_end))
        .flatten()
        .filter(|rest| rest.iter().all(|b| *b == 0))
        .map(|_| start)
}

/// The first sector (aligned to [`SECTOR_BYTES`] in the chunk file) that overlaps
/// `[start, end)`, lies wholly inside the chunk, and reads all zeros.
fn zero_sector(chunk: &[u8], start: usize, end: usize) -> Option<usize> {
    let end = end.min(chunk.len());
    let first = start - start % SECTOR_BYTES;
    (first..end).step_by(SECTOR_BYTES).find(|&at| {
        chunk
            .get(at..at + SECTOR_BYTES)
            .is_some_and(|sector| sector.iter().all(|b| *b == 0))
    })
}

/// The record at `start` parsed with every frame length taken from the value it frames: whole,
/// with a matching checksum, and some stored length differing, means a damaged length.
fn recover_lengths<C: FrameCodec>(chunk: &[u8], start: usize, codec: &C) -> Option<Corruption> {
    let mut first_difference = None;
    let parsed = parse_with(chunk, start, |field, stored, value_at| {
        let actual = chunk
            .get(value_at..)
            .and_then(|rest| codec.natural_len(field.kind(), rest))
            .and_then(|n| u32::try_from(n).ok())
            .ok_or(Defect::Incomplete)?;
        if actual != stored && first_difference.is_none() {
            first_difference = Some((value_at - 4, field, stored, actual));
        }
        Ok(actual)
    });
    let (at, field, stored, actual) = first_difference?;
    parsed.ok().map(|_| Corruption {
        at,
        problem: Problem::LengthDamaged {
            field,
            stored,
            actual,
        },
    })
}

/// The record at `start`, when it is near the end of the chunk, with one bit flipped back:
/// whole with a matching checksum means a flipped bit (a torn record's bytes would need a
/// checksum they do not hold).
fn recover_bit_flip(chunk: &[u8], start: usize) -> Option<Corruption> {
    let rest = chunk
        .get(start..)
        .filter(|rest| rest.len() <= BIT_FLIP_SEARCH_BYTES)?;
    let mut trial = rest.to_vec();
    for at in 0..trial.len() {
        for bit in 0..8u8 {
            trial[at] ^= 1 << bit;
            let whole = parse(&trial, 0).is_ok();
            trial[at] ^= 1 << bit;
            if whole {
                return Some(Corruption {
                    at: start + at,
                    problem: Problem::BitFlipped { bit },
                });
            }
        }
    }
    None
}

/// A whole Append record after `start` whose log index is the next one the log expects (or the
/// one after, when the damaged record was that Append).
fn record_after<C: FrameCodec>(
    chunk: &[u8],
    start: usize,
    last: Option<&C::LogId>,
    codec: &C,
) -> Option<Corruption> {
    const APPEND: [u8; 4] = 1u32.to_be_bytes();
    let next = last.map_or(0, |id| codec.index(id).saturating_add(1));
    let mut verified = 0;
    let mut at = start.saturating_add(1);
    while let Some(window) = chunk.get(at..at.saturating_add(8)) {
        if window[..4] == APPEND {
            let length = u32::from_be_bytes([window[4], window[5], window[6], window[7]]);
            let value = (at + 8)..(at + 8).saturating_add(length as usize);
            let candidate = (length <= MAX_ID_FRAME_BYTES)
                .then(|| chunk.get(value))
                .flatten()
                .and_then(|value| codec.log_id(value))
                .filter(|id| {
                    let index = codec.index(id);
                    (index == next || index == next.saturating_add(1)) && Some(id) > last
                });
            if let Some(id) = candidate {
                if parse(chunk, at).is_ok() {
                    return Some(Corruption {
                        at: start,
                        problem: Problem::RecordFollows {
                            follows_at: at,
                            index: codec.index(&id),
                        },
                    });
                }
                verified += 1;
                if verified == MAX_VERIFIED_CANDIDATES {
                    return None;
                }
            }
        }
        at += 1;
    }
    None
}

#[cfg(test)]
mod tests;
