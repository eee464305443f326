//! A leader whose own snapshot file is damaged on disk, and a new member that needs it.
//!
//! Invariant: the member catches up, and the leader counts the damage once and replaces the
//! file. Damage past the header: the member refuses the file (it fails the member's checks),
//! the leader checks its own copy, finds the damage and builds a new snapshot, which the member
//! installs. (Before, the leader sent the same damaged file forever, and the member never
//! caught up.) Damage in the header, or the file removed: the leader cannot even open the file
//! to send it, and builds a new one in its place at once. (Before, the first stopped the
//! leader's Raft with an error, and the second with "snapshot not found".)

use std::collections::BTreeMap;
use std::time::Duration;

use statestore_harness::now_ms;
use statestore_raft::{MembershipChange, RaftConfig};
use statestore_storage::keyspace::read;
use support::{eventually, set};

mod support;

/// A snapshot is due after any proposal, and never after other entries (a membership change
/// alone builds none); the log is purged up to each one.
fn config(id: u64) -> RaftConfig {
    RaftConfig {
        id,
        snapshot_after_proposals: 1,
        snapshot_after_entries: u64::MAX,
        snapshot_after_state_percent: 0,
        entries_kept_after_snapshot: 0,
        ..RaftConfig::default()
    }
}

fn snapshot_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir.join("snapshots"))
        .expect("list")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("snapshot-"))
        })
        .collect()
}

/// How the leader's snapshot file is damaged.
#[derive(Clone, Copy)]
enum Damage {
    /// The last byte flipped (the LZ4 frame's end, past the header): the file opens, and fails
    /// the checks of whoever reads it whole.
    End,
    /// The first byte flipped whose damage makes the file's header unreadable.
    Header,
    /// The file removed (its record still names it).
    Removed,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_refusing_the_leaders_damaged_snapshot_gets_a_rebuilt_one() {
    let member = damaged_leader_snapshot_is_replaced(Damage::End).await;
    assert!(
        support::counter(
            &member.registry,
            "statestore_raft_snapshots_refused_total",
            "reason",
            "corrupt"
        ) >= 1,
        "the member never refused the damaged snapshot"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_snapshot_header_does_not_read_builds_a_new_one_and_keeps_leading() {
    damaged_leader_snapshot_is_replaced(Damage::Header).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_snapshot_file_is_gone_builds_a_new_one_and_keeps_leading() {
    damaged_leader_snapshot_is_replaced(Damage::Removed).await;
}

/// Damages the leader's snapshot with `damage`, adds a member that needs a snapshot, and
/// checks that it catches up; returns the member (shut down).
async fn damaged_leader_snapshot_is_replaced(damage: Damage) -> support::Served {
    let leader = support::serve_one(&config(1)).await;
    let bootstrapped = leader
        .node
        .bootstrap(BTreeMap::from([(1, leader.addr.clone())]))
        .await
        .expect("bootstrap");
    assert!(bootstrapped);
    assert!(
        eventually(Duration::from_secs(20), || leader
            .node
            .leadership()
            .borrow()
            .is_leader)
        .await,
        "node 1 never led"
    );
    // More entries than one purge batch (64), one proposal each.
    for i in 0..200u32 {
        leader
            .node
            .submit(set(format!("key-{i}").as_bytes(), b"value"))
            .expect("submit")
            .outcome()
            .await
            .expect("committed");
    }
    // A build already running makes openraft skip a trigger: ask until the snapshot covers
    // every entry applied (then nothing is due any more, and no build follows).
    let covered = statestore_harness::wait_for(Duration::from_secs(30), || async {
        leader.node.trigger_snapshot().await.expect("trigger");
        let metrics = leader.node.metrics();
        let done = metrics.snapshot.is_some()
            && metrics.snapshot == metrics.last_applied
            && metrics.purged.map(|id| id.index) > Some(64);
        done.then_some(())
    })
    .await;
    assert!(
        covered.is_some(),
        "no snapshot of every entry, or the log was not purged: {:?}",
        leader.node.metrics()
    );
    let applied = leader.node.metrics().last_applied.map(|id| id.index);

    let files = snapshot_files(leader.dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
    let intact = std::fs::read(&files[0]).expect("read");
    let state = leader.node.store().state().expect("state");
    match damage {
        Damage::End => {
            let mut bytes = intact.clone();
            let last = bytes.len() - 1;
            bytes[last] ^= 0x01;
            std::fs::write(&files[0], bytes).expect("damage the leader's snapshot");
            assert!(state.current_snapshot().expect("opens").is_some());
        }
        Damage::Header => {
            let unreadable = (8..intact.len()).find(|&at| {
                let mut bytes = intact.clone();
                bytes[at] ^= 0x01;
                std::fs::write(&files[0], bytes).expect("damage the leader's snapshot");
                state.current_snapshot().is_err()
            });
            assert!(unreadable.is_some(), "no byte's damage breaks the header");
        }
        Damage::Removed => {
            std::fs::remove_file(&files[0]).expect("remove the leader's snapshot");
            assert!(state.current_snapshot().is_err());
        }
    }

    let member = support::serve_one(&config(2)).await;
    let adding = {
        let node = leader.node.clone();
        let addr = member.addr.clone();
        tokio::spawn(async move {
            node.change_membership(&MembershipChange::AddVoter { id: 2, addr })
                .await
        })
    };
    let caught_up = eventually(Duration::from_secs(60), || {
        member.node.metrics().last_applied.map(|id| id.index) >= applied
    })
    .await;
    assert!(caught_up, "the member never caught up");
    assert_eq!(
        support::total(
            &leader.registry,
            "statestore_disk_snapshot_own_corrupt_total"
        ),
        1
    );
    tokio::time::timeout(Duration::from_secs(30), adding)
        .await
        .expect("the change ends")
        .expect("the change task")
        .expect("node 2 joined");
    let record = read::live_record(&member.node.view(), b"key-199", now_ms()).expect("read");
    assert_eq!(record.map(|r| r.value), Some(b"value".to_vec()));

    assert!(
        leader.node.leadership().borrow().is_leader,
        "node 1 still leads"
    );
    let now = snapshot_files(leader.dir.path());
    assert!(
        !now.contains(&files[0]) && !now.is_empty(),
        "the damaged file was replaced: {now:?}"
    );
    assert!(
        state.current_snapshot().expect("reads").is_some(),
        "a current snapshot that reads"
    );

    let _ = leader.stop.send(true);
    let _ = member.stop.send(true);
    let _ = member.node.shutdown().await;
    let _ = leader.node.shutdown().await;
    member
}
