//! statestore-storage: the hybrid logical clock, the keyspace semantics of the state store
//! protocol, and the sled-backed Raft log and state machine they persist into.
//!
//! Knows nothing about openraft or MQTT: the consensus layer hands it opaque log records and
//! typed [`keyspace::Proposal`]s. The device-bound message queues ([`devicebound`]) live in the
//! same state and are reached through [`keyspace::Mutation::Device`].

pub mod codec;
pub mod devicebound;
pub mod error;
pub mod keyspace;
pub mod sled;

pub use error::{Result, StorageError};
/// The hybrid logical clock, from [`statestore_vocab::hlc`] (re-exported where it always was).
pub use statestore_vocab::hlc;
