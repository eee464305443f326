//! A node whose Raft log was damaged on disk refuses to start, saying where and what to do.
//!
//! Invariant: after 20 acknowledged SETs and a clean stop, one flipped bit in the middle of the
//! last Raft log chunk makes `statestore run` exit non-zero, with the chunk file, the byte
//! offset and the way out (rejoin from a snapshot) in its log at ERROR; with the bit restored
//! the node starts and every write is there.

use std::path::PathBuf;
use std::time::Duration;

use statestore_tests::broker::Broker;
use statestore_tests::node::{NodeSpec, StatestoreNode};
use statestore_tests::raw::{RawClient, resp};

fn last_chunk(data_dir: &std::path::Path) -> PathBuf {
    let mut chunks: Vec<PathBuf> = std::fs::read_dir(data_dir.join("raft-log"))
        .expect("raft-log dir")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "wal"))
        .collect();
    chunks.sort();
    chunks.pop().expect("a chunk file")
}

#[tokio::test]
async fn a_damaged_raft_log_stops_the_node_with_file_offset_and_the_way_out() {
    let broker = Broker::start();
    let mut node = StatestoreNode::start(&broker, NodeSpec::default());
    node.wait_ready(Duration::from_secs(30)).await;
    let mut client = RawClient::connect(broker.port, "wal-writer").await;
    for i in 0..20u32 {
        let key = format!("key-{i}");
        let reply = client
            .request(&resp(&[b"SET", key.as_bytes(), &[7; 200]]))
            .await
            .expect("reply");
        assert_eq!(&reply.payload[..], b"+OK\r\n");
    }
    let status = node
        .terminate(Duration::from_secs(15))
        .expect("stops within the grace period");
    assert!(status.success(), "{}", node.log_tail(20));

    // every byte of a chunk belongs to a checksummed record: flipping one is damage
    let chunk = last_chunk(&node.data_dir);
    let whole = std::fs::read(&chunk).expect("read chunk");
    let mut damaged = whole.clone();
    damaged[whole.len() / 2] ^= 0x04;
    std::fs::write(&chunk, &damaged).expect("damage");

    node.spawn();
    let status = node
        .wait_exit(Duration::from_secs(30))
        .await
        .expect("the node exits by itself");
    assert!(!status.success(), "exit status {status:?}");
    let log = node.log();
    let name = chunk
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    for part in [
        "ERROR",
        "the raft log is corrupt",
        name.as_str(),
        "at byte",
        "refuses to start",
        "remove-node --id 1",
        "--join",
    ] {
        assert!(
            log.contains(part),
            "{part:?} missing from the log:\n{}",
            node.log_tail(20)
        );
    }
    assert_eq!(
        std::fs::read(&chunk).expect("read"),
        damaged,
        "left as found"
    );

    std::fs::write(&chunk, &whole).expect("repair");
    node.spawn();
    node.wait_ready(Duration::from_secs(30)).await;
    for i in 0..20u32 {
        let key = format!("key-{i}");
        let reply = client
            .request(&resp(&[b"GET", key.as_bytes()]))
            .await
            .expect("reply");
        assert!(reply.payload.starts_with(b"$200\r\n"), "{key}");
    }
}
