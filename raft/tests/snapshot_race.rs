//! A snapshot the state machine builds itself racing an install of a newer one from the leader.
//!
//! Invariant: the build returns a readable snapshot, the node keeps working, and the current
//! snapshot afterwards is the installed (newer) one, alone on disk. (Seen in CI before the
//! fix: the install made its file current and deleted the build's, whose open then failed with
//! "No such file or directory" and stopped Raft.)

use std::sync::Arc;

use openraft::RaftSnapshotBuilder;
use openraft::storage::RaftStateMachine;
use statestore_raft::metrics::RaftStorageMetrics;
use statestore_raft::snapshot::SnapshotData;
use statestore_raft::state_machine::{DiscardEvents, SnapshotTrigger, StateMachine};
use statestore_storage::store::{Store, StoreConfig};
use tokio::io::AsyncReadExt;

mod support;

fn state_machine(dir: &std::path::Path) -> StateMachine {
    let store = Store::open(&StoreConfig::new(dir.to_owned(), 16 << 20)).expect("open store");
    StateMachine::new(
        store,
        Arc::new(DiscardEvents),
        Arc::new(RaftStorageMetrics::default()),
        SnapshotTrigger::default(),
    )
    .expect("state machine")
}

async fn read_all(data: &mut SnapshotData) -> Vec<u8> {
    let mut bytes = Vec::new();
    data.file
        .read_to_end(&mut bytes)
        .await
        .expect("read snapshot");
    bytes
}

fn snapshot_files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("snapshots"))
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("snapshot-"))
        .collect();
    names.sort();
    names
}

/// True once `dir`'s snapshot directory holds a `snapshot-*` file whose name contains `part`.
fn has_snapshot_file(dir: &std::path::Path, part: &str) -> bool {
    snapshot_files(dir).iter().any(|name| name.contains(part))
}

/// The install renames the leader's file into place, then waits for the build's export to
/// release the state; the build then finishes and makes its own (older) file current while the
/// install's file waits for its turn. The install's file must survive that (before the fix the
/// build deleted it, and the install recorded a file that was gone), the build's result must
/// read, and afterwards the installed snapshot is current, alone on disk. (The other order, a
/// build finishing after the install, is pinned by the storage unit tests of
/// `current_snapshot`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_finishing_while_a_newer_install_waits_leaves_the_installed_snapshot_current() {
    let leader_dir = tempfile::tempdir().expect("tempdir");
    let (meta, leader_file) = support::leader_snapshot(leader_dir.path(), 3, 1, 629);
    let leader_bytes = std::fs::read(&leader_file).expect("read");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sm = state_machine(dir.path());
    let mut builder = sm.get_snapshot_builder().await;
    let received = dir.path().join("received.bin");
    std::fs::copy(&leader_file, &received).expect("copy");
    let data = SnapshotData::open(received).await.expect("open");

    let install_meta = meta.clone();
    let install = tokio::spawn(async move {
        let result = sm.install_snapshot(&install_meta, data).await;
        (sm, result)
    });
    // The install's file is in place (and the install waits for the export) before the build
    // is let go.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while !has_snapshot_file(dir.path(), "-629-") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the install never put its file in place"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(
        !install.is_finished(),
        "the install did not wait for the export"
    );

    let mut built = builder
        .build_snapshot()
        .await
        .expect("the build returns a snapshot");
    assert_eq!(built.meta.last_log_id, None, "the build's own, empty state");
    assert!(
        !read_all(&mut built.snapshot).await.is_empty(),
        "the built snapshot does not read"
    );
    let (mut sm, installed) = install.await.expect("install task");
    installed.expect("the install succeeds");

    let mut current = sm
        .get_current_snapshot()
        .await
        .expect("current snapshot")
        .expect("there is one");
    assert_eq!(current.meta, meta);
    assert_eq!(read_all(&mut current.snapshot).await, leader_bytes);
    assert_eq!(
        snapshot_files(dir.path()).len(),
        1,
        "{:?}",
        snapshot_files(dir.path())
    );
    let (applied, _) = sm.applied_state().await.expect("applied state");
    assert_eq!(applied, meta.last_log_id);
}
