//! The openraft type configuration of statestore and short aliases for its generic types.

use std::sync::Arc;

use openraft::BasicNode;
use statestore_storage::keyspace::{Outcome, Proposal};

openraft::declare_raft_types!(
    /// statestore's Raft types: a log entry carries a batch of [`Proposal`]s, apply answers one
    /// [`Outcome`] per proposal, snapshots stream from files.
    pub TypeConfig:
        D = Arc<Vec<Proposal>>,
        R = Vec<Outcome>,
        NodeId = u64,
        Node = BasicNode,
        SnapshotData = tokio::fs::File,
);

/// Node ids are small integers from the configuration.
pub type NodeId = u64;
/// Peer description: its Raft listener address.
pub type Node = BasicNode;
/// The Raft handle.
pub type Raft = openraft::Raft<TypeConfig>;
/// A log entry.
pub type Entry = openraft::Entry<TypeConfig>;
/// A log id.
pub type LogId = openraft::LogId<NodeId>;
/// A vote.
pub type Vote = openraft::Vote<NodeId>;
/// Membership as stored with its log id.
pub type StoredMembership = openraft::StoredMembership<NodeId, Node>;
/// Snapshot metadata.
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, Node>;
/// openraft's storage error.
pub type StorageError = openraft::StorageError<NodeId>;
/// Raft metrics.
pub type RaftMetrics = openraft::RaftMetrics<NodeId, Node>;
