//! The backend side of the `devicebound` benchmark: the device ids (`bench-dev-0001`), the
//! message ids and bodies that tell a device what it received (the phase that sent it, a
//! sequence number, the scheduled send instant), the SEND request of devicebound.md §2 on
//! `devicebound/v1/command/invoke`, and [`DeviceSender`], the [`Requester`] through which the
//! closed-loop driver sends SENDs instead of state store requests.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;

use crate::driver::{Outcome, Requester};
use crate::mqtt_load::Connection;
use crate::resp::{self, Expect};
use crate::workload::{self, Op};

/// The device-bound service's request topic (devicebound.md §2).
pub const DEVICEBOUND_TOPIC: &str = "devicebound/v1/command/invoke";

/// How a refused SEND to a full queue is counted (the reply `-ERR device queue is full`, as
/// [`resp::describe`] renders it).
pub const QUEUE_FULL: &str = "-ERR device queue is full";

/// Bytes of a body taken by the send stamp.
pub const STAMP_BYTES: usize = 8;

/// The ids of `count` devices: `{prefix}-0001` .. (at least four digits, 1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceIds {
    ids: Vec<String>,
}

impl DeviceIds {
    /// `{prefix}-{n}` for n in 1..=count, zero-padded to the width of `count` (at least 4).
    pub fn new(prefix: &str, count: usize) -> DeviceIds {
        let width = count.to_string().len().max(4);
        DeviceIds {
            ids: (1..=count)
                .map(|n| format!("{prefix}-{n:0width$}"))
                .collect(),
        }
    }

    /// The id of device `index` (0-based); indices wrap around.
    pub fn get(&self, index: usize) -> &str {
        match self.ids.len() {
            0 => "",
            n => &self.ids[index % n],
        }
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True without devices.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// Which phase sent a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The closed-loop SEND throughput phase.
    Closed,
    /// The open-loop send-to-delivery latency phase (the body carries the send instant).
    Open,
    /// The drain (sequence numbers are per device, 0-based).
    Drain,
}

impl Kind {
    fn letter(self) -> char {
        match self {
            Kind::Closed => 'c',
            Kind::Open => 'o',
            Kind::Drain => 'd',
        }
    }
}

/// A message id as the benchmark writes it: `c:17`, `o:4242`, `d:49`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageId {
    /// The phase.
    pub kind: Kind,
    /// The sequence number.
    pub seq: u64,
}

impl MessageId {
    /// The text sent as the SEND's message id.
    pub fn text(&self) -> String {
        format!("{}:{}", self.kind.letter(), self.seq)
    }

    /// Reads a message id written by [`MessageId::text`]; `None` for anything else.
    pub fn parse(text: &str) -> Option<MessageId> {
        let (letter, seq) = text.split_once(':')?;
        let kind = match letter {
            "c" => Kind::Closed,
            "o" => Kind::Open,
            "d" => Kind::Drain,
            _ => return None,
        };
        if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(MessageId {
            kind,
            seq: seq.parse().ok()?,
        })
    }
}

/// A body of `size` bytes (at least [`STAMP_BYTES`]) starting with `offset` in nanoseconds,
/// big-endian: the send instant as an offset from an origin the devices share (same process,
/// same monotonic clock).
pub fn stamped_body(offset: Duration, size: usize) -> Vec<u8> {
    let nanos = u64::try_from(offset.as_nanos()).unwrap_or(u64::MAX);
    let mut body = nanos.to_be_bytes().to_vec();
    body.extend(workload::value(size.saturating_sub(STAMP_BYTES)));
    body
}

/// The offset a body made by [`stamped_body`] carries.
pub fn body_stamp(body: &[u8]) -> Option<Duration> {
    let stamp: [u8; STAMP_BYTES] = body.get(..STAMP_BYTES)?.try_into().ok()?;
    Some(Duration::from_nanos(u64::from_be_bytes(stamp)))
}

/// `SEND device messageId body` as a RESP3 array.
pub fn send_payload(device: &str, message_id: &str, body: &[u8]) -> Vec<u8> {
    resp::encode(&[b"SEND", device.as_bytes(), message_id.as_bytes(), body])
}

/// Sends one message to `device` through `connection` and waits for `+OK`.
pub async fn send(connection: &Connection, device: &str, id: MessageId, body: &[u8]) -> Outcome {
    let payload = send_payload(device, &id.text(), body);
    connection
        .call(DEVICEBOUND_TOPIC, payload, Expect::PlusOk)
        .await
}

/// As [`send`], publishing the same SEND again (same correlation data, so it takes effect
/// once) while it goes unanswered, up to `attempts` publishes; also returns the publishes made.
pub async fn send_retrying(
    connection: &Connection,
    device: &str,
    id: MessageId,
    body: &[u8],
    attempts: usize,
) -> (Outcome, usize) {
    let payload = send_payload(device, &id.text(), body);
    connection
        .call_retrying(DEVICEBOUND_TOPIC, payload, Expect::PlusOk, attempts)
        .await
}

/// A backend connection driven by the closed-loop driver: the driver's key number `n` (from
/// `0..devices`) becomes a SEND to device `n`, with the driver's value as the body.
pub struct DeviceSender {
    connection: Connection,
    devices: Arc<DeviceIds>,
    /// Sequence numbers of this sender start at `index << 40` (unique across senders).
    next: AtomicU64,
}

impl DeviceSender {
    /// Sender number `index` over `connection`.
    pub fn new(index: usize, connection: Connection, devices: Arc<DeviceIds>) -> DeviceSender {
        DeviceSender {
            connection,
            devices,
            next: AtomicU64::new((index as u64) << 40),
        }
    }
}

impl Requester for DeviceSender {
    async fn request(&self, _: Op, key: &[u8], value: &Bytes) -> Outcome {
        let Some(n) = workload::key_index(key) else {
            return Outcome::Error("not a benchmark key".to_owned());
        };
        let index = usize::try_from(n).unwrap_or_default();
        let id = MessageId {
            kind: Kind::Closed,
            seq: self.next.fetch_add(1, Ordering::Relaxed),
        };
        send(&self.connection, self.devices.get(index), id, value).await
    }

    async fn close(&self) {
        self.connection.disconnect().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_ids_are_padded_and_one_based() {
        let ids = DeviceIds::new("bench-dev", 1000);
        assert_eq!(ids.len(), 1000);
        assert_eq!(ids.get(0), "bench-dev-0001");
        assert_eq!(ids.get(999), "bench-dev-1000");
        assert_eq!(ids.get(1000), "bench-dev-0001", "wraps around");
        assert_eq!(DeviceIds::new("d", 12_345).get(0), "d-00001");
        assert_eq!(DeviceIds::new("d", 0).get(3), "");
    }

    #[test]
    fn message_ids_round_trip() {
        for (text, parsed) in [
            (
                "c:17",
                Some(MessageId {
                    kind: Kind::Closed,
                    seq: 17,
                }),
            ),
            (
                "o:0",
                Some(MessageId {
                    kind: Kind::Open,
                    seq: 0,
                }),
            ),
            (
                "d:49",
                Some(MessageId {
                    kind: Kind::Drain,
                    seq: 49,
                }),
            ),
            ("x:1", None),
            ("d:", None),
            ("d:-1", None),
            ("d:1a", None),
            ("d49", None),
            ("", None),
        ] {
            assert_eq!(MessageId::parse(text), parsed, "{text}");
            if let Some(id) = parsed {
                assert_eq!(id.text(), text);
            }
        }
    }

    #[test]
    fn stamps_survive_the_body() {
        let offset = Duration::from_nanos(123_456_789_012);
        let body = stamped_body(offset, 64);
        assert_eq!(body.len(), 64);
        assert_eq!(body_stamp(&body), Some(offset));
        assert_eq!(stamped_body(offset, 2).len(), STAMP_BYTES, "never shorter");
        assert_eq!(body_stamp(b"short"), None);
    }

    #[test]
    fn send_is_a_resp3_array() {
        assert_eq!(
            send_payload("dev1", "m1", b"hello"),
            b"*4\r\n$4\r\nSEND\r\n$4\r\ndev1\r\n$2\r\nm1\r\n$5\r\nhello\r\n"
        );
    }
}
