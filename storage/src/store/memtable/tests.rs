//! Unit tests of the write-back memtable.

use super::*;
use proptest::prelude::*;

/// Writes from `(key, value)` pairs (`None`: a removal).
pub(crate) fn writes(pairs: &[(&str, Option<&str>)]) -> TxnWrites {
    pairs
        .iter()
        .map(|(k, v)| {
            let write = match v {
                Some(v) => TxnWrite::Put(v.as_bytes().to_vec()),
                None => TxnWrite::Remove,
            };
            (k.as_bytes().to_vec(), write)
        })
        .collect()
}

/// A memtable that never freezes or stalls on its own.
fn unbounded() -> Memtable {
    Memtable::new(
        MemtableConfig {
            flush_bytes: usize::MAX,
            flush_resident_bytes: usize::MAX,
            flush_interval: Duration::from_secs(3600),
            max_bytes: usize::MAX,
            max_preimage_bytes: usize::MAX,
        },
        ResidentState::default(),
    )
}

fn found(lookup: Lookup) -> Option<Option<Vec<u8>>> {
    match lookup {
        Lookup::Found(value) => Some(value),
        Lookup::Absent => None,
    }
}

fn created(key: &str, value: &str) -> TxnWrites {
    TxnWrites::from([(
        key.as_bytes().to_vec(),
        TxnWrite::Create(value.as_bytes().to_vec()),
    )])
}

#[test]
fn a_created_row_removed_before_its_map_freezes_leaves_nothing() {
    let table = unbounded();
    table.commit(writes(&[("k", Some("v"))]));
    let before = table.bytes();
    table.commit(created("short", "lived"));
    table.commit(writes(&[("short", Some("overwritten"))]));
    assert!(table.bytes() > before);
    table.commit(writes(&[("short", None)]));
    assert!(
        found(table.get(b"short")).is_none(),
        "no tombstone: the key was never below the active map"
    );
    assert_eq!(table.bytes(), before, "its bytes are given back");
    assert_eq!(
        table.range(b"a", b"z"),
        vec![(b"k".to_vec(), Some(b"v".to_vec()))]
    );
}

#[test]
fn rows_that_may_be_below_the_active_map_are_removed_with_a_tombstone() {
    let table = unbounded();
    // Created, then frozen before the removal: the frozen map holds it.
    table.commit(created("frozen", "1"));
    table.flush_now();
    table.commit(writes(&[("frozen", None)]));
    assert_eq!(found(table.get(b"frozen")), Some(None));
    // Removed (a tombstone over an older value), then created again and removed: the
    // older value must not come back.
    table.commit(writes(&[("frozen", Some("2"))]));
    table.commit(writes(&[("frozen", None)]));
    table.commit(created("frozen", "3"));
    table.commit(writes(&[("frozen", None)]));
    assert_eq!(found(table.get(b"frozen")), Some(None));
    // A plain put is not known to be new, even in an empty map.
    table.commit(writes(&[("plain", Some("1"))]));
    table.commit(writes(&[("plain", None)]));
    assert_eq!(found(table.get(b"plain")), Some(None));
}

#[test]
fn newest_write_wins_across_layers_and_removals_are_remembered() {
    let table = Memtable::new(
        MemtableConfig {
            flush_bytes: 1,
            flush_interval: Duration::from_secs(3600),
            max_bytes: 1 << 20,
            ..MemtableConfig::default()
        },
        ResidentState::default(),
    );
    table.commit(writes(&[("a", Some("1")), ("b", Some("2"))]));
    // flush_bytes 1: that commit froze the layer; the next goes to a fresh active map
    table.commit(writes(&[("a", Some("one")), ("b", None)]));
    assert_eq!(found(table.get(b"a")), Some(Some(b"one".to_vec())));
    assert_eq!(
        found(table.get(b"b")),
        Some(None),
        "a removal hides the older write"
    );
    assert!(found(table.get(b"c")).is_none(), "unknown keys go to fjall");
    assert_eq!(
        table.range(b"a", b"z"),
        vec![
            (b"a".to_vec(), Some(b"one".to_vec())),
            (b"b".to_vec(), None)
        ]
    );
    let frozen = table.next_to_write().expect("a frozen layer");
    assert_eq!(frozen.writes.get(&b"a"[..]), Some(&Some(b"1".to_vec())));
    table.written();
    assert_eq!(found(table.get(b"a")), Some(Some(b"one".to_vec())));
}

#[test]
fn overwrites_do_not_grow_the_accounted_bytes() {
    let table = unbounded();
    table.commit(writes(&[("k", Some("0123456789"))]));
    let once = table.bytes();
    for _ in 0..100 {
        table.commit(writes(&[("k", Some("0123456789"))]));
    }
    assert_eq!(table.bytes(), once);
    table.commit(writes(&[("k", None)]));
    assert_eq!(table.bytes(), once - 10);
}

#[test]
fn a_writer_waits_for_room_until_flushes_free_it() {
    let table = Arc::new(Memtable::new(
        MemtableConfig {
            flush_bytes: 100,
            flush_interval: Duration::from_secs(3600),
            max_bytes: 300,
            ..MemtableConfig::default()
        },
        ResidentState::default(),
    ));
    table.commit(writes(&[("first", Some(&"x".repeat(150)))])); // frozen at once
    table.commit(writes(&[("second", Some(&"y".repeat(250)))])); // frozen too: over max
    assert!(table.is_full());
    let writer = {
        let table = table.clone();
        std::thread::spawn(move || table.commit(writes(&[("third", Some("z"))])))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while table.waiting() == 0 {
        assert!(Instant::now() < deadline, "the writer never waited");
        std::thread::yield_now();
    }
    let oldest = table.next_to_write().expect("frozen");
    assert!(
        oldest.writes.contains_key(&b"first"[..]),
        "oldest map first"
    );
    table.written();
    // still over max with the second map pending: the writer keeps waiting
    assert_eq!(table.waiting(), 1);
    assert!(found(table.get(b"third")).is_none(), "not committed yet");
    let next = table.next_to_write().expect("frozen");
    assert!(next.writes.contains_key(&b"second"[..]));
    table.written();
    writer.join().expect("writer");
    assert_eq!(found(table.get(b"third")), Some(Some(b"z".to_vec())));
    assert_eq!(table.stalls(), 1);
}

#[test]
fn an_export_sees_its_start_and_newer_maps_still_reach_fjall() {
    let table = unbounded();
    table.commit(writes(&[("a", Some("1"))]));
    let export = table.begin_export();
    assert_eq!(export.layers.len(), 1);
    assert_eq!(
        merge_range(export.layers.iter().map(|m| m.as_ref()), b"a", b"z"),
        vec![(b"a".to_vec(), Some(b"1".to_vec()))]
    );
    // apply goes on during the export
    table.commit(writes(&[("a", Some("2")), ("b", Some("3"))]));
    table.flush_now();
    assert_eq!(found(table.get(b"a")), Some(Some(b"2".to_vec())));
    assert_eq!(table.writable(), 2, "the newer map may reach fjall too");
    let exported = table.next_to_write().expect("the exported map");
    assert_eq!(exported.writes.get(&b"a"[..]), Some(&Some(b"1".to_vec())));
    table.written();
    let newer = table.next_to_write().expect("the newer map");
    assert!(
        newer.seq > exported.seq,
        "numbered after the export's view: its rows keep pre-images"
    );
    assert_eq!(newer.writes.get(&b"b"[..]), Some(&Some(b"3".to_vec())));
    table.written();
    table.end_export();
    assert_eq!(table.writable(), 0);
}

#[test]
fn writers_wait_at_the_same_limit_during_an_export() {
    let table = Memtable::new(
        MemtableConfig {
            flush_bytes: 100,
            flush_interval: Duration::from_secs(3600),
            max_bytes: 300,
            ..MemtableConfig::default()
        },
        ResidentState::default(),
    );
    table.commit(writes(&[("a", Some(&"x".repeat(400)))]));
    assert!(table.is_full(), "over max_bytes with a flush pending");
    let _export = table.begin_export();
    assert!(
        table.is_full(),
        "an export does not hold fjall back: no extra room"
    );
    table.next_to_write().expect("the full map");
    table.written();
    assert!(!table.is_full(), "written to fjall during the export");
}

/// Waiting for the end of an export: false at the deadline while one runs, true once it ended
/// (from another thread, during the wait), and at once when none runs.
#[test]
fn waiting_for_an_export_ends_with_it_or_at_the_deadline() {
    let memtable = Arc::new(unbounded());
    assert!(memtable.wait_export_ended(Duration::ZERO));
    let _export = memtable.begin_export();
    assert!(!memtable.wait_export_ended(Duration::from_millis(20)));
    let ender = {
        let memtable = memtable.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            memtable.end_export();
        })
    };
    assert!(memtable.wait_export_ended(Duration::from_secs(30)));
    ender.join().expect("join");
}

/// A write of a remembered reply (a resident table's row): `None` removes it.
fn reply(name: &str, value: Option<&str>) -> TxnWrites {
    let mut key = vec![crate::layout::Table::Replies.prefix()];
    key.extend_from_slice(name.as_bytes());
    let write = match value {
        Some(v) => TxnWrite::Put(v.as_bytes().to_vec()),
        None => TxnWrite::Remove,
    };
    TxnWrites::from([(key, write)])
}

/// The reply memory's changes are accounted before their layer freezes (the versions of the
/// rows they replaced are held), each change counted, and a load that only changes them
/// freezes a layer at `flush_resident_bytes`, however small the map.
#[test]
fn resident_changes_count_as_memory_and_freeze_the_layer_at_their_own_size() {
    let table = Memtable::new(
        MemtableConfig {
            flush_bytes: usize::MAX,
            flush_resident_bytes: 1_000,
            flush_interval: Duration::from_secs(3600),
            max_bytes: usize::MAX,
            max_preimage_bytes: usize::MAX,
        },
        ResidentState::default(),
    );
    table.commit(reply("first", Some("ok")));
    let one = table.bytes();
    assert!(one > 0, "one changed row is held while the map is empty");
    table.commit(reply("first", Some("no")));
    assert_eq!(
        table.bytes(),
        2 * one,
        "each change counts (which rows changed is found when the layer is written)"
    );
    let mut commits = 1;
    while table.writable() == 0 {
        commits += 1;
        assert!(commits < 1_000, "never froze on resident changes");
        table.commit(reply(&format!("r{commits:04}"), Some("ok")));
    }
    assert!(
        commits > 1,
        "not frozen before the estimate reached the threshold"
    );
    let frozen = table.next_to_write().expect("a frozen layer");
    let entry = frozen.entry.clone().expect("it carries the changes");
    assert!(
        entry.held_bytes >= 1_000,
        "frozen at the threshold, not before"
    );
    assert_eq!(
        table.bytes(),
        entry.held_bytes,
        "held now by the frozen layer (its map holds no write)"
    );
    table.written();
    assert_eq!(table.bytes(), 0, "written: nothing left in memory");
}

/// Apply waits for room once the frozen layers and the resident tables' pending changes
/// together reach `max_bytes`: changes of the reply memory alone can fill it.
#[test]
fn resident_changes_fill_the_room_a_writer_waits_for() {
    let table = Memtable::new(
        MemtableConfig {
            flush_bytes: 100,
            flush_resident_bytes: usize::MAX,
            flush_interval: Duration::from_secs(3600),
            max_bytes: 2_000,
            max_preimage_bytes: usize::MAX,
        },
        ResidentState::default(),
    );
    table.commit(writes(&[("a", Some(&"x".repeat(200)))]));
    assert_eq!(table.writable(), 1, "the map froze at flush_bytes");
    assert!(!table.is_full());
    let mut commits = 0;
    while !table.is_full() {
        commits += 1;
        assert!(commits < 1_000, "resident changes never filled the room");
        table.commit(reply(&format!("r{commits:04}"), Some("ok")));
    }
    assert!(table.bytes() >= 2_000);
    table.next_to_write().expect("the frozen map");
    table.written();
    assert!(
        !table.is_full(),
        "with no flush pending the writer never waits"
    );
}

/// One step of [`the_journal_entries_of_its_layers_replay_to_the_live_tables`].
#[derive(Debug, Clone)]
enum ResidentStep {
    /// One transaction: `(reply number, value length)` pairs set (`Some`) or removed (`None`),
    /// each with its expiry-index row (derived: not journaled).
    Commit(Vec<(u8, Option<u8>)>),
    /// The active map freezes and the flush thread takes its layer.
    Freeze,
    /// The next layer's entry is a base.
    Rebase,
}

fn resident_step() -> impl Strategy<Value = ResidentStep> {
    let write = (0u8..16, proptest::option::of(0u8..40));
    prop_oneof![
        6 => proptest::collection::vec(write, 1..6).prop_map(ResidentStep::Commit),
        2 => Just(ResidentStep::Freeze),
        1 => Just(ResidentStep::Rebase),
    ]
}

/// The replies' key and an expiry-index key (a derived row) of reply `n`.
fn reply_and_index_keys(n: u8) -> (Vec<u8>, Vec<u8>) {
    let reply = vec![crate::layout::Table::Replies.prefix(), b'r', n];
    let index = vec![crate::layout::Table::ReplyExpiry.prefix(), b'i', n];
    (reply, index)
}

/// The journaled (not derived) resident rows of `table`.
fn journaled_rows(table: &Memtable) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let (start, end) = resident::bounds();
    table
        .resident_range(&start, &end, usize::MAX)
        .into_iter()
        .filter(|(key, _)| !resident::is_derived(key))
        .collect()
}

/// Takes every frozen layer as the flush thread does, replaying its journal entry.
fn replay_frozen(table: &Memtable, replayed: &mut ResidentTables) -> Result<(), TestCaseError> {
    while table.writable() > 0 {
        let layer = table.next_to_write().expect("a frozen layer");
        if let Some(entry) = &layer.entry {
            resident_journal::replay(replayed, &entry.encode())
                .map_err(|err| TestCaseError::fail(err.to_string()))?;
        }
        table.written();
    }
    Ok(())
}

proptest! {
    /// What apply commits to the reply memory reaches the journal: replaying the entries the
    /// memtable's layers carry (bases and deltas as the memtable chose them) gives the live
    /// replies after every freeze, removals included; derived index rows are never written.
    #[test]
    fn the_journal_entries_of_its_layers_replay_to_the_live_tables(
        steps in proptest::collection::vec(resident_step(), 1..80)
    ) {
        let table = unbounded();
        let mut replayed = ResidentTables::default();
        for step in steps {
            match step {
                ResidentStep::Commit(changes) => {
                    let mut txn = TxnWrites::new();
                    for (n, value) in changes {
                        let (reply, index) = reply_and_index_keys(n);
                        let (reply_write, index_write) = match value {
                            Some(len) => (
                                TxnWrite::Put(vec![n; usize::from(len)]),
                                TxnWrite::Put(vec![len]),
                            ),
                            None => (TxnWrite::Remove, TxnWrite::Remove),
                        };
                        txn.insert(reply, reply_write);
                        txn.insert(index, index_write);
                    }
                    table.commit(txn);
                }
                ResidentStep::Freeze => {
                    table.flush_now();
                    replay_frozen(&table, &mut replayed)?;
                    let replayed_rows: BTreeMap<Vec<u8>, Vec<u8>> = replayed
                        .iter()
                        .map(|(k, v)| (k.to_vec(), v.to_vec()))
                        .collect();
                    prop_assert!(
                        replayed_rows.keys().all(|key| !resident::is_derived(key)),
                        "a derived row was journaled"
                    );
                    prop_assert_eq!(replayed_rows, journaled_rows(&table));
                }
                ResidentStep::Rebase => table.rebase_resident(),
            }
        }
    }
}
