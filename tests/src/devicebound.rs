//! Helpers for the device-bound black-box tests (t95): the service RPC on
//! `devicebound/v1/command/invoke` (a backend client) and a device (a raw MQTT 5 client that
//! subscribes to its delivery topic, settles and pulls).

use std::time::Duration;

use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::PublishProperties;

use crate::broker::Broker;
use crate::raw::{RawClient, Received, resp};
use crate::raw_helpers::{REPLY_WAIT, assert_envelope, props};

/// The device-bound service's request topic.
pub const DEVICEBOUND_TOPIC: &str = "devicebound/v1/command/invoke";

/// The feedback topic.
pub const FEEDBACK_TOPIC: &str = "messages/servicebound/feedback";

/// Sends `parts` (with extra user properties `user`) to the device-bound service and returns
/// the checked reply.
pub async fn dcall_with(
    client: &mut RawClient,
    what: &str,
    parts: &[&[u8]],
    user: &[(&str, &str)],
) -> Received {
    let mut p = props(client);
    for (name, value) in user {
        p.user_properties
            .push(((*name).to_owned(), (*value).to_owned()));
    }
    dcall_props(client, what, &resp(parts), p).await
}

/// Sends `payload` with `p` to the device-bound service and returns the checked reply.
pub async fn dcall_props(
    client: &mut RawClient,
    what: &str,
    payload: &[u8],
    p: PublishProperties,
) -> Received {
    let sent = p.clone();
    let reply = client
        .request_on(DEVICEBOUND_TOPIC, payload, p, REPLY_WAIT)
        .await
        .unwrap_or_else(|| panic!("{what}: no reply within {REPLY_WAIT:?}"));
    assert_envelope(what, &reply, &sent);
    reply
}

/// Sends `parts` to the device-bound service and returns the reply payload.
pub async fn dcall(client: &mut RawClient, what: &str, parts: &[&[u8]]) -> Vec<u8> {
    dcall_with(client, what, parts, &[]).await.payload.to_vec()
}

/// The QUEUE reply of `device`: (enqueued, invisible, dead-lettered, oldest or -1).
pub async fn queue(client: &mut RawClient, device: &str) -> (i64, i64, i64, i64) {
    parse_queue_reply(&dcall(client, "QUEUE", &[b"QUEUE", device.as_bytes()]).await)
}

/// Parses a QUEUE reply payload into (enqueued, invisible, dead-lettered, oldest or -1);
/// panics on any other shape.
pub fn parse_queue_reply(payload: &[u8]) -> (i64, i64, i64, i64) {
    let text = String::from_utf8(payload.to_vec()).expect("QUEUE reply is text");
    let numbers: Vec<i64> = text
        .strip_prefix("*4\r\n")
        .unwrap_or_else(|| panic!("QUEUE reply shape: {text:?}"))
        .split("\r\n")
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.strip_prefix(':')
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("QUEUE element {s:?} in {text:?}"))
        })
        .collect();
    assert_eq!(numbers.len(), 4, "QUEUE reply {text:?}");
    (numbers[0], numbers[1], numbers[2], numbers[3])
}

/// A connected device: a raw client named `id` subscribed to its delivery topic.
pub async fn device(broker: &Broker, id: &str) -> RawClient {
    let client = RawClient::connect(broker.port, id).await;
    client
        .subscribe(&format!("devices/{id}/messages/devicebound/#"))
        .await;
    client
}

/// The next delivery `device` receives within `wait`.
pub async fn next_delivery(device: &mut RawClient, wait: Duration) -> Option<Received> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let received = device.next(left).await?;
        if received.topic.contains("/messages/devicebound/") {
            return Some(received);
        }
    }
}

/// Settles `token` as `device` (`action`: complete, abandon, reject) and returns the reply
/// payload.
pub async fn settle(device: &mut RawClient, action: &str, token: &str) -> Vec<u8> {
    settle_as(device, &device.id.clone(), action, token).await
}

/// Settles `token` on the topics of `as_device` (which may not be the client's own id).
pub async fn settle_as(
    client: &mut RawClient,
    as_device: &str,
    action: &str,
    token: &str,
) -> Vec<u8> {
    let p = props(client);
    let topic = format!("devices/{as_device}/messages/settle/{action}/{token}");
    client
        .request_on(&topic, b"", p, REPLY_WAIT)
        .await
        .unwrap_or_else(|| panic!("settle {action} {token}: no reply"))
        .payload
        .to_vec()
}

/// Publishes `payload` on `topic` at QoS 1 without properties.
pub async fn publish_plain(client: &RawClient, topic: &str, payload: &[u8]) {
    client
        .publish(
            topic,
            QoS::AtLeastOnce,
            Bytes::copy_from_slice(payload),
            PublishProperties::default(),
        )
        .await;
}

/// How long one attempt of a retried request waits for its reply before it is sent again.
pub const RETRY_ATTEMPT_WAIT: Duration = Duration::from_secs(1);

/// Sends `payload` with `p` to the device-bound service until a reply comes, publishing the
/// very same request (same correlation data) again every [`RETRY_ATTEMPT_WAIT`]: across a
/// leader change a request may reach no node, or a node that dies before answering; the
/// retry takes effect once (protocol §6). Panics after `within`. Returns the checked reply and
/// how many attempts it took.
pub async fn dcall_retry(
    client: &mut RawClient,
    what: &str,
    payload: &[u8],
    p: PublishProperties,
    within: Duration,
) -> (Received, usize) {
    let deadline = tokio::time::Instant::now() + within;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let sent = p.clone();
        if let Some(reply) = client
            .request_on(DEVICEBOUND_TOPIC, payload, p.clone(), RETRY_ATTEMPT_WAIT)
            .await
        {
            assert_envelope(what, &reply, &sent);
            return (reply, attempts);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: no reply within {within:?} ({attempts} attempts)"
        );
    }
}

/// Settles `token` as `device` like [`settle`], but publishes the same settlement (same
/// correlation data) again every [`RETRY_ATTEMPT_WAIT`] until a reply comes; panics after
/// `within`. Returns the reply payload and how many attempts it took.
pub async fn settle_retry(
    device: &mut RawClient,
    action: &str,
    token: &str,
    within: Duration,
) -> (Vec<u8>, usize) {
    let p = props(device);
    let topic = format!("devices/{}/messages/settle/{action}/{token}", device.id);
    let deadline = tokio::time::Instant::now() + within;
    let mut attempts = 0;
    loop {
        attempts += 1;
        if let Some(reply) = device
            .request_on(&topic, b"", p.clone(), RETRY_ATTEMPT_WAIT)
            .await
        {
            return (reply.payload.to_vec(), attempts);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "settle {action} {token}: no reply within {within:?}"
        );
    }
}

/// Waits until QUEUE of `device` equals `expected` (enqueued, invisible, dead-lettered);
/// panics with the last answer after `within`.
pub async fn wait_queue_within(
    backend: &mut RawClient,
    device: &str,
    expected: (i64, i64, i64),
    within: Duration,
) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let (e, i, d, _) = queue(backend, device).await;
        if (e, i, d) == expected {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "QUEUE {device}: ({e}, {i}, {d}), expected {expected:?} within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The lock token (`$.lt`) of a delivery or feedback batch.
pub fn lock_token(message: &Received) -> String {
    message
        .user_property("$.lt")
        .unwrap_or_else(|| panic!("no $.lt: {message:?}"))
        .to_owned()
}

/// One feedback batch as received on [`FEEDBACK_TOPIC`].
#[derive(Debug, Clone)]
pub struct FeedbackBatch {
    /// Its lock token (`$.lt`).
    pub token: String,
    /// `iothub-enqueuedtime`: when the batch was cut, ms since the epoch.
    pub cut_ms: i64,
    /// The records.
    pub records: Vec<serde_json::Value>,
    /// When the test received it.
    pub received: tokio::time::Instant,
}

/// The next feedback batch `backend` (subscribed to [`FEEDBACK_TOPIC`]) receives within
/// `wait`; other messages are skipped.
pub async fn next_feedback(backend: &mut RawClient, wait: Duration) -> Option<FeedbackBatch> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let message = backend.next(left).await?;
        if message.topic != FEEDBACK_TOPIC {
            continue;
        }
        let enqueued = message
            .user_property("iothub-enqueuedtime")
            .unwrap_or_else(|| panic!("feedback without iothub-enqueuedtime: {message:?}"));
        let cut_ms = iso_ms(enqueued).unwrap_or_else(|| panic!("iothub-enqueuedtime {enqueued}"));
        let records = serde_json::from_slice(&message.payload).unwrap_or_else(|e| {
            panic!(
                "feedback body is not a JSON array ({e}): {}",
                String::from_utf8_lossy(&message.payload)
            )
        });
        return Some(FeedbackBatch {
            token: lock_token(&message),
            cut_ms,
            records,
            received: tokio::time::Instant::now(),
        });
    }
}

/// Feedback records received within `wait` until `done` says the records so far suffice;
/// panics with what came when the time runs out. Returns every batch received.
pub async fn feedback_until(
    backend: &mut RawClient,
    wait: Duration,
    done: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<FeedbackBatch> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut batches: Vec<FeedbackBatch> = Vec::new();
    loop {
        let records: Vec<serde_json::Value> =
            batches.iter().flat_map(|b| b.records.clone()).collect();
        if done(&records) {
            return batches;
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match next_feedback(backend, left).await {
            Some(batch) => batches.push(batch),
            None => panic!("feedback within {wait:?}: only {records:?}"),
        }
    }
}

/// Milliseconds since the epoch of an ISO 8601 UTC time `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn iso_ms(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() != 24 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[19] != b'.' {
        return None;
    }
    if b[13] != b':' || b[16] != b':' || b[23] != b'Z' {
        return None;
    }
    let n = |from: usize, to: usize| text.get(from..to)?.parse::<i64>().ok();
    let (year, month, day) = (n(0, 4)?, n(5, 7)?, n(8, 10)?);
    let (hour, minute, second, milli) = (n(11, 13)?, n(14, 16)?, n(17, 19)?, n(20, 23)?);
    // Days from the civil date (H. Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((((days * 24 + hour) * 60 + minute) * 60 + second) * 1_000 + milli)
}
