//! Builders for the check's unit tests: records written through codeq's checksum writer (as
//! raft-log writes them) with plain stand-in values, and a codec for those values.

use std::io::Write;
use std::ops::Range;

use codeq::config::{CodeqConfig, Crc32fast};

use crate::wal_check::record::{FrameKind, parse};
use crate::wal_check::walk::FrameCodec;

/// A frame as `log_store` writes it: u32 length, value.
pub fn frame(value: &[u8]) -> Vec<u8> {
    let mut out = (value.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(value);
    out
}

/// A record as raft-log writes it: type, body, checksum through codeq's writer.
pub fn record(type_id: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut writer = Crc32fast::new_writer(&mut out);
    writer.write_all(&type_id.to_be_bytes()).expect("vec");
    writer.write_all(body).expect("vec");
    writer.write_checksum().expect("vec");
    out
}

/// A stand-in log id: its index, 8 bytes.
pub fn id(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// A stand-in payload: u16 length, bytes.
pub fn payload(bytes: &[u8]) -> Vec<u8> {
    let mut out = (bytes.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(bytes);
    out
}

/// An Append of `index` carrying `bytes`.
pub fn append(index: u64, bytes: &[u8]) -> Vec<u8> {
    record(1, &[frame(&id(index)), frame(&payload(bytes))].concat())
}

/// A Commit of `index`.
pub fn commit(index: u64) -> Vec<u8> {
    record(2, &frame(&id(index)))
}

/// A chunk's first record: version 1, no vote, `last`, no committed or purged, no user data.
pub fn checkpoint(last: Option<u64>) -> Vec<u8> {
    let last = match last {
        Some(index) => [vec![1], frame(&id(index))].concat(),
        None => vec![0],
    };
    record(5, &[vec![1, 0], last, vec![0, 0, 0]].concat())
}

/// A chunk: a checkpoint, then for each index an Append (value `value-<index>`) and a Commit.
pub fn chunk(indexes: Range<u64>) -> Vec<u8> {
    let before = indexes.start.checked_sub(1);
    let mut out = checkpoint(before);
    for index in indexes {
        out.extend(append(index, format!("value-{index}").as_bytes()));
        out.extend(commit(index));
    }
    out
}

/// Where each record of a whole chunk lies.
pub fn records(chunk: &[u8]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < chunk.len() {
        let record = parse(chunk, at).expect("whole chunk");
        at = record.range.end;
        out.push(record.range);
    }
    out
}

/// Decodes the stand-in values.
pub struct Plain;

impl FrameCodec for Plain {
    type LogId = u64;

    fn natural_len(&self, kind: FrameKind, bytes: &[u8]) -> Option<usize> {
        match kind {
            FrameKind::Vote | FrameKind::LogId => (bytes.len() >= 8).then_some(8),
            FrameKind::Payload => {
                let n = u16::from_be_bytes(bytes.get(..2)?.try_into().ok()?) as usize;
                (bytes.len() >= 2 + n).then_some(2 + n)
            }
        }
    }

    fn log_id(&self, value: &[u8]) -> Option<u64> {
        Some(u64::from_be_bytes(value.get(..8)?.try_into().ok()?))
    }

    fn index(&self, log_id: &u64) -> u64 {
        *log_id
    }
}
