//! Unit tests of the keyspace semantics, one per rule of the protocol, on an in-memory map;
//! then the cost rules of many proposals in one transaction (see the `apply` module docs).

use std::collections::BTreeMap;

use super::*;
use crate::hlc::Hlc;

/// A replica on a BTreeMap with a hand-driven leader clock.
struct Replica {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
    wall_ms: u64,
    counter: u64,
}

impl Replica {
    fn new() -> Self {
        Replica {
            map: BTreeMap::new(),
            wall_ms: 1_000_000,
            counter: 0,
        }
    }

    fn proposal(&mut self, mutation: Mutation, request: Option<RequestId>) -> Proposal {
        self.counter += 1;
        Proposal {
            stamp: Hlc::new(self.wall_ms, self.counter, "n1"),
            wall_ms: self.wall_ms,
            request,
            mutation,
            token_seed: None,
        }
    }

    fn apply_proposal(&mut self, proposal: &Proposal) -> Applied {
        let mut txn = Overlay::new(&self.map);
        let mut keyspace = Keyspace::open(&mut txn).expect("open");
        let applied = keyspace.apply(proposal).expect("apply");
        keyspace.finish();
        let writes = txn.into_writes();
        for (k, w) in writes {
            match w {
                Some(v) => self.map.insert(k, v),
                None => self.map.remove(&k),
            };
        }
        applied
    }

    fn apply(&mut self, mutation: Mutation) -> Applied {
        let proposal = self.proposal(mutation, None);
        self.apply_proposal(&proposal)
    }

    fn get(&self, key: &[u8]) -> Option<Record> {
        let meta = read::meta(&self.map).expect("meta");
        read::live_record(&self.map, key, read::read_time(&meta, self.wall_ms)).expect("read")
    }

    fn meta(&self) -> KeyspaceMeta {
        read::meta(&self.map).expect("meta")
    }
}

fn set(key: &[u8], value: &[u8]) -> Mutation {
    Mutation::Set {
        key: key.to_vec(),
        value: value.to_vec(),
        condition: SetCondition::Always,
        expire_after_ms: None,
        fencing_token: None,
    }
}

fn set_with(
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

fn del(key: &[u8], ft: Option<Hlc>) -> Mutation {
    Mutation::Del {
        key: key.to_vec(),
        fencing_token: ft,
    }
}

fn vdel(key: &[u8], value: &[u8], ft: Option<Hlc>) -> Mutation {
    Mutation::VDel {
        key: key.to_vec(),
        value: value.to_vec(),
        fencing_token: ft,
    }
}

fn observe(client: &str, key: &[u8]) -> Mutation {
    Mutation::Observe {
        client: client.to_owned(),
        key: key.to_vec(),
    }
}

/// The clients the notifier tells of `event`: the key's registrations read as it reads them
/// (pages of 2, so paging is exercised), those registered before the change.
fn notified(map: &BTreeMap<Vec<u8>, Vec<u8>>, event: &KeyEvent) -> Vec<String> {
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

fn stored_version(applied: &Applied) -> Hlc {
    match &applied.outcome {
        Outcome::Stored { version } | Outcome::Deleted { version } => version.clone(),
        other => panic!("expected a new version, got {other:?}"),
    }
}

#[test]
fn section_2_set_stores_value_and_get_returns_the_set_version() {
    let mut r = Replica::new();
    let v = stored_version(&r.apply(set(b"k", b"v")));
    let record = r.get(b"k").expect("present");
    assert_eq!(record.value, b"v");
    assert_eq!(
        record.version, v,
        "§3: GET returns the version stored by the write"
    );
}

#[test]
fn section_2_binary_keys_and_values_round_trip() {
    let mut r = Replica::new();
    let key: Vec<u8> = (0..=255u8).collect();
    let value = b"a\r\nb\0c".to_vec();
    r.apply(set(&key, &value));
    assert_eq!(r.get(&key).expect("present").value, value);
    r.apply(set(b"empty", b""));
    assert_eq!(r.get(b"empty").expect("present").value, b"");
}

#[test]
fn section_2_nx_sets_only_absent_keys() {
    let mut r = Replica::new();
    let first = stored_version(&r.apply(set_with(b"k", b"1", SetCondition::IfAbsent, None, None)));
    let second = r.apply(set_with(b"k", b"2", SetCondition::IfAbsent, None, None));
    assert_eq!(
        second.outcome,
        Outcome::NotStored {
            version: first.clone()
        },
        "§1.2: :-1 carries the stored version"
    );
    assert_eq!(r.get(b"k").expect("present").value, b"1");
}

#[test]
fn section_2_nex_sets_absent_or_equal_keys() {
    let mut r = Replica::new();
    let v1 = stored_version(&r.apply(set_with(
        b"lock",
        b"me",
        SetCondition::IfAbsentOrEqual,
        None,
        None,
    )));
    let v2 = stored_version(&r.apply(set_with(
        b"lock",
        b"me",
        SetCondition::IfAbsentOrEqual,
        None,
        None,
    )));
    assert!(v2 > v1, "renewal issues a new version");
    let other = r.apply(set_with(
        b"lock",
        b"you",
        SetCondition::IfAbsentOrEqual,
        None,
        None,
    ));
    assert_eq!(other.outcome, Outcome::NotStored { version: v2 });
    assert_eq!(r.get(b"lock").expect("present").value, b"me");
}

#[test]
fn section_2_set_conditions_are_decided_on_live_keys_only() {
    let mut r = Replica::new();
    r.apply(set_with(
        b"k",
        b"old",
        SetCondition::Always,
        Some(100),
        None,
    ));
    r.wall_ms += 100;
    assert!(
        r.get(b"k").is_none(),
        "§8: invisible from the expiry instant on"
    );
    let applied = r.apply(set_with(b"k", b"new", SetCondition::IfAbsent, None, None));
    assert!(
        matches!(applied.outcome, Outcome::Stored { .. }),
        "§8: NX sees an expired key as absent"
    );
}

/// One leader whose clock ran an hour ahead raised the time floor; the next leader, with a
/// right clock, judges expiry at most `MAX_FLOOR_LEAD_MS` ahead of its own clock, so a key it
/// sets with PX 120 s is not born expired.
#[test]
fn section_8_a_leader_clock_jump_does_not_expire_keys_early_for_good() {
    let mut r = Replica::new();
    let right = r.wall_ms;
    r.wall_ms = right + 3_600_000; // the skewed leader
    r.apply(set(b"during-skew", b"1"));
    assert_eq!(r.meta().time_floor_ms, right + 3_600_000);
    r.wall_ms = right + 1_000; // a leader with a right clock
    r.apply(set_with(
        b"k",
        b"v",
        SetCondition::Always,
        Some(120_000),
        None,
    ));
    assert_eq!(
        r.meta().time_floor_ms,
        right + 1_000 + read::MAX_FLOOR_LEAD_MS,
        "the floor is pulled back to the leader's clock plus the drift bound"
    );
    assert_eq!(r.get(b"k").expect("alive").value, b"v");
    // PX counts from the store time, which is at most the drift bound ahead.
    r.wall_ms = right + 1_000 + read::MAX_FLOOR_LEAD_MS + 120_000;
    assert!(
        r.get(b"k").is_none(),
        "and it expires within the drift bound"
    );
}

#[test]
fn section_2_plain_set_clears_an_earlier_expiry() {
    let mut r = Replica::new();
    r.apply(set_with(b"k", b"1", SetCondition::Always, Some(50), None));
    r.apply(set(b"k", b"2"));
    r.wall_ms += 10_000;
    assert_eq!(r.get(b"k").expect("still there").value, b"2");
    assert!(
        read::due_keys(&r.map, r.wall_ms, 10)
            .expect("scan")
            .is_empty(),
        "expiry index entry removed"
    );
}

#[test]
fn scan_source_lists_keys_after_the_cursor_with_their_liveness() {
    let mut r = Replica::new();
    r.apply(set(b"b", b"1"));
    r.apply(set_with(b"c", b"1", SetCondition::Always, Some(50), None));
    r.apply(set(b"a", b"1"));
    r.apply(set(b"a\0", b"1"));
    r.apply(set(b"\xff\xff", b"1"));
    observe_and_remember(&mut r);
    r.wall_ms += 100;
    let listed = |after: Option<&[u8]>| -> Vec<(Vec<u8>, bool)> {
        read::keys_after(&r.map, after, r.wall_ms)
            .map(|entry| {
                entry.map(|(key, live, stored_bytes)| {
                    assert!(
                        stored_bytes > key.len(),
                        "the record row is counted, not only the key"
                    );
                    (key, live)
                })
            })
            .collect::<crate::error::Result<_>>()
            .expect("list")
    };
    let entry = |key: &[u8], live: bool| (key.to_vec(), live);
    assert_eq!(
        listed(None),
        vec![
            entry(b"a", true),
            entry(b"a\0", true),
            entry(b"b", true),
            entry(b"c", false),
            entry(b"\xff\xff", true),
        ],
        "every stored key once, ascending, expired ones marked; no other table's rows"
    );
    assert_eq!(
        listed(Some(b"a")),
        listed(None)[1..].to_vec(),
        "strictly after"
    );
    assert_eq!(listed(Some(b"a\0")), listed(None)[2..].to_vec());
    assert_eq!(
        listed(Some(b"bb")),
        listed(None)[3..].to_vec(),
        "a cursor key need not exist"
    );
    assert!(listed(Some(b"\xff\xff")).is_empty());
}

/// Rows in the tables that sort around the keys table: a registration and a remembered reply.
fn observe_and_remember(r: &mut Replica) {
    r.apply(observe("client", b"a"));
    let request = RequestId {
        client: b"client".to_vec(),
        correlation: b"1".to_vec(),
        remember_for_ms: 60_000,
        digest: 0,
    };
    let proposal = r.proposal(set(b"b", b"2"), Some(request));
    r.apply_proposal(&proposal);
}

#[test]
fn section_2_del_and_vdel_outcomes() {
    let mut r = Replica::new();
    assert_eq!(r.apply(del(b"k", None)).outcome, Outcome::Missing);
    assert_eq!(r.apply(vdel(b"k", b"v", None)).outcome, Outcome::Missing);
    r.apply(set(b"k", b"v"));
    assert_eq!(
        r.apply(vdel(b"k", b"other", None)).outcome,
        Outcome::ValueDiffers
    );
    assert!(r.get(b"k").is_some());
    let set_version = r.get(b"k").expect("present").version;
    let deletion = stored_version(&r.apply(vdel(b"k", b"v", None)));
    assert!(
        deletion > set_version,
        "§1.2: the deletion has its own, later HLC"
    );
    assert!(r.get(b"k").is_none());
    r.apply(set(b"k", b"v"));
    assert!(matches!(
        r.apply(del(b"k", None)).outcome,
        Outcome::Deleted { .. }
    ));
    assert_eq!(r.meta().keys, 0);
    assert_eq!(r.meta().bytes, 0);
}

#[test]
fn section_3_versions_always_increase_even_if_the_stamp_goes_back() {
    let mut r = Replica::new();
    let v1 = stored_version(&r.apply(set(b"k", b"1")));
    r.wall_ms -= 500; // a new leader with a slower clock
    r.counter = 0;
    let v2 = stored_version(&r.apply(set(b"k", b"2")));
    let v3 = stored_version(&r.apply(set(b"other", b"3")));
    assert!(v1 < v2 && v2 < v3, "{v1} {v2} {v3}");
    assert_eq!(r.meta().max_version, Some(v3));
}

#[test]
fn section_4_fencing_token_rules() {
    let mut r = Replica::new();
    let token = Hlc::new(5_000, 0, "client");
    let lower = Hlc::new(4_000, 9, "client");
    let higher = Hlc::new(6_000, 0, "client");
    // a SET with __ft on an unfenced key stores the token
    assert!(matches!(
        r.apply(set_with(
            b"res",
            b"1",
            SetCondition::Always,
            None,
            Some(token.clone())
        ))
        .outcome,
        Outcome::Stored { .. }
    ));
    assert_eq!(
        r.get(b"res").expect("present").fencing_token,
        Some(token.clone())
    );
    let cases: Vec<(&str, Mutation, Outcome)> = vec![
        (
            "SET without __ft",
            set(b"res", b"x"),
            Outcome::Rejected(Rejection::FencingTokenRequired),
        ),
        (
            "DEL without __ft",
            del(b"res", None),
            Outcome::Rejected(Rejection::FencingTokenRequired),
        ),
        (
            "VDEL without __ft",
            vdel(b"res", b"1", None),
            Outcome::Rejected(Rejection::FencingTokenRequired),
        ),
        (
            "SET lower",
            set_with(
                b"res",
                b"x",
                SetCondition::Always,
                None,
                Some(lower.clone()),
            ),
            Outcome::Rejected(Rejection::FencingTokenLower),
        ),
        (
            "DEL lower",
            del(b"res", Some(lower.clone())),
            Outcome::Rejected(Rejection::FencingTokenLower),
        ),
        (
            "VDEL lower",
            vdel(b"res", b"1", Some(lower)),
            Outcome::Rejected(Rejection::FencingTokenLower),
        ),
    ];
    for (name, mutation, expected) in cases {
        assert_eq!(r.apply(mutation).outcome, expected, "§4 {name}");
        assert_eq!(
            r.get(b"res").expect("unchanged").value,
            b"1",
            "§4 {name} changes nothing"
        );
    }
    assert!(
        matches!(
            r.apply(set_with(
                b"res",
                b"2",
                SetCondition::Always,
                None,
                Some(token.clone())
            ))
            .outcome,
            Outcome::Stored { .. }
        ),
        "equal token proceeds"
    );
    assert!(
        matches!(
            r.apply(set_with(
                b"res",
                b"3",
                SetCondition::Always,
                None,
                Some(higher.clone())
            ))
            .outcome,
            Outcome::Stored { .. }
        ),
        "higher token proceeds"
    );
    assert_eq!(
        r.get(b"res").expect("present").fencing_token,
        Some(higher.clone()),
        "SET stores the higher token"
    );
    assert_eq!(
        r.apply(set_with(
            b"res",
            b"4",
            SetCondition::Always,
            None,
            Some(token)
        ))
        .outcome,
        Outcome::Rejected(Rejection::FencingTokenLower)
    );
    assert!(matches!(
        r.apply(del(b"res", Some(higher))).outcome,
        Outcome::Deleted { .. }
    ));
    assert!(
        matches!(r.apply(set(b"res", b"5")).outcome, Outcome::Stored { .. }),
        "deleting a key removes its token"
    );
}

#[test]
fn section_4_get_and_keynotify_never_need_a_token() {
    let mut r = Replica::new();
    r.apply(set_with(
        b"res",
        b"1",
        SetCondition::Always,
        None,
        Some(Hlc::new(1, 0, "c")),
    ));
    assert!(r.get(b"res").is_some());
    assert_eq!(r.apply(observe("c1", b"res")).outcome, Outcome::Observing);
}

#[test]
fn section_4_lease_pattern_acquire_renew_release() {
    let mut r = Replica::new();
    let acquire = || {
        set_with(
            b"lease",
            b"holder-a",
            SetCondition::IfAbsentOrEqual,
            Some(10_000),
            None,
        )
    };
    let token = stored_version(&r.apply(acquire()));
    let contender = r.apply(set_with(
        b"lease",
        b"holder-b",
        SetCondition::IfAbsentOrEqual,
        Some(10_000),
        None,
    ));
    assert!(matches!(contender.outcome, Outcome::NotStored { .. }));
    let renewed = stored_version(&r.apply(acquire()));
    assert!(renewed > token);
    // the token fences the protected resource
    r.apply(set_with(
        b"resource",
        b"a",
        SetCondition::Always,
        None,
        Some(renewed.clone()),
    ));
    assert_eq!(
        r.apply(set_with(
            b"resource",
            b"stale",
            SetCondition::Always,
            None,
            Some(token)
        ))
        .outcome,
        Outcome::Rejected(Rejection::FencingTokenLower)
    );
    assert!(matches!(
        r.apply(vdel(b"lease", b"holder-a", None)).outcome,
        Outcome::Deleted { .. }
    ));
    assert!(matches!(
        r.apply(set_with(
            b"lease",
            b"holder-b",
            SetCondition::IfAbsentOrEqual,
            Some(10_000),
            None
        ))
        .outcome,
        Outcome::Stored { .. }
    ));
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
        read::remembered_reply(&r.map, &victim, r.wall_ms).expect("read"),
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
        read::remembered_reply(&r.map, &forger, r.wall_ms).expect("read"),
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
        read::count_prefix(&r.map, &[layout::Table::Replies.prefix()], usize::MAX).expect("count")
    };
    assert_eq!(replies(&r), 100);
    r.wall_ms += 2_000;
    for _ in 0..5 {
        r.apply(set(b"tick", b""));
    }
    assert_eq!(replies(&r), 0, "32 per entry: 5 entries prune all 100");
    assert_eq!(
        read::count_prefix(&r.map, &[layout::Table::ReplyExpiry.prefix()], usize::MAX)
            .expect("count"),
        0
    );
}

#[test]
fn section_7_notifications_follow_registrations() {
    let mut r = Replica::new();
    assert!(
        r.apply(set(b"k", b"before")).events.is_empty(),
        "changes before KEYNOTIFY are not notified"
    );
    assert_eq!(r.apply(observe("c1", b"k")).outcome, Outcome::Observing);
    assert_eq!(
        r.apply(observe("c1", b"k")).outcome,
        Outcome::Observing,
        "KEYNOTIFY is idempotent"
    );
    r.apply(observe("c2", b"k"));
    let applied = r.apply(set(b"k", b"new"));
    let version = stored_version(&applied);
    assert_eq!(
        applied.events,
        vec![KeyEvent {
            key: b"k".to_vec(),
            version: version.clone(),
            change: Change::Set(b"new".to_vec()),
        }],
        "one event, naming no observers"
    );
    assert_eq!(notified(&r.map, &applied.events[0]), vec!["c1", "c2"]);
    let deleted = r.apply(del(b"k", None));
    assert_eq!(deleted.events[0].change, Change::Delete);
    assert_eq!(deleted.events[0].version, stored_version(&deleted));
    let stop = Mutation::Unobserve {
        client: "c1".into(),
        key: b"k".to_vec(),
    };
    assert_eq!(r.apply(stop.clone()).outcome, Outcome::StoppedObserving);
    assert_eq!(
        r.apply(stop).outcome,
        Outcome::NotObserving,
        "STOP on an unobserved key is :0"
    );
    let after_stop = r.apply(set(b"k", b"x"));
    assert_eq!(
        notified(&r.map, &after_stop.events[0]),
        vec!["c2"],
        "no notification after STOP"
    );
    assert!(r.apply(set(b"unobserved", b"x")).events.is_empty());
}

#[test]
fn section_7_departed_client_registrations_are_dropped() {
    let mut r = Replica::new();
    r.apply(observe("gone", b"a"));
    r.apply(observe("gone", b"b"));
    r.apply(observe("stays", b"a"));
    assert_eq!(
        r.apply(Mutation::ForgetClient {
            client: "gone".into()
        })
        .outcome,
        Outcome::ForgotClient { registrations: 2 }
    );
    let applied = r.apply(set(b"a", b"1"));
    assert_eq!(notified(&r.map, &applied.events[0]), vec!["stays"]);
    assert!(r.apply(set(b"b", b"1")).events.is_empty());
}

#[test]
fn section_7_a_change_is_one_event_however_many_observe_it() {
    let mut r = Replica::new();
    for i in 0..300 {
        r.apply(observe(&format!("c{i:03}"), b"hot"));
    }
    r.apply(observe("c1", b"cold"));
    let applied = r.apply(set(b"hot", b"v"));
    assert_eq!(applied.events.len(), 1, "one event for 300 observers");
    let expected: Vec<String> = (0..300).map(|i| format!("c{i:03}")).collect();
    assert_eq!(
        notified(&r.map, &applied.events[0]),
        expected,
        "paging finds every observer once, in id order"
    );
    assert!(
        r.apply(set(b"unobserved", b"v")).events.is_empty(),
        "registrations on other keys emit nothing for this one"
    );
}

#[test]
fn section_7_a_registration_stores_the_store_version_as_its_floor() {
    let mut r = Replica::new();
    r.apply(observe("early", b"k"));
    let first = r.apply(set(b"k", b"1"));
    let v1 = stored_version(&first);
    r.apply(observe("late", b"k"));
    let page = read::observers_page(&r.map, b"k", None, 10).expect("page");
    assert_eq!(
        page,
        vec![
            read::Observer {
                client: "early".into(),
                floor: None,
            },
            read::Observer {
                client: "late".into(),
                floor: Some(v1.clone()),
            },
        ],
        "registered before any version: no floor; after the SET: its version"
    );
    assert_eq!(
        notified(&r.map, &first.events[0]),
        vec!["early"],
        "a registration read after a change it came after is not told of it"
    );
    let second = r.apply(set(b"k", b"2"));
    assert_eq!(notified(&r.map, &second.events[0]), vec!["early", "late"]);

    // Registering the pair again keeps the floor it had.
    r.apply(observe("late", b"k"));
    let late = read::observers_page(&r.map, b"k", Some("early"), 10).expect("page");
    assert_eq!(late[0].floor, Some(v1));

    // A row without a floor (written by format 6) is told of every change.
    r.map.insert(layout::observer_key(b"k", "old"), Vec::new());
    assert_eq!(
        notified(&r.map, &second.events[0]),
        vec!["early", "late", "old"]
    );
}

#[test]
fn section_7_the_floor_orders_registrations_and_changes_of_one_transaction() {
    let mut a = Replica::new();
    let mut b = Replica::new();
    let batch: Vec<Proposal> = [
        set(b"k", b"1"),
        observe("c1", b"k"),
        set(b"k", b"2"),
        observe("c2", b"k"),
        del(b"k", None),
    ]
    .into_iter()
    .map(|m| a.proposal(m, None))
    .collect();
    b.counter = a.counter;
    let applied = assert_batch_equals_singles(&mut a, &mut b, &batch);
    let events: Vec<&KeyEvent> = applied.iter().flat_map(|a| &a.events).collect();
    assert_eq!(events.len(), 2, "the first SET had no observer yet");
    assert_eq!(notified(&a.map, events[0]), vec!["c1"]);
    assert_eq!(notified(&a.map, events[1]), vec!["c1", "c2"]);
}

#[test]
fn section_8_sweep_removes_only_keys_still_due_and_notifies_delete() {
    let mut r = Replica::new();
    r.apply(observe("c1", b"short"));
    r.apply(set_with(
        b"short",
        b"1",
        SetCondition::Always,
        Some(100),
        None,
    ));
    r.apply(set_with(
        b"renewed",
        b"1",
        SetCondition::Always,
        Some(100),
        None,
    ));
    r.wall_ms += 100;
    let due = read::due_keys(&r.map, r.wall_ms, 10).expect("due");
    assert_eq!(due, vec![b"renewed".to_vec(), b"short".to_vec()]);
    r.apply(set_with(
        b"renewed",
        b"1",
        SetCondition::Always,
        Some(10_000),
        None,
    )); // renewed after the scan
    let keys = due.into_iter().map(serde_bytes::ByteBuf::from).collect();
    let applied = r.apply(Mutation::Expire { keys });
    assert_eq!(applied.outcome, Outcome::Expired { keys: 1 });
    assert_eq!(applied.events.len(), 1);
    assert_eq!(applied.events[0].change, Change::Delete);
    assert!(r.get(b"renewed").is_some());
    assert_eq!(r.meta().keys, 1);
}

#[test]
fn section_8_write_over_an_expired_unswept_key_notifies_delete_then_set() {
    let mut r = Replica::new();
    r.apply(observe("c1", b"k"));
    r.apply(set_with(b"k", b"1", SetCondition::Always, Some(10), None));
    r.wall_ms += 10;
    let applied = r.apply(set(b"k", b"2"));
    let changes: Vec<&Change> = applied.events.iter().map(|e| &e.change).collect();
    assert_eq!(changes, vec![&Change::Delete, &Change::Set(b"2".to_vec())]);
    assert!(applied.events[0].version < applied.events[1].version);
    assert_eq!(r.meta().keys, 1);
}

#[test]
fn section_8_apply_time_never_goes_back() {
    let mut r = Replica::new();
    r.apply(set_with(b"k", b"1", SetCondition::Always, Some(100), None));
    r.wall_ms += 200;
    r.apply(set(b"tick", b""));
    r.wall_ms -= 1_000; // a leader whose clock is behind
    assert!(
        r.get(b"k").is_none(),
        "once expired for the store, expired for every later reader"
    );
    assert_eq!(r.apply(del(b"k", None)).outcome, Outcome::Missing);
}

#[test]
fn section_9_key_byte_and_registration_quotas() {
    let mut r = Replica::new();
    r.apply(Mutation::SetLimits(Limits {
        max_keys: 2,
        max_bytes: 20,
        max_registrations_per_client: 2,
        ..Limits::default()
    }));
    r.apply(set(b"a", b"1"));
    r.apply(set(b"b", b"1"));
    assert_eq!(
        r.apply(set(b"c", b"1")).outcome,
        Outcome::Rejected(Rejection::QuotaExceeded),
        "key count"
    );
    assert!(
        matches!(r.apply(set(b"a", b"2")).outcome, Outcome::Stored { .. }),
        "overwrites do not add keys"
    );
    assert_eq!(
        r.apply(set(b"a", &[0u8; 30])).outcome,
        Outcome::Rejected(Rejection::QuotaExceeded),
        "bytes"
    );
    assert!(
        matches!(
            r.apply(set(b"a", &[0u8; 17])).outcome,
            Outcome::Stored { .. }
        ),
        "exactly at the byte limit"
    );
    r.apply(observe("c", b"x"));
    r.apply(observe("c", b"y"));
    assert_eq!(
        r.apply(observe("c", b"z")).outcome,
        Outcome::Rejected(Rejection::QuotaExceeded),
        "registrations"
    );
    assert_eq!(
        r.apply(observe("c", b"x")).outcome,
        Outcome::Observing,
        "re-registering is not a new registration"
    );
    assert_eq!(
        r.apply(observe("d", b"z")).outcome,
        Outcome::Observing,
        "the quota is per client"
    );
}

// ---------------------------------------------------------------------------------------------
// Many proposals in one transaction (the consensus layer applies up to 1,024 per log entry,
// and several entries per transaction): same result as one transaction per proposal, and
// work per proposal that does not grow with the batch.
// ---------------------------------------------------------------------------------------------

/// Counts what a base map is asked for: entries yielded by range scans, and scans per table
/// (also used by the device-bound tests).
pub(crate) struct Counting<'m> {
    map: &'m BTreeMap<Vec<u8>, Vec<u8>>,
    yielded: std::cell::Cell<usize>,
    scans: std::cell::RefCell<BTreeMap<u8, usize>>,
    gets: std::cell::RefCell<BTreeMap<u8, usize>>,
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

    fn scans_of(&self, table: layout::Table) -> usize {
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
    fn apply_batch(&mut self, proposals: &[Proposal]) -> Vec<Applied> {
        let mut txn = Overlay::new(&self.map);
        let mut keyspace = Keyspace::open(&mut txn).expect("open");
        let applied = proposals
            .iter()
            .map(|p| keyspace.apply(p).expect("apply"))
            .collect();
        keyspace.finish();
        let writes = txn.into_writes();
        commit(&mut self.map, writes);
        applied
    }

    /// A request proposal from client `c` with correlation `n`.
    fn request(&mut self, mutation: Mutation, n: u32, remember_for_ms: u64) -> Proposal {
        let request = RequestId {
            client: b"c".to_vec(),
            correlation: n.to_be_bytes().to_vec(),
            remember_for_ms,
            digest: 0,
        };
        self.proposal(mutation, Some(request))
    }

    fn replies(&self) -> usize {
        read::count_prefix(&self.map, &[layout::Table::Replies.prefix()], usize::MAX)
            .expect("count")
    }
}

fn commit(map: &mut BTreeMap<Vec<u8>, Vec<u8>>, writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>) {
    for (k, w) in writes {
        match w {
            Some(v) => map.insert(k, v),
            None => map.remove(&k),
        };
    }
}

/// Applies `proposals` to `batched` in one transaction and to `single` one transaction each;
/// both must give the same outcomes and events and end in the same state.
fn assert_batch_equals_singles(
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
fn replicas_with_replies(n: u32, first: u64) -> (Replica, Replica) {
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
    let (start, end) = layout::Table::ReplyExpiry.bounds();
    let (first_left, _) = a
        .map
        .range::<[u8], _>((
            std::ops::Bound::Included(&start[..]),
            std::ops::Bound::Excluded(&end[..]),
        ))
        .next()
        .expect("an entry");
    let (at, _) = layout::split_reply_expiry_key(first_left).expect("index key");
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
    let mut keyspace = Keyspace::open(&mut txn).expect("open");
    for proposal in &batch {
        keyspace.apply(proposal).expect("apply");
    }
    keyspace.finish();
    let pruned = 200 * REPLIES_PRUNED_PER_ENTRY;
    // A scan from the start of the index would walk past everything earlier proposals
    // removed: about 200 * 199 / 2 * 32 = 636,800 entries.
    assert!(
        base.yielded.get() <= pruned + 2 * 200,
        "{} base entries read to prune {pruned}",
        base.yielded.get()
    );
    assert_eq!(base.scans_of(layout::Table::ReplyExpiry), 200);
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
    let mut keyspace = Keyspace::open(&mut txn).expect("open");
    for proposal in &batch {
        keyspace.apply(proposal).expect("apply");
    }
    assert_eq!(
        base.scans_of(layout::Table::ReplyExpiry),
        1,
        "one scan finds nothing due; later proposals of the same ms skip it"
    );
}

#[test]
fn section_7_apply_never_scans_registrations_and_reads_a_count_only_when_there_are_some() {
    let mut r = Replica::new();
    let batch: Vec<Proposal> = (0..100u32)
        .map(|i| r.proposal(set(&i.to_be_bytes(), b"v"), None))
        .collect();
    let base = Counting::new(&r.map);
    let mut txn = Overlay::new(&base);
    let mut keyspace = Keyspace::open(&mut txn).expect("open");
    for proposal in &batch {
        assert!(keyspace.apply(proposal).expect("apply").events.is_empty());
    }
    let counts = layout::Table::ObserverCounts.prefix();
    assert_eq!(base.scans_of(layout::Table::ObserversByKey), 0);
    assert_eq!(
        base.gets_with_prefix(counts),
        0,
        "no registration: nothing read"
    );
    drop(keyspace);

    for i in 0..50 {
        r.apply(observe(&format!("c{i}"), b"observed"));
    }
    let mut batch: Vec<Proposal> = (0..100u32)
        .map(|i| r.proposal(set(&i.to_be_bytes(), b"w"), None))
        .collect();
    batch.push(r.proposal(set(b"observed", b"w"), None));
    let base = Counting::new(&r.map);
    let mut txn = Overlay::new(&base);
    let mut keyspace = Keyspace::open(&mut txn).expect("open");
    let events: usize = batch
        .iter()
        .map(|p| keyspace.apply(p).expect("apply").events.len())
        .sum();
    assert_eq!(events, 1);
    assert_eq!(
        base.scans_of(layout::Table::ObserversByKey),
        0,
        "50 observers of one key are never listed by apply"
    );
    assert_eq!(
        base.gets_with_prefix(counts),
        101,
        "one count read per change"
    );
}

#[test]
fn section_7_observer_fast_path_gives_the_events_of_the_slow_path() {
    let mut a = Replica::new();
    let mut b = Replica::new();
    let stop = |client: &str, key: &[u8]| Mutation::Unobserve {
        client: client.into(),
        key: key.to_vec(),
    };
    let steps = vec![
        set(b"k", b"1"),     // no registrations yet: fast path
        observe("c1", b"k"), // first registration inside the transaction
        set(b"k", b"2"),     // must be notified
        set(b"other", b"2"), // registrations exist, none on this key
        observe("c2", b"k"),
        del(b"k", None), // DELETE to both
        stop("c1", b"k"),
        stop("c2", b"k"), // the table is empty again
        set(b"k", b"3"),  // no event
        observe("c1", b"other"),
        set_with(b"other", b"4", SetCondition::Always, Some(5), None),
        Mutation::ForgetClient {
            client: "c1".into(),
        },
        set(b"other", b"5"),
    ];
    let batch: Vec<Proposal> = steps.into_iter().map(|m| a.proposal(m, None)).collect();
    b.counter = a.counter;
    let applied = assert_batch_equals_singles(&mut a, &mut b, &batch);
    let notified: Vec<usize> = applied
        .iter()
        .enumerate()
        .filter(|(_, a)| !a.events.is_empty())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(notified, vec![2, 5, 10]);
}

// ---------------------------------------------------------------------------------------------
// Caps on the tables clients make grow: registrations store-wide, the reply memory by count and
// by bytes (see the `apply` module docs). The counters in the meta must always equal a recount.
// ---------------------------------------------------------------------------------------------

/// What the counters of the meta should say, counted from the tables themselves.
#[derive(Debug, Default, PartialEq, Eq)]
struct Recount {
    registrations: u64,
    remembered_replies: u64,
    remembered_reply_bytes: u64,
}

fn table_rows(map: &BTreeMap<Vec<u8>, Vec<u8>>, table: layout::Table) -> Vec<(&[u8], &[u8])> {
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
/// counted size).
fn recount(map: &BTreeMap<Vec<u8>, Vec<u8>>) -> Recount {
    let registrations = table_rows(map, layout::Table::ObserversByKey);
    let by_key = registrations.len();
    let by_client = table_rows(map, layout::Table::ObservedByClient).len();
    assert_eq!(by_key, by_client, "both registration tables hold each pair");
    let mut per_key: BTreeMap<&[u8], u64> = BTreeMap::new();
    for (row, _) in &registrations {
        // row: table byte, u32 key length, key, client
        let len = u32::from_be_bytes(row[1..5].try_into().expect("len")) as usize;
        *per_key.entry(&row[5..5 + len]).or_default() += 1;
    }
    let counted: BTreeMap<&[u8], u64> = table_rows(map, layout::Table::ObserverCounts)
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
    let replies = table_rows(map, layout::Table::Replies);
    let index = table_rows(map, layout::Table::ReplyExpiry);
    assert_eq!(replies.len(), index.len(), "one index entry per reply");
    let mut bytes = 0;
    for (index_key, value) in index {
        let (at, reply_key) = layout::split_reply_expiry_key(index_key).expect("index key");
        let reply = map.get(reply_key).expect("an indexed reply exists");
        let decoded: RememberedReply =
            crate::codec::decode("remembered reply", reply).expect("decodes");
        assert_eq!(decoded.expires_at_ms, at, "indexed under its own expiry");
        let size = (reply_key.len() + reply.len()) as u64;
        assert_eq!(
            layout::parse_reply_size_value(value),
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
    fn assert_counters_exact(&self) {
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

    fn set_limits(&mut self, limits: Limits) {
        assert_eq!(
            self.apply(Mutation::SetLimits(limits)).outcome,
            Outcome::LimitsSet
        );
    }

    /// Index entries of the reply memory, earliest expiry first: (expiry, correlation).
    fn remembered(&self) -> Vec<(u64, Vec<u8>)> {
        table_rows(&self.map, layout::Table::ReplyExpiry)
            .into_iter()
            .map(|(index_key, _)| {
                let (at, reply_key) = layout::split_reply_expiry_key(index_key).expect("key");
                // reply key: table byte, u32 client length, client, correlation
                let client_len = u32::from_be_bytes(reply_key[1..5].try_into().expect("len"));
                (at, reply_key[5 + client_len as usize..].to_vec())
            })
            .collect()
    }
}

fn unobserve(client: &str, key: &[u8]) -> Mutation {
    Mutation::Unobserve {
        client: client.to_owned(),
        key: key.to_vec(),
    }
}

fn forget(client: &str) -> Mutation {
    Mutation::ForgetClient {
        client: client.to_owned(),
    }
}

#[test]
fn section_9_the_registration_cap_counts_every_client_together() {
    let mut r = Replica::new();
    r.set_limits(Limits {
        max_registrations: 3,
        ..Limits::default()
    });
    let quota = Outcome::Rejected(Rejection::QuotaExceeded);
    assert_eq!(r.apply(observe("c1", b"a")).outcome, Outcome::Observing);
    assert_eq!(r.apply(observe("c1", b"b")).outcome, Outcome::Observing);
    assert_eq!(r.apply(observe("c2", b"a")).outcome, Outcome::Observing);
    assert_eq!(r.meta().registrations, 3);
    assert_eq!(
        r.apply(observe("c2", b"b")).outcome,
        quota,
        "a second client, far below its own cap, is refused by the store-wide cap"
    );
    assert_eq!(r.apply(observe("c3", b"z")).outcome, quota, "any client");
    assert_eq!(
        r.apply(observe("c1", b"a")).outcome,
        Outcome::Observing,
        "registering a pair again is not a new registration"
    );
    assert_eq!(
        r.apply(unobserve("c2", b"b")).outcome,
        Outcome::NotObserving
    );
    assert_eq!(r.meta().registrations, 3, "STOP of nothing frees nothing");
    r.assert_counters_exact();

    // STOP frees room.
    assert_eq!(
        r.apply(unobserve("c1", b"a")).outcome,
        Outcome::StoppedObserving
    );
    assert_eq!(r.meta().registrations, 2);
    assert_eq!(r.apply(observe("c2", b"b")).outcome, Outcome::Observing);
    assert_eq!(r.apply(observe("c3", b"z")).outcome, quota);
    r.assert_counters_exact();

    // A departed client frees all of its registrations.
    assert_eq!(
        r.apply(forget("nobody")).outcome,
        Outcome::ForgotClient { registrations: 0 }
    );
    assert_eq!(r.meta().registrations, 3);
    assert_eq!(
        r.apply(forget("c2")).outcome,
        Outcome::ForgotClient { registrations: 2 }
    );
    assert_eq!(r.meta().registrations, 1, "exact after forget");
    r.assert_counters_exact();
    assert_eq!(r.apply(observe("c3", b"z")).outcome, Outcome::Observing);
    assert_eq!(r.apply(observe("c3", b"y")).outcome, Outcome::Observing);
    assert_eq!(r.apply(observe("c3", b"x")).outcome, quota);
    assert_eq!(r.meta().registrations, 3);
    r.assert_counters_exact();

    // The per-client cap still holds on its own.
    r.set_limits(Limits {
        max_registrations_per_client: 1,
        max_registrations: 100,
        ..Limits::default()
    });
    assert_eq!(r.apply(observe("c4", b"a")).outcome, Outcome::Observing);
    assert_eq!(r.apply(observe("c4", b"b")).outcome, quota);
    r.assert_counters_exact();
}

#[test]
fn section_9_the_observer_cap_per_key_bounds_the_fan_out() {
    let mut r = Replica::new();
    r.set_limits(Limits {
        max_observers_per_key: 3,
        ..Limits::default()
    });
    let quota = Outcome::Rejected(Rejection::QuotaExceeded);
    for client in ["c1", "c2", "c3"] {
        assert_eq!(r.apply(observe(client, b"k")).outcome, Outcome::Observing);
    }
    assert_eq!(
        r.apply(observe("c4", b"k")).outcome,
        quota,
        "the cap-th registration is accepted, the next refused"
    );
    assert_eq!(r.meta().observer_cap_refusals, 1);
    assert_eq!(r.meta().registrations, 3, "nothing stored for the refusal");
    assert_eq!(
        r.apply(observe("c1", b"k")).outcome,
        Outcome::Observing,
        "registering a pair again is not a new registration"
    );
    assert_eq!(
        r.apply(observe("c4", b"other")).outcome,
        Outcome::Observing,
        "the cap is per key"
    );
    assert_eq!(r.meta().observer_cap_refusals, 1);
    r.assert_counters_exact();

    // STOP frees room on the key, and so does a client's departure.
    r.apply(unobserve("c2", b"k"));
    assert_eq!(r.apply(observe("c4", b"k")).outcome, Outcome::Observing);
    assert_eq!(r.apply(observe("c5", b"k")).outcome, quota);
    r.apply(forget("c4"));
    assert_eq!(r.apply(observe("c5", b"k")).outcome, Outcome::Observing);
    assert_eq!(r.meta().observer_cap_refusals, 2);
    let applied = r.apply(set(b"k", b"v"));
    assert_eq!(notified(&r.map, &applied.events[0]), vec!["c1", "c3", "c5"]);
    r.assert_counters_exact();
}

/// A SET NX of its own key from request `n` of client `c`, remembered for `remember_for_ms`.
fn nx_request(r: &mut Replica, n: u32, remember_for_ms: u64) -> Proposal {
    let key = format!("key-{n}");
    r.request(
        set_with(key.as_bytes(), b"v", SetCondition::IfAbsent, None, None),
        n,
        remember_for_ms,
    )
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
    let mut keyspace = Keyspace::open(&mut txn).expect("open");
    for proposal in &batch {
        keyspace.apply(proposal).expect("apply");
    }
    let meta = keyspace.finish();
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
