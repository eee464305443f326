//! The snapshot trigger against its table (`trigger_cases.txt`), and the cost it bounds: the
//! bytes of all snapshots written while a state is loaded.

use super::SnapshotTrigger;

const TRIGGER: SnapshotTrigger = SnapshotTrigger {
    after_proposals: 200_000,
    after_entries: 50_000,
    state_percent: 25,
};

#[test]
fn the_trigger_follows_its_table() {
    let table = include_str!("trigger_cases.txt");
    let mut cases = 0;
    for line in table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let number = |i: usize| -> u64 { fields[i].parse().expect("a number") };
        let trigger = SnapshotTrigger {
            state_percent: number(4),
            ..TRIGGER
        };
        let expected = match fields[5] {
            "yes" => true,
            "no" => false,
            other => panic!("due must be yes or no, not {other}"),
        };
        let state_bytes = number(3);
        let due = trigger.due(number(0), number(1), number(2), || state_bytes);
        assert_eq!(due, expected, "case: {line}");
        cases += 1;
    }
    assert_eq!(cases, 12, "every line of the table ran");
}

#[test]
fn the_state_is_not_read_before_the_counts_are_reached() {
    let due = TRIGGER.due(10, 10, u64::MAX, || panic!("read the state"));
    assert!(!due);
}

/// Loads `keys` keys of `row_bytes` one proposal of `row_bytes` log bytes at a time, a snapshot
/// of the whole state whenever `trigger` says so; returns (snapshots, rows written by them).
fn load(trigger: SnapshotTrigger, keys: u64, row_bytes: u64) -> (u64, u64) {
    let (mut snapshots, mut rows_written) = (0, 0);
    let (mut proposals, mut log_bytes) = (0, 0);
    for key in 1..=keys {
        proposals += 1;
        log_bytes += row_bytes;
        if trigger.due(proposals, proposals / 1_000, log_bytes, || key * row_bytes) {
            snapshots += 1;
            rows_written += key;
            proposals = 0;
            log_bytes = 0;
        }
    }
    (snapshots, rows_written)
}

#[test]
fn snapshots_of_a_growing_state_cost_a_few_times_the_state() {
    let keys = 10_000_000;
    let counts_alone = load(
        SnapshotTrigger {
            state_percent: 0,
            ..TRIGGER
        },
        keys,
        100,
    );
    // A snapshot every 200,000 writes: 50 of them, 255 million rows in all (25.5 times the
    // final state).
    assert_eq!(counts_alone, (50, 255_000_000));
    let (snapshots, rows) = load(TRIGGER, keys, 100);
    // Geometric growth (by 1.25 each time once 25 % of the state exceeds 200,000 writes): at
    // most (1 + 1/0.25) = 5 times the final state, plus the early fixed-count ones.
    assert!(snapshots <= 16, "{snapshots} snapshots");
    assert!(rows <= 5 * keys, "{rows} rows written by snapshots");
    assert!(
        rows >= keys,
        "the last snapshots cover most of the state: {rows}"
    );
}
