//! The rules over several chunks on stand-in logs: chunks closed whole, their offsets, the tail,
//! interrupted rotations, and every flipped bit and every cut of a three-chunk log.

use std::convert::Infallible;

use super::*;
use crate::wal_check::tests::support::{Plain, chunk, records};

/// Chunks in memory, named by their offsets.
struct Memory(Vec<(u64, Vec<u8>)>);

impl ChunkSource for Memory {
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

/// Three chunks (entries 1–3, 4–6, 7–9), each named by where it starts.
fn three_chunks() -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut start = 0u64;
    for indexes in [1..4, 4..7, 7..10] {
        let bytes = chunk(indexes);
        let len = bytes.len() as u64;
        out.push((start, bytes));
        start += len;
    }
    out
}

fn check(chunks: Vec<(u64, Vec<u8>)>) -> Result<Accepted, (usize, Corruption)> {
    check_chunks(&mut Memory(chunks), &Plain).map_err(|refused| match refused {
        Refused::Corrupt { chunk, corruption } => (chunk, corruption),
        Refused::Read(never) => match never {},
    })
}

#[test]
fn a_whole_log_is_accepted_with_every_record() {
    let accepted = check(three_chunks()).expect("whole");
    assert_eq!(accepted.records, 3 * (1 + 3 * 2));
    assert_eq!(accepted.trim, None);
    assert!(accepted.interrupted_rotation.is_empty());
    assert_eq!(check(Vec::new()).expect("empty"), Accepted::default());
}

#[test]
fn a_torn_write_at_the_end_is_trimmed_and_nowhere_else() {
    let mut chunks = three_chunks();
    let last = &mut chunks[2].1;
    let len = last.len();
    let last_record = records(last).last().cloned().expect("records");
    last.truncate(len - 3);
    let accepted = check(chunks.clone()).expect("torn tail");
    assert_eq!(
        accepted.trim,
        Some(Trim {
            chunk: 2,
            at: last_record.start,
            bytes: last_record.len() - 3,
            zero_filled: false,
            truncate_first: false
        })
    );
    assert_eq!(accepted.records, 3 * 7 - 1);

    // the same cut in a chunk that was closed: refused, at that record
    let mut chunks = three_chunks();
    let middle_record = records(&chunks[1].1).last().cloned().expect("records");
    let len = chunks[1].1.len();
    chunks[1].1.truncate(len - 3);
    let (chunk, corruption) = check(chunks).expect_err("closed chunk cut");
    assert_eq!(chunk, 1);
    assert_eq!(corruption.problem, Problem::RunsPastChunkEnd);
    assert_eq!(corruption.at, middle_record.start + 16);
}

#[test]
fn zeros_after_a_closed_chunk_are_refused() {
    let mut chunks = three_chunks();
    chunks[0].1.extend([0; 64]);
    let (chunk, corruption) = check(chunks).expect_err("zeros in a closed chunk");
    assert_eq!(chunk, 0);
    assert!(matches!(corruption.problem, Problem::Damaged(_)));
}

#[test]
fn chunks_must_meet_where_the_next_one_starts() {
    let mut chunks = three_chunks();
    chunks[2].0 += 1;
    let (chunk, corruption) = check(chunks.clone()).expect_err("gap");
    assert_eq!(chunk, 1);
    assert_eq!(
        corruption.problem,
        Problem::ChunkGap {
            end: chunks[2].0 - 1,
            next: chunks[2].0
        }
    );
    assert_eq!(corruption.at, chunks[1].1.len());
}

#[test]
fn a_successor_without_a_whole_first_record_is_an_interrupted_rotation() {
    for successor in [Vec::new(), vec![0; 4096], chunk(10..11)[..10].to_vec()] {
        let mut chunks = three_chunks();
        let end = chunks[2].0 + chunks[2].1.len() as u64;
        chunks.push((end, successor.clone()));
        let accepted = check(chunks).expect("interrupted rotation");
        assert_eq!(accepted.interrupted_rotation, vec![3], "{successor:?}");
        assert_eq!(accepted.records, 3 * 7);
    }
}

#[test]
fn a_damaged_first_record_of_the_last_chunk_is_refused_not_removed() {
    // the checkpoint: type, version, vote tag, last tag, then the last log id's u32 length
    let length_at = 4 + 3;
    let mut chunks = three_chunks();
    chunks[2].1[length_at] ^= 0x01;
    let (chunk, corruption) = check(chunks).expect_err("damaged checkpoint");
    assert_eq!((chunk, corruption.at), (2, length_at));
    assert!(matches!(
        corruption.problem,
        Problem::Damaged(Defect::FrameTooLong {
            field: crate::wal_check::record::Field::LastLogId,
            ..
        })
    ));

    // grown within the file: the following bytes do not parse as the checkpoint's tail
    let mut chunks = three_chunks();
    chunks[2].1[length_at + 3] ^= 0x10;
    let (chunk, corruption) = check(chunks).expect_err("damaged checkpoint");
    assert_eq!(chunk, 2);
    assert!(matches!(corruption.problem, Problem::Damaged(_)));
}

#[test]
fn every_flipped_bit_of_a_three_chunk_log_is_refused() {
    let whole = three_chunks();
    for i in 0..whole.len() {
        for at in 0..whole[i].1.len() {
            for bit in 0..8 {
                let mut chunks = whole.clone();
                chunks[i].1[at] ^= 1 << bit;
                assert!(
                    check(chunks).is_err(),
                    "bit {bit} of byte {at} of chunk {i} accepted"
                );
            }
        }
    }
}

#[test]
fn every_cut_of_the_last_chunk_keeps_every_record_before_it() {
    let whole = three_chunks();
    let last = &whole[2].1;
    let offsets = records(last);
    for cut in 0..=last.len() {
        let mut chunks = whole.clone();
        chunks[2].1.truncate(cut);
        let accepted = check(chunks).expect("a cut is a torn write");
        let whole_records = offsets.iter().filter(|r| r.end <= cut).count() as u64;
        if whole_records == 0 {
            // the checkpoint itself is cut: the chunk is an interrupted rotation
            assert_eq!(accepted.interrupted_rotation, vec![2], "cut at {cut}");
            assert_eq!(accepted.records, 2 * 7);
        } else {
            assert_eq!(accepted.records, 2 * 7 + whole_records, "cut at {cut}");
        }
    }
}
