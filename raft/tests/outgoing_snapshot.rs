//! This node's snapshots without a standing snapshot file: a build writes nothing, a peer gets
//! an export of the state written for it, and an install keeps nothing of the received file.
//!
//! Invariants: a build returns the state's meta once it is durable and leaves no file; the
//! snapshot handed out for peers holds exactly the state its meta names, is written only when
//! read, is shared by every sender while one holds it, is replaced once a peer refused it as
//! corrupt (counted), and its file is removed once nobody holds it; an install while a build
//! waits finishes both.

use std::sync::Arc;
use std::time::Duration;

use openraft::RaftSnapshotBuilder;
use openraft::storage::RaftStateMachine;
use statestore_raft::metrics::RaftStorageMetrics;
use statestore_raft::snapshot::{OUTGOING_GRACE, SnapshotData};
use statestore_raft::state_machine::{DiscardEvents, SnapshotTrigger, StateMachine};
use statestore_storage::engine::{TxnWrite, TxnWrites};
use statestore_storage::store::{Store, StoreConfig, verify_snapshot};
use tokio::io::AsyncReadExt;

mod support;

fn state_machine(dir: &std::path::Path) -> (StateMachine, Arc<RaftStorageMetrics>) {
    let store = Store::open(&StoreConfig::new(dir.to_owned(), 16 << 20)).expect("open store");
    let metrics = Arc::new(RaftStorageMetrics::default());
    let sm = StateMachine::new(
        store,
        Arc::new(DiscardEvents),
        metrics.clone(),
        SnapshotTrigger::default(),
    )
    .expect("state machine");
    (sm, metrics)
}

/// The names of the files in `dir`'s snapshot directory, sorted.
fn snapshot_files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("snapshots"))
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A state machine that installed the leader snapshot of `support::leader_snapshot` (one row,
/// at `index`); the received file is removed as the receiving server does.
async fn installed(
    dir: &std::path::Path,
    index: u64,
) -> (
    StateMachine,
    Arc<RaftStorageMetrics>,
    openraft::alias::SnapshotMetaOf<statestore_raft::types::TypeConfig>,
) {
    let leader_dir = tempfile::tempdir().expect("tempdir");
    let (meta, leader_file) = support::leader_snapshot(leader_dir.path(), 3, 1, index);
    let (mut sm, metrics) = state_machine(dir);
    let received = dir.join("received.bin");
    std::fs::copy(&leader_file, &received).expect("copy");
    sm.install_snapshot(
        &meta,
        SnapshotData::Received {
            path: received.clone(),
        },
    )
    .await
    .expect("install");
    std::fs::remove_file(&received).expect("the server removes it");
    (sm, metrics, meta)
}

/// The snapshot `sm` hands out for peers (something must be applied).
async fn current(sm: &mut StateMachine) -> statestore_raft::types::Snapshot {
    sm.get_current_snapshot()
        .await
        .expect("current")
        .expect("something is applied")
}

/// Reads an outgoing snapshot whole (writing it first) and returns its bytes.
async fn read_outgoing(data: &SnapshotData) -> Vec<u8> {
    let SnapshotData::Outgoing(outgoing) = data else {
        panic!("not an outgoing snapshot: {data:?}");
    };
    let mut file = outgoing.open().await.expect("written");
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).await.expect("read");
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_writes_no_file_and_returns_the_applied_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut sm, _, meta) = installed(dir.path(), 629).await;
    assert_eq!(
        snapshot_files(dir.path()),
        Vec::<String>::new(),
        "the install keeps no file"
    );
    let mut builder = sm.get_snapshot_builder().await;
    let built = builder.build_snapshot().await.expect("built");
    assert_eq!(built.meta, meta);
    assert!(matches!(built.snapshot, SnapshotData::InDatabase));
    assert_eq!(
        snapshot_files(dir.path()),
        Vec::<String>::new(),
        "a build writes no file"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_snapshot_for_peers_is_the_state_written_on_first_read_and_shared() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut sm, metrics, meta) = installed(dir.path(), 629).await;
    let first = current(&mut sm).await;
    assert_eq!(first.meta, meta);
    assert_eq!(
        snapshot_files(dir.path()),
        Vec::<String>::new(),
        "nothing written before a read"
    );

    let second = current(&mut sm).await;
    let (SnapshotData::Outgoing(a), SnapshotData::Outgoing(b)) =
        (&first.snapshot, &second.snapshot)
    else {
        panic!("outgoing snapshots expected");
    };
    assert!(Arc::ptr_eq(a, b), "a second sender shares the export");

    let bytes = read_outgoing(&first.snapshot).await;
    assert_eq!(read_outgoing(&second.snapshot).await, bytes);
    let written = snapshot_files(dir.path());
    assert_eq!(written.len(), 1, "{written:?}");
    let copy = dir.path().join("copy.bin");
    std::fs::write(&copy, &bytes).expect("copy");
    let verified = verify_snapshot(&copy).expect("the written snapshot passes a peer's checks");
    assert_eq!(verified.entries, 1, "the installed row");
    let header_meta: statestore_raft::types::SnapshotMeta =
        statestore_storage::codec::decode("header", &verified.header).expect("header");
    assert_eq!(header_meta, meta);

    // Refused by a peer as corrupt: not handed out again, counted once.
    a.refuse();
    let third = current(&mut sm).await;
    let SnapshotData::Outgoing(c) = &third.snapshot else {
        panic!("outgoing snapshot expected");
    };
    assert!(!Arc::ptr_eq(a, c), "a new export after a refusal");
    let _ = sm.get_current_snapshot().await.expect("current");
    assert_eq!(metrics.own_snapshot_corrupt_total.get(), 1);
}

/// An export older than the state's last build or install is not handed out again once it is
/// written, even while a sender still holds it: the log after it may be purged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_written_export_older_than_an_install_is_not_handed_out_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut sm, _, _) = installed(dir.path(), 629).await;
    let old = current(&mut sm).await;
    read_outgoing(&old.snapshot).await;

    let leader_dir = tempfile::tempdir().expect("tempdir");
    let (newer, leader_file) = support::leader_snapshot(leader_dir.path(), 4, 1, 700);
    let received = dir.path().join("received-700.bin");
    std::fs::copy(&leader_file, &received).expect("copy");
    sm.install_snapshot(&newer, SnapshotData::Received { path: received })
        .await
        .expect("install");
    let current = current(&mut sm).await;
    assert_eq!(current.meta, newer);
    let (SnapshotData::Outgoing(a), SnapshotData::Outgoing(b)) = (&old.snapshot, &current.snapshot)
    else {
        panic!("outgoing snapshots expected");
    };
    assert!(!Arc::ptr_eq(a, b), "a new export of the installed state");
}

/// Once no sender holds it and its grace period is over, the written file is removed.
#[tokio::test(start_paused = true)]
async fn a_written_snapshot_is_removed_after_its_grace_period() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut sm, _, _) = installed(dir.path(), 7).await;
    let snapshot = current(&mut sm).await;
    read_outgoing(&snapshot.snapshot).await;
    drop(snapshot);
    assert_eq!(snapshot_files(dir.path()).len(), 1, "held for retries");
    tokio::time::sleep(OUTGOING_GRACE + Duration::from_secs(1)).await;
    assert_eq!(snapshot_files(dir.path()), Vec::<String>::new());
}

/// A build begun before an install of a newer snapshot (its checkpoint waiting for a layer of
/// rows) and the install both finish: the install discards the memtable only once nothing is
/// frozen, which is what the build waits for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_and_an_install_of_a_newer_snapshot_both_finish() {
    let leader_dir = tempfile::tempdir().expect("tempdir");
    let (meta, leader_file) = support::leader_snapshot(leader_dir.path(), 3, 1, 629);
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut sm, _) = state_machine(dir.path());
    // Rows in the memtable (about 6 MB): the build's checkpoint has a layer to wait for.
    let mut txn = TxnWrites::new();
    for i in 0..50_000u32 {
        txn.insert(format!("k{i:06}").into_bytes(), TxnWrite::Put(vec![7; 100]));
    }
    sm.state().commit(txn).expect("commit");
    let mut builder = sm.get_snapshot_builder().await;
    let received = dir.path().join("received.bin");
    std::fs::copy(&leader_file, &received).expect("copy");
    let install_meta = meta.clone();
    let install = tokio::spawn(async move {
        let result = sm
            .install_snapshot(&install_meta, SnapshotData::Received { path: received })
            .await;
        (sm, result)
    });
    let built = builder.build_snapshot().await.expect("the build returns");
    assert_eq!(built.meta.last_log_id, None, "the build's own, empty state");
    let (mut sm, result) = install.await.expect("install task");
    result.expect("the install succeeds");
    let (applied, _) = sm.applied_state().await.expect("applied state");
    assert_eq!(applied, meta.last_log_id);
}
