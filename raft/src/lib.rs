//! statestore-raft: openraft 0.10 wiring for statestore.
//!
//! Owns the type configuration, the Raft log (a `raft_log` WAL), the `RaftStateMachine` adapter
//! over the storage crate, the TCP peer network, consensus metrics and [`RaftNode`], the handle
//! the node crate drives. The only crate that imports openraft; knows nothing about MQTT or
//! RESP3.

// openraft fixes the error type of its storage traits (`StorageError`, ~224 bytes); our
// helpers return the same type so `?` works, which clippy would flag everywhere.
#![allow(clippy::result_large_err)]

mod applier;
pub mod batch;
mod batcher;
pub mod error;
pub mod log_store;
pub mod membership;
pub mod metrics;
pub mod network;
mod purged_chunks;
mod raft_node;
mod read_barrier;
pub mod slow_io;
pub mod snapshot;
pub mod state_machine;
pub mod trace;
pub mod types;
pub mod wal_check;

pub use error::{Error, PeerError, PeerTlsError, Result, StopCause};
pub use membership::MembershipChange;
pub use network::{InboundLimits, PeerNames, PeerTimeouts, PeerTls};
pub use raft_node::{Leadership, PendingWrite, RaftConfig, RaftNode};
pub use state_machine::{DiscardEvents, EventSink, SnapshotTrigger, TracedEvent};
