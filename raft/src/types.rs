//! The openraft type configuration of statestore and short aliases for its generic types.

use openraft::BasicNode;
use statestore_storage::machine::Outcome;

use crate::batch::Batch;
use crate::state_machine::StateMachine;

openraft::declare_raft_types!(
    /// statestore's Raft types: a log entry carries a [`Batch`] of proposals, apply answers one
    /// [`Outcome`] per proposal.
    pub TypeConfig:
        D = Batch,
        R = Vec<Outcome>,
        NodeId = u64,
        Node = BasicNode,
);

/// Node ids are small integers from the configuration.
pub type NodeId = u64;
/// Peer description: its Raft listener address.
pub type Node = BasicNode;
/// The Raft handle.
pub type Raft = openraft::Raft<TypeConfig, StateMachine>;
/// A log entry.
pub type Entry = openraft::alias::EntryOf<TypeConfig>;
/// A log entry's payload (blank, a batch of proposals, or a membership change).
pub type EntryPayload = openraft::alias::PayloadOf<TypeConfig>;
/// A log id.
pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
/// The committed leader id inside a log id.
pub type CommittedLeaderId = openraft::alias::CommittedLeaderIdOf<TypeConfig>;
/// A vote.
pub type Vote = openraft::alias::VoteOf<TypeConfig>;
/// Membership as stored with its log id.
pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
/// Snapshot metadata.
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;
/// A snapshot of the state machine, backed by a file.
pub type Snapshot = openraft::alias::SnapshotOf<TypeConfig, crate::snapshot::SnapshotData>;
/// Raft metrics.
pub type RaftMetrics = openraft::RaftMetrics<TypeConfig>;
/// openraft's storage error.
pub type StorageError = openraft::StorageError<TypeConfig>;
