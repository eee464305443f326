//! The record framing against records written with codeq's checksum writer (raft-log's own
//! path): whole records parse with their frames, every cut is incomplete, and each kind of
//! damage is named at the field that has it.

use super::*;
use crate::wal_check::tests::support::{frame, record};

fn append(log_id: &[u8], payload: &[u8]) -> Vec<u8> {
    record(1, &[frame(log_id), frame(payload)].concat())
}

#[test]
fn an_append_parses_whole_with_its_frames() {
    let bytes = append(b"id", b"payload!");
    let parsed = parse(&bytes, 0).expect("whole");
    assert_eq!(parsed.record_type, RecordType::Append);
    assert_eq!(parsed.range, 0..bytes.len());
    assert_eq!(bytes.len(), 4 + (4 + 2) + (4 + 8) + CHECKSUM_BYTES);
    assert_eq!(
        parsed.frames,
        vec![
            Frame {
                field: Field::LogId,
                length_at: 4,
                value: 8..10
            },
            Frame {
                field: Field::Payload,
                length_at: 10,
                value: 14..22
            },
        ]
    );
    // the checksum is a u64 holding the CRC-32 in its low half
    assert_eq!(&bytes[22..26], &[0, 0, 0, 0]);
}

#[test]
fn records_parse_back_to_back_from_their_offsets() {
    let first = append(b"a", b"xyz");
    let second = record(2, &frame(b"commit"));
    let bytes = [first.clone(), second.clone()].concat();
    let one = parse(&bytes, 0).expect("first");
    let two = parse(&bytes, one.range.end).expect("second");
    assert_eq!(two.record_type, RecordType::Commit);
    assert_eq!(two.range, first.len()..bytes.len());
}

#[test]
fn optional_frames_follow_their_tags() {
    let none = record(3, &[0]);
    assert_eq!(parse(&none, 0).expect("whole").frames, vec![]);
    let some = record(3, &[vec![1], frame(b"keep")].concat());
    let parsed = parse(&some, 0).expect("whole");
    assert_eq!(parsed.record_type, RecordType::TruncateAfter);
    assert_eq!(parsed.frames[0].field, Field::LogId);

    // checkpoint: version, vote, last, committed, purged, user data tag
    let body = [
        vec![1, 1],
        frame(b"vote"),
        vec![0, 1],
        frame(b"committed"),
        vec![0, 1],
    ]
    .concat();
    let checkpoint = record(5, &body);
    let parsed = parse(&checkpoint, 0).expect("whole");
    assert_eq!(parsed.record_type, RecordType::Checkpoint);
    let fields: Vec<Field> = parsed.frames.iter().map(|f| f.field).collect();
    assert_eq!(fields, vec![Field::Vote, Field::CommittedLogId]);
    assert_eq!(parsed.range.end, checkpoint.len());
}

#[test]
fn every_cut_of_a_record_is_incomplete() {
    let bytes = append(b"id", b"payload");
    for cut in 0..bytes.len() {
        let damage = parse(&bytes[..cut], 0).expect_err("cut");
        assert_eq!(damage.defect, Defect::Incomplete, "cut at {cut}");
        assert_eq!(damage.record_at, 0);
        assert!(damage.at <= cut, "cut at {cut}: {damage:?}");
    }
}

#[test]
fn damage_is_named_at_its_field() {
    let unknown = record(6, &frame(b"x"));
    assert_eq!(
        parse(&unknown, 0).expect_err("type 6").defect,
        Defect::UnknownType { type_id: 6 }
    );

    let tag = record(3, &[2]);
    let damage = parse(&tag, 0).expect_err("tag 2");
    assert_eq!((damage.at, damage.defect), (4, Defect::BadTag { tag: 2 }));

    let version = record(5, &[2, 0, 0, 0, 0, 0]);
    let damage = parse(&version, 0).expect_err("version 2");
    assert_eq!(
        (damage.at, damage.defect),
        (4, Defect::BadVersion { version: 2 })
    );

    let mut flipped = append(b"id", b"payload");
    flipped[9] ^= 0x10; // in the log id value
    let damage = parse(&flipped, 0).expect_err("checksum");
    assert!(matches!(damage.defect, Defect::ChecksumMismatch { .. }));
    assert_eq!(damage.at, flipped.len() - CHECKSUM_BYTES);
}

#[test]
fn a_length_beyond_the_maximum_is_named_even_where_the_file_ends() {
    let mut long_id = append(b"id", b"p");
    long_id[4..8].copy_from_slice(&(MAX_ID_FRAME_BYTES + 1).to_be_bytes());
    let damage = parse(&long_id, 0).expect_err("too long");
    assert_eq!(damage.at, 4);
    assert_eq!(
        damage.defect,
        Defect::FrameTooLong {
            field: Field::LogId,
            length: MAX_ID_FRAME_BYTES + 1
        }
    );

    let mut long_payload = append(b"id", b"p");
    long_payload[10..14].copy_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(
        parse(&long_payload, 0).expect_err("too long").defect,
        Defect::FrameTooLong {
            field: Field::Payload,
            length: u32::MAX
        }
    );
    // at the maximum it is only incomplete
    long_payload[10..14].copy_from_slice(&MAX_PAYLOAD_FRAME_BYTES.to_be_bytes());
    assert_eq!(
        parse(&long_payload, 0).expect_err("short").defect,
        Defect::Incomplete
    );
}

#[test]
fn a_flipped_length_bit_reads_past_the_end_or_misses_the_checksum() {
    let bytes = [append(b"id", b"first"), append(b"id", b"second")].concat();
    let stored = u32::from_be_bytes(bytes[10..14].try_into().expect("4 bytes"));
    for bit in 0..32 {
        let mut damaged = bytes.clone();
        let length = stored ^ (1 << bit);
        damaged[10..14].copy_from_slice(&length.to_be_bytes());
        let damage = parse(&damaged, 0).expect_err("damaged");
        assert_eq!(damage.record_at, 0);
        let expected = if length > MAX_PAYLOAD_FRAME_BYTES {
            "too long"
        } else if 14 + length as usize + CHECKSUM_BYTES > damaged.len() {
            "incomplete"
        } else {
            "checksum"
        };
        let found = match damage.defect {
            Defect::FrameTooLong { .. } => "too long",
            Defect::Incomplete => "incomplete",
            Defect::ChecksumMismatch { .. } => "checksum",
            _ => "other",
        };
        assert_eq!(found, expected, "bit {bit}: {damage:?}");
    }
}
