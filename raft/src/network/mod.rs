//! Peer transport for openraft: each RPC is an HTTP POST whose body is the versioned binary
//! encoding of the openraft request, answered with the encoded `Result`. Snapshots travel in
//! openraft's chunks (`snapshot_max_chunk_size`), so no snapshot is ever held whole in memory.

mod client;
mod server;

pub use client::{NetworkFactory, PeerClient};
pub use server::peer_router;

/// AppendEntries endpoint.
pub const APPEND_PATH: &str = "/raft/append";
/// RequestVote endpoint.
pub const VOTE_PATH: &str = "/raft/vote";
/// InstallSnapshot (one chunk) endpoint.
pub const SNAPSHOT_PATH: &str = "/raft/snapshot";
