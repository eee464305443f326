//! The request service: envelope → parse → validate → linearizable read or typed proposal →
//! reply. Transport-agnostic: it reads [`InboundMessage`]s and writes to an [`Outbox`].
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
pub mod reply_room;
pub mod reply_topic;
pub mod request_digest;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use statestore_raft::RaftNode;
use statestore_storage::devicebound::{DeviceIndex, TokenSeed};
use statestore_storage::hlc::{Hlc, HlcClock, MAX_CLOCK_DRIFT_MS, SystemClock, WallClock};
use statestore_storage::keyspace::{self, read};
use statestore_storage::machine::read as machine_read;
use statestore_storage::machine::{Mutation, Outcome, Proposal, RequestId};
use tokio::sync::{Mutex, Notify};
use tokio::time::Instant;
use tracing::Instrument;

use crate::metrics::NodeMetrics;
use crate::protocol::{self, Command, ErrorReply, ProtocolLimits, Reply};
use crate::transport::{InboundMessage, Outbox};
use answer::Answer;
use envelope::Envelope;
use reply_room::ReplyRoom;

/// Longest client id accepted for KEYNOTIFY registrations.
pub const MAX_CLIENT_ID_BYTES: usize = 1024;

/// SCAN pages built at once, each on a thread of Tokio's blocking pool (issue 27): more SCANs
/// wait for a slot (up to their request deadline), so hostile SCANs can hold at most this many
/// threads (and cores) for at most one page's `max_duration` (plus one key) each.
pub const SCAN_SLOTS: usize = 2;

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
    pub devicebound: crate::devicebound::DeviceboundLimits,
    /// What one SCAN page may cost.
    pub scan_page: protocol::scan::PageLimits,
    /// Where replies may be published (§1, devicebound.md §3).
    pub reply_topics: reply_topic::ReplyTopics,
}

/// Why a request could not be served here (it gets no reply; the client retries).
#[derive(Debug)]
enum Unavailable {
    /// Not the serving leader (or no longer).
    NotLeader,
    /// The proposal queue is full.
    Overloaded,
    /// The request's deadline passed before its outcome was known.
    TimedOut,
    Internal(String),
}

impl Unavailable {
    /// Label for `requests_total{result}` and `requests_dropped_total{reason}`.
    fn label(&self) -> &'static str {
        match self {
            Unavailable::NotLeader => "not_leader",
            Unavailable::Overloaded => "overloaded",
            Unavailable::TimedOut => "timed_out",
            Unavailable::Internal(_) => "internal",
        }
    }
}

impl From<statestore_raft::Error> for Unavailable {
    fn from(err: statestore_raft::Error) -> Self {
        match err {
            statestore_raft::Error::NotLeader { .. } | statestore_raft::Error::QuorumNotReached => {
                Unavailable::NotLeader
            }
            statestore_raft::Error::Overloaded => Unavailable::Overloaded,
            other => Unavailable::Internal(other.to_string()),
        }
    }
}

impl From<statestore_storage::StorageError> for Unavailable {
    fn from(err: statestore_storage::StorageError) -> Self {
        Unavailable::Internal(err.to_string())
    }
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
    /// Offline devices backing off (device push). SEND reads it too: a device backing off
    /// gets a plain `Send`, any other a `SendAndDeliver`.
    device_backoffs: std::sync::Mutex<device_push::Backoffs>,
    /// [`SCAN_SLOTS`] permits: one per SCAN page being built.
    scan_slots: Arc<tokio::sync::Semaphore>,
}

impl<O: Outbox> Service<O> {
    /// The request's envelope (protocol §1, §5.2), or `None` once it has been dealt with:
    /// dropped without a reply (counted by reason) or answered `__stat` 505 for an unsupported
    /// protocol version. Shared by the state store and the device-bound service.
    async fn open_envelope(&self, message: &InboundMessage, started: Instant) -> Option<Envelope> {
        let envelope = match envelope::check(message, started, &self.config.reply_topics) {
            Ok(envelope) => envelope,
            Err(refusal) => {
                self.metrics.service.dropped(refusal.label());
                tracing::debug!(reason = refusal.label(), topic = %message.topic, "request dropped without reply");
                return None;
            }
        };
        if let Err(requested) = envelope::check_protocol_version(message) {
            self.metrics.service.unsupported_version_total.inc();
            let expiry = envelope::remaining_expiry_secs(envelope.deadline, Instant::now());
            self.outbox
                .publish(envelope::unsupported_version(&envelope, requested, expiry))
                .await;
            return None;
        }
        Some(envelope)
    }

    /// A service proposing through `raft`, stamping with an HLC named `node_name`.
    pub fn new(
        raft: RaftNode,
        node_name: &str,
        outbox: O,
        config: ServiceConfig,
        metrics: Arc<NodeMetrics>,
        serving: Arc<AtomicBool>,
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
            device_backoffs: std::sync::Mutex::new(device_push::Backoffs::new(
                device_push::MAX_BACKOFF_DEVICES,
            )),
            scan_slots: Arc::new(tokio::sync::Semaphore::new(SCAN_SLOTS)),
        }
    }

    /// The same service reading wall time from `wall` instead of the system clock (tests: a
    /// [`statestore_storage::hlc::ManualClock`]). Call before the service handles anything.
    pub fn with_wall_clock(mut self, wall: Arc<dyn WallClock>) -> Self {
        let node = self.clock.get_mut().node().to_owned();
        self.clock = Mutex::new(HlcClock::new(node, wall.clone()));
        self.wall = wall;
        self
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

    /// Handles one request end to end: it is answered, refused without a reply, or (when
    /// this node cannot serve it) left for the client to retry. Traced as a `request` span
    /// (continuing the request's `traceparent`) with a child per stage.
    pub async fn handle(self: Arc<Self>, message: InboundMessage) {
        let span = request_span(&message, "statestore");
        self.serve(message).instrument(span).await;
    }

    async fn serve(self: Arc<Self>, message: InboundMessage) {
        let _guard = self.in_flight.enter();
        let _gauge = GaugeGuard::new(&self.metrics.service.requests_in_flight);
        let started = Instant::now();
        let Some(envelope) = self.open_envelope(&message, started).await else {
            return;
        };

        let parsed = tracing::debug_span!("validate")
            .in_scope(|| protocol::parse_command(&message.payload, &self.config.protocol));
        let verb = match &parsed {
            Ok(command) => command.verb(),
            Err(_) => protocol::sniff_verb(&message.payload),
        };
        let span = tracing::Span::current();
        span.record("command", verb.label());
        // Past this instant nobody waits for the reply: give up (the proposal, if already
        // submitted, still commits, and a retry finds its remembered reply).
        let give_up = envelope
            .deadline
            .map_or(started + self.config.request_timeout, |deadline| {
                deadline.min(started + self.config.request_timeout)
            });
        let mut room = ReplyRoom::new(&envelope, &self.config.node_client_id);
        let result = match parsed {
            Ok(command) => tokio::time::timeout_at(
                give_up,
                self.execute(command, &message, &envelope, &mut room),
            )
            .await
            .unwrap_or(Err(Unavailable::TimedOut)),
            Err(err) => Ok(Answer::error(err.into())),
        };
        let elapsed = started.elapsed().as_secs_f64();
        match result {
            Ok(answer) => {
                let label = answer.reply.result_label();
                span.record("result", label);
                let now = Instant::now();
                let expiry = envelope::remaining_expiry_secs(envelope.deadline, now);
                if expiry == Some(0) {
                    // The requester gave up; its retry (if any) gets the remembered reply.
                    self.metrics.service.dropped("expired");
                    return;
                }
                let version = answer.version.map(|v| v.to_string());
                let reply = envelope::reply(
                    &envelope,
                    answer.reply.encode(),
                    version,
                    &self.config.node_client_id,
                    expiry,
                );
                self.outbox
                    .publish_charged(reply, room.take())
                    .instrument(tracing::debug_span!("reply"))
                    .await;
                self.metrics.service.observe(verb, label, elapsed);
            }
            Err(unavailable) => {
                let label = unavailable.label();
                span.record("result", label);
                self.metrics.service.observe(verb, label, elapsed);
                self.metrics.service.dropped(label);
                match unavailable {
                    Unavailable::Internal(err) => {
                        tracing::warn!(error = %err, command = verb.label(), "request failed; no reply sent");
                    }
                    other => tracing::debug!(reason = other.label(), "request not served"),
                }
            }
        }
    }

    /// Validates the request's timestamps and runs the command; a read takes `room` for its
    /// reply before it is built.
    async fn execute(
        &self,
        command: Command<'_>,
        message: &InboundMessage,
        envelope: &Envelope,
        room: &mut ReplyRoom,
    ) -> Result<Answer, Unavailable> {
        if !self.is_serving() {
            // Arrived before this node released the subscription (or while it lost its
            // quorum): another node may be leading; the client retries there.
            return Err(Unavailable::NotLeader);
        }
        let prepared =
            tracing::debug_span!("validate").in_scope(|| self.prepare(command, message, envelope));
        let (mutation, request_ts) = match prepared {
            Err(refused) => return Ok(Answer::error(refused)),
            Ok(Prepared::Read { key }) => return self.read_in_room(room, || self.get(key)).await,
            Ok(Prepared::Scan { pattern, after }) => {
                return self
                    .read_in_room(room, || self.scan(pattern.clone(), after))
                    .await;
            }
            Ok(Prepared::Write {
                mutation,
                request_ts,
            }) => (mutation, request_ts),
        };
        let digest =
            request_digest::request_digest(message, request_digest::EffectProperties::StateStore);
        let request = self.request_id(envelope, message.message_expiry_secs, digest);
        if let Some(outcome) =
            machine_read::remembered_reply(&self.raft.view(), &request, self.wall.now_ms())?
        {
            self.metrics.service.dedup_hits_total.inc();
            return Ok(answer::from_outcome(outcome));
        }
        let outcome = self
            .propose(Some(request), mutation, request_ts.as_ref())
            .await?;
        Ok(answer::from_outcome(outcome))
    }

    /// The checks at the door (§5): timestamps, fencing tokens, the client id of KEYNOTIFY; a
    /// read, a typed mutation, or the error reply.
    fn prepare<'a>(
        &self,
        command: Command<'a>,
        message: &InboundMessage,
        envelope: &Envelope,
    ) -> Result<Prepared<'a>, ErrorReply> {
        let request_ts = match message.user_property("__ts").map(Hlc::parse) {
            None => None,
            Some(Ok(ts)) => Some(ts),
            Some(Err(_)) => return Err(ErrorReply::MalformedTimestamp),
        };
        if matches!(command, Command::Set { .. }) && request_ts.is_none() {
            return Err(ErrorReply::MissingTimestamp);
        }
        let fenced = matches!(
            command,
            Command::Set { .. } | Command::Del { .. } | Command::VDel { .. }
        );
        let fencing_token = match message
            .user_property("__ft")
            .filter(|_| fenced)
            .map(Hlc::parse)
        {
            None => None,
            Some(Ok(ft)) => Some(ft),
            Some(Err(_)) => return Err(ErrorReply::MalformedTimestamp),
        };
        let limit = self.wall.now_ms().saturating_add(MAX_CLOCK_DRIFT_MS);
        if request_ts.as_ref().is_some_and(|ts| ts.ms > limit) {
            return Err(ErrorReply::TimestampSkew);
        }
        if fencing_token.as_ref().is_some_and(|ft| ft.ms > limit) {
            return Err(ErrorReply::FencingTokenSkew);
        }

        let mutation = match command {
            Command::Get { key } => return Ok(Prepared::Read { key }),
            Command::Scan { pattern, after } => return Ok(Prepared::Scan { pattern, after }),
            Command::Set {
                key,
                value,
                condition,
                expire_after_ms,
            } => Mutation::Set {
                key: key.to_vec(),
                value: value.to_vec(),
                condition: match condition {
                    protocol::SetCondition::Always => keyspace::SetCondition::Always,
                    protocol::SetCondition::IfAbsent => keyspace::SetCondition::IfAbsent,
                    protocol::SetCondition::IfAbsentOrEqual => {
                        keyspace::SetCondition::IfAbsentOrEqual
                    }
                },
                expire_after_ms,
                fencing_token,
            },
            Command::Del { key } => Mutation::Del {
                key: key.to_vec(),
                fencing_token,
            },
            Command::VDel { key, value } => Mutation::VDel {
                key: key.to_vec(),
                value: value.to_vec(),
                fencing_token,
            },
            Command::KeyNotify { key, stop } => {
                // The client id becomes part of a topic (hex-encoded): keep it well inside MQTT's
                // 64 KiB topic limit.
                let Some(client) = envelope
                    .client_id
                    .clone()
                    .filter(|c| c.len() <= MAX_CLIENT_ID_BYTES)
                else {
                    return Err(ErrorReply::Syntax);
                };
                if !stop && !notify::notify_topic_fits(&client, key) {
                    // Its notifications could not be published: refused like an over-long key.
                    return Err(ErrorReply::Syntax);
                }
                if stop {
                    Mutation::Unobserve {
                        client,
                        key: key.to_vec(),
                    }
                } else {
                    Mutation::Observe {
                        client,
                        key: key.to_vec(),
                    }
                }
            }
        };
        Ok(Prepared::Write {
            mutation,
            request_ts,
        })
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
    fn read_time(&self, view: &statestore_storage::sled::StateView) -> Result<u64, Unavailable> {
        let floor = read::meta(view)?
            .time_floor_ms
            .max(self.read_floor_ms.load(Ordering::SeqCst));
        let time = machine_read::store_time(floor, self.wall.now_ms());
        self.read_floor_ms.fetch_max(time, Ordering::SeqCst);
        Ok(time)
    }

    /// A read (GET, SCAN) with room for its reply in the outbound budget ([`reply_room`]):
    /// what it read when the replies lane has no room for it is let go, and read again
    /// (linearizably, later) once there is.
    async fn read_in_room<F, Fut>(
        &self,
        room: &mut ReplyRoom,
        read: F,
    ) -> Result<Answer, Unavailable>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<Answer, Unavailable>>,
    {
        loop {
            let answer = read().await?;
            let version_bytes = answer.version.as_ref().map(|v| v.to_string().len());
            let bytes = room.reply_bytes(reply_room::payload_bytes(&answer.reply), version_bytes);
            if room.fits(&self.outbox, bytes) {
                return Ok(answer);
            }
            drop(answer);
            room.wait(&self.outbox, bytes).await;
        }
    }

    /// GET: a linearizable read at the leader's time (expired keys are invisible, §8).
    #[tracing::instrument(level = "debug", name = "read", skip_all)]
    async fn get(&self, key: &[u8]) -> Result<Answer, Unavailable> {
        self.raft.ensure_linearizable().await?;
        let view = self.raft.view();
        let time = self.read_time(&view)?;
        Ok(match read::live_record(&view, key, time)? {
            Some(record) => Answer {
                reply: Reply::Bulk(record.value),
                version: Some(record.version),
            },
            None => Answer {
                reply: Reply::Nil,
                version: None,
            },
        })
    }

    /// SCAN: one page of the live keys matching `pattern` after `after`, read linearizably like
    /// GET; the page's work is bounded by [`protocol::scan::PageLimits`], its time by their
    /// `max_duration`. The page is built off the runtime, on the blocking pool, in one of
    /// [`SCAN_SLOTS`] slots; a SCAN without a free slot waits for one (its request deadline
    /// still applies). The slot is held until the page is built, also when the request gave up
    /// meanwhile, so the slots bound the threads SCANs occupy.
    #[tracing::instrument(level = "debug", name = "read", skip_all)]
    async fn scan(
        &self,
        pattern: protocol::glob::Glob,
        after: Option<&[u8]>,
    ) -> Result<Answer, Unavailable> {
        let slot = {
            let _waiting = GaugeGuard::new(&self.metrics.service.scan_pages_waiting);
            self.scan_slots
                .clone()
                .acquire_owned()
                .await
                .map_err(|closed| Unavailable::Internal(format!("SCAN slots: {closed}")))?
        };
        self.raft.ensure_linearizable().await?;
        let view = self.raft.view();
        let time = self.read_time(&view)?;
        let after = after.map(<[u8]>::to_vec);
        let limits = self.config.scan_page;
        let metrics = self.metrics.clone();
        let built = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let service = &metrics.service;
            let _in_flight = GaugeGuard::new(&service.scan_pages_in_flight);
            let started = Instant::now();
            let deadline = started + limits.max_duration;
            let stored = read::keys_after(&view, after.as_deref(), time).map(|entry| {
                entry.map(|(key, live, stored_bytes)| protocol::scan::StoredKey {
                    key,
                    live,
                    stored_bytes,
                })
            });
            let built = protocol::scan::page_until(&pattern, stored, &limits, || {
                Instant::now() >= deadline
            });
            service
                .scan_page_duration_seconds
                .observe(started.elapsed().as_secs_f64());
            if let Ok((_, end)) = &built {
                service
                    .scan_pages_total
                    .with_label_values(&[end.label()])
                    .inc();
            }
            built
        })
        .await
        .map_err(|failed| Unavailable::Internal(format!("SCAN page task: {failed}")))?;
        let (page, _end) = built?;
        Ok(Answer {
            reply: Reply::Keys(page),
            version: None,
        })
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
                    .map_err(|e| Unavailable::Internal(e.to_string()))?,
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

    /// Runs `f` on the offline devices' backoffs and updates their gauge.
    pub fn with_device_backoffs<R>(&self, f: impl FnOnce(&mut device_push::Backoffs) -> R) -> R {
        let mut backoffs = self
            .device_backoffs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let result = f(&mut backoffs);
        self.metrics
            .devicebound
            .devices_in_backoff
            .set(i64::try_from(backoffs.len()).unwrap_or(i64::MAX));
        result
    }

    /// Internal proposal (sweeps, departed clients, limits) with no reply memory.
    pub async fn propose_internal(&self, mutation: Mutation) -> Result<Outcome, String> {
        self.propose(None, mutation, None)
            .await
            .map_err(|e| format!("{e:?}"))
    }

    /// Raises the HLC above every version in the store (called on becoming leader).
    pub async fn catch_up_clock(&self) -> Result<(), String> {
        let meta = read::meta(&self.raft.view()).map_err(|e| e.to_string())?;
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

/// What a request becomes once checked at the door (a short-lived stack value: the size of
/// the write variant costs nothing).
#[allow(clippy::large_enum_variant)]
enum Prepared<'a> {
    /// A linearizable GET of `key`.
    Read { key: &'a [u8] },
    /// A linearizable SCAN page.
    Scan {
        pattern: protocol::glob::Glob,
        after: Option<&'a [u8]>,
    },
    /// A typed mutation to propose, with the request's `__ts`.
    Write {
        mutation: Mutation,
        request_ts: Option<Hlc>,
    },
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
