//! Unit tests of the current snapshot's ordering: a local export and an install finishing in
//! either order, handles outliving replacement, unfinished files left alone.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::{CurrentSnapshot, Offered, Rule};
use crate::engine::{TxnWrite, TxnWrites};
use crate::error::StorageError;
use crate::store::snapshot::{SnapshotFile, SnapshotWriter};
use crate::store::tree::Tree;
use crate::store::{StateTree, Store, StoreConfig};

fn put(state: &StateTree, key: &str, value: &str) {
    let mut txn = TxnWrites::new();
    txn.insert(
        key.as_bytes().to_vec(),
        TxnWrite::Put(value.as_bytes().to_vec()),
    );
    state.commit(txn).expect("commit");
}

fn snapshot_dir(state: &StateTree) -> PathBuf {
    state
        .incoming_snapshot_path()
        .parent()
        .expect("snapshot dir")
        .to_path_buf()
}

/// The `snapshot-*` files in `dir`, sorted.
fn snapshot_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("snapshot-"))
        .collect();
    names.sort();
    names
}

/// A store holding `leader=<value>`, exported as a snapshot with header `header`; the store
/// stays open so its file does too.
fn leader_snapshot(dir: &Path, value: &str, header: &[u8], index: u64) -> (Store, PathBuf) {
    let store = Store::open(&StoreConfig::new(dir, 4 << 20)).expect("leader store");
    let state = store.state().expect("state");
    put(&state, "leader", value);
    let file = state
        .export_snapshot(&format!("1-{index}-1"), header, Some(index))
        .expect("leader export");
    (store, file.path)
}

/// Installs the snapshot file at `from` into `state`, covering the log up to `index`.
fn install(state: &StateTree, from: &Path, index: u64) {
    let received = state.incoming_snapshot_path();
    std::fs::copy(from, &received).expect("copy");
    state
        .install_snapshot(&received, &format!("1-{index}-2"), Some(index), Vec::new())
        .expect("install");
}

/// A store's records and snapshot directory without a state tree, to offer files in an
/// order no single thread could make the export and the install finish in.
struct Bare {
    _dir: tempfile::TempDir,
    snapshots: PathBuf,
    current: CurrentSnapshot,
}

fn bare() -> Bare {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = fjall::Database::builder(dir.path().join("state"))
        .open()
        .expect("fjall");
    let records = Tree::open(&db, "store_records").expect("records");
    let snapshots = dir.path().join("snapshots");
    std::fs::create_dir_all(&snapshots).expect("snapshot dir");
    let current = CurrentSnapshot::new(&records, &snapshots);
    Bare {
        _dir: dir,
        snapshots,
        current,
    }
}

/// A finished snapshot file `snapshot-<id>.bin` with one row, its header `header`.
fn finished(dir: &Path, id: &str, header: &[u8]) -> SnapshotFile {
    let mut writer =
        SnapshotWriter::create(&dir.join(format!("{id}.tmp")), header).expect("create");
    writer.push(b"k", id.as_bytes()).expect("push");
    writer
        .finish(&dir.join(format!("snapshot-{id}.bin")), header)
        .expect("finish")
}

fn final_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("snapshot-{id}.bin"))
}

/// The race seen on a follower: its own export of index 473 was written, an install of the
/// leader's snapshot at 629 became current, then the export was offered. The installed
/// snapshot stays current, the export's file is deleted, and the offer hands back the
/// installed snapshot, readable.
#[test]
fn an_export_offered_after_a_newer_install_keeps_the_installed_snapshot() {
    let store = bare();
    let building = store
        .current
        .reserve(&final_path(&store.snapshots, "1-473-3"));
    let built = finished(&store.snapshots, "1-473-3", b"at 473");
    let installing = store
        .current
        .reserve(&final_path(&store.snapshots, "1-629-2"));
    let installed = finished(&store.snapshots, "1-629-2", b"at 629");
    let installed_bytes = std::fs::read(&installed.path).expect("read");
    let made = installing
        .offer(installed, Some(629), Rule::Always)
        .expect("install offered");
    assert!(matches!(made, Offered::Current(_)), "{made:?}");
    assert!(built.path.exists(), "a reserved file is kept until offered");

    let offered = building
        .offer(built.clone(), Some(473), Rule::IfNotOlder)
        .expect("export offered");

    let Offered::Superseded(mut current) = offered else {
        panic!("the older export became current: {offered:?}");
    };
    assert_eq!(current.file.header, b"at 629".to_vec());
    let mut bytes = Vec::new();
    current.handle.read_to_end(&mut bytes).expect("read");
    assert_eq!(bytes, installed_bytes);
    assert!(
        !built.path.exists(),
        "the superseded export's file is deleted"
    );
    assert_eq!(
        store
            .current
            .open()
            .expect("current")
            .map(|s| s.file.header),
        Some(b"at 629".to_vec())
    );
    assert_eq!(
        snapshot_files(&store.snapshots),
        vec!["snapshot-1-629-2.bin".to_owned()]
    );
}

/// An install finished under its final name and not yet offered (its state switch is still
/// running) survives an export made current meanwhile; a file nobody reserves is deleted.
#[test]
fn a_reserved_file_survives_another_snapshot_made_current() {
    let store = bare();
    let leftover = finished(&store.snapshots, "1-100-1", b"left over");
    let installing = store
        .current
        .reserve(&final_path(&store.snapshots, "1-629-2"));
    let installed = finished(&store.snapshots, "1-629-2", b"at 629");
    let exported = finished(&store.snapshots, "1-473-3", b"at 473");
    store
        .current
        .reserve(&exported.path)
        .offer(exported, Some(473), Rule::IfNotOlder)
        .expect("export offered");
    assert!(
        installed.path.exists(),
        "the reserved install's file was deleted"
    );
    assert!(
        !leftover.path.exists(),
        "an unreserved older file was not deleted"
    );

    let made = installing
        .offer(installed, Some(629), Rule::Always)
        .expect("install offered");
    assert!(matches!(made, Offered::Current(_)), "{made:?}");
    assert_eq!(
        snapshot_files(&store.snapshots),
        vec!["snapshot-1-629-2.bin".to_owned()]
    );
}

/// An install is current whatever was current before (the state is the installed snapshot);
/// an export of the same index as the current one replaces it.
#[test]
fn an_install_is_always_current_and_an_equal_export_replaces_it() {
    let store = bare();
    let offer = |id: &str, header: &[u8], index: u64, rule: Rule| {
        let reservation = store.current.reserve(&final_path(&store.snapshots, id));
        let file = finished(&store.snapshots, id, header);
        reservation.offer(file, Some(index), rule).expect("offer")
    };
    offer("1-700-1", b"at 700", 700, Rule::IfNotOlder);
    let installed = offer("1-600-2", b"at 600", 600, Rule::Always);
    assert!(matches!(installed, Offered::Current(_)), "{installed:?}");
    let equal = offer("1-600-3", b"at 600 again", 600, Rule::IfNotOlder);
    assert!(matches!(equal, Offered::Current(_)), "{equal:?}");
    assert_eq!(
        snapshot_files(&store.snapshots),
        vec!["snapshot-1-600-3.bin".to_owned()]
    );
}

/// The other order: the export finishes first and is current until the newer install
/// replaces it and deletes its file.
#[test]
fn an_install_after_an_export_replaces_it() {
    let leader_dir = tempfile::tempdir().expect("tempdir");
    let (_leader, leader_file) = leader_snapshot(leader_dir.path(), "629", b"at 629", 629);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&StoreConfig::new(dir.path(), 4 << 20)).expect("store");
    let state = store.state().expect("state");
    put(&state, "mine", "473");

    let offered = state
        .begin_export()
        .write("1-473-3", b"at 473", Some(473))
        .expect("export");
    assert!(matches!(offered, Offered::Current(_)), "{offered:?}");
    install(&state, &leader_file, 629);

    assert_eq!(
        state
            .current_snapshot()
            .expect("current")
            .map(|s| s.file.header),
        Some(b"at 629".to_vec())
    );
    assert_eq!(
        snapshot_files(&snapshot_dir(&state)),
        vec!["snapshot-1-629-2.bin".to_owned()]
    );
}

/// A handle to the current snapshot (what a follower's snapshot transfer reads) stays
/// readable after a newer snapshot deletes its file.
#[test]
fn an_open_current_snapshot_outlives_its_replacement() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&StoreConfig::new(dir.path(), 4 << 20)).expect("store");
    let state = store.state().expect("state");
    put(&state, "k", "1");
    let first = state
        .export_snapshot("1-1-1", b"first", Some(1))
        .expect("export");
    let expected = std::fs::read(&first.path).expect("read");
    let mut open = state
        .current_snapshot()
        .expect("current")
        .expect("a current snapshot");
    put(&state, "k", "2");
    state
        .export_snapshot("1-2-1", b"second", Some(2))
        .expect("export");
    assert!(!first.path.exists(), "the older file is deleted");

    let mut bytes = Vec::new();
    open.handle.read_to_end(&mut bytes).expect("read");
    assert_eq!(bytes, expected);
}

/// Making a snapshot current leaves unfinished files alone: an export still being written and
/// a transfer still being received are not stale (an open removes those of a stopped run).
#[test]
fn making_a_snapshot_current_leaves_unfinished_files_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&StoreConfig::new(dir.path(), 4 << 20)).expect("store");
    let state = store.state().expect("state");
    let snapshots = snapshot_dir(&state);
    let exporting = snapshots.join("1-9-9.tmp");
    std::fs::write(&exporting, b"an export being written").expect("write");
    let receiving = state.incoming_snapshot_path();
    std::fs::write(&receiving, b"a transfer being received").expect("write");

    put(&state, "k", "1");
    state
        .export_snapshot("1-1-1", b"first", Some(1))
        .expect("export");

    assert!(exporting.exists(), "the running export's file was deleted");
    assert!(
        receiving.exists(),
        "the running transfer's file was deleted"
    );
}

/// After an open the current snapshot's position is not known: the first snapshot this run
/// makes is current even if its index is lower (a build or install after an open is never
/// behind the state, so a lower index means the log was reset, as in a test).
#[test]
fn the_first_snapshot_after_an_open_is_current_whatever_its_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = StoreConfig::new(dir.path(), 4 << 20);
    {
        let store = Store::open(&config).expect("store");
        let state = store.state().expect("state");
        put(&state, "k", "1");
        state
            .export_snapshot("1-9-1", b"nine", Some(9))
            .expect("export");
        store.close_clean().expect("clean stop");
    }
    let store = Store::open(&config).expect("reopen");
    let state = store.state().expect("state");
    let offered = state
        .begin_export()
        .write("1-5-2", b"five", Some(5))
        .expect("export");
    assert!(matches!(offered, Offered::Current(_)), "{offered:?}");
    // Within the run the order holds: an older one now loses.
    let older = state
        .begin_export()
        .write("1-4-2", b"four", Some(4))
        .expect("export");
    assert!(matches!(older, Offered::Superseded(_)), "{older:?}");
    assert_eq!(
        state
            .current_snapshot()
            .expect("current")
            .map(|s| s.file.header),
        Some(b"five".to_vec())
    );
}

/// A current snapshot whose file is gone (removed by hand) is an error, not "no snapshot"
/// (openraft treats a missing snapshot as a storage error when it is to send one, and the
/// caller replaces a damaged one); a new export then becomes current, even at an older index.
#[test]
fn a_current_snapshot_whose_file_is_gone_is_corrupt_until_a_new_one_is_made() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&StoreConfig::new(dir.path(), 4 << 20)).expect("store");
    let state = store.state().expect("state");
    put(&state, "k", "1");
    let first = state
        .export_snapshot("1-9-1", b"nine", Some(9))
        .expect("export");
    std::fs::remove_file(&first.path).expect("remove the current file");

    let err = state.current_snapshot().expect_err("a missing file");
    assert!(
        matches!(&err, StorageError::Corrupt { reason, .. } if reason.contains("missing")),
        "{err:?}"
    );
    let offered = state
        .begin_export()
        .write("1-8-1", b"eight", Some(8))
        .expect("export");
    assert!(matches!(offered, Offered::Current(_)), "{offered:?}");
    assert_eq!(
        state
            .current_snapshot()
            .expect("current")
            .map(|s| s.file.header),
        Some(b"eight".to_vec())
    );
}
