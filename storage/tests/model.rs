//! Model-based property tests of the keyspace semantics and of its storage backends.
//!
//! Invariants checked:
//!
//! - The deterministic state machine ([`Machine`]) behaves like a deliberately simple
//!   in-memory model written from `shared/spec/protocol.md`: for every proposal the same
//!   [`Outcome`] (§2 commands, §4 fencing, §6 retried requests, §9 quotas), the same versions
//!   (§3: at least the proposal stamp, strictly greater than every version issued before), the
//!   same notification events (§7: key, change, version; and the observers the notifier reads
//!   for each from the committed state, by their registration floors), the same GET results
//!   including the version, and the same expiry behaviour (§8: invisible from the expiry
//!   instant on, removal by sweep or by a later write notifies `DELETE`).
//! - A BTreeMap replica applying proposals one transaction each and a store replica (the state
//!   tree in fjall behind its memtable) applying the same proposals in batches of random sizes
//!   report the same outcomes and the same [`machine_read::digest`] after every batch.
//! - The same holds with hundreds of proposals per store transaction while remembered replies
//!   expire faster than one proposal may prune them (pruning does not depend on how proposals
//!   are grouped into transactions), and a 5,000-reply memory is pruned exactly 32 per
//!   proposal inside one batch.
//! - The notification lookup's shortcut for stores without registrations gives the same
//!   events as the full lookup.
//! - A store snapshot exported and installed into another store (even one that already held
//!   other state) reproduces the digest and the store-wide counters.
//! - The caps of the tables clients make grow (store-wide and per-key KEYNOTIFY registrations,
//!   reply memory by count and bytes with earliest-expiry eviction) decide outcomes as the
//!   model does, and the meta's counters (registrations, remembered replies and their bytes,
//!   evictions, per-key cap refusals) equal the model's (and, where they count rows, a recount
//!   of the tables) after every step, also with caps hit inside large batches. Each
//!   registration stores as its floor the highest version issued when it was made.
//!
//! The model deliberately does not call into the crate's apply logic: it uses the crate's
//! plain data types (`Hlc`, `Outcome`, `KeyEvent`, `Mutation`, ...) only as a vocabulary and
//! orders HLCs itself. The one thing it takes from the crate is the length of a remembered
//! reply's encoding (`codec::encode` of the plain `RememberedReply`), which the byte cap counts.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use proptest::sample::Index;
use statestore_storage::codec;
use statestore_storage::engine::{KvPair, OrderedRead, Overlay};
use statestore_storage::keyspace::{
    Change, KeyEvent, KeyspaceMeta, Limits, Record, Rejection, SetCondition, read,
};
use statestore_storage::layout::Table;
use statestore_storage::machine::read as machine_read;
use statestore_storage::machine::reply_rows;
use statestore_storage::machine::{
    Applied, Machine, Mutation, Outcome, Proposal, RememberedReply, RequestId,
};
use statestore_storage::store::{StateTree, Store, StoreConfig};
use statestore_vocab::hlc::Hlc;

// ---------------------------------------------------------------------------------------------
// The universe the generated sequences live in.
// ---------------------------------------------------------------------------------------------

/// Wall clock of the first leader.
const BASE_MS: u64 = 1_700_000_000_000;

/// Four keys (binary safe, §2): one a prefix of another, one with CRLF, one not UTF-8.
const KEYS: [&[u8]; 4] = [b"a", b"ab", b"k\r\n", b"\xff\x00"];

/// Three values of different lengths (the byte quota counts them), one empty.
const VALUES: [&[u8]; 3] = [b"", b"v1", b"value-3"];

/// Three client ids: one a prefix of another, one not ASCII (observers are listed in byte
/// order of the id).
const CLIENTS: [&str; 3] = ["c", "c1", "\u{fc}-2"];

/// Fencing tokens (§4): two equal in (ms, counter) that differ only by node id, one far
/// below and one above the others.
fn tokens() -> [Hlc; 4] {
    [
        Hlc::new(BASE_MS - 5_000, 0, "c1"),
        Hlc::new(BASE_MS, 0, "c1"),
        Hlc::new(BASE_MS, 0, "c2"),
        Hlc::new(BASE_MS + 1_000, 7, "c1"),
    ]
}

/// A client command (becomes one proposal with a request id).
#[derive(Debug, Clone)]
enum Cmd {
    Set {
        key: usize,
        value: usize,
        condition: SetCondition,
        px: Option<u64>,
        token: Option<usize>,
    },
    Del {
        key: usize,
        token: Option<usize>,
    },
    VDel {
        key: usize,
        value: usize,
        token: Option<usize>,
    },
    Observe {
        key: usize,
    },
    Unobserve {
        key: usize,
    },
}

/// One step of a generated sequence.
#[derive(Debug, Clone)]
enum Op {
    /// A client mutation with a fresh (client, correlation) pair.
    Request {
        client: usize,
        remember_ms: u64,
        cmd: Cmd,
    },
    /// A retry of one of the last few requests (same client, correlation and mutation).
    Retry(Index),
    /// Another request under the identity (client, correlation) of one of the last few: a
    /// forger's, or a client reusing correlation data. Same digest only if same mutation.
    Impersonate { pick: Index, cmd: Cmd },
    /// GET (leader read path; not a proposal).
    Get(usize),
    /// Leader sweep: scan the expiry index for at most `limit` due keys and propose their
    /// removal; `stale` proposes every key instead (a scan that raced with later writes).
    Sweep { limit: usize, stale: bool },
    /// The leader's wall clock moves forward.
    Advance(u64),
    /// Leadership moves to a node whose clock is behind by this much and whose HLC has not
    /// seen the stored versions.
    StepBack(u64),
    /// PUBACK 0x10: forget a client's registrations.
    ForgetClient(usize),
    /// New replicated quota limits.
    SetLimits(Limits),
}

fn key() -> impl Strategy<Value = usize> {
    0..KEYS.len()
}

fn value() -> impl Strategy<Value = usize> {
    0..VALUES.len()
}

/// A request's `__ft`: rarer on SET (every token stored fences the key until it is deleted)
/// than on DEL and VDEL.
fn token(probability: f64) -> impl Strategy<Value = Option<usize>> {
    prop::option::weighted(probability, 0..tokens().len())
}

fn condition() -> impl Strategy<Value = SetCondition> {
    prop_oneof![
        3 => Just(SetCondition::Always),
        1 => Just(SetCondition::IfAbsent),
        2 => Just(SetCondition::IfAbsentOrEqual),
    ]
}

fn cmd() -> impl Strategy<Value = Cmd> {
    prop_oneof![
        6 => (key(), value(), condition(), prop::option::weighted(0.4, 1..=50u64), token(0.2))
            .prop_map(|(key, value, condition, px, token)| Cmd::Set {
                key,
                value,
                condition,
                px,
                token
            }),
        2 => (key(), token(0.6)).prop_map(|(key, token)| Cmd::Del { key, token }),
        2 => (key(), value(), token(0.6))
            .prop_map(|(key, value, token)| Cmd::VDel { key, value, token }),
        2 => key().prop_map(|key| Cmd::Observe { key }),
        1 => key().prop_map(|key| Cmd::Unobserve { key }),
    ]
}

/// Caps of the registrations and the reply memory. A remembered reply here takes about 15 to
/// 40 bytes, so byte caps from 20 to 200 sometimes refuse a reply outright, sometimes evict
/// several for one.
fn caps() -> impl Strategy<Value = (u64, u64, u64)> {
    (1..=6u64, 1..=8u64, 20..=200u64)
}

fn limits() -> impl Strategy<Value = Limits> {
    prop_oneof![
        1 => Just(Limits::default()),
        1 => (1..=4u64, 2..=16u64, 1..=3u32).prop_map(|(max_keys, max_bytes, regs)| Limits {
            max_keys,
            max_bytes,
            max_registrations_per_client: regs,
            ..Limits::default()
        }),
        2 => (1..=4u64, 2..=16u64, 1..=3u32, caps(), 1..=3u32).prop_map(
            |(max_keys, max_bytes, regs, (total, replies, reply_bytes), per_key)| Limits {
                max_keys,
                max_bytes,
                max_registrations_per_client: regs,
                max_registrations: total,
                max_observers_per_key: per_key,
                max_remembered_replies: replies,
                max_remembered_reply_bytes: reply_bytes,
            }
        ),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0..CLIENTS.len(), 1..=60u64, cmd())
            .prop_map(|(client, remember_ms, cmd)| Op::Request { client, remember_ms, cmd }),
        3 => any::<Index>().prop_map(Op::Retry),
        1 => (any::<Index>(), cmd()).prop_map(|(pick, cmd)| Op::Impersonate { pick, cmd }),
        4 => key().prop_map(Op::Get),
        2 => (1..=4usize, prop::bool::weighted(0.25))
            .prop_map(|(limit, stale)| Op::Sweep { limit, stale }),
        5 => (0..=40u64).prop_map(Op::Advance),
        1 => (1..=60u64).prop_map(Op::StepBack),
        1 => (0..CLIENTS.len()).prop_map(Op::ForgetClient),
        1 => limits().prop_map(Op::SetLimits),
    ]
}

// ---------------------------------------------------------------------------------------------
// The leader: turns steps into stamped proposals.
// ---------------------------------------------------------------------------------------------

/// How many of the latest requests a retry may pick from.
const RETRY_WINDOW: usize = 8;

/// The proposing side: a wall clock, an HLC per leader term, correlation data per client and
/// the requests issued so far (for retries).
struct Leader {
    wall_ms: u64,
    term: u32,
    last: (u64, u64),
    next_correlation: [u32; 3],
    history: Vec<(RequestId, Mutation)>,
}

impl Leader {
    fn new() -> Self {
        Leader {
            wall_ms: BASE_MS,
            term: 1,
            last: (0, 0),
            next_correlation: [0; 3],
            history: Vec::new(),
        }
    }

    /// A plain HLC tick of this leader (its clock only, it never merges stored versions: the
    /// state machine must keep versions increasing by itself).
    fn stamp(&mut self) -> Hlc {
        self.last = if self.wall_ms > self.last.0 {
            (self.wall_ms, 0)
        } else {
            (self.last.0, self.last.1 + 1)
        };
        Hlc::new(self.last.0, self.last.1, format!("n{}", self.term))
    }

    fn proposal(&mut self, request: Option<RequestId>, mutation: Mutation) -> Proposal {
        Proposal {
            stamp: self.stamp(),
            wall_ms: self.wall_ms,
            request,
            mutation,
            token_seed: None,
        }
    }

    fn advance(&mut self, ms: u64) {
        self.wall_ms += ms;
    }

    fn step_back(&mut self, ms: u64) {
        self.wall_ms -= ms;
        self.term += 1;
        self.last = (0, 0);
    }

    fn request(&mut self, client: usize, remember_ms: u64, cmd: &Cmd) -> Proposal {
        let mutation = mutation_of(client, cmd);
        // Per-client counters: different clients reuse the same correlation bytes, which
        // must still be different requests (§6 keys the memory by the pair).
        let correlation = self.next_correlation[client].to_be_bytes().to_vec();
        self.next_correlation[client] += 1;
        let request = RequestId {
            client: CLIENTS[client].as_bytes().to_vec(),
            correlation,
            remember_for_ms: remember_ms,
            digest: digest_of(&mutation),
        };
        self.history.push((request.clone(), mutation.clone()));
        self.proposal(Some(request), mutation)
    }

    /// A request for `cmd` under the identity of one of the last few requests.
    fn impersonate(&mut self, pick: &Index, cmd: &Cmd) -> Option<Proposal> {
        if self.history.is_empty() {
            return None;
        }
        let window = self.history.len().min(RETRY_WINDOW);
        let (victim, _) = self.history[self.history.len() - window + pick.index(window)].clone();
        let client = CLIENTS
            .iter()
            .position(|c| c.as_bytes() == victim.client.as_slice())?;
        let mutation = mutation_of(client, cmd);
        let request = RequestId {
            digest: digest_of(&mutation),
            ..victim
        };
        self.history.push((request.clone(), mutation.clone()));
        Some(self.proposal(Some(request), mutation))
    }

    fn retry(&mut self, pick: &Index) -> Option<Proposal> {
        if self.history.is_empty() {
            return None;
        }
        let window = self.history.len().min(RETRY_WINDOW);
        let (request, mutation) =
            self.history[self.history.len() - window + pick.index(window)].clone();
        Some(self.proposal(Some(request), mutation))
    }

    fn sweep(&mut self, keys: Vec<Vec<u8>>) -> Proposal {
        let keys = keys.into_iter().map(serde_bytes::ByteBuf::from).collect();
        self.proposal(None, Mutation::Expire { keys })
    }

    /// The candidate keys of a sweep (what the scan found, or every key for a stale scan).
    fn sweep_candidates(
        &self,
        view: &impl OrderedRead,
        limit: usize,
        stale: bool,
    ) -> Result<Vec<Vec<u8>>, TestCaseError> {
        if stale {
            return Ok(KEYS.iter().map(|k| k.to_vec()).collect());
        }
        let meta = read::meta(view).map_err(fail)?;
        read::due_keys(view, machine_read::read_time(&meta, self.wall_ms), limit).map_err(fail)
    }
}

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

// ---------------------------------------------------------------------------------------------
// Replicas.
// ---------------------------------------------------------------------------------------------

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

/// Applies one proposal in its own transaction to a BTreeMap replica.
fn apply_to_map(map: &mut Map, proposal: &Proposal) -> Result<Applied, TestCaseError> {
    let mut txn = Overlay::new(&*map);
    let mut machine = Machine::open(&mut txn).map_err(fail)?;
    let applied = machine.apply(proposal).map_err(fail)?;
    machine.finish();
    for (key, write) in txn.into_writes() {
        match write {
            Some(value) => map.insert(key, value),
            None => map.remove(&key),
        };
    }
    Ok(applied)
}

/// Applies a batch of proposals in one transaction (one atomic state-tree commit) to a store
/// replica.
fn apply_batch_to_store(
    state: &StateTree,
    proposals: &[Proposal],
) -> Result<Vec<Applied>, TestCaseError> {
    let view = state.view();
    let mut txn = Overlay::new(&view);
    let mut machine = Machine::open(&mut txn).map_err(fail)?;
    let mut applied = Vec::with_capacity(proposals.len());
    for proposal in proposals {
        applied.push(machine.apply(proposal).map_err(fail)?);
    }
    machine.finish();
    state.commit(txn.into_txn_writes()).map_err(fail)?;
    Ok(applied)
}

fn open_store(dir: &std::path::Path) -> Result<Store, TestCaseError> {
    Store::open(&StoreConfig::new(dir.to_owned(), 4 << 20)).map_err(fail)
}

// ---------------------------------------------------------------------------------------------
// The model, written from the spec.
// ---------------------------------------------------------------------------------------------

/// One key as the spec describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    value: Vec<u8>,
    version: Hlc,
    expires_at: Option<u64>,
    token: Option<Hlc>,
}

impl Entry {
    fn from_record(record: Record) -> Self {
        Entry {
            value: record.value,
            version: record.version,
            expires_at: record.expires_at_ms,
            token: record.fencing_token,
        }
    }

    /// §8: a key with PX does not exist from its expiry instant on.
    fn alive_at(&self, now: u64) -> bool {
        self.expires_at.is_none_or(|at| now < at)
    }
}

/// §3 order of HLCs: (ms, counter), then node id as a string.
fn rank(h: &Hlc) -> (u64, u64, &str) {
    (h.ms, h.counter, h.node.as_str())
}

/// The mutation of `cmd` sent by `client`.
fn mutation_of(client: usize, cmd: &Cmd) -> Mutation {
    let tokens = tokens();
    let ft = |t: &Option<usize>| t.map(|i| tokens[i].clone());
    match cmd {
        Cmd::Set {
            key,
            value,
            condition,
            px,
            token,
        } => Mutation::Set {
            key: KEYS[*key].to_vec(),
            value: VALUES[*value].to_vec(),
            condition: *condition,
            expire_after_ms: *px,
            fencing_token: ft(token),
        },
        Cmd::Del { key, token } => Mutation::Del {
            key: KEYS[*key].to_vec(),
            fencing_token: ft(token),
        },
        Cmd::VDel { key, value, token } => Mutation::VDel {
            key: KEYS[*key].to_vec(),
            value: VALUES[*value].to_vec(),
            fencing_token: ft(token),
        },
        Cmd::Observe { key } => Mutation::Observe {
            client: CLIENTS[client].to_owned(),
            key: KEYS[*key].to_vec(),
        },
        Cmd::Unobserve { key } => Mutation::Unobserve {
            client: CLIENTS[client].to_owned(),
            key: KEYS[*key].to_vec(),
        },
    }
}

/// The digest the door would compute for a request carrying `mutation` (a model stand-in for
/// the hash of its payload and properties: equal mutations, equal digests).
fn digest_of(mutation: &Mutation) -> u128 {
    xxhash_rust::xxh3::xxh3_128(format!("{mutation:?}").as_bytes())
}

/// A request's identity in the reply memory: (client, correlation).
type ReplyId = (Vec<u8>, Vec<u8>);

/// The spec's state store, as plainly as possible.
///
/// Where the spec leaves a choice open the model takes the reading below (each one is a
/// place a future change of the crate would show up as a disagreement): the fencing check
/// (§4) comes before the NX/NEX condition and the VDEL value comparison; a write that finds its
/// key expired removes it first as a deletion with its own version and `DELETE` event; one
/// sweep entry removes all its keys under one deletion version; rejections are remembered for
/// retries like any reply (§6); the key quota counts expired keys not yet removed, and the
/// byte quota only refuses writes that grow the stored bytes (§9). The reply-memory caps are
/// statestore's own (the spec has none): expired replies count until pruned, a reply over the
/// caps evicts the earliest-expiring ones (itself, if it expires first), and a reply that could
/// not fit alone is not remembered.
struct Model {
    /// Stored keys, including expired ones nobody has removed yet (they still count against
    /// the quotas of §9 until a sweep or a write removes them).
    entries: HashMap<Vec<u8>, Entry>,
    /// §7: key -> registered clients (in id order, as the notifier pages them), each with the
    /// last version issued when it registered (its floor).
    registrations: HashMap<Vec<u8>, BTreeMap<String, Option<Hlc>>>,
    /// Registrations refused because their key had `max_observers_per_key` observers.
    cap_refusals: u64,
    /// §6: (client, correlation) -> (remembered until, reply). Holds expired replies until
    /// they are pruned (up to 32 per entry, earliest expiry first) or evicted: both count
    /// against the caps.
    replies: HashMap<ReplyId, (u64, Outcome, u128)>,
    /// Replies evicted (or refused) to stay within the reply-memory caps.
    evicted: u64,
    /// Requests that found a live reply of their id remembered for another digest.
    mismatches: u64,
    /// §3: the last version issued.
    last_version: Option<Hlc>,
    /// The store's time: the latest leader wall time stamped on an applied entry. Writes
    /// judge expiry (§8) against it and compute PX from it, so a leader with a slower clock
    /// cannot resurrect a key that an applied entry already saw expired. Reads use the later
    /// of it and the reading leader's wall clock (reads are not logged, so a read on a faster
    /// former leader does not raise it).
    now: u64,
    /// §9 limits in force.
    max_keys: u64,
    max_bytes: u64,
    max_registrations: u64,
    /// Store-wide caps: registrations of all clients, remembered replies and their bytes.
    max_registrations_total: u64,
    /// Registrations of one key, all clients together.
    max_observers_per_key: u64,
    max_replies: u64,
    max_reply_bytes: u64,
    /// §7 events of the entry being applied, in order, each with the clients to notify.
    events: Vec<(KeyEvent, Vec<String>)>,
}

impl Model {
    fn new() -> Self {
        Model {
            entries: HashMap::new(),
            registrations: HashMap::new(),
            cap_refusals: 0,
            replies: HashMap::new(),
            evicted: 0,
            mismatches: 0,
            last_version: None,
            now: 0,
            // §9 defaults
            max_keys: 1_000_000,
            max_bytes: 1 << 30,
            max_registrations: 1_000,
            max_registrations_total: 1_000_000,
            max_observers_per_key: 1_000,
            max_replies: 1_000_000,
            max_reply_bytes: 256 << 20,
            events: Vec::new(),
        }
    }

    /// Time a read (GET, sweep scan) of a leader with wall clock `wall_ms` judges expiry at.
    fn read_time(&self, wall_ms: u64) -> u64 {
        capped_floor(self.now, wall_ms)
    }

    /// True if a request with this id arriving now (at the latest store time) would get a
    /// remembered reply. Only used by the harness to tell replays from new versions.
    fn remembers(&self, request: &RequestId, wall_ms: u64) -> bool {
        let now = self.read_time(wall_ms);
        self.replies
            .get(&(request.client.clone(), request.correlation.clone()))
            .is_some_and(|(until, _, digest)| now < *until && *digest == request.digest)
    }

    /// GET (§2, §3, §8): the live value and the version of the write that produced it.
    fn get(&self, key: &[u8], wall_ms: u64) -> Option<Entry> {
        let now = self.read_time(wall_ms);
        self.entries.get(key).filter(|e| e.alive_at(now)).cloned()
    }

    /// What a sweep scan at `wall_ms` should find: due keys, earliest expiry first, then by key.
    fn due(&self, wall_ms: u64, limit: usize) -> Vec<Vec<u8>> {
        let now = self.read_time(wall_ms);
        let mut due: Vec<(u64, Vec<u8>)> = self
            .entries
            .iter()
            .filter_map(|(k, e)| {
                e.expires_at
                    .filter(|at| *at <= now)
                    .map(|at| (at, k.clone()))
            })
            .collect();
        due.sort();
        due.into_iter().take(limit).map(|(_, k)| k).collect()
    }

    /// Registrations of every client together.
    fn registration_count(&self) -> u64 {
        self.registrations.values().map(|c| c.len() as u64).sum()
    }

    /// What a remembered reply counts against the byte cap: the length of its key in the
    /// reply table (table byte, u32 client length, client, correlation) plus the length of
    /// the stored reply.
    fn reply_size(id: &ReplyId, until: u64, outcome: &Outcome, digest: u128) -> u64 {
        let stored = codec::encode(&RememberedReply {
            expires_at_ms: until,
            digest,
            outcome: outcome.clone(),
        });
        (1 + 4 + id.0.len() + id.1.len() + stored.len()) as u64
    }

    fn reply_bytes(&self) -> u64 {
        self.replies
            .iter()
            .map(|(id, (until, outcome, digest))| Self::reply_size(id, *until, outcome, *digest))
            .sum()
    }

    /// The remembered replies in the order they leave the memory: earliest expiry first,
    /// then by client length, client and correlation (the reply table's key order).
    fn replies_by_expiry(&self) -> Vec<(u64, ReplyId)> {
        let mut order: Vec<(u64, usize, ReplyId)> = self
            .replies
            .iter()
            .map(|(id, (until, _, _))| (*until, id.0.len(), id.clone()))
            .collect();
        order.sort();
        order
            .into_iter()
            .map(|(until, _, id)| (until, id))
            .collect()
    }

    /// Each entry first drops up to 32 replies expired at its time, earliest expiry first.
    fn prune_replies(&mut self) {
        for (until, id) in self.replies_by_expiry().into_iter().take(32) {
            if until > self.now {
                break;
            }
            self.replies.remove(&id);
        }
    }

    /// After a reply is remembered: the earliest-expiring replies leave while the memory is
    /// over a cap (the new one included, if it expires first).
    fn evict_replies(&mut self) {
        let mut count = self.replies.len() as u64;
        let mut bytes = self.reply_bytes();
        for (until, id) in self.replies_by_expiry() {
            if count <= self.max_replies && bytes <= self.max_reply_bytes {
                break;
            }
            let (_, outcome, digest) = self.replies.remove(&id).expect("listed");
            count -= 1;
            bytes -= Self::reply_size(&id, until, &outcome, digest);
            self.evicted += 1;
        }
    }

    /// §6: remembers `outcome` for `request` (replacing an expired reply of the same id). A
    /// reply that cannot fit even alone is not remembered (and counted as evicted).
    fn remember(&mut self, request: &RequestId, outcome: &Outcome) {
        let id = (request.client.clone(), request.correlation.clone());
        let until = self.now + request.remember_for_ms;
        self.replies.remove(&id);
        let digest = request.digest;
        if self.max_replies == 0
            || Self::reply_size(&id, until, outcome, digest) > self.max_reply_bytes
        {
            self.evicted += 1;
        } else {
            self.replies.insert(id, (until, outcome.clone(), digest));
        }
        self.evict_replies();
    }

    fn stored_bytes(&self) -> u64 {
        self.entries
            .iter()
            .map(|(k, e)| (k.len() + e.value.len()) as u64)
            .sum()
    }

    /// §3: at least the stamp, strictly greater than every version issued before.
    fn issue_version(&mut self, stamp: &Hlc) -> Hlc {
        let version = match &self.last_version {
            Some(last) if rank(stamp) <= rank(last) => {
                Hlc::new(last.ms, last.counter + 1, stamp.node.clone())
            }
            _ => stamp.clone(),
        };
        self.last_version = Some(version.clone());
        version
    }

    /// §7: one event per change of a key somebody observes, told to every client registered
    /// before the change (all registered now: registrations come before later changes).
    fn notify(&mut self, key: &[u8], version: Hlc, change: Change) {
        if let Some(clients) = self.registrations.get(key).filter(|c| !c.is_empty()) {
            let notified = clients
                .iter()
                .filter(|(_, floor)| floor.as_ref().is_none_or(|f| rank(f) < rank(&version)))
                .map(|(client, _)| client.clone())
                .collect();
            self.events.push((
                KeyEvent {
                    key: key.to_vec(),
                    version,
                    change,
                },
                notified,
            ));
        }
    }

    /// The key as a write sees it (§8): an expired key is removed first, which is a deletion
    /// (with its own version and a `DELETE` notification).
    fn live(&mut self, stamp: &Hlc, key: &[u8]) -> Option<Entry> {
        let entry = self.entries.get(key)?.clone();
        if entry.alive_at(self.now) {
            return Some(entry);
        }
        self.entries.remove(key);
        let version = self.issue_version(stamp);
        self.notify(key, version, Change::Delete);
        None
    }

    /// §4: a fenced key needs a token at least as high as its own.
    fn fencing(entry: Option<&Entry>, token: Option<&Hlc>) -> Option<Rejection> {
        let stored = entry?.token.as_ref()?;
        match token {
            None => Some(Rejection::FencingTokenRequired),
            Some(t) if rank(t) < rank(stored) => Some(Rejection::FencingTokenLower),
            Some(_) => None,
        }
    }

    fn apply(&mut self, p: &Proposal) -> (Outcome, Vec<(KeyEvent, Vec<String>)>) {
        self.now = capped_floor(self.now, p.wall_ms);
        self.prune_replies();
        let memory = p
            .request
            .as_ref()
            .map(|r| (r.client.clone(), r.correlation.clone()));
        // §6: a retry within the remembered window gets the original reply and does nothing;
        // another request under the same id (another digest) never gets it: it runs as new.
        if let Some(id) = &memory
            && let Some((until, outcome, digest)) = self.replies.get(id)
            && self.now < *until
        {
            if p.request.as_ref().is_some_and(|r| r.digest == *digest) {
                return (outcome.clone(), Vec::new());
            }
            self.mismatches += 1;
        }
        let outcome = match &p.mutation {
            Mutation::Set {
                key,
                value,
                condition,
                expire_after_ms,
                fencing_token,
            } => self.set(
                &p.stamp,
                key,
                value,
                *condition,
                *expire_after_ms,
                fencing_token.as_ref(),
            ),
            Mutation::Del { key, fencing_token } => {
                self.delete(&p.stamp, key, None, fencing_token.as_ref())
            }
            Mutation::VDel {
                key,
                value,
                fencing_token,
            } => self.delete(&p.stamp, key, Some(value), fencing_token.as_ref()),
            Mutation::Observe { client, key } => {
                let already = self
                    .registrations
                    .get(key)
                    .is_some_and(|c| c.contains_key(client));
                let held = self
                    .registrations
                    .values()
                    .filter(|c| c.contains_key(client))
                    .count() as u64;
                let on_key = self.registrations.get(key).map_or(0, |c| c.len() as u64);
                if already {
                    Outcome::Observing
                } else if held >= self.max_registrations
                    || self.registration_count() >= self.max_registrations_total
                {
                    Outcome::Rejected(Rejection::QuotaExceeded)
                } else if on_key >= self.max_observers_per_key {
                    self.cap_refusals += 1;
                    Outcome::Rejected(Rejection::QuotaExceeded)
                } else {
                    self.registrations
                        .entry(key.clone())
                        .or_default()
                        .insert(client.clone(), self.last_version.clone());
                    Outcome::Observing
                }
            }
            Mutation::Unobserve { client, key } => {
                match self.registrations.get_mut(key).map(|c| c.remove(client)) {
                    Some(Some(_)) => Outcome::StoppedObserving,
                    _ => Outcome::NotObserving,
                }
            }
            Mutation::Expire { keys } => {
                // One sweep entry is one deletion instant: every key it removes shares it.
                let mut version = None;
                let mut removed = 0;
                for key in keys {
                    let due = self
                        .entries
                        .get(key.as_slice())
                        .is_some_and(|e| !e.alive_at(self.now));
                    if !due {
                        continue;
                    }
                    self.entries.remove(key.as_slice());
                    let v = match &version {
                        Some(v) => Hlc::clone(v),
                        None => {
                            let v = self.issue_version(&p.stamp);
                            version = Some(v.clone());
                            v
                        }
                    };
                    self.notify(key, v, Change::Delete);
                    removed += 1;
                }
                Outcome::Expired { keys: removed }
            }
            Mutation::ForgetClient { client } => {
                let mut dropped = 0;
                for clients in self.registrations.values_mut() {
                    if clients.remove(client).is_some() {
                        dropped += 1;
                    }
                }
                Outcome::ForgotClient {
                    registrations: dropped,
                }
            }
            Mutation::SetLimits(limits) => {
                self.max_keys = limits.max_keys;
                self.max_bytes = limits.max_bytes;
                self.max_registrations = u64::from(limits.max_registrations_per_client);
                self.max_registrations_total = limits.max_registrations;
                self.max_observers_per_key = u64::from(limits.max_observers_per_key);
                self.max_replies = limits.max_remembered_replies;
                self.max_reply_bytes = limits.max_remembered_reply_bytes;
                Outcome::LimitsSet
            }
            // The keyspace model never generates device commands (tests/devicebound_model.rs
            // models those).
            Mutation::Device(command) => unreachable!("not generated here: {command:?}"),
        };
        if let Some(request) = &p.request {
            self.remember(request, &outcome);
        }
        (outcome, std::mem::take(&mut self.events))
    }

    fn set(
        &mut self,
        stamp: &Hlc,
        key: &[u8],
        value: &[u8],
        condition: SetCondition,
        px: Option<u64>,
        token: Option<&Hlc>,
    ) -> Outcome {
        let live = self.live(stamp, key);
        if let Some(rejection) = Self::fencing(live.as_ref(), token) {
            return Outcome::Rejected(rejection);
        }
        if let Some(entry) = &live {
            let proceed = match condition {
                SetCondition::Always => true,
                SetCondition::IfAbsent => false,
                SetCondition::IfAbsentOrEqual => entry.value == value,
            };
            if !proceed {
                return Outcome::NotStored {
                    version: entry.version.clone(),
                };
            }
        }
        // §9: a new key must fit the key count; a write that grows must fit the byte quota
        // (one that does not grow is allowed even over a lowered limit).
        if live.is_none() && self.entries.len() as u64 >= self.max_keys {
            return Outcome::Rejected(Rejection::QuotaExceeded);
        }
        let old_size = live
            .as_ref()
            .map_or(0, |e| (key.len() + e.value.len()) as u64);
        let new_size = (key.len() + value.len()) as u64;
        if new_size > old_size && self.stored_bytes() - old_size + new_size > self.max_bytes {
            return Outcome::Rejected(Rejection::QuotaExceeded);
        }
        let version = self.issue_version(stamp);
        // §4: the key keeps the higher of its token and the request's.
        let token = match (live.and_then(|e| e.token), token) {
            (Some(stored), Some(request)) if rank(request) > rank(&stored) => Some(request.clone()),
            (Some(stored), _) => Some(stored),
            (None, request) => request.cloned(),
        };
        self.entries.insert(
            key.to_vec(),
            Entry {
                value: value.to_vec(),
                version: version.clone(),
                // §2 PX / §8: from the store's time of the write; a plain SET clears it.
                expires_at: px.map(|ms| self.now + ms),
                token,
            },
        );
        self.notify(key, version.clone(), Change::Set(value.to_vec()));
        Outcome::Stored { version }
    }

    fn delete(
        &mut self,
        stamp: &Hlc,
        key: &[u8],
        expected: Option<&Vec<u8>>,
        token: Option<&Hlc>,
    ) -> Outcome {
        let Some(entry) = self.live(stamp, key) else {
            return Outcome::Missing;
        };
        if let Some(rejection) = Self::fencing(Some(&entry), token) {
            return Outcome::Rejected(rejection);
        }
        if expected.is_some_and(|v| *v != entry.value) {
            return Outcome::ValueDiffers;
        }
        self.entries.remove(key);
        let version = self.issue_version(stamp);
        self.notify(key, version.clone(), Change::Delete);
        Outcome::Deleted { version }
    }
}

/// The clients the notifier tells of `event`, reading the store's registrations a page of 2
/// at a time (so paging is exercised) and keeping those registered before the change.
fn notified_of(view: &impl OrderedRead, event: &KeyEvent) -> Result<Vec<String>, TestCaseError> {
    let mut clients = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = read::observers_page(view, &event.key, after.as_deref(), 2).map_err(fail)?;
        let full = page.len() == 2;
        after = page.last().map(|observer| observer.client.clone());
        clients.extend(
            page.into_iter()
                .filter(|observer| observer.is_notified_of(&event.version))
                .map(|observer| observer.client),
        );
        if !full {
            return Ok(clients);
        }
    }
}

/// Versions an applied entry issued (new ones only; a remembered reply issues nothing).
fn issued_versions(applied: &Applied) -> Vec<Hlc> {
    let mut versions: Vec<Hlc> = applied.events.iter().map(|e| e.version.clone()).collect();
    if let Outcome::Stored { version } | Outcome::Deleted { version } = &applied.outcome {
        versions.push(version.clone());
    }
    versions
}

/// The store-wide counters as a full recount of the tables finds them: (registrations,
/// remembered replies, their counted bytes). Also checks that the registration tables agree
/// and that the reply-expiry index holds one entry per reply, with its size.
fn recount(view: &impl OrderedRead) -> Result<(u64, u64, u64), TestCaseError> {
    let rows = |table: Table| -> Result<Vec<KvPair>, TestCaseError> {
        let (start, end) = table.bounds();
        view.range(&start, &end)
            .collect::<Result<Vec<_>, _>>()
            .map_err(fail)
    };
    let registrations = rows(Table::ObserversByKey)?;
    let by_key = registrations.len() as u64;
    let by_client = rows(Table::ObservedByClient)?.len() as u64;
    prop_assert_eq!(by_key, by_client, "registration tables disagree");
    // Each key's registration count equals its rows (row: table byte, u32 key length, key,
    // client).
    let mut per_key: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    for (row, _) in &registrations {
        let len = u32::from_be_bytes(row[1..5].try_into().map_err(fail)?) as usize;
        *per_key.entry(row[5..5 + len].to_vec()).or_default() += 1;
    }
    let mut counted: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    for (row, value) in rows(Table::ObserverCounts)? {
        let count = statestore_storage::keyspace::layout::parse_observer_count_value(&value)
            .ok_or_else(|| fail("registration count of the wrong size"))?;
        counted.insert(row[1..].to_vec(), count);
    }
    prop_assert_eq!(counted, per_key, "registration counts against the rows");
    let replies: BTreeMap<Vec<u8>, Vec<u8>> = rows(Table::Replies)?.into_iter().collect();
    let index = rows(Table::ReplyExpiry)?;
    prop_assert_eq!(index.len(), replies.len(), "one index entry per reply");
    let mut bytes = 0;
    for (index_key, size) in &index {
        let (_, reply_key) = reply_rows::split_reply_expiry_key(index_key)
            .ok_or_else(|| fail("reply-expiry key without expiry"))?;
        let reply = replies
            .get(reply_key)
            .ok_or_else(|| fail("index entry of a missing reply"))?;
        let counted = (reply_key.len() + reply.len()) as u64;
        prop_assert_eq!(reply_rows::parse_reply_size_value(size), Some(counted));
        bytes += counted;
    }
    Ok((by_key, replies.len() as u64, bytes))
}

/// The meta's counters equal a recount of the tables.
fn assert_counters_exact(view: &impl OrderedRead, when: &str) -> Result<(), TestCaseError> {
    let meta = read::meta(view).map_err(fail)?;
    prop_assert_eq!(
        (
            meta.registrations,
            meta.remembered_replies,
            meta.remembered_reply_bytes
        ),
        recount(view)?,
        "meta counters against a recount {}",
        when
    );
    Ok(())
}

/// Compares everything the crate stores about the small key set with the model.
fn assert_same_state(
    step: usize,
    map: &Map,
    model: &Model,
    leader: &Leader,
) -> Result<(), TestCaseError> {
    let meta = read::meta(map).map_err(fail)?;
    prop_assert_eq!(
        meta.keys,
        model.entries.len() as u64,
        "step {}: key count",
        step
    );
    prop_assert_eq!(
        meta.bytes,
        model.stored_bytes(),
        "step {}: byte count",
        step
    );
    prop_assert_eq!(
        &meta.max_version,
        &model.last_version,
        "step {}: highest version issued",
        step
    );
    prop_assert_eq!(meta.time_floor_ms, model.now, "step {}: store time", step);
    prop_assert_eq!(
        meta.limits.max_keys,
        model.max_keys,
        "step {}: limits",
        step
    );
    // The caps: counters as the model counts them, and as a recount of the tables finds them.
    let counters = |m: &KeyspaceMeta| {
        (
            m.registrations,
            m.remembered_replies,
            m.remembered_reply_bytes,
            m.replies_evicted,
            m.observer_cap_refusals,
            m.reply_mismatches,
        )
    };
    prop_assert_eq!(
        counters(&meta),
        (
            model.registration_count(),
            model.replies.len() as u64,
            model.reply_bytes(),
            model.evicted,
            model.cap_refusals,
            model.mismatches
        ),
        "step {}: registrations, replies, reply bytes, evictions, per-key cap refusals, mismatches",
        step
    );
    assert_counters_exact(map, &format!("at step {step}"))?;
    for key in KEYS {
        let stored = read::record(map, key)
            .map_err(fail)?
            .map(Entry::from_record);
        prop_assert_eq!(
            stored.as_ref(),
            model.entries.get(key),
            "step {}: stored record of {:?}",
            step,
            key
        );
        let observers: Vec<(String, Option<Hlc>)> =
            read::observers_page(map, key, None, usize::MAX)
                .map_err(fail)?
                .into_iter()
                .map(|observer| (observer.client, observer.floor))
                .collect();
        let expected: Vec<(String, Option<Hlc>)> = model
            .registrations
            .get(key)
            .map(|c| c.iter().map(|(c, f)| (c.clone(), f.clone())).collect())
            .unwrap_or_default();
        prop_assert_eq!(
            observers,
            expected,
            "step {}: observers of {:?} and their floors",
            step,
            key
        );
    }
    // §6: the reply memory of the requests a retry may still pick (the door's look-up: only
    // a request with the remembered digest gets the reply).
    let now = machine_read::read_time(&meta, leader.wall_ms);
    let window = leader.history.len().min(RETRY_WINDOW);
    for (request, _) in &leader.history[leader.history.len() - window..] {
        let remembered = machine_read::remembered_reply(map, request, now).map_err(fail)?;
        let expected = model
            .replies
            .get(&(request.client.clone(), request.correlation.clone()))
            .filter(|(until, _, digest)| now < *until && *digest == request.digest)
            .map(|(_, outcome, _)| outcome.clone());
        prop_assert_eq!(
            remembered,
            expected,
            "step {}: remembered reply of {:?}",
            step,
            request
        );
    }
    Ok(())
}

/// Runs one generated sequence against the crate on a BTreeMap and against the model.
fn check_against_model(ops: &[Op]) -> Result<(), TestCaseError> {
    let mut map = Map::new();
    let mut model = Model::new();
    let mut leader = Leader::new();
    let mut highest: Option<Hlc> = None;
    for (step, op) in ops.iter().enumerate() {
        let proposal = match op {
            Op::Advance(ms) => {
                leader.advance(*ms);
                None
            }
            Op::StepBack(ms) => {
                leader.step_back(*ms);
                None
            }
            Op::Get(k) => {
                let meta = read::meta(&map).map_err(fail)?;
                let got = read::live_record(
                    &map,
                    KEYS[*k],
                    machine_read::read_time(&meta, leader.wall_ms),
                )
                .map_err(fail)?
                .map(Entry::from_record);
                let expected = model.get(KEYS[*k], leader.wall_ms);
                prop_assert_eq!(got, expected, "step {} {:?}: GET", step, op);
                None
            }
            Op::Request {
                client,
                remember_ms,
                cmd,
            } => Some(leader.request(*client, *remember_ms, cmd)),
            Op::Retry(pick) => leader.retry(pick),
            Op::Impersonate { pick, cmd } => leader.impersonate(pick, cmd),
            Op::Sweep { limit, stale } => {
                if !stale {
                    let scanned = leader.sweep_candidates(&map, *limit, false)?;
                    let expected = model.due(leader.wall_ms, *limit);
                    prop_assert_eq!(&scanned, &expected, "step {}: due keys", step);
                }
                let keys = leader.sweep_candidates(&map, *limit, *stale)?;
                Some(leader.sweep(keys))
            }
            Op::ForgetClient(c) => Some(leader.proposal(
                None,
                Mutation::ForgetClient {
                    client: CLIENTS[*c].to_owned(),
                },
            )),
            Op::SetLimits(limits) => Some(leader.proposal(None, Mutation::SetLimits(*limits))),
        };
        if let Some(proposal) = proposal {
            let applied = apply_to_map(&mut map, &proposal)?;
            let replayed = proposal
                .request
                .as_ref()
                .is_some_and(|r| model.remembers(r, proposal.wall_ms));
            let (outcome, events) = model.apply(&proposal);
            prop_assert_eq!(
                &applied.outcome,
                &outcome,
                "step {} {:?}: outcome of {:?}",
                step,
                op,
                proposal
            );
            let (events, notified): (Vec<KeyEvent>, Vec<Vec<String>>) = events.into_iter().unzip();
            prop_assert_eq!(
                &applied.events,
                &events,
                "step {} {:?}: events of {:?}",
                step,
                op,
                proposal
            );
            // §7: whom the notifier tells, reading the committed state after the entry.
            for (event, expected) in applied.events.iter().zip(&notified) {
                prop_assert_eq!(
                    &notified_of(&map, event)?,
                    expected,
                    "step {}: observers notified of {:?}",
                    step,
                    event
                );
            }
            // §3 directly on the crate's output, not only by agreement with the model.
            for version in issued_versions(&applied) {
                if !replayed && highest.as_ref() != Some(&version) {
                    prop_assert!(
                        highest.as_ref().is_none_or(|h| rank(h) < rank(&version)),
                        "step {}: version {} not above {:?}",
                        step,
                        version,
                        highest
                    );
                    prop_assert!(
                        rank(&proposal.stamp) <= rank(&version),
                        "step {}: version {} below its stamp {}",
                        step,
                        version,
                        proposal.stamp
                    );
                    highest = Some(version);
                }
            }
        }
        assert_same_state(step, &map, &model, &leader)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Invariant: for every step of a random sequence of SET (NX/NEX/PX/fencing token), GET,
    /// DEL, VDEL, KEYNOTIFY, STOP, sweeps, client departures, quota changes, clock moves
    /// (forwards, and backwards with a leader change) and retries, the crate's keyspace and a
    /// simple model of protocol §2-§9 give the same outcome, versions, GET result and
    /// notifications, and hold the same keys, registrations and remembered replies; with the
    /// registration and reply-memory caps (often set low) deciding alike, and the meta's
    /// counters equal to the model's and to a recount of the tables after every step.
    #[test]
    fn keyspace_matches_a_simple_model(ops in prop::collection::vec(op(), 1..=200)) {
        check_against_model(&ops)?;
    }
}

// ---------------------------------------------------------------------------------------------
// Replicas on different backends.
// ---------------------------------------------------------------------------------------------

/// Turns the steps into proposals and feeds them, batch by batch, to `apply_batch`; `scan`
/// is the replica a sweep looks at for due keys.
fn drive(
    ops: &[Op],
    batch_sizes: &[usize],
    mut scan: impl FnMut(&Leader, usize, bool) -> Result<Vec<Vec<u8>>, TestCaseError>,
    mut apply_batch: impl FnMut(Vec<Proposal>) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let mut leader = Leader::new();
    let mut pending = Vec::new();
    let mut sizes = batch_sizes.iter().cycle();
    let mut target = sizes.next().copied().unwrap_or(1);
    for op in ops {
        let proposal = match op {
            Op::Advance(ms) => {
                leader.advance(*ms);
                None
            }
            Op::StepBack(ms) => {
                leader.step_back(*ms);
                None
            }
            Op::Get(_) => None,
            Op::Request {
                client,
                remember_ms,
                cmd,
            } => Some(leader.request(*client, *remember_ms, cmd)),
            Op::Retry(pick) => leader.retry(pick),
            Op::Impersonate { pick, cmd } => leader.impersonate(pick, cmd),
            Op::Sweep { limit, stale } => {
                let keys = scan(&leader, *limit, *stale)?;
                Some(leader.sweep(keys))
            }
            Op::ForgetClient(c) => Some(leader.proposal(
                None,
                Mutation::ForgetClient {
                    client: CLIENTS[*c].to_owned(),
                },
            )),
            Op::SetLimits(limits) => Some(leader.proposal(None, Mutation::SetLimits(*limits))),
        };
        pending.extend(proposal);
        if pending.len() >= target {
            apply_batch(std::mem::take(&mut pending))?;
            target = sizes.next().copied().unwrap_or(1);
        }
    }
    if !pending.is_empty() {
        apply_batch(pending)?;
    }
    Ok(())
}

/// Applies `ops` to a store's state tree in batches (sweeps scan the committed store state).
fn run_on_store(state: &StateTree, ops: &[Op], batch_sizes: &[usize]) -> Result<(), TestCaseError> {
    drive(
        ops,
        batch_sizes,
        |leader, limit, stale| leader.sweep_candidates(&state.view(), limit, stale),
        |batch| apply_batch_to_store(state, &batch).map(drop),
    )
}

fn batch_sizes() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1..=12usize, 1..=16)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// Invariant: the same proposals, applied one transaction each to a BTreeMap replica and
    /// in atomic batches of random sizes to a store replica, give the same outcomes and
    /// notifications and the same `machine_read::digest` after every batch.
    #[test]
    fn replicas_reach_the_same_digest(
        ops in prop::collection::vec(op(), 1..=150),
        sizes in batch_sizes(),
    ) {
        let dir = tempfile::tempdir().map_err(fail)?;
        let store = open_store(dir.path())?;
        let state = store.state().map_err(fail)?;
        let map = std::cell::RefCell::new(Map::new());
        drive(
            &ops,
            &sizes,
            |leader, limit, stale| leader.sweep_candidates(&*map.borrow(), limit, stale),
            |batch| {
                let mut map = map.borrow_mut();
                let mut expected = Vec::with_capacity(batch.len());
                for proposal in &batch {
                    expected.push(apply_to_map(&mut map, proposal)?);
                }
                let got = apply_batch_to_store(&state, &batch)?;
                prop_assert_eq!(got, expected, "outcomes of the batch {:?}", batch);
                prop_assert_eq!(
                    machine_read::digest(&state.view()).map_err(fail)?,
                    machine_read::digest(&*map).map_err(fail)?,
                    "digest after the batch {:?}",
                    batch
                );
                assert_counters_exact(&state.view(), "on the store after a batch")?;
                Ok(())
            },
        )?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Invariant: exporting a store replica's snapshot and installing it into another store
    /// (which may already hold unrelated state) reproduces the exported replica's digest, and
    /// both replicas then apply further proposals identically.
    #[test]
    fn snapshot_round_trip_preserves_the_digest(
        ops in prop::collection::vec(op(), 1..=120),
        other_ops in prop::collection::vec(op(), 0..=40),
        after in prop::collection::vec(op(), 0..=30),
        sizes in batch_sizes(),
    ) {
        let source_dir = tempfile::tempdir().map_err(fail)?;
        let target_dir = tempfile::tempdir().map_err(fail)?;
        let source_store = open_store(source_dir.path())?;
        let target_store = open_store(target_dir.path())?;
        let source = source_store.state().map_err(fail)?;
        let target = target_store.state().map_err(fail)?;

        run_on_store(&source, &ops, &sizes)?;
        run_on_store(&target, &other_ops, &sizes)?;
        let exported = source.export_snapshot("1-42", b"header").map_err(fail)?;
        let received = target.incoming_snapshot_path();
        std::fs::copy(&exported.path, &received).map_err(fail)?;
        let installed = target.install_snapshot(&received, Vec::new()).map_err(fail)?;
        prop_assert_eq!(installed.header, b"header".to_vec());
        prop_assert_eq!(installed.entries, exported.entries);
        prop_assert_eq!(
            machine_read::digest(&target.view()).map_err(fail)?,
            machine_read::digest(&source.view()).map_err(fail)?,
            "digest after install"
        );
        prop_assert_eq!(
            read::meta(&target.view()).map_err(fail)?,
            read::meta(&source.view()).map_err(fail)?,
            "the store-wide counters and caps travel with the snapshot"
        );
        assert_counters_exact(&target.view(), "after install")?;

        // Both continue as the same state machine (one proposal per batch, same stamps).
        let mut leader = Leader::new();
        leader.advance(1_000);
        for op in &after {
            let Op::Request { client, remember_ms, cmd } = op else { continue };
            let proposal = leader.request(*client, *remember_ms, cmd);
            let a = apply_batch_to_store(&source, std::slice::from_ref(&proposal))?;
            let b = apply_batch_to_store(&target, std::slice::from_ref(&proposal))?;
            prop_assert_eq!(a, b, "outcome of {:?} after install", proposal);
        }
        prop_assert_eq!(
            machine_read::digest(&target.view()).map_err(fail)?,
            machine_read::digest(&source.view()).map_err(fail)?,
            "digest after further proposals"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Large batches while remembered replies expire (the consensus layer applies up to 1,024
// proposals per log entry, and several entries per transaction).
// ---------------------------------------------------------------------------------------------

/// Steps that keep the reply memory churning: mostly requests remembered for 0-8 ms, small
/// clock steps, and now and then a jump that makes far more replies due at once than one
/// proposal may prune; and now and then reply-memory caps that force evictions.
fn churn_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        16 => (0..CLIENTS.len(), 0..=8u64, cmd())
            .prop_map(|(client, remember_ms, cmd)| Op::Request { client, remember_ms, cmd }),
        3 => any::<Index>().prop_map(Op::Retry),
        1 => (any::<Index>(), cmd()).prop_map(|(pick, cmd)| Op::Impersonate { pick, cmd }),
        4 => (0..=3u64).prop_map(Op::Advance),
        1 => (20..=200u64).prop_map(Op::Advance),
        1 => (1..=4usize, prop::bool::weighted(0.25))
            .prop_map(|(limit, stale)| Op::Sweep { limit, stale }),
        1 => (1..=10u64).prop_map(Op::StepBack),
        1 => (0..CLIENTS.len()).prop_map(Op::ForgetClient),
        1 => reply_caps().prop_map(Op::SetLimits),
    ]
}

/// Reply-memory caps that churning requests hit: tens of replies, a few hundred bytes to a
/// few KiB (a reply here is 15 to 40 bytes), or none to speak of.
fn reply_caps() -> impl Strategy<Value = Limits> {
    prop_oneof![
        1 => Just(Limits::default()),
        3 => (1..=60u64, 30..=2_000u64, 1..=8u64).prop_map(|(replies, bytes, registrations)| {
            Limits {
                max_remembered_replies: replies,
                max_remembered_reply_bytes: bytes,
                max_registrations: registrations,
                max_observers_per_key: u32::try_from(registrations).unwrap_or(u32::MAX),
                ..Limits::default()
            }
        }),
    ]
}

fn large_batch_sizes() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(prop_oneof![1 => 1..=8usize, 3 => 100..=1_100usize], 1..=4)
}

/// Applies a batch of proposals in one transaction to a BTreeMap replica.
fn apply_batch_to_map(
    map: &mut Map,
    proposals: &[Proposal],
) -> Result<Vec<Applied>, TestCaseError> {
    let mut txn = Overlay::new(&*map);
    let mut machine = Machine::open(&mut txn).map_err(fail)?;
    let mut applied = Vec::with_capacity(proposals.len());
    for proposal in proposals {
        applied.push(machine.apply(proposal).map_err(fail)?);
    }
    machine.finish();
    for (key, write) in txn.into_writes() {
        match write {
            Some(value) => map.insert(key, value),
            None => map.remove(&key),
        };
    }
    Ok(applied)
}

/// Remembered replies stored (live or expired-but-unpruned).
fn stored_replies(view: &impl OrderedRead) -> Result<usize, TestCaseError> {
    read::count_prefix(view, &[Table::Replies.prefix()], usize::MAX).map_err(fail)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    /// Invariant: with hundreds of proposals per transaction while replies expire faster than
    /// one proposal may prune them, and reply-memory caps that force evictions, a store replica
    /// applying atomic batches and a BTreeMap replica applying one transaction per proposal
    /// give the same outcomes and events and the same `machine_read::digest` after every batch
    /// (reply pruning and eviction do not depend on how proposals are grouped into
    /// transactions), and the store replica's counters equal a recount of its tables.
    #[test]
    fn large_batches_with_expiring_replies_reach_the_same_digest(
        // The first proposal remembers a reply under the default caps, so the check at the
        // end is never vacuous whatever the generator draws.
        ops in prop::collection::vec(churn_op(), 300..=2_500).prop_map(|mut ops| {
            ops.insert(0, Op::Request { client: 0, remember_ms: 8, cmd: Cmd::Del { key: 0, token: None } });
            ops
        }),
        sizes in large_batch_sizes(),
    ) {
        let dir = tempfile::tempdir().map_err(fail)?;
        let store = open_store(dir.path())?;
        let state = store.state().map_err(fail)?;
        let map = std::cell::RefCell::new(Map::new());
        let most_replies = std::cell::Cell::new(0usize);
        drive(
            &ops,
            &sizes,
            |leader, limit, stale| leader.sweep_candidates(&*map.borrow(), limit, stale),
            |batch| {
                let mut map = map.borrow_mut();
                let mut expected = Vec::with_capacity(batch.len());
                for proposal in &batch {
                    expected.push(apply_to_map(&mut map, proposal)?);
                    // Counted after every proposal: a batch may prune or evict all of them.
                    most_replies.set(most_replies.get().max(stored_replies(&*map)?));
                }
                let got = apply_batch_to_store(&state, &batch)?;
                prop_assert_eq!(got, expected, "outcomes of a batch of {}", batch.len());
                prop_assert_eq!(
                    machine_read::digest(&state.view()).map_err(fail)?,
                    machine_read::digest(&*map).map_err(fail)?,
                    "digest after a batch of {}",
                    batch.len()
                );
                assert_counters_exact(&state.view(), "on the store after a large batch")?;
                Ok(())
            },
        )?;
        // Replies were remembered at all (not a vacuous pass).
        prop_assert!(most_replies.get() > 0);
    }

    /// Invariant: the notification lookup's shortcut for stores without registrations gives
    /// the same outcomes and events as the full lookup. Replica B holds one extra registration
    /// on a key nobody writes (so it always takes the full lookup); both apply the same
    /// batches.
    #[test]
    fn observer_fast_path_gives_the_events_of_the_slow_path(
        ops in prop::collection::vec(op(), 1..=200),
        sizes in batch_sizes(),
    ) {
        // The bystander counts against the store-wide registration cap, which would refuse on
        // one replica what it allows on the other: leave that cap at its default here (it is
        // checked against the model).
        let ops: Vec<Op> = ops
            .into_iter()
            .map(|op| match op {
                Op::SetLimits(limits) => Op::SetLimits(Limits {
                    max_registrations: Limits::default().max_registrations,
                    ..limits
                }),
                other => other,
            })
            .collect();
        let mut fast = Map::new();
        let mut slow = Map::new();
        let bystander = Proposal {
            stamp: Hlc::new(BASE_MS - 1, 0, "n0"),
            wall_ms: BASE_MS - 1,
            request: None,
            mutation: Mutation::Observe {
                client: "bystander".into(),
                key: b"never written".to_vec(),
            },
            token_seed: None,
        };
        prop_assert_eq!(apply_to_map(&mut slow, &bystander)?.outcome, Outcome::Observing);
        // The same store time and meta on the other replica, without the registration.
        let same_time = Proposal {
            mutation: Mutation::SetLimits(Limits::default()),
            ..bystander
        };
        apply_to_map(&mut fast, &same_time)?;
        let fast = std::cell::RefCell::new(fast);
        drive(
            &ops,
            &sizes,
            |leader, limit, stale| leader.sweep_candidates(&*fast.borrow(), limit, stale),
            |batch| {
                let got = apply_batch_to_map(&mut fast.borrow_mut(), &batch)?;
                let expected = apply_batch_to_map(&mut slow, &batch)?;
                prop_assert_eq!(got, expected, "batch {:?}", batch);
                Ok(())
            },
        )?;
    }
}

/// `n` unconditional SETs of value 1 on keys 0..4 from clients 0..3, each remembered for
/// `remember_for_ms`.
fn plain_sets(leader: &mut Leader, n: u32, remember_for_ms: u64) -> Vec<Proposal> {
    (0..n)
        .map(|i| {
            let cmd = Cmd::Set {
                key: (i % 4) as usize,
                value: 1,
                condition: SetCondition::Always,
                px: None,
                token: None,
            };
            leader.request((i % 3) as usize, remember_for_ms, &cmd)
        })
        .collect()
}

/// A reply memory of 5,000 entries that all expire at once is emptied, 32 per proposal, by
/// the proposals of two batches of 100, exactly as by the same proposals one transaction each.
#[test]
fn one_large_batch_prunes_like_one_transaction_per_proposal() -> Result<(), TestCaseError> {
    let mut leader = Leader::new();
    let fill = plain_sets(&mut leader, 5_000, 1_000);
    let dir = tempfile::tempdir().map_err(fail)?;
    let store = open_store(dir.path())?;
    let state = store.state().map_err(fail)?;
    apply_batch_to_store(&state, &fill)?;
    let mut map = Map::new();
    apply_batch_to_map(&mut map, &fill)?;
    prop_assert_eq!(stored_replies(&map)?, 5_000);

    leader.advance(1_000); // every reply is due
    let prune = statestore_storage::machine::REPLIES_PRUNED_PER_ENTRY;
    let mut left = 5_000;
    for round in 0..2u32 {
        let batch: Vec<Proposal> = (0..100u32)
            .map(|i| {
                let cmd = Cmd::Del {
                    key: (i % 4) as usize,
                    token: None,
                };
                leader.request((i % 3) as usize, 60_000, &cmd)
            })
            .collect();
        let got = apply_batch_to_store(&state, &batch)?;
        let mut expected = Vec::new();
        for proposal in &batch {
            expected.push(apply_to_map(&mut map, proposal)?);
        }
        prop_assert_eq!(got, expected);
        left -= (100 * prune).min(left);
        prop_assert_eq!(stored_replies(&map)?, left + 100 * (round as usize + 1));
        prop_assert_eq!(
            stored_replies(&state.view())?,
            left + 100 * (round as usize + 1)
        );
        prop_assert_eq!(
            machine_read::digest(&state.view()).map_err(fail)?,
            machine_read::digest(&map).map_err(fail)?
        );
    }
    prop_assert_eq!(left, 0, "the second batch has budget to spare");
    Ok(())
}

/// A 5,000-reply memory whose count cap is lowered to 1,000, then whose byte cap is lowered in
/// the middle of a batch: a store replica applying each batch in one transaction and a BTreeMap
/// replica applying one transaction per proposal evict the same replies (the first remembered
/// reply after a lowered cap evicts down to it at once), end with the same digest and with
/// counters equal to a recount; retries of evicted requests run again, retries of kept ones
/// get their remembered outcome.
#[test]
fn caps_hit_in_large_batches_evict_like_one_transaction_per_proposal() -> Result<(), TestCaseError>
{
    let mut leader = Leader::new();
    let set_cmd = |i: u32| Cmd::Set {
        key: (i % 4) as usize,
        value: (i % 3) as usize,
        condition: SetCondition::Always,
        px: None,
        token: None,
    };
    // Remembered for 60 s, the earlier requests expiring later: eviction order is not the
    // order of arrival.
    let fill: Vec<Proposal> = (0..5_000u32)
        .map(|i| leader.request((i % 3) as usize, 60_000 - u64::from(i % 50), &set_cmd(i)))
        .collect();
    let dir = tempfile::tempdir().map_err(fail)?;
    let store = open_store(dir.path())?;
    let state = store.state().map_err(fail)?;
    let mut map = Map::new();
    let originals = apply_batch_to_store(&state, &fill)?;
    apply_batch_to_map(&mut map, &fill)?;

    let mut batch = vec![leader.proposal(
        None,
        Mutation::SetLimits(Limits {
            max_remembered_replies: 1_000,
            ..Limits::default()
        }),
    )];
    for i in 0..300u32 {
        if i == 150 {
            batch.push(leader.proposal(
                None,
                Mutation::SetLimits(Limits {
                    max_remembered_replies: 1_000,
                    max_remembered_reply_bytes: 20_000,
                    ..Limits::default()
                }),
            ));
        }
        leader.advance(1);
        // Some remembered briefly: they expire before everything else and evict themselves.
        let remember = if i % 10 == 0 { 5 } else { 90_000 };
        batch.push(leader.request((i % 3) as usize, remember, &set_cmd(i)));
    }
    // Retries. Request i of the fill expires at 60 s - (i % 50) ms; among equal expiries the
    // longest client id ("ü-2", i % 3 == 2) leaves last. The caps keep well over 100 of the
    // fill (about 350 replies, with their request digests, fit 20,000 bytes, fewer than 300 of
    // them new), so requests with
    // i % 50 == 0 of that client are kept, and those with i % 50 == 49 (the earliest) are not.
    let kept = [50, 200, 350];
    let retries: Vec<usize> = vec![50, 200, 350, 49, 99, 4999];
    for &n in &retries {
        let (request, mutation) = leader.history[n].clone();
        batch.push(leader.proposal(Some(request), mutation));
    }
    let got = apply_batch_to_store(&state, &batch)?;
    let mut expected = Vec::with_capacity(batch.len());
    for proposal in &batch {
        expected.push(apply_to_map(&mut map, proposal)?);
    }
    prop_assert_eq!(&got, &expected);
    prop_assert_eq!(
        machine_read::digest(&state.view()).map_err(fail)?,
        machine_read::digest(&map).map_err(fail)?
    );
    assert_counters_exact(&state.view(), "on the store")?;
    assert_counters_exact(&map, "on the map")?;
    let meta = read::meta(&map).map_err(fail)?;
    prop_assert!(meta.remembered_replies <= 1_000);
    prop_assert!(meta.remembered_reply_bytes <= 20_000);
    prop_assert!(
        meta.replies_evicted >= 4_000,
        "{} evicted",
        meta.replies_evicted
    );
    let retried = &got[got.len() - retries.len()..];
    for (&n, applied) in retries.iter().zip(retried) {
        let first = &originals[n].outcome;
        if kept.contains(&n) {
            prop_assert_eq!(&applied.outcome, first, "request {} is remembered", n);
        } else {
            prop_assert_ne!(
                &applied.outcome,
                first,
                "request {} was evicted: it runs again",
                n
            );
        }
    }
    Ok(())
}

/// A retry after its request's expiry, whose expired reply pruning has not reached yet (32 are
/// pruned per proposal, and 99 expired replies sort before it), replaces that reply: on the
/// store in a batch as on a map one transaction each, with the same digest and counters equal
/// to a recount (the replaced reply is subtracted).
#[test]
fn a_retry_replacing_an_expired_reply_keeps_the_counters_exact() -> Result<(), TestCaseError> {
    let mut leader = Leader::new();
    let fill = plain_sets(&mut leader, 100, 10);
    let dir = tempfile::tempdir().map_err(fail)?;
    let store = open_store(dir.path())?;
    let state = store.state().map_err(fail)?;
    let mut map = Map::new();
    let originals = apply_batch_to_store(&state, &fill)?;
    apply_batch_to_map(&mut map, &fill)?;
    leader.advance(20); // every reply is due
    // Same expiry for all: the longest client id with the highest correlation sorts last.
    let last = 98; // 98 % 3 == 2: "ü-2", its highest correlation
    let (request, mutation) = leader.history[last].clone();
    let retry = leader.proposal(Some(request), mutation);
    let got = apply_batch_to_store(&state, std::slice::from_ref(&retry))?;
    let expected = apply_to_map(&mut map, &retry)?;
    prop_assert_eq!(&got[0], &expected);
    prop_assert_ne!(
        &expected.outcome,
        &originals[last].outcome,
        "past its expiry the retry runs again"
    );
    let meta = read::meta(&map).map_err(fail)?;
    prop_assert_eq!(
        meta.remembered_replies,
        100 - 32,
        "32 pruned, 1 replaced by 1"
    );
    prop_assert_eq!(meta.replies_evicted, 0);
    assert_counters_exact(&map, "on the map")?;
    assert_counters_exact(&state.view(), "on the store")?;
    prop_assert_eq!(
        machine_read::digest(&state.view()).map_err(fail)?,
        machine_read::digest(&map).map_err(fail)?
    );
    Ok(())
}

/// The model's store time: the later of the leader's clock and the floor, where the floor
/// counts for at most 60 s (the HLC drift bound) beyond the leader's clock.
fn capped_floor(floor: u64, wall_ms: u64) -> u64 {
    const LEAD_MS: u64 = 60_000;
    if floor > wall_ms + LEAD_MS {
        wall_ms + LEAD_MS
    } else {
        floor.max(wall_ms)
    }
}
