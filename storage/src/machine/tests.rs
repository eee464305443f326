//! Unit tests of the machine: the reply memory of §6 (retries, digests, pruning, caps, and the
//! cost rules of many proposals in one transaction), on an in-memory map. Also the test driver
//! the keyspace's and the device-bound tests apply their entries with ([`Replica`],
//! [`Counting`]).

use std::collections::BTreeMap;

use crate::engine::{OrderedRead, Overlay, RangeIter};
use crate::keyspace::layout;
use crate::keyspace::{KeyEvent, KeyspaceMeta, Limits, Record, Rejection, SetCondition, read};
use crate::layout::Table;
use crate::machine::read as machine_read;
use crate::machine::reply_rows;
use crate::machine::{
    Applied, Machine, Mutation, Outcome, Proposal, REPLIES_PRUNED_PER_ENTRY, RememberedReply,
    RequestId,
};
use statestore_vocab::hlc::Hlc;

/// A replica on a BTreeMap with a hand-driven leader clock.
pub(crate) struct Replica {
    pub(crate) map: BTreeMap<Vec<u8>, Vec<u8>>,
    pub(crate) wall_ms: u64,
    pub(crate) counter: u64,
}

impl Replica {
    pub(crate) fn new() -> Self {
        Replica {
            map: BTreeMap::new(),
            wall_ms: 1_000_000,
            counter: 0,
        }
    }

    pub(crate) fn proposal(&mut self, mutation: Mutation, request: Option<RequestId>) -> Proposal {
        self.counter += 1;
        Proposal {
            stamp: Hlc::new(self.wall_ms, self.counter, "n1"),
            wall_ms: self.wall_ms,
            request,
            mutation,
            token_seed: None,
        }
    }

    pub(crate) fn apply_proposal(&mut self, proposal: &Proposal) -> Applied {
        let mut txn = Overlay::new(&self.map);
        let mut machine = Machine::open(&mut txn).expect("open");
        let applied = machine.apply(proposal).expect("apply");
        machine.finish();
        let writes = txn.into_writes();
        for (k, w) in writes {
            match w {
                Some(v) => self.map.insert(k, v),
                None => self.map.remove(&k),
            };
        }
        applied
    }

    pub(crate) fn apply(&mut self, mutation: Mutation) -> Applied {
        let proposal = self.proposal(mutation, None);
        self.apply_proposal(&proposal)
    }

    pub(crate) fn get(&self, key: &[u8]) -> Option<Record> {
        let meta = read::meta(&self.map).expect("meta");
        read::live_record(&self.map, key, machine_read::read_time(&meta, self.wall_ms))
            .expect("read")
    }

    pub(crate) fn meta(&self) -> KeyspaceMeta {
        read::meta(&self.map).expect("meta")
    }
}

pub(crate) fn set(key: &[u8], value: &[u8]) -> Mutation {
    Mutation::Set {
        key: key.to_vec(),
        value: value.to_vec(),
        condition: SetCondition::Always,
        expire_after_ms: None,
        fencing_token: None,
    }
}

pub(crate) fn set_with(
    key: &[u8],
    value: &[u8],
    condition: SetCondition,
    px: Option<u64>,
    ft: Option<Hlc>,
) -> Mutation {
    Mutation::Set {
        key: key.to_vec(),
        value: value.to_vec(),
        condition,
        expire_after_ms: px,
        fencing_token: ft,
    }
}

pub(crate) fn del(key: &[u8], ft: Option<Hlc>) -> Mutation {
    Mutation::Del {
        key: key.to_vec(),
        fencing_token: ft,
    }
}

pub(crate) fn vdel(key: &[u8], value: &[u8], ft: Option<Hlc>) -> Mutation {
    Mutation::VDel {
        key: key.to_vec(),
        value: value.to_vec(),
        fencing_token: ft,
    }
}

pub(crate) fn observe(client: &str, key: &[u8]) -> Mutation {
    Mutation::Observe {
        client: client.to_owned(),
        key: key.to_vec(),
    }
}

/// The clients the notifier tells of `event`: the key's registrations read as it reads them
/// (pages of 2, so paging is exercised), those registered before the change.
pub(crate) fn notified(map: &BTreeMap<Vec<u8>, Vec<u8>>, event: &KeyEvent) -> Vec<String> {
    let mut clients = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = read::observers_page(map, &event.key, after.as_deref(), 2).expect("page");
        let full = page.len() == 2;
        after = page.last().map(|observer| observer.client.clone());
        clients.extend(
            page.into_iter()
                .filter(|observer| observer.is_notified_of(&event.version))
                .map(|observer| observer.client),
        );
        if !full {
            return clients;
        }
    }
}

pub(crate) fn stored_version(applied: &Applied) -> Hlc {
    match &applied.outcome {
        Outcome::Stored { version } | Outcome::Deleted { version } => version.clone(),
        other => panic!("expected a new version, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Many proposals in one transaction (the consensus layer applies up to 1,024 per log entry,
// and several entries per transaction): same result as one transaction per proposal, and
// work per proposal that does not grow with the batch.
// ---------------------------------------------------------------------------------------------

/// Counts what a base map is asked for: entries yielded by range scans, and scans per table
/// (also used by the device-bound tests).
pub(crate) struct Counting<'m> {
    pub(crate) map: &'m BTreeMap<Vec<u8>, Vec<u8>>,
    pub(crate) yielded: std::cell::Cell<usize>,
    pub(crate) scans: std::cell::RefCell<BTreeMap<u8, usize>>,
    pub(crate) gets: std::cell::RefCell<BTreeMap<u8, usize>>,
}

impl<'m> Counting<'m> {
    pub(crate) fn new(map: &'m BTreeMap<Vec<u8>, Vec<u8>>) -> Self {
        Counting {
            map,
            yielded: std::cell::Cell::new(0),
            scans: std::cell::RefCell::new(BTreeMap::new()),
            gets: std::cell::RefCell::new(BTreeMap::new()),
        }
    }

    /// Point reads of keys in the table with this one-byte prefix.
    pub(crate) fn gets_with_prefix(&self, prefix: u8) -> usize {
        self.gets.borrow().get(&prefix).copied().unwrap_or(0)
    }

    pub(crate) fn scans_of(&self, table: Table) -> usize {
        self.scans_with_prefix(table.prefix())
    }

    /// Range scans that started in the table with this one-byte prefix.
    pub(crate) fn scans_with_prefix(&self, prefix: u8) -> usize {
        self.scans.borrow().get(&prefix).copied().unwrap_or(0)
    }
}

impl OrderedRead for Counting<'_> {
    fn get(&self, key: &[u8]) -> crate::Result<Option<Vec<u8>>> {
        if let Some(&table) = key.first() {
            *self.gets.borrow_mut().entry(table).or_default() += 1;
        }
        OrderedRead::get(self.map, key)
    }

    fn range<'a>(&'a self, start: &[u8], end: &[u8]) -> RangeIter<'a> {
        if let Some(&table) = start.first() {
            *self.scans.borrow_mut().entry(table).or_default() += 1;
        }
        let yielded = &self.yielded;
        Box::new(
            OrderedRead::range(self.map, start, end)
                .inspect(move |_| yielded.set(yielded.get() + 1)),
        )
    }
}

impl Replica {
    /// Applies `proposals` in one transaction.
    pub(crate) fn apply_batch(&mut self, proposals: &[Proposal]) -> Vec<Applied> {
        let mut txn = Overlay::new(&self.map);
        let mut machine = Machine::open(&mut txn).expect("open");
        let applied = proposals
            .iter()
            .map(|p| machine.apply(p).expect("apply"))
            .collect();
        machine.finish();
        let writes = txn.into_writes();
        commit(&mut self.map, writes);
        applied
    }

    /// A request proposal from client `c` with correlation `n`.
    pub(crate) fn request(&mut self, mutation: Mutation, n: u32, remember_for_ms: u64) -> Proposal {
        let request = RequestId {
            client: b"c".to_vec(),
            correlation: n.to_be_bytes().to_vec(),
            remember_for_ms,
            digest: 0,
        };
        self.proposal(mutation, Some(request))
    }

    pub(crate) fn replies(&self) -> usize {
        read::count_prefix(&self.map, &[Table::Replies.prefix()], usize::MAX).expect("count")
    }
}

pub(crate) fn commit(
    map: &mut BTreeMap<Vec<u8>, Vec<u8>>,
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
) {
    for (k, w) in writes {
        match w {
            Some(v) => map.insert(k, v),
            None => map.remove(&k),
        };
    }
}

/// Applies `proposals` to `batched` in one transaction and to `single` one transaction each;
/// both must give the same outcomes and events and end in the same state.
pub(crate) fn assert_batch_equals_singles(
    batched: &mut Replica,
    single: &mut Replica,
    proposals: &[Proposal],
) -> Vec<Applied> {
    let got = batched.apply_batch(proposals);
    let expected: Vec<Applied> = proposals.iter().map(|p| single.apply_proposal(p)).collect();
    assert_eq!(got, expected, "outcomes and events");
    assert!(batched.map == single.map, "stored state differs");
    got
}

/// Two equal replicas holding `n` remembered replies, expiring 1 ms apart from `first` ms
/// after the current wall time on.
pub(crate) fn replicas_with_replies(n: u32, first: u64) -> (Replica, Replica) {
    let mut r = Replica::new();
    let proposals: Vec<Proposal> = (0..n)
        .map(|i| r.request(set(b"k", &i.to_be_bytes()), i, first + u64::from(i)))
        .collect();
    r.apply_batch(&proposals);
    assert_eq!(r.replies(), n as usize);
    let copy = Replica {
        map: r.map.clone(),
        wall_ms: r.wall_ms,
        counter: r.counter,
    };
    (r, copy)
}

// ---------------------------------------------------------------------------------------------
// Caps on the tables clients make grow: registrations store-wide, the reply memory by count and
// by bytes (see the `apply` module docs). The counters in the meta must always equal a recount.
// ---------------------------------------------------------------------------------------------

/// What the counters of the meta should say, counted from the tables themselves.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Recount {
    pub(crate) registrations: u64,
    pub(crate) remembered_replies: u64,
    pub(crate) remembered_reply_bytes: u64,
}

pub(crate) fn table_rows(map: &BTreeMap<Vec<u8>, Vec<u8>>, table: Table) -> Vec<(&[u8], &[u8])> {
    let (start, end) = table.bounds();
    map.range::<[u8], _>((
        std::ops::Bound::Included(&start[..]),
        std::ops::Bound::Excluded(&end[..]),
    ))
    .map(|(k, v)| (k.as_slice(), v.as_slice()))
    .collect()
}

/// Recounts the registration and reply tables, checking that each pair of tables agrees
/// (every registration in both directions, every reply indexed once under its own expiry and
/// counted size, the index exactly what a restart derives from the replies:
/// [`reply_rows::expiry_entry`]).
pub(crate) fn recount(map: &BTreeMap<Vec<u8>, Vec<u8>>) -> Recount {
    let registrations = table_rows(map, Table::ObserversByKey);
    let by_key = registrations.len();
    let by_client = table_rows(map, Table::ObservedByClient).len();
    assert_eq!(by_key, by_client, "both registration tables hold each pair");
    let mut per_key: BTreeMap<&[u8], u64> = BTreeMap::new();
    for (row, _) in &registrations {
        // row: table byte, u32 key length, key, client
        let len = u32::from_be_bytes(row[1..5].try_into().expect("len")) as usize;
        *per_key.entry(&row[5..5 + len]).or_default() += 1;
    }
    let counted: BTreeMap<&[u8], u64> = table_rows(map, Table::ObserverCounts)
        .into_iter()
        .map(|(row, value)| {
            let count = layout::parse_observer_count_value(value).expect("a count");
            (&row[1..], count)
        })
        .collect();
    assert_eq!(
        counted, per_key,
        "each key's count equals its registrations"
    );
    let replies = table_rows(map, Table::Replies);
    let index = table_rows(map, Table::ReplyExpiry);
    assert_eq!(replies.len(), index.len(), "one index entry per reply");
    let derived: BTreeMap<Vec<u8>, Vec<u8>> = replies
        .iter()
        .map(|(key, value)| reply_rows::expiry_entry(key, value).expect("a remembered reply"))
        .collect();
    let written: BTreeMap<Vec<u8>, Vec<u8>> = index
        .iter()
        .map(|(key, value)| (key.to_vec(), value.to_vec()))
        .collect();
    assert_eq!(
        derived, written,
        "the index is what a restart derives from the replies"
    );
    let mut bytes = 0;
    for (index_key, value) in index {
        let (at, reply_key) = reply_rows::split_reply_expiry_key(index_key).expect("index key");
        let reply = map.get(reply_key).expect("an indexed reply exists");
        let decoded: RememberedReply =
            crate::codec::decode("remembered reply", reply).expect("decodes");
        assert_eq!(decoded.expires_at_ms, at, "indexed under its own expiry");
        let size = (reply_key.len() + reply.len()) as u64;
        assert_eq!(
            reply_rows::parse_reply_size_value(value),
            Some(size),
            "the index holds the reply's counted size"
        );
        bytes += size;
    }
    Recount {
        registrations: by_key as u64,
        remembered_replies: replies.len() as u64,
        remembered_reply_bytes: bytes,
    }
}

impl Replica {
    /// Asserts the meta's counters equal a recount of the tables.
    pub(crate) fn assert_counters_exact(&self) {
        let meta = self.meta();
        assert_eq!(
            Recount {
                registrations: meta.registrations,
                remembered_replies: meta.remembered_replies,
                remembered_reply_bytes: meta.remembered_reply_bytes,
            },
            recount(&self.map),
            "meta counters against a recount"
        );
    }

    pub(crate) fn set_limits(&mut self, limits: Limits) {
        assert_eq!(
            self.apply(Mutation::SetLimits(limits)).outcome,
            Outcome::LimitsSet
        );
    }

    /// Index entries of the reply memory, earliest expiry first: (expiry, correlation).
    pub(crate) fn remembered(&self) -> Vec<(u64, Vec<u8>)> {
        table_rows(&self.map, Table::ReplyExpiry)
            .into_iter()
            .map(|(index_key, _)| {
                let (at, reply_key) = reply_rows::split_reply_expiry_key(index_key).expect("key");
                // reply key: table byte, u32 client length, client, correlation
                let client_len = u32::from_be_bytes(reply_key[1..5].try_into().expect("len"));
                (at, reply_key[5 + client_len as usize..].to_vec())
            })
            .collect()
    }
}

pub(crate) fn unobserve(client: &str, key: &[u8]) -> Mutation {
    Mutation::Unobserve {
        client: client.to_owned(),
        key: key.to_vec(),
    }
}

pub(crate) fn forget(client: &str) -> Mutation {
    Mutation::ForgetClient {
        client: client.to_owned(),
    }
}

/// A SET NX of its own key from request `n` of client `c`, remembered for `remember_for_ms`.
pub(crate) fn nx_request(r: &mut Replica, n: u32, remember_for_ms: u64) -> Proposal {
    let key = format!("key-{n}");
    r.request(
        set_with(key.as_bytes(), b"v", SetCondition::IfAbsent, None, None),
        n,
        remember_for_ms,
    )
}

#[test]
fn section_6_retried_request_gets_the_remembered_reply_and_runs_once() {
    let mut r = Replica::new();
    let request = RequestId {
        client: b"c1".to_vec(),
        correlation: vec![7; 16],
        remember_for_ms: 10_000,
        digest: 0,
    };
    let first = r.proposal(
        set_with(b"k", b"v", SetCondition::IfAbsent, None, None),
        Some(request.clone()),
    );
    let original = r.apply_proposal(&first);
    let retry = r.proposal(
        set_with(b"k", b"v", SetCondition::IfAbsent, None, None),
        Some(request.clone()),
    );
    let again = r.apply_proposal(&retry);
    assert_eq!(
        again.outcome, original.outcome,
        "a retried SET NX is not answered :-1"
    );
    assert_eq!(
        r.meta().max_version,
        Some(stored_version(&original)),
        "no new version issued"
    );

    // another client with the same correlation data is a different request
    let other = RequestId {
        client: b"c2".to_vec(),
        ..request.clone()
    };
    let p = r.proposal(
        set_with(b"k", b"v", SetCondition::IfAbsent, None, None),
        Some(other),
    );
    assert!(matches!(
        r.apply_proposal(&p).outcome,
        Outcome::NotStored { .. }
    ));

    // after the request's expiry a retry is a new request
    r.wall_ms += 10_000;
    let late = r.proposal(del(b"k", None), Some(request));
    assert!(matches!(
        r.apply_proposal(&late).outcome,
        Outcome::Deleted { .. }
    ));
}

#[test]
fn section_6_a_remembered_reply_answers_only_the_request_with_its_digest() {
    let mut r = Replica::new();
    let victim = RequestId {
        client: b"victim".to_vec(),
        correlation: b"guessable-1".to_vec(),
        remember_for_ms: 10_000,
        digest: 0x5e7,
    };
    let first = r.proposal(set(b"k", b"victim's"), Some(victim.clone()));
    let original = r.apply_proposal(&first);
    assert!(matches!(original.outcome, Outcome::Stored { .. }));
    // The same digest: the remembered reply, nothing executed, nothing counted.
    let retry = r.proposal(set(b"k", b"victim's"), Some(victim.clone()));
    assert_eq!(r.apply_proposal(&retry).outcome, original.outcome);
    assert_eq!(
        machine_read::remembered_reply(&r.map, &victim, r.wall_ms).expect("read"),
        Some(original.outcome.clone()),
        "the door finds it too"
    );
    assert_eq!(r.meta().reply_mismatches, 0);

    // Another request claiming the victim's identity and correlation data: the door does not
    // answer it with the victim's reply, and apply executes it as new.
    let forger = RequestId {
        digest: 0xbad,
        ..victim.clone()
    };
    assert_eq!(
        machine_read::remembered_reply(&r.map, &forger, r.wall_ms).expect("read"),
        None
    );
    let forged = r.proposal(del(b"k", None), Some(forger.clone()));
    let executed = r.apply_proposal(&forged);
    assert!(
        matches!(executed.outcome, Outcome::Deleted { .. }),
        "{:?}",
        executed.outcome
    );
    assert_eq!(r.get(b"k"), None);
    assert_eq!(r.meta().reply_mismatches, 1, "counted");
    assert_eq!(
        r.meta().remembered_replies,
        1,
        "its reply replaced the victim's"
    );
    let forged_retry = r.proposal(del(b"k", None), Some(forger));
    assert_eq!(
        r.apply_proposal(&forged_retry).outcome,
        executed.outcome,
        "the forger's own retry gets its own reply"
    );

    // The victim's late retry is never answered with the forger's reply: executed again.
    let late = r.proposal(set(b"k", b"victim's"), Some(victim));
    let again = r.apply_proposal(&late);
    assert!(matches!(again.outcome, Outcome::Stored { .. }));
    assert_ne!(again.outcome, original.outcome, "a new version");
    assert_eq!(
        r.get(b"k").map(|record| record.value),
        Some(b"victim's".to_vec())
    );
    assert_eq!(r.meta().reply_mismatches, 2);
    assert_eq!(r.meta().remembered_replies, 1);
    // One index entry (the replaced reply's went with it) and exact byte counters.
    r.assert_counters_exact();
}

#[test]
fn section_6_reply_memory_is_pruned_after_expiry() {
    let mut r = Replica::new();
    for i in 0..100u8 {
        let request = RequestId {
            client: b"c".to_vec(),
            correlation: vec![i],
            remember_for_ms: 1_000,
            digest: 0,
        };
        let p = r.proposal(set(b"k", &[i]), Some(request));
        r.apply_proposal(&p);
    }
    let replies = |r: &Replica| {
        read::count_prefix(&r.map, &[Table::Replies.prefix()], usize::MAX).expect("count")
    };
    assert_eq!(replies(&r), 100);
    r.wall_ms += 2_000;
    for _ in 0..5 {
        r.apply(set(b"tick", b""));
    }
    assert_eq!(replies(&r), 0, "32 per entry: 5 entries prune all 100");
    assert_eq!(
        read::count_prefix(&r.map, &[Table::ReplyExpiry.prefix()], usize::MAX).expect("count"),
        0
    );
}

#[test]
fn section_6_one_transaction_prunes_exactly_the_budget_per_proposal_earliest_first() {
    let (mut a, mut b) = replicas_with_replies(200, 1_000);
    let oldest_expiry = a.wall_ms + 1_000;
    a.wall_ms += 10_000; // everything remembered so far has expired
    b.wall_ms = a.wall_ms;
    let batch: Vec<Proposal> = (0..5u32)
        .map(|i| a.request(set(b"other", b"x"), 1_000 + i, 60_000))
        .collect();
    b.counter = a.counter;
    assert_batch_equals_singles(&mut a, &mut b, &batch);
    assert_eq!(
        a.replies(),
        200 - 5 * REPLIES_PRUNED_PER_ENTRY + 5,
        "32 per proposal, plus the 5 new replies"
    );
    // The 160 earliest expiries went; the next one is the first left.
    let (start, end) = Table::ReplyExpiry.bounds();
    let (first_left, _) = a
        .map
        .range::<[u8], _>((
            std::ops::Bound::Included(&start[..]),
            std::ops::Bound::Excluded(&end[..]),
        ))
        .next()
        .expect("an entry");
    let (at, _) = reply_rows::split_reply_expiry_key(first_left).expect("index key");
    assert_eq!(at, oldest_expiry + 5 * REPLIES_PRUNED_PER_ENTRY as u64);
}

#[test]
fn section_6_a_reply_a_later_proposal_of_the_transaction_needs_is_kept() {
    let (mut a, mut b) = replicas_with_replies(300, 5);
    let mut batch = Vec::new();
    a.wall_ms += 400; // the 300 replies are all due: every proposal below prunes its budget
    let nx = || set_with(b"lock", b"me", SetCondition::IfAbsent, None, None);
    batch.push(a.request(nx(), 7_000, 10)); // remembered until t + 10
    for i in 0..3 {
        a.wall_ms += 3;
        batch.push(a.request(set(b"filler", b""), 8_000 + i, 1));
    }
    batch.push(a.request(nx(), 7_000, 10)); // t + 9: retry, gets the original reply
    a.wall_ms += 1;
    batch.push(a.request(nx(), 7_000, 10)); // t + 10: a new request, the key exists
    a.wall_ms -= 8; // a leader behind: the store's time stays at t + 10
    batch.push(a.request(nx(), 7_000, 10));
    b.counter = a.counter;
    let applied = assert_batch_equals_singles(&mut a, &mut b, &batch);
    let original = applied[0].outcome.clone();
    assert!(matches!(original, Outcome::Stored { .. }));
    assert_eq!(applied[4].outcome, original, "retry inside the window");
    assert!(
        matches!(applied[5].outcome, Outcome::NotStored { .. }),
        "expired at t + 10: a new request"
    );
    assert!(
        matches!(applied[6].outcome, Outcome::NotStored { .. }),
        "the store's time does not go back with the leader's clock"
    );
}

#[test]
fn section_6_replies_remembered_for_0_ms_are_pruned_as_in_separate_transactions() {
    // Below the prune cursor: the reply of a proposal that is already due when the next
    // proposal of the same millisecond prunes.
    let (mut a, mut b) = replicas_with_replies(40, 3);
    a.wall_ms += 50;
    let mut batch = Vec::new();
    for i in 0..6u32 {
        batch.push(a.request(set(b"z", b""), 9_000 + i, 0));
    }
    a.wall_ms += 1;
    batch.push(a.request(set(b"z", b""), 9_100, 0));
    b.counter = a.counter;
    assert_batch_equals_singles(&mut a, &mut b, &batch);
    assert_eq!(a.replies(), 1, "only the last proposal's reply is left");
}

#[test]
fn section_6_pruning_walks_each_removed_reply_once() {
    let (mut r, _) = replicas_with_replies(10_000, 1);
    r.wall_ms += 20_000;
    let batch: Vec<Proposal> = (0..200u32)
        .map(|i| r.request(set(b"k", b"v"), 20_000 + i, 60_000))
        .collect();
    let base = Counting::new(&r.map);
    let mut txn = Overlay::new(&base);
    let mut machine = Machine::open(&mut txn).expect("open");
    for proposal in &batch {
        machine.apply(proposal).expect("apply");
    }
    machine.finish();
    let pruned = 200 * REPLIES_PRUNED_PER_ENTRY;
    // A scan from the start of the index would walk past everything earlier proposals
    // removed: about 200 * 199 / 2 * 32 = 636,800 entries.
    assert!(
        base.yielded.get() <= pruned + 2 * 200,
        "{} base entries read to prune {pruned}",
        base.yielded.get()
    );
    assert_eq!(base.scans_of(Table::ReplyExpiry), 200);
    let writes = txn.into_writes();
    commit(&mut r.map, writes);
    assert_eq!(r.replies(), 10_000 - pruned + 200);
}

#[test]
fn section_6_nothing_newly_due_means_no_reply_index_scan() {
    let (mut r, _) = replicas_with_replies(100, 60_000);
    let batch: Vec<Proposal> = (0..50u32)
        .map(|i| r.request(set(b"k", b"v"), 30_000 + i, 60_000))
        .collect(); // all at the same wall time
    let base = Counting::new(&r.map);
    let mut txn = Overlay::new(&base);
    let mut machine = Machine::open(&mut txn).expect("open");
    for proposal in &batch {
        machine.apply(proposal).expect("apply");
    }
    assert_eq!(
        base.scans_of(Table::ReplyExpiry),
        1,
        "one scan finds nothing due; later proposals of the same ms skip it"
    );
}

#[test]
fn section_6_the_reply_count_cap_evicts_the_earliest_expiry_first() {
    let mut r = Replica::new();
    r.set_limits(Limits {
        max_remembered_replies: 3,
        ..Limits::default()
    });
    let t = r.wall_ms;
    // Remembered in another order than they expire.
    let mut originals = Vec::new();
    for (n, remember) in [(0, 5_000), (1, 1_000), (2, 3_000)] {
        let p = nx_request(&mut r, n, remember);
        let applied = r.apply_proposal(&p);
        assert!(matches!(applied.outcome, Outcome::Stored { .. }));
        originals.push((p, applied.outcome));
    }
    assert_eq!(r.meta().remembered_replies, 3);
    assert_eq!(r.meta().replies_evicted, 0);
    let p3 = nx_request(&mut r, 3, 4_000);
    let first_outcome_3 = r.apply_proposal(&p3).outcome;
    assert_eq!(
        r.remembered(),
        vec![
            (t + 3_000, 2u32.to_be_bytes().to_vec()),
            (t + 4_000, 3u32.to_be_bytes().to_vec()),
            (t + 5_000, 0u32.to_be_bytes().to_vec()),
        ],
        "request 1, the earliest expiry, was evicted"
    );
    assert_eq!(r.meta().remembered_replies, 3);
    assert_eq!(r.meta().replies_evicted, 1);
    r.assert_counters_exact();

    // A retry of a kept request gets its remembered outcome; nothing is executed or evicted.
    let version_before = r.meta().max_version;
    for (p, outcome) in [&originals[0], &originals[2]] {
        let retry = r.proposal(p.mutation.clone(), p.request.clone());
        assert_eq!(&r.apply_proposal(&retry).outcome, outcome);
    }
    let retry3 = r.proposal(p3.mutation.clone(), p3.request.clone());
    assert_eq!(r.apply_proposal(&retry3).outcome, first_outcome_3);
    assert_eq!(r.meta().max_version, version_before, "nothing executed");
    assert_eq!(r.meta().replies_evicted, 1);

    // A retry of the evicted request is executed again: its key exists now, so NX fails.
    let (p1, original1) = &originals[1];
    let retry1 = r.proposal(p1.mutation.clone(), p1.request.clone());
    let again = r.apply_proposal(&retry1).outcome;
    let Outcome::Stored { version } = original1 else {
        panic!("stored")
    };
    assert_eq!(
        again,
        Outcome::NotStored {
            version: version.clone()
        },
        "an evicted request runs again"
    );
    // Its new reply expires first (t + 1000), so it is the one evicted this time.
    assert_eq!(r.meta().replies_evicted, 2);
    assert_eq!(r.remembered().len(), 3);
    assert!(!r.remembered().iter().any(|(_, c)| c == &1u32.to_be_bytes()));
    r.assert_counters_exact();

    // Lowering the cap evicts down to it at the next remembered reply.
    r.set_limits(Limits {
        max_remembered_replies: 1,
        ..Limits::default()
    });
    assert_eq!(
        r.meta().remembered_replies,
        3,
        "SetLimits itself evicts nothing"
    );
    let p9 = nx_request(&mut r, 9, 10_000);
    r.apply_proposal(&p9);
    assert_eq!(
        r.remembered(),
        vec![(t + 10_000, 9u32.to_be_bytes().to_vec())]
    );
    assert_eq!(r.meta().replies_evicted, 5);
    r.assert_counters_exact();
}

#[test]
fn section_6_the_reply_byte_cap_evicts_the_earliest_expiry_first() {
    let mut r = Replica::new();
    // Measure one reply of the shape used below: client "c", 4 bytes of correlation.
    let p = nx_request(&mut r, 100, 100);
    r.apply_proposal(&p);
    let small = r.meta().remembered_reply_bytes;
    assert!(small > 0);
    r.assert_counters_exact();
    r.wall_ms += 100; // expired; pruned by the next proposal
    r.set_limits(Limits {
        max_remembered_reply_bytes: 3 * small,
        ..Limits::default()
    });
    assert_eq!(r.meta().remembered_replies, 0);
    assert_eq!(
        r.meta().remembered_reply_bytes,
        0,
        "pruning subtracts its bytes"
    );
    let t = r.wall_ms;

    for (n, remember) in [(0, 2_000), (1, 1_000), (2, 3_000)] {
        let p = nx_request(&mut r, n, remember);
        r.apply_proposal(&p);
    }
    assert_eq!(
        r.meta().remembered_reply_bytes,
        3 * small,
        "exactly at the cap"
    );
    assert_eq!(r.meta().replies_evicted, 0);

    // A reply with 2 * small more bytes of correlation data needs room for 3 small ones: the
    // three earliest expiries go, although the count cap is nowhere near.
    let big = RequestId {
        client: b"c".to_vec(),
        correlation: vec![b'x'; 4 + 2 * small as usize],
        remember_for_ms: 4_000,
        digest: 0,
    };
    let pb = r.proposal(set(b"big", b""), Some(big.clone()));
    let stored = r.apply_proposal(&pb).outcome;
    assert_eq!(r.meta().remembered_replies, 1);
    assert_eq!(r.meta().replies_evicted, 3);
    assert_eq!(r.remembered(), vec![(t + 4_000, big.correlation.clone())]);
    assert!(r.meta().remembered_reply_bytes <= 3 * small);
    r.assert_counters_exact();

    // Small ones remembered for longer: the first evicts the big reply (earliest expiry).
    for n in 10..13 {
        let p = nx_request(&mut r, n, 5_000);
        r.apply_proposal(&p);
    }
    let smalls: Vec<(u64, Vec<u8>)> = (10..13u32)
        .map(|n| (t + 5_000, n.to_be_bytes().to_vec()))
        .collect();
    assert_eq!(r.remembered(), smalls);
    assert_eq!(r.meta().replies_evicted, 4);
    let retry = r.proposal(pb.mutation.clone(), Some(big.clone()));
    let again = r.apply_proposal(&retry).outcome;
    assert!(
        matches!(again, Outcome::Stored { .. }) && again != stored,
        "the big reply was evicted: its retry ran again (a new version), got {again:?}"
    );
    assert_eq!(
        r.remembered(),
        smalls,
        "its new reply expires first, so it is the one evicted to fit"
    );
    assert_eq!(r.meta().replies_evicted, 5);
    assert_eq!(r.meta().remembered_reply_bytes, 3 * small);
    r.assert_counters_exact();

    // A reply bigger than the whole cap is not remembered, and evicts nothing.
    let evicted = r.meta().replies_evicted;
    let kept = r.remembered();
    let huge = RequestId {
        correlation: vec![b'y'; 4 * small as usize],
        ..big
    };
    let ph = r.proposal(del(b"nothing", None), Some(huge.clone()));
    assert_eq!(r.apply_proposal(&ph).outcome, Outcome::Missing);
    assert_eq!(r.remembered(), kept, "nothing evicted for it");
    assert_eq!(r.meta().replies_evicted, evicted + 1, "counted");
    r.apply(set(b"nothing", b"now"));
    let retry = r.proposal(ph.mutation.clone(), Some(huge));
    assert!(
        matches!(r.apply_proposal(&retry).outcome, Outcome::Deleted { .. }),
        "its retry runs again"
    );
    r.assert_counters_exact();
}

#[test]
fn section_6_a_retry_after_expiry_replaces_the_reply_and_its_counts() {
    let mut r = Replica::new();
    // 40 replies expire before the one retried, so the retry's own prune (32) leaves it.
    for n in 0..40 {
        let p = nx_request(&mut r, n, 5);
        r.apply_proposal(&p);
    }
    let request = RequestId {
        client: b"c".to_vec(),
        correlation: b"retried".to_vec(),
        remember_for_ms: 10,
        digest: 0,
    };
    let first = r.proposal(set(b"k", b"1"), Some(request.clone()));
    r.apply_proposal(&first);
    let before = r.meta();
    r.wall_ms += 10;
    // The retried request (same id, past its expiry) is a new request; its reply (`:0`, no
    // version) is smaller than the reply it replaces (`+OK` with a version).
    let retry = r.proposal(del(b"absent", None), Some(request));
    assert_eq!(r.apply_proposal(&retry).outcome, Outcome::Missing);
    let after = r.meta();
    assert_eq!(
        after.remembered_replies,
        before.remembered_replies - REPLIES_PRUNED_PER_ENTRY as u64,
        "32 pruned, one replaced by one"
    );
    assert_eq!(after.replies_evicted, 0);
    r.assert_counters_exact();
    assert!(
        r.remembered()
            .iter()
            .filter(|(_, c)| c == b"retried")
            .count()
            == 1
    );
}

#[test]
fn section_6_and_7_caps_give_the_same_state_whatever_the_grouping() {
    let mut a = Replica::new();
    let mut b = Replica::new();
    let mut steps: Vec<Proposal> = Vec::new();
    steps.push(a.proposal(
        Mutation::SetLimits(Limits {
            max_registrations: 4,
            max_remembered_replies: 6,
            max_remembered_reply_bytes: 400,
            ..Limits::default()
        }),
        None,
    ));
    for n in 0..40u32 {
        if n % 7 == 3 {
            a.wall_ms += 2; // some replies expire, and are pruned or replaced
        }
        let client = ["c1", "c2", "c3"][n as usize % 3];
        let key = [n as u8 % 5];
        let mutation = match n % 6 {
            0 | 1 => observe(client, &key),
            2 => set(&key, b"v"),
            3 => unobserve(client, &key),
            4 if n % 12 == 4 => forget(client),
            _ => set_with(&key, b"w", SetCondition::IfAbsent, None, None),
        };
        // Correlations repeat (retries), with windows from 0 to 9 ms and some long ones.
        let request = RequestId {
            client: client.as_bytes().to_vec(),
            correlation: vec![(n % 11) as u8; 1 + (n % 4) as usize * 20],
            remember_for_ms: if n % 5 == 0 { 1_000 } else { u64::from(n % 10) },
            digest: 0,
        };
        steps.push(a.proposal(mutation, Some(request)));
    }
    b.counter = a.counter;
    b.wall_ms = a.wall_ms;
    let applied = assert_batch_equals_singles(&mut a, &mut b, &steps);
    let meta = a.meta();
    assert!(meta.replies_evicted > 0, "the reply caps were hit");
    assert!(
        applied
            .iter()
            .any(|x| x.outcome == Outcome::Rejected(Rejection::QuotaExceeded)),
        "the registration cap was hit"
    );
    assert!(meta.remembered_replies <= 6 && meta.remembered_reply_bytes <= 400);
    a.assert_counters_exact();
    b.assert_counters_exact();
    assert_eq!(meta, b.meta());
}

#[test]
fn section_6_eviction_reads_only_what_it_evicts() {
    let (mut r, _) = replicas_with_replies(10_000, 60_000);
    r.set_limits(Limits {
        max_remembered_replies: 10_000,
        ..Limits::default()
    });
    let batch: Vec<Proposal> = (0..200u32)
        .map(|i| r.request(set(b"k", b"v"), 20_000 + i, 120_000))
        .collect(); // nothing is due: every new reply evicts exactly one
    let base = Counting::new(&r.map);
    let mut txn = Overlay::new(&base);
    let mut machine = Machine::open(&mut txn).expect("open");
    for proposal in &batch {
        machine.apply(proposal).expect("apply");
    }
    let meta = machine.finish();
    assert_eq!(meta.replies_evicted, 200);
    assert_eq!(meta.remembered_replies, 10_000);
    // A scan from the start of the index each time would read 200 * 199 / 2 = 19,900.
    assert!(
        base.yielded.get() <= 2 * 200,
        "{} base entries read to evict 200",
        base.yielded.get()
    );
    let writes = txn.into_writes();
    commit(&mut r.map, writes);
    r.assert_counters_exact();
}
