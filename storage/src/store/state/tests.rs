//! Unit tests of the state tree: memtable over fjall, resident tables, snapshot export and install.

use super::*;
use crate::engine::TxnWrite;
use crate::error::StorageError;
use crate::layout::Table;
use crate::machine::reply_rows::{self, remembered_value};
use crate::store::memtable::tests::writes;
use crate::store::{Store, StoreConfig};

/// A row of the reply table (resident): any key under its prefix.
fn reply_row(client: &[u8], correlation: &[u8]) -> Vec<u8> {
    let mut row = vec![Table::Replies.prefix()];
    row.extend_from_slice(client);
    row.push(b'/');
    row.extend_from_slice(correlation);
    row
}

/// A row of the reply-expiry index (resident), ordered by `at`.
fn reply_expiry_row(at: u64, reply: &[u8]) -> Vec<u8> {
    let mut row = vec![Table::ReplyExpiry.prefix()];
    row.extend_from_slice(&at.to_be_bytes());
    row.extend_from_slice(reply);
    row
}

/// The names of the files in `dir`, sorted.
fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn scan(view: &StateView) -> Vec<(String, String)> {
    view.range(b"a", b"z")
        .map(|entry| {
            let (k, v) = entry.expect("read");
            (
                String::from_utf8_lossy(&k).into_owned(),
                String::from_utf8_lossy(&v).into_owned(),
            )
        })
        .collect()
}

/// A snapshot transfer or export cut short by a crash leaves a `*.tmp` file; opening the
/// store removes it and keeps everything else in the snapshot directory.
#[test]
fn unfinished_snapshot_files_are_removed_at_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let snapshot_dir = {
        let store = Store::open(&StoreConfig::new(dir.path(), 4 << 20)).expect("store");
        let state = store.state().expect("state");
        let incoming = state.incoming_snapshot_path();
        std::fs::write(&incoming, b"half a transfer").expect("write partial file");
        incoming.parent().expect("snapshot dir").to_path_buf()
    };
    std::fs::write(snapshot_dir.join("export-7.tmp"), b"half an export").expect("write");
    std::fs::write(snapshot_dir.join("keep.bin"), b"not ours to judge").expect("write");
    let reopened = Store::open(&StoreConfig::new(dir.path(), 4 << 20)).expect("reopen");
    let _state = reopened.state().expect("state opens (and cleans up)");
    let left = file_names(&snapshot_dir);
    assert_eq!(left, vec!["keep.bin".to_owned()]);
}

/// Reads see the newest write whether it is in memory or in fjall, across a flush.
#[test]
fn reads_merge_the_memtable_over_fjall_before_and_after_a_flush() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&StoreConfig::new(dir.path(), 4 << 20)).expect("store");
    let state = store.state().expect("state");
    state
        .commit(writes(&[
            ("a", Some("1")),
            ("b", Some("2")),
            ("c", Some("3")),
        ]))
        .expect("commit");
    state.flush_memtable();
    assert_eq!(state.memtable_bytes(), 0, "everything moved to fjall");
    // now in memory only: an overwrite, a removal and a new key between fjall's keys
    state
        .commit(writes(&[
            ("a", Some("one")),
            ("b", None),
            ("bb", Some("22")),
        ]))
        .expect("commit");
    let view = state.view();
    let expected = vec![
        ("a".to_owned(), "one".to_owned()),
        ("bb".to_owned(), "22".to_owned()),
        ("c".to_owned(), "3".to_owned()),
    ];
    assert_eq!(scan(&view), expected);
    assert_eq!(
        view.get(b"b").expect("read"),
        None,
        "the removal hides fjall's value"
    );
    assert!(state.memtable_bytes() > 0);
    state.flush_memtable();
    assert_eq!(state.memtable_bytes(), 0);
    assert_eq!(scan(&state.view()), expected, "same state once in fjall");
}

/// The reply memory lives in memory; a flush stores it with the layer and a reopened store
/// reads it back, its expiry index rebuilt from it, while a write after the last flush is
/// (like any unflushed write) not there after the reopen: the log replays it.
#[test]
fn resident_rows_survive_a_reopen_as_of_the_last_flush() {
    let dir = tempfile::tempdir().expect("tempdir");
    let reply = reply_row(b"client", b"c1");
    let late = reply_row(b"client", b"c2");
    let (remembered, late_value) = (remembered_value(1_000, "n1"), remembered_value(2_000, "n1"));
    let (index, index_value) = reply_rows::expiry_entry(&reply, &remembered).expect("a reply");
    {
        let store = Store::open(&StoreConfig::new(dir.path(), 4 << 20)).expect("store");
        let state = store.state().expect("state");
        let mut first = TxnWrites::new();
        first.insert(reply.clone(), TxnWrite::Put(remembered.clone()));
        first.insert(index.clone(), TxnWrite::Put(index_value.clone()));
        first.insert(b"k1".to_vec(), TxnWrite::Put(b"v".to_vec()));
        state.commit(first).expect("commit");
        assert_eq!(state.resident_size().0, 1);
        store.flush().expect("flush");
        // Trusted as after a clean stop: what fjall holds is what the reopen reads.
        crate::store::recovery::write_clean_marker(dir.path()).expect("marker");
        let mut second = TxnWrites::new();
        second.insert(late.clone(), TxnWrite::Put(late_value.clone()));
        state.commit(second).expect("commit");
        assert_eq!(state.view().get(&late).expect("read"), Some(late_value));
    }
    let store = Store::open(&StoreConfig::new(dir.path(), 4 << 20)).expect("reopen");
    let view = store.state().expect("state").view();
    assert_eq!(view.get(&reply).expect("read"), Some(remembered));
    assert_eq!(
        view.get(&index).expect("read"),
        Some(index_value),
        "the expiry index entry is rebuilt"
    );
    let (start, end) = Table::ReplyExpiry.bounds();
    assert_eq!(view.range(&start, &end).count(), 1, "and only it");
    assert_eq!(view.get(&late).expect("read"), None);
    assert_eq!(view.get(b"k1").expect("read"), Some(b"v".to_vec()));
}

/// Resident rows come back complete and in order across read chunks, and a caller that
/// takes a few reads only a few.
#[test]
fn resident_ranges_cross_chunk_boundaries_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&StoreConfig::new(dir.path(), 4 << 20)).expect("store");
    let state = store.state().expect("state");
    let rows = 3 * RESIDENT_CHUNK + 5;
    let mut writes = TxnWrites::new();
    for i in 0..rows {
        writes.insert(reply_expiry_row(i as u64, b"r"), TxnWrite::Put(Vec::new()));
    }
    writes.insert(b"k".to_vec(), TxnWrite::Put(b"v".to_vec()));
    state.commit(writes).expect("commit");
    let view = state.view();
    let (start, end) = resident::bounds();
    let keys: Vec<Vec<u8>> = view
        .range(&start, &end)
        .map(|e| e.expect("read").0)
        .collect();
    let expected: Vec<Vec<u8>> = (0..rows)
        .map(|i| reply_expiry_row(i as u64, b"r"))
        .collect();
    assert_eq!(keys, expected);
    assert_eq!(view.range(&start, &end).take(3).count(), 3);
    // a range spanning everything lists fjall-side and resident rows in key order
    let all: Vec<Vec<u8>> = view
        .range(&[0], &[0xff])
        .map(|e| e.expect("read").0)
        .collect();
    assert_eq!(all.len(), rows + 1);
    assert!(all.windows(2).all(|w| w[0] < w[1]), "ascending");
}

/// A snapshot holds the state at the start of its export, whatever is applied and written to
/// fjall meanwhile, including rows already flushed to fjall and resident rows.
#[test]
fn an_export_writes_the_state_at_its_start_while_writes_go_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&StoreConfig::new(dir.path(), 4 << 20)).expect("store");
    let state = store.state().expect("state");
    let reply = reply_row(b"c", b"1");
    let mut first = TxnWrites::new();
    first.insert(b"flushed".to_vec(), TxnWrite::Put(b"old".to_vec()));
    state.commit(first).expect("commit");
    state.flush_memtable();
    let mut second = TxnWrites::new();
    second.insert(b"memory".to_vec(), TxnWrite::Put(b"old".to_vec()));
    second.insert(reply.clone(), TxnWrite::Put(b"old".to_vec()));
    state.commit(second).expect("commit");

    let export = state.begin_export();
    let mut later = TxnWrites::new();
    later.insert(b"flushed".to_vec(), TxnWrite::Put(b"new".to_vec()));
    later.insert(b"memory".to_vec(), TxnWrite::Remove);
    later.insert(b"added".to_vec(), TxnWrite::Put(b"new".to_vec()));
    later.insert(reply.clone(), TxnWrite::Put(b"new".to_vec()));
    state.commit(later).expect("commit");
    // The later writes reach fjall while the export runs (their pre-images are kept for it).
    state.flush_memtable();
    assert_eq!(
        export.view().get(b"flushed").expect("read"),
        Some(b"old".to_vec())
    );
    let file = export
        .write_outgoing("test", b"header", &|| true)
        .expect("written");
    let mut rows = Vec::new();
    snapshot::read_entries(&file.path, |row| {
        rows.push(row);
        Ok(())
    })
    .expect("read back");
    assert_eq!(
        rows,
        vec![
            (b"flushed".to_vec(), b"old".to_vec()),
            (b"memory".to_vec(), b"old".to_vec()),
            (reply, b"old".to_vec()),
        ]
    );
    // the later writes are all there for readers
    let view = state.view();
    assert_eq!(view.get(b"flushed").expect("read"), Some(b"new".to_vec()));
    assert_eq!(view.get(b"memory").expect("read"), None);
}

fn log_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("replies"))
        .expect("the reply memory's log directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Sequence number and base flag of every entry in the reply memory's log files, oldest first.
fn log_entries(dir: &Path) -> Vec<(u64, bool)> {
    log_files(dir)
        .iter()
        .flat_map(|name| {
            crate::store::resident_log::entries_in(&dir.join("replies").join(name))
                .expect("the log reads")
        })
        .collect()
}

/// Churn of the reply memory with no sync at all (a long load): every new base of the log is
/// made durable as its layer is written and the files before it go, so the log stays at a file
/// or two instead of one per base; a clean stop leaves one base, and the reopen finds every
/// reply.
#[test]
fn each_base_of_the_reply_memory_log_removes_the_files_before_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = StoreConfig::new(dir.path(), 4 << 20);
    config.memtable.flush_bytes = 64 << 10;
    let mut expected = std::collections::BTreeMap::new();
    let store = Store::open(&config).expect("store");
    let state = store.state().expect("state");
    let mut most_files = 0;
    for i in 0..4_000u32 {
        let mut txn = TxnWrites::new();
        let key = reply_row(b"client", &(i % 50).to_be_bytes());
        let value = remembered_value(u64::from(i), &"n".repeat(2 << 10));
        txn.insert(key.clone(), TxnWrite::Put(value.clone()));
        // A plain row of the same size fills the memtable: a layer every 32 writes.
        txn.insert(format!("k{i}").into_bytes(), TxnWrite::Put(value.clone()));
        expected.insert(key, value);
        state.commit(txn).expect("commit");
        if i % 500 == 499 {
            state.flush_memtable();
            most_files = most_files.max(log_files(dir.path()).len());
        }
    }
    // 8 MiB of deltas over 100 KiB of live rows: a new base about every 1.2 MiB.
    let bases = log_files(dir.path())
        .last()
        .and_then(|name| {
            name.strip_prefix("replies-")?
                .strip_suffix(".log")?
                .parse::<u64>()
                .ok()
        })
        .expect("a log file");
    assert!(
        bases > 5,
        "the churn started new bases (the newest at layer {bases})"
    );
    assert!(
        most_files <= 2,
        "at most {most_files} files at a time: {:?}",
        log_files(dir.path())
    );
    let entries_before_stop = log_entries(dir.path());
    assert!(
        entries_before_stop.len() > 1,
        "deltas after the base: {entries_before_stop:?}"
    );
    store.close_clean().expect("clean stop");
    let entries = log_entries(dir.path());
    assert!(
        matches!(entries[..], [(_, true)]),
        "a clean stop leaves the log at one base of the live rows: {entries:?}"
    );
    drop((store, state));
    let store = Store::open(&config).expect("reopen");
    let state = store.state().expect("state");
    for (key, value) in &expected {
        assert_eq!(state.view().get(key).expect("read").as_ref(), Some(value));
    }
}

/// Churn of the reply memory over many layers, reopened after syncs: every reopen finds the
/// rows of the last synced layer, and syncs leave only the files a restart can need.
#[test]
fn the_reply_memory_survives_reopens_through_its_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = StoreConfig::new(dir.path(), 4 << 20);
    config.memtable.flush_bytes = 1 << 10;
    let mut expected: std::collections::BTreeMap<Vec<u8>, Vec<u8>> =
        std::collections::BTreeMap::new();
    for round in 0..5u32 {
        let store = Store::open(&config).expect("store");
        let state = store.state().expect("state");
        for (k, v) in &expected {
            assert_eq!(
                state.view().get(k).expect("read").as_ref(),
                Some(v),
                "round {round}: a reply of an earlier round"
            );
        }
        for i in 0..300u32 {
            let mut txn = TxnWrites::new();
            let key = reply_row(b"client", &(i % 50).to_be_bytes());
            let value = remembered_value(u64::from(round * 1_000 + i), "n1");
            txn.insert(key.clone(), TxnWrite::Put(value.clone()));
            txn.insert(b"k".to_vec(), TxnWrite::Put(i.to_be_bytes().to_vec()));
            expected.insert(key, value);
            if i % 7 == 0 {
                let gone = reply_row(b"client", &((i + 3) % 50).to_be_bytes());
                txn.insert(gone.clone(), TxnWrite::Remove);
                expected.remove(&gone);
            }
            state.commit(txn).expect("commit");
        }
        store.close_clean().expect("sync");
        assert_eq!(
            log_files(dir.path()).len(),
            1,
            "round {round}: a synced store keeps one log file"
        );
    }
}

/// A snapshot install replaces the reply memory: the new rows are there after a reopen and
/// the old tree's log files are gone once the switch is durable.
#[test]
fn an_install_starts_the_reply_memory_log_afresh() {
    let source_dir = tempfile::tempdir().expect("tempdir");
    let source = Store::open(&StoreConfig::new(source_dir.path(), 4 << 20)).expect("store");
    let source_state = source.state().expect("state");
    let theirs = reply_row(b"theirs", b"1");
    let mut txn = TxnWrites::new();
    let installed = remembered_value(1, "n1");
    txn.insert(theirs.clone(), TxnWrite::Put(installed.clone()));
    txn.insert(b"k".to_vec(), TxnWrite::Put(b"v".to_vec()));
    source_state.commit(txn).expect("commit");
    let file = source_state
        .export_snapshot("one", b"header")
        .expect("export");

    let dir = tempfile::tempdir().expect("tempdir");
    let config = StoreConfig::new(dir.path(), 4 << 20);
    let mine = reply_row(b"mine", b"1");
    {
        let store = Store::open(&config).expect("store");
        let state = store.state().expect("state");
        let mut txn = TxnWrites::new();
        txn.insert(mine.clone(), TxnWrite::Put(remembered_value(2, "n1")));
        txn.insert(b"x".to_vec(), TxnWrite::Put(b"y".to_vec()));
        state.commit(txn).expect("commit");
        store.flush().expect("sync");
        let before = log_files(dir.path());
        let received = state.incoming_snapshot_path();
        std::fs::copy(&file.path, &received).expect("copy");
        state
            .install_snapshot(&received, Vec::new())
            .expect("install");
        let after = log_files(dir.path());
        assert_eq!(after.len(), 1, "{after:?}");
        assert_ne!(after, before, "a new file, the old one removed");
        assert_eq!(state.view().get(&mine).expect("read"), None);
        store.close_clean().expect("clean stop");
    }
    let store = Store::open(&config).expect("reopen");
    let view = store.state().expect("state").view();
    assert_eq!(view.get(&theirs).expect("read"), Some(installed));
    assert_eq!(view.get(&mine).expect("read"), None);
}

/// The install checks the checksum as it loads (one read of the file): a damaged file is
/// refused at its end and the state it would have replaced is untouched.
#[test]
fn a_damaged_snapshot_is_refused_and_the_old_state_kept() {
    let source_dir = tempfile::tempdir().expect("tempdir");
    let source = Store::open(&StoreConfig::new(source_dir.path(), 4 << 20)).expect("store");
    let source_state = source.state().expect("state");
    let mut txn = TxnWrites::new();
    for i in 0..100u32 {
        txn.insert(
            format!("k{i:03}").into_bytes(),
            TxnWrite::Put(b"theirs".to_vec()),
        );
    }
    source_state.commit(txn).expect("commit");
    let file = source_state
        .export_snapshot("s", b"header")
        .expect("export");
    let mut bytes = std::fs::read(&file.path).expect("read");
    let last_value = bytes.len() - 30;
    bytes[last_value] ^= 0x20;

    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&StoreConfig::new(dir.path(), 4 << 20)).expect("store");
    let state = store.state().expect("state");
    let mut txn = TxnWrites::new();
    txn.insert(b"k000".to_vec(), TxnWrite::Put(b"mine".to_vec()));
    state.commit(txn).expect("commit");
    let received = state.incoming_snapshot_path();
    std::fs::write(&received, &bytes).expect("write");
    assert!(matches!(
        state.install_snapshot(&received, Vec::new()),
        Err(StorageError::Corrupt { .. })
    ));
    assert_eq!(
        state.view().get(b"k000").expect("read"),
        Some(b"mine".to_vec())
    );
    assert_eq!(state.view().get(b"k050").expect("read"), None);
}

/// What a receiving node checks before it hands a snapshot to Raft: an exported snapshot passes
/// with its row count; the same file with one byte flipped, and files whose rows the bulk load
/// would refuse (out of order, an empty key), are corrupt. Resident rows (the reply memory) are
/// not bulk-loaded and pass in any order, as the install takes them.
#[test]
fn verify_snapshot_passes_what_an_install_takes_and_refuses_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&StoreConfig::new(dir.path(), 4 << 20)).expect("store");
    let state = store.state().expect("state");
    let mut txn = TxnWrites::new();
    for i in 0..100u32 {
        txn.insert(
            format!("k{i:03}").into_bytes(),
            TxnWrite::Put(b"v".to_vec()),
        );
    }
    state.commit(txn).expect("commit");
    let exported = state.export_snapshot("s", b"header").expect("export");
    let verified = verify_snapshot(&exported.path).expect("an exported snapshot passes");
    assert_eq!(verified.entries, exported.entries);

    let mut bytes = std::fs::read(&exported.path).expect("read");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    let flipped = dir.path().join("flipped.bin");
    std::fs::write(&flipped, &bytes).expect("write");
    assert!(matches!(
        verify_snapshot(&flipped),
        Err(StorageError::Corrupt { .. })
    ));

    let written = |name: &str, rows: &[&[u8]]| {
        let path = dir.path().join(format!("{name}.bin"));
        let mut writer =
            SnapshotWriter::create(&dir.path().join(format!("{name}.tmp")), b"h").expect("create");
        for key in rows {
            writer.push(key, b"v").expect("row");
        }
        writer.finish(&path, b"h").expect("finish");
        path
    };
    let replies = [reply_row(b"c2", b"1"), reply_row(b"c1", b"1")];
    let ordered = written("ordered", &[b"a", b"b", &replies[0], &replies[1]]);
    assert_eq!(
        verify_snapshot(&ordered)
            .expect("ordered rows pass")
            .entries,
        4
    );
    for (name, rows) in [
        ("descending", [b"b".as_slice(), b"a".as_slice()]),
        ("repeated", [b"a".as_slice(), b"a".as_slice()]),
        ("empty-key", [b"".as_slice(), b"a".as_slice()]),
    ] {
        assert!(
            matches!(
                verify_snapshot(&written(name, &rows)),
                Err(StorageError::Corrupt { .. })
            ),
            "{name}"
        );
    }
}

/// Commits `count` keys of 64-byte values in one transaction: enough rows that an export
/// looks whether to stop more than once.
fn commit_rows(state: &StateTree, count: u32) {
    let mut txn = TxnWrites::new();
    for i in 0..count {
        txn.insert(format!("k{i:05}").into_bytes(), TxnWrite::Put(vec![1; 64]));
    }
    state.commit(txn).expect("commit");
}

/// A clean stop abandons a snapshot export in progress: the closing store waits for it, the
/// export stops with an error and removes its unfinished file, and an export begun after that
/// stops at once.
#[test]
fn a_closing_store_abandons_its_export_and_leaves_no_unfinished_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&StoreConfig::new(dir.path(), 4 << 20)).expect("store");
    let state = store.state().expect("state");
    commit_rows(&state, 10_000);
    let unfinished = || -> Vec<String> {
        std::fs::read_dir(dir.path().join("snapshots"))
            .expect("snapshot dir")
            .map(|entry| {
                entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .filter(|name| name.ends_with(".tmp"))
            .collect()
    };

    let export = state.begin_export();
    let closing = {
        let state = state.clone();
        std::thread::spawn(move || state.abandon_exports())
    };
    while !state.is_closing() {
        std::thread::yield_now();
    }
    assert!(matches!(
        export.write_outgoing("s", b"header", &|| true),
        Err(StorageError::Failed(_))
    ));
    assert!(closing.join().expect("join"), "the export ended in time");
    assert_eq!(unfinished(), Vec::<String>::new());

    assert!(matches!(
        state
            .begin_export()
            .write_outgoing("t", b"header", &|| true),
        Err(StorageError::Failed(_))
    ));
    assert_eq!(unfinished(), Vec::<String>::new());
}

/// An export for a peer that nobody waits for any more (the transfer was cancelled) stops
/// instead of writing the whole state, and leaves no file.
#[test]
fn an_export_nobody_waits_for_stops_and_leaves_no_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&StoreConfig::new(dir.path(), 4 << 20)).expect("store");
    let state = store.state().expect("state");
    commit_rows(&state, 10_000);
    let asked = std::cell::Cell::new(0);
    let wanted = || {
        asked.set(asked.get() + 1);
        asked.get() < 2
    };
    assert!(matches!(
        state.begin_export().write_outgoing("u", b"header", &wanted),
        Err(StorageError::Failed(_))
    ));
    assert_eq!(asked.get(), 2, "stopped at the second look");
    assert_eq!(
        file_names(&dir.path().join("snapshots")),
        Vec::<String>::new()
    );
}

/// A view kept across a snapshot install (the notifier keeps one for its whole life) reads the
/// installed state, not the keyspace the install replaced.
#[test]
fn a_view_taken_before_an_install_reads_the_installed_state() {
    let source_dir = tempfile::tempdir().expect("tempdir");
    let source = Store::open(&StoreConfig::new(source_dir.path(), 4 << 20)).expect("store");
    let source_state = source.state().expect("state");
    let mut txn = TxnWrites::new();
    txn.insert(b"theirs".to_vec(), TxnWrite::Put(b"installed".to_vec()));
    source_state.commit(txn).expect("commit");
    let file = source_state
        .export_snapshot("one", b"header")
        .expect("export");

    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&StoreConfig::new(dir.path(), 4 << 20)).expect("store");
    let state = store.state().expect("state");
    let mut txn = TxnWrites::new();
    txn.insert(b"mine".to_vec(), TxnWrite::Put(b"replaced".to_vec()));
    state.commit(txn).expect("commit");
    store
        .flush()
        .expect("sync: the row is in the database, not the memtable");
    let kept = state.view();
    let received = state.incoming_snapshot_path();
    std::fs::copy(&file.path, &received).expect("copy");
    state
        .install_snapshot(&received, Vec::new())
        .expect("install");
    assert_eq!(kept.get(b"mine").expect("read"), None);
    assert_eq!(
        kept.get(b"theirs").expect("read"),
        Some(b"installed".to_vec())
    );
    assert_eq!(scan(&kept), scan(&state.view()));
}

/// A layer the database refuses for good (here a key it cannot store, which admission keeps
/// out) stops the state machine: commits and syncs fail instead of waiting for a flush that
/// never comes.
#[test]
fn a_layer_the_database_refuses_for_good_stops_the_state_machine() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&StoreConfig::new(dir.path(), 4 << 20)).expect("store");
    let state = store.state().expect("state");
    let mut txn = TxnWrites::new();
    txn.insert(vec![b'k'; 70_000], TxnWrite::Put(b"v".to_vec()));
    state.commit(txn).expect("commit: the memtable takes it");
    assert!(matches!(store.flush(), Err(StorageError::Failed(_))));
    let mut txn = TxnWrites::new();
    txn.insert(b"k".to_vec(), TxnWrite::Put(b"v".to_vec()));
    assert!(matches!(state.commit(txn), Err(StorageError::Failed(_))));
    state.wait_for_room();
}

/// A snapshot build is a checkpoint: once its wait returns, the state database holds what it
/// covers, so the log it covers may be purged. With a flush thread that writes, the rows are
/// in fjall itself (not only in the memtable) when the wait returns; with one that stops for
/// good first (a layer the database refuses), the wait fails.
#[test]
fn a_checkpoint_returns_only_once_its_state_is_in_the_database() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&StoreConfig::new(dir.path(), 4 << 20)).expect("store");
    let state = store.state().expect("state");
    let mut txn = TxnWrites::new();
    txn.insert(b"covered".to_vec(), TxnWrite::Put(b"v".to_vec()));
    state.commit(txn).expect("commit");
    state.checkpoint().wait_durable().expect("durable");
    assert_eq!(
        state.view().tree().get(b"covered").expect("read fjall"),
        Some(b"v".to_vec()),
        "the covered row is in fjall itself"
    );

    let mut txn = TxnWrites::new();
    txn.insert(vec![b'k'; 70_000], TxnWrite::Put(b"v".to_vec()));
    state.commit(txn).expect("commit: the memtable takes it");
    assert!(
        matches!(
            state.checkpoint().wait_durable(),
            Err(StorageError::Failed(_))
        ),
        "a checkpoint whose layer never reaches fjall fails"
    );
}

/// A new base of the reply memory that the disk has no room for (it holds every live reply) is
/// appended to the current file as a delta; the log still reads back to it.
#[test]
fn a_base_the_disk_has_no_room_for_is_appended_as_a_delta() {
    use crate::store::resident_log::fault::{self, Fault};
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Mutex::new(ResidentLog::open(dir.path(), None).expect("open").log);
    let mut journal = ResidentJournal::starting_at(0);
    let mut tables = ResidentTables::default();
    tables.put(reply_row(b"c", b"1"), b"first".to_vec());
    journal.note(&reply_row(b"c", b"1"), Some(b"first"));
    let first = journal.take_layer(&tables).expect("changed");
    append_entry(&log, &first).expect("the first base");
    tables.put(reply_row(b"c", b"2"), b"second".to_vec());
    journal.note(&reply_row(b"c", b"2"), Some(b"second"));
    tables.remove(&reply_row(b"c", b"1"));
    journal.note(&reply_row(b"c", b"1"), None);
    journal.rebase_next();
    let rebase = journal.take_layer(&tables).expect("changed");
    assert!(rebase.is_base());
    fault::arm(Fault::DiskFullAfter(10));
    append_entry(&log, &rebase).expect("appended as a delta");
    assert_eq!(lock_log(&log).files(), &[first.seq], "no second file");
    let opened = ResidentLog::open(dir.path(), Some(rebase.seq)).expect("reads back");
    assert_eq!(opened.tables, tables);
}

/// A reply memory log that can never be written (here its directory replaced by a file) stops
/// the state machine after a few attempts, as a layer fjall refuses does: a flush, and so a
/// clean stop, returns an error instead of retrying for ever.
#[test]
fn a_reply_log_that_cannot_be_written_stops_the_state_machine() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&StoreConfig::new(dir.path(), 4 << 20)).expect("store");
    let state = store.state().expect("state");
    let replies = dir.path().join("replies");
    std::fs::remove_dir_all(&replies).expect("remove the log directory");
    std::fs::write(&replies, b"not a directory").expect("a file in its place");
    let mut txn = TxnWrites::new();
    txn.insert(
        reply_row(b"c", b"1"),
        TxnWrite::Put(remembered_value(1, "n")),
    );
    state.commit(txn).expect("commit: the memtable takes it");
    let (done, flushed) = std::sync::mpsc::sync_channel(1);
    let flushing = store.clone();
    std::thread::spawn(move || done.send(flushing.flush()));
    let flushed = flushed
        .recv_timeout(Duration::from_secs(60))
        .expect("the flush ends");
    assert!(
        matches!(flushed, Err(StorageError::Failed(_))),
        "{flushed:?}"
    );
    let mut txn = TxnWrites::new();
    txn.insert(b"k".to_vec(), TxnWrite::Put(b"v".to_vec()));
    assert!(matches!(state.commit(txn), Err(StorageError::Failed(_))));
}

/// The store's table-release thread: after compactions of the state keyspace, no table file
/// they replaced stays on disk (without the thread, the last compaction's inputs stay until the
/// next one); the store then reopens at once with its rows.
#[test]
fn tables_compaction_replaced_are_released_while_the_store_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = StoreConfig::new(dir.path(), 4 << 20);
    const LAYERS: usize = 10;
    {
        let store = Store::open(&config).expect("store");
        let state = store.state().expect("state");
        // Layers whose key ranges overlap: level 0 is compacted at four tables.
        for round in 0..LAYERS {
            let value = round.to_string();
            state
                .commit(writes(&[("a", Some(&value)), ("z", Some(&value))]))
                .expect("commit");
            state.flush_memtable();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let settled = loop {
            let files = state.active().1.table_files().expect("count");
            if files.beyond_set() == 0 && files.in_set < LAYERS {
                break true;
            }
            if std::time::Instant::now() > deadline {
                break false;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(
            settled,
            "compacted, and nothing replaced left: {:?}",
            state.active().1.table_files()
        );
        store.close_clean().expect("clean stop");
    }
    let store = Store::open(&config).expect("reopened at once");
    let state = store.state().expect("state");
    assert_eq!(
        state.view().get(b"z").expect("read"),
        Some((LAYERS - 1).to_string().into_bytes())
    );
}
