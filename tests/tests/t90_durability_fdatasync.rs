//! Acknowledged means on stable storage on a quorum, checked from outside the processes.
//!
//! Invariant: for every SET a client sees acknowledged, at least two of the three nodes (a
//! quorum) completed an `fdatasync` of a Raft-log WAL file between the moment the request was
//! published and the moment its reply arrived. `strace` watches the real node processes; the
//! writes are sequential, so each one needs syncs of its own.

use std::time::Duration;

use statestore_tests::cluster::Cluster;
use statestore_tests::raw::resp;
use statestore_tests::raw_helpers::connect;
use statestore_tests::syscall_trace::{SyncCall, SyscallTrace};

const WRITES: usize = 40;

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

fn is_wal_sync(call: &SyncCall) -> bool {
    call.syscall == "fdatasync" && call.result == 0 && call.path.contains("/raft-log/")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_write_was_fdatasynced_by_a_quorum_first() {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_ready(Duration::from_secs(30)).await;
    cluster.wait_serving_leader(Duration::from_secs(30)).await;
    let mut client = connect(&cluster.broker, "durability-writer").await;
    // Warm the path (connections, leader take-over) before tracing.
    let warm = client.request(&resp(&[b"SET", b"warm", b"up"])).await;
    assert!(warm.is_some(), "warm-up SET answered");

    let traces: Vec<SyscallTrace> = cluster
        .nodes
        .iter()
        .map(|node| SyscallTrace::attach(node.pid() as u32))
        .collect();

    let mut windows = Vec::new();
    for i in 0..WRITES {
        let key = format!("durable-{i}");
        let published = now_us();
        let reply = client
            .request(&resp(&[b"SET", key.as_bytes(), b"v"]))
            .await
            .unwrap_or_else(|| panic!("SET {key} answered"));
        let answered = now_us();
        assert_eq!(reply.payload.as_ref(), b"+OK\r\n", "SET {key}");
        windows.push((published, answered));
    }
    let per_node: Vec<Vec<SyncCall>> = traces.into_iter().map(SyscallTrace::stop).collect();

    let wal_syncs: Vec<Vec<&SyncCall>> = per_node
        .iter()
        .map(|calls| calls.iter().filter(|c| is_wal_sync(c)).collect())
        .collect();
    for (i, syncs) in wal_syncs.iter().enumerate() {
        println!(
            "node {}: {} WAL fdatasyncs, {} durability syscalls in all",
            i + 1,
            syncs.len(),
            per_node[i].len()
        );
    }
    for (n, (published, answered)) in windows.iter().enumerate() {
        let covering = wal_syncs
            .iter()
            .filter(|syncs| {
                syncs
                    .iter()
                    .any(|c| c.start_us >= *published && c.end_us() <= *answered)
            })
            .count();
        assert!(
            covering >= 2,
            "write {n} was acknowledged after WAL fdatasyncs on only {covering} of 3 nodes \
             (window {published}..{answered} µs)"
        );
    }
}
