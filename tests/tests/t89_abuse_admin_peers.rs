//! Abuse suite (issue 27), admin and peers: the digest needs the admin token, a peer
//! connection claiming a huge first frame is closed before its Hello, and a node refuses to
//! serve its admin API off loopback without a token unless told it may. The cluster tests run
//! 3 nodes behind a real Mosquitto with a well-behaved SDK client working beside the attacker.
//! Names the fixes agreed on are constants in `statestore_tests::abuse`.

use std::process::Stdio;
use std::time::Duration;

use statestore_tests::abuse::*;
use statestore_tests::broker::Broker;
use statestore_tests::cluster::Cluster;
use statestore_tests::free_port;
use statestore_tests::node::{AdminAccess, http_request, statestore_bin};
use statestore_tests::raw::RawClient;
use statestore_tests::raw_helpers::assert_still_serving;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "t89-admin-token-0123456789abcdef";

/// The admin digest (issue 27): with an admin token configured, `GET /admin/digest` without
/// the token or with another one is refused 401 on every node (a loop of such requests does
/// not disturb the well-behaved client, answered within the liveness bound), with the token it
/// answers 200 with the digest, and `/metrics` stays open for scrapers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_digest_needs_the_admin_token() {
    let dir = tempfile::tempdir().expect("temp dir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token file");
    let token_arg = token_file.display().to_string();
    let access = AdminAccess {
        ca: None,
        token: Some(TOKEN.to_owned()),
    };
    let mut cluster =
        Cluster::start(3, &["--admin-token-file", &token_arg]).with_admin_access(access);
    cluster.wait_ready(Duration::from_secs(60)).await;
    cluster.wait_serving_leader(Duration::from_secs(30)).await;
    let well_behaved = WellBehaved::start(cluster.broker.port, "t89-digest-app").await;

    let urls: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("{}/admin/digest", n.http_url()))
        .collect();
    let mut loops = Vec::new();
    for url in urls.clone() {
        loops.push(tokio::spawn(async move {
            let mut codes = Vec::new();
            for n in 0..100 {
                let access = AdminAccess {
                    ca: None,
                    token: (n % 2 == 1).then(|| "x".repeat(32)),
                };
                let answer = http_request(&url, &access, "GET", None, Duration::from_secs(5)).await;
                codes.push(answer.map(|(code, _)| code));
            }
            codes
        }));
    }
    assert!(well_behaved.wait_more(10, ATTACK_CAP).await, "progress");
    let mut refused = Vec::new();
    for task in loops {
        refused.extend(task.await.expect("digest loop"));
    }
    well_behaved
        .finish()
        .await
        .assert_live("digest without token", 10);
    let not_401: Vec<_> = refused.iter().filter(|c| **c != Some(401)).collect();
    assert!(
        not_401.is_empty(),
        "{} of {} digest requests without the token were not refused 401, e.g. {:?}",
        not_401.len(),
        refused.len(),
        not_401.first()
    );
    for node in &cluster.nodes {
        let digest = node
            .digest()
            .await
            .expect("the digest answers with the token");
        assert!(digest["digest"].is_string(), "{digest}");
        let metrics = http_request(
            &format!("{}/metrics", node.http_url()),
            &AdminAccess::default(),
            "GET",
            None,
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(
            metrics.map(|(code, _)| code),
            Some(200),
            "metrics stay open"
        );
    }
}

/// Bytes a peer connection streams after its oversized frame header while the node keeps it
/// open.
const PEER_STREAM_BYTES: usize = 32 << 20;
/// Peak resident growth allowed per node meanwhile: the well-behaved client's writes and
/// slack, not the attackers' streams (4 × 32 MiB per node if buffered).
const PEER_GROWTH_MIB: u64 = 32;
/// The frame length the header claims.
const PEER_CLAIMED_BYTES: u32 = 100 << 20;
/// Such connections per node.
const PEER_CONNECTIONS: usize = 4;

/// Connects to `address`, sends a frame header claiming [`PEER_CLAIMED_BYTES`] and streams
/// up to [`PEER_STREAM_BYTES`] of it; returns whether the node closed the connection within
/// [`LIVENESS`] of the header.
async fn oversized_frame(address: String) -> bool {
    let Ok(mut stream) = tokio::net::TcpStream::connect(&address).await else {
        return false;
    };
    let started = tokio::time::Instant::now();
    if stream
        .write_all(&PEER_CLAIMED_BYTES.to_be_bytes())
        .await
        .is_err()
    {
        return true;
    }
    let (mut reader, mut writer) = stream.into_split();
    let write = async move {
        let chunk = vec![0u8; 64 * 1024];
        for _ in 0..PEER_STREAM_BYTES / chunk.len() {
            if writer.write_all(&chunk).await.is_err() {
                return;
            }
        }
        // Keep the write half open: the node must close, not the attacker.
        std::future::pending::<()>().await;
    };
    let read = async move {
        let mut buffer = vec![0u8; 4096];
        loop {
            match reader.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::select! {
        () = read => true,
        () = write => true,
        () = tokio::time::sleep_until(started + LIVENESS) => false,
    }
}

/// A huge peer frame header (issue 27): connections to every node's peer port whose first
/// frame header claims 100 MiB (followed by up to 32 MiB of it) are closed by the node within
/// the liveness bound, before any Hello, without the node keeping what they sent (peak
/// resident growth under 32 MiB per node); the cluster keeps committing the well-behaved
/// client's writes (each answered within the liveness bound) and its replicas converge.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_huge_peer_frame_header_is_closed_before_hello() {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_ready(Duration::from_secs(60)).await;
    cluster.wait_serving_leader(Duration::from_secs(30)).await;
    let well_behaved = WellBehaved::start(cluster.broker.port, "t89-peer-app").await;
    let watch = PeakWatch::start(&cluster.nodes.iter().map(|n| n.pid()).collect::<Vec<_>>());
    let mut attacks = Vec::new();
    for node in &cluster.nodes {
        for _ in 0..PEER_CONNECTIONS {
            attacks.push(tokio::spawn(oversized_frame(format!(
                "127.0.0.1:{}",
                node.raft_port
            ))));
        }
    }
    let mut closed = 0;
    for attack in attacks {
        if attack.await.expect("attack task") {
            closed += 1;
        }
    }
    assert!(well_behaved.wait_more(20, ATTACK_CAP).await, "progress");
    println!(
        "oversized peer frames: {closed} of {} connections closed by the node; memory {:?}",
        cluster.nodes.len() * PEER_CONNECTIONS,
        watch.growth_mib()
    );
    well_behaved
        .finish()
        .await
        .assert_live("huge peer frames", 20);
    cluster.wait_converged(Duration::from_secs(30)).await;
    assert_eq!(
        closed,
        cluster.nodes.len() * PEER_CONNECTIONS,
        "every connection claiming a {PEER_CLAIMED_BYTES}-byte frame is closed within {LIVENESS:?}"
    );
    for (node, (_, grown)) in watch.growth_mib().into_iter().enumerate() {
        assert!(
            grown <= PEER_GROWTH_MIB,
            "node {} grew by {grown} MiB under the oversized frames (bound {PEER_GROWTH_MIB})",
            node + 1
        );
    }
    let mut after = RawClient::connect(cluster.broker.port, "t89-after-peer").await;
    assert_still_serving(&mut after, "after huge peer frames").await;
}

/// Starts `statestore run` as node 1 with its HTTP listener on `http` and `extra` flags;
/// returns the child and its log file.
fn start_node(
    broker: &Broker,
    dir: &tempfile::TempDir,
    http: &str,
    extra: &[&str],
) -> (tokio::process::Child, std::path::PathBuf) {
    let log = dir.path().join(format!("node-{}.log", free_port()));
    let child = tokio::process::Command::new(statestore_bin())
        .args(["run", "--id", "1", "--data-dir"])
        .arg(dir.path().join(format!("data-{}", free_port())))
        .args(["--broker", &broker.address(), "--http", http, "--raft"])
        .arg(format!("127.0.0.1:{}", free_port()))
        .args(extra)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .kill_on_drop(true)
        .spawn()
        .expect("start statestore");
    (child, log)
}

/// Waits until `/readyz` on 127.0.0.1:`port` answers 200; false after 30 s.
async fn ready(port: u16) -> bool {
    statestore_tests::wait_for(Duration::from_secs(30), || async {
        let answer = http_request(
            &format!("http://127.0.0.1:{port}/readyz"),
            &AdminAccess::default(),
            "GET",
            None,
            Duration::from_secs(1),
        )
        .await;
        matches!(answer, Some((200, _))).then_some(())
    })
    .await
    .is_some()
}

/// An exposed admin API (issue 27): a node told to bind its HTTP listener on a non-loopback
/// address (`0.0.0.0`) without an admin token refuses to start, saying how to proceed; with
/// an admin token, or with the explicit insecure flag, it starts and serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_loopback_http_bind_needs_a_token_or_the_insecure_flag() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token file");
    let token_arg = token_file.display().to_string();

    let port = free_port();
    let (mut refused, log) = start_node(&broker, &dir, &format!("0.0.0.0:{port}"), &[]);
    let status = tokio::time::timeout(Duration::from_secs(30), refused.wait()).await;
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    let exited = matches!(status, Ok(Ok(status)) if !status.success());
    assert!(
        exited,
        "a node on 0.0.0.0 without a token must refuse to start: {status:?}; log:\n{log_text}"
    );
    let flag = ALLOW_INSECURE_HTTP.trim_start_matches('-');
    assert!(
        log_text.contains(flag) || log_text.contains(&flag.replace('-', "_")),
        "the refusal names {ALLOW_INSECURE_HTTP}: {log_text}"
    );

    for (what, extra) in [
        ("the insecure flag", vec![ALLOW_INSECURE_HTTP]),
        ("a token", vec!["--admin-token-file", token_arg.as_str()]),
    ] {
        let port = free_port();
        let (mut node, log) = start_node(&broker, &dir, &format!("0.0.0.0:{port}"), &extra);
        let up = ready(port).await;
        let _ = node.kill().await;
        assert!(
            up,
            "with {what} a node on 0.0.0.0 starts: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
}
