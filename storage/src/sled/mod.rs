//! The only module that touches sled: one [`::sled::Db`] per process with a tree for the Raft
//! log, one for small store records (vote, purge point, active state tree, current snapshot)
//! and one for the state machine; plus the snapshot files beside it.
//!
//! Everything here moves bytes: the consensus layer encodes its entries, the keyspace encodes
//! its records. Durability points are explicit ([`Store::flush`]).

mod db;
mod log;
mod snapshot;
mod state;

pub use db::{Store, StoreConfig};
pub use log::LogTree;
pub use snapshot::{SnapshotFile, SnapshotWriter};
pub use state::{StateTree, StateView};
