//! The check of this node's copy of a refused snapshot, and the rebuild it asks for, against a
//! real store and state machine.

use std::sync::Arc;

use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
use statestore_storage::store::{Store, StoreConfig};

use super::*;
use crate::state_machine::{DiscardEvents, SnapshotTrigger, StateMachine};

/// A state machine whose trigger never fires by itself.
fn state_machine(dir: &std::path::Path) -> StateMachine {
    let store = Store::open(&StoreConfig::new(dir.to_owned(), 16 << 20)).expect("open store");
    StateMachine::new(
        store,
        Arc::new(DiscardEvents),
        Arc::new(RaftStorageMetrics::default()),
        SnapshotTrigger {
            after_proposals: u64::MAX,
            after_entries: u64::MAX,
            state_percent: 0,
        },
    )
    .expect("state machine")
}

/// Builds a snapshot; returns its file name.
async fn build(sm: &mut StateMachine) -> String {
    let mut builder = sm.get_snapshot_builder().await;
    let built = builder.build_snapshot().await.expect("built");
    file_name(&built.snapshot.path)
}

/// Flips the file's last byte: the LZ4 frame's end, past the header.
fn flip_the_last_byte(path: &std::path::Path) {
    let mut bytes = std::fs::read(path).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(path, bytes).expect("write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_tells_an_intact_copy_from_a_damaged_one_and_from_one_no_longer_current() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sm = state_machine(dir.path());
    let state = sm.state();
    assert!(matches!(check_current(&state, "none"), Verdict::NotCurrent));

    let first = build(&mut sm).await;
    assert!(matches!(check_current(&state, &first), Verdict::Intact));
    assert!(matches!(
        check_current(&state, "another-id"),
        Verdict::NotCurrent
    ));

    let path = state
        .current_snapshot()
        .expect("current")
        .expect("one")
        .file
        .path;
    flip_the_last_byte(&path);
    assert!(
        matches!(check_current(&state, &first), Verdict::Corrupt(_)),
        "{:?}",
        check_current(&state, &first)
    );

    let second = build(&mut sm).await;
    assert_ne!(first, second);
    assert!(matches!(check_current(&state, &first), Verdict::NotCurrent));
    assert!(matches!(check_current(&state, &second), Verdict::Intact));
}

/// A requested rebuild makes the next build decision build although nothing is due, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requested_rebuild_is_built_once_whatever_the_trigger_says() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sm = state_machine(dir.path());
    assert!(sm.try_create_snapshot_builder(false).await.is_none());
    let rebuild = sm.rebuild_request();
    rebuild.request();
    assert!(rebuild.pending());
    assert!(sm.try_create_snapshot_builder(false).await.is_some());
    assert!(!rebuild.pending());
    assert!(sm.try_create_snapshot_builder(false).await.is_none());
}
