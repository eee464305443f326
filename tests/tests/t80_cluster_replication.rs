//! Three nodes replicate everything written through the official SDK; exactly one node holds
//! the request subscription.

use std::time::Duration;

use azure_iot_operations_services::state_store::SetOptions;
use statestore_tests::cluster::Cluster;
use statestore_tests::sdk::{SdkClient, TIMEOUT};

/// Writes through the SDK land on all three nodes: same applied index, same keyspace digest,
/// same key count; `request_subscription_active` sums to 1 over the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_writes_reach_every_replica_with_identical_digests() {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_ready(Duration::from_secs(30)).await;
    cluster.wait_serving_leader(Duration::from_secs(30)).await;
    assert_eq!(cluster.subscription_holders().await, 1.0);

    let sdk = SdkClient::connect(cluster.broker.port, "replication-writer").await;
    for i in 0..100u32 {
        let key = format!("key-{i:03}").into_bytes();
        let response = sdk
            .client
            .set(
                key,
                i.to_be_bytes().to_vec(),
                TIMEOUT,
                None,
                SetOptions::default(),
            )
            .await
            .expect("set");
        assert!(response.response);
    }
    for i in 0..10u32 {
        let key = format!("key-{i:03}").into_bytes();
        assert_eq!(
            sdk.client
                .del(key, None, TIMEOUT)
                .await
                .expect("del")
                .response,
            1
        );
    }
    let digests = cluster.wait_converged(Duration::from_secs(20)).await;
    for digest in &digests {
        assert_eq!(digest["keys"], 90, "{digest}");
    }
    assert_eq!(cluster.subscription_holders().await, 1.0);
    sdk.shutdown().await;
}
