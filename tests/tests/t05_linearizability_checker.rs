//! The linearizability checker on its own (no broker, no nodes): hand-made tables from
//! `testdata/linearizability/`, property tests against an independent HashMap reference
//! (linearizable-by-construction histories, and the same with one impossible read), a
//! brute-force cross-check on small concurrent histories, and a 10,000-operation timing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use statestore_tests::linearizability::{
    Budget, Condition, Input, Operation, Outcome, Output, Verdict, check, check_with_stats,
    parse_operation,
};

// ---------------------------------------------------------------------------------------------
// Reference implementation (independent of the library's model).

/// A whole store as a HashMap: the sequential behaviour the checker's model must agree with.
#[derive(Debug, Clone, Default)]
struct Reference {
    keys: HashMap<Vec<u8>, Vec<u8>>,
}

impl Reference {
    fn apply(&mut self, key: &[u8], input: &Input) -> Output {
        match input {
            Input::Get => Output::Get {
                value: self.keys.get(key).cloned(),
            },
            Input::Set { value, condition } => {
                let current = self.keys.get(key);
                let ok = match condition {
                    Condition::Always => true,
                    Condition::Nx => current.is_none(),
                    Condition::Nex => current.is_none() || current == Some(value),
                };
                if ok {
                    self.keys.insert(key.to_vec(), value.clone());
                }
                Output::Set { applied: ok }
            }
            Input::Del => Output::Del {
                count: i64::from(self.keys.remove(key).is_some()),
            },
            Input::VDel { value } => match self.keys.get(key) {
                None => Output::VDel { result: 0 },
                Some(current) if current == value => {
                    self.keys.remove(key);
                    Output::VDel { result: 1 }
                }
                Some(_) => Output::VDel { result: -1 },
            },
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Tables.

/// What a table file expects.
#[derive(Debug, Clone, PartialEq)]
enum Expect {
    Ok,
    Violation { key: Vec<u8> },
    Unknown,
}

/// One table file: directives plus a history.
struct Case {
    name: String,
    expect: Expect,
    budget: Budget,
    history: Vec<Operation>,
}

/// Parses a table: `expect ...` and `budget ...` lines, then operations (library format).
fn parse_case(path: &Path) -> Case {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .expect("a file name");
    let text = std::fs::read_to_string(path).expect("readable table");
    let mut expect = None;
    let mut budget = Budget::default();
    let mut history = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let at = || format!("{name}:{}", number + 1);
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["expect", "ok"] => expect = Some(Expect::Ok),
            ["expect", "unknown"] => expect = Some(Expect::Unknown),
            ["expect", "violation", key] => {
                expect = Some(Expect::Violation {
                    key: key.as_bytes().to_vec(),
                })
            }
            ["expect", ..] => panic!("{}: bad expect line", at()),
            ["budget", steps] => {
                budget = Budget::steps(steps.parse().unwrap_or_else(|_| panic!("{}", at())))
            }
            _ => {
                let op = parse_operation(line).unwrap_or_else(|e| panic!("{}: {e}", at()));
                history.extend(op);
            }
        }
    }
    Case {
        expect: expect.unwrap_or_else(|| panic!("{name}: no expect line")),
        name,
        budget,
        history,
    }
}

fn table_paths() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/linearizability");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("testdata/linearizability exists")
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "txt"))
        .collect();
    paths.sort();
    paths
}

/// Every table gets the verdict it expects; violations come with a consistent explanation.
#[test]
fn tables_give_expected_verdicts() {
    let paths = table_paths();
    assert!(paths.len() >= 15, "only {} tables", paths.len());
    let mut failures = Vec::new();
    let mut seen = [0usize; 3];
    for path in &paths {
        let case = parse_case(path);
        let verdict = check(&case.history, case.budget).expect("well-formed table");
        let matches = match (&case.expect, &verdict) {
            (Expect::Ok, Verdict::Ok) => true,
            (Expect::Unknown, Verdict::Unknown { .. }) => true,
            (Expect::Violation { key }, Verdict::Violation { key: found, .. }) => key == found,
            _ => false,
        };
        seen[match case.expect {
            Expect::Ok => 0,
            Expect::Violation { .. } => 1,
            Expect::Unknown => 2,
        }] += 1;
        if !matches {
            failures.push(format!(
                "{}: expected {:?}, got:\n{}",
                case.name,
                case.expect,
                verdict.explain(&case.history)
            ));
        } else if verdict.is_violation() {
            assert_explanation_is_consistent(&case.history, &verdict);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(seen[0] >= 5 && seen[1] >= 5 && seen[2] >= 1, "{seen:?}");
}

/// The stale-read table is a violation because of its read: without it the history passes
/// (the table verdicts depend on the operations, not on the checker always saying one thing).
#[test]
fn stale_read_table_passes_without_its_read() {
    let path = table_paths()
        .into_iter()
        .find(|p| p.ends_with("stale_read_after_ack.txt"))
        .expect("stale_read_after_ack.txt");
    let case = parse_case(&path);
    assert!(
        check(&case.history, case.budget)
            .expect("valid")
            .is_violation()
    );
    // Drop the stale read: what remains is linearizable.
    let fixed: Vec<Operation> = case
        .history
        .iter()
        .filter(|op| op.input != Input::Get)
        .cloned()
        .collect();
    assert_eq!(check(&fixed, case.budget), Ok(Verdict::Ok));
}

/// Checks what a violation reports against the reference: the longest prefix is a real-time
/// respecting, downward-closed sequence of that key's operations that replays correctly and
/// ends in `state_after_prefix`; `blocked` is among `pending`; `pending` is disjoint from it.
fn assert_explanation_is_consistent(history: &[Operation], verdict: &Verdict) {
    let Verdict::Violation {
        key,
        longest_prefix,
        state_after_prefix,
        blocked,
        pending,
    } = verdict
    else {
        panic!("not a violation: {verdict:?}");
    };
    let explain = || verdict.explain(history);
    let mut reference = Reference::default();
    for (position, &i) in longest_prefix.iter().enumerate() {
        let op = &history[i];
        assert_eq!(&op.key, key, "{}", explain());
        let output = reference.apply(key, &op.input);
        if let Some(expected) = op.output() {
            assert_eq!(expected, &output, "prefix does not replay\n{}", explain());
        }
        for &later in &longest_prefix[position + 1..] {
            assert!(!history[later].precedes(op), "order\n{}", explain());
        }
        for (j, other) in history.iter().enumerate() {
            if other.key == *key && other.precedes(op) {
                assert!(longest_prefix.contains(&j), "not closed\n{}", explain());
            }
        }
    }
    assert_eq!(
        reference.keys.get(key.as_slice()),
        state_after_prefix.as_ref(),
        "{}",
        explain()
    );
    assert!(pending.contains(blocked), "{}", explain());
    assert!(
        pending
            .iter()
            .all(|p| !longest_prefix.contains(p) && history[*p].key == *key)
    );
}

// ---------------------------------------------------------------------------------------------
// 2. Linearizable-by-construction histories.

/// How an operation ended in a generated execution.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fate {
    /// Took effect at its point; the client got the reply.
    Acked,
    /// Took effect at its point; the reply was lost.
    UnknownApplied,
    /// Never took effect; no reply.
    UnknownLost,
}

/// One generated operation: what it does and how its interval is widened around its point.
#[derive(Debug, Clone)]
struct GenOp {
    key: u8,
    kind: u8,
    value: u8,
    client: u8,
    left: u64,
    right: u64,
    fate: Fate,
}

fn gen_op(keys: u8, values: u8, clients: u8, width: u64) -> impl Strategy<Value = GenOp> {
    let fate = prop_oneof![
        16 => Just(Fate::Acked),
        1 => Just(Fate::UnknownApplied),
        1 => Just(Fate::UnknownLost),
    ];
    (
        0..keys,
        0u8..7,
        0..values,
        0..clients,
        0..width,
        0..width,
        fate,
    )
        .prop_map(|(key, kind, value, client, left, right, fate)| GenOp {
            key,
            kind,
            value,
            client,
            left,
            right,
            fate,
        })
}

fn key_name(key: u8) -> Vec<u8> {
    format!("key{key}").into_bytes()
}

fn value_name(value: u8) -> Vec<u8> {
    format!("v{value}").into_bytes()
}

fn input_of(kind: u8, value: u8) -> Input {
    let value = value_name(value);
    match kind {
        0 | 1 => Input::Set {
            value,
            condition: Condition::Always,
        },
        2 => Input::Set {
            value,
            condition: Condition::Nx,
        },
        3 => Input::Set {
            value,
            condition: Condition::Nex,
        },
        4 => Input::Del,
        5 => Input::VDel { value },
        _ => Input::Get,
    }
}

/// Runs `ops` one after the other on the reference at points 100, 200, ... and widens each
/// interval around its point by `left`/`right`, keeping each client's operations disjoint and
/// in order. Every interval contains its point, so the sequential order is a linearization.
fn linearizable_history(ops: &[GenOp]) -> Vec<Operation> {
    let point = |i: usize| 100 * (i as u64 + 1);
    let mut next_of_client: Vec<Option<u64>> = vec![None; ops.len()];
    let mut last_seen: HashMap<u8, usize> = HashMap::new();
    for (i, op) in ops.iter().enumerate().rev() {
        next_of_client[i] = last_seen.get(&op.client).map(|&j| point(j));
        last_seen.insert(op.client, i);
    }
    let mut reference = Reference::default();
    let mut client_free: HashMap<u8, u64> = HashMap::new();
    let mut history = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        let p = point(i);
        let key = key_name(op.key);
        let input = input_of(op.kind, op.value);
        let free = client_free.get(&op.client).copied().unwrap_or(0);
        let call = free.max(p.saturating_sub(op.left));
        let end = (p + op.right).min(next_of_client[i].map_or(u64::MAX, |n| n - 1));
        client_free.insert(op.client, end + 1);
        let client = u64::from(op.client);
        history.push(match op.fate {
            Fate::Acked => {
                let output = reference.apply(&key, &input);
                Operation::returned(client, key, input, call, end, output)
            }
            Fate::UnknownApplied => {
                reference.apply(&key, &input);
                Operation::unknown(client, key, input, call)
            }
            Fate::UnknownLost => Operation::unknown(client, key, input, call),
        });
    }
    history
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// Linearizable by construction ⇒ `Ok`; with one GET's reply replaced by a value never
/// written ⇒ `Violation` on that key, with a consistent explanation.
#[test]
fn linearizable_histories_pass_and_impossible_reads_fail() {
    let mutated_cases = AtomicUsize::new(0);
    let strategy = (
        prop::collection::vec(gen_op(3, 4, 5, 400), 1..40),
        any::<prop::sample::Index>(),
    );
    let result = runner(400).run(&strategy, |(ops, pick)| {
        let history = linearizable_history(&ops);
        let verdict = check(&history, Budget::default()).expect("well-formed");
        prop_assert_eq!(&verdict, &Verdict::Ok, "{}", verdict.explain(&history));

        let reads: Vec<usize> = (0..history.len())
            .filter(|&i| history[i].input == Input::Get && history[i].output().is_some())
            .collect();
        if reads.is_empty() {
            return Ok(());
        }
        let target = reads[pick.index(reads.len())];
        let mut mutated = history.clone();
        if let Outcome::Returned { output, .. } = &mut mutated[target].outcome {
            *output = Output::Get {
                value: Some(b"never-written".to_vec()),
            };
        }
        let verdict = check(&mutated, Budget::default()).expect("well-formed");
        match &verdict {
            Verdict::Violation {
                key,
                longest_prefix,
                ..
            } => {
                prop_assert_eq!(key, &mutated[target].key);
                prop_assert!(!longest_prefix.contains(&target));
                assert_explanation_is_consistent(&mutated, &verdict);
            }
            other => prop_assert!(false, "expected a violation, got {other:?}"),
        }
        mutated_cases.fetch_add(1, Ordering::Relaxed);
        Ok(())
    });
    if let Err(error) = result {
        panic!("{error}");
    }
    assert!(mutated_cases.load(Ordering::Relaxed) > 200);
}

// ---------------------------------------------------------------------------------------------
// 3. Brute force on small concurrent histories.

/// Whether some order of all of `history` respects real time and replays on the reference
/// (unknown outcomes accept any reply; placing one last amounts to it never taking effect).
/// Plain depth-first search over permutations, all keys together (no partitioning, no memo).
fn brute_force_linearizable(history: &[Operation]) -> bool {
    fn extend(history: &[Operation], placed: &mut Vec<bool>, reference: &Reference) -> bool {
        if placed.iter().all(|&p| p) {
            return true;
        }
        for i in 0..history.len() {
            if placed[i] {
                continue;
            }
            let ready = (0..history.len())
                .all(|j| placed[j] || j == i || !history[j].precedes(&history[i]));
            if !ready {
                continue;
            }
            let mut next = reference.clone();
            let output = next.apply(&history[i].key, &history[i].input);
            if history[i]
                .output()
                .is_some_and(|expected| *expected != output)
            {
                continue;
            }
            placed[i] = true;
            if extend(history, placed, &next) {
                return true;
            }
            placed[i] = false;
        }
        false
    }
    extend(
        history,
        &mut vec![false; history.len()],
        &Reference::default(),
    )
}

/// A small random concurrent history: random intervals, replies from running the operations
/// at a random point inside each interval, then (often) one reply replaced by a random one.
fn small_history() -> impl Strategy<Value = Vec<Operation>> {
    let op = (
        0u8..2,                     // key
        0u8..7,                     // kind
        0u8..3,                     // value
        0u64..30,                   // call
        0u64..15,                   // duration
        0u64..=100,                 // point within the interval, percent
        prop::bool::weighted(0.15), // unknown outcome
        prop::bool::weighted(0.5),  // (unknown) took effect
    );
    let corruption = prop::option::weighted(0.5, (any::<prop::sample::Index>(), 0u8..4, 0u8..4));
    (prop::collection::vec(op, 1..=7), corruption).prop_map(|(ops, corruption)| {
        // Execute in point order to get plausible replies.
        let mut order: Vec<(u64, usize)> = ops
            .iter()
            .enumerate()
            .map(|(i, &(_, _, _, call, duration, percent, _, _))| {
                (call * 100 + duration * percent, i)
            })
            .collect();
        order.sort();
        let mut reference = Reference::default();
        let mut outputs = vec![None; ops.len()];
        for &(_, i) in &order {
            let (key, kind, value, _, _, _, unknown, effect) = ops[i];
            if !unknown || effect {
                outputs[i] = Some(reference.apply(&key_name(key), &input_of(kind, value)));
            }
        }
        let mut history: Vec<Operation> = ops
            .iter()
            .enumerate()
            .map(|(i, &(key, kind, value, call, duration, _, unknown, _))| {
                let input = input_of(kind, value);
                match (&outputs[i], unknown) {
                    (Some(output), false) => Operation::returned(
                        i as u64,
                        key_name(key),
                        input,
                        call,
                        call + duration,
                        output.clone(),
                    ),
                    _ => Operation::unknown(i as u64, key_name(key), input, call),
                }
            })
            .collect();
        if let Some((pick, a, b)) = corruption {
            let i = pick.index(history.len());
            if let Outcome::Returned { output, .. } = &mut history[i].outcome {
                *output = match output {
                    Output::Set { .. } => Output::Set {
                        applied: a % 2 == 0,
                    },
                    Output::Get { .. } => Output::Get {
                        value: (a < 3).then(|| value_name(b % 3)),
                    },
                    Output::Del { .. } => Output::Del {
                        count: i64::from(a % 2),
                    },
                    Output::VDel { .. } => Output::VDel {
                        result: i64::from(a % 3) - 1,
                    },
                };
            }
        }
        history
    })
}

/// On small histories the checker agrees with brute force, and both verdicts occur often.
#[test]
fn agrees_with_brute_force_on_small_histories() {
    let linearizable = AtomicUsize::new(0);
    let violations = AtomicUsize::new(0);
    let cases = 1500;
    let result = runner(cases).run(&small_history(), |history| {
        let expected = brute_force_linearizable(&history);
        let verdict = check(&history, Budget::unlimited()).expect("well-formed");
        prop_assert_eq!(
            verdict.is_ok(),
            expected,
            "brute force says linearizable={}, checker:\n{}",
            expected,
            verdict.explain(&history)
        );
        if verdict.is_violation() {
            assert_explanation_is_consistent(&history, &verdict);
            violations.fetch_add(1, Ordering::Relaxed);
        } else {
            linearizable.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    });
    if let Err(error) = result {
        panic!("{error}");
    }
    let (ok, bad) = (linearizable.into_inner(), violations.into_inner());
    println!("brute force cross-check: {ok} linearizable, {bad} violations");
    let min = cases as usize / 8;
    assert!(
        ok >= min && bad >= min,
        "{ok} linearizable, {bad} violations"
    );
}

// ---------------------------------------------------------------------------------------------
// 4. Size: 10,000 operations, 50 keys, 8 clients.

/// xorshift64*: a fixed, dependency-free random sequence.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A simulated run: `clients` clients each issue one request at a time on random keys; each
/// request takes effect at a random instant between its call and its return (ns), and 0.5%
/// of replies are lost (half of those requests never took effect).
fn simulated_history(seed: u64, ops: usize, keys: u8, clients: u8) -> Vec<Operation> {
    let mut rng = Rng(seed);
    // (point, client, key, input, call, ret or None if unknown, took effect)
    let mut planned = Vec::with_capacity(ops);
    let mut clock = vec![0u64; usize::from(clients)];
    for n in 0..ops {
        let client = n % usize::from(clients);
        let call = clock[client] + rng.below(50_000);
        let point = call + 1 + rng.below(200_000);
        let ret = point + 1 + rng.below(200_000);
        let key = rng.below(u64::from(keys)) as u8;
        let input = input_of(rng.below(7) as u8, rng.below(6) as u8);
        let lost = rng.below(200) == 0;
        let effect = !lost || rng.below(2) == 0;
        planned.push((
            point,
            client,
            key,
            input,
            call,
            (!lost).then_some(ret),
            effect,
        ));
        clock[client] = ret;
    }
    planned.sort_by_key(|p| p.0);
    let mut reference = Reference::default();
    planned
        .into_iter()
        .map(|(_, client, key, input, call, ret, effect)| {
            let key = key_name(key);
            let output = effect.then(|| reference.apply(&key, &input));
            match (ret, output) {
                (Some(ret), Some(output)) => {
                    Operation::returned(client as u64, key, input, call, ret, output)
                }
                _ => Operation::unknown(client as u64, key, input, call),
            }
        })
        .collect()
}

/// A 10,000-operation history on 50 keys with 8 clients checks in a bounded number of search
/// steps (the time is printed, not asserted); with one read made impossible it is a violation.
#[test]
fn ten_thousand_operations_check_in_bounded_steps() {
    let history = simulated_history(0x5eed_0001, 10_000, 50, 8);
    let unknown = history.iter().filter(|op| op.ret().is_none()).count();
    let started = Instant::now();
    let (verdict, stats) = check_with_stats(&history, Budget::default()).expect("well-formed");
    let elapsed = started.elapsed();
    println!("10,000 operations ({unknown} unknown): {elapsed:?}, {stats:?}");
    assert_eq!(verdict, Verdict::Ok, "{}", verdict.explain(&history));
    assert_eq!(stats.keys, 50);
    // Deterministic measure of the search: a few visits per operation, no blow-up.
    assert!(stats.steps < 20 * 10_000, "{stats:?}");

    let mut mutated = history.clone();
    let target = mutated
        .iter()
        .rposition(|op| op.input == Input::Get && op.output().is_some())
        .expect("a read");
    if let Outcome::Returned { output, .. } = &mut mutated[target].outcome {
        *output = Output::Get {
            value: Some(b"never-written".to_vec()),
        };
    }
    let started = Instant::now();
    let verdict = check(&mutated, Budget::default()).expect("well-formed");
    println!("with an impossible read: {:?}", started.elapsed());
    match verdict {
        Verdict::Violation { key, .. } => assert_eq!(key, mutated[target].key),
        other => panic!("expected a violation, got {other:?}"),
    }
}

/// One hot key under the same load (2,000 operations, 8 clients) stays within budget.
#[test]
fn hot_key_checks_within_budget() {
    let history = simulated_history(0x5eed_0002, 2_000, 1, 8);
    let started = Instant::now();
    let (verdict, stats) = check_with_stats(&history, Budget::default()).expect("well-formed");
    println!(
        "2,000 operations on one key: {:?}, {stats:?}",
        started.elapsed()
    );
    assert_eq!(verdict, Verdict::Ok, "{}", verdict.explain(&history));
}
