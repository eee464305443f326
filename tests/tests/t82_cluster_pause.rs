//! A paused leader (SIGSTOP past the election timeout, then SIGCONT) must neither lose
//! acknowledged writes nor answer a stale read when it wakes up still believing it leads.

use std::time::{Duration, Instant};

use statestore_tests::cluster::Cluster;
use statestore_tests::sdk::{SdkClient, TIMEOUT};
use statestore_tests::workload::{KeyPattern, Writer, finish_writers};

struct Read {
    key: Vec<u8>,
    sent: Instant,
    value: Vec<u8>,
}

/// SIGSTOP the leader for 3 s (> lease + election timeout), then SIGCONT, while two clients
/// overwrite their register with an increasing counter and a third reads: every GET returns a
/// value at least as new as the last write acknowledged before the GET was sent, and every
/// acknowledged write survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn paused_leader_serves_no_stale_read_and_loses_no_write() {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_ready(Duration::from_secs(30)).await;
    let leader = cluster.wait_serving_leader(Duration::from_secs(30)).await;
    let port = cluster.broker.port;
    let keys: Vec<String> = (0..2).map(|i| format!("register-{i}")).collect();
    let mut writers = Vec::new();
    for key in &keys {
        writers.push(Writer::start(port, key, KeyPattern::Register, Duration::from_secs(1)).await);
    }
    let reader = SdkClient::connect(port, "stale-read-checker").await;
    let reads = tokio::spawn({
        let keys = keys.clone();
        let client = reader.client.clone();
        async move {
            let mut reads = Vec::new();
            let until = Instant::now() + Duration::from_secs(9);
            while Instant::now() < until {
                for key in &keys {
                    let sent = Instant::now();
                    if let Ok(response) = client
                        .get(key.clone().into_bytes(), Duration::from_secs(1))
                        .await
                        && let Some(value) = response.response
                    {
                        reads.push(Read {
                            key: key.clone().into_bytes(),
                            sent,
                            value,
                        });
                    }
                }
            }
            reads
        }
    });

    tokio::time::sleep(Duration::from_millis(1500)).await;
    cluster.nodes[leader].pause();
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.nodes[leader].resume();
    let reads = reads.await.expect("reader");
    let reports = finish_writers(writers).await;
    let acks: Vec<_> = reports.iter().flat_map(|r| r.acks.iter()).collect();
    assert!(!acks.is_empty() && !reads.is_empty());

    let mut checked = 0;
    for read in &reads {
        let newest_acked_before = acks
            .iter()
            .filter(|a| a.key == read.key && a.acked < read.sent)
            .map(|a| &a.value)
            .max();
        if let Some(newest) = newest_acked_before {
            assert!(
                read.value >= *newest,
                "stale read of {}: got {} although {} was acknowledged before the GET was sent",
                String::from_utf8_lossy(&read.key),
                String::from_utf8_lossy(&read.value),
                String::from_utf8_lossy(newest)
            );
            checked += 1;
        }
    }
    println!(
        "{} reads checked against {} acknowledged writes",
        checked,
        acks.len()
    );

    cluster.wait_serving_leader(Duration::from_secs(30)).await;
    for key in &keys {
        let last = acks
            .iter()
            .filter(|a| a.key == key.as_bytes())
            .map(|a| &a.value)
            .max()
            .expect("acks per key");
        let got = reader
            .client
            .get(key.clone().into_bytes(), TIMEOUT)
            .await
            .expect("final get")
            .response
            .expect("value");
        assert!(got >= *last, "acknowledged write lost on {key}");
    }
    cluster.wait_converged(Duration::from_secs(30)).await;
    assert!(
        cluster
            .wait_single_subscription_holder(Duration::from_secs(20))
            .await,
        "exactly one subscription holder after the old leader woke up"
    );
    reader.shutdown().await;
}
