//! The attacks of `statestore-bench abuse` (issue 27), each run by clients with nothing but an
//! application's rights on the broker: publish on the request topics, read their own
//! `clients/<id>/#`. An attack is prepared (connections, registrations, stored values) before
//! its window and runs until stopped, counting its own requests and what came back.
//!
//! - **scan**: two closed loops of a SCAN whose pattern is one character class of 21,000
//!   ranges, and one alternating sixteen classes of ~21,000 ranges with 64 KiB of unclosed
//!   `[`, each followed through its continuation tokens, over 2,000 keys of 64 bytes.
//! - **keynotify**: one key registered under 1,001 claimed client ids (one past the agreed
//!   per-key cap), then that key written in a closed loop (each write fans out to every
//!   observer; the attacker receives the notifications).
//! - **getbig**: a value of just under 4 MiB, GET by two connections keeping 32 GETs each
//!   unanswered.
//! - **props**: 50 requests a second, each carrying 20,000 empty user properties.
//! - **forged**: 500 requests a second whose Response Topic is a victim device's topic, the
//!   feedback topic or one of the store's own; a spy on `devices/#` and
//!   `messages/servicebound/#` counts the answers that arrive there.
//! - **poison**: 200 SETs a second under the well-behaved clients' ids and the correlation data
//!   they will use (a counter), each `SET … NX` of an existing key answered `:-1`: where the
//!   store remembers that reply for the victim's next request, the victim gets `:-1` back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use bytes::Bytes;
use clap::ValueEnum;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PublishProperties};
use rumqttc::v5::{AsyncClient, Event};
use serde::Serialize;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::driver::lock;
use crate::mqtt_load::{self, Broker, REQUEST_TOPIC, hlc, now_ms};
use crate::resp::encode;

/// The device-bound service's request topic.
const DEVICEBOUND_TOPIC: &str = "devicebound/v1/command/invoke";
/// Prefix of every notification topic.
const NOTIFY_PREFIX: &str = "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8";
/// First bytes of every attacker correlation data.
const MARK: &[u8; 6] = b"ATTACK";
/// A request an attacker waits for is given up after this.
const REPLY_WAIT: Duration = Duration::from_secs(30);

/// Keys the SCANs look at (64 bytes each), written before the first window.
pub const SCAN_KEYS: usize = 2_000;
/// Registrations of the hot key: the agreed per-key cap (1,000) and one more.
const OBSERVERS: usize = 1_001;
/// Value written to the hot key.
const HOT_VALUE_BYTES: usize = 1024;
/// The big value: just under the 4 MiB value limit.
const BIG_VALUE_BYTES: usize = (4 << 20) - 1024;
/// GET-flood connections and GETs each keeps unanswered.
const GETTERS: usize = 2;
const GETS_IN_FLIGHT: usize = 32;
/// Flooding requests per second and empty user properties each.
const PROPS_RATE: f64 = 50.0;
const FLOOD_USER_PROPERTIES: usize = 20_000;
/// Forged-response-topic requests per second.
const FORGED_RATE: f64 = 500.0;
/// Poisoning SETs per second.
const POISON_RATE: f64 = 200.0;
/// The key every poisoning `SET … NX` fails on.
const POISON_KEY: &[u8] = b"abuse-poison-existing";

/// One attack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Attack {
    /// Hostile SCAN loops (one class of many ranges; unclosed `[`).
    Scan,
    /// KEYNOTIFY fan-out: one key under 1,001 ids, written in a loop.
    Keynotify,
    /// GETs of a 4 MiB value, 64 unanswered.
    Getbig,
    /// Requests with 20,000 empty user properties, 50/s.
    Props,
    /// Requests with forged response topics, 500/s.
    Forged,
    /// Reply-memory poisoning under the well-behaved clients' ids, 200/s.
    Poison,
}

impl Attack {
    /// Name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Attack::Scan => "scan",
            Attack::Keynotify => "keynotify",
            Attack::Getbig => "getbig",
            Attack::Props => "props",
            Attack::Forged => "forged",
            Attack::Poison => "poison",
        }
    }
}

/// What an attack did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AttackStats {
    /// Requests sent during the window.
    pub sent: u64,
    /// Replies received on the attacker's own topics.
    pub answered: u64,
    /// Of those, `-ERR` replies.
    pub refused: u64,
    /// Messages received on the other filters (notifications, for keynotify).
    pub received_elsewhere: u64,
    /// Answers to attacker requests that a spy saw on a forged topic.
    pub forged_delivered: u64,
    /// Seconds it ran.
    pub secs: f64,
    /// What the preparation found (e.g. registrations admitted).
    pub notes: Vec<String>,
}

impl AttackStats {
    /// Requests sent per second.
    pub fn rate(&self) -> f64 {
        if self.secs > 0.0 {
            self.sent as f64 / self.secs
        } else {
            0.0
        }
    }
}

/// Counts shared by an attacker's event loop and its senders.
#[derive(Default)]
struct Counts {
    sent: AtomicU64,
    answered: AtomicU64,
    refused: AtomicU64,
    elsewhere: AtomicU64,
    marked_answers: AtomicU64,
}

type Pending = Arc<Mutex<HashMap<Bytes, oneshot::Sender<Bytes>>>>;

/// An attacker's (or spy's) MQTT connection.
struct Attacker {
    client: AsyncClient,
    id: String,
    pending: Pending,
    counts: Arc<Counts>,
    next: AtomicU64,
    events: JoinHandle<()>,
}

/// Correlation data `n` of an attacker: [`MARK`], two zero bytes, `n` big-endian (16 bytes).
fn attack_correlation(n: u64) -> Bytes {
    let mut bytes = MARK.to_vec();
    bytes.extend_from_slice(&[0, 0]);
    bytes.extend_from_slice(&n.to_be_bytes());
    Bytes::from(bytes)
}

/// A client id for an attack connection (kept apart from the load clients' ids, which the
/// poisoning attack predicts).
fn attacker_id(what: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "abuse-{what}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

impl Attacker {
    /// Connects as a fresh `abuse-<what>-…` id, subscribed to its `clients/<id>/#` and `extra`.
    async fn connect(broker: &Broker, what: &str, extra: &[&str]) -> anyhow::Result<Attacker> {
        let id = attacker_id(what);
        let (client, mut eventloop) = AsyncClient::new(mqtt_load::options(broker, &id, 256), 1024);
        let pending: Pending = Arc::default();
        let counts = Arc::new(Counts::default());
        // One SUBACK per subscription this attacker makes (its own topics and `extra`).
        let (subacks_tx, mut subacks) = tokio::sync::mpsc::channel(extra.len() + 1);
        let own = format!("clients/{id}/");
        let events = {
            let pending = pending.clone();
            let counts = counts.clone();
            tokio::spawn(async move {
                loop {
                    match eventloop.poll().await {
                        Ok(Event::Incoming(Packet::Publish(p))) => {
                            let topic = String::from_utf8_lossy(&p.topic);
                            let properties = p.properties.unwrap_or_default();
                            let answer = properties
                                .user_properties
                                .iter()
                                .any(|(k, _)| k == "__stat");
                            let correlation = properties.correlation_data.unwrap_or_default();
                            if !topic.starts_with(&own) {
                                counts.elsewhere.fetch_add(1, Ordering::Relaxed);
                                if answer && correlation.starts_with(MARK) {
                                    counts.marked_answers.fetch_add(1, Ordering::Relaxed);
                                }
                                continue;
                            }
                            counts.answered.fetch_add(1, Ordering::Relaxed);
                            if p.payload.starts_with(b"-ERR") {
                                counts.refused.fetch_add(1, Ordering::Relaxed);
                            }
                            if let Some(waiter) = lock(&pending).remove(&correlation) {
                                let _ = waiter.send(p.payload);
                            }
                        }
                        Ok(Event::Incoming(Packet::SubAck(ack))) => {
                            let _ = subacks_tx.try_send(mqtt_load::suback_result(&ack));
                        }
                        Ok(_) => {}
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
            })
        };
        let mut filters = vec![format!("clients/{id}/#")];
        filters.extend(extra.iter().map(|f| (*f).to_owned()));
        for filter in filters {
            client
                .subscribe(filter.clone(), QoS::AtLeastOnce)
                .await
                .map_err(|e| anyhow!("subscribe {filter}: {e}"))?;
            match tokio::time::timeout(Duration::from_secs(15), subacks.recv()).await {
                Ok(Some(Ok(()))) => {}
                Ok(Some(Err(err))) => bail!("attacker {id}: {filter}: {err}"),
                _ => bail!("attacker {id}: no SUBACK for {filter}"),
            }
        }
        Ok(Attacker {
            client,
            id,
            pending,
            counts,
            next: AtomicU64::new(1),
            events,
        })
    }

    /// A fresh attacker correlation ([`attack_correlation`]).
    fn correlation(&self) -> Bytes {
        attack_correlation(self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// Well-formed request properties under the claimed `src_id`, answered on its own topic.
    fn properties_as(
        &self,
        src_id: &str,
        correlation: Bytes,
        expiry_secs: u32,
    ) -> PublishProperties {
        PublishProperties {
            response_topic: Some(format!("clients/{}/reply", self.id)),
            correlation_data: Some(correlation),
            message_expiry_interval: Some(expiry_secs),
            user_properties: vec![
                ("__srcId".to_owned(), src_id.to_owned()),
                ("__ts".to_owned(), hlc(now_ms(), 0, src_id)),
                ("__protVer".to_owned(), "1.0".to_owned()),
            ],
            ..Default::default()
        }
    }

    /// Properties under its own id with a fresh correlation.
    fn properties(&self) -> PublishProperties {
        self.properties_as(&self.id, self.correlation(), mqtt_load::MESSAGE_EXPIRY_SECS)
    }

    /// Publishes without waiting for a reply.
    async fn fire(
        &self,
        topic: &str,
        payload: Vec<u8>,
        properties: PublishProperties,
    ) -> anyhow::Result<()> {
        self.client
            .publish_with_properties(topic, QoS::AtLeastOnce, false, payload, properties)
            .await
            .map_err(|e| anyhow!("attacker {} publish: {e}", self.id))?;
        self.counts.sent.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Publishes a request and waits (at most [`REPLY_WAIT`]) for its reply.
    async fn request(
        &self,
        topic: &str,
        payload: Vec<u8>,
        properties: PublishProperties,
    ) -> Option<Bytes> {
        let correlation = properties.correlation_data.clone()?;
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(correlation.clone(), tx);
        if self.fire(topic, payload, properties).await.is_err() {
            lock(&self.pending).remove(&correlation);
            return None;
        }
        let reply = tokio::time::timeout(REPLY_WAIT, rx).await.ok()?.ok();
        if reply.is_none() {
            lock(&self.pending).remove(&correlation);
        }
        reply
    }

    /// Sends `requests` with at most `in_flight` unanswered; one left unanswered (lost in a
    /// leader change) is sent again as it was, twice at most (a retry takes effect once).
    /// The replies in order.
    async fn pipeline(
        &self,
        requests: Vec<(Vec<u8>, PublishProperties)>,
        in_flight: usize,
    ) -> Vec<Option<Bytes>> {
        let mut out = Vec::with_capacity(requests.len());
        for chunk in requests.chunks(in_flight.max(1)) {
            let calls = chunk
                .iter()
                .map(|(payload, p)| self.request(REQUEST_TOPIC, payload.clone(), p.clone()));
            out.extend(futures::future::join_all(calls).await);
        }
        for _ in 0..2 {
            for (reply, (payload, p)) in out.iter_mut().zip(&requests) {
                if reply.is_none() {
                    *reply = self
                        .request(REQUEST_TOPIC, payload.clone(), p.clone())
                        .await;
                }
            }
        }
        out
    }

    fn snapshot(&self) -> AttackStats {
        AttackStats {
            sent: self.counts.sent.load(Ordering::Relaxed),
            answered: self.counts.answered.load(Ordering::Relaxed),
            refused: self.counts.refused.load(Ordering::Relaxed),
            received_elsewhere: self.counts.elsewhere.load(Ordering::Relaxed),
            forged_delivered: self.counts.marked_answers.load(Ordering::Relaxed),
            ..Default::default()
        }
    }

    async fn disconnect(&self) {
        let _ = self.client.try_disconnect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.events.abort();
    }
}

impl Drop for Attacker {
    fn drop(&mut self) {
        self.events.abort();
    }
}

/// Sends at a fixed rate: `wait` returns when the next send is due.
struct Pacer {
    start: Instant,
    rate: f64,
    sent: u64,
}

impl Pacer {
    fn new(rate: f64) -> Pacer {
        Pacer {
            start: Instant::now(),
            rate,
            sent: 0,
        }
    }

    async fn wait(&mut self) {
        let due = self.start + Duration::from_secs_f64(self.sent as f64 / self.rate);
        tokio::time::sleep_until(due.into()).await;
        self.sent += 1;
    }
}

/// What an attack needs to know of the run.
#[derive(Debug, Clone)]
pub struct Context {
    /// The broker.
    pub broker: Broker,
    /// The client ids the next well-behaved window will connect with (for `poison`).
    pub victims: Vec<String>,
    /// Well-behaved requests per second per client in the last quiet window (for `poison`).
    pub victim_rate_per_client: f64,
    /// How long the attack window lasts, warm-up included (for `poison`'s expiry).
    pub window: Duration,
}

/// Writes what the attacks read before the first window: the SCAN keys and the big value.
pub async fn prepare_store(broker: &Broker) -> anyhow::Result<()> {
    let writer = Attacker::connect(broker, "prepare", &[]).await?;
    let mut requests: Vec<(Vec<u8>, PublishProperties)> = (0..SCAN_KEYS)
        .map(|i| {
            let key = scan_key(i);
            (encode(&[b"SET", key.as_bytes(), b"v"]), writer.properties())
        })
        .collect();
    requests.push((
        encode(&[b"SET", b"abuse-big", &vec![b'b'; BIG_VALUE_BYTES]]),
        writer.properties(),
    ));
    requests.push((encode(&[b"SET", POISON_KEY, b"taken"]), writer.properties()));
    let replies = writer.pipeline(requests, 64).await;
    writer.disconnect().await;
    let failed = replies
        .iter()
        .filter(|r| r.as_deref() != Some(b"+OK\r\n"))
        .count();
    if failed > 0 {
        bail!("{failed} of {} preparing SETs failed", replies.len());
    }
    Ok(())
}

/// A 64-byte key the SCANs look at.
fn scan_key(i: usize) -> String {
    format!("abuse-scan-{i:05}-{}", "p".repeat(47))
}

/// A running attack.
pub struct Running {
    stop: Arc<AtomicBool>,
    started: Instant,
    attackers: Vec<Arc<Attacker>>,
    tasks: Vec<JoinHandle<()>>,
    notes: Vec<String>,
}

impl Running {
    /// Stops it (its loops at once, whatever they wait for) and returns what it did.
    pub async fn finish(self) -> AttackStats {
        self.stop.store(true, Ordering::Relaxed);
        let secs = self.started.elapsed().as_secs_f64();
        for task in self.tasks {
            task.abort();
        }
        let mut total = AttackStats {
            secs,
            notes: self.notes,
            ..Default::default()
        };
        for attacker in &self.attackers {
            let s = attacker.snapshot();
            total.sent += s.sent;
            total.answered += s.answered;
            total.refused += s.refused;
            total.received_elsewhere += s.received_elsewhere;
            total.forged_delivered += s.forged_delivered;
            attacker.disconnect().await;
        }
        total
    }
}

/// Prepares `attack` and starts it.
pub async fn start(attack: Attack, context: &Context) -> anyhow::Result<Running> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut running = Running {
        stop: stop.clone(),
        started: Instant::now(),
        attackers: Vec::new(),
        tasks: Vec::new(),
        notes: Vec::new(),
    };
    match attack {
        Attack::Scan => {
            for patterns in [
                vec![one_class_many_ranges()],
                vec![one_class_many_ranges()],
                vec![many_classes(), unclosed_brackets()],
            ] {
                let a = Arc::new(Attacker::connect(&context.broker, "scan", &[]).await?);
                running
                    .tasks
                    .push(tokio::spawn(scan_loop(a.clone(), patterns, stop.clone())));
                running.attackers.push(a);
            }
        }
        Attack::Keynotify => {
            let filter = format!("{NOTIFY_PREFIX}/#");
            let a = Arc::new(Attacker::connect(&context.broker, "fan", &[&filter]).await?);
            let registrations = (0..OBSERVERS)
                .map(|i| {
                    let p = a.properties_as(&format!("{}-{i:05}", a.id), a.correlation(), 30);
                    (encode(&[b"KEYNOTIFY", b"abuse-hot"]), p)
                })
                .collect();
            let replies = a.pipeline(registrations, 32).await;
            let ok = replies
                .iter()
                .filter(|r| r.as_deref() == Some(b"+OK\r\n"))
                .count();
            running.notes.push(format!(
                "{ok} of {OBSERVERS} registrations of one key admitted"
            ));
            let value = vec![b'n'; HOT_VALUE_BYTES];
            running.tasks.push(tokio::spawn(closed_loop(
                a.clone(),
                stop.clone(),
                move |a| {
                    (
                        REQUEST_TOPIC,
                        encode(&[b"SET", b"abuse-hot", &value]),
                        a.properties(),
                    )
                },
            )));
            running.attackers.push(a);
        }
        Attack::Getbig => {
            for _ in 0..GETTERS {
                let a = Arc::new(Attacker::connect(&context.broker, "getbig", &[]).await?);
                for _ in 0..GETS_IN_FLIGHT {
                    running
                        .tasks
                        .push(tokio::spawn(closed_loop(a.clone(), stop.clone(), |a| {
                            (
                                REQUEST_TOPIC,
                                encode(&[b"GET", b"abuse-big"]),
                                a.properties(),
                            )
                        })));
                }
                running.attackers.push(a);
            }
        }
        Attack::Props => {
            let a = Arc::new(Attacker::connect(&context.broker, "props", &[]).await?);
            running.tasks.push(tokio::spawn(paced_loop(
                a.clone(),
                stop.clone(),
                PROPS_RATE,
                |a, _| {
                    let mut p = a.properties();
                    p.user_properties.extend(std::iter::repeat_n(
                        (String::new(), String::new()),
                        FLOOD_USER_PROPERTIES,
                    ));
                    (REQUEST_TOPIC, encode(&[b"GET", b"abuse-any"]), p)
                },
            )));
            running.attackers.push(a);
        }
        Attack::Forged => {
            let spy = Arc::new(
                Attacker::connect(
                    &context.broker,
                    "spy",
                    &["devices/#", "messages/servicebound/#"],
                )
                .await?,
            );
            running.attackers.push(spy);
            let a = Arc::new(Attacker::connect(&context.broker, "forger", &[]).await?);
            let topics = forged_topics();
            running.tasks.push(tokio::spawn(paced_loop(
                a.clone(),
                stop.clone(),
                FORGED_RATE,
                move |a, n| {
                    let mut p = a.properties();
                    p.response_topic = Some(topics[n as usize % topics.len()].clone());
                    if n % 2 == 0 {
                        (REQUEST_TOPIC, encode(&[b"GET", b"abuse-any"]), p)
                    } else {
                        (DEVICEBOUND_TOPIC, encode(&[b"QUEUE", b"abuse-victim"]), p)
                    }
                },
            )));
            running.attackers.push(a);
        }
        Attack::Poison => {
            if context.victims.is_empty() {
                bail!("poison: no victims to poison");
            }
            let a = Arc::new(Attacker::connect(&context.broker, "poison", &[]).await?);
            let per_victim = POISON_RATE / context.victims.len() as f64;
            let stride = (context.victim_rate_per_client / per_victim)
                .ceil()
                .max(1.0) as u64;
            let expiry = u32::try_from(context.window.as_secs() + 30).unwrap_or(u32::MAX);
            running.notes.push(format!(
                "poisoning every {stride}th correlation of {} clients",
                context.victims.len()
            ));
            let victims = context.victims.clone();
            running.tasks.push(tokio::spawn(paced_loop(
                a.clone(),
                stop.clone(),
                POISON_RATE,
                move |a, n| {
                    let victim = &victims[n as usize % victims.len()];
                    let round = n / victims.len() as u64;
                    let correlation = u128::from(1 + round * stride);
                    let p = a.properties_as(
                        victim,
                        Bytes::copy_from_slice(&correlation.to_be_bytes()),
                        expiry,
                    );
                    (
                        REQUEST_TOPIC,
                        encode(&[b"SET", POISON_KEY, b"poison", b"NX"]),
                        p,
                    )
                },
            )));
            running.attackers.push(a);
        }
    }
    running.started = Instant::now();
    Ok(running)
}

/// One request after another (the reply awaited) until `stop`.
async fn closed_loop<F>(attacker: Arc<Attacker>, stop: Arc<AtomicBool>, make: F)
where
    F: Fn(&Attacker) -> (&'static str, Vec<u8>, PublishProperties),
{
    while !stop.load(Ordering::Relaxed) {
        let (topic, payload, properties) = make(&attacker);
        if attacker.request(topic, payload, properties).await.is_none() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Requests at `rate` per second, not waiting for replies, until `stop`; `make` gets the
/// request's number.
async fn paced_loop<F>(attacker: Arc<Attacker>, stop: Arc<AtomicBool>, rate: f64, make: F)
where
    F: Fn(&Attacker, u64) -> (&'static str, Vec<u8>, PublishProperties),
{
    let mut pacer = Pacer::new(rate);
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        pacer.wait().await;
        let (topic, payload, properties) = make(&attacker, n);
        if attacker.fire(topic, payload, properties).await.is_err() {
            return;
        }
        n += 1;
    }
}

/// SCANs with `patterns` in turn, each followed through its continuation tokens, until `stop`.
async fn scan_loop(attacker: Arc<Attacker>, patterns: Vec<Vec<u8>>, stop: Arc<AtomicBool>) {
    for pattern in patterns.iter().cycle() {
        let mut token: Option<Vec<u8>> = None;
        loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let mut parts: Vec<&[u8]> = vec![b"SCAN", pattern];
            if let Some(token) = &token {
                parts.push(token);
            }
            let Some(reply) = attacker
                .request(REQUEST_TOPIC, encode(&parts), attacker.properties())
                .await
            else {
                break;
            };
            match continuation(&reply) {
                Some(next) => token = Some(next),
                None => break,
            }
        }
    }
}

/// The continuation token of a SCAN page (`*2\r\n*<k>\r\n<k bulks>$<t>\r\n<token>\r\n`);
/// `None` for the last page, an error or anything else.
fn continuation(payload: &[u8]) -> Option<Vec<u8>> {
    let rest = payload.strip_prefix(b"*2\r\n*")?;
    let line = |s: &[u8]| s.windows(2).position(|w| w == b"\r\n");
    let end = line(rest)?;
    let count: usize = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
    let mut rest = &rest[end + 2..];
    let mut bulk = || -> Option<Vec<u8>> {
        let body = rest.strip_prefix(b"$")?;
        let end = line(body)?;
        let len: usize = std::str::from_utf8(&body[..end]).ok()?.parse().ok()?;
        let value = body.get(end + 2..end + 2 + len)?;
        if body.get(end + 2 + len..end + 4 + len)? != b"\r\n" {
            return None;
        }
        rest = &body[end + 4 + len..];
        Some(value.to_vec())
    };
    for _ in 0..count {
        bulk()?;
    }
    let token = bulk()?;
    rest.is_empty().then_some(token)
}

/// `*[Q-QQ-Q…]*`: one class of 21,000 ranges that match no key character (~63 KiB).
fn one_class_many_ranges() -> Vec<u8> {
    let mut pattern = b"*[".to_vec();
    pattern.extend(b"Q-Q".repeat(21_000));
    pattern.extend_from_slice(b"]*");
    pattern
}

/// Sixteen classes of 1,300 ranges, each but the last accepting any printable character by
/// its last range: ~21,000 ranges looked at for every key.
fn many_classes() -> Vec<u8> {
    let mut pattern = Vec::new();
    for class in 0..16 {
        pattern.push(b'[');
        pattern.extend(b"Q-Q".repeat(1_299));
        pattern.extend_from_slice(if class < 15 { b"!-~" } else { b"Q-Q" });
        pattern.push(b']');
    }
    pattern.push(b'*');
    pattern
}

/// The longest pattern of `[`, every one unclosed.
fn unclosed_brackets() -> Vec<u8> {
    vec![b'['; LONGEST_PATTERN]
}

/// Response topics a forger would like the store to publish to.
fn forged_topics() -> Vec<String> {
    vec![
        "devices/abuse-victim/messages/devicebound/%24.mid=forged&%24.lt=forged".to_owned(),
        "devices/abuse-victim/messages/devicebound".to_owned(),
        "messages/servicebound/feedback".to_owned(),
        "devices/abuse-victim/twin".to_owned(),
        REQUEST_TOPIC.to_owned(),
        format!("{NOTIFY_PREFIX}/00/command/notify/00"),
    ]
}

/// The longest key limit a node accepts (its state database stores keys of up to 65,535
/// bytes, and the expiry index adds 9): the attacks' SCAN patterns are up to this long.
const LONGEST_PATTERN: usize = 65_526;

/// The node flags the attacks need: SCAN patterns are one key long at most.
pub fn node_args() -> Vec<String> {
    vec!["--max-key-bytes".to_owned(), LONGEST_PATTERN.to_string()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_continuations_are_read() {
        assert_eq!(continuation(b"*1\r\n*0\r\n"), None);
        assert_eq!(continuation(b"-ERR syntax error\r\n"), None);
        assert_eq!(
            continuation(b"*2\r\n*1\r\n$1\r\na\r\n$3\r\ntok\r\n"),
            Some(b"tok".to_vec())
        );
        assert_eq!(
            continuation(b"*2\r\n*0\r\n$2\r\nxy\r\n"),
            Some(b"xy".to_vec())
        );
        assert_eq!(continuation(b"*2\r\n*1\r\n$1\r\na\r\n"), None);
    }

    #[test]
    fn patterns_fit_the_longest_key() {
        for pattern in [one_class_many_ranges(), many_classes(), unclosed_brackets()] {
            assert!(pattern.len() <= LONGEST_PATTERN, "{}", pattern.len());
            assert!(pattern.len() > 60_000, "{}", pattern.len());
        }
        assert_eq!(scan_key(7).len(), 64);
    }

    #[test]
    fn attacker_correlations_carry_the_mark() {
        let c = attack_correlation(5);
        assert_eq!(c.len(), 16);
        assert!(c.starts_with(MARK));
        assert_ne!(attack_correlation(6), c);
    }

    #[tokio::test]
    async fn the_pacer_keeps_its_rate() {
        let mut pacer = Pacer::new(200.0);
        let start = Instant::now();
        for _ in 0..21 {
            pacer.wait().await;
        }
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(100), "{took:?}");
        assert!(took < Duration::from_millis(400), "{took:?}");
    }
}
