//! `statestore kv`, the command-line client, black-box against a running 3-node cluster: every
//! command, its output and its exit status (0 success, 1 missing or condition not held, 2 usage
//! or connection error), `--hex`, `--px`, a leader failover in the middle (the client resends),
//! and `watch` printing notifications.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use statestore_tests::cluster::Cluster;
use statestore_tests::node::statestore_bin;
use statestore_tests::pki::make_pki;

/// Runs `statestore kv --broker <broker> <args>` to completion.
fn kv(broker: &str, args: &[&str]) -> Output {
    Command::new(statestore_bin())
        .arg("kv")
        .args(["--broker", broker])
        .args(args)
        .output()
        .expect("run statestore kv")
}

fn status(output: &Output) -> i32 {
    output.status.code().expect("exited with a status")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `kv` in a blocking-safe way from the async test.
async fn kv_async(broker: &str, args: &[&str]) -> Output {
    let broker = broker.to_owned();
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        kv(&broker, &args)
    })
    .await
    .expect("kv task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_with_its_output_and_exit_status() {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_ready(Duration::from_secs(60)).await;
    let broker = cluster.broker.address();
    let b = broker.as_str();

    let set = kv_async(b, &["set", "greeting", "hello world"]).await;
    assert_eq!(status(&set), 0, "set: {set:?}");
    assert_eq!(stdout(&set), "");
    let get = kv_async(b, &["get", "greeting"]).await;
    assert_eq!((status(&get), stdout(&get).as_str()), (0, "hello world\n"));
    let get = kv_async(b, &["--hex", "get", "greeting"]).await;
    assert_eq!(
        (status(&get), stdout(&get).as_str()),
        (0, "68656c6c6f20776f726c64\n")
    );
    let missing = kv_async(b, &["get", "nothing-here"]).await;
    assert_eq!((status(&missing), stdout(&missing).as_str()), (1, ""));

    // Conditions: NX on an existing key and NEX with another value do not hold (exit 1).
    let nx = kv_async(b, &["set", "greeting", "other", "--nx"]).await;
    assert_eq!(status(&nx), 1, "{nx:?}");
    let nex = kv_async(b, &["set", "greeting", "other", "--nex"]).await;
    assert_eq!(status(&nex), 1, "{nex:?}");
    let nex_same = kv_async(b, &["set", "greeting", "hello world", "--nex"]).await;
    assert_eq!(status(&nex_same), 0, "{nex_same:?}");
    let nx_new = kv_async(b, &["set", "fresh", "1", "--nx"]).await;
    assert_eq!(status(&nx_new), 0, "{nx_new:?}");

    // VDEL with another value keeps the key; with its value deletes it; then it is missing.
    let vdel = kv_async(b, &["vdel", "greeting", "wrong"]).await;
    assert_eq!(status(&vdel), 1);
    assert_eq!(status(&kv_async(b, &["get", "greeting"]).await), 0);
    assert_eq!(
        status(&kv_async(b, &["vdel", "greeting", "hello world"]).await),
        0
    );
    assert_eq!(status(&kv_async(b, &["get", "greeting"]).await), 1);
    assert_eq!(status(&kv_async(b, &["del", "fresh"]).await), 0);
    assert_eq!(status(&kv_async(b, &["del", "fresh"]).await), 1);

    // PX: the key is gone once its time is up.
    assert_eq!(
        status(&kv_async(b, &["set", "short", "x", "--px", "300"]).await),
        0
    );
    let gone = statestore_tests::wait_for(Duration::from_secs(10), || async {
        (status(&kv_async(b, &["get", "short"]).await) == 1).then_some(())
    })
    .await;
    assert!(gone.is_some(), "a PX key expires");

    // Usage and connection errors: exit 2 with a message.
    let usage = kv_async(b, &["set", "only-key"]).await;
    assert_eq!(status(&usage), 2);
    let refused = kv_async("127.0.0.1:1", &["get", "k"]).await;
    assert_eq!(status(&refused), 2);
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("statestore kv:"),
        "{refused:?}"
    );
    let fenced = kv_async(b, &["set", "k", "v", "--fencing-token", "not-an-hlc"]).await;
    assert_eq!(status(&fenced), 2, "an error reply is exit 2: {fenced:?}");
    assert!(
        String::from_utf8_lossy(&fenced.stderr).contains("the store replied"),
        "{fenced:?}"
    );

    // A failover while the client waits: it resends until the new leader answers.
    let leader = cluster.wait_serving_leader(Duration::from_secs(30)).await;
    cluster.nodes[leader].kill();
    let after = kv_async(b, &["--timeout", "30", "set", "after-failover", "yes"]).await;
    assert_eq!(status(&after), 0, "{after:?}");
    let read = kv_async(b, &["--timeout", "30", "get", "after-failover"]).await;
    assert_eq!((status(&read), stdout(&read).as_str()), (0, "yes\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_every_change_of_its_keys() {
    let mut cluster = Cluster::start(1, &[]);
    cluster.wait_ready(Duration::from_secs(60)).await;
    let broker = cluster.broker.address();
    let mut watcher = Command::new(statestore_bin())
        .args(["kv", "--broker", &broker, "watch", "door", "window"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start watch");
    let stderr = watcher.stderr.take().expect("stderr");
    let stdout = watcher.stdout.take().expect("stdout");
    // Registered once it says so on stderr.
    let registered = tokio::task::spawn_blocking(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.starts_with("watching 2 key(s)"))
    });
    assert!(
        tokio::time::timeout(Duration::from_secs(30), registered)
            .await
            .expect("watch registers in time")
            .expect("reader"),
        "watch announced its registration"
    );
    let lines = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .take(3)
            .collect::<Vec<String>>()
    });
    for args in [
        &["set", "door", "open"][..],
        &["set", "unwatched", "x"][..],
        &["set", "window", "closed"][..],
        &["del", "door"][..],
    ] {
        assert_eq!(status(&kv_async(&broker, args).await), 0, "{args:?}");
    }
    let lines = tokio::time::timeout(Duration::from_secs(30), lines)
        .await
        .expect("three notifications in time")
        .expect("reader");
    let _ = watcher.kill();
    let _ = watcher.wait();
    assert_eq!(
        lines,
        ["SET door open", "SET window closed", "DELETE door"],
        "changes of the watched keys in order, nothing else"
    );
}

/// `--tls`: the client checks the broker's certificate against `--ca` (and its host name)
/// and authenticates with `--cert`/`--key` where the broker requires a certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_ca_and_a_client_certificate() {
    let pki = tempfile::tempdir().expect("temp dir");
    let dir = pki.path();
    make_pki(
        dir,
        "good",
        2,
        &[("broker", "IP:127.0.0.1"), ("client", "DNS:client")],
    );
    make_pki(dir, "other", 2, &[]);
    let tls_port = statestore_tests::free_port();
    let path = |file: &str| dir.join(file).display().to_string();
    // The node uses the plain listener; `kv` the TLS one, which requires a client certificate.
    let broker = statestore_tests::broker::Broker::start_with(
        "127.0.0.1",
        &format!(
            "listener {tls_port} 127.0.0.1\ncafile {}\ncertfile {}\nkeyfile {}\n\
             require_certificate true\n",
            path("good-ca.pem"),
            path("broker.pem"),
            path("broker.key")
        ),
    );
    let node = statestore_tests::node::StatestoreNode::start(
        &broker,
        statestore_tests::node::NodeSpec::default(),
    );
    node.wait_ready(Duration::from_secs(30)).await;
    let tls = format!("127.0.0.1:{tls_port}");
    let (ca, cert, key) = (path("good-ca.pem"), path("client.pem"), path("client.key"));
    let with_client = ["--ca", &ca, "--cert", &cert, "--key", &key];

    let set = kv_async(
        &tls,
        &[&with_client[..], &["set", "secure", "yes"]].concat(),
    )
    .await;
    assert_eq!(status(&set), 0, "{set:?}");
    let get = kv_async(&tls, &[&with_client[..], &["get", "secure"]].concat()).await;
    assert_eq!((status(&get), stdout(&get).as_str()), (0, "yes\n"));

    // No client certificate: the broker refuses the handshake.
    let anonymous = kv_async(&tls, &["--ca", &ca, "--timeout", "5", "get", "secure"]).await;
    assert_eq!(status(&anonymous), 2, "{anonymous:?}");
    // A broker certificate from another CA is refused by the client.
    let other_ca = path("other-ca.pem");
    let untrusted = kv_async(
        &tls,
        &[
            "--ca",
            &other_ca,
            "--cert",
            &cert,
            "--key",
            &key,
            "--timeout",
            "5",
            "get",
            "secure",
        ],
    )
    .await;
    assert_eq!(status(&untrusted), 2, "{untrusted:?}");
    assert!(
        String::from_utf8_lossy(&untrusted.stderr).contains("statestore kv:"),
        "{untrusted:?}"
    );
    // TLS to the plain listener fails; plain to it still works.
    let plain = broker.address();
    let mismatch = kv_async(
        &plain,
        &["--tls", "--ca", &ca, "--timeout", "5", "get", "secure"],
    )
    .await;
    assert_eq!(status(&mismatch), 2, "{mismatch:?}");
    let get = kv_async(&plain, &["get", "secure"]).await;
    assert_eq!((status(&get), stdout(&get).as_str()), (0, "yes\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_prints_every_matching_key_in_order_across_pages() {
    use azure_iot_operations_services::state_store::SetOptions;
    use statestore_tests::sdk::{SdkClient, TIMEOUT};

    let mut cluster = Cluster::start(1, &[]);
    cluster.wait_ready(Duration::from_secs(60)).await;
    let broker = cluster.broker.address();
    // More matching keys than one page holds (1,000), and keys around them that do not match.
    let sdk = SdkClient::connect(cluster.broker.port, "t99-scan-writer").await;
    let matching: Vec<String> = (0..1_005).map(|i| format!("page:{i:04}")).collect();
    let others = ["pagex", "page", "other:1", "zzz"];
    for chunk in matching
        .iter()
        .map(String::as_str)
        .chain(others)
        .collect::<Vec<_>>()
        .chunks(64)
    {
        let writes = chunk.iter().map(|key| {
            sdk.client.set(
                key.as_bytes().to_vec(),
                b"v".to_vec(),
                TIMEOUT,
                None,
                SetOptions::default(),
            )
        });
        for written in futures::future::join_all(writes).await {
            written.expect("set");
        }
    }

    let scan = kv_async(&broker, &["scan", "page:*"]).await;
    assert_eq!(
        status(&scan),
        0,
        "scan: {:?}",
        String::from_utf8_lossy(&scan.stderr)
    );
    let listed: Vec<String> = stdout(&scan).lines().map(str::to_owned).collect();
    assert_eq!(listed, matching, "every matching key once, in key order");

    let scan = kv_async(&broker, &["--hex", "scan", "o?her:[0-9]"]).await;
    assert_eq!(
        (status(&scan), stdout(&scan).as_str()),
        (0, format!("{}\n", hex::encode("other:1")).as_str())
    );
    let none = kv_async(&broker, &["scan", "nothing*"]).await;
    assert_eq!((status(&none), stdout(&none).as_str()), (0, ""));
    // A pattern over the key limit is the store's `syntax error`: exit 2, said on stderr.
    let long = "*".repeat(70_000);
    let refused = kv_async(&broker, &["scan", &long]).await;
    assert_eq!(status(&refused), 2);
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("syntax error"),
        "{refused:?}"
    );
}
