//! Checks a dumped history again, key by key, with a budget of its own per key: for a fault
//! run whose check said "UNDECIDED" (the default budget is shared by all keys) or named a key
//! worth a closer look. The dump is the text file a failed check names ("whole history:
//! /tmp/statestore-history-*.txt", one operation per line).
//!
//! ```sh
//! cargo run -p statestore-tests --example check_history -- /tmp/statestore-history-XXXX.txt [seconds per key] [key]
//! ```
//!
//! Prints one line per key that is not decided linearizable at once (and a summary), and exits
//! non-zero if any key is not linearizable or stays undecided.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use statestore_tests::linearizability::history::partition_by_key;
use statestore_tests::linearizability::{Budget, Operation, Verdict, check, parse_history};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: check_history FILE [seconds per key] [key]");
        return ExitCode::from(2);
    };
    let per_key = match args.next().map(|s| s.parse::<u64>()) {
        None => Duration::from_secs(60),
        Some(Ok(seconds)) => Duration::from_secs(seconds),
        Some(Err(e)) => {
            eprintln!("seconds per key: {e}");
            return ExitCode::from(2);
        }
    };
    let only_key = args.next();
    let history = match std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|text| parse_history(&text).map_err(|e| e.to_string()))
    {
        Ok(history) => history,
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::from(2);
        }
    };
    let (mut linearizable, mut undecided, mut violations) = (0, 0, 0);
    for (key, indices) in partition_by_key(&history) {
        let name = String::from_utf8_lossy(key);
        let ops: Vec<Operation> = indices.iter().map(|&i| history[i].clone()).collect();
        if only_key.as_deref().is_some_and(|only| only != name) {
            continue;
        }
        let unknowns = ops.iter().filter(|op| op.ret().is_none()).count();
        let started = Instant::now();
        match check(&ops, Budget::time(per_key)) {
            Ok(Verdict::Ok) => {
                linearizable += 1;
                if started.elapsed() > Duration::from_secs(1) {
                    println!(
                        "{name}: linearizable ({} operations, {unknowns} unknown outcomes) in {:?}",
                        ops.len(),
                        started.elapsed()
                    );
                }
            }
            Ok(verdict @ Verdict::Violation { .. }) => {
                violations += 1;
                println!("{name}: NOT LINEARIZABLE\n{}", verdict.explain(&ops));
            }
            Ok(Verdict::Unknown { .. }) => {
                undecided += 1;
                println!(
                    "{name}: undecided after {per_key:?} ({} operations, {unknowns} unknown outcomes)",
                    ops.len()
                );
            }
            Err(e) => {
                eprintln!("{name}: malformed history: {e:?}");
                return ExitCode::from(2);
            }
        }
    }
    println!(
        "{linearizable} keys linearizable, {undecided} undecided, {violations} not linearizable"
    );
    if undecided + violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
