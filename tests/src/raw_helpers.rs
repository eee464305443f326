//! Helpers for the raw wire-level tests (t50, t60): node start-up, request properties,
//! reply envelope checks (§1.2), HLC parsing (§3), "no reply within a bounded time" checks
//! paired with positive controls, and a tiny seeded RNG for garbage payloads.

use std::time::Duration;

use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::PublishProperties;

use crate::broker::Broker;
use crate::node::{NodeSpec, StatestoreNode};
use crate::raw::{REQUEST_TOPIC, RawClient, Received, resp};

/// The service id segment used in every topic.
pub const SERVICE_ID: &str = "FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8";

/// Prefix of every notification topic (and forbidden as a response topic, §1).
pub const NOTIFY_PREFIX: &str = "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8";

/// How long a "no reply" check waits.
pub const NO_REPLY_WAIT: Duration = Duration::from_millis(1500);

/// How long a reply may take before a test gives up.
pub const REPLY_WAIT: Duration = Duration::from_secs(10);

/// Starts a broker and one node with `extra_args`, waits until the node is ready.
pub async fn start_single(extra_args: &[&str]) -> (Broker, StatestoreNode) {
    let broker = Broker::start();
    let node = StatestoreNode::start(
        &broker,
        NodeSpec {
            extra_args: extra_args.iter().map(|s| (*s).to_owned()).collect(),
            ..NodeSpec::default()
        },
    );
    node.wait_ready(Duration::from_secs(30)).await;
    (broker, node)
}

/// Upper-case base16 of `bytes` (RFC 4648).
pub fn hex_upper(bytes: &[u8]) -> String {
    hex::encode_upper(bytes)
}

/// An HLC string `{ms:015}:{counter:05}:{node}`.
pub fn hlc(ms: u64, counter: u32, node: &str) -> String {
    format!("{ms:015}:{counter:05}:{node}")
}

/// An HLC of "now" from a foreign node.
pub fn hlc_now(node: &str) -> String {
    hlc(crate::now_ms(), 0, node)
}

/// A parsed HLC (§3): (ms, counter, node id). `None` unless exactly three fields, numeric
/// ms and counter, and a non-empty node id.
pub fn parse_hlc(text: &str) -> Option<(u64, u32, String)> {
    let mut fields = text.split(':');
    let ms = fields.next()?.parse().ok()?;
    let counter = fields.next()?.parse().ok()?;
    let node = fields.next()?.to_owned();
    if fields.next().is_some() || node.is_empty() {
        return None;
    }
    Some((ms, counter, node))
}

/// Response topic shapes of §1 / reference §1.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `clients/{id}/services/statestore/v1/.../command/invoke/response`
    Rust,
    /// `clients/{HEXUPPER(id)}/statestore/v1/.../command/invoke/response`
    Go,
    /// `clients/{id}/statestore/v1/.../command/invoke`
    DotNet,
}

impl Shape {
    /// All three.
    pub const ALL: [Shape; 3] = [Shape::Rust, Shape::Go, Shape::DotNet];

    /// The response topic this SDK uses for client `id`.
    pub fn topic(self, id: &str) -> String {
        match self {
            Shape::Rust => {
                format!("clients/{id}/services/statestore/v1/{SERVICE_ID}/command/invoke/response")
            }
            Shape::Go => format!(
                "clients/{}/statestore/v1/{SERVICE_ID}/command/invoke/response",
                hex_upper(id.as_bytes())
            ),
            Shape::DotNet => format!("clients/{id}/statestore/v1/{SERVICE_ID}/command/invoke"),
        }
    }
}

/// Connects a raw client; for the Go shape also subscribes to `clients/{HEX(id)}/#`.
pub async fn connect(broker: &Broker, id: &str) -> RawClient {
    let client = RawClient::connect(broker.port, id).await;
    client
        .subscribe(&format!("clients/{}/#", hex_upper(id.as_bytes())))
        .await;
    client
}

/// Well-formed request properties with a fresh correlation and `response_topic`.
pub fn props_on(client: &mut RawClient, response_topic: &str) -> PublishProperties {
    let correlation = client.correlation();
    let mut props = client.request_properties(correlation);
    props.response_topic = Some(response_topic.to_owned());
    props
}

/// Well-formed request properties (Rust shape) with a fresh correlation.
pub fn props(client: &mut RawClient) -> PublishProperties {
    let correlation = client.correlation();
    client.request_properties(correlation)
}

/// Sets (replaces) user property `name`.
pub fn set_user(props: &mut PublishProperties, name: &str, value: &str) {
    remove_user(props, name);
    props
        .user_properties
        .push((name.to_owned(), value.to_owned()));
}

/// Removes user property `name`.
pub fn remove_user(props: &mut PublishProperties, name: &str) {
    props.user_properties.retain(|(k, _)| k != name);
}

/// Sends `payload` with `props` and returns its reply; panics (naming `what`) if none comes.
pub async fn call(
    client: &mut RawClient,
    what: &str,
    payload: &[u8],
    props: PublishProperties,
) -> Received {
    let sent = props.clone();
    let reply = client
        .request_with(payload, props, REPLY_WAIT)
        .await
        .unwrap_or_else(|| panic!("{what}: no reply within {REPLY_WAIT:?}"));
    assert_envelope(what, &reply, &sent);
    reply
}

/// A well-formed request (Rust shape, `__srcId`, `__ts` now) and its checked reply.
pub async fn cmd(client: &mut RawClient, what: &str, parts: &[&[u8]]) -> Received {
    let props = props(client);
    call(client, what, &resp(parts), props).await
}

/// The §1.2 envelope of a state-store reply to a request sent with `sent`:
/// exact response topic, echoed correlation, QoS 1, `__stat` 200, `__protVer` 1.0, content
/// type octet-stream or none, payload format indicator 0 or absent, message expiry present
/// and not above the request's when the request had one, non-empty payload, and a `__ts`
/// (when present) that parses and is not more than 60 s ahead of real time.
pub fn assert_envelope(what: &str, reply: &Received, sent: &PublishProperties) {
    let p = &reply.properties;
    assert_eq!(
        Some(&reply.topic),
        sent.response_topic.as_ref(),
        "{what}: reply must arrive on exactly the request's response topic"
    );
    assert_eq!(
        p.correlation_data, sent.correlation_data,
        "{what}: correlation data echoed unchanged"
    );
    assert_eq!(reply.qos, QoS::AtLeastOnce, "{what}: reply QoS 1");
    assert_eq!(
        reply.user_property("__stat"),
        Some("200"),
        "{what}: __stat 200 (payload {:?})",
        reply.payload
    );
    assert_eq!(
        reply.user_property("__protVer"),
        Some("1.0"),
        "{what}: __protVer 1.0"
    );
    assert!(
        p.content_type.is_none() || p.content_type.as_deref() == Some("application/octet-stream"),
        "{what}: content type {:?}",
        p.content_type
    );
    assert!(
        matches!(p.payload_format_indicator, None | Some(0)),
        "{what}: payload format indicator {:?}",
        p.payload_format_indicator
    );
    if let Some(requested) = sent.message_expiry_interval {
        let got = p
            .message_expiry_interval
            .unwrap_or_else(|| panic!("{what}: reply has no message expiry"));
        assert!(
            (1..=requested).contains(&got),
            "{what}: reply expiry {got} not in 1..={requested}"
        );
    }
    assert!(!reply.payload.is_empty(), "{what}: empty reply payload");
    if let Some(ts) = reply.user_property("__ts") {
        let (ms, _, _) =
            parse_hlc(ts).unwrap_or_else(|| panic!("{what}: reply __ts {ts:?} is not an HLC"));
        assert!(
            ms <= crate::now_ms() + 60_000,
            "{what}: reply __ts {ts} more than 60 s ahead"
        );
    }
}

/// The reply's `__ts`, which must be present.
pub fn ts_of(what: &str, reply: &Received) -> String {
    reply
        .user_property("__ts")
        .unwrap_or_else(|| panic!("{what}: reply has no __ts"))
        .to_owned()
}

/// Asserts the payload bytes.
pub fn assert_payload(what: &str, reply: &Received, expected: &[u8]) {
    assert_eq!(
        reply.payload.as_ref(),
        expected,
        "{what}: payload {:?} != {:?}",
        String::from_utf8_lossy(&reply.payload),
        String::from_utf8_lossy(expected)
    );
}

/// `-ERR <message>\r\n`.
pub fn err(message: &str) -> Vec<u8> {
    format!("-ERR {message}\r\n").into_bytes()
}

/// `$<n>\r\n<value>\r\n`.
pub fn bulk(value: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", value.len()).into_bytes();
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
    out
}

/// The exact SET notification payload (§7).
pub fn notify_set(value: &[u8]) -> Vec<u8> {
    let mut out = b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n".to_vec();
    out.extend_from_slice(&bulk(value));
    out
}

/// The exact DELETE notification payload (§7).
pub const NOTIFY_DELETE: &[u8] = b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n";

/// The notification topic for `client_id` and `key` (§7).
pub fn notify_topic(client_id: &str, key: &[u8]) -> String {
    format!(
        "{NOTIFY_PREFIX}/{}/command/notify/{}",
        hex_upper(client_id.as_bytes()),
        hex_upper(key)
    )
}

/// Drains messages already received (for up to `wait`).
pub async fn drain(client: &mut RawClient, wait: Duration) -> Vec<Received> {
    let mut out = Vec::new();
    while let Some(m) = client.next(wait).await {
        out.push(m);
    }
    out
}

/// Publishes a request on the request topic at `qos` without waiting.
pub async fn send(client: &RawClient, qos: QoS, payload: &[u8], props: PublishProperties) {
    client
        .publish(REQUEST_TOPIC, qos, Bytes::copy_from_slice(payload), props)
        .await;
}

/// Collects messages until `done(&collected)` holds or `wait` passes.
pub async fn collect_until(
    client: &mut RawClient,
    wait: Duration,
    mut done: impl FnMut(&[Received]) -> bool,
) -> Vec<Received> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut out = Vec::new();
    while !done(&out) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            break;
        }
        match client.next(left).await {
            Some(m) => out.push(m),
            None => break,
        }
    }
    out
}

/// Waits [`NO_REPLY_WAIT`] and returns every message that looks like a reply: anything not
/// on the request topic, or anything carrying `__stat`.
pub async fn replies_within_no_reply_window(client: &mut RawClient) -> Vec<Received> {
    let deadline = tokio::time::Instant::now() + NO_REPLY_WAIT;
    let mut out = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return out;
        }
        match client.next(left).await {
            Some(m) => {
                if m.topic != REQUEST_TOPIC || m.user_property("__stat").is_some() {
                    out.push(m);
                }
            }
            None => return out,
        }
    }
}

/// `statestore_server_requests_dropped_total{reason="<reason>"}` (0 when the series is
/// missing; panics if `/metrics` does not answer).
pub async fn dropped(node: &StatestoreNode, reason: &str) -> f64 {
    let text = node.metrics().await.expect("/metrics answers 200");
    let series = format!("statestore_server_requests_dropped_total{{reason=\"{reason}\"}}");
    text.lines()
        .find_map(|line| {
            line.strip_prefix(&series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

/// Waits up to 3 s for the dropped counter of `reason` to reach at least `at_least`;
/// returns the last value seen.
pub async fn wait_dropped(node: &StatestoreNode, reason: &str, at_least: f64) -> f64 {
    let reached = crate::wait_for(Duration::from_secs(3), || async {
        let v = dropped(node, reason).await;
        (v >= at_least).then_some(v)
    })
    .await;
    match reached {
        Some(v) => v,
        None => dropped(node, reason).await,
    }
}

/// HTTP GET status of `path` on the node's admin listener.
pub async fn http_status(node: &StatestoreNode, path: &str) -> Option<u16> {
    node.get(path).await.map(|(status, _)| status)
}

/// A SET then GET of a fresh key round-trips: the node still serves.
pub async fn assert_still_serving(client: &mut RawClient, what: &str) {
    let key = format!("alive-{}", hex_upper(&client.correlation()));
    let set = cmd(
        client,
        &format!("{what}: control SET"),
        &[b"SET", key.as_bytes(), b"alive"],
    )
    .await;
    assert_payload(&format!("{what}: control SET"), &set, b"+OK\r\n");
    let get = cmd(
        client,
        &format!("{what}: control GET"),
        &[b"GET", key.as_bytes()],
    )
    .await;
    assert_payload(&format!("{what}: control GET"), &get, b"$5\r\nalive\r\n");
}

/// xorshift64: a tiny deterministic RNG for garbage payloads.
pub struct XorShift(u64);

impl XorShift {
    /// Seeded (a zero seed is replaced).
    pub fn new(seed: u64) -> XorShift {
        XorShift(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}
