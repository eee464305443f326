//! The Raft log never silently drops what it acknowledged: logs written through `LogStore` (the
//! raft-log WAL), then damaged on disk the way a flipped bit, a torn write or ext4 writeback
//! leave them, and opened again.
//!
//! Invariants: the check's framing is the one raft-log writes (every record written parses back,
//! with the log ids written); a damaged length, a length beyond the maximum, a record past the
//! end of a closed chunk or a damaged first record of the last chunk make `LogStore::open` fail
//! with `Error::WalCorrupt` naming the file and the offset, and leave every file as it was; a
//! torn last write and zeros after the last record are trimmed, and every whole entry before
//! them stays readable.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::{IOFlushed, RaftLogReader, RaftLogStorage};
use openraft::testing::log_id;
use openraft::type_config::TypeConfigExt;
use statestore_raft::batch::Batch;
use statestore_raft::log_store::{LogConfig, LogStore};
use statestore_raft::metrics::RaftStorageMetrics;
use statestore_raft::types::{Entry, EntryPayload, TypeConfig, Vote};
use statestore_raft::wal_check::record::{Field, RecordType, parse};
use statestore_raft::wal_check::walk::{Problem, walk_chunk};
use statestore_raft::wal_check::{LogFrames, check_dir};
use statestore_raft::{Error, Result};
use statestore_storage::machine::{Mutation, Proposal};
use statestore_vocab::hlc::Hlc;
use statestore_vocab::keyspace::SetCondition;

/// Entries written by [`write_log`].
const ENTRIES: u64 = 40;
/// Small chunks, so the log spans several.
const CHUNK_BYTES: usize = 4 << 10;

fn config(dir: &Path) -> LogConfig {
    LogConfig {
        dir: dir.to_owned(),
        cache_bytes: 1 << 20,
        chunk_bytes: CHUNK_BYTES,
    }
}

fn open(dir: &Path) -> Result<LogStore> {
    LogStore::open(&config(dir), Arc::new(RaftStorageMetrics::default()))
}

fn entry(index: u64, term: u64) -> Entry {
    let proposal = Proposal {
        stamp: Hlc::parse("1700000000000:0:n1").expect("hlc"),
        wall_ms: 1_700_000_000_000,
        request: None,
        token_seed: None,
        mutation: Mutation::Set {
            key: format!("key-{index}").into_bytes(),
            value: vec![index as u8; 300],
            condition: SetCondition::Always,
            expire_after_ms: None,
            fencing_token: None,
        },
    };
    Entry {
        log_id: log_id::<TypeConfig>(term, 1, index),
        payload: EntryPayload::Normal(Batch::new(vec![proposal])),
    }
}

async fn append(log: &mut LogStore, entries: Vec<Entry>) {
    let (tx, rx) = TypeConfig::oneshot();
    log.append(entries, IOFlushed::signal(tx))
        .await
        .expect("append");
    rx.await.expect("flushed").expect("durable");
}

/// A log of [`ENTRIES`] entries over several chunks: a vote, then each entry appended and
/// flushed on its own with the commit of the one before it; the last record is the last
/// entry's Append.
async fn write_log(dir: &Path) {
    let mut log = open(dir).expect("open a new log");
    log.save_vote(&Vote::new(1, 1)).await.expect("vote");
    for index in 1..=ENTRIES {
        if index > 1 {
            log.save_committed(Some(log_id::<TypeConfig>(1, 1, index - 1)))
                .await
                .expect("commit");
        }
        append(&mut log, vec![entry(index, 1)]).await;
    }
}

/// A fresh log written by [`write_log`], its last chunk file and that file's bytes.
async fn written_log() -> (tempfile::TempDir, PathBuf, Vec<u8>) {
    let dir = tempfile::tempdir().expect("temp dir");
    write_log(dir.path()).await;
    let last = chunk_files(dir.path()).last().expect("a chunk").clone();
    let bytes = std::fs::read(&last).expect("read");
    (dir, last, bytes)
}

/// The chunk files, in log order.
fn chunk_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("log dir")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "wal"))
        .collect();
    files.sort();
    files
}

fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    chunk_files(dir)
        .into_iter()
        .map(|path| {
            let bytes = std::fs::read(&path).expect("read chunk");
            (path, bytes)
        })
        .collect()
}

/// Offset of the `n`th record of `record_type` in `chunk`.
fn nth_record(
    chunk: &[u8],
    record_type: RecordType,
    n: usize,
) -> statestore_raft::wal_check::record::Record {
    let mut at = 0;
    let mut seen = 0;
    loop {
        let record = parse(chunk, at).expect("a whole chunk");
        if record.record_type == record_type {
            if seen == n {
                return record;
            }
            seen += 1;
        }
        at = record.range.end;
    }
}

/// The log indexes `log` holds, and its last log id's index.
async fn indexes(log: &mut LogStore) -> (Vec<u64>, Option<u64>) {
    let entries = log.try_get_log_entries(0..).await.expect("read");
    let state = log.get_log_state().await.expect("state");
    (
        entries.iter().map(|e| e.log_id.index).collect(),
        state.last_log_id.map(|l| l.index),
    )
}

fn refusal(result: Result<LogStore>) -> Box<statestore_raft::wal_check::WalCorruption> {
    match result {
        Err(Error::WalCorrupt(corruption)) => corruption,
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("opened a damaged log"),
    }
}

#[tokio::test]
async fn records_written_through_the_log_store_parse_back_with_the_check_framing() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let mut log = open(dir.path()).expect("open");
        log.save_vote(&Vote::new(1, 1)).await.expect("vote");
        for index in 1..=30 {
            append(&mut log, vec![entry(index, 1)]).await;
        }
        log.save_committed(Some(log_id::<TypeConfig>(1, 1, 20)))
            .await
            .expect("commit");
        log.truncate_after(Some(log_id::<TypeConfig>(1, 1, 28)))
            .await
            .expect("truncate");
        append(&mut log, vec![entry(29, 2)]).await;
        log.purge(log_id::<TypeConfig>(1, 1, 3))
            .await
            .expect("purge");
        append(&mut log, vec![entry(30, 2)]).await;
    }
    let files = chunk_files(dir.path());
    assert!(files.len() >= 3, "several chunks: {files:?}");
    let mut types = Vec::new();
    let mut appended = Vec::new();
    let mut last = None;
    for path in &files {
        let bytes = std::fs::read(path).expect("read");
        let walk = walk_chunk(&bytes, &LogFrames, last);
        assert_eq!(walk.damage, None, "{}", path.display());
        assert_eq!(walk.end, bytes.len(), "{}", path.display());
        let mut at = 0;
        let mut first = true;
        while at < bytes.len() {
            let record = parse(&bytes, at).expect("whole");
            if first {
                assert_eq!(record.record_type, RecordType::Checkpoint);
                first = false;
            }
            if record.record_type == RecordType::Append {
                let frame = record.frame(Field::LogId).expect("log id frame");
                let id: statestore_raft::types::LogId =
                    statestore_storage::codec::decode("log id", &bytes[frame.value.clone()])
                        .expect("a log id");
                appended.push((id.leader_id.term, id.index));
            }
            types.push(record.record_type);
            at = record.range.end;
        }
        last = walk.last;
    }
    let mut expected: Vec<(u64, u64)> = (1..=30).map(|i| (1, i)).collect();
    expected.extend([(2, 29), (2, 30)]);
    assert_eq!(appended, expected);
    for record_type in [
        RecordType::SaveVote,
        RecordType::Commit,
        RecordType::TruncateAfter,
        RecordType::PurgeUpto,
    ] {
        assert!(types.contains(&record_type), "{record_type:?} written");
    }
    assert_eq!(last.map(|l| (l.leader_id.term, l.index)), Some((2, 30)));
    let accepted = check_dir(dir.path()).expect("a whole log");
    assert_eq!(accepted.records, types.len() as u64);
    assert_eq!(accepted.trim, None);
}

#[tokio::test]
async fn a_flipped_length_bit_in_the_last_chunk_is_refused_with_file_and_offset() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_log(dir.path()).await;
    let files = chunk_files(dir.path());
    assert!(files.len() >= 3, "several chunks: {files:?}");
    let last = files.last().expect("a chunk").clone();
    let whole = std::fs::read(&last).expect("read");
    // the first Append of the last chunk, followed by more records
    let record = nth_record(&whole, RecordType::Append, 0);
    assert!(record.range.end < whole.len());
    let length_at = record.frame(Field::Payload).expect("payload").length_at;
    let mut damaged = whole.clone();
    damaged[length_at + 1] ^= 0x10; // +1 MiB: past the end of the file
    std::fs::write(&last, &damaged).expect("damage");
    let before = snapshot(dir.path());

    let corruption = refusal(open(dir.path()));
    assert_eq!(corruption.path, last);
    assert_eq!(corruption.offset, length_at as u64);
    assert!(matches!(
        corruption.problem,
        Problem::LengthDamaged {
            field: Field::Payload,
            ..
        }
    ));
    let text = corruption.to_string();
    assert!(
        text.contains(&format!("{} at byte {length_at}", last.display())),
        "{text}"
    );
    assert!(text.contains("refuses to start"), "{text}");
    assert_eq!(snapshot(dir.path()), before, "nothing trimmed or removed");

    // with the bit restored every entry is there
    std::fs::write(&last, &whole).expect("repair");
    let mut log = open(dir.path()).expect("open the repaired log");
    let (held, last_index) = indexes(&mut log).await;
    assert_eq!(held, (1..=ENTRIES).collect::<Vec<_>>());
    assert_eq!(last_index, Some(ENTRIES));
}

#[tokio::test]
async fn a_cut_last_record_is_trimmed_and_every_whole_entry_stays() {
    let (dir, last, whole) = written_log().await;
    let record = nth_record(
        &whole,
        RecordType::Append,
        count(&whole, RecordType::Append) - 1,
    );
    assert_eq!(
        record.range.end,
        whole.len(),
        "the last record is the last Append"
    );
    std::fs::write(&last, &whole[..record.range.start + 40]).expect("cut");

    let mut log = open(dir.path()).expect("a torn write is trimmed");
    let (held, last_index) = indexes(&mut log).await;
    assert_eq!(held, (1..ENTRIES).collect::<Vec<_>>());
    assert_eq!(last_index, Some(ENTRIES - 1));
    drop(log);
    let trimmed = std::fs::read(&last).map(|b| b.len()).unwrap_or(0);
    assert!(
        trimmed == record.range.start || !last.exists(),
        "trimmed to {} (record at {})",
        trimmed,
        record.range.start
    );
}

fn count(chunk: &[u8], record_type: RecordType) -> usize {
    let mut at = 0;
    let mut n = 0;
    while at < chunk.len() {
        let record = parse(chunk, at).expect("whole");
        n += usize::from(record.record_type == record_type);
        at = record.range.end;
    }
    n
}

#[tokio::test]
async fn a_length_beyond_the_maximum_is_refused_even_in_the_last_record() {
    let (dir, last, mut bytes) = written_log().await;
    let record = nth_record(
        &bytes,
        RecordType::Append,
        count(&bytes, RecordType::Append) - 1,
    );
    let length_at = record.frame(Field::Payload).expect("payload").length_at;
    bytes[length_at] |= 0xf0;
    std::fs::write(&last, &bytes).expect("damage");
    let corruption = refusal(open(dir.path()));
    assert_eq!(
        (corruption.path.clone(), corruption.offset),
        (last, length_at as u64)
    );
    assert!(corruption.to_string().contains("beyond"), "{corruption}");
}

#[tokio::test]
async fn a_record_past_the_end_of_a_closed_chunk_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_log(dir.path()).await;
    let first = chunk_files(dir.path())[0].clone();
    let bytes = std::fs::read(&first).expect("read");
    std::fs::write(&first, &bytes[..bytes.len() - 5]).expect("cut");
    let before = snapshot(dir.path());
    let corruption = refusal(open(dir.path()));
    assert_eq!(corruption.path, first);
    assert_eq!(corruption.problem, Problem::RunsPastChunkEnd);
    assert!(corruption.to_string().contains("not the last one"));
    assert_eq!(snapshot(dir.path()), before);
}

#[tokio::test]
async fn zeros_after_the_last_record_are_trimmed() {
    let (dir, last, whole) = written_log().await;
    let mut bytes = whole.clone();
    bytes.resize(whole.len() + 8192, 0);
    std::fs::write(&last, &bytes).expect("extend");
    let accepted = check_dir(dir.path()).expect("zeros are a torn write");
    let trim = accepted.trim.expect("a trim");
    assert_eq!(
        (trim.at, trim.bytes, trim.zero_filled),
        (whole.len(), 8192, true)
    );

    let mut log = open(dir.path()).expect("open");
    let (held, _) = indexes(&mut log).await;
    assert_eq!(held, (1..=ENTRIES).collect::<Vec<_>>());
    drop(log);
    assert_eq!(std::fs::read(&last).expect("read"), whole);
}

#[tokio::test]
async fn a_damaged_first_record_of_the_last_chunk_is_refused_not_removed() {
    let (dir, last, mut bytes) = written_log().await;
    let checkpoint = parse(&bytes, 0).expect("checkpoint");
    assert_eq!(checkpoint.record_type, RecordType::Checkpoint);
    let frame = checkpoint.frame(Field::LastLogId).expect("last log id");
    // the last log id's length grown by one: the checkpoint no longer parses
    bytes[frame.length_at + 3] += 1;
    std::fs::write(&last, &bytes).expect("damage");
    let before = snapshot(dir.path());
    let corruption = refusal(open(dir.path()));
    assert_eq!(corruption.path, last);
    assert_eq!(snapshot(dir.path()), before, "the chunk is still there");
}

#[tokio::test]
async fn an_empty_successor_chunk_is_an_interrupted_rotation() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_log(dir.path()).await;
    let last = chunk_files(dir.path()).last().expect("a chunk").clone();
    let name = last
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let start: u64 = name
        .trim_start_matches("r-")
        .trim_end_matches(".wal")
        .replace('_', "")
        .parse()
        .expect("offset");
    let end = start + std::fs::metadata(&last).expect("meta").len();
    let digits = format!("{end:020}");
    let grouped: Vec<String> = digits
        .as_bytes()
        .rchunks(3)
        .rev()
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    let successor = dir.path().join(format!("r-{}.wal", grouped.join("_")));
    std::fs::write(&successor, b"").expect("successor");
    let accepted = check_dir(dir.path()).expect("an interrupted rotation");
    assert_eq!(accepted.interrupted_rotation.len(), 1);
    let mut log = open(dir.path()).expect("open");
    let (held, _) = indexes(&mut log).await;
    assert_eq!(held, (1..=ENTRIES).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_sector_of_zeros_inside_the_last_writes_is_trimmed_there_though_records_follow() {
    // Pages of the last writes reached the disk out of order before a crash: an aligned sector
    // that starts inside an Append near the end reads as zeros, the records after it survived.
    let (dir, last, mut bytes) = written_log().await;
    let appends = count(&bytes, RecordType::Append);
    let (torn, sector) = (appends.saturating_sub(4)..appends - 1)
        .map(|n| nth_record(&bytes, RecordType::Append, n))
        .find_map(|record| {
            let sector = record.range.start.div_ceil(512) * 512;
            (sector < record.range.end && sector + 512 < bytes.len()).then_some((record, sector))
        })
        .expect("an aligned sector starts inside one of the last Appends");
    bytes[sector..sector + 512].fill(0);
    std::fs::write(&last, &bytes).expect("tear");

    let mut log = open(dir.path()).expect("a torn write with a hole is trimmed");
    let (held, last_index) = indexes(&mut log).await;
    let kept = last_index.expect("entries before the tear");
    assert!(
        kept < ENTRIES - 1,
        "the torn Append and those after it are gone"
    );
    assert_eq!(held, (1..=kept).collect::<Vec<_>>());
    drop(log);
    let trimmed = std::fs::read(&last).expect("read").len();
    assert_eq!(trimmed, torn.range.start, "cut where the torn Append began");
}

#[tokio::test]
async fn the_unsynced_rest_of_the_sector_where_the_last_sync_ended_is_trimmed_there() {
    // The last sync ended inside a sector, at the start of an Append near the end; that sector
    // did not reach the disk again (it reads as synced: zeros after the sync's end) while the
    // next sectors of the same write did. 100 single-node power cuts met this at cycle 92 and
    // the node refused to start (a checksum mismatch: the zeros parse as an empty vote).
    let (dir, last, mut bytes) = written_log().await;
    let appends = count(&bytes, RecordType::Append);
    let torn = (appends.saturating_sub(4)..appends - 1)
        .map(|n| nth_record(&bytes, RecordType::Append, n))
        .find(|record| {
            let rest = record.range.start.next_multiple_of(512) - record.range.start;
            rest >= statestore_raft::wal_check::walk::SYNC_END_HOLE_MIN_ZEROS
                && record.range.start + rest < record.range.end
        })
        .expect("one of the last Appends starts 9 or more bytes before a sector's end");
    let sector_end = torn.range.start.next_multiple_of(512);
    bytes[torn.range.start..sector_end].fill(0);
    std::fs::write(&last, &bytes).expect("tear");

    let mut log = open(dir.path()).expect("the lost end of a sync is trimmed");
    let (held, last_index) = indexes(&mut log).await;
    let kept = last_index.expect("entries before the tear");
    assert!(
        kept < ENTRIES,
        "the torn Append and those after it are gone"
    );
    assert_eq!(held, (1..=kept).collect::<Vec<_>>());
    drop(log);
    let trimmed = std::fs::read(&last).expect("read").len();
    assert_eq!(trimmed, torn.range.start, "cut where the torn Append began");
}

/// A purge frees the chunks it covers (their blocks off the flush thread: `purged_chunks`), and
/// every entry after the purge point reads back, before and after a reopen.
#[tokio::test]
async fn a_purge_removes_the_chunks_below_it_and_every_later_entry_reads_back() {
    let dir = tempfile::tempdir().expect("temp dir");
    let purged_to = log_id::<TypeConfig>(1, 1, 30);
    {
        let metrics = Arc::new(RaftStorageMetrics::default());
        let mut log = LogStore::open(&config(dir.path()), metrics.clone()).expect("open");
        log.save_vote(&Vote::new(1, 1)).await.expect("vote");
        for index in 1..=ENTRIES {
            append(&mut log, vec![entry(index, 1)]).await;
        }
        let before = chunk_files(dir.path());
        assert!(before.len() >= 4, "several chunks: {before:?}");
        log.purge(purged_to).await.expect("purge");
        // The flush thread removes the chunks after the purge record's sync, before this
        // append's.
        append(&mut log, vec![entry(ENTRIES + 1, 1)]).await;
        let after = chunk_files(dir.path());
        let removed = before.iter().filter(|path| !after.contains(path)).count();
        assert!(removed >= 2, "chunks removed: {removed} of {before:?}");
        // Each was held through its removal and handed to the reaper (counted once it is).
        let freed = &metrics.log_chunks_freed_in_background_total;
        let counted = statestore_harness::wait_for(std::time::Duration::from_secs(20), || {
            std::future::ready((freed.get() >= removed as u64).then_some(()))
        })
        .await;
        assert!(counted.is_some(), "freed in background: {}", freed.get());
        assert_eq!(freed.get(), removed as u64);
        let read = log
            .try_get_log_entries(31..=ENTRIES + 1)
            .await
            .expect("read");
        assert_eq!(read.len(), 11);
    }
    let mut reopened = open(dir.path()).expect("reopen");
    let state = reopened.get_log_state().await.expect("state");
    assert_eq!(state.last_purged_log_id, Some(purged_to));
    let read = reopened
        .try_get_log_entries(31..=ENTRIES + 1)
        .await
        .expect("read after reopen");
    assert_eq!(
        read.iter().map(|e| e.log_id.index).collect::<Vec<_>>(),
        (31..=ENTRIES + 1).collect::<Vec<_>>()
    );
}
