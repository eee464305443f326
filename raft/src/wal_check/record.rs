//! The on-disk framing of one Raft log record, parsed from a chunk's bytes without decoding the
//! values it carries.
//!
//! raft-log 0.4.6 (`RaftLogAction`, `RaftLogState`) over chunked-wal 0.2.3 (`WALRecord`) with
//! codeq's `Crc32fast` writes each record as follows; all integers are big-endian:
//!
//! | part | bytes |
//! |---|---|
//! | record type | u32: 0 SaveVote, 1 Append, 2 Commit, 3 TruncateAfter, 4 PurgeUpto, 5 Checkpoint |
//! | body | by type, below |
//! | checksum | u64: the CRC-32 (IEEE, as crc32fast computes it) of type and body; high 32 bits zero |
//!
//! Bodies: SaveVote a vote frame; Append a log-id frame, then a payload frame; Commit and
//! PurgeUpto a log-id frame; TruncateAfter a u8 tag (0 none, 1 some), then a log-id frame when
//! the tag is 1; Checkpoint (the first record of every chunk) a u8 version (1), then vote, last,
//! committed and purged log id, each a u8 tag and a frame when the tag is 1, then a u8 tag for
//! the user data (`()`: no bytes follow it).
//!
//! A frame is how `log_store` writes one value: a u32 length, then that many bytes of the
//! value's versioned encoding (`statestore_storage::codec`). A record has no length of its own
//! and no magic number: its extent follows from its type and its frame lengths, so a damaged
//! length moves where the parser looks for the checksum and for every later record.

use std::hash::Hasher;
use std::ops::Range;

use codeq::config::{CodeqConfig, Crc32fast};

/// The checksum hasher raft-log uses (codeq's `Crc32fast`).
type Checksum = <Crc32fast as CodeqConfig>::Hasher;

/// Bytes of the checksum that ends every record.
pub const CHECKSUM_BYTES: usize = 8;

/// Longest payload frame this build writes or accepts. A log entry's payload is one batch of
/// proposals, closed once it holds 4 MiB, plus the proposal that crossed that mark; a proposal
/// carries at most one MQTT request (at most 256 MiB, and `limits.max_value_bytes` may be raised
/// that far). The peer frame limit (128 MiB) bounds what a follower receives, but a leader writes
/// its own entries before it replicates them. 512 MiB covers both with room for encoding
/// overhead; a length beyond it is damage (bits 29 to 31 of the u32 set).
pub const MAX_PAYLOAD_FRAME_BYTES: u32 = 512 << 20;

/// Longest vote or log-id frame this build writes or accepts (they encode in under 40 bytes).
pub const MAX_ID_FRAME_BYTES: u32 = 1 << 10;

/// The record types raft-log writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordType {
    /// A vote (type 0).
    SaveVote,
    /// A log entry: its log id and payload (type 1).
    Append,
    /// The committed log id (type 2).
    Commit,
    /// Entries after a log id (or all) removed (type 3).
    TruncateAfter,
    /// Entries up to a log id purged (type 4).
    PurgeUpto,
    /// The log state at the start of a chunk (type 5).
    Checkpoint,
}

/// What a frame holds, by its place in its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// A vote (SaveVote, or a checkpoint's vote).
    Vote,
    /// The log id of an Append, Commit, TruncateAfter or PurgeUpto.
    LogId,
    /// An entry payload (Append).
    Payload,
    /// A checkpoint's last log id.
    LastLogId,
    /// A checkpoint's committed log id.
    CommittedLogId,
    /// A checkpoint's purged log id.
    PurgedLogId,
}

/// The value type a frame holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// A vote.
    Vote,
    /// A log id.
    LogId,
    /// An entry payload.
    Payload,
}

impl Field {
    /// The value type of this field.
    pub fn kind(self) -> FrameKind {
        match self {
            Field::Vote => FrameKind::Vote,
            Field::Payload => FrameKind::Payload,
            Field::LogId | Field::LastLogId | Field::CommittedLogId | Field::PurgedLogId => {
                FrameKind::LogId
            }
        }
    }

    /// The longest frame of this field.
    pub fn max_len(self) -> u32 {
        match self.kind() {
            FrameKind::Payload => MAX_PAYLOAD_FRAME_BYTES,
            FrameKind::Vote | FrameKind::LogId => MAX_ID_FRAME_BYTES,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Field::Vote => "vote",
            Field::LogId => "log id",
            Field::Payload => "entry payload",
            Field::LastLogId => "checkpoint last log id",
            Field::CommittedLogId => "checkpoint committed log id",
            Field::PurgedLogId => "checkpoint purged log id",
        }
    }
}

impl std::fmt::Display for Field {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One part of a record body.
#[derive(Clone, Copy)]
enum Part {
    Frame(Field),
    OptionalFrame(Field),
    Version,
    OptionalUnit,
}

impl RecordType {
    fn from_id(id: u32) -> Option<RecordType> {
        Some(match id {
            0 => RecordType::SaveVote,
            1 => RecordType::Append,
            2 => RecordType::Commit,
            3 => RecordType::TruncateAfter,
            4 => RecordType::PurgeUpto,
            5 => RecordType::Checkpoint,
            _ => return None,
        })
    }

    /// The type number on disk.
    pub fn id(self) -> u32 {
        match self {
            RecordType::SaveVote => 0,
            RecordType::Append => 1,
            RecordType::Commit => 2,
            RecordType::TruncateAfter => 3,
            RecordType::PurgeUpto => 4,
            RecordType::Checkpoint => 5,
        }
    }

    fn body(self) -> &'static [Part] {
        match self {
            RecordType::SaveVote => &[Part::Frame(Field::Vote)],
            RecordType::Append => &[Part::Frame(Field::LogId), Part::Frame(Field::Payload)],
            RecordType::Commit | RecordType::PurgeUpto => &[Part::Frame(Field::LogId)],
            RecordType::TruncateAfter => &[Part::OptionalFrame(Field::LogId)],
            RecordType::Checkpoint => &[
                Part::Version,
                Part::OptionalFrame(Field::Vote),
                Part::OptionalFrame(Field::LastLogId),
                Part::OptionalFrame(Field::CommittedLogId),
                Part::OptionalFrame(Field::PurgedLogId),
                Part::OptionalUnit,
            ],
        }
    }
}

/// One frame of a parsed record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// What it holds.
    pub field: Field,
    /// Offset of its u32 length in the chunk.
    pub length_at: usize,
    /// Where its value lies in the chunk.
    pub value: Range<usize>,
}

/// A whole record whose checksum matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its type.
    pub record_type: RecordType,
    /// Where it lies in the chunk, checksum included.
    pub range: Range<usize>,
    /// Its frames, in order.
    pub frames: Vec<Frame>,
}

impl Record {
    /// The frame holding `field`, if the record has one.
    pub fn frame(&self, field: Field) -> Option<&Frame> {
        self.frames.iter().find(|frame| frame.field == field)
    }
}

/// Why the bytes at an offset are not a whole record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Defect {
    /// The record needs bytes past the end of the chunk.
    Incomplete,
    /// A frame length beyond what this build ever writes.
    FrameTooLong {
        /// The frame.
        field: Field,
        /// Its stored length.
        length: u32,
    },
    /// A record type raft-log does not write.
    UnknownType {
        /// The type number found.
        type_id: u32,
    },
    /// An option tag that is neither 0 nor 1.
    BadTag {
        /// The tag found.
        tag: u8,
    },
    /// A checkpoint version other than 1.
    BadVersion {
        /// The version found.
        version: u8,
    },
    /// The stored checksum differs from the one of the record's bytes.
    ChecksumMismatch {
        /// The checksum on disk.
        stored: u64,
        /// The checksum of the bytes.
        computed: u64,
    },
}

impl std::fmt::Display for Defect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Defect::Incomplete => f.write_str("the record runs past the end of the file"),
            Defect::FrameTooLong { field, length } => write!(
                f,
                "the {field} length is {length} bytes, beyond the {} this build ever writes",
                field.max_len()
            ),
            Defect::UnknownType { type_id } => write!(f, "unknown record type {type_id}"),
            Defect::BadTag { tag } => write!(f, "option tag {tag} (neither 0 nor 1)"),
            Defect::BadVersion { version } => write!(f, "checkpoint version {version} (not 1)"),
            Defect::ChecksumMismatch { stored, computed } => write!(
                f,
                "checksum mismatch (stored {stored:#x}, the bytes give {computed:#x})"
            ),
        }
    }
}

/// Where and why parsing a record failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Offset of the record in the chunk.
    pub record_at: usize,
    /// Offset of the field that failed.
    pub at: usize,
    /// What is wrong there.
    pub defect: Defect,
}

/// Parses the record at `start` of `chunk` as written: stored frame lengths, checksum verified.
pub fn parse(chunk: &[u8], start: usize) -> Result<Record, Damage> {
    parse_with(chunk, start, |field, stored, _| {
        if stored > field.max_len() {
            Err(Defect::FrameTooLong {
                field,
                length: stored,
            })
        } else {
            Ok(stored)
        }
    })
}

/// Parses the record at `start` taking each frame's length from `length(field, stored length,
/// value offset)` instead of the stored one; the checksum is computed over the record as it
/// would be with those lengths.
pub(crate) fn parse_with(
    chunk: &[u8],
    start: usize,
    length: impl FnMut(Field, u32, usize) -> Result<u32, Defect>,
) -> Result<Record, Damage> {
    let mut cursor = Cursor {
        chunk,
        record_at: start,
        at: start,
        checksum: Checksum::default(),
        length,
    };
    let type_id = cursor.u32()?;
    let record_type = RecordType::from_id(type_id).ok_or(Damage {
        record_at: start,
        at: start,
        defect: Defect::UnknownType { type_id },
    })?;
    let mut frames = Vec::new();
    for part in record_type.body() {
        match *part {
            Part::Frame(field) => frames.push(cursor.frame(field)?),
            Part::OptionalFrame(field) => {
                if cursor.tag()? {
                    frames.push(cursor.frame(field)?);
                }
            }
            Part::Version => {
                let at = cursor.at;
                let version = cursor.u8()?;
                if version != 1 {
                    return Err(cursor.damage(at, Defect::BadVersion { version }));
                }
            }
            Part::OptionalUnit => {
                cursor.tag()?;
            }
        }
    }
    let checksum_at = cursor.at;
    let computed = cursor.checksum.finish();
    let stored = cursor.take(CHECKSUM_BYTES)?;
    let stored = u64::from_be_bytes(stored.try_into().unwrap_or([0; 8]));
    if stored != computed {
        return Err(cursor.damage(checksum_at, Defect::ChecksumMismatch { stored, computed }));
    }
    Ok(Record {
        record_type,
        range: start..cursor.at,
        frames,
    })
}

struct Cursor<'a, L> {
    chunk: &'a [u8],
    record_at: usize,
    at: usize,
    checksum: Checksum,
    length: L,
}

impl<'a, L: FnMut(Field, u32, usize) -> Result<u32, Defect>> Cursor<'a, L> {
    fn damage(&self, at: usize, defect: Defect) -> Damage {
        Damage {
            record_at: self.record_at,
            at,
            defect,
        }
    }

    /// The next `n` bytes, not yet added to the checksum.
    fn take(&mut self, n: usize) -> Result<&'a [u8], Damage> {
        let end = self.at.saturating_add(n);
        let bytes = self
            .chunk
            .get(self.at..end)
            .ok_or_else(|| self.damage(self.at, Defect::Incomplete))?;
        self.at = end;
        Ok(bytes)
    }

    fn u32(&mut self) -> Result<u32, Damage> {
        let bytes = self.take(4)?;
        self.checksum.write(bytes);
        Ok(u32::from_be_bytes(bytes.try_into().unwrap_or([0; 4])))
    }

    fn u8(&mut self) -> Result<u8, Damage> {
        let bytes = self.take(1)?;
        self.checksum.write(bytes);
        Ok(bytes[0])
    }

    fn tag(&mut self) -> Result<bool, Damage> {
        let at = self.at;
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            tag => Err(self.damage(at, Defect::BadTag { tag })),
        }
    }

    fn frame(&mut self, field: Field) -> Result<Frame, Damage> {
        let length_at = self.at;
        let stored = self.take(4)?;
        let stored = u32::from_be_bytes(stored.try_into().unwrap_or([0; 4]));
        let length =
            (self.length)(field, stored, self.at).map_err(|d| self.damage(length_at, d))?;
        self.checksum.write(&length.to_be_bytes());
        let value_at = self.at;
        let value = self.take(length as usize).map_err(|damage| Damage {
            at: length_at,
            ..damage
        })?;
        self.checksum.write(value);
        Ok(Frame {
            field,
            length_at,
            value: value_at..self.at,
        })
    }
}

#[cfg(test)]
mod tests;
