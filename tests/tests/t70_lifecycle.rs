//! Node lifecycle against a real broker: it reconnects (and takes the request subscription
//! back) when the broker goes away, and it shuts down cleanly on SIGTERM.

use std::time::Duration;

use statestore_tests::broker::Broker;
use statestore_tests::node::{NodeSpec, StatestoreNode};
use statestore_tests::raw::{RawClient, resp};
use statestore_tests::wait_for;

/// After the broker restarts, the node reconnects with backoff, re-subscribes to the request
/// topic and answers requests again; data written before the outage is still there.
#[tokio::test]
async fn node_reconnects_after_the_broker_restarts() {
    let mut broker = Broker::start();
    let node = StatestoreNode::start(&broker, NodeSpec::default());
    node.wait_ready(Duration::from_secs(30)).await;
    let mut client = RawClient::connect(broker.port, "reconnect-client").await;
    let reply = client
        .request(&resp(&[b"SET", b"k", b"before"]))
        .await
        .expect("reply before the outage");
    assert_eq!(&reply.payload[..], b"+OK\r\n");
    drop(client);

    broker.kill();
    let lost = wait_for(Duration::from_secs(10), || async {
        (!node.is_ready().await).then_some(())
    })
    .await;
    assert!(
        lost.is_some(),
        "readiness must drop while the broker is gone"
    );
    assert_eq!(
        node.metric("statestore_mqtt_request_subscription_active")
            .await,
        Some(0.0)
    );

    broker.restart();
    node.wait_ready(Duration::from_secs(30)).await;
    assert_eq!(
        node.metric("statestore_mqtt_request_subscription_active")
            .await,
        Some(1.0)
    );
    let mut client = RawClient::connect(broker.port, "reconnect-client-2").await;
    let reply = client
        .request(&resp(&[b"GET", b"k"]))
        .await
        .expect("reply after the outage");
    assert_eq!(&reply.payload[..], b"$6\r\nbefore\r\n");
    let reconnects = node
        .metric("statestore_mqtt_connects_total{result=\"success\"}")
        .await
        .expect("metric");
    assert!(reconnects >= 2.0, "connected twice, got {reconnects}");
}

/// SIGTERM: the node releases the request subscription, exits with status 0 within the grace
/// period, and everything it acknowledged is there after a restart.
#[tokio::test]
async fn sigterm_shuts_down_cleanly_and_keeps_acknowledged_writes() {
    let broker = Broker::start();
    let mut node = StatestoreNode::start(&broker, NodeSpec::default());
    node.wait_ready(Duration::from_secs(30)).await;
    let mut client = RawClient::connect(broker.port, "shutdown-client").await;
    for i in 0..50u32 {
        let key = format!("key-{i}");
        let reply = client
            .request(&resp(&[b"SET", key.as_bytes(), &i.to_be_bytes()]))
            .await
            .expect("reply");
        assert_eq!(&reply.payload[..], b"+OK\r\n");
    }
    let status = node
        .terminate(Duration::from_secs(15))
        .expect("exits within the grace period");
    assert!(
        status.success(),
        "exit status {status:?}; log:\n{}",
        node.log_tail(30)
    );
    assert!(
        node.log().contains("released the request subscription") || node.log().contains("stopped")
    );

    node.spawn();
    node.wait_ready(Duration::from_secs(30)).await;
    for i in 0..50u32 {
        let key = format!("key-{i}");
        let reply = client
            .request(&resp(&[b"GET", key.as_bytes()]))
            .await
            .expect("reply");
        let mut expected = b"$4\r\n".to_vec();
        expected.extend_from_slice(&i.to_be_bytes());
        expected.extend_from_slice(b"\r\n");
        assert_eq!(&reply.payload[..], &expected[..], "{key}");
    }
}
