//! Porcupine's linearizability check (Wing & Gong's search with Lowe's just-in-time
//! linearization and memoization of (linearized set, state)), run per key under a step/time
//! budget.
//!
//! For each key, the calls and returns of its operations are sorted by time into a doubly
//! linked list. The search walks the list from its head: at a call it tries to linearize that
//! operation next (the model must accept its reply in the current state, and the resulting
//! (linearized set, state) pair must be new); on success the operation's call and return are
//! lifted out of the list and the walk restarts at the head. Reaching a return means an
//! operation that must already have taken effect could not be linearized: the search
//! backtracks (un-lifts the last linearized operation and tries the entry after it). The key
//! is linearizable when the list empties, not linearizable when it backtracks past the start.
//! Operations with an unknown outcome return at +infinity and accept any reply.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::history::{self, HistoryError, Input, Operation, Outcome, Output};
use super::model::{self, State};

/// How much search the checker may spend before answering [`Verdict::Unknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Search steps (list entries visited) over all keys; `None`: no limit.
    pub max_steps: Option<u64>,
    /// Search steps on any one key; `None`: no limit. With it the verdict on a key does not
    /// depend on how many keys came before it.
    pub max_steps_per_key: Option<u64>,
    /// Wall-clock instant after which the search stops; `None`: no limit.
    pub deadline: Option<Instant>,
}

impl Budget {
    /// Steps allowed by [`Budget::default`]: a few seconds of search in a debug build (about a
    /// million steps a second on small keys; a realistic 10,000-operation history needs tens of
    /// thousands).
    pub const DEFAULT_MAX_STEPS: u64 = 5_000_000;

    /// No limit: the search runs until it has an answer (exponential in the worst case).
    pub fn unlimited() -> Budget {
        Budget {
            max_steps: None,
            max_steps_per_key: None,
            deadline: None,
        }
    }

    /// At most `max_steps` search steps.
    pub fn steps(max_steps: u64) -> Budget {
        Budget {
            max_steps: Some(max_steps),
            max_steps_per_key: None,
            deadline: None,
        }
    }

    /// Search for at most `time` from now.
    pub fn time(time: Duration) -> Budget {
        Budget {
            max_steps: None,
            max_steps_per_key: None,
            deadline: Some(Instant::now() + time),
        }
    }

    /// At most `per_key` search steps on each key, and no search past `time` from now in all.
    pub fn per_key(per_key: u64, time: Duration) -> Budget {
        Budget {
            max_steps: None,
            max_steps_per_key: Some(per_key),
            deadline: Some(Instant::now() + time),
        }
    }
}

impl Default for Budget {
    /// [`Budget::DEFAULT_MAX_STEPS`] steps, no deadline (deterministic).
    fn default() -> Budget {
        Budget::steps(Budget::DEFAULT_MAX_STEPS)
    }
}

/// The checker's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every key's sub-history is linearizable.
    Ok,
    /// Some key's sub-history is not linearizable (the first such key in byte order). Operation
    /// references are positions in the checked history.
    Violation {
        /// The key.
        key: Vec<u8>,
        /// The longest linearizable prefix the search found, in linearization order.
        longest_prefix: Vec<usize>,
        /// The key's value after that prefix.
        state_after_prefix: Option<Vec<u8>>,
        /// The operation whose reply arrived before it could be linearized after that prefix.
        blocked: usize,
        /// The operations called but not yet linearized when `blocked` returned (`blocked`
        /// included): none of them extends the prefix to a full linearization.
        pending: Vec<usize>,
    },
    /// The budget ran out while checking `key` (keys before it in byte order were fine).
    Unknown {
        /// The key being checked.
        key: Vec<u8>,
        /// Steps spent in total.
        steps: u64,
    },
}

impl Verdict {
    /// Whether the verdict is [`Verdict::Ok`].
    pub fn is_ok(&self) -> bool {
        matches!(self, Verdict::Ok)
    }

    /// Whether the verdict is a [`Verdict::Violation`].
    pub fn is_violation(&self) -> bool {
        matches!(self, Verdict::Violation { .. })
    }

    /// A human-readable account of the verdict, quoting operations of `history` (the history
    /// that was checked) in the [`super::text`] format.
    pub fn explain(&self, history: &[Operation]) -> String {
        let line = |index: &usize| match history.get(*index) {
            Some(op) => format!("  #{index}: {op}\n"),
            None => format!("  #{index}: (not in this history)\n"),
        };
        match self {
            Verdict::Ok => "linearizable".to_owned(),
            Verdict::Unknown { key, steps } => format!(
                "unknown: the search budget ran out after {steps} steps on key {}",
                super::text::format_bytes(key)
            ),
            Verdict::Violation {
                key,
                longest_prefix,
                state_after_prefix,
                blocked,
                pending,
            } => {
                let mut out = format!(
                    "not linearizable: key {}\nlongest linearizable prefix ({} operations):\n",
                    super::text::format_bytes(key),
                    longest_prefix.len()
                );
                longest_prefix.iter().for_each(|i| out.push_str(&line(i)));
                let state = match state_after_prefix {
                    Some(value) => super::text::format_bytes(value),
                    None => "absent".to_owned(),
                };
                out.push_str(&format!(
                    "after it the key is {state}; then this returned:\n"
                ));
                out.push_str(&line(blocked));
                out.push_str("while these were pending (none can come next):\n");
                pending.iter().for_each(|i| out.push_str(&line(i)));
                out
            }
        }
    }
}

/// What a check cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Keys checked (all of them unless the verdict is not `Ok`).
    pub keys: usize,
    /// Operations in the checked keys' sub-histories.
    pub operations: usize,
    /// Search steps (list entries visited).
    pub steps: u64,
    /// (linearized set, state) pairs memoized, summed over keys.
    pub cache_entries: usize,
}

/// Checks `history` for linearizability against the one-key [`model`], key by key.
pub fn check(history: &[Operation], budget: Budget) -> Result<Verdict, HistoryError> {
    check_with_stats(history, budget).map(|(verdict, _)| verdict)
}

/// [`check`], also reporting what the search cost.
pub fn check_with_stats(
    history: &[Operation],
    budget: Budget,
) -> Result<(Verdict, Stats), HistoryError> {
    history::validate(history)?;
    let mut meter = Meter {
        budget,
        steps: 0,
        key_steps: 0,
    };
    let mut stats = Stats::default();
    for (key, indices) in history::partition_by_key(history) {
        stats.keys += 1;
        stats.operations += indices.len();
        meter.key_steps = 0;
        let result = check_key(history, &indices, &mut meter, &mut stats);
        stats.steps = meter.steps;
        match result {
            KeyResult::Linearizable => {}
            KeyResult::OutOfBudget => {
                let verdict = Verdict::Unknown {
                    key: key.to_vec(),
                    steps: meter.steps,
                };
                return Ok((verdict, stats));
            }
            KeyResult::Violation(found) => {
                let verdict = Verdict::Violation {
                    key: key.to_vec(),
                    longest_prefix: found.prefix,
                    state_after_prefix: found.state,
                    blocked: found.blocked,
                    pending: found.pending,
                };
                return Ok((verdict, stats));
            }
        }
    }
    Ok((Verdict::Ok, stats))
}

/// Counts steps against the budget.
struct Meter {
    budget: Budget,
    steps: u64,
    /// Steps on the key being checked.
    key_steps: u64,
}

impl Meter {
    /// Counts one step; false (without counting) once the budget is spent. The clock is read
    /// at the first step and every 1024 steps after it.
    fn tick(&mut self) -> bool {
        if self.budget.max_steps.is_some_and(|max| self.steps >= max)
            || self
                .budget
                .max_steps_per_key
                .is_some_and(|max| self.key_steps >= max)
        {
            return false;
        }
        if let Some(deadline) = self.budget.deadline
            && self.steps.is_multiple_of(1024)
            && Instant::now() >= deadline
        {
            return false;
        }
        self.steps += 1;
        self.key_steps += 1;
        true
    }
}

enum KeyResult {
    Linearizable,
    OutOfBudget,
    Violation(Deepest),
}

/// The deepest point the search reached, in history positions.
struct Deepest {
    prefix: Vec<usize>,
    state: Option<Vec<u8>>,
    blocked: usize,
    pending: Vec<usize>,
}

/// One operation of a key, values replaced by interned ids.
struct Op {
    /// Position in the whole history.
    index: usize,
    input: Input<usize>,
    /// `None`: unknown outcome (any reply is fine).
    output: Option<Output<usize>>,
}

/// "No node" in the linked list.
const NIL: usize = usize::MAX;
/// The list's head sentinel.
const HEAD: usize = 0;

/// The call/return entries of a key's operations in time order, as a doubly linked list over
/// arrays (node 0 is the head sentinel). Lifted nodes keep their links so that re-linking
/// them in reverse order restores the list exactly (dancing links).
struct List {
    next: Vec<usize>,
    prev: Vec<usize>,
    /// The operation of each node.
    op: Vec<usize>,
    /// For a call node its return node; `NIL` for return nodes and the head.
    ret: Vec<usize>,
}

impl List {
    /// Builds the list of `ops` (parallel to `times`: call time, return time or `None`).
    /// Entries are ordered by time; at equal times calls come first (touching intervals are
    /// concurrent); unknown returns come last.
    fn new(times: &[(u64, Option<u64>)]) -> List {
        // (is infinite, time, is return, op)
        let mut events: Vec<(bool, u64, bool, usize)> = Vec::with_capacity(2 * times.len());
        for (op, &(call, ret)) in times.iter().enumerate() {
            events.push((false, call, false, op));
            events.push((ret.is_none(), ret.unwrap_or(0), true, op));
        }
        events.sort_unstable();
        let nodes = events.len() + 1;
        let mut list = List {
            next: (1..=nodes)
                .map(|n| if n == nodes { NIL } else { n })
                .collect(),
            prev: (0..nodes).map(|n| n.wrapping_sub(1)).collect(),
            op: vec![NIL; nodes],
            ret: vec![NIL; nodes],
        };
        let mut call_node = vec![NIL; times.len()];
        for (i, &(_, _, is_return, op)) in events.iter().enumerate() {
            let node = i + 1;
            list.op[node] = op;
            if is_return {
                if let Some(&call) = call_node.get(op) {
                    list.ret[call] = node;
                }
            } else {
                call_node[op] = node;
            }
        }
        list
    }

    fn is_call(&self, node: usize) -> bool {
        self.ret[node] != NIL
    }

    fn unlink(&mut self, node: usize) {
        let (prev, next) = (self.prev[node], self.next[node]);
        self.next[prev] = next;
        if next != NIL {
            self.prev[next] = prev;
        }
    }

    fn relink(&mut self, node: usize) {
        let (prev, next) = (self.prev[node], self.next[node]);
        self.next[prev] = node;
        if next != NIL {
            self.prev[next] = node;
        }
    }

    /// Takes call node `call` and its return out of the list.
    fn lift(&mut self, call: usize) {
        self.unlink(call);
        self.unlink(self.ret[call]);
    }

    /// Undoes the last [`List::lift`], which must have been of `call`.
    fn unlift(&mut self, call: usize) {
        self.relink(self.ret[call]);
        self.relink(call);
    }
}

/// The memo key: the linearized set's words, then the state (0: absent, id + 1: a value).
fn encode_state(state: State<usize>) -> u64 {
    state.map_or(0, |id| id as u64 + 1)
}

fn check_key(
    history: &[Operation],
    indices: &[usize],
    meter: &mut Meter,
    stats: &mut Stats,
) -> KeyResult {
    // Intern values; drop GETs with unknown outcome (no effect, any reply: always linearizable
    // at the very end).
    let mut values = Interner::default();
    let mut ops: Vec<Op> = Vec::with_capacity(indices.len());
    let mut times: Vec<(u64, Option<u64>)> = Vec::with_capacity(indices.len());
    for &index in indices {
        let Some(op) = history.get(index) else {
            continue;
        };
        if matches!((&op.input, &op.outcome), (Input::Get, Outcome::Unknown)) {
            continue;
        }
        let input = match &op.input {
            Input::Set { value, condition } => Input::Set {
                value: values.id(value),
                condition: *condition,
            },
            Input::Get => Input::Get,
            Input::Del => Input::Del,
            Input::VDel { value } => Input::VDel {
                value: values.id(value),
            },
        };
        let output = op.output().map(|output| match output {
            Output::Set { applied } => Output::Set { applied: *applied },
            Output::Get { value } => Output::Get {
                value: value.as_deref().map(|value| values.id(value)),
            },
            Output::Del { count } => Output::Del { count: *count },
            Output::VDel { result } => Output::VDel { result: *result },
        });
        ops.push(Op {
            index,
            input,
            output,
        });
        times.push((op.call, op.ret()));
    }
    let result = search(&ops, &times, meter, stats);
    match result {
        Search::Linearizable => KeyResult::Linearizable,
        Search::OutOfBudget => KeyResult::OutOfBudget,
        Search::Violation(deepest) => KeyResult::Violation(Deepest {
            prefix: deepest.prefix.iter().map(|&op| ops[op].index).collect(),
            state: deepest
                .state
                .and_then(|id| values.values.get(id))
                .map(|value| value.to_vec()),
            blocked: ops[deepest.blocked].index,
            pending: deepest.pending.iter().map(|&op| ops[op].index).collect(),
        }),
    }
}

/// Value ids: the model only compares values, so each distinct byte string becomes a number.
#[derive(Default)]
struct Interner<'a> {
    ids: HashMap<&'a [u8], usize>,
    values: Vec<&'a [u8]>,
}

impl<'a> Interner<'a> {
    fn id(&mut self, value: &'a [u8]) -> usize {
        *self.ids.entry(value).or_insert_with(|| {
            self.values.push(value);
            self.values.len() - 1
        })
    }
}

enum Search {
    Linearizable,
    OutOfBudget,
    /// The deepest point reached, in positions of the key's `ops`.
    Violation(DeepestLocal),
}

struct DeepestLocal {
    prefix: Vec<usize>,
    state: State<usize>,
    blocked: usize,
    pending: Vec<usize>,
}

/// The search proper over one key's operations (`times` parallel to `ops`).
fn search(
    ops: &[Op],
    times: &[(u64, Option<u64>)],
    meter: &mut Meter,
    stats: &mut Stats,
) -> Search {
    let mut list = List::new(times);
    let words = ops.len().div_ceil(64);
    // The linearized set (bitset over ops) followed by the encoded state.
    let mut memo_key: Vec<u64> = vec![0; words + 1];
    let mut cache: HashSet<Box<[u64]>> = HashSet::new();
    // Linearized call nodes with the state before each.
    let mut calls: Vec<(usize, State<usize>)> = Vec::new();
    let mut state: State<usize> = None;
    let mut deepest: Option<DeepestLocal> = None;
    let mut node = list.next[HEAD];
    let result = loop {
        if list.next[HEAD] == NIL {
            break Search::Linearizable;
        }
        if !meter.tick() {
            break Search::OutOfBudget;
        }
        if list.is_call(node) {
            let op_id = list.op[node];
            let op = &ops[op_id];
            let next_state = model::step_checked(&state, &op.input, op.output.as_ref());
            if let Some(next_state) = next_state {
                let (word, bit) = (op_id / 64, 1u64 << (op_id % 64));
                memo_key[word] |= bit;
                memo_key[words] = encode_state(next_state);
                if cache.contains(memo_key.as_slice()) {
                    memo_key[word] &= !bit;
                    node = list.next[node];
                } else {
                    cache.insert(memo_key.clone().into_boxed_slice());
                    calls.push((node, state));
                    state = next_state;
                    list.lift(node);
                    node = list.next[HEAD];
                }
            } else {
                node = list.next[node];
            }
        } else {
            // A return: its operation must have been linearized by now.
            if deepest
                .as_ref()
                .is_none_or(|d| calls.len() > d.prefix.len())
            {
                deepest = Some(snapshot(&list, &calls, state, node));
            }
            let Some((call, previous)) = calls.pop() else {
                let found = deepest
                    .take()
                    .unwrap_or_else(|| snapshot(&list, &calls, state, node));
                break Search::Violation(found);
            };
            let op_id = list.op[call];
            memo_key[op_id / 64] &= !(1u64 << (op_id % 64));
            state = previous;
            list.unlift(call);
            node = list.next[call];
        }
    };
    stats.cache_entries += cache.len();
    result
}

/// Records the search's position: the linearized prefix, the state, the return reached
/// (`blocked`), and the calls before it still in the list.
fn snapshot(
    list: &List,
    calls: &[(usize, State<usize>)],
    state: State<usize>,
    blocked: usize,
) -> DeepestLocal {
    let mut pending = Vec::new();
    let mut node = list.next[HEAD];
    while node != NIL && node != blocked {
        if list.is_call(node) {
            pending.push(list.op[node]);
        }
        node = list.next[node];
    }
    DeepestLocal {
        prefix: calls.iter().map(|&(call, _)| list.op[call]).collect(),
        state,
        blocked: list.op[blocked],
        pending,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linearizability::history::Condition;

    fn set(client: u64, call: u64, ret: u64, value: &str) -> Operation {
        let input = Input::Set {
            value: value.as_bytes().to_vec(),
            condition: Condition::Always,
        };
        Operation::returned(client, "k", input, call, ret, Output::Set { applied: true })
    }

    fn get(client: u64, call: u64, ret: u64, value: Option<&str>) -> Operation {
        let value = value.map(|v| v.as_bytes().to_vec());
        Operation::returned(client, "k", Input::Get, call, ret, Output::Get { value })
    }

    #[test]
    fn empty_history_is_linearizable() {
        assert_eq!(check(&[], Budget::default()), Ok(Verdict::Ok));
    }

    #[test]
    fn stale_read_is_reported_with_its_prefix() {
        let history = [
            set(1, 0, 10, "a"),
            set(1, 20, 30, "b"),
            get(2, 40, 50, Some("a")),
        ];
        let verdict = check(&history, Budget::default()).expect("valid history");
        assert_eq!(
            verdict,
            Verdict::Violation {
                key: b"k".to_vec(),
                longest_prefix: vec![0, 1],
                state_after_prefix: Some(b"b".to_vec()),
                blocked: 2,
                pending: vec![2],
            }
        );
        assert!(
            verdict
                .explain(&history)
                .contains("#2: c2 40 50 GET k -> a")
        );
    }

    #[test]
    fn concurrent_reads_of_old_and_new_value_are_fine() {
        let history = [
            set(1, 0, 10, "a"),
            set(1, 20, 60, "b"),
            get(2, 30, 40, Some("b")),
            get(3, 50, 70, Some("b")),
        ];
        assert_eq!(check(&history, Budget::default()), Ok(Verdict::Ok));
    }

    #[test]
    fn malformed_histories_are_errors() {
        assert_eq!(
            check(&[set(1, 10, 5, "a")], Budget::default()),
            Err(HistoryError::ReturnBeforeCall { index: 0 })
        );
        let mut op = set(1, 0, 5, "a");
        op.outcome = Outcome::Returned {
            at: 5,
            output: Output::Del { count: 1 },
        };
        assert_eq!(
            check(&[op], Budget::default()),
            Err(HistoryError::OutputKindMismatch { index: 0 })
        );
    }

    #[test]
    fn budget_is_enforced() {
        let history: Vec<Operation> = (0..50).map(|i| set(i, 0, 100, "a")).collect();
        let verdict = check(&history, Budget::steps(10)).expect("valid history");
        assert_eq!(
            verdict,
            Verdict::Unknown {
                key: b"k".to_vec(),
                steps: 10
            }
        );
        let verdict = check(&history, Budget::time(Duration::ZERO)).expect("valid history");
        assert!(matches!(verdict, Verdict::Unknown { .. }), "{verdict:?}");
    }

    /// Three keys that each need the same search: a per-key budget of exactly that decides
    /// all three, one step less decides none, and a shared budget of twice that runs out on
    /// the third key.
    #[test]
    fn a_per_key_budget_does_not_depend_on_the_keys_before() {
        let one_key: Vec<Operation> = (0..6).map(|i| set(i, 0, 100, "a")).collect();
        let (_, stats) = check_with_stats(&one_key, Budget::unlimited()).expect("valid history");
        let needed = stats.steps;
        let history: Vec<Operation> = ["a", "b", "c"]
            .iter()
            .flat_map(|key| {
                one_key.iter().cloned().map(move |mut op| {
                    op.key = key.as_bytes().to_vec();
                    op
                })
            })
            .collect();
        let long = Duration::from_secs(3600);
        assert_eq!(
            check(&history, Budget::per_key(needed, long)),
            Ok(Verdict::Ok)
        );
        assert_eq!(
            check(&history, Budget::per_key(needed - 1, long)),
            Ok(Verdict::Unknown {
                key: b"a".to_vec(),
                steps: needed - 1
            })
        );
        assert_eq!(
            check(&history, Budget::steps(2 * needed)),
            Ok(Verdict::Unknown {
                key: b"c".to_vec(),
                steps: 2 * needed
            })
        );
    }
}
