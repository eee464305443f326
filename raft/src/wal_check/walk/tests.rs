//! The tail rules on stand-in logs: every cut and every zero fill of the last write is torn,
//! every single flipped bit anywhere is corruption, and a valid record embedded in a torn
//! record's data does not turn a tear into a refusal unless it carries the next log index.

use super::*;
use crate::wal_check::tests::support::{Plain, append, chunk, commit, frame, record, records};

/// The verdict on `bytes` as the last chunk, `None` when it is whole.
fn verdict(bytes: &[u8]) -> Option<TailVerdict> {
    let walk = walk_chunk(bytes, &Plain, None);
    walk.damage
        .map(|damage| judge_tail(bytes, &damage, walk.last.as_ref(), &Plain))
}

#[test]
fn a_whole_chunk_walks_to_its_end_following_the_last_log_id() {
    let bytes = chunk(1..6);
    let walk = walk_chunk(&bytes, &Plain, None);
    assert_eq!(walk.records, 1 + 5 * 2);
    assert_eq!(walk.end, bytes.len());
    assert_eq!(walk.last, Some(5));
    assert_eq!(walk.damage, None);

    // truncate after 3, purge up to 9, as raft-log's state follows them
    let mut more = bytes.clone();
    more.extend(crate::wal_check::tests::support::record(
        3,
        &[
            vec![1],
            crate::wal_check::tests::support::frame(&3u64.to_be_bytes()),
        ]
        .concat(),
    ));
    assert_eq!(walk_chunk(&more, &Plain, None).last, Some(3));
    more.extend(crate::wal_check::tests::support::record(
        4,
        &crate::wal_check::tests::support::frame(&9u64.to_be_bytes()),
    ));
    assert_eq!(walk_chunk(&more, &Plain, None).last, Some(9));
}

#[test]
fn every_cut_inside_the_last_write_is_a_torn_tail_at_its_first_record() {
    let whole = chunk(1..4);
    let offsets = records(&whole);
    // the last write: the final Append and Commit
    let last_write = offsets[offsets.len() - 2].start;
    for cut in last_write..whole.len() {
        let expected_at = offsets
            .iter()
            .rev()
            .find(|range| range.start <= cut)
            .map(|range| range.start)
            .expect("a record");
        match verdict(&whole[..cut]) {
            None => assert_eq!(expected_at, cut, "whole at {cut}"),
            Some(found) => assert_eq!(
                found,
                TailVerdict::Torn {
                    at: expected_at,
                    // a cut within the type's leading zero bytes leaves only zeros
                    zero_filled: whole[expected_at..cut].iter().all(|b| *b == 0)
                },
                "cut at {cut}"
            ),
        }
    }
}

#[test]
fn zeros_after_the_last_record_are_a_torn_tail() {
    let whole = chunk(1..4);
    for zeros in [1, 7, 16, 24, 4096] {
        let mut bytes = whole.clone();
        bytes.resize(whole.len() + zeros, 0);
        assert_eq!(
            verdict(&bytes),
            Some(TailVerdict::Torn {
                at: whole.len(),
                zero_filled: true
            }),
            "{zeros} zeros"
        );
    }
    // a cut record followed by zeros is not a zero fill from its start: refused, as chunked-wal
    // refuses it
    let mut bytes = whole[..whole.len() - 3].to_vec();
    bytes.resize(whole.len() + 100, 0);
    assert!(matches!(verdict(&bytes), Some(TailVerdict::Corrupt(_))));
}

#[test]
fn every_flipped_bit_anywhere_in_the_last_chunk_is_refused() {
    let whole = chunk(1..4);
    for at in 0..whole.len() {
        for bit in 0..8 {
            let mut bytes = whole.clone();
            bytes[at] ^= 1 << bit;
            match verdict(&bytes) {
                Some(TailVerdict::Corrupt(_)) => {}
                other => panic!("bit {bit} of byte {at}: {other:?}"),
            }
        }
    }
}

#[test]
fn a_grown_length_followed_by_records_is_named_as_a_damaged_length() {
    let whole = chunk(1..4);
    let offsets = records(&whole);
    // the payload length of the first Append: type(4) + log id frame(12), then its length
    let length_at = offsets[1].start + 16;
    let mut bytes = whole.clone();
    bytes[length_at] ^= 0x01; // +16 MiB: past the end of the file
    let Some(TailVerdict::Corrupt(found)) = verdict(&bytes) else {
        panic!("refused");
    };
    assert_eq!(found.at, length_at);
    assert!(matches!(
        found.problem,
        Problem::LengthDamaged {
            field: Field::Payload,
            ..
        }
    ));
    assert!(found.problem.to_string().contains("damaged length"));
}

#[test]
fn damage_beyond_the_lengths_is_found_by_the_next_append() {
    let whole = chunk(1..4);
    let offsets = records(&whole);
    // the first Append's payload length and its first value bytes overwritten: the lengths
    // cannot be recovered, but the Append of index 2 follows
    let append_at = offsets[1].start;
    let mut bytes = whole.clone();
    bytes[append_at + 16..append_at + 22].copy_from_slice(&[0x00, 0x7f, 0xff, 0xff, 0xaa, 0xbb]);
    let Some(TailVerdict::Corrupt(found)) = verdict(&bytes) else {
        panic!("refused");
    };
    assert_eq!(found.at, append_at);
    assert_eq!(
        found.problem,
        Problem::RecordFollows {
            follows_at: offsets[3].start,
            index: 2
        }
    );
}

#[test]
fn a_valid_record_inside_torn_client_data_does_not_refuse_the_start() {
    let whole = chunk(1..4);
    // the next write: an Append of index 4 whose value embeds whole records of other indexes
    let mut value = Vec::new();
    for index in [1, 3, 99, 1000] {
        value.extend(append(index, b"embedded"));
        value.extend(commit(index));
    }
    let next = append(4, &value);
    let mut bytes = whole.clone();
    bytes.extend(&next);
    for cut in whole.len() + 1..bytes.len() {
        assert!(
            matches!(
                verdict(&bytes[..cut]),
                Some(TailVerdict::Torn { at, .. }) if at == whole.len()
            ),
            "cut at {cut}"
        );
    }
}

#[test]
fn only_an_embedded_record_with_the_next_index_counts_and_that_is_a_documented_limit() {
    let whole = chunk(1..4);
    // a client that guessed the log index of the entry after its own (5, its entry being 4)
    let embedded = append(5, b"guess");
    let next = append(4, &[embedded.clone(), vec![0xee; 40]].concat());
    let mut bytes = whole.clone();
    bytes.extend(&next);
    let cut = bytes.len() - 10;
    assert!(matches!(
        verdict(&bytes[..cut]),
        Some(TailVerdict::Corrupt(Corruption {
            problem: Problem::RecordFollows { index: 5, .. },
            ..
        }))
    ));
}

#[test]
fn the_search_verifies_a_bounded_number_of_candidates() {
    let whole = chunk(1..4);
    // the Append of index 1 damaged, then more than the bound of fake candidates with the
    // expected index and a wrong checksum, then the real records
    let offsets = records(&whole);
    let damaged_at = offsets[1].start;
    let mut fake = append(2, b"fake");
    let last = fake.len() - 1;
    fake[last] ^= 0xff;
    let mut bytes = whole[..damaged_at].to_vec();
    let mut damaged = append(1, b"value-1");
    damaged[16..22].copy_from_slice(&[0x00, 0x7f, 0xff, 0xff, 0xaa, 0xbb]);
    bytes.extend(damaged);
    for _ in 0..MAX_VERIFIED_CANDIDATES {
        bytes.extend(&fake);
    }
    let real_at = bytes.len();
    bytes.extend(&whole[offsets[3].start..]);
    assert!(matches!(verdict(&bytes), Some(TailVerdict::Torn { .. })));
    // one fake fewer and the real Append is reached
    let fewer = [&bytes[..real_at - fake.len()], &whole[offsets[3].start..]].concat();
    assert!(matches!(
        verdict(&fewer),
        Some(TailVerdict::Corrupt(Corruption {
            problem: Problem::RecordFollows { index: 2, .. },
            ..
        }))
    ));
}

#[test]
fn every_flipped_bit_of_a_small_last_record_is_refused() {
    use crate::wal_check::tests::support::{frame, id, record};
    let vote = record(0, &frame(&id(7)));
    let truncate_none = record(3, &[0]);
    let truncate_some = record(3, &[vec![1], frame(&id(2))].concat());
    for last in [vote, truncate_none, truncate_some] {
        let mut whole = chunk(1..4);
        whole.extend(&last);
        let start = whole.len() - last.len();
        for at in start..whole.len() {
            for bit in 0..8 {
                let mut bytes = whole.clone();
                bytes[at] ^= 1 << bit;
                match verdict(&bytes) {
                    Some(TailVerdict::Corrupt(_)) => {}
                    other => panic!("bit {bit} of byte {at}: {other:?}"),
                }
            }
        }
    }
}

/// A chunk whose last write (everything from the returned offset) is three large Appends and
/// their Commits, after records written and synced before it.
fn chunk_with_large_last_write() -> (Vec<u8>, usize) {
    let mut bytes = chunk(1..4);
    let last_write = bytes.len();
    for index in 4..7 {
        let value: Vec<u8> = (0..3000u32).map(|i| b'a' + (i % 26) as u8).collect();
        bytes.extend(append(index, &value));
        bytes.extend(commit(index));
    }
    (bytes, last_write)
}

#[test]
fn a_sector_of_the_last_write_that_never_reached_the_disk_is_a_torn_tail_whatever_follows() {
    let (whole, last_write) = chunk_with_large_last_write();
    let offsets = records(&whole);
    let first_sector = last_write.div_ceil(SECTOR_BYTES) * SECTOR_BYTES;
    let mut holes = 0;
    for sector in (first_sector..whole.len()).step_by(SECTOR_BYTES) {
        if sector + SECTOR_BYTES > whole.len() {
            break; // a partial last sector: zeros to the end, the older rule
        }
        let mut bytes = whole.clone();
        bytes[sector..sector + SECTOR_BYTES].fill(0);
        // the first record that overlaps the zeroed sector is where the damage is found
        let expected_at = offsets
            .iter()
            .find(|range| range.end > sector)
            .map(|range| range.start)
            .expect("a record");
        match verdict(&bytes) {
            Some(TailVerdict::TornWithHole { at, hole_at }) => {
                assert_eq!((at, hole_at), (expected_at, sector), "sector at {sector}");
                holes += 1;
            }
            // the zeros end the file's last record exactly: zeros to its end or a short record
            Some(TailVerdict::Torn { at, .. }) => assert_eq!(at, expected_at, "sector {sector}"),
            other => panic!("sector at {sector}: {other:?}"),
        }
    }
    assert!(holes >= 15, "only {holes} sectors were judged holes");
}

#[test]
fn a_flipped_bit_before_a_sector_of_zeros_in_later_records_is_still_refused() {
    // a later record holds 1,024 zero bytes (client data may): the damaged record does not
    // overlap them, so they do not make its damage a tear
    let mut whole = chunk(1..3);
    let damaged = records(&whole)[3].clone(); // Append 2
    whole.extend(append(3, &[0u8; 1024]));
    whole.extend(commit(3));
    for at in damaged.clone() {
        let mut bytes = whole.clone();
        bytes[at] ^= 0x10;
        match verdict(&bytes) {
            Some(TailVerdict::Corrupt(_)) => {}
            other => panic!("flip at {at} (record {damaged:?}): {other:?}"),
        }
    }
}

#[test]
fn the_rest_of_the_sector_after_the_last_sync_that_never_reached_the_disk_is_a_torn_tail() {
    // The last sync ended mid-sector; the sector (and in the power-cut filesystem, the rest of
    // its page) holding that end did not reach the disk: it reads as synced, zeros after the
    // last synced record, while later pages of the same write did. A padding record moves the
    // end of the sync through every offset of a sector.
    let mut checked = 0;
    for padding in 0..SECTOR_BYTES {
        let mut synced = chunk(1..4);
        synced.extend(append(4, &vec![b'p'; padding]));
        let last_write = synced.len();
        let mut whole = synced;
        for index in 5..8 {
            let value: Vec<u8> = (0..3000u32).map(|i| b'a' + (i % 26) as u8).collect();
            whole.extend(append(index, &value));
            whole.extend(commit(index));
        }
        let sector_end = last_write.next_multiple_of(SECTOR_BYTES);
        let page_end = last_write.next_multiple_of(4096);
        for lost_to in [sector_end, page_end] {
            let mut bytes = whole.clone();
            bytes[last_write..lost_to].fill(0);
            let rest = sector_end - last_write;
            match verdict(&bytes) {
                Some(TailVerdict::TornWithHole { at, hole_at })
                    if rest >= SYNC_END_HOLE_MIN_ZEROS =>
                {
                    assert_eq!((at, hole_at), (last_write, last_write), "lost to {lost_to}");
                    checked += 1;
                }
                // Aligned: the lost page is whole sectors (the older rule finds them).
                Some(TailVerdict::TornWithHole { at, .. }) if rest == 0 => {
                    assert_eq!(at, last_write);
                }
                // As few zeros as a vote record (with a flipped bit) starts with, then written
                // bytes: refused unless the lost page's whole sectors overlap what they parse as.
                Some(TailVerdict::Corrupt(_)) | Some(TailVerdict::TornWithHole { .. })
                    if rest < SYNC_END_HOLE_MIN_ZEROS => {}
                // The zeroed bytes were the next record's zero high bytes of its type.
                None if bytes == whole => {}
                other => panic!("sync ended at {last_write}, lost to {lost_to}: {other:?}"),
            }
        }
    }
    assert!(
        checked >= 2 * (SECTOR_BYTES - 2 * SYNC_END_HOLE_MIN_ZEROS),
        "{checked}"
    );
}

#[test]
fn a_damaged_record_that_starts_with_only_a_votes_zeros_is_still_refused() {
    // A record whose first bytes up to the end of its sector read zero (it parses as a vote),
    // with written bytes after: one fewer than SYNC_END_HOLE_MIN_ZEROS, as many as a vote with
    // a flipped bit starts with, so not taken for the lost end of a sync.
    let zeros = SYNC_END_HOLE_MIN_ZEROS - 1;
    let mut before = chunk(1..3);
    before.extend(append(3, b""));
    let padding =
        (SECTOR_BYTES - zeros + SECTOR_BYTES - before.len() % SECTOR_BYTES) % SECTOR_BYTES;
    let mut bytes = chunk(1..3);
    bytes.extend(append(3, &vec![b'p'; padding]));
    let at = bytes.len();
    assert_eq!(at.next_multiple_of(SECTOR_BYTES) - at, zeros);
    bytes.extend(append(4, b"value-4"));
    bytes.extend(commit(4));
    bytes[at..at + zeros].fill(0);
    let verdict = verdict(&bytes);
    assert!(
        matches!(verdict, Some(TailVerdict::Corrupt(_))),
        "{verdict:?}"
    );
}

#[test]
fn every_flipped_bit_of_a_vote_record_at_every_sector_offset_is_refused() {
    // A vote record starts with the most zeros a record written whole has (7); one flipped bit
    // makes 8, still short of SYNC_END_HOLE_MIN_ZEROS wherever the record lies in its sector.
    let vote = record(0, &frame(&[1, 0, 0, 0, 0, 0, 0, 5]));
    for padding in 0..SECTOR_BYTES {
        let mut whole = chunk(1..3);
        whole.extend(append(3, &vec![b'p'; padding]));
        let at = whole.len();
        // Only a record within its own length of the sector's end can meet the rule.
        let to_sector_end = at.next_multiple_of(SECTOR_BYTES) - at;
        if to_sector_end > 2 * vote.len() {
            continue;
        }
        whole.extend(&vote);
        whole.extend(append(4, b"value-4"));
        whole.extend(commit(4));
        for offset in at..at + vote.len() {
            for bit in 0..8 {
                let mut bytes = whole.clone();
                bytes[offset] ^= 1 << bit;
                let verdict = verdict(&bytes);
                assert!(
                    matches!(verdict, Some(TailVerdict::Corrupt(_))),
                    "vote at {at}, bit {bit} of byte {offset}: {verdict:?}"
                );
            }
        }
    }
}
