//! KEYNOTIFY notifications (protocol §7) as the official SDK receives them: SET and DELETE in
//! commit order with the write's version, from the registering client and from others, nothing
//! before KEYNOTIFY or after STOP, DELETE on expiry (§8), and registrations that survive a node
//! restart (§7 "part of the replicated state").

use std::time::Duration;

use azure_iot_operations_protocol::common::hybrid_logical_clock::HybridLogicalClock;
use azure_iot_operations_services::state_store::{
    KeyNotification, KeyObservation, Operation, SetCondition, SetOptions,
};
use rumqttc::v5::mqttbytes::QoS;
use statestore_tests::broker::Broker;
use statestore_tests::node::StatestoreNode;
use statestore_tests::raw::{RawClient, Received};
use statestore_tests::raw_helpers::start_single;
use statestore_tests::sdk::TIMEOUT;
use statestore_tests::sdk_helpers::{
    NOTIFY_DELETE, assert_hlc_gt, next_notification, notify_filter, notify_set_payload,
    notify_topic, version_of, wait_serving,
};
use statestore_tests::sdk_helpers::{ready_client as client, set_applied as set};

/// Generous bound for one notification on 2 shared CI cores.
const NOTIFY_WAIT: Duration = Duration::from_secs(10);

async fn setup() -> (Broker, StatestoreNode) {
    start_single(&[]).await
}

/// Asserts the next notification is a SET of `value` on `key` with `version`.
async fn expect_set(
    observation: &mut KeyObservation,
    key: &[u8],
    value: &[u8],
    version: &HybridLogicalClock,
    what: &str,
) {
    let n: KeyNotification = next_notification(observation, NOTIFY_WAIT, what).await;
    assert_eq!(n.key, key, "{what}: key");
    assert!(
        matches!(&n.operation, Operation::Set(v) if v == value),
        "{what}: expected SET {:?}, got {:?}",
        String::from_utf8_lossy(value),
        n.operation
    );
    assert_eq!(
        &n.version, version,
        "{what}: notification version == SET version"
    );
}

/// Asserts the next notification is a DELETE on `key` and returns its version.
async fn expect_delete(
    observation: &mut KeyObservation,
    key: &[u8],
    what: &str,
) -> HybridLogicalClock {
    let n = next_notification(observation, NOTIFY_WAIT, what).await;
    assert_eq!(n.key, key, "{what}: key");
    assert!(
        matches!(n.operation, Operation::Del),
        "{what}: expected DELETE, got {:?}",
        n.operation
    );
    n.version
}

/// The registering client gets every change it makes itself, in commit order: SET with the value
/// and the SET's version, DELETE (by DEL and by VDEL) with the deletion's version; requests that
/// change nothing (NX refused, VDEL mismatch, DEL of a missing key) notify nothing (§7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_client_changes_notify_in_order() {
    let (broker, _node) = setup().await;
    let a = client(&broker, "t30-self").await;
    let key = b"self-key";
    let mut obs = a
        .client
        .observe(key.to_vec(), TIMEOUT)
        .await
        .expect("observe")
        .response;

    let s1 = set(&a, key, b"v1").await;
    let s2 = set(&a, key, b"v2").await;
    let del = a
        .client
        .del(key.to_vec(), None, TIMEOUT)
        .await
        .expect("DEL");
    assert_eq!(del.response, 1);
    let d1 = version_of(&del, "DEL reply");
    assert_eq!(
        a.client
            .del(key.to_vec(), None, TIMEOUT)
            .await
            .expect("DEL miss")
            .response,
        0
    );
    let s3 = set(&a, key, b"v3").await;
    let refused = a
        .client
        .set(
            key.to_vec(),
            b"nx".to_vec(),
            TIMEOUT,
            None,
            SetOptions {
                set_condition: SetCondition::OnlyIfDoesNotExist,
                ..Default::default()
            },
        )
        .await
        .expect("SET NX");
    assert!(!refused.response);
    let mismatch = a
        .client
        .vdel(key.to_vec(), b"nope".to_vec(), None, TIMEOUT)
        .await
        .expect("VDEL mismatch");
    assert_eq!(mismatch.response, -1);
    let vdel = a
        .client
        .vdel(key.to_vec(), b"v3".to_vec(), None, TIMEOUT)
        .await
        .expect("VDEL match");
    assert_eq!(vdel.response, 1);
    let d2 = version_of(&vdel, "VDEL reply");
    let s4 = set(&a, key, b"sentinel").await;

    expect_set(&mut obs, key, b"v1", &s1, "1st").await;
    expect_set(&mut obs, key, b"v2", &s2, "2nd").await;
    let n = expect_delete(&mut obs, key, "3rd (DEL)").await;
    assert_eq!(n, d1, "DELETE notification version == DEL reply version");
    expect_set(&mut obs, key, b"v3", &s3, "4th").await;
    let n = expect_delete(&mut obs, key, "5th (VDEL)").await;
    assert_eq!(n, d2, "DELETE notification version == VDEL reply version");
    expect_set(
        &mut obs,
        key,
        b"sentinel",
        &s4,
        "6th (no-op requests notified nothing)",
    )
    .await;
    a.shutdown().await;
}

/// A client observing a key is notified of SET, DEL and VDEL made by another client, in order,
/// with the writer's versions (§7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_client_changes_notify_the_observer() {
    let (broker, _node) = setup().await;
    let observer = client(&broker, "t30-observer").await;
    let writer = client(&broker, "t30-writer").await;
    let key = b"shared-key";
    let mut obs = observer
        .client
        .observe(key.to_vec(), TIMEOUT)
        .await
        .expect("observe")
        .response;

    let s1 = set(&writer, key, b"w1").await;
    let del = writer
        .client
        .del(key.to_vec(), None, TIMEOUT)
        .await
        .expect("DEL");
    assert_eq!(del.response, 1);
    let s2 = set(&writer, key, b"w2").await;
    let s3 = set(&writer, key, b"w3").await;
    let vdel = writer
        .client
        .vdel(key.to_vec(), b"w3".to_vec(), None, TIMEOUT)
        .await
        .expect("VDEL");
    assert_eq!(vdel.response, 1);

    expect_set(&mut obs, key, b"w1", &s1, "SET w1").await;
    let d = expect_delete(&mut obs, key, "DEL").await;
    assert_eq!(Some(d), del.version, "DELETE version == DEL reply version");
    expect_set(&mut obs, key, b"w2", &s2, "SET w2").await;
    expect_set(&mut obs, key, b"w3", &s3, "SET w3").await;
    let d = expect_delete(&mut obs, key, "VDEL").await;
    assert_eq!(
        Some(d),
        vdel.version,
        "DELETE version == VDEL reply version"
    );
    observer.shutdown().await;
    writer.shutdown().await;
}

/// Waits for the spy's notifications on `topic` until one with `last_payload` arrives; returns
/// them all in arrival order.
async fn spy_until(spy: &mut RawClient, topic: &str, last_payload: &[u8]) -> Vec<Received> {
    let mut seen = Vec::new();
    loop {
        let msg = spy
            .next(NOTIFY_WAIT)
            .await
            .unwrap_or_else(|| panic!("spy: no notification on {topic} after {seen:?}"));
        if msg.topic != topic {
            continue;
        }
        let done = msg.payload.as_ref() == last_payload;
        seen.push(msg);
        if done {
            return seen;
        }
    }
}

/// Changes made before KEYNOTIFY and after KEYNOTIFY STOP are not notified: a raw MQTT spy on the
/// observer's notification topic sees exactly the SET made while registered and then the SET made
/// after re-registering, byte-exact, QoS 1, with `__ts` and the octet-stream content type (§7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_before_observe_and_after_unobserve_are_not_notified() {
    let (broker, _node) = setup().await;
    let a = client(&broker, "t30-window").await;
    let b = client(&broker, "t30-window-writer").await;
    let mut spy = RawClient::connect(broker.port, "t30-spy").await;
    spy.subscribe(&notify_filter(&a.client_id)).await;
    let key = b"window-key";
    let topic = notify_topic(&a.client_id, key);

    set(&a, key, b"before").await;
    let mut obs = a
        .client
        .observe(key.to_vec(), TIMEOUT)
        .await
        .expect("observe")
        .response;
    let during = set(&b, key, b"during").await;
    expect_set(&mut obs, key, b"during", &during, "while registered").await;

    let stop = a
        .client
        .unobserve(key.to_vec(), TIMEOUT)
        .await
        .expect("unobserve");
    assert!(stop.response);
    set(&b, key, b"after-stop").await;
    assert_eq!(
        b.client
            .del(key.to_vec(), None, TIMEOUT)
            .await
            .expect("DEL")
            .response,
        1
    );
    set(&a, key, b"after-stop-self").await;

    let mut obs = a
        .client
        .observe(key.to_vec(), TIMEOUT)
        .await
        .expect("observe again")
        .response;
    let sentinel = set(&b, key, b"sentinel").await;
    expect_set(
        &mut obs,
        key,
        b"sentinel",
        &sentinel,
        "first notification after re-observing",
    )
    .await;

    let seen = spy_until(&mut spy, &topic, &notify_set_payload(b"sentinel")).await;
    let payloads: Vec<String> = seen
        .iter()
        .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
        .collect();
    assert_eq!(
        payloads,
        vec![
            String::from_utf8_lossy(&notify_set_payload(b"during")).into_owned(),
            String::from_utf8_lossy(&notify_set_payload(b"sentinel")).into_owned(),
        ],
        "only changes made while registered are published"
    );
    for m in &seen {
        assert_eq!(m.qos, QoS::AtLeastOnce, "notifications are QoS 1");
        assert!(m.user_property("__ts").is_some(), "notification has __ts");
        assert!(
            matches!(
                m.properties.content_type.as_deref(),
                None | Some("application/octet-stream")
            ),
            "content type {:?}",
            m.properties.content_type
        );
    }
    assert_eq!(
        seen[1].user_property("__ts"),
        Some(sentinel.to_string().as_str()),
        "__ts is the SET's version"
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// An observed key SET with PX produces a SET and then, once it expires, a DELETE notification
/// with a later version; the key then reads as missing (§7, §8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_of_observed_key_notifies_delete() {
    let (broker, _node) = setup().await;
    let a = client(&broker, "t30-expiry").await;
    let mut spy = RawClient::connect(broker.port, "t30-expiry-spy").await;
    spy.subscribe(&notify_filter(&a.client_id)).await;
    let key = b"expiring-key";
    let mut obs = a
        .client
        .observe(key.to_vec(), TIMEOUT)
        .await
        .expect("observe")
        .response;

    let reply = a
        .client
        .set(
            key.to_vec(),
            b"short".to_vec(),
            TIMEOUT,
            None,
            SetOptions {
                expires: Some(Duration::from_millis(1000)),
                ..Default::default()
            },
        )
        .await
        .expect("SET PX");
    assert!(reply.response);
    let set_version = version_of(&reply, "SET PX");
    expect_set(&mut obs, key, b"short", &set_version, "SET PX").await;
    let n = next_notification(&mut obs, Duration::from_secs(15), "expiry DELETE").await;
    assert!(
        matches!(n.operation, Operation::Del),
        "expiry must notify DELETE, got {:?}",
        n.operation
    );
    assert_hlc_gt(&n.version, &set_version, "the expiry deletion's version");
    let seen = spy_until(&mut spy, &notify_topic(&a.client_id, key), NOTIFY_DELETE).await;
    assert_eq!(seen.len(), 2, "SET then DELETE on the wire: {seen:?}");
    assert_eq!(
        a.client
            .get(key.to_vec(), TIMEOUT)
            .await
            .expect("GET")
            .response,
        None
    );
    a.shutdown().await;
}

/// A KEYNOTIFY registration survives a node restart (SIGTERM, then start on the same data dir):
/// the SDK client keeps its broker session and, without observing again, receives the SET and
/// DELETE made after the restart, with versions greater than before the restart (§7, §3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_survives_node_restart() {
    let (broker, mut node) = setup().await;
    let observer = client(&broker, "t30-restart-observer").await;
    let writer = client(&broker, "t30-restart-writer").await;
    let key = b"restart-key";
    let mut obs = observer
        .client
        .observe(key.to_vec(), TIMEOUT)
        .await
        .expect("observe")
        .response;
    let before = set(&writer, key, b"before-restart").await;
    expect_set(&mut obs, key, b"before-restart", &before, "before restart").await;

    let status = node
        .terminate(Duration::from_secs(20))
        .expect("the node exits within 20 s of SIGTERM");
    assert!(status.success(), "clean exit on SIGTERM, got {status}");
    node.spawn();
    node.wait_ready(Duration::from_secs(30)).await;
    wait_serving(&writer.client, Duration::from_secs(30)).await;

    let after = set(&writer, key, b"after-restart").await;
    assert_hlc_gt(&after, &before, "versions keep growing across a restart");
    expect_set(&mut obs, key, b"after-restart", &after, "after restart").await;
    let del = writer
        .client
        .del(key.to_vec(), None, TIMEOUT)
        .await
        .expect("DEL after restart");
    assert_eq!(del.response, 1);
    let d = expect_delete(&mut obs, key, "DELETE after restart").await;
    assert_eq!(Some(d), del.version);
    observer.shutdown().await;
    writer.shutdown().await;
}
