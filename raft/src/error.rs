//! The raft crate's one error type.

use crate::types::NodeId;

/// Failures of the consensus layer as the node sees them.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// This node is not the leader; `leader` is who is, if known.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader {
        /// Current leader, if known.
        leader: Option<NodeId>,
    },
    /// The leader could not confirm its leadership with a quorum (partitioned or deposed).
    #[error("leadership not confirmed by a quorum")]
    QuorumNotReached,
    /// The proposal queue is full: the leader is not keeping up (the request gets no reply).
    #[error("proposal queue full")]
    Overloaded,
    /// Raft has stopped (shutdown or a fatal storage error).
    #[error("raft stopped: {0}")]
    Stopped(String),
    /// Storage failure.
    #[error("storage: {0}")]
    Storage(#[from] statestore_storage::StorageError),
    /// Membership change refused.
    #[error("membership change: {0}")]
    Membership(String),
    /// Bad configuration.
    #[error("configuration: {0}")]
    Config(String),
    /// Network listener failure.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The Raft log on disk is damaged where it is not a torn last write: the node refuses to
    /// start rather than drop acknowledged entries (the message names the file, the offset and
    /// the way out).
    #[error("{0}")]
    WalCorrupt(Box<crate::wal_check::WalCorruption>),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
