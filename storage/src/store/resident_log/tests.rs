//! Unit tests of the reply memory's log files: what a restart reads back at each point the
//! state database may have reached, torn tails, leftovers and pruning.

use super::*;
use crate::store::resident_journal::ResidentJournal;

fn row(i: u32) -> Vec<u8> {
    let mut key = b"r".to_vec();
    key.extend_from_slice(&i.to_be_bytes());
    key
}

/// Writes layers to a log in `dir`: layer `i` sets row `i`; returns the tables after each
/// layer (index = entry seq).
fn write_layers(dir: &Path, layers: u32, rebase_at: &[u32]) -> Vec<ResidentTables> {
    let mut log = ResidentLog::open(dir, None).expect("open").log;
    let mut journal = ResidentJournal::starting_at(0);
    let mut tables = ResidentTables::default();
    let mut after = Vec::new();
    for i in 0..layers {
        tables.put(row(i), vec![i as u8; 10]);
        journal.note(&row(i), Some(&vec![i as u8; 10][..]));
        let entry = if rebase_at.contains(&i) {
            journal.base(&tables)
        } else {
            journal.layer_entry(&tables).expect("changed")
        };
        assert_eq!(entry.seq, u64::from(i));
        log.append(&entry).expect("append");
        after.push(tables.clone());
    }
    after
}

#[test]
fn a_restart_reads_the_tables_as_of_every_entry_the_state_may_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let after = write_layers(dir.path(), 6, &[]);
    for at in 0..6u64 {
        let opened = ResidentLog::open(dir.path(), Some(at)).expect("open");
        assert_eq!(opened.tables, after[at as usize], "at {at}");
        assert_eq!(opened.next_seq, 6, "numbers are never reused");
    }
}

#[test]
fn a_new_base_starts_a_new_file_and_older_files_stay_until_pruned() {
    let dir = tempfile::tempdir().expect("tempdir");
    let after = write_layers(dir.path(), 8, &[3, 6]);
    let opened = ResidentLog::open(dir.path(), Some(7)).expect("open");
    assert_eq!(opened.log.files(), &[0, 3, 6]);
    assert_eq!(opened.tables, after[7]);
    // the state database still at entry 4: the file of base 3 is read, and only the newer one
    // is dropped
    let mut opened = ResidentLog::open(dir.path(), Some(4)).expect("open");
    assert_eq!(opened.tables, after[4]);
    assert_eq!(
        opened.log.files(),
        &[0, 3],
        "the file the state database never reached is removed"
    );
    opened.log.prune(4).expect("prune");
    assert_eq!(opened.log.files(), &[3]);
    assert!(!dir.path().join(file_name(0)).exists());
    let bytes = opened.log.size_on_disk().load(Ordering::Relaxed);
    assert_eq!(
        bytes,
        std::fs::metadata(dir.path().join(file_name(3)))
            .expect("meta")
            .len()
    );
}

#[test]
fn pruning_keeps_the_newest_base_the_state_has_reached() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_layers(dir.path(), 8, &[3, 6]);
    let mut log = ResidentLog::open(dir.path(), Some(7)).expect("open").log;
    log.prune(5).expect("prune");
    assert_eq!(log.files(), &[3, 6], "entry 5 still needs the base of 3");
    log.prune(7).expect("prune");
    assert_eq!(log.files(), &[6]);
}

#[test]
fn a_torn_last_frame_is_ignored_when_the_state_never_named_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let after = write_layers(dir.path(), 4, &[]);
    let path = dir.path().join(file_name(0));
    let len = std::fs::metadata(&path).expect("meta").len();
    let file = OpenOptions::new().write(true).open(&path).expect("open");
    file.set_len(len - 5).expect("tear the last frame");
    let opened = ResidentLog::open(dir.path(), Some(2)).expect("open");
    assert_eq!(opened.tables, after[2]);
    // ... but a state that needs the torn entry is refused, never served short
    assert!(matches!(
        ResidentLog::open(dir.path(), Some(3)),
        Err(StorageError::Corrupt { .. })
    ));
}

#[test]
fn a_damaged_frame_before_the_needed_entry_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_layers(dir.path(), 4, &[]);
    let path = dir.path().join(file_name(0));
    let mut bytes = std::fs::read(&path).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&path, bytes).expect("write");
    assert!(matches!(
        ResidentLog::open(dir.path(), Some(3)),
        Err(StorageError::Corrupt { .. })
    ));
}

#[test]
fn a_state_naming_an_entry_with_no_file_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(matches!(
        ResidentLog::open(dir.path(), Some(0)),
        Err(StorageError::Corrupt { .. })
    ));
}

#[test]
fn without_an_entry_in_the_state_every_file_is_a_leftover() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_layers(dir.path(), 3, &[]);
    let opened = ResidentLog::open(dir.path(), None).expect("open");
    assert_eq!(opened.tables, ResidentTables::default());
    assert!(opened.log.files().is_empty());
    assert_eq!(opened.next_seq, 0);
}

#[test]
fn a_delta_needs_a_base_in_this_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_layers(dir.path(), 2, &[]);
    let mut opened = ResidentLog::open(dir.path(), Some(1)).expect("open");
    let delta = JournalEntry {
        seq: opened.next_seq,
        base: false,
        rows: Vec::new(),
    };
    assert!(
        opened.log.append(&delta).is_err(),
        "a restart appends a base first"
    );
}

#[test]
fn a_file_without_the_header_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join(file_name(0)), b"not a log").expect("write");
    assert!(ResidentLog::open(dir.path(), Some(0)).is_err());
}

/// A log of `layers` entries reopened, this run's base appended, and the next entry (a delta
/// setting one more row) not yet appended; with the tables after it.
fn reopened_before_a_delta(dir: &Path, layers: u32) -> (ResidentLog, JournalEntry, ResidentTables) {
    let after = write_layers(dir, layers, &[]);
    let last = after.last().expect("a layer").clone();
    let at = u64::from(layers - 1);
    let mut log = ResidentLog::open(dir, Some(at)).expect("open").log;
    let mut journal = ResidentJournal::starting_at(at + 1);
    log.append(&journal.base(&last)).expect("this run's base");
    let mut tables = last;
    tables.put(row(layers + 100), vec![9; 10]);
    journal.note(&row(layers + 100), Some(&vec![9; 10][..]));
    let delta = journal.layer_entry(&tables).expect("changed");
    (log, delta, tables)
}

#[test]
fn a_frame_cut_short_by_a_full_disk_is_cut_off_so_the_retry_reads_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, delta, tables) = reopened_before_a_delta(dir.path(), 3);
    fault::arm(fault::Fault::DiskFullAfter(7));
    assert!(log.append(&delta).is_err(), "the disk filled up mid-frame");
    assert_eq!(log.broken(), None, "a full disk is worth a retry");
    log.append(&delta).expect("the retry");
    let opened = ResidentLog::open(dir.path(), Some(delta.seq)).expect("reads back");
    assert_eq!(opened.tables, tables);
}

#[test]
fn a_base_the_disk_had_no_room_for_is_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let after = write_layers(dir.path(), 2, &[]);
    let mut log = ResidentLog::open(dir.path(), Some(1)).expect("open").log;
    let mut journal = ResidentJournal::starting_at(2);
    let base = journal.base(&after[1]);
    fault::arm(fault::Fault::DiskFullAfter(3));
    assert!(log.append(&base).is_err());
    assert!(
        !dir.path().join(file_name(base.seq)).exists(),
        "its bytes are freed"
    );
    assert_eq!(log.files(), &[0]);
    assert!(!log.has_base(), "no delta may follow it");
    log.append(&base).expect("the retry");
    assert_eq!(log.files(), &[0, 2]);
    let opened = ResidentLog::open(dir.path(), Some(2)).expect("reads back");
    assert_eq!(opened.tables, after[1]);
}

#[test]
fn after_a_failed_sync_the_log_refuses_every_append() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut log, delta, _) = reopened_before_a_delta(dir.path(), 2);
    fault::arm(fault::Fault::SyncFails);
    assert!(log.append(&delta).is_err());
    assert!(log.broken().is_some());
    assert!(
        matches!(log.append(&delta), Err(StorageError::Failed(_))),
        "a retry would sync pages the kernel may have dropped"
    );
}
