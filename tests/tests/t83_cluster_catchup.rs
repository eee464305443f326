//! A follower that misses many writes catches up after a restart, by snapshot when the leader
//! has purged the log it missed.

use std::time::Duration;

use azure_iot_operations_services::state_store::SetOptions;
use futures::StreamExt;
use statestore_tests::cluster::Cluster;
use statestore_tests::sdk::{SdkClient, TIMEOUT};

/// With snapshots every 50 log entries and 10 entries kept (writes are batched, so 10,000
/// writes make a few hundred entries), a follower down during 10,000 writes finds the log it
/// missed purged, is brought back by a snapshot install and ends with the leader's digest.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn follower_down_during_10000_writes_catches_up_by_snapshot() {
    let mut cluster = Cluster::start(
        3,
        &[
            "--snapshot-after-entries",
            "50",
            "--snapshot-after-state-percent",
            "0",
            "--entries-kept-after-snapshot",
            "10",
        ],
    );
    cluster.wait_ready(Duration::from_secs(30)).await;
    let leader = cluster.wait_serving_leader(Duration::from_secs(30)).await;
    let follower = (leader + 1) % 3;
    let follower_last = cluster.nodes[follower]
        .status()
        .await
        .expect("follower status")["last_log_index"]
        .as_u64()
        .unwrap_or(0);
    cluster.nodes[follower].kill();

    let sdk = SdkClient::connect(cluster.broker.port, "bulk-writer").await;
    let client = sdk.client.clone();
    let failures = futures::stream::iter(0..10_000u32)
        .map(|i| {
            let client = client.clone();
            async move {
                let key = format!("bulk-{i:05}").into_bytes();
                client
                    .set(
                        key,
                        i.to_be_bytes().to_vec(),
                        TIMEOUT,
                        None,
                        SetOptions::default(),
                    )
                    .await
                    .map(|r| r.response)
            }
        })
        .buffer_unordered(64)
        .filter(|result| std::future::ready(!matches!(result, Ok(true))))
        .count()
        .await;
    assert_eq!(failures, 0, "every write acknowledged");

    let status = cluster.nodes[leader].status().await.expect("leader status");
    let purged = status["purged_index"].as_u64().unwrap_or(0);
    assert!(
        purged > follower_last,
        "the leader purged the log the follower missed (follower stopped at {follower_last}): {status}"
    );

    cluster.nodes[follower].spawn();
    cluster.nodes[follower]
        .wait_ready(Duration::from_secs(60))
        .await;
    let digests = cluster.wait_converged(Duration::from_secs(60)).await;
    assert!(digests.iter().all(|d| d["keys"] == 10_000), "{digests:?}");
    assert!(
        cluster.nodes[follower].log().contains("snapshot installed"),
        "the follower caught up by snapshot"
    );
    sdk.shutdown().await;
}
