//! The state machine's root: [`Machine`] applies the entries Raft commits to the replicated
//! state, one transaction at a time.
//!
//! Owns what is common to every entry: the [`Proposal`] and its [`Mutation`] (the log's
//! encoding), the store time (never behind entries already applied), the reply memory of §6
//! (request de-duplication for keyspace and device-bound commands alike, [`replies`]), the
//! replicated limits, the [`Carry`] from one transaction to the next, and the store-wide
//! records the parts keep in memory while a transaction runs. Each mutation goes to its part:
//! [`crate::keyspace`] or [`crate::devicebound`], siblings that know nothing of each other
//! nor of the machine. Over the engine ([`crate::engine`]), like them; knows nothing about
//! fjall, openraft or MQTT, and never reads a clock.

mod apply;
mod outcome;
mod proposal;
pub mod read;
pub mod replies;
pub mod reply_rows;

/// The device queues' index a long-lived caller keeps between transactions
/// ([`Machine::open_with_index`]).
pub use crate::devicebound::DeviceIndex;
/// What a change hands the notifier ([`Applied::events`]).
pub use crate::keyspace::KeyEvent;
/// Where the consensus layer's record `name` lives ([`Machine::put_consensus_record`]).
pub use crate::layout::consensus_key;
pub use apply::{Carry, Machine};
pub use outcome::{Applied, Outcome};
pub use proposal::{Mutation, Proposal, RequestId};
pub use replies::REPLIES_PRUNED_PER_ENTRY;
pub use reply_rows::RememberedReply;
pub use serde_bytes::ByteBuf;

#[cfg(test)]
pub(crate) mod tests;
