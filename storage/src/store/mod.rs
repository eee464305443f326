//! The only module that touches the state database (fjall): one [`fjall::Database`] per process
//! for the state machine, with a keyspace of small store records (which state keyspace is
//! active) and the state keyspace itself; plus the snapshot files in transit beside it (one
//! written for peers, one received). (The Raft log is not here: it is a WAL owned by the
//! consensus layer.)
//!
//! The state database is the snapshot: a snapshot build only waits until what was applied is
//! durable in it ([`StateTree::checkpoint`]); a file is written only when a peer needs one.
//! After an unclean stop the database is kept when it reads back whole (`recovery`), and the
//! consensus layer applies its log after it.
//!
//! Everything here moves bytes: the state machine encodes its records. Durability points are
//! explicit and really reach the disk ([`Store::flush`]; see `db`: each memtable layer is
//! `fsync`ed as it is ingested, and fjall's journal, which holds only a few records, is
//! persisted only at these points).

pub mod background;
mod db;
mod memtable;
mod preimage;
mod recovery;
mod resident;
mod resident_journal;
mod resident_log;
mod snapshot;
mod state;
mod table_release;
mod tree;

pub use db::{Store, StoreConfig};
pub use memtable::MemtableConfig;
pub use recovery::{CLEAN_STOP_FILE, OpenKind, Recovery, SnapshotCovers};
pub use snapshot::{SnapshotFile, SnapshotWriter};
pub use state::{Checkpoint, ExportView, SnapshotExport, StateTree, StateView, verify_snapshot};
pub use tree::MAX_STORED_KEY_BYTES;

/// Longest user key the state can hold: the longest key the database stores, less the table
/// prefix and the 8-byte instant of the expiry index, the longest row a key is part of (the
/// KEYNOTIFY rows that also hold a client id are bounded far below by their topic: a KEYNOTIFY
/// STOP skips that check, but it only removes rows, found by reading the key first). Requests
/// with longer keys must be refused before they are replicated: the node's `max_key_bytes` is
/// capped at this.
pub const MAX_USER_KEY_BYTES: usize = MAX_STORED_KEY_BYTES - 1 - 8;
