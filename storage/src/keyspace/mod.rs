//! Keyspace semantics as pure, deterministic functions over a transaction.
//!
//! Owns what a SET/DEL/VDEL/KEYNOTIFY/expiry/client-departure command does to the keys: values,
//! versions, fencing tokens, the expiry index, key and byte quotas, registrations and their
//! counts, and the key events a change yields for the notifier. Also the read queries over
//! these tables ([`read`]).
//!
//! A sibling of the device-bound queues over the engine ([`crate::engine`]): it imports neither
//! them nor the machine ([`crate::machine`]), which applies each entry (store time, reply
//! memory, limits) and opens the keyspace for the keyspace commands. Knows nothing about fjall,
//! openraft or MQTT, and never reads a clock.

mod apply;
pub mod layout;
mod limits;
mod outcome;
pub mod read;
mod record;

pub(crate) use apply::{Keyspace, SetWrite};
pub use limits::Limits;
pub use outcome::{Change, KeyEvent, Outcome, Rejection};
pub use record::{KeyspaceMeta, Record};
pub use statestore_vocab::keyspace::SetCondition;

#[cfg(test)]
mod tests;
