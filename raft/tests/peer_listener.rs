//! The Raft listener against connections that do not behave like peers, over real loopback
//! TCP (plain; the TLS side is in `peer_tls.rs`): a first frame whose header claims 100 MiB,
//! a connection that says nothing, connections beyond the cap, a snapshot larger than the
//! node accepts, and one that fails its checks. Each is refused or closed (and counted in
//! `statestore_raft_peer_connections_refused_total` or `statestore_raft_snapshots_refused_total`)
//! while a well-behaved peer keeps being served.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use futures::{SinkExt, StreamExt};
use prometheus::Registry;
use statestore_raft::network::protocol::{self, PROTOCOL_VERSION, Request, Response};
use statestore_raft::types::{SnapshotMeta, Vote};
use statestore_raft::{InboundLimits, PeerTimeouts, RaftConfig, RaftNode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

mod support;

const HELLO_DEADLINE: Duration = Duration::from_millis(800);
const MAX_CONNECTIONS: usize = 4;
const MAX_SNAPSHOT_BYTES: u64 = 256 << 10;

struct Listener {
    node: RaftNode,
    registry: Registry,
    addr: String,
    dir: tempfile::TempDir,
    _stop: watch::Sender<bool>,
}

async fn start() -> Listener {
    let config = RaftConfig {
        id: 1,
        peer_timeouts: PeerTimeouts {
            connect: HELLO_DEADLINE,
            ..PeerTimeouts::default()
        },
        inbound: InboundLimits {
            max_connections: MAX_CONNECTIONS,
            max_snapshot_bytes: MAX_SNAPSHOT_BYTES,
        },
        ..RaftConfig::default()
    };
    let served = support::serve_one(&config).await;
    Listener {
        node: served.node,
        registry: served.registry,
        addr: served.addr,
        dir: served.dir,
        _stop: served.stop,
    }
}

impl Listener {
    fn refused(&self, reason: &str) -> u64 {
        support::counter(
            &self.registry,
            "statestore_raft_peer_connections_refused_total",
            "reason",
            reason,
        )
    }

    fn snapshots_refused(&self, reason: &str) -> u64 {
        support::counter(
            &self.registry,
            "statestore_raft_snapshots_refused_total",
            "reason",
            reason,
        )
    }

    fn open_connections(&self) -> i64 {
        self.registry
            .gather()
            .iter()
            .filter(|g| g.name() == "statestore_raft_peer_connections_open")
            .flat_map(|g| g.get_metric())
            .map(|m| m.get_gauge().get_value() as i64)
            .sum()
    }

    /// A peer that says hello like this build's client: the answer must be a hello.
    async fn greeted(&self) -> Framed<TcpStream, LengthDelimitedCodec> {
        let tcp = TcpStream::connect(&self.addr).await.expect("connect");
        let mut conn = Framed::new(tcp, protocol::framing());
        conn.send(protocol::encode(&Request::Hello {
            protocol: PROTOCOL_VERSION,
            from: Some(2),
        }))
        .await
        .expect("hello");
        match answer(&mut conn).await {
            Some(Response::Hello { protocol }) => assert_eq!(protocol, PROTOCOL_VERSION),
            _ => panic!("a well-behaved peer got no hello back"),
        }
        conn
    }

    /// Incoming snapshot files left in the data directory.
    fn partial_snapshots(&self) -> Vec<String> {
        fn walk(dir: &std::path::Path, found: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, found);
                } else if path
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("incoming-"))
                {
                    found.push(path.display().to_string());
                }
            }
        }
        let mut found = Vec::new();
        walk(self.dir.path(), &mut found);
        found
    }
}

async fn answer(conn: &mut Framed<TcpStream, LengthDelimitedCodec>) -> Option<Response> {
    let frame: BytesMut = tokio::time::timeout(Duration::from_secs(10), conn.next())
        .await
        .expect("an answer or a close in time")?
        .ok()?;
    protocol::decode("response", &frame).ok()
}

/// Waits until the server closes `tcp` (EOF or reset), at most `within`; returns how long.
async fn closed_within(tcp: &mut TcpStream, within: Duration) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout(within, tcp.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return started.elapsed(),
            Ok(Ok(_)) => continue,
            Err(_) => panic!("the server kept the connection open for {within:?}"),
        }
    }
}

/// A peer of the previous protocol version (5: errors in answers were strings) is refused at
/// its hello with a reason it can read, counted as `bad_hello`, and closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_of_the_previous_protocol_version_is_refused_at_the_hello() {
    let listener = start().await;
    let tcp = TcpStream::connect(&listener.addr).await.expect("connect");
    let mut conn = Framed::new(tcp, protocol::framing());
    conn.send(protocol::encode(&Request::Hello {
        protocol: PROTOCOL_VERSION - 1,
        from: Some(2),
    }))
    .await
    .expect("hello");
    match answer(&mut conn).await {
        Some(Response::Refused(reason)) => assert!(
            reason.contains(&format!("peer protocol {}", PROTOCOL_VERSION - 1))
                && reason.contains(&format!("this node speaks {PROTOCOL_VERSION}")),
            "{reason}"
        ),
        _ => panic!("no refusal"),
    }
    assert!(
        answer(&mut conn).await.is_none(),
        "closed after the refusal"
    );
    assert_eq!(listener.refused("bad_hello"), 1);
    // A peer of this version is still served.
    drop(listener.greeted().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_connections_are_closed_and_a_peer_is_still_served() {
    let listener = start().await;

    // A first frame whose header claims 100 MiB: closed as the header is read, long before
    // the hello deadline, and nothing of the size reserved (the node's memory stays put).
    let mut tcp = TcpStream::connect(&listener.addr).await.expect("connect");
    tcp.write_all(&(100u32 << 20).to_be_bytes())
        .await
        .expect("header");
    tcp.write_all(b"not a hello").await.expect("body");
    let took = closed_within(&mut tcp, Duration::from_secs(10)).await;
    assert!(
        took < HELLO_DEADLINE,
        "closed at the header, after {took:?}"
    );
    assert_eq!(listener.refused("oversized"), 1);

    // A connection that says nothing is closed at the hello deadline.
    let mut silent = TcpStream::connect(&listener.addr).await.expect("connect");
    let took = closed_within(&mut silent, Duration::from_secs(10)).await;
    assert!(
        took >= HELLO_DEADLINE / 2,
        "closed by the deadline, not before: {took:?}"
    );
    assert_eq!(listener.refused("timeout"), 1);

    // A first frame that is not a hello: refused with a reason, then closed.
    let tcp = TcpStream::connect(&listener.addr).await.expect("connect");
    let mut conn = Framed::new(tcp, protocol::framing());
    conn.send(protocol::encode(&Request::SnapshotEnd))
        .await
        .expect("send");
    match answer(&mut conn).await {
        Some(Response::Refused(reason)) => assert!(reason.contains("hello"), "{reason}"),
        _ => panic!("no refusal"),
    }
    assert!(
        answer(&mut conn).await.is_none(),
        "closed after the refusal"
    );
    assert_eq!(listener.refused("bad_hello"), 1);

    // The cap: MAX_CONNECTIONS greeted peers are held; one more is closed at once.
    let mut held = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        held.push(listener.greeted().await);
    }
    assert_eq!(listener.open_connections(), MAX_CONNECTIONS as i64);
    let mut extra = TcpStream::connect(&listener.addr).await.expect("connect");
    let took = closed_within(&mut extra, Duration::from_secs(10)).await;
    assert!(took < HELLO_DEADLINE, "closed at once: {took:?}");
    assert_eq!(listener.refused("limit"), 1);
    drop(held);
    let freed = statestore_harness::wait_for(Duration::from_secs(10), || {
        std::future::ready((listener.open_connections() == 0).then_some(()))
    })
    .await;
    assert!(freed.is_some(), "closed connections give their slots back");

    // A well-behaved peer is served, and after its hello frames beyond the pre-hello limit
    // are read: a 64 KiB snapshot chunk without a snapshot gets the protocol's refusal.
    let mut peer = listener.greeted().await;
    peer.send(protocol::encode(&Request::SnapshotChunk(vec![0; 64 << 10])))
        .await
        .expect("chunk");
    match answer(&mut peer).await {
        Some(Response::Refused(reason)) => {
            assert!(reason.contains("without a snapshot"), "{reason}")
        }
        _ => panic!("the large frame was not read as a request"),
    }

    // A snapshot past the node's cap: refused, its partial file removed.
    let mut sender = listener.greeted().await;
    let begin = Request::SnapshotBegin {
        vote: Vote::new(1, 2),
        meta: SnapshotMeta::default(),
    };
    sender.send(protocol::encode(&begin)).await.expect("begin");
    // Exactly one chunk past the cap, so the server has read everything it was sent when it
    // closes (unread bytes would turn its close into a reset that could swallow the answer).
    let chunk = vec![1u8; 64 << 10];
    for _ in 0..=(MAX_SNAPSHOT_BYTES as usize / chunk.len()) {
        sender
            .send(protocol::encode(&Request::SnapshotChunk(chunk.clone())))
            .await
            .expect("chunk");
    }
    let refused = match answer(&mut sender).await {
        Some(Response::Refused(reason)) => Some(reason),
        _ => None,
    };
    let reason = refused.expect("a refusal of the oversized snapshot");
    assert!(reason.contains("cluster.max_snapshot_mb"), "{reason}");
    assert_eq!(listener.snapshots_refused("too_large"), 1);
    let removed = statestore_harness::wait_for(Duration::from_secs(10), || {
        std::future::ready(listener.partial_snapshots().is_empty().then_some(()))
    })
    .await;
    assert!(
        removed.is_some(),
        "partial snapshot files left: {:?}",
        listener.partial_snapshots()
    );
    assert_eq!(
        listener.node.metrics().snapshot.as_ref().map(|s| s.index),
        None,
        "nothing was installed"
    );

    // And the listener still serves a peer.
    drop(listener.greeted().await);
}

/// Sends a whole snapshot transfer and returns the answer.
async fn transfer(
    conn: &mut Framed<TcpStream, LengthDelimitedCodec>,
    meta: SnapshotMeta,
    bytes: &[u8],
) -> Option<Response> {
    // A leader's vote, as openraft sends it with a snapshot.
    let begin = Request::SnapshotBegin {
        vote: Vote::new_committed(1, 2),
        meta,
    };
    conn.send(protocol::encode(&begin)).await.expect("begin");
    for chunk in bytes.chunks(1 << 10) {
        conn.send(protocol::encode(&Request::SnapshotChunk(chunk.to_vec())))
            .await
            .expect("chunk");
    }
    conn.send(protocol::encode(&Request::SnapshotEnd))
        .await
        .expect("end");
    answer(conn).await
}

/// A received snapshot with one byte flipped is refused before Raft sees it (openraft would
/// stop this node's Raft on the install's error), counted and removed; the same snapshot sent
/// again intact is installed on the same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_snapshot_is_refused_and_the_intact_one_installs_after_it() {
    let listener = start().await;
    let sent = tempfile::tempdir().expect("tempdir");
    let (meta, path) = support::leader_snapshot(sent.path(), 1, 2, 7);
    let bytes = std::fs::read(path).expect("read");
    let mut damaged = bytes.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x01;

    let mut leader = listener.greeted().await;
    match transfer(&mut leader, meta.clone(), &damaged).await {
        Some(Response::Refused(reason)) => {
            assert!(reason.contains("failed this node's checks"), "{reason}")
        }
        _ => panic!("no refusal of the damaged snapshot"),
    }
    assert_eq!(listener.snapshots_refused("corrupt"), 1);
    assert!(
        listener.partial_snapshots().is_empty(),
        "received files left: {:?}",
        listener.partial_snapshots()
    );
    assert_eq!(
        listener.node.metrics().snapshot.as_ref().map(|s| s.index),
        None,
        "nothing was installed"
    );

    match transfer(&mut leader, meta, &bytes).await {
        Some(Response::Snapshot(Ok(_))) => {}
        Some(Response::Snapshot(Err(err))) => panic!("the intact snapshot failed: {err}"),
        Some(Response::Refused(reason)) => panic!("the intact snapshot was refused: {reason}"),
        _ => panic!("no answer to the intact snapshot"),
    }
    assert_eq!(
        listener.node.metrics().snapshot.as_ref().map(|s| s.index),
        Some(7)
    );
    assert_eq!(listener.snapshots_refused("corrupt"), 1);
}
