//! Unit and property tests of the resident-tables journal, with a list of entries standing in
//! for its log.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn row(i: u32) -> Vec<u8> {
    let mut key = b"r".to_vec();
    key.extend_from_slice(&i.to_be_bytes());
    key
}

/// What a restart rebuilds from `entries` (oldest first): the newest base and every entry
/// after it.
fn rebuild(entries: &[JournalEntry]) -> ResidentTables {
    let from = entries.iter().rposition(|e| e.base).expect("a base");
    let mut tables = ResidentTables::default();
    for entry in &entries[from..] {
        replay(&mut tables, entry).expect("replays");
    }
    tables
}

/// A row of the reply-expiry index (derived: never journaled).
fn index_row(i: u32) -> Vec<u8> {
    let mut key = vec![crate::layout::Table::ReplyExpiry.prefix()];
    key.extend_from_slice(&i.to_be_bytes());
    key
}

/// Tables of `rows` replies, each holding `value`.
fn tables_of(rows: u32, value: &[u8]) -> ResidentTables {
    let mut tables = ResidentTables::default();
    for i in 0..rows {
        tables.put(row(i), value.to_vec());
    }
    tables
}

fn keys_of(entry: &JournalEntry) -> Vec<Vec<u8>> {
    let rows: Rows = codec::decode("entry", &entry.rows).expect("rows");
    rows.into_iter().map(|(key, _)| key.into_vec()).collect()
}

/// The reply-expiry index is rebuilt at start, not journaled: neither a base nor a delta holds
/// its rows, and the index rows of a format 9 entry are skipped when it is replayed.
#[test]
fn entries_hold_no_derived_rows_and_replay_skips_those_of_older_entries() {
    let mut tables = ResidentTables::default();
    let mut journal = ResidentJournal::starting_at(0);
    tables.put(row(1), b"one".to_vec());
    tables.put(index_row(1), b"1".to_vec());
    let base = journal.layer_entry(&tables).expect("a base");
    assert!(base.base);
    assert_eq!(keys_of(&base), vec![row(1)]);
    tables.put(row(2), b"two".to_vec());
    journal.note(&row(2), Some(&b"two"[..]));
    tables.put(index_row(2), b"2".to_vec());
    journal.note(&index_row(2), Some(&b"2"[..]));
    tables.remove(&index_row(1));
    journal.note(&index_row(1), None);
    tables.remove(&row(1));
    journal.note(&row(1), None);
    let delta = journal.layer_entry(&tables).expect("a delta");
    assert!(!delta.base);
    assert_eq!(
        keys_of(&delta),
        vec![row(2), row(1)],
        "in the order they changed"
    );

    let rows = vec![
        (
            ByteBuf::from(index_row(9)),
            Some(ByteBuf::from(b"9".to_vec())),
        ),
        (ByteBuf::from(row(9)), Some(ByteBuf::from(b"nine".to_vec()))),
    ];
    let format_9 = JournalEntry {
        seq: 5,
        base: true,
        rows: codec::encode(&rows),
    };
    let mut replayed = ResidentTables::default();
    replay(&mut replayed, &format_9).expect("replays");
    let mut expected = ResidentTables::default();
    expected.put(row(9), b"nine".to_vec());
    assert_eq!(replayed, expected);
}

/// What a clean stop asks ([`ResidentJournal::rebase_next`]): a base after deltas; nothing
/// when the log already ends at a base of the same rows; nothing from an idle journal (a
/// snapshot install in progress writes its own base under the next number).
#[test]
fn a_rebase_is_written_only_after_deltas_and_never_by_an_idle_journal() {
    let mut tables = ResidentTables::default();
    let mut journal = ResidentJournal::starting_at(0);
    tables.put(row(1), b"one".to_vec());
    journal.note(&row(1), Some(&b"one"[..]));
    assert!(journal.layer_entry(&tables).expect("first").base);
    journal.rebase_next();
    assert_eq!(journal.layer_entry(&tables), None, "already at a base");

    tables.put(row(2), b"two".to_vec());
    journal.note(&row(2), Some(&b"two"[..]));
    assert!(!journal.layer_entry(&tables).expect("a delta").base);
    journal.rebase_next();
    let rebased = journal
        .layer_entry(&tables)
        .expect("a base after the delta");
    assert!(rebased.base);
    assert_eq!(rebuild(&[rebased]), tables);

    tables.put(row(3), b"three".to_vec());
    journal.note(&row(3), Some(&b"three"[..]));
    journal.rebase_next();
    assert!(
        journal.layer_entry(&tables).expect("changes wait").base,
        "changes since the base: the stop's layer is a base"
    );

    let mut idle = ResidentJournal::idle(9);
    idle.rebase_next();
    assert_eq!(
        idle.layer_entry(&tables),
        None,
        "an idle journal writes nothing"
    );
    assert_eq!(idle.next_seq(), 9);
}

#[test]
fn the_first_layer_writes_a_base_even_of_empty_tables() {
    let mut journal = ResidentJournal::starting_at(7);
    assert!(journal.has_changes());
    let entry = journal
        .layer_entry(&ResidentTables::default())
        .expect("an entry");
    assert!(entry.base);
    assert_eq!(entry.seq, 7);
    assert!(!journal.has_changes());
    assert_eq!(journal.layer_entry(&ResidentTables::default()), None);
}

#[test]
fn deltas_follow_a_base_and_replay_to_the_same_tables() {
    let mut tables = ResidentTables::default();
    let mut journal = ResidentJournal::starting_at(0);
    let mut entries = Vec::new();
    tables.put(row(1), b"one".to_vec());
    journal.note(&row(1), Some(&b"one"[..]));
    entries.extend(journal.layer_entry(&tables));
    tables.put(row(2), b"two".to_vec());
    journal.note(&row(2), Some(&b"two"[..]));
    tables.remove(&row(1));
    journal.note(&row(1), None);
    let delta = journal.layer_entry(&tables).expect("a delta");
    assert!(!delta.base);
    assert_eq!(delta.seq, 1);
    entries.push(delta);
    assert_eq!(rebuild(&entries), tables);
}

/// The flush thread encodes an entry after its layer froze, while apply goes on changing the
/// tables: the entry still holds the rows as they were when it was taken.
#[test]
fn a_taken_entry_encodes_the_rows_as_they_were_when_taken() {
    let mut tables = ResidentTables::default();
    let mut journal = ResidentJournal::starting_at(0);
    tables.put(row(1), b"one".to_vec());
    let base = journal.take_layer(&tables).expect("base");
    tables.put(row(1), b"uno".to_vec());
    journal.note(&row(1), Some(&b"uno"[..]));
    tables.put(row(2), b"two".to_vec());
    journal.note(&row(2), Some(&b"two"[..]));
    let delta = journal.take_layer(&tables).expect("delta");
    let as_taken = tables.clone();
    tables.put(row(1), b"later".to_vec());
    tables.remove(&row(2));
    tables.put(row(3), b"three".to_vec());
    let entries = [base.encode(), delta.encode()];
    assert!(entries[0].base && !entries[1].base);
    assert_eq!(rebuild(&entries), as_taken);
}

#[test]
fn a_delta_holds_only_the_rows_that_changed() {
    let mut tables = tables_of(1_000, &[1; 100]);
    let mut journal = ResidentJournal::starting_at(0);
    let base = journal.layer_entry(&tables).expect("base");
    tables.put(row(5), vec![2; 100]);
    journal.note(&row(5), Some(&vec![2; 100][..]));
    let delta = journal.layer_entry(&tables).expect("delta");
    assert!(
        delta.rows.len() * 100 < base.rows.len(),
        "{} vs {}",
        delta.rows.len(),
        base.rows.len()
    );
}

/// A delta holds the changes since the layer before (or a base) in the order they were made, a
/// row changed twice twice: replayed after the base, it leaves the tables as they are.
#[test]
fn a_delta_holds_the_changes_in_their_order_and_replays_to_the_tables() {
    let mut tables = ResidentTables::default();
    for i in [2, 3, 5] {
        tables.put(row(i), b"old".to_vec());
    }
    let mut journal = ResidentJournal::starting_at(0);
    let base = journal.base(&tables);
    let changes: [(u32, Option<&[u8]>); 7] = [
        (1, Some(b"new")),
        (2, Some(b"changed")),
        (3, None),
        (4, Some(b"brief")),
        (4, None),
        (5, Some(b"other")),
        (5, Some(b"old")),
    ];
    for (i, value) in changes {
        match value {
            Some(value) => tables.put(row(i), value.to_vec()),
            None => tables.remove(&row(i)),
        }
        journal.note(&row(i), value);
    }
    let delta = journal.layer_entry(&tables).expect("a delta");
    assert!(!delta.base);
    let rows: Rows = codec::decode("delta", &delta.rows).expect("decodes");
    let rows: Vec<(Vec<u8>, Option<Vec<u8>>)> = rows
        .into_iter()
        .map(|(key, value)| (key.into_vec(), value.map(ByteBuf::into_vec)))
        .collect();
    let expected: Vec<(Vec<u8>, Option<Vec<u8>>)> = changes
        .iter()
        .map(|(i, value)| (row(*i), value.map(<[u8]>::to_vec)))
        .collect();
    assert_eq!(rows, expected);
    assert_eq!(rebuild(&[base, delta]), tables);
    // The next delta starts from this layer's tables.
    tables.put(row(6), b"six".to_vec());
    journal.note(&row(6), Some(&b"six"[..]));
    let next = journal.layer_entry(&tables).expect("a delta");
    let rows: Rows = codec::decode("delta", &next.rows).expect("decodes");
    assert_eq!(rows.len(), 1);
}

/// The memtable accounts a pending entry at what it holds until written: the changed rows.
/// A base shares the tables with the live ones, so a layer with a base must not count the whole
/// reply memory against the memtable's room (it made apply wait for the flush of every base).
#[test]
fn a_pending_base_holds_its_changed_rows_not_the_whole_tables() {
    let mut tables = ResidentTables::default();
    let mut journal = ResidentJournal::starting_at(0);
    for i in 0..10_000 {
        tables.put(row(i), vec![1; 100]);
        journal.note(&row(i), Some(&vec![1; 100][..]));
    }
    let first = journal.take_layer(&tables).expect("the first base");
    assert!(first.is_base());
    assert!(first.held_bytes >= 10_000 * 100, "{}", first.held_bytes);
    // Churn until the journal rebases: 50 rows changed per layer.
    let mut rebased = None;
    for round in 0..10_000u32 {
        for i in 0..50 {
            let key = row((round * 50 + i) % 10_000);
            tables.put(key.clone(), vec![2; 100]);
            journal.note(&key, Some(&vec![2; 100][..]));
        }
        let entry = journal.take_layer(&tables).expect("an entry");
        if entry.is_base() {
            rebased = Some(entry);
            break;
        }
        assert!(entry.held_bytes < 50 * 200, "a delta: {}", entry.held_bytes);
    }
    let base = rebased.expect("the journal rebased");
    assert!(
        base.held_bytes < 50 * 200,
        "a base of 10,000 rows after 50 changes held {} bytes",
        base.held_bytes
    );
    assert!(base.encode().base);
}

#[test]
fn churn_rebases_and_keeps_the_written_bytes_bounded() {
    let mut tables = ResidentTables::default();
    let mut journal = ResidentJournal::starting_at(0);
    let mut entries: Vec<JournalEntry> = Vec::new();
    let mut bases = 0;
    for layer in 0..400u32 {
        // every layer replaces all 100 rows
        for i in 0..100 {
            tables.put(row(i), vec![(layer % 251) as u8; 200]);
            journal.note(&row(i), Some(&vec![(layer % 251) as u8; 200][..]));
        }
        let entry = journal.layer_entry(&tables).expect("changed");
        bases += usize::from(entry.base);
        entries.push(entry);
        let from = entries.iter().rposition(|e| e.base).expect("a base");
        let since_base: usize = entries[from..].iter().map(|e| e.rows.len()).sum();
        assert!(
            since_base <= REBASE_FACTOR * tables.bytes() + REBASE_SLACK,
            "layer {layer}: {since_base} bytes since the base"
        );
        assert_eq!(rebuild(&entries), tables, "layer {layer}");
    }
    assert!(bases > 1, "the journal was rebased");
}

#[test]
fn an_idle_journal_writes_nothing_until_replaced() {
    let mut journal = ResidentJournal::idle(3);
    assert!(!journal.has_changes());
    assert_eq!(journal.next_seq(), 3);
    assert_eq!(journal.layer_entry(&ResidentTables::default()), None);
}

#[test]
fn a_base_that_removes_a_row_is_refused() {
    let rows: Vec<(serde_bytes::ByteBuf, Option<serde_bytes::ByteBuf>)> =
        vec![(serde_bytes::ByteBuf::from(row(1)), None)];
    let entry = JournalEntry {
        seq: 0,
        base: true,
        rows: codec::encode(&rows),
    };
    assert!(matches!(
        replay(&mut ResidentTables::default(), &entry),
        Err(StorageError::Corrupt { .. })
    ));
    let damaged = JournalEntry {
        seq: 0,
        base: false,
        rows: vec![codec::FORMAT_VERSION, 0xff, 0xff],
    };
    assert!(replay(&mut ResidentTables::default(), &damaged).is_err());
}

#[test]
fn the_sequence_record_round_trips() {
    assert_eq!(decode_seq(&encode_seq(123_456)).expect("decodes"), 123_456);
    assert!(decode_seq(b"").is_err());
}

/// One step of a random history: set or remove a row, or freeze a layer (and maybe restart
/// from the entries written so far).
#[derive(Debug, Clone)]
enum Step {
    Put(u8, u16),
    Remove(u8),
    Layer { restart: bool },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (any::<u8>(), 0u16..3000).prop_map(|(k, n)| Step::Put(k, n)),
        2 => any::<u8>().prop_map(Step::Remove),
        1 => any::<bool>().prop_map(|restart| Step::Layer { restart }),
    ]
}

proptest! {
    /// After any history, the newest base and the entries after it rebuild the tables as of the
    /// last layer: a plain map of the same rows is the model.
    #[test]
    fn a_restart_rebuilds_the_tables_of_the_last_layer(steps in proptest::collection::vec(step(), 1..300)) {
        let mut tables = ResidentTables::default();
        let mut journal = ResidentJournal::starting_at(0);
        let mut entries: Vec<JournalEntry> = Vec::new();
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for step in steps {
            match step {
                Step::Put(k, n) => {
                    let key = row(u32::from(k));
                    let value = vec![k; usize::from(n)];
                    tables.put(key.clone(), value.clone());
                    journal.note(&key, Some(&value[..]));
                    model.insert(key, value);
                }
                Step::Remove(k) => {
                    let key = row(u32::from(k));
                    tables.remove(&key);
                    journal.note(&key, None);
                    model.remove(&key);
                }
                Step::Layer { restart } => {
                    entries.extend(journal.layer_entry(&tables));
                    if restart {
                        tables = rebuild(&entries);
                        let next = entries.last().map_or(0, |e| e.seq + 1);
                        journal = ResidentJournal::starting_at(next);
                        let rebuilt: BTreeMap<Vec<u8>, Vec<u8>> = tables.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
                        prop_assert_eq!(&rebuilt, &model, "a restart finds the last layer's tables");
                    }
                }
            }
        }
        entries.extend(journal.layer_entry(&tables));
        let rebuilt: BTreeMap<Vec<u8>, Vec<u8>> = rebuild(&entries).iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
        prop_assert_eq!(rebuilt, model);
        prop_assert!(entries.windows(2).all(|w| w[1].seq == w[0].seq + 1), "sequence numbers are consecutive");
    }
}

/// Replies that come and go within one layer leave the tables empty when it freezes, and a
/// delta of removals each time: those count too, so the journal still rebases (its log files
/// are pruned only behind a base).
#[test]
fn removals_into_empty_tables_still_lead_to_a_new_base() {
    let mut tables = ResidentTables::default();
    let mut journal = ResidentJournal::starting_at(0);
    journal.layer_entry(&tables).expect("the first base");
    let mut layers_to_base = None;
    for layer in 1..10_000u32 {
        for i in 0..100 {
            tables.put(row(layer * 100 + i), vec![1; 100]);
            journal.note(&row(layer * 100 + i), Some(&vec![1; 100][..]));
            tables.remove(&row(layer * 100 + i));
            journal.note(&row(layer * 100 + i), None);
        }
        let entry = journal.layer_entry(&tables).expect("removals");
        if entry.base {
            layers_to_base = Some(layer);
            break;
        }
    }
    let layers = layers_to_base.expect("a base within 10,000 layers") as usize;
    // Not before the keys and values noted (a put of 5 + 100 bytes, a removal of 5) come near
    // the slack: the framing counted beside them is less than their own bytes.
    let noted = layers * 100 * (5 + 100 + 5);
    assert!(
        2 * noted > REBASE_SLACK,
        "a base after {layers} layers, {noted} bytes noted"
    );
}

/// The reply memory's churn: each request adds a reply and its index row and removes an
/// expired pair. Only the replies are journaled, a removal as its key, so the deltas written
/// before the next base come near the factor's bound. (Counting every change at the tables'
/// mean row size, index rows and removals included, rebased here after 0.69 times the tables:
/// a base of the whole reply memory nearly every layer under load.)
#[test]
fn the_reply_memorys_churn_writes_deltas_up_to_the_bound_before_a_new_base() {
    const LIVE: u32 = 20_000;
    const PER_LAYER: u32 = 1_000;
    let reply = |i: u32| vec![(i % 251) as u8; 60];
    let mut tables = ResidentTables::default();
    let mut journal = ResidentJournal::starting_at(0);
    for i in 0..LIVE {
        tables.put(row(i), reply(i));
        tables.put(index_row(i), i.to_be_bytes().to_vec());
    }
    let mut since_base = journal
        .layer_entry(&tables)
        .expect("the first base")
        .rows
        .len();
    let mut next = LIVE;
    for layer in 1.. {
        assert!(layer < 1_000, "no new base after {layer} layers of churn");
        for _ in 0..PER_LAYER {
            let (new, old) = (next, next - LIVE);
            next += 1;
            tables.put(row(new), reply(new));
            journal.note(&row(new), Some(&reply(new)));
            tables.put(index_row(new), new.to_be_bytes().to_vec());
            journal.note(&index_row(new), Some(&new.to_be_bytes()));
            tables.remove(&row(old));
            journal.note(&row(old), None);
            tables.remove(&index_row(old));
            journal.note(&index_row(old), None);
        }
        let entry = journal.layer_entry(&tables).expect("changed");
        if entry.base {
            break;
        }
        since_base += entry.rows.len();
    }
    assert!(
        10 * since_base >= 12 * tables.bytes(),
        "a new base after {since_base} bytes written since the last, tables of {} bytes",
        tables.bytes()
    );
    assert!(since_base <= REBASE_FACTOR * tables.bytes() + REBASE_SLACK);
}

/// What the recorded changes hold is counted at least at their own bytes: large replies stored
/// and removed within a layer, among many small rows, hold far more than the tables' mean row
/// size says (the estimate alone counted these 20 changes at about 1,400 bytes).
#[test]
fn pending_bytes_count_at_least_the_recorded_changes_own_bytes() {
    let tables = tables_of(10_000, &[1; 8]);
    let mut journal = ResidentJournal::starting_at(0);
    journal.layer_entry(&tables).expect("the first base");
    let big = vec![7u8; 60_000];
    for i in 0..10 {
        journal.note(&row(100_000 + i), Some(&big[..]));
        journal.note(&row(100_000 + i), None);
    }
    let pending = journal.pending_bytes(&tables);
    assert!(
        pending >= 10 * big.len(),
        "{pending} bytes counted for 10 changes of {} bytes each",
        big.len()
    );
}
