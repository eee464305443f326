//! Apply cost per proposal of the keyspace state machine, printed as a table.
//!
//! Workload: plain SETs (32-byte values over 10,000 keys, nobody observing unless the row says
//! so: `observers` 1 registers one client on one of the keys, 1000 registers 1,000 clients on
//! one key and every SET of the row writes that key), each with a request id, so every
//! proposal remembers its reply (protocol §6). The store starts with `remembered` replies whose
//! expiry instants are 1 ms apart; proposal `j` of the run is stamped 1 ms after proposal
//! `j - 1` and is remembered for `remembered` ms, so exactly one remembered reply falls due per
//! proposal and as many expire as arrive: the reply memory stays at `remembered` entries and
//! pruning runs on every proposal (steady state).
//!
//! `batch` proposals run in one [`Overlay`] transaction (one [`Machine::open`], on the store
//! [`Machine::open_with_index`] with the store's device queues' index as the nodes' apply
//! thread uses it; `batch` x [`Machine::apply`], [`Machine::finish`]), then the
//! transaction's writes are committed: into the `BTreeMap` for the in-memory backend, through
//! `StateTree::commit` (one atomic commit into the memtable, which the flush thread writes to
//! fjall behind it; no fsync) for the store. The time per proposal includes that commit;
//! building the proposals does not. After a warm-up, each row times [`ROUNDS`] consecutive
//! rounds of `APPLY_COST_PROPOSALS` proposals and prints the median and the fastest round.
//!
//! Run: `cargo bench -p statestore-storage --bench apply_cost`. Environment:
//! `APPLY_COST_PROPOSALS` (proposals per timed round, default 8192),
//! `APPLY_COST_BACKENDS` (`btree`, `sled` or `btree,sled`, the default; `sled` selects the
//! store the nodes run on, fjall since data format 9: the name predates the switch),
//! `APPLY_COST_ROWS` (only rows whose `remembered/batch/observers` contains this, e.g.
//! `200000/1024/0`), `APPLY_COST_WORKLOAD` (`set`, `devicebound` or `set,devicebound`, the
//! default).
//!
//! The device-bound table times what the nodes apply per cloud-to-device message sent to an
//! online device, on the store: the backend's SEND (`SendAndDeliver`, with a request id, so its
//! reply is remembered) and the device's completion (`SettleAndDeliver`). Devices are visited
//! `batch` at a time (groups of 64, the last of 40; or all 1,000) in four transactions of one
//! proposal per device: SEND `a` to each (delivered at once), SEND `b` to each (the window of 1
//! is full: it waits), complete `a` (which delivers `b`: the queue scan), complete `b`. So half
//! the SENDs find their device busy, as in `statestore-bench devicebound`. The time per message
//! covers its SEND and its completion, and here also building those proposals and reading the
//! lock tokens out of the outcomes (the completions need them), a small share of it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use statestore_storage::Result;
use statestore_storage::devicebound::{
    Ack, DeviceCommand, DeviceResult, Expiry, SendMessage, Settlement, TokenSeed,
};
use statestore_storage::engine::Overlay;
use statestore_storage::keyspace::{SetCondition, read};
use statestore_storage::layout::Table;
use statestore_storage::machine::{Carry, Machine, Mutation, Outcome, Proposal, RequestId};
use statestore_storage::store::{StateTree, Store, StoreConfig};
use statestore_vocab::hlc::Hlc;

/// Wall time of the first prefill proposal.
const T0_MS: u64 = 1_700_000_000_000;
/// Distinct keys written.
const KEYS: u64 = 10_000;
/// Value length.
const VALUE_LEN: usize = 32;
/// Proposals per transaction while prefilling the reply memory.
const PREFILL_BATCH: usize = 4096;
/// Timed rounds per row (the table shows the median and the fastest: the machine is shared).
const ROUNDS: usize = 5;
/// A row whose transactions make no progress for this long is reported and the run ends.
const STALL: Duration = Duration::from_secs(120);

/// Transactions committed so far (watched for stalls).
static COMMITTED: AtomicU64 = AtomicU64::new(0);

/// Ends the run if no transaction commits for [`STALL`] instead of hanging the bench. (Added
/// for sled 0.34.7, the store's database before fjall, which could deadlock under sustained
/// batch writes: spacejam/sled#1412.)
fn watch_for_stalls() {
    std::thread::spawn(|| {
        let mut last = COMMITTED.load(Ordering::Relaxed);
        let mut since = Instant::now();
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let now = COMMITTED.load(Ordering::Relaxed);
            if now != last {
                last = now;
                since = Instant::now();
            } else if since.elapsed() >= STALL {
                eprintln!("no transaction committed for {STALL:?}: the backend is stuck; rerun");
                std::process::exit(2);
            }
        }
    });
}

/// One storage backend under the keyspace.
trait Backend {
    /// Applies `proposals` in one transaction and commits it.
    fn apply_batch(&mut self, proposals: &[Proposal]) -> Result<()>;
    /// Remembered replies currently stored.
    fn remembered(&self) -> Result<usize>;
}

/// The in-memory backend of the unit tests.
struct BTree(BTreeMap<Vec<u8>, Vec<u8>>);

impl Backend for BTree {
    fn apply_batch(&mut self, proposals: &[Proposal]) -> Result<()> {
        let mut txn = Overlay::new(&self.0);
        let mut machine = Machine::open(&mut txn)?;
        for proposal in proposals {
            check(machine.apply(proposal)?.outcome);
        }
        machine.finish();
        for (key, write) in txn.into_writes() {
            match write {
                Some(value) => self.0.insert(key, value),
                None => self.0.remove(&key),
            };
        }
        COMMITTED.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn remembered(&self) -> Result<usize> {
        read::count_prefix(&self.0, &[Table::Replies.prefix()], usize::MAX)
    }
}

/// The store's state tree the nodes run on, fjall behind its memtable (public `Store` API
/// only; named for the backend's `sled` label, which predates fjall).
struct Sled {
    state: StateTree,
    _store: Store,
    _dir: tempfile::TempDir,
}

impl Sled {
    fn open() -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let store = Store::open(&StoreConfig::new(dir.path().to_owned(), 256 << 20))?;
        Ok(Sled {
            state: store.state()?,
            _store: store,
            _dir: dir,
        })
    }
}

impl Sled {
    /// Applies `proposals` in one transaction, commits it, and returns their outcomes (with the
    /// store's device queues' index held for the transaction, as the nodes' apply thread does).
    fn apply_all(&mut self, proposals: &[Proposal]) -> Result<Vec<Outcome>> {
        let view = self.state.view();
        let mut txn = Overlay::new(&view);
        let devices = self.state.device_index();
        let mut index = devices.lock().unwrap_or_else(|p| p.into_inner());
        let mut machine = Machine::open_with_index(&mut txn, &Carry::default(), &mut index)?;
        let outcomes = proposals
            .iter()
            .map(|proposal| Ok(machine.apply(proposal)?.outcome))
            .collect::<Result<Vec<_>>>()?;
        machine.finish();
        self.state.commit(txn.into_txn_writes())?;
        COMMITTED.fetch_add(1, Ordering::Relaxed);
        Ok(outcomes)
    }
}

impl Backend for Sled {
    fn apply_batch(&mut self, proposals: &[Proposal]) -> Result<()> {
        self.apply_all(proposals)?.into_iter().for_each(check);
        Ok(())
    }

    fn remembered(&self) -> Result<usize> {
        read::count_prefix(&self.state.view(), &[Table::Replies.prefix()], usize::MAX)
    }
}

fn check(outcome: Outcome) {
    assert!(
        matches!(outcome, Outcome::Stored { .. } | Outcome::Observing),
        "unexpected outcome {outcome:?}"
    );
}

/// Observers of a hot key: in such a row every SET writes that one key.
const HOT_OBSERVERS: u32 = 1_000;

/// The `i`-th SET of the workload, at `wall_ms`, remembered for `remember_ms`; with `observers`
/// the first ones register that many clients on `key-00000` instead (prefill), and with
/// [`HOT_OBSERVERS`] every SET writes that key.
fn set(i: u64, wall_ms: u64, remember_ms: u64, observers: u32) -> Proposal {
    let key = if observers >= HOT_OBSERVERS {
        b"key-00000".to_vec()
    } else {
        format!("key-{:05}", i % KEYS).into_bytes()
    };
    let mut value = vec![b'v'; VALUE_LEN];
    value[..8].copy_from_slice(&i.to_be_bytes());
    let mutation = if i < u64::from(observers) {
        Mutation::Observe {
            client: format!("watcher-{i}"),
            key: b"key-00000".to_vec(),
        }
    } else {
        Mutation::Set {
            key,
            value,
            condition: SetCondition::Always,
            expire_after_ms: None,
            fencing_token: None,
        }
    };
    Proposal {
        stamp: Hlc::new(wall_ms, 0, "bench-leader"),
        wall_ms,
        request: Some(RequestId {
            client: format!("client-{}", i % 64).into_bytes(),
            correlation: i.to_be_bytes().to_vec(),
            remember_for_ms: remember_ms,
            digest: request_digest(i),
        }),
        mutation,
        token_seed: None,
    }
}

/// One row of the table.
struct Row {
    backend: &'static str,
    remembered: usize,
    batch: usize,
    observers: u32,
    /// Proposals per timed round.
    proposals: usize,
    /// Time of each round, fastest first.
    rounds: Vec<Duration>,
    remembered_after: usize,
}

fn run(
    backend_name: &'static str,
    backend: &mut dyn Backend,
    remembered: usize,
    batch: usize,
    observers: u32,
    measured: usize,
) -> Result<Row> {
    let n = remembered as u64;
    // Prefill: proposal i at T0 + i, remembered for n ms -> expires at T0 + n + i.
    let prefill: Vec<Proposal> = (0..n).map(|i| set(i, T0_MS + i, n, observers)).collect();
    for chunk in prefill.chunks(PREFILL_BATCH) {
        backend.apply_batch(chunk)?;
    }
    // Steady state: proposal j at T0 + n + j makes the reply of prefill proposal j due.
    let warmup = batch.max(2048).div_ceil(batch) * batch;
    let measured = measured.div_ceil(batch) * batch;
    let total = (warmup + ROUNDS * measured) as u64;
    let run: Vec<Proposal> = (0..total)
        .map(|j| set(n + j, T0_MS + n + j, n, observers))
        .collect();
    let (warm, timed) = run.split_at(warmup);
    for chunk in warm.chunks(batch) {
        backend.apply_batch(chunk)?;
    }
    let mut rounds = Vec::with_capacity(ROUNDS);
    for round in timed.chunks(measured) {
        let started = Instant::now();
        for chunk in round.chunks(batch) {
            backend.apply_batch(chunk)?;
        }
        rounds.push(started.elapsed());
    }
    rounds.sort();
    Ok(Row {
        backend: backend_name,
        remembered,
        batch,
        observers,
        proposals: measured,
        rounds,
        remembered_after: backend.remembered()?,
    })
}

/// Devices of the device-bound workload.
const DEVICES: usize = 1_000;
/// How long a SEND's reply is remembered in the device-bound workload, ms.
const SEND_REMEMBERED_MS: u64 = 10_000;

/// Proposals of the device-bound workload, stamped 1 ms apart.
struct DeviceWorkload {
    next_ms: u64,
    sends: u64,
}

impl DeviceWorkload {
    fn proposal(&mut self, request: Option<RequestId>, command: DeviceCommand) -> Proposal {
        self.next_ms += 1;
        Proposal {
            stamp: Hlc::new(self.next_ms, 0, "bench-leader"),
            wall_ms: self.next_ms,
            request,
            mutation: Mutation::Device(command),
            // What the leader draws from the OS for each device-bound proposal.
            token_seed: Some(TokenSeed(std::array::from_fn(|i| {
                (self.next_ms as u8).wrapping_mul(31).wrapping_add(i as u8)
            }))),
        }
    }

    fn send(&mut self, device: usize) -> Proposal {
        self.sends += 1;
        let request = RequestId {
            client: b"backend".to_vec(),
            correlation: self.sends.to_be_bytes().to_vec(),
            remember_for_ms: SEND_REMEMBERED_MS,
            digest: request_digest(self.sends),
        };
        let command = DeviceCommand::SendAndDeliver(SendMessage {
            device: device_id(device),
            message_id: format!("msg-{}", self.sends).into_bytes(),
            body: vec![b'b'; 64],
            properties: vec![("k".to_owned(), "v".to_owned())],
            content_type: None,
            content_encoding: None,
            ack: Ack::None,
            expiry: Expiry::Default,
            generation: None,
        });
        self.proposal(Some(request), command)
    }

    fn complete(&mut self, device: usize, token: String) -> Proposal {
        let command = DeviceCommand::SettleAndDeliver {
            device: device_id(device),
            token,
            settlement: Settlement::Complete,
        };
        self.proposal(None, command)
    }
}

/// A request digest as the door computes it: 128 well-spread bits (a remembered reply stores
/// it, about 19 bytes as a varint).
fn request_digest(n: u64) -> u128 {
    xxhash_rust::xxh3::xxh3_128(&n.to_le_bytes())
}

fn device_id(device: usize) -> Vec<u8> {
    format!("device-{device:04}").into_bytes()
}

/// The lock tokens of the deliveries in `outcomes`, one per proposal (`expect` says how many
/// deliveries each proposal must make: 1 or 0).
fn tokens(outcomes: Vec<Outcome>, expect: usize) -> Vec<Option<String>> {
    outcomes
        .into_iter()
        .map(|outcome| {
            let Outcome::Device(outcome) = outcome else {
                panic!("unexpected outcome {outcome:?}");
            };
            let messages = match outcome.result {
                DeviceResult::SentAndDelivered { messages, .. } => messages,
                DeviceResult::SettledAndDelivered {
                    settled: true,
                    messages,
                } => messages,
                other => panic!("unexpected device result {other:?}"),
            };
            assert_eq!(messages.len(), expect, "deliveries");
            messages.into_iter().next().map(|delivery| delivery.token)
        })
        .collect()
}

/// One four-transaction cycle over `devices` (see the module doc); returns the messages sent.
fn device_cycle(sled: &mut Sled, work: &mut DeviceWorkload, devices: &[usize]) -> Result<usize> {
    let send_a: Vec<Proposal> = devices.iter().map(|&d| work.send(d)).collect();
    let locked_a = tokens(sled.apply_all(&send_a)?, 1);
    let send_b: Vec<Proposal> = devices.iter().map(|&d| work.send(d)).collect();
    tokens(sled.apply_all(&send_b)?, 0);
    let complete_a: Vec<Proposal> = devices
        .iter()
        .zip(locked_a)
        .map(|(&d, token)| work.complete(d, token.unwrap_or_default()))
        .collect();
    let locked_b = tokens(sled.apply_all(&complete_a)?, 1);
    let complete_b: Vec<Proposal> = devices
        .iter()
        .zip(locked_b)
        .map(|(&d, token)| work.complete(d, token.unwrap_or_default()))
        .collect();
    tokens(sled.apply_all(&complete_b)?, 0);
    Ok(2 * devices.len())
}

/// Times the device-bound workload on the store in transactions of `batch` proposals; returns
/// (messages per round, round times fastest first).
fn run_devicebound(batch: usize, measured: usize) -> Result<(usize, Vec<Duration>)> {
    let mut sled = Sled::open()?;
    let mut work = DeviceWorkload {
        next_ms: T0_MS,
        sends: 0,
    };
    let all: Vec<usize> = (0..DEVICES).collect();
    let groups: Vec<&[usize]> = all.chunks(batch.min(DEVICES)).collect();
    let cycles_per_round = measured.div_ceil(2 * groups[0].len()).max(1);
    let mut next_group = groups.iter().cycle();
    // Warm-up: every device once, and the reply memory filled to its steady size.
    let warm_cycles = groups
        .len()
        .max(usize::try_from(SEND_REMEMBERED_MS).unwrap_or(usize::MAX) / (4 * groups[0].len()) + 1);
    for group in next_group.by_ref().take(warm_cycles) {
        device_cycle(&mut sled, &mut work, group)?;
    }
    let mut rounds = Vec::with_capacity(ROUNDS);
    let mut messages = 0;
    for _ in 0..ROUNDS {
        let started = Instant::now();
        messages = 0;
        for group in next_group.by_ref().take(cycles_per_round) {
            messages += device_cycle(&mut sled, &mut work, group)?;
        }
        rounds.push(started.elapsed());
    }
    rounds.sort();
    Ok((messages, rounds))
}

fn print_devicebound(measured: usize) -> Result<()> {
    println!();
    println!(
        "apply cost, device-bound: SEND (SendAndDeliver, reply remembered) and completion \
         (SettleAndDeliver) per message, {DEVICES} devices, half the SENDs wait behind a \
         locked message; the store (fjall); {ROUNDS} rounds of about {measured} messages"
    );
    println!(
        "| devices per transaction | µs/message median | µs/message best | messages/s (median) |"
    );
    println!("|--:|--:|--:|--:|");
    for batch in [64, DEVICES] {
        let (messages, rounds) = run_devicebound(batch, measured)?;
        let per = |d: &Duration| d.as_secs_f64() / messages as f64;
        let median = rounds.get(rounds.len() / 2).map_or(f64::NAN, per);
        let best = rounds.first().map_or(f64::NAN, per);
        println!(
            "| {batch} | {:.2} | {:.2} | {:.0} |",
            median * 1e6,
            best * 1e6,
            1.0 / median
        );
    }
    Ok(())
}

fn print_header() {
    println!(
        "| backend | remembered replies | batch | observers | µs/proposal median \
         | µs/proposal best | proposals/s (median) | replies after |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|--:|");
}

fn print_row(row: &Row) {
    let per = |d: Duration| d.as_secs_f64() / row.proposals as f64;
    let median = row
        .rounds
        .get(row.rounds.len() / 2)
        .map_or(f64::NAN, |d| per(*d));
    let best = row.rounds.first().map_or(f64::NAN, |d| per(*d));
    println!(
        "| {} | {} | {} | {} | {:.2} | {:.2} | {:.0} | {} |",
        row.backend,
        row.remembered,
        row.batch,
        row.observers,
        median * 1e6,
        best * 1e6,
        1.0 / median,
        row.remembered_after,
    );
}

fn main() -> Result<()> {
    watch_for_stalls();
    let measured = std::env::var("APPLY_COST_PROPOSALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8192usize);
    let backends = std::env::var("APPLY_COST_BACKENDS").unwrap_or_else(|_| "btree,sled".to_owned());
    let workloads =
        std::env::var("APPLY_COST_WORKLOAD").unwrap_or_else(|_| "set,devicebound".to_owned());

    if workloads.contains("set") {
        let cases: [(usize, usize, u32); 7] = [
            (1_000, 1, 0),
            (1_000, 1024, 0),
            (200_000, 1, 0),
            (200_000, 1024, 0),
            (1_000, 1024, 1),
            (200_000, 1024, 1),
            (1_000, 1024, HOT_OBSERVERS),
        ];
        println!(
            "apply cost, SET with request id, replies expiring as fast as they arrive; \
             {ROUNDS} rounds of {measured} proposals per row"
        );
        println!(
            "(observers 1: one registration on a written key exists, so notify looks it up; \
             observers {HOT_OBSERVERS}: every SET writes one key that {HOT_OBSERVERS} clients observe)"
        );
        print_header();
        let only = std::env::var("APPLY_COST_ROWS").unwrap_or_default();
        for name in backends.split(',') {
            for &(remembered, batch, observers) in &cases {
                let label = format!("{remembered}/{batch}/{observers}");
                if !label.contains(only.as_str()) {
                    continue;
                }
                let row = match name.trim() {
                    "btree" => {
                        let mut backend = BTree(BTreeMap::new());
                        run(
                            "btree",
                            &mut backend,
                            remembered,
                            batch,
                            observers,
                            measured,
                        )?
                    }
                    "sled" => {
                        let mut backend = Sled::open()?;
                        run("sled", &mut backend, remembered, batch, observers, measured)?
                    }
                    other => {
                        eprintln!("unknown backend {other:?}");
                        continue;
                    }
                };
                print_row(&row);
            }
        }
    }
    if workloads.contains("devicebound") {
        print_devicebound(measured)?;
    }
    Ok(())
}
