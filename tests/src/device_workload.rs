//! A device-bound workload that runs through faults: a backend SENDs numbered messages to a
//! few devices in turn (each SEND published again with the same correlation data until it is
//! answered, so it takes effect once), and each device completes what it receives (its
//! settlements retried the same way). What the contract forbids is recorded as it happens: a
//! SEND answered other than `+OK`, a message delivered again after its completion was answered
//! `:1`, a message completed `:1` twice. [`DeviceWorkload::finish`] stops the SENDs and waits
//! until every acknowledged message was completed, then reads each device's QUEUE.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::broker::Broker;
use crate::devicebound::{DEVICEBOUND_TOPIC, device, lock_token, next_delivery, parse_queue_reply};
use crate::raw::{RawClient, resp};
use crate::raw_helpers::props;

/// How long one attempt of a SEND or settlement waits for its reply before it is published
/// again.
const ATTEMPT_WAIT: Duration = Duration::from_secs(1);

/// How long a SEND or settlement may go unanswered (every node may be down meanwhile).
const ANSWER_WITHIN: Duration = Duration::from_secs(90);

/// The Message Expiry of every SEND and settlement, seconds. The store remembers a reply only
/// until its request's Message Expiry has passed (protocol.md §6; 10 s when absent): a retry
/// after that is a new request, so a SEND whose reply was lost to a cut and that was answered
/// only after 10 s of retries would enqueue its message a second time (two copies of one
/// message id, each delivered and completed: what 100 membership cycles once reported as
/// "delivered again after its completion" and "completed :1 twice"). Every retry must fall
/// inside the window.
const REQUEST_EXPIRY_SECS: u32 = 120;
const _: () = assert!(ANSWER_WITHIN.as_secs() < REQUEST_EXPIRY_SECS as u64);

/// What the workload saw, and what it found wrong.
#[derive(Debug, Default)]
pub struct DeviceReport {
    /// Messages whose SEND was answered `+OK`, by device.
    pub sent: BTreeMap<String, BTreeSet<String>>,
    /// Messages whose completion was answered `:1`, by device.
    pub completed: BTreeMap<String, BTreeSet<String>>,
    /// Deliveries seen (redeliveries included).
    pub deliveries: usize,
    /// SENDs and settlements that needed more than one attempt.
    pub retried: usize,
    /// SENDs refused with `-ERR device queue is full` (not acknowledged, so not owed): a
    /// delivery published by a leader that was cut right after locking it is not seen by the
    /// device, the lock is honoured across the leader change (devicebound.md §6) and the
    /// message comes again only when it expires (`lock_duration_ms`, 60 s), while the SENDs
    /// go on filling the queue (`max_queue_depth`, 50).
    pub refused_full: usize,
    /// The longest a SEND or settlement waited for its answer, retries included (past 10 s,
    /// the default Message Expiry, a retry would have run again: [`REQUEST_EXPIRY_SECS`]).
    pub longest_answer_wait: Duration,
    /// The longest time between two deliveries to one device (a lost delivery shows as about
    /// `lock_duration_ms`).
    pub longest_delivery_gap: Duration,
    /// Each device's QUEUE at the end: (enqueued, invisible, dead-lettered).
    pub queues: BTreeMap<String, (i64, i64, i64)>,
    /// Contract violations.
    pub violations: Vec<String>,
}

impl DeviceReport {
    /// Messages acknowledged to their sender in all.
    pub fn sent_count(&self) -> usize {
        self.sent.values().map(BTreeSet::len).sum()
    }

    /// Messages completed in all.
    pub fn completed_count(&self) -> usize {
        self.completed.values().map(BTreeSet::len).sum()
    }
}

#[derive(Default)]
struct Shared {
    report: DeviceReport,
}

/// The running workload.
pub struct DeviceWorkload {
    stop: watch::Sender<bool>,
    /// Set once the sender has stopped, so a device judges "done" against every SEND.
    drained: watch::Sender<bool>,
    shared: Arc<Mutex<Shared>>,
    sender: JoinHandle<RawClient>,
    devices: Vec<JoinHandle<()>>,
    ids: Vec<String>,
}

impl DeviceWorkload {
    /// Starts `devices` devices named `<prefix>-dev-<n>` and a backend that sends one message
    /// every `pace` to them in turn.
    pub async fn start(broker: &Broker, prefix: &str, devices: usize, pace: Duration) -> Self {
        let (stop, stopped) = watch::channel(false);
        let (drained, drained_rx) = watch::channel(false);
        let shared = Arc::new(Mutex::new(Shared::default()));
        let ids: Vec<String> = (0..devices).map(|d| format!("{prefix}-dev-{d}")).collect();
        let mut tasks = Vec::new();
        for id in &ids {
            let client = device(broker, id).await;
            tasks.push(tokio::spawn(run_device(
                client,
                shared.clone(),
                drained_rx.clone(),
            )));
        }
        let backend = RawClient::connect(broker.port, &format!("{prefix}-backend")).await;
        let sender = tokio::spawn(run_sender(
            backend,
            ids.clone(),
            pace,
            shared.clone(),
            stopped,
        ));
        DeviceWorkload {
            stop,
            drained,
            shared,
            sender,
            devices: tasks,
            ids,
        }
    }

    /// Messages acknowledged so far.
    pub fn sent_so_far(&self) -> usize {
        lock(&self.shared).report.sent_count()
    }

    /// Stops sending, waits up to `within` until every acknowledged message was completed,
    /// reads every device's QUEUE and returns the report.
    pub async fn finish(self, within: Duration) -> DeviceReport {
        let _ = self.stop.send(true);
        let mut backend = match self.sender.await {
            Ok(backend) => backend,
            Err(err) => panic!("device workload sender failed: {err}"),
        };
        // Only now is every SEND recorded: a device that judged itself done while the last
        // SEND was still in flight would stop before its message came.
        let _ = self.drained.send(true);
        let deadline = Instant::now() + within;
        for task in self.devices {
            let left = deadline.saturating_duration_since(Instant::now());
            if tokio::time::timeout(left, task).await.is_err() {
                lock(&self.shared).report.violations.push(format!(
                    "not every acknowledged message was completed within {within:?}"
                ));
                break;
            }
        }
        for id in &self.ids {
            // Retried with the same correlation data like every other call of the workload:
            // one lost reply is the client's to recover from (QUEUE only reads).
            let request = resp(&[b"QUEUE", id.as_bytes()]);
            let Some((payload, attempts)) =
                call_until_answered(&mut backend, DEVICEBOUND_TOPIC, &request, &self.shared).await
            else {
                lock(&self.shared).report.violations.push(format!(
                    "{id}: closing QUEUE read unanswered for {ANSWER_WITHIN:?}"
                ));
                continue;
            };
            let (enqueued, invisible, dead, _) = parse_queue_reply(&payload);
            let mut shared = lock(&self.shared);
            shared.report.retried += usize::from(attempts > 1);
            shared
                .report
                .queues
                .insert(id.clone(), (enqueued, invisible, dead));
        }
        let mut shared = lock(&self.shared);
        std::mem::take(&mut shared.report)
    }
}

/// The shared state, also after a task panicked while holding it.
fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// Publishes `payload` on `topic` until a reply comes (same correlation data each time);
/// `None` after [`ANSWER_WITHIN`]. Returns the reply payload and the attempts it took, and
/// records the wait in [`DeviceReport::longest_answer_wait`].
async fn call_until_answered(
    client: &mut RawClient,
    topic: &str,
    payload: &[u8],
    shared: &Mutex<Shared>,
) -> Option<(Vec<u8>, usize)> {
    let mut p = props(client);
    p.message_expiry_interval = Some(REQUEST_EXPIRY_SECS);
    let started = Instant::now();
    let deadline = started + ANSWER_WITHIN;
    let mut attempts = 0;
    while Instant::now() < deadline {
        attempts += 1;
        if let Some(reply) = client
            .request_on(topic, payload, p.clone(), ATTEMPT_WAIT)
            .await
        {
            let mut shared = lock(shared);
            let waited = started.elapsed();
            shared.report.longest_answer_wait = shared.report.longest_answer_wait.max(waited);
            return Some((reply.payload.to_vec(), attempts));
        }
    }
    None
}

async fn run_sender(
    mut backend: RawClient,
    ids: Vec<String>,
    pace: Duration,
    shared: Arc<Mutex<Shared>>,
    stopped: watch::Receiver<bool>,
) -> RawClient {
    let mut n = 0usize;
    while !*stopped.borrow() {
        let device = &ids[n % ids.len()];
        let message = format!("m{n}");
        let body = format!("body-{n}");
        let payload = resp(&[
            b"SEND",
            device.as_bytes(),
            message.as_bytes(),
            body.as_bytes(),
        ]);
        let answer = call_until_answered(&mut backend, DEVICEBOUND_TOPIC, &payload, &shared).await;
        match record_send(&shared, device, message, answer) {
            Sent::Done => tokio::time::sleep(pace).await,
            // The device drains its queue again once a lost delivery's lock expires.
            Sent::QueueFull => tokio::time::sleep(QUEUE_FULL_PAUSE).await,
            Sent::Unanswered => return backend,
        }
        n += 1;
    }
    backend
}

/// How long the sender pauses after a SEND was refused for a full queue.
const QUEUE_FULL_PAUSE: Duration = Duration::from_millis(500);

/// What became of a SEND.
enum Sent {
    /// Answered (`+OK`, or recorded as a violation).
    Done,
    /// Refused with `-ERR device queue is full`.
    QueueFull,
    /// Never answered: the sender stops.
    Unanswered,
}

/// Records the answer to a SEND.
fn record_send(
    shared: &Mutex<Shared>,
    device: &str,
    message: String,
    answer: Option<(Vec<u8>, usize)>,
) -> Sent {
    let mut shared = lock(shared);
    match answer {
        Some((reply, _)) if reply == b"-ERR device queue is full\r\n" => {
            shared.report.refused_full += 1;
            return Sent::QueueFull;
        }
        Some((reply, attempts)) if reply == b"+OK\r\n" => {
            shared.report.retried += usize::from(attempts > 1);
            shared
                .report
                .sent
                .entry(device.to_owned())
                .or_default()
                .insert(message);
        }
        Some((reply, _)) => shared.report.violations.push(format!(
            "SEND {message} to {device} answered {:?}",
            String::from_utf8_lossy(&reply)
        )),
        None => {
            shared.report.violations.push(format!(
                "SEND {message} to {device} unanswered for {ANSWER_WITHIN:?}"
            ));
            return Sent::Unanswered;
        }
    }
    Sent::Done
}

/// Whether `device` has completed everything acknowledged to it, once sending stopped.
fn device_done(shared: &Shared, device: &str, stopped: bool) -> bool {
    let report = &shared.report;
    stopped
        && report.sent.get(device).is_none_or(|sent| {
            report
                .completed
                .get(device)
                .is_some_and(|done| sent.is_subset(done))
        })
}

async fn run_device(
    mut client: RawClient,
    shared: Arc<Mutex<Shared>>,
    mut stopped: watch::Receiver<bool>,
) {
    let id = client.id.clone();
    let mut last_delivery: Option<Instant> = None;
    loop {
        let done = {
            let shared = lock(&shared);
            device_done(&shared, &id, *stopped.borrow())
        };
        if done {
            return;
        }
        let delivery = tokio::select! {
            delivery = next_delivery(&mut client, Duration::from_millis(500)) => delivery,
            changed = stopped.changed() => {
                if changed.is_err() {
                    return; // the workload is gone
                }
                continue;
            }
        };
        let Some(delivery) = delivery else {
            continue;
        };
        let Some(message) = delivery.user_property("$.mid").map(str::to_owned) else {
            lock(&shared)
                .report
                .violations
                .push(format!("{id}: a delivery without $.mid: {delivery:?}"));
            continue;
        };
        let token = lock_token(&delivery);
        {
            let mut shared = lock(&shared);
            shared.report.deliveries += 1;
            if let Some(gap) = last_delivery.map(|at| at.elapsed()) {
                shared.report.longest_delivery_gap = shared.report.longest_delivery_gap.max(gap);
            }
            last_delivery = Some(Instant::now());
            if shared
                .report
                .completed
                .get(&id)
                .is_some_and(|done| done.contains(&message))
            {
                shared.report.violations.push(format!(
                    "{id}: {message} delivered again (token {token}) after its completion \
                     was answered :1"
                ));
            }
        }
        let topic = format!("devices/{id}/messages/settle/complete/{token}");
        let answer = call_until_answered(&mut client, &topic, b"", &shared).await;
        let mut shared = lock(&shared);
        match answer {
            Some((reply, attempts)) if reply == b":1\r\n" => {
                shared.report.retried += usize::from(attempts > 1);
                let first = shared
                    .report
                    .completed
                    .entry(id.clone())
                    .or_default()
                    .insert(message.clone());
                if !first {
                    shared
                        .report
                        .violations
                        .push(format!("{id}: {message} completed :1 twice"));
                }
            }
            // The lock ran out first (a node was down): the message comes again.
            Some((reply, _)) if reply == b":0\r\n" => {}
            Some((reply, _)) => shared.report.violations.push(format!(
                "{id}: completion of {message} answered {:?}",
                String::from_utf8_lossy(&reply)
            )),
            None => shared.report.violations.push(format!(
                "{id}: completion of {message} unanswered for {ANSWER_WITHIN:?}"
            )),
        }
    }
}
