//! Keyspace semantics as pure, deterministic functions over a transaction trait.
//!
//! Owns what a SET/DEL/VDEL/KEYNOTIFY/expiry/client-departure entry does to the replicated
//! state: values, versions, fencing tokens, expiry index, quotas, registrations and the reply
//! memory. Knows nothing about sled, openraft or MQTT, and never reads a clock.

mod apply;
pub mod layout;
mod mutation;
mod outcome;
pub mod read;
mod record;
mod txn;

pub use apply::{Carry, Keyspace, REPLIES_PRUNED_PER_ENTRY};
pub use mutation::{Limits, Mutation, Proposal, RequestId, SetCondition};
pub use outcome::{Applied, Change, KeyEvent, Outcome, Rejection};
pub use record::{KeyspaceMeta, Record, RememberedReply};
pub use serde_bytes::ByteBuf;
pub use txn::{KvPair, OrderedRead, Overlay, RangeIter, Txn, TxnWrite, TxnWrites};

#[cfg(test)]
pub(crate) mod tests;
