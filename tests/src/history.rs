//! Recording client histories for linearizability checks of fault runs.
//!
//! A [`Recorder`] runs N official SDK clients (each its own MQTT client id) against a broker.
//! Each client loops until stopped, one request at a time: it picks one of a few keys
//! (`<prefix>-0` .. `<prefix>-<keys-1>`) and an operation with a seeded RNG (SET, SET NX,
//! SET NEX, GET, DEL, VDEL), notes the call time, sends the request with a per-request timeout,
//! and notes the return time and the reply. Written values are unique per client and sequence
//! number (`c3-17`), except that NEX and VDEL sometimes reuse a value the client recently read
//! or wrote on that key (otherwise NEX would almost never meet an equal value, nor VDEL a
//! matching one).
//!
//! Times are nanoseconds since one [`Instant`] taken when the recorder starts, shared by all
//! clients. A request that times out or fails becomes an [`Operation::unknown`]: it may still
//! take effect later (it may be sitting in a leader's log), which the checker allows for by
//! letting it take effect at any instant after its call. The SDK does not retry a request
//! itself (every invoke gets a fresh correlation id); only the MQTT session layer redelivers
//! an unacknowledged PUBLISH after a reconnect, with the same correlation data, which the
//! server deduplicates — either way one request has at most one effect.
//!
//! How the SDK reports replies: SET returns `response: bool`, `false` for the `:-1` reply of a
//! SET whose NX/NEX condition failed ([`Output::Set`] `applied: false`); DEL and VDEL return
//! `response: i64` (`:0` comes back as 0, `:-1` as -1, `:n` as n); GET returns
//! `Option<Vec<u8>>`. Error replies (`-ERR ...`), protocol errors and unexpected payloads are
//! `Err`, recorded as unknown outcomes and tallied by class in the [`Report`].
//!
//! ```no_run
//! # async fn run(port: u16) {
//! use statestore_tests::history::{Recorder, RecorderConfig};
//! use statestore_tests::linearizability::{check, Budget};
//!
//! let recorder = Recorder::start(port, RecorderConfig::new("lin")).await;
//! // ... inject faults ...
//! let (history, report) = recorder.finish_with_report().await;
//! println!("{report}");
//! let verdict = check(&history, Budget::default()).expect("well-formed history");
//! assert!(verdict.is_ok(), "{}", verdict.explain(&history));
//! # }
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use azure_iot_operations_protocol::common::aio_protocol_error::AIOProtocolErrorKind;
use azure_iot_operations_services::state_store::{self, ErrorKind, SetCondition, SetOptions};
use tokio::sync::watch;

use crate::linearizability::{Condition, Input, Operation, Outcome, Output, Verdict};
use crate::sdk::SdkClient;
use crate::version_audit::{self, Version, VersionedWrite};

/// How a [`Recorder`] runs.
#[derive(Debug, Clone)]
pub struct RecorderConfig {
    /// Number of SDK clients, each with its own MQTT session (client ids
    /// `<key_prefix>-recorder-<i>`).
    pub clients: usize,
    /// Number of keys (`<key_prefix>-0` ..); at least one is used.
    pub keys: usize,
    /// Prefix of the keys and of the MQTT client ids, so that recorders do not clash.
    pub key_prefix: String,
    /// Per-request timeout handed to the SDK (which rounds it up to whole seconds and also uses
    /// it as the request's message expiry).
    pub timeout: Duration,
    /// Seed of the clients' operation choices (client `i` derives its own stream from it).
    pub seed: u64,
}

impl RecorderConfig {
    /// Four clients on five keys named `<key_prefix>-0` .. `<key_prefix>-4`, 1 s per request,
    /// a fixed seed.
    pub fn new(key_prefix: &str) -> RecorderConfig {
        RecorderConfig {
            clients: 4,
            keys: 5,
            key_prefix: key_prefix.to_owned(),
            timeout: Duration::from_secs(1),
            seed: 0x5eed_1234,
        }
    }
}

/// The kind of a recorded operation (SET split by condition).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpKind {
    /// `SET key value`.
    Set,
    /// `SET key value NX`.
    SetNx,
    /// `SET key value NEX`.
    SetNex,
    /// `GET key`.
    Get,
    /// `DEL key`.
    Del,
    /// `VDEL key value`.
    VDel,
}

impl OpKind {
    /// Every kind, in the order summaries list them.
    pub const ALL: [OpKind; 6] = [
        OpKind::Set,
        OpKind::SetNx,
        OpKind::SetNex,
        OpKind::Get,
        OpKind::Del,
        OpKind::VDel,
    ];

    /// The kind of `input`.
    pub fn of(input: &Input) -> OpKind {
        match input {
            Input::Set {
                condition: Condition::Always,
                ..
            } => OpKind::Set,
            Input::Set {
                condition: Condition::Nx,
                ..
            } => OpKind::SetNx,
            Input::Set {
                condition: Condition::Nex,
                ..
            } => OpKind::SetNex,
            Input::Get => OpKind::Get,
            Input::Del => OpKind::Del,
            Input::VDel { .. } => OpKind::VDel,
        }
    }

    /// The kind's name as in the protocol (`SET NX`, `VDEL`, ...).
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Set => "SET",
            OpKind::SetNx => "SET NX",
            OpKind::SetNex => "SET NEX",
            OpKind::Get => "GET",
            OpKind::Del => "DEL",
            OpKind::VDel => "VDEL",
        }
    }

    /// What a reply without effect means for this kind (see [`KindCounts::no_effect`]).
    fn no_effect_label(self) -> &'static str {
        match self {
            OpKind::Set | OpKind::SetNx | OpKind::SetNex => "not applied",
            OpKind::Get | OpKind::Del => "absent",
            OpKind::VDel => "not deleted",
        }
    }

    fn index(self) -> usize {
        match self {
            OpKind::Set => 0,
            OpKind::SetNx => 1,
            OpKind::SetNex => 2,
            OpKind::Get => 3,
            OpKind::Del => 4,
            OpKind::VDel => 5,
        }
    }
}

/// Counts of one [`OpKind`] in a history.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindCounts {
    /// Operations that got a reply.
    pub ok: usize,
    /// Of those, replies saying nothing was there or nothing changed: a SET whose condition
    /// failed, a GET or DEL of a missing key, a VDEL that deleted nothing.
    pub no_effect: usize,
    /// Operations without a reply (timeout or error): unknown outcome.
    pub unknown: usize,
    /// Median time from call to reply of the operations that got one.
    pub median_latency: Duration,
    /// Longest time from call to reply of the operations that got one.
    pub max_latency: Duration,
}

/// Per-kind counts of a history.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    counts: [KindCounts; 6],
}

impl Summary {
    /// Counts the operations of `history` by kind and outcome.
    pub fn of(history: &[Operation]) -> Summary {
        let mut summary = Summary::default();
        let mut latencies: [Vec<u64>; 6] = Default::default();
        for op in history {
            let kind = OpKind::of(&op.input).index();
            let counts = &mut summary.counts[kind];
            match &op.outcome {
                Outcome::Unknown => counts.unknown += 1,
                Outcome::Returned { output, at } => {
                    counts.ok += 1;
                    latencies[kind].push(at.saturating_sub(op.call));
                    let no_effect = match output {
                        Output::Set { applied } => !applied,
                        Output::Get { value } => value.is_none(),
                        Output::Del { count } => *count == 0,
                        Output::VDel { result } => *result != 1,
                    };
                    if no_effect {
                        counts.no_effect += 1;
                    }
                }
            }
        }
        for (counts, mut latencies) in summary.counts.iter_mut().zip(latencies) {
            latencies.sort_unstable();
            let median = latencies.get(latencies.len() / 2).copied().unwrap_or(0);
            counts.median_latency = Duration::from_nanos(median);
            counts.max_latency = Duration::from_nanos(latencies.last().copied().unwrap_or(0));
        }
        summary
    }

    /// The counts of `kind`.
    pub fn kind(&self, kind: OpKind) -> KindCounts {
        self.counts[kind.index()]
    }

    /// All operations.
    pub fn total(&self) -> usize {
        self.counts.iter().map(|c| c.ok + c.unknown).sum()
    }

    /// Operations with an unknown outcome.
    pub fn unknown(&self) -> usize {
        self.counts.iter().map(|c| c.unknown).sum()
    }
}

impl fmt::Display for Summary {
    /// `N operations, U unknown: SET a ok (0 not applied, 4/80 ms), u unknown; SET NX ...`
    /// (latencies: median / max).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} operations, {} unknown:",
            self.total(),
            self.unknown()
        )?;
        for (i, kind) in OpKind::ALL.into_iter().enumerate() {
            let c = self.kind(kind);
            let separator = if i == 0 { " " } else { "; " };
            write!(
                f,
                "{separator}{} {} ok ({} {}, {}/{} ms), {} unknown",
                kind.name(),
                c.ok,
                c.no_effect,
                kind.no_effect_label(),
                c.median_latency.as_millis(),
                c.max_latency.as_millis(),
                c.unknown
            )?;
        }
        Ok(())
    }
}

/// What a recording run saw besides the history itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Per-kind counts of the history.
    pub summary: Summary,
    /// Why requests ended without a reply, by class (`timeout`, `service: <message>`,
    /// `protocol: <kind>`, ...), with how often.
    pub errors: BTreeMap<String, usize>,
    /// Applied writes with the version their reply carried (for [`version_audit`]).
    pub writes: Vec<VersionedWrite>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.summary)?;
        if !self.errors.is_empty() {
            let errors: Vec<String> = self
                .errors
                .iter()
                .map(|(class, n)| format!("{class} x{n}"))
                .collect();
            write!(f, "; errors: {}", errors.join(", "))?;
        }
        Ok(())
    }
}

/// What the clients of a recorder are told to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Control {
    Run,
    Pause,
    Stop,
}

/// A running recorder; [`Recorder::finish`] stops it and hands back the history.
pub struct Recorder {
    control: watch::Sender<Control>,
    keys: watch::Sender<Arc<[Vec<u8>]>>,
    key_prefix: String,
    key_count: usize,
    generation: u64,
    epoch: Instant,
    tasks: Vec<tokio::task::JoinHandle<ClientLog>>,
}

/// What one client recorded.
#[derive(Default)]
struct ClientLog {
    operations: Vec<Operation>,
    errors: BTreeMap<String, usize>,
    writes: Vec<VersionedWrite>,
}

impl Recorder {
    /// Takes the epoch, connects `config.clients` SDK clients to the broker on
    /// 127.0.0.1:`port` and starts them. Each client starts as soon as it is connected.
    pub async fn start(port: u16, config: RecorderConfig) -> Recorder {
        let epoch = Instant::now();
        let (control, _) = watch::channel(Control::Run);
        let key_count = config.keys.max(1);
        let first_keys = key_names(&config.key_prefix, key_count, 0);
        let (keys, _) = watch::channel(first_keys.clone());
        let mut tasks = Vec::with_capacity(config.clients);
        for i in 0..config.clients {
            let client = i as u64;
            let sdk =
                SdkClient::connect(port, &format!("{}-recorder-{i}", config.key_prefix)).await;
            let planner = Planner::new(client, first_keys.clone(), config.seed);
            let control = control.subscribe();
            let timeout = config.timeout;
            tasks.push(tokio::spawn(run_client(
                sdk,
                planner,
                epoch,
                timeout,
                control,
                keys.subscribe(),
            )));
        }
        Recorder {
            control,
            keys,
            key_prefix: config.key_prefix,
            key_count,
            generation: 0,
            epoch,
            tasks,
        }
    }

    /// Moves the clients to a fresh set of keys (`<key_prefix>-g<n>-0` ..): each client takes
    /// them before its next request; requests in flight finish on the old keys. The checker
    /// decides each key on its own, and its search grows with the operations and unknown
    /// outcomes of one key, so a long fault run that moves on every cycle keeps every key's
    /// history small enough to decide.
    pub fn move_to_fresh_keys(&mut self) {
        self.generation += 1;
        self.keys
            .send_replace(key_names(&self.key_prefix, self.key_count, self.generation));
    }

    /// Makes the clients issue no new request until [`Recorder::resume`] (requests in flight
    /// still finish, within the timeout): for waits that need the store quiet, such as
    /// replicas converging to one digest. Nothing is recorded while paused.
    pub fn pause(&self) {
        self.control.send_replace(Control::Pause);
    }

    /// Lets paused clients go on.
    pub fn resume(&self) {
        self.control.send_replace(Control::Run);
    }

    /// The instant that recorded times count from.
    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    /// Nanoseconds since the epoch now, on the history's clock (for marking fault times).
    pub fn now(&self) -> u64 {
        nanos_since(self.epoch)
    }

    /// Stops the clients (each finishes its request in flight) and returns the merged history,
    /// ordered by call time.
    pub async fn finish(self) -> Vec<Operation> {
        self.finish_with_report().await.0
    }

    /// [`Recorder::finish`], also returning per-kind counts and the error tally.
    pub async fn finish_with_report(self) -> (Vec<Operation>, Report) {
        self.control.send_replace(Control::Stop);
        let mut history = Vec::new();
        let mut errors: BTreeMap<String, usize> = BTreeMap::new();
        let mut writes = Vec::new();
        for task in self.tasks {
            match task.await {
                Ok(log) => {
                    history.extend(log.operations);
                    writes.extend(log.writes);
                    for (class, n) in log.errors {
                        *errors.entry(class).or_default() += n;
                    }
                }
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(e) => panic!("recorder client task did not finish: {e}"),
            }
        }
        history.sort_by_key(|op| (op.call, op.client));
        let summary = Summary::of(&history);
        (
            history,
            Report {
                summary,
                errors,
                writes,
            },
        )
    }
}

/// The keys of one generation: `<prefix>-<k>` for the first, `<prefix>-g<generation>-<k>` after.
fn key_names(prefix: &str, count: usize, generation: u64) -> Arc<[Vec<u8>]> {
    (0..count)
        .map(|k| match generation {
            0 => format!("{prefix}-{k}").into_bytes(),
            g => format!("{prefix}-g{g}-{k}").into_bytes(),
        })
        .collect()
}

fn nanos_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// One client's loop: plan, send, record, until told to stop (waiting while paused).
async fn run_client(
    sdk: SdkClient,
    mut planner: Planner,
    epoch: Instant,
    timeout: Duration,
    mut control: watch::Receiver<Control>,
    mut keys: watch::Receiver<Arc<[Vec<u8>]>>,
) -> ClientLog {
    let mut log = ClientLog::default();
    loop {
        // A dropped sender (the recorder is gone) also ends the loop.
        match control.wait_for(|c| *c != Control::Pause).await.map(|c| *c) {
            Ok(Control::Run) => {}
            _ => break,
        }
        if keys.has_changed().unwrap_or(false) {
            let fresh = keys.borrow_and_update().clone();
            planner.move_to(fresh);
        }
        let (k, input) = planner.next();
        let key = planner.key(k).to_vec();
        let call = nanos_since(epoch);
        let result = send(&sdk.client, key.clone(), &input, timeout).await;
        let ret = nanos_since(epoch);
        match result {
            Ok((output, version)) => {
                planner.observe(k, &input, Some(&output));
                if let Some(version) = version.filter(|_| created_a_version(&output)) {
                    log.writes.push(VersionedWrite {
                        client: planner.client,
                        call,
                        ret,
                        ret_wall_ms: crate::now_ms(),
                        version,
                    });
                }
                log.operations.push(Operation::returned(
                    planner.client,
                    key,
                    input,
                    call,
                    ret,
                    output,
                ));
            }
            Err(class) => {
                planner.observe(k, &input, None);
                *log.errors.entry(class).or_default() += 1;
                log.operations
                    .push(Operation::unknown(planner.client, key, input, call));
                // A short pause so a dead route does not become a busy loop.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    sdk.shutdown().await;
    log
}

/// True for the replies of writes that issued a new version (see [`version_audit`]).
fn created_a_version(output: &Output) -> bool {
    matches!(
        output,
        Output::Set { applied: true } | Output::Del { count: 1 } | Output::VDel { result: 1 }
    )
}

/// Sends `input` on `key` and maps the SDK's answer to an [`Output`] and the reply's version,
/// or to an error class.
async fn send(
    client: &state_store::Client,
    key: Vec<u8>,
    input: &Input,
    timeout: Duration,
) -> Result<(Output, Option<Version>), String> {
    let request = async {
        match input {
            Input::Set { value, condition } => {
                let options = SetOptions {
                    set_condition: sdk_condition(*condition),
                    ..SetOptions::default()
                };
                let result = client.set(key, value.clone(), timeout, None, options).await;
                to_output(result, |applied| Output::Set { applied })
            }
            Input::Get => to_output(client.get(key, timeout).await, |value| Output::Get {
                value,
            }),
            Input::Del => to_output(client.del(key, None, timeout).await, |count| Output::Del {
                count,
            }),
            Input::VDel { value } => {
                let result = client.vdel(key, value.clone(), None, timeout).await;
                to_output(result, |result| Output::VDel { result })
            }
        }
    };
    // The SDK times out by itself; this guard only keeps a wedged client from stalling a run.
    let guard = timeout.saturating_add(Duration::from_secs(2));
    tokio::time::timeout(guard, request)
        .await
        .unwrap_or_else(|_| Err("client guard timeout".to_owned()))
}

fn sdk_condition(condition: Condition) -> SetCondition {
    match condition {
        Condition::Always => SetCondition::Unconditional,
        Condition::Nx => SetCondition::OnlyIfDoesNotExist,
        Condition::Nex => SetCondition::OnlyIfEqualOrDoesNotExist,
    }
}

/// The reply of an SDK call as an [`Output`] (via `f`) and its version, or the class of its
/// error.
fn to_output<T: fmt::Debug>(
    result: Result<state_store::Response<T>, state_store::Error>,
    f: impl FnOnce(T) -> Output,
) -> Result<(Output, Option<Version>), String> {
    match result {
        Ok(response) => {
            let version = response.version.map(|hlc| Version {
                ms: hlc
                    .timestamp
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                counter: hlc.counter,
                node: hlc.node_id,
            });
            Ok((f(response.response), version))
        }
        Err(e) => Err(error_class(&e)),
    }
}

/// A short class for an SDK error, for the tally in [`Report::errors`].
fn error_class(error: &state_store::Error) -> String {
    match error.kind() {
        ErrorKind::AIOProtocolError(e) if e.kind == AIOProtocolErrorKind::Timeout => {
            "timeout".to_owned()
        }
        ErrorKind::AIOProtocolError(e) => format!("protocol: {:?}", e.kind),
        ErrorKind::ServiceError(e) => format!("service: {e}"),
        ErrorKind::UnexpectedPayload(payload) => format!("unexpected payload: {payload}"),
        other => format!("other: {other}"),
    }
}

/// How many recently seen values a client remembers per key.
const RECENT: usize = 4;

/// One client's choice of the next operation: a seeded RNG, its sequence number for fresh
/// values, and the values it recently read or wrote on each key.
struct Planner {
    client: u64,
    rng: SplitMix64,
    seq: u64,
    keys: Arc<[Vec<u8>]>,
    recent: Vec<VecDeque<Vec<u8>>>,
}

impl Planner {
    fn new(client: u64, keys: Arc<[Vec<u8>]>, seed: u64) -> Planner {
        // Distinct, well-mixed streams per client from one seed.
        let mut seeder = SplitMix64(seed ^ client.wrapping_mul(0xa076_1d64_78bd_642f));
        let rng = SplitMix64(seeder.next_u64());
        let recent = vec![VecDeque::new(); keys.len()];
        Planner {
            client,
            rng,
            seq: 0,
            keys,
            recent,
        }
    }

    /// Plans on `keys` from now on, forgetting the values seen on the old ones.
    fn move_to(&mut self, keys: Arc<[Vec<u8>]>) {
        self.recent = vec![VecDeque::new(); keys.len()];
        self.keys = keys;
    }

    fn key(&self, k: usize) -> &[u8] {
        self.keys.get(k).map(Vec::as_slice).unwrap_or(b"")
    }

    /// A value nobody else writes: `c<client>-<seq>`.
    fn fresh(&mut self) -> Vec<u8> {
        self.seq += 1;
        format!("c{}-{}", self.client, self.seq).into_bytes()
    }

    /// `percent` % of the time a value recently seen on key `k` (if there is one), otherwise a
    /// fresh value.
    fn recent_or_fresh(&mut self, k: usize, percent: u64) -> Vec<u8> {
        let reuse = if self.rng.below(100) < percent {
            self.recent(k)
        } else {
            None
        };
        match reuse {
            Some(value) => value,
            None => self.fresh(),
        }
    }

    /// A value recently seen on key `k`, if any: the newest 60% of the time (the likeliest to
    /// still be there), otherwise any of the last few.
    fn recent(&mut self, k: usize) -> Option<Vec<u8>> {
        let len = self.recent.get(k).map_or(0, VecDeque::len);
        if len == 0 {
            return None;
        }
        let pick = if self.rng.below(100) < 60 {
            len - 1
        } else {
            self.rng.below(len as u64) as usize
        };
        self.recent.get(k).and_then(|r| r.get(pick)).cloned()
    }

    /// The next request: a key index and an input. Mix (percent): SET 25, SET NX 10,
    /// SET NEX 12 (a recent value 40% of the time), GET 33, DEL 7, VDEL 13 (a recent value 75%
    /// of the time).
    fn next(&mut self) -> (usize, Input) {
        let k = self.rng.below(self.keys.len() as u64) as usize;
        let roll = self.rng.below(100);
        let input = match roll {
            0..25 => Input::Set {
                value: self.fresh(),
                condition: Condition::Always,
            },
            25..35 => Input::Set {
                value: self.fresh(),
                condition: Condition::Nx,
            },
            35..47 => Input::Set {
                value: self.recent_or_fresh(k, 40),
                condition: Condition::Nex,
            },
            47..80 => Input::Get,
            80..87 => Input::Del,
            _ => Input::VDel {
                value: self.recent_or_fresh(k, 75),
            },
        };
        (k, input)
    }

    /// Remembers values seen on key `k`: a GET's value, and every SET's value (applied, not
    /// applied or unknown: it may be there now or soon).
    fn observe(&mut self, k: usize, input: &Input, output: Option<&Output>) {
        let seen = match (input, output) {
            (_, Some(Output::Get { value: Some(value) })) => value.clone(),
            (Input::Set { value, .. }, _) => value.clone(),
            _ => return,
        };
        if let Some(recent) = self.recent.get_mut(k) {
            if recent.contains(&seen) {
                return;
            }
            if recent.len() == RECENT {
                recent.pop_front();
            }
            recent.push_back(seen);
        }
    }
}

/// SplitMix64: a tiny, good-enough seeded generator for choosing operations.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform-enough in `0..n` (`n` > 0; 0 when `n` is 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }
}

/// How far a reply's version may run ahead of the wall clock (protocol §1: 60 s).
const MAX_VERSION_LEAD_MS: u64 = 60_000;

/// Search steps the recorded-history check may spend on one key: about 20 s in a debug build
/// (about a million steps a second).
/// Each key has its own budget, so a hard key is decided however many keys came before it (the
/// 2026-12-03 power-cut hour ran a shared 5M-step budget out on key 436 of 505, a key that
/// needed 9-27 s alone, by `examples/check_history`).
const CHECK_STEPS_PER_KEY: u64 = 20_000_000;

/// Wall-clock limit on the whole recorded-history check (a run never hangs in the search).
const CHECK_TIME: Duration = Duration::from_secs(15 * 60);

/// Checks a recorded history for linearizability, audits its write versions (see
/// [`version_audit`]) and prints what was found (operations, unknown outcomes, search effort,
/// verdict, per-kind detail). `Err` explains a violation, an undecided search, a version that
/// went backwards or a recorder that got no reply at all; a violating history is also
/// written to a kept temporary file named in the message.
pub fn check_recorded(history: &[Operation], recording: &Report) -> Result<(), String> {
    let started = Instant::now();
    let (verdict, stats) = crate::linearizability::check_with_stats(
        history,
        crate::linearizability::Budget::per_key(CHECK_STEPS_PER_KEY, CHECK_TIME),
    )
    .map_err(|e| format!("malformed recorded history: {e:?}"))?;
    println!(
        "history: {} operations recorded, {} unknown outcomes, {} keys, {} search steps, \
         {} memo entries, checked in {} ms: {}",
        history.len(),
        recording.summary.unknown(),
        stats.keys,
        stats.steps,
        stats.cache_entries,
        started.elapsed().as_millis(),
        match &verdict {
            Verdict::Ok => "linearizable",
            Verdict::Violation { .. } => "NOT LINEARIZABLE",
            Verdict::Unknown { .. } => "UNDECIDED (search budget ran out)",
        },
    );
    println!("history detail: {recording}");
    if recording.summary.total() == recording.summary.unknown() {
        return Err(format!("the recorder got no reply at all: {recording}"));
    }
    let versions = version_audit::audit(&recording.writes, MAX_VERSION_LEAD_MS)?;
    println!(
        "fencing-token audit: {} applied writes, {} real-time-ordered pairs, versions always \
         increasing; largest lead over the wall clock {} ms",
        versions.writes, versions.ordered_pairs, versions.max_lead_ms
    );
    if verdict.is_ok() {
        return Ok(());
    }
    let explanation = verdict.explain(history);
    Err(format!(
        "the recorded history is not linearizable:\n{explanation}\nwhole history: {}",
        dump_history(history)
    ))
}

/// Writes `history` in the text format to a kept temporary file; returns its path (or why it
/// could not be written).
fn dump_history(history: &[Operation]) -> String {
    use std::io::Write;
    let file = tempfile::Builder::new()
        .prefix("statestore-history-")
        .suffix(".txt")
        .tempfile()
        .and_then(|f| f.keep().map_err(|e| e.error));
    match file {
        Ok((mut file, path)) => {
            let text: String = history.iter().map(|op| format!("{op}\n")).collect();
            match file.write_all(text.as_bytes()) {
                Ok(()) => path.display().to_string(),
                Err(e) => format!("(not written: {e})"),
            }
        }
        Err(e) => format!("(not written: {e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn keys(n: usize) -> Arc<[Vec<u8>]> {
        (0..n).map(|k| format!("t-{k}").into_bytes()).collect()
    }

    /// The planner is deterministic per seed, covers every kind and key, never repeats a fresh
    /// value, and reuses recent values for NEX and VDEL.
    #[test]
    fn planner_mix_is_seeded_and_values_are_unique() {
        let run = |seed| {
            let mut planner = Planner::new(3, keys(5), seed);
            let mut plans = Vec::new();
            for i in 0..2000 {
                let (k, input) = planner.next();
                // Pretend every GET read the value last written by this client.
                let output = match &input {
                    Input::Get if i % 2 == 0 => Some(Output::Get {
                        value: Some(format!("c9-{i}").into_bytes()),
                    }),
                    _ => None,
                };
                planner.observe(k, &input, output.as_ref());
                plans.push((k, input));
            }
            plans
        };
        let plans = run(7);
        assert_eq!(plans, run(7), "same seed, same plan");
        assert_ne!(plans, run(8), "another seed, another plan");

        let kinds: HashSet<OpKind> = plans.iter().map(|(_, i)| OpKind::of(i)).collect();
        assert_eq!(kinds.len(), OpKind::ALL.len(), "every kind is chosen");
        let used_keys: HashSet<usize> = plans.iter().map(|(k, _)| *k).collect();
        assert_eq!(used_keys.len(), 5, "every key is chosen");

        let mut fresh = HashSet::new();
        let (mut reused_nex, mut reused_vdel) = (0, 0);
        let mut written = HashSet::new();
        for (_, input) in &plans {
            match input {
                Input::Set {
                    value,
                    condition: Condition::Always | Condition::Nx,
                } => {
                    assert!(fresh.insert(value.clone()), "fresh value repeated");
                    assert!(value.starts_with(b"c3-"));
                    written.insert(value.clone());
                }
                Input::Set {
                    value,
                    condition: Condition::Nex,
                } => {
                    if written.contains(value) || value.starts_with(b"c9-") {
                        reused_nex += 1;
                    } else {
                        written.insert(value.clone());
                    }
                }
                Input::VDel { value } if written.contains(value) || value.starts_with(b"c9-") => {
                    reused_vdel += 1
                }
                _ => {}
            }
        }
        assert!(reused_nex > 20, "NEX reuses recent values: {reused_nex}");
        assert!(reused_vdel > 50, "VDEL reuses recent values: {reused_vdel}");
    }

    /// SDK replies map to outputs, SDK errors to an error class (an unknown outcome).
    #[test]
    fn sdk_results_map_to_outputs_and_error_classes() {
        // The SDK's own result type (its error is large).
        #[allow(clippy::result_large_err)]
        fn ok<T: fmt::Debug>(response: T) -> Result<state_store::Response<T>, state_store::Error> {
            Ok(state_store::Response {
                version: None,
                response,
            })
        }
        assert_eq!(
            to_output(ok(false), |applied| Output::Set { applied }),
            Ok((Output::Set { applied: false }, None))
        );
        assert_eq!(
            to_output(ok(-1i64), |result| Output::VDel { result }),
            Ok((Output::VDel { result: -1 }, None))
        );
        let versioned = Ok(state_store::Response {
            version: Some(
                azure_iot_operations_protocol::common::hybrid_logical_clock::HybridLogicalClock {
                    timestamp: std::time::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
                    counter: 7,
                    node_id: "n2".to_owned(),
                },
            ),
            response: true,
        });
        let expected = Version {
            ms: 1_700_000_000_123,
            counter: 7,
            node: "n2".to_owned(),
        };
        assert_eq!(
            to_output(versioned, |applied| Output::Set { applied }),
            Ok((Output::Set { applied: true }, Some(expected)))
        );
        let err: Result<state_store::Response<i64>, _> = Err(state_store::Error::from(
            ErrorKind::UnexpectedPayload("Ok".to_owned()),
        ));
        assert_eq!(
            to_output(err, |count| Output::Del { count }),
            Err("unexpected payload: Ok".to_owned())
        );
    }

    /// The summary counts kinds, outcomes and no-effect replies.
    #[test]
    fn summary_counts_kinds_and_outcomes() {
        let set = |condition| Input::Set {
            value: b"v".to_vec(),
            condition,
        };
        let history = [
            Operation::returned(
                0,
                "k",
                set(Condition::Nx),
                0,
                1,
                Output::Set { applied: false },
            ),
            Operation::returned(
                0,
                "k",
                set(Condition::Always),
                2,
                3,
                Output::Set { applied: true },
            ),
            Operation::unknown(1, "k", set(Condition::Always), 4),
            Operation::returned(1, "k", Input::Get, 5, 6, Output::Get { value: None }),
            Operation::returned(1, "k", Input::Del, 7, 8, Output::Del { count: 1 }),
        ];
        let summary = Summary::of(&history);
        assert_eq!((summary.total(), summary.unknown()), (5, 1));
        assert_eq!(
            summary.kind(OpKind::SetNx),
            KindCounts {
                ok: 1,
                no_effect: 1,
                unknown: 0,
                median_latency: Duration::from_nanos(1),
                max_latency: Duration::from_nanos(1),
            }
        );
        assert_eq!(
            summary.kind(OpKind::Set),
            KindCounts {
                ok: 1,
                no_effect: 0,
                unknown: 1,
                median_latency: Duration::from_nanos(1),
                max_latency: Duration::from_nanos(1),
            }
        );
        assert_eq!(summary.kind(OpKind::Get).no_effect, 1);
        assert_eq!(summary.kind(OpKind::Del).no_effect, 0);
        assert!(
            summary
                .to_string()
                .starts_with("5 operations, 1 unknown: SET 1 ok")
        );
    }

    /// After moving to fresh keys the planner names only the new keys and never reuses a value
    /// it saw on the old ones (NEX and VDEL would otherwise compare against another key's
    /// history); the generations' names never clash.
    #[test]
    fn planner_on_fresh_keys_forgets_the_old_ones() {
        let first = key_names("p", 3, 0);
        let second = key_names("p", 3, 1);
        assert_eq!(first[0], b"p-0".to_vec());
        assert_eq!(second[2], b"p-g1-2".to_vec());
        assert!(first.iter().all(|k| !second.contains(k)));

        let mut planner = Planner::new(1, first, 11);
        let mut old_values = HashSet::new();
        for _ in 0..500 {
            let (k, input) = planner.next();
            planner.observe(k, &input, None);
            if let Input::Set { value, .. } = &input {
                old_values.insert(value.clone());
            }
        }
        planner.move_to(second.clone());
        for _ in 0..2000 {
            let (k, input) = planner.next();
            assert!(second.iter().any(|name| name.as_slice() == planner.key(k)));
            match &input {
                Input::Set { value, .. } | Input::VDel { value } => {
                    assert!(!old_values.contains(value), "reused an old key's value")
                }
                _ => {}
            }
            planner.observe(k, &input, None);
        }
    }
}
