//! Unit tests of the keyspace semantics, one per rule of the protocol, applied through the
//! machine on an in-memory map; then the cost rules of many proposals in one transaction (see
//! the `apply` module docs).

use crate::engine::Overlay;
use crate::keyspace::layout;
use crate::keyspace::{Change, KeyEvent, Limits, Rejection, SetCondition, read};
use crate::layout::Table;
use crate::machine::read as machine_read;
use crate::machine::tests::*;
use crate::machine::{Machine, Mutation, Outcome, Proposal, RequestId};
use statestore_vocab::hlc::Hlc;

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
        right + 1_000 + machine_read::MAX_FLOOR_LEAD_MS,
        "the floor is pulled back to the leader's clock plus the drift bound"
    );
    assert_eq!(r.get(b"k").expect("alive").value, b"v");
    // PX counts from the store time, which is at most the drift bound ahead.
    r.wall_ms = right + 1_000 + machine_read::MAX_FLOOR_LEAD_MS + 120_000;
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

#[test]
fn section_7_apply_never_scans_registrations_and_reads_a_count_only_when_there_are_some() {
    let mut r = Replica::new();
    let batch: Vec<Proposal> = (0..100u32)
        .map(|i| r.proposal(set(&i.to_be_bytes(), b"v"), None))
        .collect();
    let base = Counting::new(&r.map);
    let mut txn = Overlay::new(&base);
    let mut machine = Machine::open(&mut txn).expect("open");
    for proposal in &batch {
        assert!(machine.apply(proposal).expect("apply").events.is_empty());
    }
    let counts = Table::ObserverCounts.prefix();
    assert_eq!(base.scans_of(Table::ObserversByKey), 0);
    assert_eq!(
        base.gets_with_prefix(counts),
        0,
        "no registration: nothing read"
    );
    drop(machine);

    for i in 0..50 {
        r.apply(observe(&format!("c{i}"), b"observed"));
    }
    let mut batch: Vec<Proposal> = (0..100u32)
        .map(|i| r.proposal(set(&i.to_be_bytes(), b"w"), None))
        .collect();
    batch.push(r.proposal(set(b"observed", b"w"), None));
    let base = Counting::new(&r.map);
    let mut txn = Overlay::new(&base);
    let mut machine = Machine::open(&mut txn).expect("open");
    let events: usize = batch
        .iter()
        .map(|p| machine.apply(p).expect("apply").events.len())
        .sum();
    assert_eq!(events, 1);
    assert_eq!(
        base.scans_of(Table::ObserversByKey),
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
