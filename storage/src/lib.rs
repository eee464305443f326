//! statestore-storage: the replicated state machine of statestore and the fjall-backed store it
//! persists into.
//!
//! Layers, each importing only those below it:
//!
//! - **engine**: [`engine`] (the transaction traits [`engine::OrderedRead`] and
//!   [`engine::Txn`], the [`engine::Overlay`] every apply writes through) and [`store`], the one
//!   backend (the state tree in fjall behind a write-back memtable, snapshots, durability
//!   points). They move bytes and know nothing of what the bytes mean. (The state tree also
//!   keeps the device queues' in-memory index next to the rows it is derived from.)
//! - **layout**: [`layout`], the register of the table prefixes of the one ordered byte map
//!   and of its store-wide and consensus records; [`codec`], the versioned record encoding.
//! - **parts**, siblings that know nothing of each other: [`keyspace`] (SET/DEL/VDEL,
//!   KEYNOTIFY, expiry, fencing, key quotas, registrations) and [`devicebound`] (the
//!   device-bound message queues).
//! - **root**: [`machine`], whose [`machine::Machine`] applies a [`machine::Proposal`]: store
//!   time, reply memory (§6, for both parts), limits, the carry between transactions, and the
//!   dispatch of each [`machine::Mutation`] to its part. The consensus layer applies entries
//!   through it alone.
//!
//! The hybrid logical clock and the enums shared with the node come from `statestore-vocab`
//! (the enums are re-exported where the parts use them). Knows nothing about openraft or
//! MQTT: the consensus layer hands it opaque log records and typed proposals.

pub mod codec;
pub mod devicebound;
pub mod dirs;
pub mod engine;
pub mod error;
pub mod gradual_remove;
pub mod keyspace;
pub mod layout;
pub mod machine;
pub mod store;
pub mod write_behind;

pub use error::{Result, StorageError};
pub use store::{MAX_STORED_KEY_BYTES, MAX_USER_KEY_BYTES};
