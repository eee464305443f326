//! The only module that touches sled: one [`::sled::Db`] per process for the state machine, with
//! a tree of small store records (active state tree, current snapshot) and the state tree
//! itself; plus the snapshot files beside it. (The Raft log is not here: it is a WAL owned by
//! the consensus layer.)
//!
//! Everything here moves bytes: the state machine encodes its records. Durability points are
//! explicit and really reach the disk ([`Store::flush`]; see `db` for why sled's own flush is
//! not enough).

pub mod background;
mod db;
mod memtable;
mod resident;
mod resident_journal;
mod resident_log;
mod snapshot;
mod state;

pub use db::{Store, StoreConfig};
pub use memtable::MemtableConfig;
pub use snapshot::{SnapshotFile, SnapshotWriter};
pub use state::{ExportView, SnapshotExport, StateTree, StateView};
