//! Unit tests of when the table-release thread releases: the looks' table is in
//! `pacer_cases.txt` beside this file.

use std::time::{Duration, Instant};

use super::Pacer;
use crate::store::tree::TableFiles;

/// One look per line: its second, the files on disk and in the set, and whether a release is
/// due.
const CASES: &str = include_str!("pacer_cases.txt");

#[test]
fn releases_follow_the_table() {
    let start = Instant::now();
    let mut pacer = Pacer::default();
    let mut looks = 0;
    for (number, line) in CASES.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [second, on_disk, in_set, expected] = fields[..] else {
            panic!("line {}: four fields expected: {line}", number + 1);
        };
        let now = start + Duration::from_secs(second.parse().expect("second"));
        let files = TableFiles {
            on_disk: on_disk.parse().expect("on disk"),
            in_set: in_set.parse().expect("in set"),
        };
        let expected = match expected {
            "release" => true,
            "-" => false,
            other => panic!("line {}: `release` or `-`, not {other}", number + 1),
        };
        let due = pacer.due(files, now);
        assert_eq!(due, expected, "line {}: {line}", number + 1);
        if due {
            pacer.released(files, now);
        }
        looks += 1;
    }
    assert!(looks > 20, "the table was read");
}
