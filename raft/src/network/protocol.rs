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
/// tokens' secrets, request ids and remembered replies a request digest).
pub const PROTOCOL_VERSION: u32 = 5;
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
    Append(Result<StreamAppendResult<TypeConfig>, String>),
    /// Answer to a vote or pre-vote.
    Vote(Result<VoteResponse<TypeConfig>, String>),
    /// Answer to a leadership transfer notice.
    TransferLeader(Result<TransferLeaderResponse<TypeConfig>, String>),
    /// Answer to a forwarded membership change.
    ChangeMembership(Result<(), String>),
    /// Answer to a finished snapshot transfer.
    Snapshot(Result<SnapshotResponse<TypeConfig>, String>),
    /// The request broke the protocol; the server closes the connection after this.
    Refused(String),
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
mod tests {
    use tokio_util::codec::Decoder;

    use super::*;

    #[test]
    fn hello_round_trips_and_garbage_is_an_error() {
        let frame = encode(&Request::Hello {
            protocol: PROTOCOL_VERSION,
            from: Some(3),
        });
        let back: Request = decode("request", &BytesMut::from(&frame[..])).expect("decodes");
        assert!(matches!(
            back,
            Request::Hello {
                protocol: PROTOCOL_VERSION,
                from: Some(3)
            }
        ));
        let garbage = BytesMut::from(&[codec::FORMAT_VERSION, 0xee, 0xff][..]);
        assert!(decode::<Request>("request", &garbage).is_err());
    }

    /// A frame body behind a 4-byte big-endian length, as the codec writes it.
    fn framed(len: u32, body: &[u8]) -> BytesMut {
        let mut bytes = BytesMut::from(&len.to_be_bytes()[..]);
        bytes.extend_from_slice(body);
        bytes
    }

    #[test]
    fn before_the_hello_a_large_length_header_is_refused_without_reserving_it() {
        let hello = encode(&Request::Hello {
            protocol: PROTOCOL_VERSION,
            from: Some(u64::MAX),
        });
        assert!(
            hello.len() * 16 < HELLO_FRAME_BYTES,
            "a hello ({} bytes) fits the pre-hello limit many times over",
            hello.len()
        );

        // A header claiming 100 MiB: refused as soon as the header is read, the buffer not
        // grown towards it.
        let mut codec = framing_before_hello();
        let mut src = framed(100 << 20, b"x");
        let err = codec.decode(&mut src).expect_err("oversized");
        assert!(is_oversized(&err), "{err}");
        assert!(src.capacity() < HELLO_FRAME_BYTES, "{}", src.capacity());
        // The full codec would have reserved it.
        let mut src = framed(100 << 20, b"x");
        assert!(framing().decode(&mut src).expect("waits").is_none());
        assert!(src.capacity() >= 100 << 20, "the old behaviour: reserved");

        // A hello passes; after it the limit is the full one.
        let mut codec = framing_before_hello();
        let mut src = framed(hello.len() as u32, &hello);
        let frame = codec.decode(&mut src).expect("decodes").expect("a frame");
        assert!(matches!(
            decode::<Request>("request", &frame).expect("hello"),
            Request::Hello { .. }
        ));
        accept_after_hello(&mut codec);
        let big = vec![7u8; 64 << 10];
        let mut src = framed(big.len() as u32, &big);
        let frame = codec.decode(&mut src).expect("decodes").expect("a frame");
        assert_eq!(frame.len(), big.len());
        let mut src = framed((MAX_FRAME_BYTES + 1) as u32, b"");
        assert!(is_oversized(
            &codec.decode(&mut src).expect_err("over the full limit")
        ));
        // Other errors are not mistaken for it.
        assert!(!is_oversized(&std::io::Error::other("reset")));
    }
}
