//! What a recorded client history is made of: operations on single keys of the state store,
//! each with its client, call time, and return time and output (or an unknown outcome).

use std::collections::BTreeMap;
use std::fmt;

/// The condition of a SET (`SET key value [NX | NEX]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Condition {
    /// No condition: always sets.
    Always,
    /// `NX`: sets only if the key is absent.
    Nx,
    /// `NEX`: sets only if the key is absent or its current value equals the new value.
    Nex,
}

/// A request on one key. `V` is the value type: byte strings in recorded histories, small
/// interned ids inside the checker (the model only compares values for equality).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Input<V = Vec<u8>> {
    /// `SET key value [NX | NEX]` (expiry is not modelled).
    Set {
        /// The value written.
        value: V,
        /// When the SET applies.
        condition: Condition,
    },
    /// `GET key`.
    Get,
    /// `DEL key`.
    Del,
    /// `VDEL key value`: deletes only if the current value equals `value`.
    VDel {
        /// The value the key must hold to be deleted.
        value: V,
    },
}

/// A reply to an [`Input`] of the same kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Output<V = Vec<u8>> {
    /// Reply to SET: `+OK` (`applied`) or `:-1` (the condition failed, nothing changed).
    Set {
        /// Whether the SET changed the key.
        applied: bool,
    },
    /// Reply to GET: the value, or `None` for `$-1` (no such key).
    Get {
        /// The value read.
        value: Option<V>,
    },
    /// Reply to DEL: `:1` deleted, `:0` no such key.
    Del {
        /// Keys deleted (0 or 1).
        count: i64,
    },
    /// Reply to VDEL: `:1` deleted, `:0` no such key, `:-1` value differs.
    VDel {
        /// The integer reply.
        result: i64,
    },
}

impl<V> Input<V> {
    /// Whether `output` is a reply of this input's kind.
    pub fn matches_kind<W>(&self, output: &Output<W>) -> bool {
        matches!(
            (self, output),
            (Input::Set { .. }, Output::Set { .. })
                | (Input::Get, Output::Get { .. })
                | (Input::Del, Output::Del { .. })
                | (Input::VDel { .. }, Output::VDel { .. })
        )
    }

    /// Whether the request can change the key (everything but GET).
    pub fn is_mutation(&self) -> bool {
        !matches!(self, Input::Get)
    }
}

/// How an operation ended, as the client saw it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A reply arrived.
    Returned {
        /// When the reply arrived (ns on the history's clock).
        at: u64,
        /// The reply.
        output: Output,
    },
    /// No reply (timeout, lost connection): the operation may or may not have taken effect, at
    /// any instant after its call. The checker treats its return time as +infinity.
    Unknown,
}

/// One client operation on one key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Operation {
    /// The client that issued it (only for reports: the checker does not need it).
    pub client: u64,
    /// The key it addressed.
    pub key: Vec<u8>,
    /// The request.
    pub input: Input,
    /// When the request was sent (ns on the history's clock).
    pub call: u64,
    /// The reply and its arrival time, or an unknown outcome.
    pub outcome: Outcome,
}

impl Operation {
    /// An operation that got `output` at time `ret`.
    pub fn returned(
        client: u64,
        key: impl Into<Vec<u8>>,
        input: Input,
        call: u64,
        ret: u64,
        output: Output,
    ) -> Operation {
        Operation {
            client,
            key: key.into(),
            input,
            call,
            outcome: Outcome::Returned { at: ret, output },
        }
    }

    /// An operation sent at `call` whose outcome is unknown.
    pub fn unknown(client: u64, key: impl Into<Vec<u8>>, input: Input, call: u64) -> Operation {
        Operation {
            client,
            key: key.into(),
            input,
            call,
            outcome: Outcome::Unknown,
        }
    }

    /// The return time, `None` for an unknown outcome (+infinity).
    pub fn ret(&self) -> Option<u64> {
        match self.outcome {
            Outcome::Returned { at, .. } => Some(at),
            Outcome::Unknown => None,
        }
    }

    /// The reply, `None` for an unknown outcome.
    pub fn output(&self) -> Option<&Output> {
        match &self.outcome {
            Outcome::Returned { output, .. } => Some(output),
            Outcome::Unknown => None,
        }
    }

    /// Whether this operation finished before `other` was called, so that every linearization
    /// must order it first. Intervals are closed: touching intervals count as concurrent.
    pub fn precedes(&self, other: &Operation) -> bool {
        self.ret().is_some_and(|ret| ret < other.call)
    }
}

/// Why a history cannot be checked at all (a recording bug, not a consistency violation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryError {
    /// Operation `index` returned before it was called.
    ReturnBeforeCall {
        /// Position of the operation in the history.
        index: usize,
    },
    /// Operation `index` has a reply of another kind than its request.
    OutputKindMismatch {
        /// Position of the operation in the history.
        index: usize,
    },
}

impl fmt::Display for HistoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HistoryError::ReturnBeforeCall { index } => {
                write!(f, "operation {index} returns before its call")
            }
            HistoryError::OutputKindMismatch { index } => {
                write!(
                    f,
                    "operation {index} has a reply of another kind than its request"
                )
            }
        }
    }
}

impl std::error::Error for HistoryError {}

/// Checks that every operation returns no earlier than its call and has a reply of its
/// request's kind.
pub fn validate(history: &[Operation]) -> Result<(), HistoryError> {
    for (index, op) in history.iter().enumerate() {
        if let Outcome::Returned { at, output } = &op.outcome {
            if *at < op.call {
                return Err(HistoryError::ReturnBeforeCall { index });
            }
            if !op.input.matches_kind(output) {
                return Err(HistoryError::OutputKindMismatch { index });
            }
        }
    }
    Ok(())
}

/// Splits a history by key (P-compositionality: a history is linearizable iff each key's
/// sub-history is). Each key maps to the positions of its operations in `history`, in order;
/// keys come out sorted.
pub fn partition_by_key(history: &[Operation]) -> BTreeMap<&[u8], Vec<usize>> {
    let mut keys: BTreeMap<&[u8], Vec<usize>> = BTreeMap::new();
    for (index, op) in history.iter().enumerate() {
        keys.entry(op.key.as_slice()).or_default().push(index);
    }
    keys
}
