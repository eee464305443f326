//! The request service on its own: a real single-node Raft over a temporary store, requests
//! handed straight to [`Service::handle`], replies captured by a fake [`Outbox`]. No broker, no
//! processes: what the service answers, and when it stays silent, is checked directly.
//!
//! Time is under the tests' control where it matters. Monotonic time (request deadlines,
//! Message Expiry) is Tokio's: those tests freeze it ([`FrozenClock`]) and move it with
//! `tokio::time::advance`. Wall time (HLC stamps, key expiry, reply memory) is a
//! [`ManualClock`] handed to the service. Raft itself runs on the same Tokio clock, and a
//! frozen clock stops it from completing writes (see [`FrozenClock`]): the single node wins
//! leadership and every write a test needs completed is made with the clock running; only reads
//! and a write that is meant never to complete run frozen.

// The service's request future is deep (parse, read or propose, reply): computing its layout
// needs more than the default query depth.
#![recursion_limit = "256"]

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use bytes::Bytes;
use statestore_node::authz::Authorizer;
use statestore_node::metrics::NodeMetrics;
use statestore_node::service::device_push::DevicePush;
use statestore_node::service::envelope::RequesterIdentity;
use statestore_node::service::offline_devices::OfflineDevices;
use statestore_node::service::{Devicebound, Service, ServiceConfig, StateStore};
use statestore_node::transport::{
    DEVICEBOUND_REQUEST_TOPIC, InboundMessage, OutboundKind, OutboundMessage, Outbox, PubackAnswer,
    REQUEST_TOPIC,
};
use statestore_policy::Policy;
use statestore_protocol::scan::PageLimits;
use statestore_protocol::{ProtocolLimits, resp3};
use statestore_raft::{DiscardEvents, EventSink, RaftConfig, RaftNode, TracedEvent};
use statestore_storage::store::{Store, StoreConfig};
use statestore_vocab::hlc::{MAX_CLOCK_DRIFT_MS, ManualClock, SystemClock, WallClock};
use tokio::time::Instant;

/// Captures what the service publishes.
#[derive(Clone, Default)]
struct FakeOutbox(Arc<Mutex<Vec<OutboundMessage>>>);

impl FakeOutbox {
    fn take(&self) -> Vec<OutboundMessage> {
        std::mem::take(&mut *self.0.lock().expect("outbox lock"))
    }
}

impl Outbox for FakeOutbox {
    async fn publish(&self, message: OutboundMessage) -> bool {
        // A forward of a device publish: some serving leader subscribes (PUBACK 0x00).
        if let OutboundKind::DeviceForward { ack } = &message.kind {
            ack.report(PubackAnswer::Accepted);
        }
        self.0.lock().expect("outbox lock").push(message);
        true
    }
}

struct Harness {
    service: Arc<Service<FakeOutbox>>,
    offline_devices: Arc<OfflineDevices>,
    outbox: FakeOutbox,
    serving: Arc<AtomicBool>,
    metrics: Arc<NodeMetrics>,
    wall: Arc<dyn WallClock>,
    authorizer: Arc<Authorizer>,
    next_correlation: u8,
    _dir: tempfile::TempDir,
}

/// How a [`Harness`] is built.
struct Setup {
    request_timeout: Duration,
    /// The service's wall clock (the system's when `None`).
    wall: Option<ManualClock>,
    /// Where apply delivers committed key events.
    events: Arc<dyn EventSink>,
    /// What one SCAN page may cost.
    scan_page: PageLimits,
    /// Who requests come from.
    identity: RequesterIdentity,
    /// The rules in force (open: none).
    policy: Policy,
}

impl Setup {
    fn new(request_timeout: Duration) -> Setup {
        Setup {
            request_timeout,
            wall: None,
            events: Arc::new(DiscardEvents),
            scan_page: PageLimits::default(),
            identity: RequesterIdentity::Claimed,
            policy: Policy::open(),
        }
    }
}

impl Harness {
    /// A leader of a one-node cluster, serving unless `serving` is false.
    async fn start(request_timeout: Duration) -> Harness {
        Harness::start_with(Setup::new(request_timeout)).await
    }

    async fn start_with(setup: Setup) -> Harness {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&StoreConfig::new(dir.path(), 16 << 20)).expect("store");
        let metrics = Arc::new(NodeMetrics::new().expect("metrics"));
        let config = RaftConfig {
            id: 1,
            ..RaftConfig::default()
        };
        let raft = RaftNode::start(&config, store, setup.events, &metrics.registry)
            .await
            .expect("raft");
        raft.bootstrap([(1, "127.0.0.1:1".to_owned())].into())
            .await
            .expect("bootstrap");
        let deadline = Instant::now() + Duration::from_secs(10);
        while raft.ensure_linearizable().await.is_err() {
            assert!(Instant::now() < deadline, "single node never led");
            tokio::task::yield_now().await;
        }
        let outbox = FakeOutbox::default();
        let serving = Arc::new(AtomicBool::new(true));
        let offline_devices = Arc::new(OfflineDevices::new(
            metrics.devicebound.devices_in_backoff.clone(),
        ));
        let authorizer = Arc::new(Authorizer::new(setup.policy, metrics.authz.clone()));
        let mut service = Service::new(
            raft,
            "statestore-test",
            outbox.clone(),
            ServiceConfig {
                protocol: ProtocolLimits::default(),
                default_dedup_window: Duration::from_secs(10),
                max_dedup_window: Duration::from_secs(600),
                node_client_id: "statestore-test".to_owned(),
                request_timeout: setup.request_timeout,
                devicebound: Default::default(),
                scan_page: setup.scan_page,
                reply_topics: Default::default(),
                identity: setup.identity.clone(),
            },
            metrics.clone(),
            serving.clone(),
            offline_devices.clone(),
        )
        .with_authorizer(authorizer.clone());
        let wall: Arc<dyn WallClock> = match setup.wall {
            Some(manual) => {
                let wall: Arc<dyn WallClock> = Arc::new(manual);
                service = service.with_wall_clock(wall.clone());
                wall
            }
            None => Arc::new(SystemClock),
        };
        Harness {
            service: Arc::new(service),
            offline_devices,
            outbox,
            serving,
            metrics,
            wall,
            authorizer,
            next_correlation: 0,
            _dir: dir,
        }
    }

    fn request(&mut self, payload: &[u8], expiry_secs: Option<u32>) -> InboundMessage {
        self.next_correlation += 1;
        InboundMessage {
            topic: REQUEST_TOPIC.to_owned(),
            qos: 1,
            response_topic: Some("clients/c1/response".to_owned()),
            correlation_data: Some(Bytes::from(vec![self.next_correlation; 16])),
            message_expiry_secs: expiry_secs,
            content_type: Some("application/octet-stream".to_owned()),
            user_properties: vec![
                ("__srcId".to_owned(), "c1".to_owned()),
                (
                    "__ts".to_owned(),
                    format!("{:015}:00000:c1", self.wall.now_ms()),
                ),
            ],
            payload: Bytes::copy_from_slice(payload),
            received_at: Instant::now(),
        }
    }

    /// Handles `payload` and returns the replies it produced.
    async fn send(&mut self, payload: &[u8]) -> Vec<OutboundMessage> {
        let message = self.request(payload, Some(10));
        self.handle(message).await
    }

    /// Handles `message` and returns the replies it produced.
    async fn handle(&self, message: InboundMessage) -> Vec<OutboundMessage> {
        self.service.clone().handle::<StateStore>(message).await;
        self.outbox.take()
    }

    /// Holds the apply thread from now on, until `gate` opens: registers an observer of a
    /// key, writes the key, and waits until apply hands that write's event to the gate. Two
    /// writes: call it with the clock running.
    async fn hold_apply(&mut self, gate: &ApplyGate) {
        let replies = self.send(&resp(&[b"KEYNOTIFY", b"watched"])).await;
        assert_eq!(&replies[0].payload[..], b"+OK\r\n");
        gate.arm();
        let replies = self.send(&resp(&[b"SET", b"watched", b"v"])).await;
        assert_eq!(
            &replies[0].payload[..],
            b"+OK\r\n",
            "answered before its event is delivered"
        );
        within(PATIENCE, "apply reaching the gate", gate.entered.notified()).await;
    }

    /// Starts handling `message` and returns the task once its proposal is in the log: with
    /// apply held, it then waits for an outcome that cannot come.
    async fn start_held(&self, message: InboundMessage) -> tokio::task::JoinHandle<()> {
        let before = self.last_log_index();
        let handling = tokio::spawn(self.service.clone().handle::<StateStore>(message));
        self.service
            .raft()
            .raft()
            .wait(Some(PATIENCE))
            .metrics(
                |m| m.last_log_index > before,
                "the request's proposal reaching the log",
            )
            .await
            .expect("the request's proposal reaching the log");
        assert!(!handling.is_finished(), "the request waits for its outcome");
        handling
    }

    /// Index of the last entry in the Raft log.
    fn last_log_index(&self) -> Option<u64> {
        self.service.raft().metrics().last_log_index
    }

    fn dropped(&self, reason: &str) -> u64 {
        self.metrics
            .service
            .requests_dropped_total
            .with_label_values(&[reason])
            .get()
    }
}

/// A request array of bulk strings, encoded with the node's own RESP3 encoder.
fn resp(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", parts.len()).into_bytes();
    for part in parts {
        resp3::encode_bulk(&mut out, part);
    }
    out
}

/// Tokio's clock, paused and held still until dropped (then it runs again): it moves only by
/// `tokio::time::advance`.
///
/// Pausing alone is not enough here. A paused clock jumps to the next timer whenever the
/// runtime has nothing to run, and it has nothing to run whenever Raft waits on its own
/// threads (the log's fsync, apply): openraft's timers would carry the clock seconds ahead
/// within one real millisecond, and any deadline with them. A running blocking task keeps the
/// runtime from advancing the clock by itself; this one runs until the guard is dropped.
///
/// What a frozen clock stops: openraft (0.10.0-alpha.37) gathers log I/O completions for 1 µs
/// with `sleep_until(now + 1 µs)` before passing them on, which never elapses on a frozen clock,
/// so a write may never commit. Leadership is therefore won, and the writes a test needs done
/// are made, with the clock running; a frozen clock serves reads (a single voter confirms them
/// without a timer) and writes meant to be held anyway.
struct FrozenClock(Option<std::sync::mpsc::Sender<()>>);

impl FrozenClock {
    fn freeze() -> FrozenClock {
        tokio::time::pause();
        let (release, released) = std::sync::mpsc::channel::<()>();
        tokio::task::spawn_blocking(move || {
            let _ = released.recv();
        });
        FrozenClock(Some(release))
    }
}

impl Drop for FrozenClock {
    fn drop(&mut self) {
        // The blocking task's receive fails once the sender is gone: it ends.
        self.0.take();
        tokio::time::resume();
    }
}

/// Awaits `future`, failing the test after `limit` of real time. Tokio's clock is frozen in
/// these tests, so `tokio::time::timeout` could never fire; the watchdog is a blocking task
/// (which also keeps the frozen clock still) and is dismissed as soon as `future` is done.
async fn within<T>(limit: Duration, what: &str, future: impl Future<Output = T>) -> T {
    let (dismiss, dismissed) = std::sync::mpsc::channel::<()>();
    let watchdog = tokio::task::spawn_blocking(move || dismissed.recv_timeout(limit));
    tokio::select! {
        output = future => {
            drop(dismiss);
            output
        }
        // Before `future` is done the watchdog only ends by timing out (or panicking).
        watchdog = watchdog => panic!("{what}: not within {limit:?} of real time ({watchdog:?})"),
    }
}

/// An event sink that, once armed, holds the apply thread in `deliver` until opened: every
/// entry committed meanwhile waits for apply, and its proposal for its outcome.
#[derive(Default)]
struct ApplyGate {
    armed: Mutex<bool>,
    changed: Condvar,
    entered: tokio::sync::Notify,
}

impl ApplyGate {
    fn arm(&self) {
        *self.armed.lock().expect("gate lock") = true;
    }

    fn open(&self) {
        *self.armed.lock().expect("gate lock") = false;
        self.changed.notify_all();
    }
}

impl EventSink for ApplyGate {
    fn deliver(&self, _events: Vec<TracedEvent>) {
        let mut armed = self.armed.lock().expect("gate lock");
        if !*armed {
            return;
        }
        self.entered.notify_one();
        while *armed {
            armed = self.changed.wait(armed).expect("gate lock");
        }
    }
}

/// Opens the gate when dropped, so a failing test never leaves the apply thread held.
struct OpenOnDrop(Arc<ApplyGate>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// A wall time well inside the range real clocks show.
const WALL_MS: u64 = 1_750_000_000_000;

/// Longest real time a test waits for one event before it fails.
const PATIENCE: Duration = Duration::from_secs(20);

#[tokio::test]
async fn a_serving_leader_answers_set_and_get_with_the_request_correlation() {
    let mut h = Harness::start(Duration::from_secs(10)).await;
    let replies = h.send(&resp(&[b"SET", b"k", b"v"])).await;
    assert_eq!(replies.len(), 1);
    assert_eq!(&replies[0].payload[..], b"+OK\r\n");
    assert_eq!(replies[0].topic, "clients/c1/response");
    assert_eq!(
        replies[0].correlation_data.as_deref(),
        Some(&[h.next_correlation; 16][..])
    );
    let replies = h.send(&resp(&[b"GET", b"k"])).await;
    assert_eq!(replies.len(), 1);
    assert_eq!(&replies[0].payload[..], b"$1\r\nv\r\n");
}

/// A leader that paused serving (its quorum acknowledgement late, a take-over under way) holds
/// a request instead of dropping it, and answers it once it serves again (issue 30: requests
/// dropped as `not_leader` by the only leader vanished for their clients).
#[tokio::test]
async fn a_leader_that_paused_serving_holds_requests_and_answers_them_when_it_serves_again() {
    let mut h = Harness::start(Duration::from_secs(10)).await;
    h.serving.store(false, Ordering::SeqCst);
    let before = h.dropped("not_leader");
    let message = h.request(&resp(&[b"SET", b"k", b"v"]), Some(10));
    let held = tokio::spawn(h.service.clone().handle::<StateStore>(message));
    // The test runtime has one thread: the spawned request runs when this task yields, and
    // parks in the wait for serving (in flight, unanswered).
    let in_flight = &h.metrics.service.requests_in_flight;
    for _ in 0..100 {
        if in_flight.get() == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(in_flight.get(), 1, "the request started and is held");
    assert!(!held.is_finished());
    assert!(
        h.outbox.take().is_empty(),
        "nothing answered while not serving"
    );
    h.serving.store(true, Ordering::SeqCst);
    within(PATIENCE, "the held request's reply", held)
        .await
        .expect("request task");
    let replies = h.outbox.take();
    assert_eq!(&replies[0].payload[..], b"+OK\r\n");
    assert_eq!(h.dropped("not_leader"), before, "nothing dropped");
}

/// A node shutting down drops what it has not admitted (the client retries at the next
/// leader), at once and without changing anything.
#[tokio::test]
async fn a_closing_node_drops_requests_at_once_and_changes_nothing() {
    let mut h = Harness::start(Duration::from_secs(10)).await;
    h.serving.store(false, Ordering::SeqCst);
    h.service.close();
    let before = h.dropped("not_leader");
    let log_before = h.last_log_index();
    assert!(h.send(&resp(&[b"SET", b"k", b"v"])).await.is_empty());
    assert!(h.send(&resp(&[b"GET", b"k"])).await.is_empty());
    assert_eq!(h.dropped("not_leader"), before + 2);
    assert_eq!(h.last_log_index(), log_before, "nothing proposed");
}

/// The request timeout bounds a request even when its Message Expiry is later: past it the
/// request gets no reply and is counted; a malformed request is still answered at the door.
#[tokio::test]
async fn a_request_past_its_deadline_gets_no_reply_and_is_counted() {
    let gate = Arc::new(ApplyGate::default());
    let _open = OpenOnDrop(gate.clone());
    let mut h = Harness::start_with(Setup {
        wall: Some(ManualClock::new(WALL_MS)),
        events: gate.clone(),
        ..Setup::new(Duration::from_secs(1))
    })
    .await;
    h.hold_apply(&gate).await;
    let frozen = FrozenClock::freeze();
    let before = h.dropped("timed_out");
    let message = h.request(&resp(&[b"SET", b"k", b"v"]), Some(10));
    let handling = h.start_held(message).await;
    // Just past the 1 s request timeout (Tokio rounds timer deadlines up to the next ms).
    tokio::time::advance(Duration::from_millis(1_001)).await;
    within(PATIENCE, "the SET giving up", handling)
        .await
        .expect("handler");
    drop(frozen);
    assert!(h.outbox.take().is_empty());
    assert_eq!(h.dropped("timed_out"), before + 1);
    // Malformed requests are answered at the door without waiting: still answered.
    let replies = h.send(b"*1\r\n$3\r\nFOO\r\n").await;
    assert_eq!(
        replies.len(),
        1,
        "an unknown command is refused with an error reply"
    );
}

/// A request whose Message Expiry passes while its proposal is held gets no reply and is
/// counted as timed out; the proposal still commits, and the client's retry gets the
/// remembered reply.
#[tokio::test]
async fn a_request_whose_expiry_passes_while_its_proposal_is_held_gets_no_reply() {
    let gate = Arc::new(ApplyGate::default());
    let _open = OpenOnDrop(gate.clone());
    let mut h = Harness::start_with(Setup {
        wall: Some(ManualClock::new(WALL_MS)),
        events: gate.clone(),
        ..Setup::new(Duration::from_secs(60))
    })
    .await;
    h.hold_apply(&gate).await;
    let frozen = FrozenClock::freeze();
    let t0 = Instant::now();

    // Apply is held: this SET is appended and committed, but its outcome cannot come.
    let timed_out = h.dropped("timed_out");
    let expired = h.dropped("expired");
    let held = h.request(&resp(&[b"SET", b"k", b"v"]), Some(2));
    let handling = h.start_held(held.clone()).await;
    assert_eq!(
        Instant::now(),
        t0,
        "the frozen clock did not move by itself"
    );

    // Just past the 2 s expiry (Tokio rounds timer deadlines up to the next millisecond).
    tokio::time::advance(Duration::from_millis(2_001)).await;
    within(PATIENCE, "the SET giving up", handling)
        .await
        .expect("handler");
    assert!(
        h.outbox.take().is_empty(),
        "no reply past the Message Expiry"
    );
    assert_eq!(h.dropped("timed_out"), timed_out + 1);
    assert_eq!(
        h.dropped("expired"),
        expired,
        "it passed the door in time: a timeout, not an expiry"
    );

    // Released (and the clock running again, for Raft), the SET applies; the retry (same
    // correlation, fresh expiry) is not executed again but answered from memory.
    drop(frozen);
    gate.open();
    let last = h.last_log_index();
    h.service
        .raft()
        .raft()
        .wait(Some(PATIENCE))
        .metrics(
            |m| m.last_applied.as_ref().map(|l| l.index) == last,
            "apply catching up",
        )
        .await
        .expect("apply catching up");
    let hits = h.metrics.service.dedup_hits_total.get();
    let retry = InboundMessage {
        received_at: Instant::now(),
        message_expiry_secs: Some(10),
        ..held
    };
    let replies = h.handle(retry).await;
    assert_eq!(replies.len(), 1);
    assert_eq!(&replies[0].payload[..], b"+OK\r\n");
    assert_eq!(h.metrics.service.dedup_hits_total.get(), hits + 1);
    assert_eq!(h.last_log_index(), last, "the retry proposed nothing");
}

/// The Message Expiry of a reply is what is left of the request's after the time it spent
/// here, rounded up to whole seconds; a request whose expiry has passed before it is taken up
/// is dropped at the door.
#[tokio::test]
async fn the_reply_carries_the_message_expiry_left_rounded_up() {
    let mut h = Harness::start_with(Setup {
        wall: Some(ManualClock::new(WALL_MS)),
        ..Setup::new(Duration::from_secs(60))
    })
    .await;
    assert_eq!(
        &h.send(&resp(&[b"SET", b"k", b"v"])).await[0].payload[..],
        b"+OK\r\n"
    );
    // Reads only from here: a write cannot commit on a frozen clock (see FrozenClock). The
    // expiry of a reply is computed the same way for every command.
    let _frozen = FrozenClock::freeze();
    let ms = Duration::from_millis;
    let get = resp(&[b"GET", b"k"]);
    for (spent, left) in [
        (ms(0), 10),
        (ms(1), 10),
        (ms(2_500), 8),
        (ms(3_000), 7),
        (ms(9_001), 1),
        (ms(9_999), 1),
    ] {
        let message = h.request(&get, Some(10));
        tokio::time::advance(spent).await;
        let replies = h.handle(message).await;
        assert_eq!(replies.len(), 1, "after {spent:?}");
        assert_eq!(&replies[0].payload[..], b"$1\r\nv\r\n");
        assert_eq!(
            replies[0].message_expiry_secs,
            Some(left),
            "10 s of expiry after {spent:?}"
        );
    }
    let expired = h.dropped("expired");
    let message = h.request(&resp(&[b"GET", b"k"]), Some(10));
    tokio::time::advance(ms(10_000)).await;
    assert!(h.handle(message).await.is_empty());
    assert_eq!(h.dropped("expired"), expired + 1);
}

/// The injected wall clock is the service's: it stamps versions, bounds request timestamps and
/// decides key expiry (and a GET never goes back to before an earlier one).
#[tokio::test]
async fn the_service_reads_wall_time_from_the_injected_clock() {
    let wall = ManualClock::new(WALL_MS);
    let mut h = Harness::start_with(Setup {
        wall: Some(wall.clone()),
        ..Setup::new(Duration::from_secs(10))
    })
    .await;
    let replies = h.send(&resp(&[b"SET", b"k", b"v", b"PX", b"1000"])).await;
    assert_eq!(&replies[0].payload[..], b"+OK\r\n");
    let version = replies[0]
        .user_properties
        .iter()
        .find(|(name, _)| *name == "__ts")
        .map(|(_, v)| v.clone())
        .expect("a SET reply carries its version");
    assert!(
        version.starts_with(&format!("{WALL_MS:015}:")),
        "stamped at the manual clock's time: {version}"
    );

    wall.advance(999);
    assert_eq!(
        &h.send(&resp(&[b"GET", b"k"])).await[0].payload[..],
        b"$1\r\nv\r\n"
    );
    wall.advance(1);
    assert_eq!(
        &h.send(&resp(&[b"GET", b"k"])).await[0].payload[..],
        b"$-1\r\n",
        "expired 1000 ms after the write, by the manual clock"
    );
    wall.set(WALL_MS + 500);
    assert_eq!(
        &h.send(&resp(&[b"GET", b"k"])).await[0].payload[..],
        b"$-1\r\n",
        "a clock stepping back does not revive what a GET saw expired"
    );

    // A request timestamp more than the allowed drift ahead of the manual clock is refused.
    let mut message = h.request(&resp(&[b"SET", b"j", b"v"]), Some(10));
    let ahead = wall.now_ms() + MAX_CLOCK_DRIFT_MS + 1;
    for (name, value) in &mut message.user_properties {
        if name == "__ts" {
            *value = format!("{ahead:015}:00000:c1");
        }
    }
    let replies = h.handle(message).await;
    assert!(
        replies[0]
            .payload
            .starts_with(b"-ERR the request timestamp is too far in the future"),
        "{:?}",
        replies[0].payload
    );
}

/// A SCAN page as (keys, token), parsed independently of the node's encoder.
fn scan_page(payload: &[u8]) -> (Vec<Vec<u8>>, Option<Vec<u8>>) {
    fn number(rest: &mut &[u8], prefix: u8) -> usize {
        assert_eq!(rest.first(), Some(&prefix), "{rest:?}");
        let end = rest.windows(2).position(|w| w == b"\r\n").expect("CRLF");
        let value = std::str::from_utf8(&rest[1..end])
            .expect("digits")
            .parse()
            .expect("number");
        *rest = &rest[end + 2..];
        value
    }
    fn bulk(rest: &mut &[u8]) -> Vec<u8> {
        let len = number(rest, b'$');
        let value = rest[..len].to_vec();
        assert_eq!(&rest[len..len + 2], b"\r\n");
        *rest = &rest[len + 2..];
        value
    }
    let mut rest = payload;
    let elements = number(&mut rest, b'*');
    let keys = (0..number(&mut rest, b'*'))
        .map(|_| bulk(&mut rest))
        .collect();
    let token = (elements == 2).then(|| bulk(&mut rest));
    assert!(rest.is_empty(), "nothing after the page: {rest:?}");
    (keys, token)
}

/// SCAN (issue 12) through the whole service: pages of a few keys, a retried page, expired and
/// non-matching keys skipped, hostile patterns and tokens.
#[tokio::test]
async fn scan_pages_through_the_live_matching_keys() {
    let wall = ManualClock::new(WALL_MS);
    let mut h = Harness::start_with(Setup {
        wall: Some(wall.clone()),
        scan_page: PageLimits {
            max_keys: 2,
            max_examined: 3,
            ..PageLimits::default()
        },
        ..Setup::new(Duration::from_secs(10))
    })
    .await;
    for key in [
        "user:1", "user:2", "user:3", "user:4", "user:5", "zz", "user:*",
    ] {
        let replies = h.send(&resp(&[b"SET", key.as_bytes(), b"v"])).await;
        assert_eq!(&replies[0].payload[..], b"+OK\r\n", "{key}");
    }
    let replies = h
        .send(&resp(&[b"SET", b"user:0", b"v", b"PX", b"100"]))
        .await;
    assert_eq!(&replies[0].payload[..], b"+OK\r\n");
    let replies = h.send(&resp(&[b"SET", b"user:\xff", b"v"])).await;
    assert_eq!(&replies[0].payload[..], b"+OK\r\n");
    wall.advance(100);

    let mut found = Vec::new();
    let mut token: Option<Vec<u8>> = None;
    let mut pages = 0;
    loop {
        let mut request: Vec<&[u8]> = vec![b"SCAN", b"user:?"];
        if let Some(token) = &token {
            request.push(token);
        }
        let replies = h.send(&resp(&request)).await;
        assert_eq!(replies.len(), 1);
        let (keys, next) = scan_page(&replies[0].payload);
        // The same token again (a client retry) gets the same page.
        let again = h.send(&resp(&request)).await;
        assert_eq!(again[0].payload, replies[0].payload, "a retried page");
        assert!(keys.len() <= 2, "max_keys: {keys:?}");
        found.extend(keys);
        pages += 1;
        match next {
            Some(next) => token = Some(next),
            None => break,
        }
        assert!(pages < 20, "the scan ends");
    }
    let found: Vec<String> = found
        .iter()
        .map(|k| String::from_utf8(k.clone()).expect("only UTF-8 keys are returned"))
        .collect();
    assert_eq!(
        found,
        ["user:*", "user:1", "user:2", "user:3", "user:4", "user:5"],
        "every live match once, in key order; expired user:0 and non-UTF-8 user:\\xff are not"
    );
    assert!(pages >= 3, "bounded pages: {pages}");

    // A pattern can match the literal star (the page ends at max_examined, with a token).
    let replies = h.send(&resp(&[b"SCAN", b"user:[*]"])).await;
    let (keys, token) = scan_page(&replies[0].payload);
    assert_eq!(keys, vec![b"user:*".to_vec()]);
    assert!(token.is_some());

    // Hostile input: answered, never fatal.
    let stars = vec![b'*'; 10_000];
    // One range over the 256 a class may list (issue 27).
    let wide_class = format!("[{}]", "a-z".repeat(257)).into_bytes();
    // (pattern, token, how the reply starts)
    type HostileCase<'a> = (&'a [u8], Option<&'a [u8]>, &'a [u8]);
    let cases: [HostileCase; 6] = [
        (&wide_class, None, b"-ERR syntax error\r\n"),
        (b"[", None, b"*2\r\n*0\r\n"),
        (b"[!]", None, b"*2\r\n*0\r\n"),
        (b"\xff*", None, b"*2\r\n*0\r\n"),
        (&stars, None, b"*2\r\n*2\r\n"),
        (b"*", Some(b"not-a-token"), b"-ERR syntax error\r\n"),
    ];
    for (pattern, token, reply_start) in cases {
        let mut request: Vec<&[u8]> = vec![b"SCAN", pattern];
        request.extend(token);
        let replies = h.send(&resp(&request)).await;
        assert!(
            replies[0].payload.starts_with(reply_start),
            "{:?}: {:?}",
            String::from_utf8_lossy(&pattern[..pattern.len().min(8)]),
            String::from_utf8_lossy(&replies[0].payload)
        );
    }
    // Still serving.
    assert_eq!(
        &h.send(&resp(&[b"GET", b"zz"])).await[0].payload[..],
        b"$1\r\nv\r\n"
    );
}

/// Follows a SCAN of `pattern` to its end; returns the keys and the pages it took.
async fn scan_all(h: &mut Harness, pattern: &[u8]) -> (Vec<Vec<u8>>, usize) {
    let mut found = Vec::new();
    let mut token: Option<Vec<u8>> = None;
    let mut pages = 0;
    loop {
        let mut request: Vec<&[u8]> = vec![b"SCAN", pattern];
        request.extend(token.as_deref());
        let replies = h.send(&resp(&request)).await;
        assert_eq!(replies.len(), 1, "every page is answered");
        let (keys, next) = scan_page(&replies[0].payload);
        found.extend(keys);
        pages += 1;
        match next {
            Some(next) => token = Some(next),
            None => return (found, pages),
        }
        assert!(pages < 1000, "the scan ends");
    }
}

fn scan_pages_ended_by(h: &Harness, end: &str) -> u64 {
    h.metrics
        .service
        .scan_pages_total
        .with_label_values(&[end])
        .get()
}

/// A page past its `max_duration` ends after the key it is at (issue 27): with no time at all
/// every page looks at exactly one key, and the scan still returns every match once.
#[tokio::test]
async fn scan_pages_past_their_deadline_end_early_and_the_scan_still_completes() {
    let mut h = Harness::start_with(Setup {
        scan_page: PageLimits {
            max_duration: Duration::ZERO,
            ..PageLimits::default()
        },
        ..Setup::new(Duration::from_secs(10))
    })
    .await;
    let keys = ["d1", "d2", "d3", "x4", "d5", "d6", "x7"];
    for key in keys {
        let replies = h.send(&resp(&[b"SET", key.as_bytes(), b"v"])).await;
        assert_eq!(&replies[0].payload[..], b"+OK\r\n", "{key}");
    }
    let (found, pages) = scan_all(&mut h, b"d*").await;
    assert_eq!(
        found,
        [&b"d1"[..], b"d2", b"d3", b"d5", b"d6"],
        "every match once, in order"
    );
    assert_eq!(pages, keys.len(), "one key per page");
    assert_eq!(scan_pages_ended_by(&h, "deadline"), keys.len() as u64 - 1);
    assert_eq!(scan_pages_ended_by(&h, "complete"), 1);
    assert_eq!(
        h.metrics
            .service
            .scan_page_duration_seconds
            .get_sample_count(),
        keys.len() as u64
    );
    assert_eq!(h.metrics.service.scan_pages_in_flight.get(), 0);
}

/// SCAN pages run on the blocking pool, at most `SCAN_SLOTS` at once (issue 27): more SCANs
/// wait for a slot and are all answered.
#[tokio::test]
async fn scans_beyond_the_slots_wait_for_one_and_are_all_answered() {
    use statestore_node::service::SCAN_SLOTS;
    let mut h = Harness::start_with(Setup {
        scan_page: PageLimits {
            max_duration: Duration::from_secs(60),
            ..PageLimits::default()
        },
        ..Setup::new(Duration::from_secs(60))
    })
    .await;
    // Costly keys for a costly pattern: each key fails a 256-range class at every position.
    for i in 0..200 {
        let key = format!("{i:03}{}", "a".repeat(1000));
        let replies = h.send(&resp(&[b"SET", key.as_bytes(), b"v"])).await;
        assert_eq!(&replies[0].payload[..], b"+OK\r\n");
    }
    let members: String = (0..256u32)
        .map(|i| char::from_u32(0x100 + 2 * i).expect("a character"))
        .collect();
    let pattern = format!("*[{members}]*");
    let scans = 4 * SCAN_SLOTS;
    let mut running = Vec::new();
    for _ in 0..scans {
        let message = h.request(&resp(&[b"SCAN", pattern.as_bytes()]), Some(60));
        running.push(tokio::spawn(
            h.service.clone().handle::<StateStore>(message),
        ));
    }
    let (mut most_in_flight, mut most_waiting) = (0, 0);
    while !running.iter().all(|task| task.is_finished()) {
        most_in_flight = most_in_flight.max(h.metrics.service.scan_pages_in_flight.get());
        most_waiting = most_waiting.max(h.metrics.service.scan_pages_waiting.get());
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    for task in running {
        task.await.expect("handled");
    }
    let replies = h.outbox.take();
    assert_eq!(replies.len(), scans, "every SCAN answered");
    for reply in &replies {
        assert_eq!(
            &reply.payload[..],
            b"*1\r\n*0\r\n",
            "one complete, empty page"
        );
    }
    assert!(
        most_in_flight as usize <= SCAN_SLOTS,
        "{most_in_flight} pages at once"
    );
    assert!(most_waiting >= 1, "SCANs waited for a slot");
    assert_eq!(scan_pages_ended_by(&h, "complete"), scans as u64);
    assert_eq!(h.metrics.service.scan_pages_in_flight.get(), 0);
    assert_eq!(h.metrics.service.scan_pages_waiting.get(), 0);
}

/// Keys up to the 60 KiB default round-trip, one byte more is `syntax error`; KEYNOTIFY on a
/// key whose notification topic would not fit MQTT's 65,535 bytes is refused.
#[tokio::test]
async fn the_largest_key_round_trips_and_keynotify_refuses_unpublishable_topics() {
    let mut h = Harness::start(Duration::from_secs(10)).await;
    let limits = ProtocolLimits::default();
    let largest = vec![b'k'; limits.max_key_bytes];
    let value = vec![b'v'; limits.max_value_bytes];
    let replies = h.send(&resp(&[b"SET", &largest, &value])).await;
    assert_eq!(&replies[0].payload[..], b"+OK\r\n");
    let replies = h.send(&resp(&[b"GET", &largest])).await;
    let mut expected = format!("${}\r\n", value.len()).into_bytes();
    expected.extend_from_slice(&value);
    expected.extend_from_slice(b"\r\n");
    assert!(
        replies[0].payload[..] == expected[..],
        "the largest value under the largest key"
    );

    let one_more = vec![b'k'; limits.max_key_bytes + 1];
    for request in [
        resp(&[b"SET", &one_more, b"v"]),
        resp(&[b"GET", &one_more]),
        resp(&[b"DEL", &one_more]),
    ] {
        assert_eq!(
            &h.send(&request).await[0].payload[..],
            b"-ERR syntax error\r\n"
        );
    }
    let value_one_more = vec![b'v'; limits.max_value_bytes + 1];
    assert_eq!(
        &h.send(&resp(&[b"SET", b"k", &value_one_more])).await[0].payload[..],
        b"-ERR syntax error\r\n"
    );

    // The harness's client id is `c1`: its topic fits keys up to (65,535 - fixed) / 2 bytes.
    let fixed = statestore_node::service::notify::notify_topic_len("c1", b"");
    let longest_observable = vec![b'o'; (65_535 - fixed) / 2];
    let too_long = vec![b'o'; (65_535 - fixed) / 2 + 1];
    assert_eq!(
        &h.send(&resp(&[b"KEYNOTIFY", &longest_observable])).await[0].payload[..],
        b"+OK\r\n"
    );
    assert_eq!(
        &h.send(&resp(&[b"KEYNOTIFY", &too_long])).await[0].payload[..],
        b"-ERR syntax error\r\n"
    );
}

/// A message pushed to a device: (device, lock token, body).
type Delivery = (String, String, Vec<u8>);

/// What a device-bound request published: the deliveries and the reply payloads.
fn split_device_publishes(published: Vec<OutboundMessage>) -> (Vec<Delivery>, Vec<Vec<u8>>) {
    let mut deliveries = Vec::new();
    let mut replies = Vec::new();
    for message in published {
        match message.kind {
            OutboundKind::DeviceMessage { device, token } => {
                assert!(
                    message
                        .topic
                        .starts_with(&format!("devices/{device}/messages/devicebound/")),
                    "{}",
                    message.topic
                );
                deliveries.push((device, token, message.payload.to_vec()));
            }
            OutboundKind::Response => replies.push(message.payload.to_vec()),
            other => panic!("unexpected publish {other:?}"),
        }
    }
    (deliveries, replies)
}

#[tokio::test]
async fn a_send_delivers_with_its_commit_a_settlement_delivers_the_next_and_retries_deliver_nothing()
 {
    let mut h = Harness::start(Duration::from_secs(10)).await;
    let device_request = |h: &mut Harness, parts: &[&[u8]]| {
        let mut message = h.request(&resp(parts), Some(10));
        message.topic = DEVICEBOUND_REQUEST_TOPIC.to_owned();
        message
    };
    let handle_device = |h: &Harness, message: InboundMessage| {
        let service = h.service.clone();
        let outbox = h.outbox.clone();
        async move {
            service.handle::<Devicebound>(message).await;
            split_device_publishes(outbox.take())
        }
    };

    // A device nobody knows to be offline: the SEND's own commit locks the message, and it is
    // published with the +OK (no push round involved).
    let first = device_request(&mut h, &[b"SEND", b"dev1", b"m1", b"one"]);
    let (deliveries, replies) = handle_device(&h, first.clone()).await;
    assert_eq!(replies, vec![b"+OK\r\n".to_vec()]);
    assert_eq!(deliveries.len(), 1, "{deliveries:?}");
    let (device, token, body) = &deliveries[0];
    assert_eq!((device.as_str(), body.as_slice()), ("dev1", &b"one"[..]));

    // A retry gets the remembered +OK and publishes nothing a second time.
    let (deliveries, replies) = handle_device(&h, first).await;
    assert_eq!(replies, vec![b"+OK\r\n".to_vec()]);
    assert!(deliveries.is_empty(), "{deliveries:?}");

    // The window (1) is taken: the second message waits, Enqueued.
    let second = device_request(&mut h, &[b"SEND", b"dev1", b"m2", b"two"]);
    let (deliveries, replies) = handle_device(&h, second).await;
    assert_eq!(replies, vec![b"+OK\r\n".to_vec()]);
    assert!(deliveries.is_empty(), "{deliveries:?}");

    // Completing the first delivers the second in the same proposal.
    let push = DevicePush::new(h.service.clone(), h.offline_devices.clone(), None);
    let settle = InboundMessage {
        topic: format!("devices/dev1/messages/settle/complete/{token}"),
        qos: 1,
        response_topic: None,
        correlation_data: None,
        message_expiry_secs: None,
        content_type: None,
        user_properties: Vec::new(),
        payload: Bytes::new(),
        received_at: Instant::now(),
    };
    push.clone().handle_inbound(settle.clone()).await;
    let (deliveries, replies) = split_device_publishes(h.outbox.take());
    assert!(replies.is_empty(), "no reply was asked for");
    assert_eq!(
        deliveries
            .iter()
            .map(|(d, _, b)| (d.as_str(), b.as_slice()))
            .collect::<Vec<_>>(),
        vec![("dev1", &b"two"[..])]
    );
    // The same settlement again settles nothing and delivers nothing.
    push.clone().handle_inbound(settle).await;
    let (deliveries, _) = split_device_publishes(h.outbox.take());
    assert!(deliveries.is_empty(), "{deliveries:?}");

    // A device backing off (found offline): the SEND only enqueues.
    h.offline_devices
        .with(|b| b.offline("dev2", Instant::now()));
    let offline = device_request(&mut h, &[b"SEND", b"dev2", b"m3", b"three"]);
    let (deliveries, replies) = handle_device(&h, offline).await;
    assert_eq!(replies, vec![b"+OK\r\n".to_vec()]);
    assert!(deliveries.is_empty(), "{deliveries:?}");
    let stats = h
        .service
        .read_device_index(|index| index.queue_stats(b"dev2"));
    assert_eq!((stats.enqueued, stats.invisible), (1, 0));
}

/// What the broker hands a subscriber of a forward's topic: the forward as a publish.
fn as_received(forward: &OutboundMessage) -> InboundMessage {
    InboundMessage {
        topic: forward.topic.clone(),
        qos: 1,
        response_topic: forward.response_topic.clone(),
        correlation_data: forward.correlation_data.clone(),
        message_expiry_secs: forward.message_expiry_secs,
        content_type: None,
        user_properties: forward
            .user_properties
            .iter()
            .map(|(name, value)| (name.to_string(), value.clone()))
            .collect(),
        payload: forward.payload.clone(),
        received_at: Instant::now(),
    }
}

/// A settlement (and a pull) that reaches a node after it stopped serving is published again,
/// marked, for the serving leader instead of being dropped; the leader settles it once, and
/// answers the device; a marked publish is never forwarded a second time.
#[tokio::test]
async fn a_settlement_at_a_deposed_leader_is_forwarded_and_settles_once() {
    let mut h = Harness::start(Duration::from_secs(10)).await;
    let mut send = h.request(&resp(&[b"SEND", b"dev1", b"m1", b"one"]), Some(10));
    send.topic = DEVICEBOUND_REQUEST_TOPIC.to_owned();
    h.service.clone().handle::<Devicebound>(send).await;
    let (deliveries, _) = split_device_publishes(h.outbox.take());
    let token = deliveries[0].1.clone();
    let push = DevicePush::new(h.service.clone(), h.offline_devices.clone(), None);
    let forwards = |result: &str| {
        h.metrics
            .devicebound
            .forwards_total
            .with_label_values(&[result])
            .get()
    };

    // Deposed: the settlement is published again, unchanged but for the mark.
    h.serving.store(false, Ordering::SeqCst);
    let settle = InboundMessage {
        topic: format!("devices/dev1/messages/settle/complete/{token}"),
        qos: 1,
        response_topic: Some("devices/dev1/replies".to_owned()),
        correlation_data: Some(Bytes::from_static(b"s-1")),
        message_expiry_secs: Some(30),
        content_type: None,
        user_properties: vec![("__srcId".to_owned(), "dev1".to_owned())],
        payload: Bytes::new(),
        received_at: Instant::now(),
    };
    push.clone().handle_inbound(settle.clone()).await;
    let published = h.outbox.take();
    assert_eq!(published.len(), 1, "{published:?}");
    let forward = &published[0];
    assert!(matches!(forward.kind, OutboundKind::DeviceForward { .. }));
    assert_eq!(forward.topic, settle.topic);
    assert_eq!(forward.response_topic, settle.response_topic);
    assert_eq!(forward.correlation_data, settle.correlation_data);
    let marks: Vec<&str> = forward
        .user_properties
        .iter()
        .filter(|(name, _)| name == "__fwd")
        .map(|(_, value)| value.as_str())
        .collect();
    assert_eq!(marks, ["statestore-test"]);
    assert_eq!(forwards("forwarded"), 1);
    let stats = h.service.read_device_index(|i| i.queue_stats(b"dev1"));
    assert_eq!(stats.invisible, 1, "nothing settled at the deposed node");

    // Another deposed node gets the forward: it is not passed on again.
    let forwarded = as_received(forward);
    push.clone().handle_inbound(forwarded.clone()).await;
    assert!(h.outbox.take().is_empty());
    assert_eq!(forwards("looped"), 1);

    // The serving leader gets it: settled, and the device answered :1.
    h.serving.store(true, Ordering::SeqCst);
    push.clone().handle_inbound(forwarded.clone()).await;
    let replies = h.outbox.take();
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(&replies[0].payload[..], b":1\r\n");
    assert_eq!(replies[0].topic, "devices/dev1/replies");
    assert_eq!(replies[0].correlation_data, settle.correlation_data);
    let stats = h.service.read_device_index(|i| i.queue_stats(b"dev1"));
    assert_eq!((stats.enqueued, stats.invisible), (0, 0), "completed");

    // The device's own publish reaching the leader as well (both subscribed for a moment):
    // the same request, so the remembered reply, and the message is not settled twice.
    push.clone().handle_inbound(settle).await;
    let replies = h.outbox.take();
    assert_eq!(&replies[0].payload[..], b":1\r\n");
    assert_eq!(
        h.metrics.service.dedup_hits_total.get(),
        1,
        "the forward's mark is not part of the request"
    );

    // Activity is never forwarded (telemetry has other subscribers).
    h.serving.store(false, Ordering::SeqCst);
    let activity = InboundMessage {
        topic: "devices/dev1/messages/events".to_owned(),
        response_topic: None,
        correlation_data: None,
        ..forwarded
    };
    push.clone().handle_inbound(activity).await;
    assert!(h.outbox.take().is_empty());
    assert_eq!(
        h.metrics
            .devicebound
            .device_topics_dropped_total
            .with_label_values(&["not_leader"])
            .get(),
        1
    );
}

// ---- Authorization (issue 29): broker-vouched identity and the policy's rules ----

/// `testdata/authorization.toml`: a policy and, per service, requests in order with the
/// identity the broker vouches for and the exact reply.
#[derive(serde::Deserialize)]
struct AuthorizationCases {
    policy: String,
    state_store: Vec<AuthorizationCase>,
    devicebound: Vec<AuthorizationCase>,
}

#[derive(serde::Deserialize)]
struct AuthorizationCase {
    identity: String,
    request: Vec<String>,
    reply: String,
}

impl AuthorizationCase {
    fn payload(&self) -> Vec<u8> {
        let parts: Vec<&[u8]> = self.request.iter().map(|p| p.as_bytes()).collect();
        resp(&parts)
    }
}

fn authorization_cases() -> AuthorizationCases {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/testdata/authorization.toml"
    );
    let text = std::fs::read_to_string(path).expect("testdata/authorization.toml");
    toml::from_str(&text).expect("valid cases")
}

const NOT_AUTHORIZED: &[u8] = b"-ERR not authorized\r\n";

fn vouched() -> RequesterIdentity {
    RequesterIdentity::Vouched {
        property: "__ssVouchedId".to_owned(),
    }
}

async fn authorizing(policy: &str) -> Harness {
    let mut setup = Setup::new(Duration::from_secs(10));
    setup.identity = vouched();
    setup.policy = Policy::parse(policy).expect("valid policy");
    Harness::start_with(setup).await
}

impl Harness {
    /// `payload` as a request the broker vouches came from `identity` (the client claims
    /// `__srcId` c1 regardless).
    async fn send_as(&mut self, identity: &str, payload: &[u8]) -> Vec<u8> {
        let mut message = self.request(payload, Some(10));
        message
            .user_properties
            .push(("__ssVouchedId".to_owned(), identity.to_owned()));
        let replies = self.handle(message).await;
        assert_eq!(replies.len(), 1, "one reply to {identity}");
        replies[0].payload.to_vec()
    }
}

#[tokio::test]
async fn the_policy_decides_each_method_on_each_key_by_the_vouched_identity() {
    let cases = authorization_cases();
    let mut h = authorizing(&cases.policy).await;
    for case in &cases.state_store {
        let reply = h.send_as(&case.identity, &case.payload()).await;
        assert_eq!(
            String::from_utf8_lossy(&reply),
            case.reply,
            "{} {:?}",
            case.identity,
            case.request
        );
    }
    let denied = h
        .metrics
        .service
        .requests_total
        .with_label_values(&["set", "not_authorized"])
        .get();
    let expected = cases
        .state_store
        .iter()
        .filter(|c| c.request[0] == "SET" && c.reply.as_bytes() == NOT_AUTHORIZED)
        .count();
    assert_eq!(denied, u64::try_from(expected).expect("count"));
}

#[tokio::test]
async fn scan_lists_only_the_keys_the_requester_may_read() {
    let mut h = authorizing(&authorization_cases().policy).await;
    for key in [&b"a/1"[..], b"a/2"] {
        assert_eq!(
            h.send_as("alice", &resp(&[b"SET", key, b"v"])).await,
            b"+OK\r\n"
        );
    }
    assert_eq!(
        h.send_as("bob", &resp(&[b"SET", b"a*", b"v"])).await,
        b"+OK\r\n"
    );
    let keys = |reply: &[u8]| scan_page(reply).0;
    let for_bob = keys(&h.send_as("bob", &resp(&[b"SCAN", b"*"])).await);
    assert_eq!(
        for_bob,
        vec![b"a*".to_vec(), b"a/1".to_vec(), b"a/2".to_vec()]
    );
    let for_mallory = keys(&h.send_as("mallory", &resp(&[b"SCAN", b"*"])).await);
    assert!(for_mallory.is_empty(), "{for_mallory:?}");
}

#[tokio::test]
async fn with_broker_identity_a_request_without_it_gets_no_reply_and_a_forged_src_id_is_ignored() {
    let mut h = authorizing(&authorization_cases().policy).await;
    // No vouched identity (a broker without the plugin): silence, counted.
    let message = h.request(&resp(&[b"GET", b"a/1"]), Some(10));
    assert!(h.handle(message).await.is_empty());
    assert_eq!(h.dropped("no_vouched_identity"), 1);
    // Claiming alice in __srcId does not make bob alice.
    let mut forged = h.request(&resp(&[b"SET", b"a/1", b"v"]), Some(10));
    forged.user_properties = vec![
        ("__srcId".to_owned(), "alice".to_owned()),
        (
            "__ts".to_owned(),
            format!("{:015}:00000:c1", h.wall.now_ms()),
        ),
        ("__ssVouchedId".to_owned(), "bob".to_owned()),
    ];
    let replies = h.handle(forged).await;
    assert_eq!(&replies[0].payload[..], NOT_AUTHORIZED);
}

#[tokio::test]
async fn a_new_policy_applies_from_the_next_request() {
    let mut h = authorizing(&authorization_cases().policy).await;
    assert_eq!(
        h.send_as("bob", &resp(&[b"SET", b"a/1", b"v"])).await,
        NOT_AUTHORIZED
    );
    h.authorizer.replace(
        Policy::parse(
            r#"
[[state_store]]
principals = ["b*"]
key_type = "pattern"
keys = ["*"]
method = "Write"
"#,
        )
        .expect("valid policy"),
    );
    assert_eq!(
        h.send_as("bob", &resp(&[b"SET", b"a/1", b"v"])).await,
        b"+OK\r\n"
    );
    assert_eq!(
        h.send_as("bob", &resp(&[b"GET", b"a/1"])).await,
        NOT_AUTHORIZED
    );
    assert_eq!(h.metrics.authz.policy_rules.get(), 1);
}

#[tokio::test]
async fn device_bound_requests_need_their_action_on_the_device() {
    let cases = authorization_cases();
    let mut h = authorizing(&cases.policy).await;
    for case in &cases.devicebound {
        let mut message = h.request(&case.payload(), Some(10));
        message.topic = DEVICEBOUND_REQUEST_TOPIC.to_owned();
        message
            .user_properties
            .push(("__ssVouchedId".to_owned(), case.identity.clone()));
        h.service.clone().handle::<Devicebound>(message).await;
        let (_, replies) = split_device_publishes(h.outbox.take());
        assert_eq!(
            replies,
            vec![case.reply.as_bytes().to_vec()],
            "{} {:?}",
            case.identity,
            case.request
        );
    }
}
