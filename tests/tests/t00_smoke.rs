//! Smoke: one node behind a real Mosquitto answers the official SDK client.

use std::time::Duration;

use azure_iot_operations_services::state_store::SetOptions;
use statestore_tests::broker::Broker;
use statestore_tests::node::{NodeSpec, StatestoreNode};
use statestore_tests::sdk::{SdkClient, TIMEOUT};

/// A SET through the SDK is readable with GET, with the same version.
#[tokio::test]
async fn sdk_set_then_get_round_trips() {
    let broker = Broker::start();
    let node = StatestoreNode::start(&broker, NodeSpec::default());
    node.wait_ready(Duration::from_secs(30)).await;
    let sdk = SdkClient::connect(broker.port, "smoke-client").await;
    let set = sdk
        .client
        .set(
            b"k".to_vec(),
            b"v".to_vec(),
            TIMEOUT,
            None,
            SetOptions::default(),
        )
        .await
        .expect("set");
    assert!(set.response);
    let get = sdk.client.get(b"k".to_vec(), TIMEOUT).await.expect("get");
    assert_eq!(get.response, Some(b"v".to_vec()));
    assert_eq!(get.version, set.version);
    sdk.shutdown().await;
}
