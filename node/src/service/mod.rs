//! The request service: what both endpoints share. Requests run through one
//! [`pipeline`] (intake → parse → admit → execute → reply) ending in one [`crate::verdict`]; the
//! endpoints ([`state_store`], [`devicebound`]) say how a request parses and executes.
//! [`Service`] holds what they execute with: Raft, the leader's HLC, the outbox, the settings.
//! Transport-agnostic: it reads [`InboundMessage`]s and writes to an [`Outbox`].
//!
//! Validation happens here, at the door; only checked, typed mutations reach the log. The
//! leader's HLC stamps proposals under one lock, in the same order they enter the log.
//!
//! Time: every monotonic instant here and in the submodules (request deadlines, Message Expiry
//! accounting, leader-duty timing) is a [`tokio::time::Instant`], so a paused Tokio clock
//! controls it in tests; wall time (HLC stamps, key expiry, the remembered-reply window) is read
//! from one [`WallClock`], the system's unless [`Service::with_wall_clock`] injects another.

pub mod answer;
pub mod device_forward;
pub mod device_push;
pub mod device_sweep;
pub mod devicebound;
pub mod envelope;
pub mod expiry;
pub mod leader;
pub mod notify;
pub mod notify_queue;
pub mod offline_devices;
pub mod pipeline;
pub mod reply_room;
pub mod reply_topic;
pub mod request_digest;
pub mod state_store;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use statestore_raft::RaftNode;
use statestore_storage::devicebound::{DeviceIndex, TokenSeed};
use statestore_storage::keyspace::read;
use statestore_storage::machine::read as machine_read;
use statestore_storage::machine::{Mutation, Outcome, Proposal, RequestId};
use statestore_vocab::hlc::{Hlc, HlcClock, SystemClock, WallClock};
use tokio::sync::{Mutex, Notify};
use tracing::Instrument;

use crate::authz::Authorizer;
use crate::metrics::NodeMetrics;
use crate::transport::{InboundMessage, Outbox};
use crate::verdict::{NoReply, Unavailable};
use envelope::Envelope;
use offline_devices::OfflineDevices;
use statestore_protocol::ProtocolLimits;

pub use devicebound::Devicebound;
pub use state_store::StateStore;

/// Longest client id accepted for KEYNOTIFY registrations.
pub const MAX_CLIENT_ID_BYTES: usize = 1024;

/// SCAN pages built at once, each on a thread of Tokio's blocking pool (issue 27): more SCANs
/// wait for a slot (up to their request deadline), so hostile SCANs can hold at most this many
/// threads (and cores) for at most one page's `max_duration` (plus one key) each.
pub const SCAN_SLOTS: usize = 2;

/// How often a request held by a leader that paused serving looks whether it serves again.
pub const SERVING_RECHECK: Duration = Duration::from_millis(5);

/// Service settings.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Door limits (§9).
    pub protocol: ProtocolLimits,
    /// How long replies are remembered when a request has no Message Expiry (§6).
    pub default_dedup_window: Duration,
    /// Upper bound on how long any reply is remembered (bounds the reply memory).
    pub max_dedup_window: Duration,
    /// This node's MQTT client id (sent as `__srcId` on replies).
    pub node_client_id: String,
    /// Longest a request may take (less when its Message Expiry is sooner); past it the
    /// request gets no reply and the client's retry finds the remembered reply, if any.
    pub request_timeout: Duration,
    /// Door limits of the device-bound service.
    pub devicebound: statestore_protocol::devicebound::DeviceboundLimits,
    /// What one SCAN page may cost.
    pub scan_page: statestore_protocol::scan::PageLimits,
    /// Where replies may be published (§1, devicebound.md §3).
    pub reply_topics: reply_topic::ReplyTopics,
    /// Who a request comes from (`auth.identity`).
    pub identity: envelope::RequesterIdentity,
}

/// Counts requests being processed so shutdown can wait for them.
#[derive(Default)]
pub struct InFlight {
    count: std::sync::atomic::AtomicUsize,
    drained: Notify,
}

impl InFlight {
    fn enter(self: &Arc<Self>) -> InFlightGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(self.clone())
    }

    /// Waits until no request is in flight or `timeout` passes; returns how many remain.
    pub async fn wait_drained(&self, timeout: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.drained.notified();
            let remaining = self.count.load(Ordering::SeqCst);
            if remaining == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.count.load(Ordering::SeqCst);
            }
        }
    }
}

struct InFlightGuard(Arc<InFlight>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.drained.notify_waiters();
        }
    }
}

/// The request service of one node.
pub struct Service<O: Outbox> {
    raft: RaftNode,
    clock: Mutex<HlcClock<Arc<dyn WallClock>>>,
    wall: Arc<dyn WallClock>,
    outbox: O,
    config: ServiceConfig,
    metrics: Arc<NodeMetrics>,
    /// True while this node is the leader and has finished taking over (leader duties run).
    serving: Arc<AtomicBool>,
    in_flight: Arc<InFlight>,
    /// Highest time a GET on this node has used: a key seen expired stays expired for later
    /// reads even if the wall clock steps back.
    read_floor_ms: std::sync::atomic::AtomicU64,
    /// Woken whenever a device-bound command commits here (the device push looks again).
    device_wake: Arc<Notify>,
    /// Devices found offline (the device push records them): SEND to a device backing off is
    /// a plain `Send`, to any other a `SendAndDeliver`.
    offline_devices: Arc<OfflineDevices>,
    /// [`SCAN_SLOTS`] permits: one per SCAN page being built.
    scan_slots: Arc<tokio::sync::Semaphore>,
    /// The policy in force (`auth.policy_file`).
    authorizer: Arc<Authorizer>,
    /// Set by [`Service::close`] at shutdown.
    closing: AtomicBool,
}

impl<O: Outbox> Service<O> {
    /// A service proposing through `raft`, stamping with an HLC named `node_name`; SENDs look
    /// up `offline_devices` (which the device push keeps).
    pub fn new(
        raft: RaftNode,
        node_name: &str,
        outbox: O,
        config: ServiceConfig,
        metrics: Arc<NodeMetrics>,
        serving: Arc<AtomicBool>,
        offline_devices: Arc<OfflineDevices>,
    ) -> Self {
        let wall: Arc<dyn WallClock> = Arc::new(SystemClock);
        Service {
            raft,
            clock: Mutex::new(HlcClock::new(node_name, wall.clone())),
            wall,
            outbox,
            config,
            metrics,
            serving,
            in_flight: Arc::default(),
            read_floor_ms: std::sync::atomic::AtomicU64::new(0),
            device_wake: Arc::default(),
            offline_devices,
            scan_slots: Arc::new(tokio::sync::Semaphore::new(SCAN_SLOTS)),
            authorizer: Arc::new(Authorizer::open()),
            closing: AtomicBool::new(false),
        }
    }

    /// Enforces `authorizer`'s policy (without one, every request is allowed).
    pub fn with_authorizer(mut self, authorizer: Arc<Authorizer>) -> Self {
        self.authorizer = authorizer;
        self
    }

    /// The same service reading wall time from `wall` instead of the system clock (tests: a
    /// [`statestore_vocab::hlc::ManualClock`]). Call before the service handles anything.
    pub fn with_wall_clock(mut self, wall: Arc<dyn WallClock>) -> Self {
        let node = self.clock.get_mut().node().to_owned();
        self.clock = Mutex::new(HlcClock::new(node, wall.clone()));
        self.wall = wall;
        self
    }

    /// Counts a request that gets no reply (`statestore_server_requests_dropped_total`).
    fn count_no_reply(&self, no_reply: &NoReply) {
        self.metrics.service.dropped(no_reply.label());
    }

    /// Requests being processed.
    pub fn in_flight(&self) -> Arc<InFlight> {
        self.in_flight.clone()
    }

    /// The outbox replies go to.
    pub fn outbox(&self) -> &O {
        &self.outbox
    }

    /// True while leader duties run on this node.
    pub fn is_serving(&self) -> bool {
        self.serving.load(Ordering::SeqCst)
    }

    /// Returns once this node serves requests; `NotLeader` at once when Raft says another
    /// node leads (or none), or when the node is shutting down ([`Service::close`]). A leader
    /// that paused serving (its quorum acknowledgement late, a take-over under way) is waited
    /// for: the flag flips without an event to await, so it is looked at again every
    /// [`SERVING_RECHECK`] and at every leadership change; the caller bounds the wait.
    pub async fn wait_until_serving(&self) -> Result<(), Unavailable> {
        let closing = || self.closing.load(Ordering::SeqCst);
        if self.is_serving() && !closing() {
            return Ok(());
        }
        let mut leadership = self.raft.leadership();
        loop {
            if closing() {
                return Err(Unavailable::NotLeader);
            }
            if self.is_serving() {
                return Ok(());
            }
            if !leadership.borrow_and_update().is_leader {
                return Err(Unavailable::NotLeader);
            }
            tokio::select! {
                _ = leadership.changed() => {}
                () = tokio::time::sleep(SERVING_RECHECK) => {}
            }
        }
    }

    /// The node is shutting down: requests not yet admitted are dropped (the client retries
    /// at the next leader) instead of waiting for this node to serve again.
    pub fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

    /// Who asked what (§6): the reply memory's key for a request with `envelope` and the
    /// digest of what it asks ([`request_digest`]).
    fn request_id(
        &self,
        envelope: &Envelope,
        message_expiry_secs: Option<u32>,
        digest: u128,
    ) -> RequestId {
        RequestId {
            client: envelope
                .client_id
                .as_deref()
                .unwrap_or(&envelope.response_topic)
                .as_bytes()
                .to_vec(),
            correlation: envelope.correlation_data.to_vec(),
            remember_for_ms: self.dedup_window(message_expiry_secs),
            digest,
        }
    }

    fn dedup_window(&self, message_expiry_secs: Option<u32>) -> u64 {
        let window = message_expiry_secs.map_or(self.config.default_dedup_window, |s| {
            Duration::from_secs(u64::from(s))
        });
        u64::try_from(window.min(self.config.max_dedup_window).as_millis()).unwrap_or(u64::MAX)
    }

    /// The time a linearizable read uses: never behind an earlier read on this node (a key
    /// seen expired stays expired), within the same bound the replicated floor has
    /// (`machine_read::store_time`).
    fn read_time(&self, view: &statestore_storage::store::StateView) -> Result<u64, Unavailable> {
        let floor = read::meta(view)?
            .time_floor_ms
            .max(self.read_floor_ms.load(Ordering::SeqCst));
        let time = machine_read::store_time(floor, self.wall.now_ms());
        self.read_floor_ms.fetch_max(time, Ordering::SeqCst);
        Ok(time)
    }

    /// Stamps `mutation` with the leader HLC (merged with the request's `__ts`) and
    /// replicates it; returns what apply decided.
    #[tracing::instrument(level = "debug", name = "propose", skip_all, fields(mutation = mutation.kind()))]
    async fn propose(
        &self,
        request: Option<RequestId>,
        mutation: Mutation,
        request_ts: Option<&Hlc>,
    ) -> Result<Outcome, Unavailable> {
        // Replicated to a quorum, committed and applied.
        let commit = tracing::debug_span!("commit");
        let pending = {
            let mut clock = self.clock.lock().await;
            let stamp = match request_ts {
                Some(ts) => clock
                    .update(ts)
                    .map_err(|e| Unavailable::Internal(e.into()))?,
                None => clock.now(),
            };
            // The randomness of the lock tokens a device-bound command may issue: apply
            // derives their secrets from it and reads no random source itself.
            let token_seed = matches!(mutation, Mutation::Device(_))
                .then(|| TokenSeed(rand::random::<[u8; 32]>()));
            let proposal = Proposal {
                stamp,
                wall_ms: clock.wall_ms(),
                request,
                mutation,
                token_seed,
            };
            // Submitted under the clock lock: stamps enter the log in increasing order. The
            // log append, fsync and apply spans of its batch hang under `commit`.
            commit.in_scope(|| self.raft.submit(proposal))?
        };
        let outcome = pending.outcome().instrument(commit).await?;
        if let Outcome::Device(device) = &outcome {
            // Remembered replies carry zero counters: nothing is counted twice.
            self.metrics.devicebound.record(&device.counters);
            // The *AndDeliver commands delivered whatever their device had deliverable.
            let delivered_already = device.result.without_deliveries().is_some();
            if device.counters != Default::default() && !delivered_already {
                self.device_wake.notify_one();
            }
        }
        Ok(outcome)
    }

    /// Woken whenever a device-bound command commits on this node.
    pub fn device_wake(&self) -> Arc<Notify> {
        self.device_wake.clone()
    }

    /// The devices found offline, shared with the device push.
    pub fn offline_devices(&self) -> &OfflineDevices {
        &self.offline_devices
    }

    /// Internal proposal (sweeps, departed clients, limits) with no reply memory.
    pub async fn propose_internal(&self, mutation: Mutation) -> Result<Outcome, Unavailable> {
        self.propose(None, mutation, None).await
    }

    /// Raises the HLC above every version in the store (called on becoming leader).
    pub async fn catch_up_clock(&self) -> Result<(), Unavailable> {
        let meta = read::meta(&self.raft.view())?;
        if let Some(max) = &meta.max_version {
            self.clock.lock().await.observe(max);
        }
        Ok(())
    }

    /// The node's Raft handle.
    pub fn raft(&self) -> &RaftNode {
        &self.raft
    }

    /// Node metrics.
    pub fn metrics(&self) -> &Arc<NodeMetrics> {
        &self.metrics
    }

    /// Runs `read` on the device queues' index of the committed state. Apply holds the index
    /// while it applies and commits a chunk (CPU work, not disk waits; a snapshot install holds
    /// it longer), so on a multi-threaded runtime the wait happens in `block_in_place`: the
    /// worker's other tasks move elsewhere meanwhile.
    pub fn read_device_index<R>(&self, read: impl FnOnce(&DeviceIndex) -> R) -> R {
        let view = self.raft.view();
        let run = || read(&view.device_index());
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(run),
            _ => run(),
        }
    }

    /// Wall clock used for reads and expiry decisions at the door.
    pub fn wall_ms(&self) -> u64 {
        self.wall.now_ms()
    }
}

/// The `request` span of an inbound request to `service`: `command` and `result` are recorded
/// as they become known; it continues the W3C trace in the request's `traceparent` (and
/// `tracestate`) user properties.
pub(crate) fn request_span(message: &InboundMessage, service: &'static str) -> tracing::Span {
    let span = tracing::debug_span!(
        "request",
        service,
        command = tracing::field::Empty,
        result = tracing::field::Empty
    );
    if !span.is_disabled() {
        crate::telemetry::continue_remote_trace(
            &span,
            message.user_property("traceparent"),
            message.user_property("tracestate"),
        );
    }
    span
}

/// Keeps a gauge incremented for its lifetime.
struct GaugeGuard<'a>(&'a prometheus::IntGauge);

impl<'a> GaugeGuard<'a> {
    fn new(gauge: &'a prometheus::IntGauge) -> Self {
        gauge.inc();
        GaugeGuard(gauge)
    }
}

impl Drop for GaugeGuard<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}
