//! Unit tests of when the table-release thread releases: the looks' table is in
//! `pacer_cases.txt` beside this file.

use std::time::{Duration, Instant};

use super::Pacer;

/// Each line: the second of the look, the replaced files it found, and whether it releases.
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
        let [second, replaced, expected] = fields[..] else {
            panic!("line {}: three fields expected: {line}", number + 1);
        };
        let second: u64 = second.parse().expect("second");
        let replaced: usize = replaced.parse().expect("replaced");
        let expected = match expected {
            "release" => true,
            "-" => false,
            other => panic!("line {}: `release` or `-`, not {other}", number + 1),
        };
        assert_eq!(
            pacer.look(replaced, start + Duration::from_secs(second)),
            expected,
            "line {}: {line}",
            number + 1
        );
        looks += 1;
    }
    assert!(looks > 10, "the table was read");
}
