//! MQTT 5 request/response load (spec §1–§2): one rumqttc `AsyncClient` and event-loop task per
//! connection (Nagle off), subscribed to `clients/<id>/#`, sending QoS 1 requests with response
//! topic `clients/<id>/resp`, a 16-byte counter correlation id, Message Expiry 10 s and the
//! `__srcId` / `__ts` / `__protVer` user properties, and matching replies to requests by
//! correlation data. [`Connection::call`] sends any payload to any request topic (the state
//! store's, the device-bound service's); [`Requester`] for a connection is the state store.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PublishProperties, SubscribeReasonCode};
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::driver::{self, Outcome, Plan, Requester, lock};
use crate::resp::{self, Expect};
use crate::stats::CellStats;
use crate::workload::{self, Op, ValueKind};

/// The state store request topic (spec §1).
pub const REQUEST_TOPIC: &str = "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke";
/// Message Expiry of every request, seconds.
pub const MESSAGE_EXPIRY_SECS: u32 = 10;

/// Connection losses of load clients since the process started (each is warned about on
/// stderr, the first few in full).
static DISCONNECTS: AtomicU64 = AtomicU64::new(0);

/// Connection losses of load clients so far.
pub fn disconnects() -> u64 {
    DISCONNECTS.load(Ordering::Relaxed)
}

/// Where the broker is.
#[derive(Debug, Clone)]
pub struct Broker {
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl Broker {
    /// `HOST:PORT`.
    pub fn parse(address: &str) -> anyhow::Result<Broker> {
        let (host, port) = address
            .rsplit_once(':')
            .with_context(|| format!("broker `{address}`: expected HOST:PORT"))?;
        let port = port
            .parse()
            .with_context(|| format!("broker `{address}`: port"))?;
        if host.is_empty() {
            bail!("broker `{address}`: empty host");
        }
        Ok(Broker {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port,
        })
    }

    /// On 127.0.0.1.
    pub fn loopback(port: u16) -> Broker {
        Broker {
            host: "127.0.0.1".to_owned(),
            port,
        }
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default()
}

/// The number the next [`unique_id`] takes.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A client id unique to this process: `<prefix>-<pid>-<n>`.
pub fn unique_id(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT_ID.fetch_add(1, Ordering::Relaxed)
    )
}

/// The ids the next `count` calls of [`unique_id`] with `prefix` will return, taking none of
/// them (the `abuse` bench's poisoning attack predicts its victims this way).
pub fn next_unique_ids(prefix: &str, count: usize) -> Vec<String> {
    let next = NEXT_ID.load(Ordering::Relaxed);
    (0..count as u64)
        .map(|i| format!("{prefix}-{}-{}", std::process::id(), next + i))
        .collect()
}

/// Whether a SUBACK granted every filter (the error names the reason codes).
pub fn suback_result(ack: &rumqttc::v5::mqttbytes::v5::SubAck) -> Result<(), String> {
    if ack
        .return_codes
        .iter()
        .all(|c| matches!(c, SubscribeReasonCode::Success(_)))
    {
        Ok(())
    } else {
        Err(format!("subscription refused: {:?}", ack.return_codes))
    }
}

/// Counts a lost connection of `what` in `counter` and warns about the first five; the caller
/// then waits a moment and polls again (rumqttc reconnects).
pub fn warn_connection_lost(counter: &AtomicU64, what: &str, err: &dyn std::fmt::Display) {
    let n = counter.fetch_add(1, Ordering::Relaxed);
    if n < 5 {
        eprintln!("warning: {what}: {err}; reconnecting");
    } else if n == 5 {
        eprintln!("warning: more connection losses of this kind (counted, not shown)");
    }
}

/// MQTT options shared by the load clients and the echo responder: Nagle off (CRITICAL:
/// otherwise every request waits ~40 ms), large packets, an outgoing in-flight window of at
/// least `in_flight`.
pub fn options(broker: &Broker, id: &str, in_flight: usize) -> MqttOptions {
    let mut options = MqttOptions::new(id, broker.host.clone(), broker.port);
    options.set_keep_alive(Duration::from_secs(30));
    options.set_clean_start(true);
    options.set_max_packet_size(Some(16 << 20));
    options.set_receive_maximum(Some(1024));
    options.set_outgoing_inflight_upper_limit(u16::try_from(in_flight.max(64)).unwrap_or(u16::MAX));
    let mut network = options.network_options();
    network.set_tcp_nodelay(true);
    network.set_connection_timeout(10);
    options.set_network_options(network);
    options
}

/// How replies are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// The state store's success reply for each operation (spec §2).
    Store,
    /// The echo floor: `+OK` for everything.
    Echo,
    /// As `Store`, but every GET must hit and return the value being written.
    GetsHit,
}

/// A reply as the event loop saw it.
#[derive(Debug)]
struct Reply {
    received: Instant,
    stat: Option<String>,
    payload: Bytes,
}

type Pending = Arc<Mutex<HashMap<u128, oneshot::Sender<Reply>>>>;

/// One MQTT connection of the load generator.
pub struct Connection {
    client: AsyncClient,
    id: String,
    response_topic: String,
    pending: Pending,
    next_correlation: AtomicU64,
    check: Check,
    timeout: Duration,
    closing: Arc<AtomicBool>,
    events: JoinHandle<()>,
}

impl Connection {
    /// Connects as `id`, subscribes to `clients/<id>/#` and waits for the SUBACK.
    pub async fn connect(
        broker: &Broker,
        id: String,
        in_flight: usize,
        check: Check,
        timeout: Duration,
    ) -> anyhow::Result<Connection> {
        let (client, mut eventloop) =
            AsyncClient::new(options(broker, &id, in_flight), in_flight * 2 + 16);
        let pending: Pending = Arc::default();
        let filter = format!("clients/{id}/#");
        let (ready_tx, ready) = oneshot::channel::<Result<(), String>>();
        let closing = Arc::new(AtomicBool::new(false));
        let events = {
            let closing = closing.clone();
            let pending = pending.clone();
            let client = client.clone();
            let filter = filter.clone();
            let id = id.clone();
            tokio::spawn(async move {
                let mut ready_tx = Some(ready_tx);
                let mut connections = 0u64;
                loop {
                    let event = eventloop.poll().await;
                    let received = Instant::now();
                    match event {
                        Ok(Event::Incoming(Packet::Publish(publish))) => {
                            deliver(&pending, received, publish.properties, publish.payload)
                        }
                        Ok(Event::Incoming(Packet::ConnAck(_))) => {
                            connections += 1;
                            if connections > 1 {
                                // clean start lost the subscription: take it again
                                let _ = client.try_subscribe(filter.clone(), QoS::AtLeastOnce);
                            }
                        }
                        Ok(Event::Incoming(Packet::SubAck(ack))) => {
                            if let Some(tx) = ready_tx.take() {
                                let _ = tx.send(suback_result(&ack));
                            }
                        }
                        Ok(_) => {}
                        Err(err) => {
                            if let Some(tx) = ready_tx.take() {
                                let _ = tx.send(Err(err.to_string()));
                                return;
                            }
                            if closing.load(Ordering::Relaxed) {
                                return;
                            }
                            warn_connection_lost(
                                &DISCONNECTS,
                                &format!("MQTT connection {id}"),
                                &err,
                            );
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                }
            })
        };
        let connection = Connection {
            response_topic: format!("clients/{id}/resp"),
            client,
            id,
            pending,
            next_correlation: AtomicU64::new(0),
            check,
            timeout,
            closing,
            events,
        };
        connection
            .client
            .subscribe(filter, QoS::AtLeastOnce)
            .await
            .map_err(|e| anyhow!("subscribe: {e}"))?;
        match tokio::time::timeout(Duration::from_secs(15), ready).await {
            Ok(Ok(Ok(()))) => Ok(connection),
            Ok(Ok(Err(err))) => bail!(
                "MQTT client {} to {}: {err}",
                connection.id,
                broker_label(broker)
            ),
            Ok(Err(_)) => bail!("MQTT client {}: event loop ended", connection.id),
            Err(_) => bail!(
                "MQTT client {} to {}: no SUBACK within 15 s",
                connection.id,
                broker_label(broker)
            ),
        }
    }

    /// The properties of request number `n`.
    fn properties(&self, correlation: u128, n: u64) -> PublishProperties {
        PublishProperties {
            response_topic: Some(self.response_topic.clone()),
            correlation_data: Some(Bytes::copy_from_slice(&correlation.to_be_bytes())),
            message_expiry_interval: Some(MESSAGE_EXPIRY_SECS),
            content_type: Some("application/octet-stream".to_owned()),
            user_properties: vec![
                ("__srcId".to_owned(), self.id.clone()),
                ("__ts".to_owned(), hlc(now_ms(), n, &self.id)),
                ("__protVer".to_owned(), "1.0".to_owned()),
            ],
            ..Default::default()
        }
    }
}

fn broker_label(broker: &Broker) -> String {
    format!("{}:{}", broker.host, broker.port)
}

/// `{ms:015}:{counter:05}:{id}` (spec §3).
pub fn hlc(ms: u64, counter: u64, id: &str) -> String {
    format!("{ms:015}:{:05}:{id}", counter % 100_000)
}

/// Hands a reply to the request waiting for its correlation data (others are ignored).
fn deliver(
    pending: &Pending,
    received: Instant,
    properties: Option<PublishProperties>,
    payload: Bytes,
) {
    let Some(properties) = properties else {
        return;
    };
    let Some(correlation) = properties
        .correlation_data
        .as_deref()
        .and_then(|c| <[u8; 16]>::try_from(c).ok())
        .map(u128::from_be_bytes)
    else {
        return;
    };
    let Some(waiter) = lock(pending).remove(&correlation) else {
        return; // late reply of a request that already timed out
    };
    let stat = properties
        .user_properties
        .into_iter()
        .find(|(k, _)| k == "__stat")
        .map(|(_, v)| v);
    let _ = waiter.send(Reply {
        received,
        stat,
        payload,
    });
}

impl Connection {
    /// Publishes `payload` as a request on `topic` (QoS 1, with the envelope) and waits for its
    /// reply, which must carry `__stat` 200 and match `expect`.
    pub async fn call(&self, topic: &str, payload: Vec<u8>, expect: Expect<'_>) -> Outcome {
        self.call_retrying(topic, payload, expect, 1).await.0
    }

    /// As [`Connection::call`], but a request unanswered within the timeout is published again,
    /// the very same request with the same correlation data (protocol §6: the retry gets the
    /// remembered reply and takes effect once), up to `attempts` publishes in all. Returns the
    /// outcome, its latency counted from the first publish, and how many publishes it took.
    pub async fn call_retrying(
        &self,
        topic: &str,
        payload: Vec<u8>,
        expect: Expect<'_>,
        attempts: usize,
    ) -> (Outcome, usize) {
        let n = self.next_correlation.fetch_add(1, Ordering::Relaxed) + 1;
        let correlation = u128::from(n);
        let properties = self.properties(correlation, n);
        let payload = Bytes::from(payload);
        let start = Instant::now();
        let attempts = attempts.max(1);
        for attempt in 1..=attempts {
            let (tx, rx) = oneshot::channel();
            lock(&self.pending).insert(correlation, tx);
            let sent = Instant::now();
            if let Err(err) = self
                .client
                .publish_with_properties(
                    topic,
                    QoS::AtLeastOnce,
                    false,
                    payload.clone(),
                    properties.clone(),
                )
                .await
            {
                lock(&self.pending).remove(&correlation);
                return (Outcome::Error(format!("publish failed: {err}")), attempt);
            }
            match tokio::time::timeout_at((sent + self.timeout).into(), rx).await {
                Ok(Ok(reply)) => {
                    let outcome =
                        match resp::classify(expect, reply.stat.as_deref(), &reply.payload) {
                            Ok(()) => Outcome::Ok {
                                latency: reply.received.saturating_duration_since(start),
                                received: reply.received,
                            },
                            Err(kind) => Outcome::Error(kind),
                        };
                    return (outcome, attempt);
                }
                Ok(Err(_)) => {
                    return (Outcome::Error("connection task ended".to_owned()), attempt);
                }
                Err(_) => {
                    lock(&self.pending).remove(&correlation);
                }
            }
        }
        (Outcome::Timeout, attempts)
    }

    /// Disconnects and stops the event loop.
    pub async fn disconnect(&self) {
        self.closing.store(true, Ordering::Relaxed);
        let _ = self.client.try_disconnect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.events.abort();
    }
}

impl Requester for Connection {
    async fn request(&self, op: Op, key: &[u8], value: &Bytes) -> Outcome {
        let expect = match (self.check, op) {
            (Check::Echo, _) => Expect::Echo,
            (Check::GetsHit, Op::Get) => Expect::Hit(value),
            _ => Expect::Store(op),
        };
        self.call(REQUEST_TOPIC, resp::request(op, key, value), expect)
            .await
    }

    async fn close(&self) {
        self.disconnect().await;
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.events.abort();
    }
}

/// What a load run needs besides the plan.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Connections.
    pub clients: usize,
    /// Requests outstanding per connection.
    pub in_flight: usize,
    /// Value size, bytes.
    pub value_size: usize,
    /// What the values look like (a GET that must hit expects the key's own value).
    pub values: ValueKind,
    /// Per-request timeout.
    pub timeout: Duration,
    /// How replies are checked.
    pub check: Check,
}

/// Opens `options.clients` connections concurrently.
pub async fn connect_all(
    broker: &Broker,
    options: &LoadOptions,
) -> anyhow::Result<Vec<Connection>> {
    let attempts = (0..options.clients.max(1)).map(|_| {
        Connection::connect(
            broker,
            unique_id("bench"),
            options.in_flight,
            options.check,
            options.timeout,
        )
    });
    futures::future::join_all(attempts)
        .await
        .into_iter()
        .collect()
}

/// Connects, runs `plan`, disconnects. The plan's clock starts once every client is connected
/// when `plan` is built by `make_plan` after connecting.
pub async fn run(
    broker: &Broker,
    options: &LoadOptions,
    make_plan: impl FnOnce() -> Plan,
) -> anyhow::Result<CellStats> {
    run_with(broker, options, |_, connection| connection, make_plan).await
}

/// As [`run`], with every connection turned into the requester the plan drives by `wrap`
/// (given the connection's index), e.g. one that sends to another request topic.
pub async fn run_with<R: Requester>(
    broker: &Broker,
    options: &LoadOptions,
    wrap: impl Fn(usize, Connection) -> R,
    make_plan: impl FnOnce() -> Plan,
) -> anyhow::Result<CellStats> {
    let connections = connect_all(broker, options).await?;
    let requesters = connections
        .into_iter()
        .enumerate()
        .map(|(i, c)| wrap(i, c))
        .collect();
    let plan = make_plan();
    driver::drive(
        requesters,
        options.in_flight,
        plan,
        workload::Values::new(options.values, options.value_size),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_ids_are_predicted() {
        let predicted = next_unique_ids("predict", 2);
        // other tests take ids concurrently: the prediction holds for ids not yet taken
        let taken = unique_id("predict");
        let n: u64 = taken
            .rsplit('-')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let first: u64 = predicted[0]
            .rsplit('-')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(u64::MAX);
        assert!(n >= first, "{taken} {predicted:?}");
        assert_eq!(predicted.len(), 2);
    }

    #[test]
    fn hlc_is_padded() {
        assert_eq!(hlc(1, 2, "me"), "000000000000001:00002:me");
        assert_eq!(
            hlc(1_795_315_360_516, 123_456, "c"),
            "001795315360516:23456:c"
        );
    }

    #[test]
    fn broker_addresses_parse() -> anyhow::Result<()> {
        let b = Broker::parse("127.0.0.1:1883")?;
        assert_eq!((b.host.as_str(), b.port), ("127.0.0.1", 1883));
        let b = Broker::parse("[::1]:1884")?;
        assert_eq!((b.host.as_str(), b.port), ("::1", 1884));
        assert!(Broker::parse("localhost").is_err());
        assert!(Broker::parse(":1883").is_err());
        assert!(Broker::parse("h:port").is_err());
        Ok(())
    }

    #[test]
    fn replies_reach_their_request_only() {
        let pending: Pending = Arc::default();
        let (tx, mut rx) = oneshot::channel();
        lock(&pending).insert(7, tx);
        let props = |corr: u128| PublishProperties {
            correlation_data: Some(Bytes::copy_from_slice(&corr.to_be_bytes())),
            user_properties: vec![("__stat".to_owned(), "200".to_owned())],
            ..Default::default()
        };
        deliver(&pending, Instant::now(), Some(props(8)), Bytes::new());
        assert!(rx.try_recv().is_err());
        deliver(&pending, Instant::now(), None, Bytes::new());
        deliver(
            &pending,
            Instant::now(),
            Some(props(7)),
            Bytes::from_static(b"+OK\r\n"),
        );
        let reply = rx.try_recv().expect("delivered");
        assert_eq!(reply.stat.as_deref(), Some("200"));
        assert_eq!(&reply.payload[..], b"+OK\r\n");
        assert!(lock(&pending).is_empty());
    }
}
