//! Whole-cluster restart, a lease with fencing across a leader failover, and membership changes
//! while serving.

use std::sync::Arc;
use std::time::Duration;

use azure_iot_operations_services::leased_lock::lease;
use azure_iot_operations_services::state_store::{self, SetOptions};
use statestore_tests::cluster::Cluster;
use statestore_tests::raw::RawClient;
use statestore_tests::sdk::{SdkClient, TIMEOUT};
use statestore_tests::sdk_helpers::assert_hlc_gt;
use statestore_tests::workload::{KeyPattern, Writer};

fn is_service_error(err: &state_store::Error, message: &str) -> bool {
    format!("{err:?}").contains(message)
}

/// Stop all three nodes (SIGTERM) and start them again: every key, version, fencing token and
/// KEYNOTIFY registration is still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn full_cluster_restart_keeps_everything() {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_ready(Duration::from_secs(30)).await;
    cluster.wait_serving_leader(Duration::from_secs(30)).await;
    let sdk = SdkClient::connect(cluster.broker.port, "restart-writer").await;
    let mut versions = Vec::new();
    for i in 0..20u32 {
        let key = format!("persist-{i}").into_bytes();
        let set = sdk
            .client
            .set(
                key.clone(),
                i.to_be_bytes().to_vec(),
                TIMEOUT,
                None,
                SetOptions::default(),
            )
            .await
            .expect("set");
        versions.push((key, set.version.expect("version")));
    }
    let token = sdk
        .client
        .set(
            b"persist-fenced".to_vec(),
            b"v".to_vec(),
            TIMEOUT,
            None,
            SetOptions::default(),
        )
        .await
        .expect("set")
        .version;
    sdk.client
        .set(
            b"persist-fenced".to_vec(),
            b"v2".to_vec(),
            TIMEOUT,
            token.clone(),
            SetOptions::default(),
        )
        .await
        .expect("fenced set");
    let mut watcher = RawClient::connect(cluster.broker.port, "restart-watcher").await;
    let notify_topic = format!(
        "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/{}/command/notify/+",
        hex::encode_upper("restart-watcher")
    );
    watcher.subscribe(&notify_topic).await;
    let reply = watcher
        .request(&statestore_tests::raw::resp(&[b"KEYNOTIFY", b"persist-0"]))
        .await
        .expect("keynotify reply");
    assert_eq!(&reply.payload[..], b"+OK\r\n");

    for node in cluster.nodes.iter_mut() {
        assert!(
            node.terminate(Duration::from_secs(20))
                .is_some_and(|s| s.success()),
            "clean exit"
        );
    }
    for node in cluster.nodes.iter_mut() {
        node.spawn();
    }
    cluster.wait_ready(Duration::from_secs(60)).await;
    cluster.wait_serving_leader(Duration::from_secs(30)).await;

    for (i, (key, version)) in versions.iter().enumerate() {
        let got = sdk
            .client
            .get(key.clone(), TIMEOUT)
            .await
            .expect("get after restart");
        assert_eq!(got.response, Some((i as u32).to_be_bytes().to_vec()));
        assert_eq!(got.version.as_ref(), Some(version), "version kept");
    }
    let unfenced = sdk
        .client
        .set(
            b"persist-fenced".to_vec(),
            b"x".to_vec(),
            TIMEOUT,
            None,
            SetOptions::default(),
        )
        .await;
    assert!(
        unfenced
            .as_ref()
            .is_err_and(|e| is_service_error(e, "MissingFencingToken")),
        "token kept: {unfenced:?}"
    );
    sdk.client
        .set(
            b"persist-0".to_vec(),
            b"after".to_vec(),
            TIMEOUT,
            None,
            SetOptions::default(),
        )
        .await
        .expect("set");
    let notification = watcher
        .next(Duration::from_secs(10))
        .await
        .expect("registration kept: notification arrives");
    assert!(
        notification
            .topic
            .ends_with(&hex::encode_upper("persist-0"))
    );
    sdk.shutdown().await;
}

/// A lease holder's fencing token keeps protecting a resource across a leader failover: the
/// holder's writes go through on the new leader, a stale token is refused, and a contender
/// only gets the lease (and a higher token) after the holder releases it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_fencing_survives_leader_failover() {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_ready(Duration::from_secs(30)).await;
    let leader = cluster.wait_serving_leader(Duration::from_secs(30)).await;
    let holder_sdk = SdkClient::connect(cluster.broker.port, "lease-holder").await;
    let contender_sdk = SdkClient::connect(cluster.broker.port, "lease-contender").await;
    let holder = lease::Client::new(
        holder_sdk.client.clone(),
        b"the-lease".to_vec(),
        b"lease-holder".to_vec(),
    )
    .expect("lease client");
    let contender = lease::Client::new(
        contender_sdk.client.clone(),
        b"the-lease".to_vec(),
        b"lease-contender".to_vec(),
    )
    .expect("lease client");

    let stale = holder
        .acquire(Duration::from_secs(30), TIMEOUT, None)
        .await
        .expect("acquire");
    let token = holder
        .acquire(Duration::from_secs(30), TIMEOUT, None)
        .await
        .expect("renew");
    assert_hlc_gt(&token, &stale, "renewal issues a newer token");
    let resource = b"protected-resource".to_vec();
    let set = |client: Arc<state_store::Client>, token: Option<_>, value: &'static [u8]| {
        let resource = resource.clone();
        async move {
            client
                .set(
                    resource,
                    value.to_vec(),
                    TIMEOUT,
                    token,
                    SetOptions::default(),
                )
                .await
        }
    };
    set(holder_sdk.client.clone(), Some(token.clone()), b"by holder")
        .await
        .expect("fenced write");

    cluster.nodes[leader].kill();
    let new_leader = cluster.wait_serving_leader(Duration::from_secs(30)).await;
    assert_ne!(new_leader, leader);

    let fresh = set(
        holder_sdk.client.clone(),
        Some(token.clone()),
        b"holder after failover",
    )
    .await;
    assert!(fresh.is_ok(), "the holder's token still works: {fresh:?}");
    let stale_write = set(contender_sdk.client.clone(), Some(stale.clone()), b"stale").await;
    assert!(
        stale_write
            .as_ref()
            .is_err_and(|e| is_service_error(e, "FencingTokenLowerVersion")),
        "{stale_write:?}"
    );
    let no_token = set(contender_sdk.client.clone(), None, b"no token").await;
    assert!(
        no_token
            .as_ref()
            .is_err_and(|e| is_service_error(e, "MissingFencingToken")),
        "{no_token:?}"
    );
    assert!(
        contender
            .acquire(Duration::from_secs(30), TIMEOUT, None)
            .await
            .is_err(),
        "the lease is held"
    );

    holder.release(TIMEOUT).await.expect("release");
    let contender_token = contender
        .acquire(Duration::from_secs(30), TIMEOUT, None)
        .await
        .expect("acquire after release");
    assert_hlc_gt(
        &contender_token,
        &token,
        "the next holder gets a higher token",
    );
    set(
        contender_sdk.client.clone(),
        Some(contender_token),
        b"by contender",
    )
    .await
    .expect("new holder writes");
    let old = set(holder_sdk.client.clone(), Some(token), b"old holder").await;
    assert!(
        old.as_ref()
            .is_err_and(|e| is_service_error(e, "FencingTokenLowerVersion")),
        "{old:?}"
    );
    let value = holder_sdk
        .client
        .get(resource.clone(), TIMEOUT)
        .await
        .expect("get")
        .response;
    assert_eq!(value.as_deref(), Some(&b"by contender"[..]));
    holder_sdk.shutdown().await;
    contender_sdk.shutdown().await;
}

/// Grow a serving cluster to four voters and shrink it back to three while a client writes:
/// the new node converges to the same digest, writes keep being acknowledged through both
/// changes, and none of them is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grow_to_four_and_shrink_back_while_serving() {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_ready(Duration::from_secs(30)).await;
    let leader = cluster.wait_serving_leader(Duration::from_secs(30)).await;
    let writer = Writer::start(
        cluster.broker.port,
        "membership-writer",
        KeyPattern::Unique,
        Duration::from_secs(2),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let follower = (leader + 1) % 3;
    let added = cluster.add_node(follower).await;
    cluster.nodes[added]
        .wait_ready(Duration::from_secs(30))
        .await;
    // Writes continue, so replicas are rarely at the same index at the same instant: check that
    // the new node catches up with what the leader had applied; digests are compared at the end.
    let target = cluster.nodes[leader].status().await.expect("status")["applied_index"]
        .as_u64()
        .unwrap_or(0);
    let new_node = &cluster.nodes[added];
    let caught_up = statestore_tests::wait_for(Duration::from_secs(30), || async {
        let applied = new_node.status().await?["applied_index"].as_u64()?;
        (applied >= target).then_some(applied)
    })
    .await;
    assert!(
        caught_up.is_some(),
        "the added node catches up to index {target}"
    );
    let status = cluster.nodes[leader].status().await.expect("status");
    assert_eq!(
        status["voters"].as_array().map(|v| v.len()),
        Some(4),
        "{status}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;

    cluster.remove_node(added, follower).await;
    cluster.nodes[added].kill();
    let status = cluster.nodes[leader].status().await.expect("status");
    assert_eq!(
        status["voters"].as_array().map(|v| v.len()),
        Some(3),
        "{status}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = writer.finish().await;
    cluster.wait_converged(Duration::from_secs(30)).await;
    assert!(
        report.acks.len() > 10,
        "writes continued: {} acks, {} failures",
        report.acks.len(),
        report.unknown_outcome.len()
    );

    let reader = SdkClient::connect(cluster.broker.port, "membership-reader").await;
    for ack in &report.acks {
        let got = reader
            .client
            .get(ack.key.clone(), TIMEOUT)
            .await
            .expect("get");
        assert_eq!(
            got.response.as_deref(),
            Some(&ack.value[..]),
            "acknowledged write lost"
        );
    }
    reader.shutdown().await;
}
