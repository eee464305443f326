//! Fuzz target for the Raft log check (`statestore_raft::wal_check`) and the log store's frame
//! decoders. Never panics, whatever the bytes; the check's verdicts satisfy
//! `check_invariants` (a walk agrees with a walk of the prefix it accepted, a trimmed log is
//! accepted again unchanged); and on logs built with raft-log's encoder:
//!
//! - an undamaged log is accepted whole;
//! - every single flipped bit is refused;
//! - a cut of the last chunk is accepted with the records before the cut (or refused only by a
//!   record embedded in the cut record that names the next log index, or that one flipped bit
//!   would make whole: the documented limits);
//! - zeros after the last record are trimmed.
//!
//! The first byte picks raw bytes split into chunks (even) or a built log (odd). The log store's
//! frame decoders read the same bytes: a damaged length must not make them allocate more than
//! the input holds (libFuzzer's `-malloc_limit_mb` catches it).

#![no_main]

use codeq::Decode;
use libfuzzer_sys::fuzz_target;
use openraft::testing::log_id;
use raft_log::RaftLogAction;
use statestore_raft::batch::Batch;
use statestore_raft::log_store::{WalLogId, WalPayload, WalVote};
use statestore_raft::types::{EntryPayload, LogId, TypeConfig, Vote};
use statestore_raft::wal_check::record::parse;
use statestore_raft::wal_check::walk::Problem;
use statestore_raft_fuzz::{Choices, Chunks, action, check, check_invariants, checkpoint};
use statestore_vocab::hlc::Hlc;
use statestore_vocab::keyspace::SetCondition;
use statestore_storage::machine::{Mutation, Proposal};

fuzz_target!(|input: &[u8]| {
    let _ = WalLogId::decode(input);
    let _ = WalVote::decode(input);
    let _ = WalPayload::decode(input);
    let mut choices = Choices(input);
    if choices.u8() & 1 == 0 {
        raw(choices);
    } else {
        built(choices);
    }
});

/// The bytes as up to three chunks (lengths from the input), named where the one before ends.
fn raw(mut choices: Choices) {
    let count = 1 + usize::from(choices.u8() % 3);
    let mut chunks: Chunks = Vec::new();
    let mut start = 0u64;
    for i in 0..count {
        let bytes = if i + 1 == count {
            choices.rest()
        } else {
            let len = usize::from(choices.u16());
            choices.take(len)
        };
        chunks.push((start, bytes.to_vec()));
        start += bytes.len() as u64;
    }
    let _ = check_invariants(&chunks);
}

fn payload(choices: &mut Choices) -> EntryPayload {
    if choices.u8() % 4 == 0 {
        return EntryPayload::Blank;
    }
    let len = usize::from(choices.u8());
    let Ok(stamp) = Hlc::parse("1700000000000:0:n1") else {
        return EntryPayload::Blank;
    };
    let proposal = Proposal {
        stamp,
        wall_ms: 1_700_000_000_000,
        request: None,
        token_seed: None,
        mutation: Mutation::Set {
            key: b"k".to_vec(),
            value: choices.take(len).to_vec(),
            condition: SetCondition::Always,
            expire_after_ms: None,
            fencing_token: None,
        },
    };
    EntryPayload::Normal(Batch::new(vec![proposal]))
}

/// A log of one to three chunks built from the input's choices, each a checkpoint and up to 15
/// records of every type raft-log writes, in an order raft-log accepts.
fn build(choices: &mut Choices) -> (Chunks, u64) {
    let mut chunks: Chunks = Vec::new();
    let mut start = 0u64;
    let mut last: Option<LogId> = None;
    let mut term = 1;
    let mut records = 0;
    for _ in 0..1 + choices.u8() % 3 {
        let mut bytes = checkpoint(last);
        records += 1;
        for _ in 0..choices.u8() % 16 {
            let index = last.map_or(1, |id| id.index + 1);
            let record = match choices.u8() % 8 {
                0..=3 => {
                    let id = log_id::<TypeConfig>(term, 1, index);
                    last = Some(id);
                    action(RaftLogAction::Append(
                        WalLogId(id),
                        WalPayload(payload(choices)),
                    ))
                }
                4 => match last {
                    Some(id) => action(RaftLogAction::Commit(WalLogId(id))),
                    None => continue,
                },
                5 => {
                    term += u64::from(choices.u8() % 2);
                    action(RaftLogAction::SaveVote(WalVote(Vote::new(term, 1))))
                }
                6 => {
                    let keep = last.and_then(|id| id.index.checked_sub(1));
                    last = keep.map(|index| log_id::<TypeConfig>(term, 1, index));
                    action(RaftLogAction::TruncateAfter(last.map(WalLogId)))
                }
                _ => match last {
                    Some(id) => action(RaftLogAction::PurgeUpto(WalLogId(id))),
                    None => continue,
                },
            };
            bytes.extend(record);
            records += 1;
        }
        let len = bytes.len() as u64;
        chunks.push((start, bytes));
        start += len;
    }
    (chunks, records)
}

fn built(mut choices: Choices) {
    let (whole, records) = build(&mut choices);
    let accepted = check_invariants(&whole).expect("an undamaged log is accepted");
    assert_eq!(accepted.records, records);
    assert_eq!(accepted.trim, None);

    let total: usize = whole.iter().map(|(_, bytes)| bytes.len()).sum();
    let mut position = usize::from(choices.u16()) % total.max(1);
    let (chunk, at) = whole
        .iter()
        .enumerate()
        .find_map(|(i, (_, bytes))| {
            if position < bytes.len() {
                Some((i, position))
            } else {
                position -= bytes.len();
                None
            }
        })
        .unwrap_or((0, 0));
    let last = whole.len() - 1;
    let mut damaged = whole.clone();
    match choices.u8() % 4 {
        0 => {
            let bit = choices.u8() % 8;
            damaged[chunk].1[at] ^= 1 << bit;
            assert!(
                check_invariants(&damaged).is_err(),
                "bit {bit} of byte {at} of chunk {chunk} flipped, yet accepted"
            );
        }
        1 => {
            let cut = usize::from(choices.u16()) % (damaged[last].1.len() + 1);
            damaged[last].1.truncate(cut);
            let before: u64 = whole[..last]
                .iter()
                .map(|(_, bytes)| whole_records(bytes))
                .sum();
            match check_invariants(&damaged) {
                Ok(accepted) => {
                    assert_eq!(accepted.records, before + whole_records(&damaged[last].1));
                }
                Err((_, corruption)) => assert!(
                    matches!(
                        corruption.problem,
                        Problem::RecordFollows { .. } | Problem::BitFlipped { .. }
                    ),
                    "a cut at {cut} refused: {corruption:?}"
                ),
            }
        }
        2 => {
            let zeros = 1 + usize::from(choices.u16());
            let len = damaged[last].1.len();
            damaged[last].1.resize(len + zeros, 0);
            let accepted = check_invariants(&damaged).expect("zeros are a torn write");
            let trim = accepted.trim.expect("trimmed");
            assert!(trim.zero_filled);
            assert_eq!(trim.bytes, zeros);
        }
        _ => {
            let bytes = choices.rest();
            let target = &mut damaged[chunk].1;
            let end = (at + bytes.len()).min(target.len());
            target[at..end].copy_from_slice(&bytes[..end - at]);
            let _ = check_invariants(&damaged);
        }
    }
    let _ = check(&damaged);
}

/// Whole records from the start of `bytes`.
fn whole_records(bytes: &[u8]) -> u64 {
    let mut at = 0;
    let mut count = 0;
    while let Ok(record) = parse(bytes, at) {
        at = record.range.end;
        count += 1;
    }
    count
}
