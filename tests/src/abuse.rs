//! The abuse suite's shared parts (issue 27, tests `t89_abuse_*`): the names the fixes agreed
//! on, a well-behaved client working beside an attack ([`WellBehaved`]), a spy that sees what
//! the store publishes anywhere ([`Spy`]), an attacker's connection that floods without keeping
//! what comes back ([`Flooder`]), and a node's resident memory ([`memory_kib`],
//! [`reset_peak`]).
//!
//! An attacker here has only what every application on a shared broker has: it publishes on
//! the request topics and reads its own `clients/<id>/#` replies (the spy stands for everyone
//! else who could receive a forged message).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use azure_iot_operations_services::state_store::SetOptions;
use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PublishProperties};
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::raw::REQUEST_TOPIC;
use crate::sdk::SdkClient;

// ---------------------------------------------------------------------------------------------
// What the fixes agreed on (issue 27). If a name or text differs once merged, change it here.
// ---------------------------------------------------------------------------------------------

/// `statestore_server_requests_dropped_total{reason}` of a refused response topic.
pub const DROP_FORBIDDEN_RESPONSE_TOPIC: &str = "forbidden_response_topic";
/// `statestore_server_requests_dropped_total{reason}` of a request refused at the door for
/// carrying too many user properties.
pub const DROP_TOO_MANY_USER_PROPERTIES: &str = "too_many_properties";
/// Reply to a registration beyond `limits.max_observers_per_key`.
pub const QUOTA_EXCEEDED: &[u8] = b"-ERR the quota has been exceeded\r\n";
/// Reply to a SCAN pattern over the per-class or per-pattern range caps.
pub const SYNTAX_ERROR: &[u8] = b"-ERR syntax error\r\n";
/// Reply to a device-bound SEND with an application property named `$.…`.
pub const INVALID_PROPERTY_NAME: &[u8] = b"-ERR invalid property name\r\n";
/// Default of `limits.max_observers_per_key` (flag `--max-observers-per-key`).
pub const MAX_OBSERVERS_PER_KEY: usize = 1_000;
/// Default of `limits.outbound_budget_mb`: replies and notifications not yet acknowledged by
/// the broker, MiB.
pub const OUTBOUND_BUDGET_MIB: u64 = 64;
/// The flag that lets a node bind its HTTP listener off loopback without an admin token.
pub const ALLOW_INSECURE_HTTP: &str = "--allow-insecure-http";
/// Fewest characters a lock token of 128 random bits can take in printable ASCII (~6.5 bits
/// per character).
pub const MIN_TOKEN_CHARS: usize = 20;

// ---------------------------------------------------------------------------------------------
// Bounds of the suite
// ---------------------------------------------------------------------------------------------

/// Every request of the well-behaved client must be answered within this (liveness, not speed).
pub const LIVENESS: Duration = Duration::from_secs(5);
/// Longest an attack phase runs while waiting for the well-behaved client to make progress.
pub const ATTACK_CAP: Duration = Duration::from_secs(40);
/// Shortest attack phase: the attack runs at least this long beside the well-behaved client.
pub const ATTACK_MIN: Duration = Duration::from_secs(5);
/// The first bytes of every correlation data an attacker sends: a reply the store publishes on
/// an attacker's behalf carries it, wherever it lands.
pub const ATTACK_MARK: &[u8] = b"ATTACK";

/// Correlation data number `n` of an attacker: [`ATTACK_MARK`], two zero bytes, `n` big-endian.
pub fn attack_correlation(n: u64) -> Bytes {
    let mut bytes = Vec::with_capacity(16);
    bytes.extend_from_slice(ATTACK_MARK);
    bytes.extend_from_slice(&[0, 0]);
    bytes.extend_from_slice(&n.to_be_bytes());
    Bytes::from(bytes)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

// ---------------------------------------------------------------------------------------------
// The well-behaved client
// ---------------------------------------------------------------------------------------------

/// Pause between two requests of the well-behaved client (it is an application, not a load
/// generator; the machine running the suite has two cores).
const WELL_BEHAVED_PACE: Duration = Duration::from_millis(20);

/// What the well-behaved client saw.
#[derive(Debug, Default)]
pub struct WellBehavedReport {
    /// Requests answered correctly.
    pub answered: u64,
    /// Slowest answer.
    pub slowest: Duration,
    /// Requests not answered within [`LIVENESS`], answered wrongly, or failed.
    pub failures: Vec<String>,
}

impl WellBehavedReport {
    /// Asserts that every request was answered correctly within [`LIVENESS`] and that there
    /// were at least `at_least` of them.
    pub fn assert_live(&self, what: &str, at_least: u64) {
        println!(
            "{what}: well-behaved client: {} requests answered, slowest {} ms, {} failures",
            self.answered,
            self.slowest.as_millis(),
            self.failures.len()
        );
        assert!(
            self.failures.is_empty(),
            "{what}: the well-behaved client's requests were not all answered within \
             {LIVENESS:?}: {} failures, first: {:?}",
            self.failures.len(),
            self.failures.iter().take(3).collect::<Vec<_>>()
        );
        assert!(
            self.slowest <= LIVENESS,
            "{what}: a well-behaved request took {:?} (bound {LIVENESS:?})",
            self.slowest
        );
        assert!(
            self.answered >= at_least,
            "{what}: only {} well-behaved requests answered (expected at least {at_least})",
            self.answered
        );
    }
}

/// An application using the official SDK beside the attack: SETs (and every fourth time a GET
/// of what it wrote) in a closed loop, each with a [`LIVENESS`] timeout.
pub struct WellBehaved {
    answered: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    task: JoinHandle<WellBehavedReport>,
}

impl WellBehaved {
    /// Connects the SDK as `id` through the broker on `port`, waits until the store answers it,
    /// and starts the loop.
    pub async fn start(port: u16, id: &str) -> WellBehaved {
        let sdk = SdkClient::connect(port, id).await;
        crate::sdk_helpers::wait_serving(&sdk.client, Duration::from_secs(30)).await;
        let answered = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(well_behaved_loop(sdk, answered.clone(), stop.clone()));
        WellBehaved {
            answered,
            stop,
            task,
        }
    }

    /// Requests answered so far.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// Waits until `more` requests beyond those answered now are answered, or `cap` passes
    /// (the report then tells what went wrong); returns whether they were.
    pub async fn wait_more(&self, more: u64, cap: Duration) -> bool {
        let target = self.answered() + more;
        crate::wait_for(cap, || async { (self.answered() >= target).then_some(()) })
            .await
            .is_some()
    }

    /// The attack phase: waits until at least [`ATTACK_MIN`] passed, `more` requests beyond
    /// those answered now were answered, and `attack_done()` holds (the attack did enough to
    /// count), or [`ATTACK_CAP`] passed; returns whether all held.
    pub async fn outlast(&self, more: u64, attack_done: impl Fn() -> bool) -> bool {
        let started = Instant::now();
        let target = self.answered() + more;
        crate::wait_for(ATTACK_CAP, || async {
            (started.elapsed() >= ATTACK_MIN && self.answered() >= target && attack_done())
                .then_some(())
        })
        .await
        .is_some()
    }

    /// Stops the loop and returns what it saw.
    pub async fn finish(self) -> WellBehavedReport {
        self.stop.store(true, Ordering::Relaxed);
        match tokio::time::timeout(LIVENESS * 3, self.task).await {
            Ok(Ok(report)) => report,
            Ok(Err(err)) => WellBehavedReport {
                failures: vec![format!("the well-behaved client's task failed: {err}")],
                ..Default::default()
            },
            Err(_) => WellBehavedReport {
                failures: vec!["the well-behaved client's last request never ended".to_owned()],
                ..Default::default()
            },
        }
    }
}

async fn well_behaved_loop(
    sdk: SdkClient,
    answered: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> WellBehavedReport {
    let mut report = WellBehavedReport::default();
    let mut pace = tokio::time::interval(WELL_BEHAVED_PACE);
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        pace.tick().await;
        n += 1;
        let key = format!("{}-key-{}", sdk.client_id, n % 16).into_bytes();
        let value = format!("value-{n}").into_bytes();
        let started = Instant::now();
        let set = tokio::time::timeout(
            LIVENESS,
            sdk.client.set(
                key.clone(),
                value.clone(),
                LIVENESS,
                None,
                SetOptions::default(),
            ),
        )
        .await;
        let outcome = match set {
            Ok(Ok(reply)) if reply.response => Ok(()),
            Ok(Ok(reply)) => Err(format!("SET {n} not applied: {reply:?}")),
            Ok(Err(err)) => Err(format!("SET {n}: {err}")),
            Err(_) => Err(format!("SET {n}: no answer within {LIVENESS:?}")),
        };
        let outcome = match outcome {
            Ok(()) if n.is_multiple_of(4) => {
                match tokio::time::timeout(LIVENESS, sdk.client.get(key, LIVENESS)).await {
                    Ok(Ok(reply)) if reply.response.as_deref() == Some(&value[..]) => Ok(()),
                    Ok(Ok(reply)) => Err(format!("GET {n} returned {:?}", reply.response)),
                    Ok(Err(err)) => Err(format!("GET {n}: {err}")),
                    Err(_) => Err(format!("GET {n}: no answer within {LIVENESS:?}")),
                }
            }
            other => other,
        };
        let took = started.elapsed();
        match outcome {
            Ok(()) => {
                report.answered += 1;
                report.slowest = report.slowest.max(took);
                answered.fetch_add(1, Ordering::Relaxed);
            }
            Err(failure) => report.failures.push(format!("{failure} ({took:?})")),
        }
    }
    sdk.shutdown().await;
    report
}

// ---------------------------------------------------------------------------------------------
// The spy
// ---------------------------------------------------------------------------------------------

/// A message the spy received (payload kept only as its length).
#[derive(Debug, Clone)]
pub struct Seen {
    /// Topic.
    pub topic: String,
    /// Correlation data.
    pub correlation: Option<Bytes>,
    /// `__stat`, if any.
    pub stat: Option<String>,
    /// `__srcId`, if any.
    pub src_id: Option<String>,
    /// Payload length.
    pub payload_len: usize,
}

impl Seen {
    /// True if it carries an attacker's correlation data ([`ATTACK_MARK`]).
    pub fn from_attacker(&self) -> bool {
        self.correlation
            .as_deref()
            .is_some_and(|c| c.starts_with(ATTACK_MARK))
    }

    /// True if the store published it on an attacker's behalf: an answer (`__stat`) carrying
    /// an attacker's correlation data (the attacker's own requests carry no `__stat`).
    pub fn answer_to_attacker(&self) -> bool {
        self.from_attacker() && self.stat.is_some()
    }
}

/// Someone else on the broker: subscribed to filters of the test's choice (e.g. `#`), it
/// records every message it receives.
pub struct Spy {
    seen: Arc<Mutex<Vec<Seen>>>,
    arrived: Arc<Notify>,
    _client: AsyncClient,
    task: JoinHandle<()>,
}

impl Spy {
    /// Connects as `id` and subscribes to every filter in `filters` (waits for the SUBACKs).
    pub async fn connect(port: u16, id: &str, filters: &[&str]) -> Spy {
        let (client, mut eventloop) = AsyncClient::new(mqtt_options(port, id), 1024);
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let arrived = Arc::new(Notify::new());
        let (subscribed_tx, mut subscribed) = tokio::sync::mpsc::unbounded_channel();
        let task = {
            let seen = seen.clone();
            let arrived = arrived.clone();
            tokio::spawn(async move {
                loop {
                    match eventloop.poll().await {
                        Ok(Event::Incoming(Packet::Publish(p))) => {
                            let properties = p.properties.unwrap_or_default();
                            let user = |name: &str| {
                                properties
                                    .user_properties
                                    .iter()
                                    .find(|(k, _)| k == name)
                                    .map(|(_, v)| v.clone())
                            };
                            let (stat, src_id) = (user("__stat"), user("__srcId"));
                            lock(&seen).push(Seen {
                                topic: String::from_utf8_lossy(&p.topic).into_owned(),
                                correlation: properties.correlation_data,
                                stat,
                                src_id,
                                payload_len: p.payload.len(),
                            });
                            arrived.notify_waiters();
                        }
                        Ok(Event::Incoming(Packet::SubAck(_))) => {
                            let _ = subscribed_tx.send(());
                        }
                        Ok(_) => {}
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
            })
        };
        for filter in filters {
            client
                .subscribe(*filter, QoS::AtLeastOnce)
                .await
                .expect("spy subscribes");
            tokio::time::timeout(Duration::from_secs(10), subscribed.recv())
                .await
                .expect("spy SUBACK in time")
                .expect("spy event loop alive");
        }
        Spy {
            seen,
            arrived,
            _client: client,
            task,
        }
    }

    /// Everything seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        lock(&self.seen).clone()
    }

    /// Messages seen that carry an attacker's correlation data.
    pub fn from_attacker(&self) -> Vec<Seen> {
        lock(&self.seen)
            .iter()
            .filter(|s| s.from_attacker())
            .cloned()
            .collect()
    }

    /// Messages seen on topics starting with `prefix`.
    pub fn under(&self, prefix: &str) -> Vec<Seen> {
        lock(&self.seen)
            .iter()
            .filter(|s| s.topic.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// Waits until an answer (a message with `__stat`) carrying correlation data
    /// `correlation` arrived (true), or `within` passed (false).
    pub async fn wait_answer(&self, correlation: &[u8], within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let notified = self.arrived.notified();
            if lock(&self.seen)
                .iter()
                .any(|s| s.stat.is_some() && s.correlation.as_deref() == Some(correlation))
            {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return false;
            }
        }
    }
}

impl Drop for Spy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn mqtt_options(port: u16, id: &str) -> MqttOptions {
    let mut options = MqttOptions::new(id, "127.0.0.1", port);
    options.set_keep_alive(Duration::from_secs(30));
    options.set_max_packet_size(Some(16 << 20));
    options.set_outgoing_inflight_upper_limit(256);
    let mut network = options.network_options();
    network.set_tcp_nodelay(true);
    options.set_network_options(network);
    options
}

// ---------------------------------------------------------------------------------------------
// The attacker's connection
// ---------------------------------------------------------------------------------------------

/// Replies up to this size are kept (by correlation data) for the test to read.
const KEPT_REPLY_BYTES: usize = 4096;

struct FlooderState {
    replies: AtomicU64,
    other: AtomicU64,
    kept: Mutex<HashMap<Bytes, Bytes>>,
    arrived: Notify,
}

/// An attacker's MQTT connection: publishes whatever it is told with whatever properties,
/// counts what comes back (its replies on `clients/<id>/#`, anything else it subscribes to)
/// and keeps only small replies, so a flood of 4 MiB replies costs the test nothing.
pub struct Flooder {
    client: AsyncClient,
    /// Its client id.
    pub id: String,
    state: Arc<FlooderState>,
    next: AtomicU64,
    task: JoinHandle<()>,
}

impl Flooder {
    /// Connects as `id` and subscribes to `clients/<id>/#` and `extra` filters.
    pub async fn connect(port: u16, id: &str, extra: &[&str]) -> Flooder {
        let (client, mut eventloop) = AsyncClient::new(mqtt_options(port, id), 4096);
        let state = Arc::new(FlooderState {
            replies: AtomicU64::new(0),
            other: AtomicU64::new(0),
            kept: Mutex::default(),
            arrived: Notify::new(),
        });
        let reply_prefix = format!("clients/{id}/");
        let (subscribed_tx, mut subscribed) = tokio::sync::mpsc::unbounded_channel();
        let task = {
            let state = state.clone();
            tokio::spawn(async move {
                loop {
                    match eventloop.poll().await {
                        Ok(Event::Incoming(Packet::Publish(p))) => {
                            let topic = String::from_utf8_lossy(&p.topic);
                            if topic.starts_with(&reply_prefix) {
                                if let Some(correlation) =
                                    p.properties.and_then(|pr| pr.correlation_data)
                                    && p.payload.len() <= KEPT_REPLY_BYTES
                                {
                                    lock(&state.kept).insert(correlation, p.payload);
                                }
                                state.replies.fetch_add(1, Ordering::Relaxed);
                            } else {
                                state.other.fetch_add(1, Ordering::Relaxed);
                            }
                            state.arrived.notify_waiters();
                        }
                        Ok(Event::Incoming(Packet::SubAck(_))) => {
                            let _ = subscribed_tx.send(());
                        }
                        Ok(_) => {}
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
            })
        };
        let mut filters = vec![format!("clients/{id}/#")];
        filters.extend(extra.iter().map(|f| (*f).to_owned()));
        for filter in filters {
            client
                .subscribe(filter, QoS::AtLeastOnce)
                .await
                .expect("attacker subscribes");
            tokio::time::timeout(Duration::from_secs(10), subscribed.recv())
                .await
                .expect("attacker SUBACK in time")
                .expect("attacker event loop alive");
        }
        Flooder {
            client,
            id: id.to_owned(),
            state,
            next: AtomicU64::new(1),
            task,
        }
    }

    /// Its own response topic.
    pub fn response_topic(&self) -> String {
        format!("clients/{}/reply", self.id)
    }

    /// Well-formed request properties claiming to be `src_id`, answered on its own response
    /// topic, with a fresh attacker correlation ([`attack_correlation`]).
    pub fn properties_as(&self, src_id: &str) -> PublishProperties {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        PublishProperties {
            response_topic: Some(self.response_topic()),
            correlation_data: Some(attack_correlation(n)),
            message_expiry_interval: Some(30),
            user_properties: vec![
                ("__srcId".to_owned(), src_id.to_owned()),
                (
                    "__ts".to_owned(),
                    format!("{:015}:{:05}:{src_id}", crate::now_ms(), 0),
                ),
                ("__protVer".to_owned(), "1.0".to_owned()),
            ],
            ..Default::default()
        }
    }

    /// Well-formed request properties under its own id.
    pub fn properties(&self) -> PublishProperties {
        self.properties_as(&self.id.clone())
    }

    /// Publishes `payload` on `topic` at QoS 1 with `properties`.
    pub async fn publish(&self, topic: &str, payload: Vec<u8>, properties: PublishProperties) {
        self.client
            .publish_with_properties(topic, QoS::AtLeastOnce, false, payload, properties)
            .await
            .expect("attacker publishes");
    }

    /// Publishes a state store request; returns its correlation data.
    pub async fn send(&self, payload: Vec<u8>, properties: PublishProperties) -> Bytes {
        let correlation = properties.correlation_data.clone().unwrap_or_default();
        self.publish(REQUEST_TOPIC, payload, properties).await;
        correlation
    }

    /// Replies received on its own topics so far.
    pub fn replies(&self) -> u64 {
        self.state.replies.load(Ordering::Relaxed)
    }

    /// Messages received on the extra filters so far.
    pub fn others(&self) -> u64 {
        self.state.other.load(Ordering::Relaxed)
    }

    /// Waits until at least `count` replies arrived in all, or `within` passed; returns the
    /// count.
    pub async fn wait_replies(&self, count: u64, within: Duration) -> u64 {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let notified = self.state.arrived.notified();
            let now = self.replies();
            if now >= count || tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.replies();
            }
        }
    }

    /// Waits until `others()` reaches `count` or `within` passed; returns it.
    pub async fn wait_others(&self, count: u64, within: Duration) -> u64 {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let notified = self.state.arrived.notified();
            let now = self.others();
            if now >= count || tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.others();
            }
        }
    }

    /// Takes the kept reply (≤ 4 KiB) to the request with `correlation`, waiting up to
    /// `within`.
    pub async fn reply_to(&self, correlation: &[u8], within: Duration) -> Option<Bytes> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let notified = self.state.arrived.notified();
            if let Some(reply) = lock(&self.state.kept).remove(correlation) {
                return Some(reply);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }

    /// Sends `requests` with at most `in_flight` unanswered at a time, each waiting at most
    /// `each` for its reply; a request left unanswered (e.g. lost in a leader change on a
    /// loaded machine) is sent again as it was, twice at most (a retry takes effect once,
    /// protocol §6). Returns the replies in order (`None`: never answered, or over 4 KiB).
    pub async fn pipeline(
        &self,
        requests: Vec<(Vec<u8>, PublishProperties)>,
        in_flight: usize,
        each: Duration,
    ) -> Vec<Option<Bytes>> {
        let mut correlations = Vec::with_capacity(requests.len());
        let mut replies = Vec::with_capacity(requests.len());
        let mut waited = 0;
        for (payload, properties) in &requests {
            if correlations.len() - waited >= in_flight.max(1) {
                let correlation: &Bytes = &correlations[waited];
                replies.push(self.reply_to(correlation, each).await);
                waited += 1;
            }
            correlations.push(self.send(payload.clone(), properties.clone()).await);
        }
        for correlation in &correlations[waited..] {
            replies.push(self.reply_to(correlation, each).await);
        }
        for _ in 0..2 {
            for (i, (payload, properties)) in requests.iter().enumerate() {
                if replies[i].is_none() {
                    let correlation = self.send(payload.clone(), properties.clone()).await;
                    replies[i] = self.reply_to(&correlation, each).await;
                }
            }
        }
        replies
    }
}

impl Drop for Flooder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------------------------

/// `VmRSS` and `VmHWM` (the peak since start or since [`reset_peak`]) of a process, KiB.
pub fn memory_kib(pid: i32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Resets a process's peak resident size (`VmHWM`) to its current one (`clear_refs` 5);
/// false if the kernel refused (then `VmHWM` is the peak since start: a stricter bound).
pub fn reset_peak(pid: i32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), b"5").is_ok()
}

/// Per node: resident KiB when the watch started, for [`PeakWatch::growth_mib`].
pub struct PeakWatch {
    baseline: Vec<(i32, u64)>,
}

impl PeakWatch {
    /// Resets the peak of every process in `pids` and remembers its resident size now.
    pub fn start(pids: &[i32]) -> PeakWatch {
        PeakWatch {
            baseline: pids
                .iter()
                .map(|&pid| {
                    reset_peak(pid);
                    (pid, memory_kib(pid).0)
                })
                .collect(),
        }
    }

    /// Per process: (resident MiB at the start, peak growth since, MiB).
    pub fn growth_mib(&self) -> Vec<(u64, u64)> {
        self.baseline
            .iter()
            .map(|&(pid, base)| {
                let (_, peak) = memory_kib(pid);
                (base / 1024, peak.saturating_sub(base) / 1024)
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Metrics over a cluster
// ---------------------------------------------------------------------------------------------

/// Where a refused publish is counted: the request services' drops, or the device topics'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drops {
    /// `statestore_server_requests_dropped_total{reason}` (state store and device-bound service).
    Requests,
    /// `statestore_devicebound_device_publishes_dropped_total{reason}` (settlements, pulls).
    DevicePublishes,
}

impl Drops {
    fn series(self, reason: &str) -> String {
        let family = match self {
            Drops::Requests => "statestore_server_requests_dropped_total",
            Drops::DevicePublishes => "statestore_devicebound_device_publishes_dropped_total",
        };
        format!("{family}{{reason=\"{reason}\"}}")
    }
}

/// `statestore_server_requests_dropped_total{reason}` summed over the running nodes.
pub async fn dropped_on(cluster: &mut crate::cluster::Cluster, reason: &str) -> f64 {
    drops_on(cluster, Drops::Requests, reason).await
}

/// The drops of `kind` for `reason`, summed over the running nodes.
pub async fn drops_on(cluster: &mut crate::cluster::Cluster, kind: Drops, reason: &str) -> f64 {
    let series = kind.series(reason);
    let mut sum = 0.0;
    for node in cluster.nodes.iter_mut() {
        if node.is_running() {
            sum += node.metric(&series).await.unwrap_or(0.0);
        }
    }
    sum
}

/// Waits (at most `within`) until [`dropped_on`] reaches `at_least`; returns the last sum.
pub async fn wait_dropped_on(
    cluster: &mut crate::cluster::Cluster,
    reason: &str,
    at_least: f64,
    within: Duration,
) -> f64 {
    wait_drops_on(cluster, Drops::Requests, reason, at_least, within).await
}

/// Waits (at most `within`) until [`drops_on`] reaches `at_least`; returns the last sum.
pub async fn wait_drops_on(
    cluster: &mut crate::cluster::Cluster,
    kind: Drops,
    reason: &str,
    at_least: f64,
    within: Duration,
) -> f64 {
    let deadline = Instant::now() + within;
    loop {
        let now = drops_on(cluster, kind, reason).await;
        if now >= at_least || Instant::now() >= deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
