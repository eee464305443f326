//! SCAN through the SDK's `list_keys` pager (1.5.0-beta1) against a 3-node cluster: every
//! matching key exactly once over several pages; a page that fails during a leader failover is
//! retried with the same token and the scan completes; keys written and deleted during a scan
//! never make a stable key appear twice or go missing.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use azure_iot_operations_services::state_store::{self, SetOptions};
use statestore_harness::cluster::Cluster;
use statestore_harness::wait_for;
use statestore_sdk_next_tests::sdk::{SdkClient, TIMEOUT};

/// Keys in the scanned namespace: more than two default pages (1,000 keys each).
const SCANNED: usize = 2_300;

fn scanned_key(n: usize) -> Vec<u8> {
    format!("scan:{n:05}").into_bytes()
}

async fn set(client: &state_store::Client, key: Vec<u8>) {
    let reply = client
        .set(key, b"v".to_vec(), TIMEOUT, None, SetOptions::default())
        .await
        .expect("SET answered");
    assert!(reply.response, "plain SET applies");
}

/// Writes `keys` with 32 requests in flight.
async fn set_all(client: &Arc<state_store::Client>, keys: Vec<Vec<u8>>) {
    let mut writers = Vec::new();
    for chunk in keys.chunks(keys.len().div_ceil(32)) {
        let client = client.clone();
        let chunk = chunk.to_vec();
        writers.push(tokio::spawn(async move {
            for key in chunk {
                set(&client, key).await;
            }
        }));
    }
    for writer in writers {
        writer.await.expect("writer task");
    }
}

/// A cluster serving, with an SDK client that got an answer.
async fn serving_cluster(client_id: &str) -> (Cluster, SdkClient) {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_ready(Duration::from_secs(60)).await;
    cluster.wait_serving_leader(Duration::from_secs(60)).await;
    let sdk = SdkClient::connect(cluster.broker.port, client_id).await;
    let answered = wait_for(Duration::from_secs(30), || async {
        sdk.client
            .get(b"probe".to_vec(), Duration::from_secs(2))
            .await
            .ok()
    })
    .await;
    assert!(answered.is_some(), "the cluster answers the SDK");
    (cluster, sdk)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_keys_pages_through_every_match_once_and_survives_a_failover() {
    let (mut cluster, sdk) = serving_cluster("sdk-next-scan").await;
    let expected: BTreeSet<Vec<u8>> = (0..SCANNED).map(scanned_key).collect();
    let mut keys: Vec<Vec<u8>> = expected.iter().cloned().collect();
    // Keys the pattern must leave out: another prefix, and a non-UTF-8 key (never returned).
    keys.extend((0..50).map(|n| format!("other:{n}").into_bytes()));
    keys.push(b"scan:\xff\xfe".to_vec());
    set_all(&sdk.client, keys).await;

    // A whole scan, nothing changing.
    let mut pager = sdk
        .client
        .list_keys(b"scan:*".to_vec(), TIMEOUT)
        .expect("pager");
    let mut seen = Vec::new();
    let mut pages = 0;
    while let Some(page) = pager.next().await.expect("a page") {
        pages += 1;
        seen.extend(page);
    }
    assert!(pages >= 3, "{SCANNED} keys come in bounded pages: {pages}");
    let unique: BTreeSet<Vec<u8>> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "no key twice");
    assert_eq!(unique, expected, "exactly the matching UTF-8 keys");

    // A scan across a leader failover: the first page from the old leader, then the leader
    // is killed; the pager keeps its token after a failed page, so retrying `next` resumes.
    let mut pager = sdk
        .client
        .list_keys(b"scan:0[0-1]*".to_vec(), Duration::from_secs(3))
        .expect("pager");
    let mut seen = pager
        .next()
        .await
        .expect("first page")
        .expect("not done after one page");
    let leader = cluster
        .serving_leader()
        .await
        .expect("a leader served the first page");
    cluster.nodes[leader].kill();
    let mut failed_pages = 0;
    loop {
        match pager.next().await {
            Ok(Some(page)) => seen.extend(page),
            Ok(None) => break,
            Err(_) => {
                // Same token next time; a new leader takes a few seconds.
                failed_pages += 1;
                assert!(failed_pages < 30, "a new leader serves the scan");
            }
        }
    }
    let expected_prefix: BTreeSet<Vec<u8>> = (0..2_000).map(scanned_key).collect();
    let unique: BTreeSet<Vec<u8>> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "no key twice across the failover");
    assert_eq!(unique, expected_prefix);
    sdk.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_present_for_the_whole_scan_come_exactly_once_while_others_change() {
    let (_cluster, sdk) = serving_cluster("sdk-next-churn").await;
    let stable: BTreeSet<Vec<u8>> = (0..SCANNED).step_by(2).map(scanned_key).collect();
    set_all(&sdk.client, stable.iter().cloned().collect()).await;
    let churning: Vec<Vec<u8>> = (1..SCANNED).step_by(2).map(scanned_key).collect();
    set_all(&sdk.client, churning.clone()).await;

    let mut pager = sdk
        .client
        .list_keys(b"scan:*".to_vec(), TIMEOUT)
        .expect("pager");
    let mut seen = Vec::new();
    let mut round = 0usize;
    while let Some(page) = pager.next().await.expect("a page") {
        seen.extend(page);
        // Between pages, delete and re-create odd keys all over the key range.
        for key in churning.iter().skip(round % 7).step_by(7) {
            sdk.client
                .del(key.clone(), None, TIMEOUT)
                .await
                .expect("DEL answered");
        }
        for key in churning.iter().skip((round + 3) % 7).step_by(11) {
            set(&sdk.client, key.clone()).await;
        }
        round += 1;
    }
    assert!(round >= 2, "the scan took several pages: {round}");
    let unique: BTreeSet<Vec<u8>> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "no key twice");
    let missing: Vec<String> = stable
        .difference(&unique)
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert!(missing.is_empty(), "stable keys missed: {missing:?}");
    assert!(
        unique.iter().all(|k| k.starts_with(b"scan:")),
        "only matching keys"
    );
    sdk.shutdown().await;
}
