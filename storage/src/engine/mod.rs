//! The engine layer: the transaction traits the semantics run on ([`OrderedRead`], [`Txn`]) and
//! [`Overlay`], the transaction every apply uses. The fjall-backed store ([`crate::store`])
//! implements [`OrderedRead`] and applies an overlay's [`TxnWrites`] atomically.
//!
//! Knows nothing of keys, records or devices: only ordered byte maps and their writes.

mod overlay;
mod txn;

pub use overlay::Overlay;
pub use txn::{KvPair, OrderedRead, RangeIter, Txn, TxnWrite, TxnWrites, prefix_end};
