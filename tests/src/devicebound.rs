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
    let payload = dcall(client, "QUEUE", &[b"QUEUE", device.as_bytes()]).await;
    let text = String::from_utf8(payload).expect("QUEUE reply is text");
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
