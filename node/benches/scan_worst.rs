//! The worst SCAN a client can send (issue 27), printed as a table: per pattern, the compile
//! time and steps, then one page over a fjall store of 10,000 keys of 16–64 bytes, built as the
//! service builds it (`read::keys_after` over the state view, `scan::page_until` with the
//! default `PageLimits` and their 50 ms deadline on a real clock): the comparisons charged,
//! keys examined, why the page ended, its wall time and the ratio to an ordinary pattern's page.
//!
//! Keys: 9,000 `user:NNNNN:<letters>` and 1,000 attacker-chosen `aaaa…a:NNNNN` (runs of `a`,
//! for the literal-run patterns), lengths spread over 16–64 bytes. The hostile patterns are at
//! the caps or just over them (refused rows print only their compile cost). A last table
//! times one key at the default key limit (60 KiB) against the costliest pattern for it: the work one key
//! can cost, which a page finishes even past its budget and deadline (a page always makes
//! progress).
//!
//! Each figure is the median of [`ROUNDS`] runs (the machine is shared). Run:
//! `cargo bench -p statestore-node --bench scan_worst`.

use std::time::{Duration, Instant};

use statestore_protocol::glob::{
    Glob, GlobError, MAX_CLASS_RANGES, MAX_PATTERN_ELEMENTS, MAX_PATTERN_RANGES,
};
use statestore_protocol::scan::{PageEnd, PageLimits, StoredKey, page_until};
use statestore_storage::engine::Overlay;
use statestore_storage::keyspace::{SetCondition, read};
use statestore_storage::machine::{Carry, Machine, Mutation, Proposal};
use statestore_storage::store::{StateTree, Store, StoreConfig};
use statestore_vocab::hlc::Hlc;

/// Wall time of the writes (and of the reads: nothing expires).
const T0_MS: u64 = 1_700_000_000_000;
/// Keys stored.
const KEYS: usize = 10_000;
/// Of which attacker-chosen runs of `a`.
const RUN_KEYS: usize = 1_000;
/// Timed runs per figure.
const ROUNDS: usize = 7;

/// A key length in 16..=64 from `i`.
fn key_len(i: usize) -> usize {
    16 + (i * 37) % 49
}

fn keys() -> Vec<Vec<u8>> {
    (0..KEYS)
        .map(|i| {
            let len = key_len(i);
            if i < RUN_KEYS {
                let tail = format!(":{i:05}");
                let mut key = vec![b'a'; len - tail.len()];
                key.extend_from_slice(tail.as_bytes());
                key
            } else {
                let mut key = format!("user:{i:05}:").into_bytes();
                let mut letter = (i * 7) % 26;
                while key.len() < len {
                    key.push(b'a' + letter as u8);
                    letter = (letter * 5 + 3) % 26;
                }
                key
            }
        })
        .collect()
}

/// A store's state tree (fjall behind its memtable) holding `keys` (written through the
/// keyspace, as apply does).
struct Stored {
    state: StateTree,
    _store: Store,
    _dir: tempfile::TempDir,
}

fn store(keys: &[Vec<u8>]) -> Stored {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&StoreConfig::new(dir.path().to_owned(), 256 << 20)).expect("store");
    let state = store.state().expect("state");
    for (chunk_index, chunk) in keys.chunks(1000).enumerate() {
        let view = state.view();
        let mut txn = Overlay::new(&view);
        let devices = state.device_index();
        let mut index = devices.lock().unwrap_or_else(|p| p.into_inner());
        let mut machine =
            Machine::open_with_index(&mut txn, &Carry::default(), &mut index).expect("open");
        for (i, key) in chunk.iter().enumerate() {
            let ms = T0_MS + (chunk_index * 1000 + i) as u64;
            machine
                .apply(&Proposal {
                    stamp: Hlc::new(ms, 0, "bench"),
                    wall_ms: ms,
                    request: None,
                    token_seed: None,
                    mutation: Mutation::Set {
                        key: key.clone(),
                        value: vec![b'v'; 32],
                        condition: SetCondition::Always,
                        expire_after_ms: None,
                        fencing_token: None,
                    },
                })
                .expect("apply");
        }
        machine.finish();
        drop(index);
        state.commit(txn.into_txn_writes()).expect("commit");
    }
    Stored {
        state,
        _store: store,
        _dir: dir,
    }
}

/// `count` single characters from U+0100 on, two apart (no two merge), as class members.
fn far_members(count: usize) -> String {
    (0..count as u32)
        .map(|i| char::from_u32(0x100 + 2 * i).expect("a character"))
        .collect()
}

/// A class of `MAX_CLASS_RANGES` ranges that accepts every character of the keys.
fn accepting_class() -> String {
    format!("[0-9:a-z{}]", far_members(MAX_CLASS_RANGES - 3))
}

/// A class of `MAX_CLASS_RANGES` ranges that accepts none of them.
fn refusing_class() -> String {
    format!("[{}]", far_members(MAX_CLASS_RANGES))
}

/// The rows: (name, pattern). The first is the ordinary baseline.
fn patterns() -> Vec<(&'static str, Vec<u8>)> {
    let per_pattern_classes = MAX_PATTERN_RANGES / MAX_CLASS_RANGES;
    let mut range_cap = String::from("*");
    for _ in 0..per_pattern_classes - 1 {
        range_cap.push_str(&accepting_class());
    }
    range_cap.push_str(&refusing_class());
    range_cap.push('*');
    // Four ranges per class: the largest cost per character (1 + 3 probes); a segment of 24
    // of them matches at almost every position of a key, then the 25th fails.
    let four = "[0-9:a-z\u{100}]";
    let four_refusing = "[\u{100}\u{102}\u{104}\u{106}]";
    let cost_per_character = format!("*{}{four_refusing}*", four.repeat(24));
    let attack: String = "a-b".repeat(21_845);
    vec![
        ("ordinary: user:0001*", b"user:0001*".to_vec()),
        ("ordinary: *:?????:*", b"*:?????:*".to_vec()),
        (
            "issue 27's attack: one class of 21,845 ranges (64 KiB)",
            format!("[{attack}]").into_bytes(),
        ),
        (
            "one class at the cap: *[256 ranges]*",
            format!("*{}*", refusing_class()).into_bytes(),
        ),
        (
            "ranges at the pattern cap: *[256]x15[256]* (4,096)",
            range_cap.into_bytes(),
        ),
        (
            "most cost per character: *[4 ranges]x24[4]*",
            cost_per_character.into_bytes(),
        ),
        (
            "the default key limit (60 KiB) of unclosed [",
            vec![b'['; statestore_protocol::ProtocolLimits::DEFAULT_MAX_KEY_BYTES],
        ),
        (
            "unclosed [ between stars: (*[)x512",
            b"*[".repeat(MAX_PATTERN_ELEMENTS / 2),
        ),
        (
            "many stars: (*a)x512",
            b"*a".repeat(MAX_PATTERN_ELEMENTS / 2),
        ),
        (
            "long literal run: *a{40}b*",
            format!("*{}b*", "a".repeat(40)).into_bytes(),
        ),
        (
            "long literal run: *a{1022}*",
            format!("*{}*", "a".repeat(MAX_PATTERN_ELEMENTS - 2)).into_bytes(),
        ),
    ]
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// One page as the service builds it.
struct PageRun {
    elapsed: Duration,
    comparisons: u64,
    examined: usize,
    matched: usize,
    end: PageEnd,
}

fn one_page(state: &StateTree, glob: &Glob, limits: &PageLimits) -> PageRun {
    let view = state.view();
    let started = Instant::now();
    let deadline = started + limits.max_duration;
    let mut examined = 0usize;
    let mut comparisons = 0u64;
    let stored = read::keys_after(&view, None, T0_MS).map(|entry| {
        entry.map(|(key, live, stored_bytes)| {
            examined += 1;
            StoredKey {
                key,
                live,
                stored_bytes,
            }
        })
    });
    let (page, end) =
        page_until(glob, stored, limits, || Instant::now() >= deadline).expect("store read");
    let elapsed = started.elapsed();
    // The comparisons charged: the page's keys again, outside the timed part. The page read
    // one key past its last examined one (the key that found it full) unless it was complete.
    let counted = if end == PageEnd::Complete {
        examined
    } else {
        examined - 1
    };
    for entry in read::keys_after(&view, None, T0_MS).take(counted) {
        let (key, _, _) = entry.expect("store read");
        comparisons += glob.matches(&key).comparisons;
    }
    PageRun {
        elapsed,
        comparisons,
        examined: counted,
        matched: page.keys.len(),
        end,
    }
}

fn main() {
    let keys = keys();
    let stored = store(&keys);
    let limits = PageLimits::default();
    println!(
        "SCAN worst cases: {KEYS} keys of 16-64 bytes in the store (fjall), default page limits \
         (max_examined {}, max_comparisons {}, max_duration {:?}); median of {ROUNDS} runs",
        limits.max_examined, limits.max_comparisons, limits.max_duration
    );
    println!(
        "{:<55} {:>10} {:>9} {:>12} {:>8} {:>7} {:>14} {:>10} {:>7}",
        "pattern",
        "compile",
        "steps",
        "comparisons",
        "examined",
        "matched",
        "ended by",
        "page",
        "ratio"
    );
    let mut baseline: Option<Duration> = None;
    for (name, pattern) in patterns() {
        let mut steps = 0u64;
        let compiled = Glob::compile_counting(&pattern, &mut steps);
        let compile = median(
            (0..ROUNDS)
                .map(|_| {
                    let started = Instant::now();
                    let _ = std::hint::black_box(Glob::compile(std::hint::black_box(&pattern)));
                    started.elapsed()
                })
                .collect(),
        );
        let glob = match compiled {
            Ok(glob) => glob,
            Err(err) => {
                let why = match err {
                    GlobError::TooComplex => "elements",
                    GlobError::ClassTooLarge => "class ranges",
                    GlobError::TooManyRanges => "pattern ranges",
                };
                println!(
                    "{name:<55} {:>10} {steps:>9} refused: syntax error (over the {why} cap; {} bytes)",
                    format!("{compile:.1?}"),
                    pattern.len()
                );
                continue;
            }
        };
        let runs: Vec<PageRun> = (0..ROUNDS)
            .map(|_| one_page(&stored.state, &glob, &limits))
            .collect();
        let page = median(runs.iter().map(|run| run.elapsed).collect());
        let last = runs.last().expect("rounds");
        let base = *baseline.get_or_insert(page);
        println!(
            "{name:<55} {:>10} {steps:>9} {:>12} {:>8} {:>7} {:>14} {:>10} {:>6.1}x",
            format!("{compile:.1?}"),
            last.comparisons,
            last.examined,
            last.matched,
            last.end.label(),
            format!("{page:.2?}"),
            page.as_secs_f64() / base.as_secs_f64()
        );
    }

    // One key at the key limit: the most one key can cost (a page finishes the key it is at).
    let limit = statestore_protocol::ProtocolLimits::DEFAULT_MAX_KEY_BYTES;
    let long_key = vec![b'a'; limit];
    let four = "[a\u{100}\u{102}\u{104}]";
    let singles: Vec<(&str, Vec<u8>)> = vec![
        (
            "*a{1021}b*: literals, 1 per check",
            format!("*{}b*", "a".repeat(MAX_PATTERN_ELEMENTS - 3)).into_bytes(),
        ),
        (
            "*[4 ranges]x1021[!a]*: the cost-per-character cap",
            format!("*{}[!a]*", four.repeat(MAX_PATTERN_ELEMENTS - 3)).into_bytes(),
        ),
    ];
    println!();
    println!("one key of {limit} x 'a' (the key limit), matched once: the work a page cannot cut");
    println!(
        "{:<55} {:>14} {:>12} {:>10}",
        "pattern", "cost/char", "comparisons", "time"
    );
    for (name, pattern) in singles {
        let glob = Glob::compile(&pattern).expect("at the caps");
        let mut comparisons = 0;
        let time = median(
            (0..3)
                .map(|_| {
                    let started = Instant::now();
                    comparisons = std::hint::black_box(glob.matches(&long_key)).comparisons;
                    started.elapsed()
                })
                .collect(),
        );
        println!(
            "{name:<55} {:>14} {comparisons:>12} {:>10}",
            glob.cost_per_character(),
            format!("{time:.1?}")
        );
    }
}
