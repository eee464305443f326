//! The peer wire protocol: length-delimited frames over one TCP connection, each frame the
//! versioned binary encoding of a [`Request`] or a [`Response`].
//!
//! A connection starts with [`Request::Hello`] / [`Response::Hello`]. After that every request
//! is answered by exactly one response, in request order, so a client may pipeline requests
//! (AppendEntries streams keep many in flight). A snapshot is one logical request spread over
//! `SnapshotBegin`, any number of `SnapshotChunk`s and `SnapshotEnd`, answered once. A response
//! to an AppendEntries that ended the server's stream (conflict, higher vote, fatal) is the last
//! frame on that connection: the server closes it, and the client opens a new one.

use bytes::{Bytes, BytesMut};
use openraft::raft::{
    AppendEntriesRequest, SnapshotResponse, StreamAppendResult, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use statestore_storage::codec;
use tokio_util::codec::{LengthDelimitedCodec, LengthDelimitedCodecError};

use crate::error::Error;
use crate::membership::MembershipChange;
use crate::types::{NodeId, SnapshotMeta, TypeConfig, Vote};

/// Version of this protocol; both ends must speak the same. It also covers the replicated
/// entry format: a peer that could not decode this build's log entries must be refused at the
/// hello with a message, not fail later on an undecodable entry. Bumped with every data
/// format that changes what entries carry or how they apply: 2 came with data format 4
/// (device-bound commands), 3 with data format 5 (message lock tokens name their message, so a
/// settlement applies differently), 4 with data format 6 (device rows carry their messages'
/// delivery state, snapshots hold no queue index tables, and a SEND can be refused at the
/// store-wide message cap), 5 with data format 7 (the limits carry the per-key observer cap, a
/// KEYNOTIFY registration stores a floor, device-bound entries carry the seed of their lock
/// tokens' secrets, request ids and remembered replies a request digest), 6: typed errors in
/// responses ([`RemoteError`] where a string was), 7 with data format 9 (the state database is
/// fjall, whose keys are at most 65,535 bytes: this build admits keys of at most
/// [`statestore_storage::MAX_USER_KEY_BYTES`], and an entry of an earlier build holding a
/// longer one could not be written into its state).
pub const PROTOCOL_VERSION: u32 = 7;
/// Largest frame accepted once the hello was: a full AppendEntries of proposal batches (the
/// batcher keeps a batch near 4 MiB plus one value of at most 4 MiB; openraft sends at most
/// `max_payload_entries`).
pub const MAX_FRAME_BYTES: usize = 128 << 20;
/// Largest frame a server accepts before the hello: a hello is a few bytes. A length header
/// claiming more is refused as it is read, so a connection that has not said hello can make
/// the server reserve no more than this.
pub const HELLO_FRAME_BYTES: usize = 4 << 10;
/// Bytes of snapshot data per chunk frame.
pub const SNAPSHOT_CHUNK_BYTES: usize = 1 << 20;

/// A request from a peer.
#[derive(Serialize, Deserialize)]
#[serde(bound = "")]
pub enum Request {
    /// First frame of every connection.
    Hello {
        /// [`PROTOCOL_VERSION`] of the caller.
        protocol: u32,
        /// The caller's node id, if it has one (a forwarding admin call may not).
        from: Option<NodeId>,
    },
    /// AppendEntries (replication or heartbeat).
    Append(AppendEntriesRequest<TypeConfig>),
    /// RequestVote.
    Vote(VoteRequest<TypeConfig>),
    /// Pre-vote round.
    PreVote(VoteRequest<TypeConfig>),
    /// Leadership transfer notice.
    TransferLeader(TransferLeaderRequest<TypeConfig>),
    /// A membership change forwarded to the leader.
    ChangeMembership(MembershipChange),
    /// Start of a snapshot transfer.
    SnapshotBegin {
        /// The sender's vote.
        vote: Vote,
        /// What the snapshot covers.
        meta: SnapshotMeta,
    },
    /// Next bytes of the snapshot file.
    SnapshotChunk(#[serde(with = "serde_bytes")] Vec<u8>),
    /// The snapshot file is complete: install it.
    SnapshotEnd,
}

/// A response, in request order.
#[derive(Serialize, Deserialize)]
#[serde(bound = "")]
pub enum Response {
    /// Answer to [`Request::Hello`].
    Hello {
        /// [`PROTOCOL_VERSION`] of the server.
        protocol: u32,
    },
    /// Answer to an AppendEntries; `Err` when the server's Raft has stopped.
    Append(Result<StreamAppendResult<TypeConfig>, RemoteError>),
    /// Answer to a vote or pre-vote.
    Vote(Result<VoteResponse<TypeConfig>, RemoteError>),
    /// Answer to a leadership transfer notice.
    TransferLeader(Result<TransferLeaderResponse<TypeConfig>, RemoteError>),
    /// Answer to a forwarded membership change.
    ChangeMembership(Result<(), RemoteError>),
    /// Answer to a finished snapshot transfer.
    Snapshot(Result<SnapshotResponse<TypeConfig>, RemoteError>),
    /// The request broke the protocol; the server closes the connection after this. (Its
    /// place and shape are those of every version, like the hello's, so that a peer of
    /// another version still reads why it was refused.)
    Refused(String),
}

/// A request the server took but could not carry out: what kind of failure, and the server's
/// own message (its `Display`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct RemoteError {
    /// What failed.
    pub kind: RemoteErrorKind,
    /// The server's description.
    pub message: String,
}

/// The kinds of [`RemoteError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RemoteErrorKind {
    /// The server's Raft has stopped (shut down, or a fatal storage error).
    Stopped,
    /// The server is not the leader (a forwarded membership change).
    NotLeader,
    /// Raft refused the request (a membership change it does not allow).
    Refused,
    /// The server could not store what it was sent (a received snapshot).
    Storage,
}

impl RemoteErrorKind {
    /// A short name for logs and metric labels.
    pub const fn label(self) -> &'static str {
        match self {
            RemoteErrorKind::Stopped => "stopped",
            RemoteErrorKind::NotLeader => "not_leader",
            RemoteErrorKind::Refused => "refused",
            RemoteErrorKind::Storage => "storage",
        }
    }
}

impl RemoteError {
    /// A failure of `kind` described by `err`.
    pub fn new(kind: RemoteErrorKind, err: impl std::fmt::Display) -> RemoteError {
        RemoteError {
            kind,
            message: err.to_string(),
        }
    }

    /// The server's Raft stopped: `err` is its fatal error.
    pub fn stopped(err: impl std::fmt::Display) -> RemoteError {
        RemoteError::new(RemoteErrorKind::Stopped, err)
    }

    /// This crate's error as the peer gets it.
    pub fn from_error(err: &Error) -> RemoteError {
        let kind = match err {
            Error::NotLeader { .. } | Error::LeaseExpired => RemoteErrorKind::NotLeader,
            Error::Stopped(_) => RemoteErrorKind::Stopped,
            Error::Storage(_)
            | Error::Apply { .. }
            | Error::Io(_)
            | Error::ReadWal { .. }
            | Error::FrameTooLong { .. }
            | Error::FrameLengthOver { .. }
            | Error::FrameCutShort { .. }
            | Error::WalCorrupt(_) => RemoteErrorKind::Storage,
            Error::Overloaded
            | Error::Membership(_)
            | Error::LearnerSilent { .. }
            | Error::LearnerBehind { .. }
            | Error::Config(_)
            | Error::PeerTls(_)
            | Error::Metrics(_)
            | Error::Bootstrap(_)
            | Error::Forward { .. }
            | Error::ForwardTimeout { .. } => RemoteErrorKind::Refused,
        };
        RemoteError::new(kind, err)
    }
}

/// The frame codec both ends use (a server starts with [`framing_before_hello`]).
pub fn framing() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(MAX_FRAME_BYTES)
        .new_codec()
}

/// The codec of a server connection until its hello is accepted: frames of at most
/// [`HELLO_FRAME_BYTES`]. Raise it with [`accept_after_hello`].
pub fn framing_before_hello() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(HELLO_FRAME_BYTES)
        .new_codec()
}

/// Raises a server connection's codec to [`MAX_FRAME_BYTES`] once its hello was accepted.
pub fn accept_after_hello(codec: &mut LengthDelimitedCodec) {
    codec.set_max_frame_length(MAX_FRAME_BYTES);
}

/// True when `err` is the codec's refusal of a frame longer than its limit.
pub fn is_oversized(err: &std::io::Error) -> bool {
    err.get_ref()
        .is_some_and(|inner| inner.is::<LengthDelimitedCodecError>())
}

/// Encodes a message into one frame body.
pub fn encode<T: Serialize>(message: &T) -> Bytes {
    Bytes::from(codec::encode(message))
}

/// Decodes one frame body.
pub fn decode<T: serde::de::DeserializeOwned>(
    what: &'static str,
    frame: &BytesMut,
) -> Result<T, statestore_storage::StorageError> {
    codec::decode(what, frame)
}

#[cfg(test)]
mod tests;
