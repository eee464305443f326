//! A snapshot the state machine builds itself racing an install of a newer one from the leader.
//!
//! Invariant: whichever of the two finishes first, the build returns a readable snapshot, the
//! node keeps working, and the current snapshot afterwards is the installed (newer) one, alone
//! on disk. (Seen in CI before the fix: the install made its file current and deleted the
//! build's, whose open then failed with "No such file or directory" and stopped Raft.)

use std::sync::Arc;

use openraft::RaftSnapshotBuilder;
use openraft::storage::RaftStateMachine;
use statestore_raft::metrics::RaftStorageMetrics;
use statestore_raft::snapshot::SnapshotData;
use statestore_raft::state_machine::{DiscardEvents, SnapshotTrigger, StateMachine};
use statestore_raft::types::{CommittedLeaderId, LogId, SnapshotMeta, StoredMembership};
use statestore_storage::codec;
use statestore_storage::sled::{SnapshotWriter, Store, StoreConfig};
use tokio::io::AsyncReadExt;

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

/// A leader's snapshot covering the log up to `index`, one row, as a file in `dir`.
fn leader_snapshot(dir: &std::path::Path, index: u64) -> (SnapshotMeta, std::path::PathBuf) {
    let meta = SnapshotMeta {
        last_log_id: Some(LogId::new(
            CommittedLeaderId {
                term: 3,
                node_id: 1,
            },
            index,
        )),
        last_membership: StoredMembership::default(),
    };
    let header = codec::encode(&meta);
    let path = dir.join(format!("leader-{index}.bin"));
    let mut writer =
        SnapshotWriter::create(&dir.join(format!("leader-{index}.tmp")), &header).expect("create");
    writer.push(b"\x01leader", b"629").expect("row");
    writer.finish(&path, &header).expect("finish");
    (meta, path)
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

/// A build begun before an install of a newer snapshot, both finishing concurrently (the
/// install waits for the build's export to release the state, then the two make their files
/// current in either order): the build's result reads, the installed snapshot stays current.
/// Run on several fresh nodes. Here the build usually makes its file current first and the
/// install then deletes it, so the build's snapshot must read from the handle it holds (before
/// the fix it opened the file afresh, after the deletion); the other order (the build
/// superseded by a finished install) is pinned by the storage unit tests of
/// `current_snapshot`, which need no timing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_racing_a_newer_install_leaves_the_installed_snapshot_current() {
    let leader_dir = tempfile::tempdir().expect("tempdir");
    let (meta, leader_file) = leader_snapshot(leader_dir.path(), 629);
    let leader_bytes = std::fs::read(&leader_file).expect("read");
    for round in 0..8 {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut sm = state_machine(dir.path());
        let mut builder = sm.get_snapshot_builder().await;
        let received = dir.path().join(format!("received-{round}.bin"));
        std::fs::copy(&leader_file, &received).expect("copy");
        let data = SnapshotData::open(received).await.expect("open");

        let (built, installed) =
            tokio::join!(builder.build_snapshot(), sm.install_snapshot(&meta, data));

        installed.expect("the install succeeds");
        let mut built = built.expect("the build returns a snapshot");
        assert!(
            built.meta.last_log_id.is_none() || built.meta == meta,
            "round {round}: the build returned neither its own state nor the installed one: {:?}",
            built.meta
        );
        assert!(
            !read_all(&mut built.snapshot).await.is_empty(),
            "round {round}: the built snapshot does not read"
        );
        let mut current = sm
            .get_current_snapshot()
            .await
            .expect("current snapshot")
            .expect("there is one");
        assert_eq!(current.meta, meta, "round {round}");
        assert_eq!(read_all(&mut current.snapshot).await, leader_bytes);
        assert_eq!(snapshot_files(dir.path()).len(), 1, "round {round}");
        let (applied, _) = sm.applied_state().await.expect("applied state");
        assert_eq!(applied, meta.last_log_id, "round {round}");
    }
}
