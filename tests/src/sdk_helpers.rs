//! Helpers for the SDK-driven tests (t10..t40): HLC ordering, service-error matching,
//! bounded notification receipt, the byte-exact notification payloads of protocol §7, and
//! waiting until a (re)started node really answers SDK requests.

use std::cmp::Ordering;
use std::fmt::Debug;
use std::time::{Duration, UNIX_EPOCH};

use azure_iot_operations_protocol::common::hybrid_logical_clock::HybridLogicalClock;
use azure_iot_operations_services::state_store::{
    self, ErrorKind, KeyNotification, KeyObservation, Response, ServiceError,
};

/// The notification topic prefix (§7); the client's hex id and `command/notify/{HEX(key)}` follow.
pub const NOTIFY_PREFIX: &str = "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8";

/// The byte-exact DELETE notification payload (§7).
pub const NOTIFY_DELETE: &[u8] = b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n";

/// The byte-exact SET notification payload for `value` (§7).
pub fn notify_set_payload(value: &[u8]) -> Vec<u8> {
    let mut out = b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n".to_vec();
    out.extend_from_slice(format!("${}\r\n", value.len()).as_bytes());
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
    out
}

/// The topic the store publishes notifications for `key` to, for `client_id` (§7).
pub fn notify_topic(client_id: &str, key: &[u8]) -> String {
    format!(
        "{NOTIFY_PREFIX}/{}/command/notify/{}",
        hex::encode_upper(client_id.as_bytes()),
        hex::encode_upper(key)
    )
}

/// A filter matching every notification for `client_id` (what the SDK subscribes to).
pub fn notify_filter(client_id: &str) -> String {
    format!(
        "{NOTIFY_PREFIX}/{}/command/notify/+",
        hex::encode_upper(client_id.as_bytes())
    )
}

/// HLC ordering of §3: (ms, counter), then node id as a string.
pub fn hlc_cmp(a: &HybridLogicalClock, b: &HybridLogicalClock) -> Ordering {
    let ms = |h: &HybridLogicalClock| {
        h.timestamp
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    };
    (ms(a), a.counter, a.node_id.as_str()).cmp(&(ms(b), b.counter, b.node_id.as_str()))
}

/// Asserts `later` is strictly greater than `earlier` in HLC order.
pub fn assert_hlc_gt(later: &HybridLogicalClock, earlier: &HybridLogicalClock, what: &str) {
    assert_eq!(
        hlc_cmp(later, earlier),
        Ordering::Greater,
        "{what}: expected {later} > {earlier}"
    );
}

/// The version of a response, which must be present.
pub fn version_of<T: Debug>(response: &Response<T>, what: &str) -> HybridLogicalClock {
    response
        .version
        .clone()
        .unwrap_or_else(|| panic!("{what}: reply carried no __ts version: {response:?}"))
}

/// Asserts `result` failed with a state-store service error accepted by `expected`.
pub fn assert_service_error<T: Debug>(
    result: Result<Response<T>, state_store::Error>,
    expected: fn(&ServiceError) -> bool,
    what: &str,
) {
    match result {
        Ok(response) => panic!("{what}: expected a service error, got success {response:?}"),
        Err(err) => match err.kind() {
            ErrorKind::ServiceError(service) if expected(service) => {}
            other => panic!("{what}: wrong error kind {other:?}"),
        },
    }
}

/// The next notification on `observation` within `wait`; panics on timeout or a closed channel.
pub async fn next_notification(
    observation: &mut KeyObservation,
    wait: Duration,
    what: &str,
) -> KeyNotification {
    match tokio::time::timeout(wait, observation.recv_notification()).await {
        Ok(Some((notification, _ack))) => notification,
        Ok(None) => panic!("{what}: the SDK closed the observation channel"),
        Err(_) => panic!("{what}: no notification within {wait:?}"),
    }
}

/// Waits until a GET through `client` is answered (the node is up, leader, subscribed); a
/// request lost while the node was not yet subscribed is simply retried.
pub async fn wait_serving(client: &state_store::Client, timeout: Duration) {
    let served = crate::wait_for(timeout, || async {
        client
            .get(b"__probe__".to_vec(), Duration::from_secs(2))
            .await
            .ok()
            .map(|_| ())
    })
    .await;
    assert!(
        served.is_some(),
        "node did not answer an SDK GET within {timeout:?}"
    );
}

/// Connects an SDK client and waits until the node answers it.
pub async fn ready_client(broker: &crate::broker::Broker, id: &str) -> crate::sdk::SdkClient {
    let sdk = crate::sdk::SdkClient::connect(broker.port, id).await;
    wait_serving(&sdk.client, Duration::from_secs(30)).await;
    sdk
}

/// SETs `value` on `key` without options, asserting it applied; returns its version.
pub async fn set_applied(
    sdk: &crate::sdk::SdkClient,
    key: &[u8],
    value: &[u8],
) -> HybridLogicalClock {
    let reply = sdk
        .client
        .set(
            key.to_vec(),
            value.to_vec(),
            crate::sdk::TIMEOUT,
            None,
            state_store::SetOptions::default(),
        )
        .await
        .expect("SET is answered");
    assert!(reply.response, "SET applies");
    version_of(&reply, "SET reply")
}
