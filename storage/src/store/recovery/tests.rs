//! Unit tests of opening after clean and unclean stops: what is trusted, what is rebuilt, and
//! from which snapshot.

use std::collections::BTreeMap;

use super::*;
use crate::engine::{OrderedRead, TxnWrite, TxnWrites};
use crate::layout::{self, Table};
use crate::machine::reply_rows::{self, remembered_value};
use crate::store::{SnapshotWriter, StateTree, StateView, Store, StoreConfig};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

fn config(dir: &Path) -> StoreConfig {
    let mut config = StoreConfig::new(dir, 4 << 20);
    // Small layers: most writes reach the state database (and its files) before the stop.
    config.memtable.flush_bytes = 4 << 10;
    config
}

/// The test's snapshot headers: the covered log index, big-endian.
fn header(index: u64) -> Vec<u8> {
    index.to_be_bytes().to_vec()
}

/// Key of the consensus record the test's headers turn into.
fn applied_key() -> Vec<u8> {
    layout::consensus_key(b"applied")
}

/// Reads a test header as the consensus layer reads its own.
fn covers(header: &[u8]) -> Result<SnapshotCovers> {
    let index: [u8; 8] = header.try_into().map_err(|_| StorageError::Corrupt {
        what: "test header",
        reason: format!("{} bytes", header.len()),
    })?;
    Ok(SnapshotCovers {
        last_index: Some(u64::from_be_bytes(index)),
        records: vec![(applied_key(), header.to_vec())],
    })
}

/// A row of the reply memory (a resident table).
fn reply_row(n: u32) -> Vec<u8> {
    let mut row = vec![Table::Replies.prefix()];
    row.extend_from_slice(format!("client/{n}").as_bytes());
    row
}

/// Commits `count` keys (every fifth a remembered reply) tagged `tag`, into `model` too.
fn write(state: &StateTree, model: &mut Map, tag: &str, count: u32) {
    for i in 0..count {
        let mut txn = TxnWrites::new();
        let key = format!("k{:05}", i).into_bytes();
        let value = format!("{tag} {i}").into_bytes();
        txn.insert(key.clone(), TxnWrite::Put(value.clone()));
        model.insert(key, value);
        if i % 5 == 0 {
            // With its expiry index entry, as apply writes it (a reopen rebuilds the index).
            let reply = remembered_value(u64::from(i), tag);
            let (index, size) = reply_rows::expiry_entry(&reply_row(i), &reply).expect("a reply");
            txn.insert(reply_row(i), TxnWrite::Put(reply.clone()));
            txn.insert(index.clone(), TxnWrite::Put(size.clone()));
            model.insert(reply_row(i), reply);
            model.insert(index, size);
        }
        state.commit(txn).expect("commit");
    }
}

/// Every row of the state below the consensus records.
fn rows(state: &StateTree) -> Map {
    let end = [Table::ConsensusState.prefix()];
    state
        .view()
        .range(&[0], &end)
        .map(|row| row.expect("read"))
        .collect()
}

/// Writes a snapshot of the state as an earlier build kept one (`snapshots/snapshot-<id>.bin`,
/// covering the log up to `index`): what the first open after an upgrade finds.
fn legacy_snapshot(state: &StateTree, dir: &Path, id: &str, index: u64) -> PathBuf {
    let file = state.export_snapshot(id, &header(index)).expect("export");
    let path = dir.join("snapshots").join(format!("snapshot-{id}.bin"));
    std::fs::rename(&file.path, &path).expect("rename");
    path
}

/// A store with `before` written, a snapshot at index `index` of it (see [`legacy_snapshot`]), then `after` written
/// (applied through `index + 2`) and synced, dropped without a clean stop: a state that would be
/// kept if it read back whole. Returns the model as of the snapshot.
fn crashed_after_snapshot(dir: &Path, index: u64) -> Map {
    let store = Store::open(&config(dir)).expect("open");
    let state = store.state().expect("state");
    let mut model = Map::new();
    write(&state, &mut model, "before", 400);
    applied_through(&state, index);
    legacy_snapshot(&state, dir, &format!("1-{index}-1"), index);
    let at_snapshot = model.clone();
    write(&state, &mut model, "after", 600);
    applied_through(&state, index + 2);
    store
        .flush()
        .expect("sync: the state database holds the writes after the snapshot");
    assert_ne!(
        rows(&state),
        at_snapshot,
        "the writes after it are in the state"
    );
    at_snapshot
}

/// Reads the test's applied record as the consensus layer reads its own.
fn applied(view: &StateView) -> Result<Option<u64>> {
    view.get(&applied_key())?
        .map(|bytes| covers(&bytes).map(|covered| covered.last_index))
        .transpose()
        .map(Option::flatten)
}

/// Commits the test's applied record: the state has applied the log up to `index`.
fn applied_through(state: &StateTree, index: u64) {
    let mut txn = TxnWrites::new();
    txn.insert(applied_key(), TxnWrite::Put(header(index)));
    state.commit(txn).expect("commit");
}

fn open_and_recover(dir: &Path) -> (Store, StateTree, Recovery) {
    let store = Store::open(&config(dir)).expect("reopen");
    let recovery = store.recover(&covers, &applied).expect("recover");
    let state = store.state().expect("state");
    (store, state, recovery)
}

#[test]
fn a_clean_stop_reopens_with_its_state_and_no_rebuild() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut model = Map::new();
    {
        let store = Store::open(&config(dir.path())).expect("open");
        assert_eq!(store.open_kind(), OpenKind::New, "a first start");
        let state = store.state().expect("state");
        write(&state, &mut model, "before", 300);
        legacy_snapshot(&state, dir.path(), "1-3-1", 3);
        write(&state, &mut model, "after", 300);
        store.close_clean().expect("clean stop");
        assert!(dir.path().join(CLEAN_STOP_FILE).exists());
    }
    let (store, state, recovery) = open_and_recover(dir.path());
    assert_eq!(recovery.kind, OpenKind::Clean);
    assert!(
        !dir.path().join("snapshots/snapshot-1-3-1.bin").exists(),
        "the snapshot file an earlier build kept is removed"
    );
    assert_eq!(recovery.rebuilt_from, None);
    assert_eq!(recovery.took, Duration::ZERO);
    assert_eq!(store.open_kind(), OpenKind::Clean);
    assert_eq!(
        rows(&state),
        model,
        "every write, the ones after the snapshot included"
    );
    assert_eq!(
        state.view().get(&applied_key()).expect("read"),
        None,
        "no snapshot was installed"
    );
}

#[test]
fn an_unclean_stop_with_a_truncated_state_database_rebuilds_from_the_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let at_snapshot = crashed_after_snapshot(dir.path(), 7);
    truncate_files(&dir.path().join(STATE_DIR));

    let (store, state, recovery) = open_and_recover(dir.path());
    assert_eq!(recovery.kind, OpenKind::Unclean);
    assert_eq!(recovery.entries, at_snapshot.len() as u64);
    assert!(
        recovery
            .rebuilt_from
            .as_ref()
            .is_some_and(|p| p.ends_with("snapshot-1-7-1.bin")),
        "{recovery:?}"
    );
    assert_eq!(rows(&state), at_snapshot, "exactly the snapshot's state");
    assert_eq!(
        state.view().get(&applied_key()).expect("read"),
        Some(header(7)),
        "the snapshot's consensus records: the log is applied from after it"
    );
    assert!(
        !dir.path().join("snapshots/snapshot-1-7-1.bin").exists(),
        "the file is removed once the state is rebuilt from it"
    );
    // The reply memory went with the snapshot and its journal starts afresh: a clean reopen
    // of the rebuilt store reads it back.
    store.close_clean().expect("clean stop");
    drop((store, state));
    let (_store, state, recovery) = open_and_recover(dir.path());
    assert_eq!(recovery.kind, OpenKind::Clean);
    assert_eq!(rows(&state), at_snapshot);
}

/// Cuts every file under `dir` to a third of its length.
fn truncate_files(dir: &Path) {
    for entry in std::fs::read_dir(dir).expect("list") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            truncate_files(&path);
            continue;
        }
        let len = std::fs::metadata(&path).expect("metadata").len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open")
            .set_len(len / 3)
            .expect("truncate");
    }
}

/// A data directory of format 8 held the state in sled 0.34, which this build does not read:
/// even after that build's clean stop, the open rebuilds the state from the newest snapshot (the
/// consensus layer applies its log after it), as after an unclean stop.
#[test]
fn a_format_8_directory_is_rebuilt_from_its_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let at_snapshot = crashed_after_snapshot(dir.path(), 8);
    // What a format 8 build leaves after a clean stop: its marker, the clean-stop marker and
    // sled's files in `state/`.
    std::fs::write(dir.path().join("FORMAT"), "statestore-data 8\n").expect("format 8");
    write_clean_marker(dir.path()).expect("clean marker");
    let state_dir = dir.path().join(STATE_DIR);
    std::fs::remove_dir_all(&state_dir).expect("remove");
    std::fs::create_dir(&state_dir).expect("mkdir");
    for name in ["db", "conf"] {
        std::fs::write(state_dir.join(name), b"sled 0.34").expect("sled file");
    }

    let (store, state, recovery) = open_and_recover(dir.path());
    assert_eq!(recovery.kind, OpenKind::Unclean);
    assert!(
        recovery
            .rebuilt_from
            .as_ref()
            .is_some_and(|p| p.ends_with("snapshot-1-8-1.bin")),
        "{recovery:?}"
    );
    assert_eq!(rows(&state), at_snapshot, "exactly the snapshot's state");
    assert!(!state_dir.join("conf").exists(), "sled's files are gone");
    store.close_clean().expect("clean stop");
    drop((store, state));
    let (_store, state, recovery) = open_and_recover(dir.path());
    assert_eq!(recovery.kind, OpenKind::Clean, "converted once");
    assert_eq!(rows(&state), at_snapshot);
}

#[test]
fn an_unclean_stop_with_garbage_for_a_state_database_rebuilds_from_the_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let at_snapshot = crashed_after_snapshot(dir.path(), 9);
    let state_dir = dir.path().join(STATE_DIR);
    std::fs::remove_dir_all(&state_dir).expect("remove");
    std::fs::create_dir(&state_dir).expect("mkdir");
    for name in ["db", "conf", "snap.0000000000000000"] {
        std::fs::write(state_dir.join(name), vec![0xa5u8; 100_000]).expect("garbage");
    }
    let (_store, state, recovery) = open_and_recover(dir.path());
    assert_eq!(recovery.kind, OpenKind::Unclean);
    assert_eq!(rows(&state), at_snapshot);
    assert!(
        std::fs::read_dir(dir.path()).expect("list").all(|e| !e
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .starts_with("state.")),
        "the set-aside state is removed"
    );
}

/// A crash keeps a state database that reads back whole and is not behind the newest
/// snapshot: every layer that reached fjall, the reply memory as of the last one, and the
/// applied record they carry (the log is applied again after it). Nothing is rebuilt.
#[test]
fn an_unclean_stop_keeps_a_state_that_reads_back_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut model = Map::new();
    {
        let store = Store::open(&config(dir.path())).expect("open");
        let state = store.state().expect("state");
        write(&state, &mut model, "before", 300);
        applied_through(&state, 7);
        legacy_snapshot(&state, dir.path(), "1-7-1", 7);
        write(&state, &mut model, "after", 300);
        applied_through(&state, 9);
        store.flush().expect("sync");
        // A crash: no clean stop.
    }
    let (store, state, recovery) = open_and_recover(dir.path());
    assert_eq!(recovery.kind, OpenKind::UncleanKept);
    assert_eq!(recovery.rebuilt_from, None);
    assert_eq!(rows(&state), model, "every layer fjall holds");
    assert_eq!(
        state.view().get(&applied_key()).expect("read"),
        Some(header(9))
    );
    assert_eq!(recovery.entries, 0);
    drop((store, state));
    // What was kept stops cleanly and reopens as any state does.
    let (store, _, recovery) = open_and_recover(dir.path());
    assert_eq!(recovery.kind, OpenKind::UncleanKept, "still no clean stop");
    store.close_clean().expect("clean stop");
    drop(store);
    let (_store, state, recovery) = open_and_recover(dir.path());
    assert_eq!(recovery.kind, OpenKind::Clean);
    assert_eq!(rows(&state), model);
}

/// A kept state whose reply memory's log does not reach the entry the state names is not kept:
/// the state is rebuilt from the snapshot.
#[test]
fn a_state_whose_reply_log_is_damaged_is_rebuilt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let at_snapshot = crashed_after_snapshot(dir.path(), 7);
    truncate_files(&dir.path().join("replies"));
    let (_store, state, recovery) = open_and_recover(dir.path());
    assert_eq!(recovery.kind, OpenKind::Unclean);
    assert_eq!(rows(&state), at_snapshot);
}

#[test]
fn an_unclean_stop_without_a_snapshot_or_a_readable_state_starts_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let store = Store::open(&config(dir.path())).expect("open");
        let state = store.state().expect("state");
        write(&state, &mut Map::new(), "lost", 200);
        store.flush().expect("sync");
    }
    truncate_files(&dir.path().join(STATE_DIR));
    let (_store, state, recovery) = open_and_recover(dir.path());
    assert_eq!(recovery.kind, OpenKind::Unclean);
    assert_eq!(recovery.rebuilt_from, None);
    assert_eq!(
        rows(&state),
        Map::new(),
        "the log is applied again from its start"
    );
    assert_eq!(state.view().get(&applied_key()).expect("read"), None);
}

/// Writes a snapshot file of `rows` straight into the snapshot directory, as a crash between
/// its rename and the state database's record of it leaves one.
fn snapshot_file(dir: &Path, id: &str, index: u64, rows: &Map) -> PathBuf {
    let snapshots = dir.join("snapshots");
    let tmp = snapshots.join(format!("{id}.tmp"));
    let path = snapshots.join(format!("snapshot-{id}.bin"));
    let mut writer = SnapshotWriter::create(&tmp, &header(index)).expect("create");
    for (key, value) in rows {
        writer.push(key, value).expect("push");
    }
    writer.finish(&path, &header(index)).expect("finish");
    path
}

#[test]
fn the_newest_complete_snapshot_on_disk_wins_over_the_one_the_database_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    crashed_after_snapshot(dir.path(), 7);
    let newer: Map = (0..50u32)
        .map(|i| {
            (
                format!("k{i:05}").into_bytes(),
                format!("newer {i}").into_bytes(),
            )
        })
        .collect();
    snapshot_file(dir.path(), "1-20-5", 20, &newer);
    // Newer still, but torn (cut short before its trailer): skipped.
    let torn = snapshot_file(dir.path(), "1-30-6", 30, &newer);
    let len = std::fs::metadata(&torn).expect("torn").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&torn)
        .expect("torn")
        .set_len(len - 20)
        .expect("truncate");
    // And one whose header does not read.
    std::fs::write(
        dir.path().join("snapshots/snapshot-1-40-7.bin"),
        b"SSSNAP02\0",
    )
    .expect("bad");

    let (_store, state, recovery) = open_and_recover(dir.path());
    assert_eq!(recovery.kind, OpenKind::Unclean);
    assert!(
        recovery
            .rebuilt_from
            .as_ref()
            .is_some_and(|p| p.ends_with("snapshot-1-20-5.bin")),
        "{recovery:?}"
    );
    assert_eq!(rows(&state), newer);
    assert_eq!(
        state.view().get(&applied_key()).expect("read"),
        Some(header(20))
    );
}

/// The clean-stop marker is removed at open, so a crash after it is an unclean stop again:
/// the state is checked before it is kept (and, read back whole, kept with every synced write).
#[test]
fn the_marker_is_removed_at_open_so_a_later_crash_is_unclean_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut model = Map::new();
    {
        let store = Store::open(&config(dir.path())).expect("open");
        let state = store.state().expect("state");
        write(&state, &mut model, "before", 300);
        store.close_clean().expect("clean stop");
    }
    {
        let (store, state, recovery) = open_and_recover(dir.path());
        assert_eq!(recovery.kind, OpenKind::Clean);
        assert!(
            !dir.path().join(CLEAN_STOP_FILE).exists(),
            "the marker is gone once the store is open"
        );
        write(&state, &mut model, "after", 300);
        store.flush().expect("sync");
        // A crash: no clean stop.
    }
    let (_store, state, recovery) = open_and_recover(dir.path());
    assert_eq!(recovery.kind, OpenKind::UncleanKept);
    assert_eq!(rows(&state), model);
}

#[test]
fn a_first_start_is_not_unclean_and_recover_runs_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&config(&dir.path().join("new").join("data"))).expect("open");
    assert_eq!(store.open_kind(), OpenKind::New);
    let report = store.recover(&covers, &applied).expect("recover");
    assert_eq!(report.kind, OpenKind::New);
    assert_eq!(report.rebuilt_from, None);
    assert_eq!(store.recover(&covers, &applied).expect("again"), report);
}
