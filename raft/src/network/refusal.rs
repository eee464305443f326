//! Why the Raft listener refuses a peer, as types: a connection closed before its hello was
//! accepted ([`ConnectionRefusal`], [`HelloRefusal`]), a client certificate naming no member
//! ([`CertificateRefusal`]) and an inbound snapshot transfer ([`SnapshotRefusal`]). Each counted
//! refusal has a `label()`, the `reason` label of its counter in [`crate::metrics`]; `Display`
//! is the text logged (and, where the protocol sends one, the refusal's answer).
//!
//! Knows nothing of sockets or counters: [`super::inbound`] and [`super::server`] count and
//! send these.

use crate::network::protocol::{HELLO_FRAME_BYTES, PROTOCOL_VERSION};
use crate::types::NodeId;

/// Why an inbound connection was closed before its hello was accepted: the `reason` label of
/// `statestore_raft_peer_connections_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionRefusal {
    /// The listener already had its cap of open peer connections.
    Limit,
    /// No hello (or its answer not taken) within the connect deadline.
    Timeout,
    /// A first frame larger than a hello may be.
    Oversized,
    /// A first frame that is no hello, or a hello of another protocol version.
    BadHello,
}

impl ConnectionRefusal {
    /// Every refusal, in label order.
    pub const ALL: [ConnectionRefusal; 4] = [
        ConnectionRefusal::Limit,
        ConnectionRefusal::Timeout,
        ConnectionRefusal::Oversized,
        ConnectionRefusal::BadHello,
    ];

    /// The metric label.
    pub const fn label(self) -> &'static str {
        match self {
            ConnectionRefusal::Limit => "limit",
            ConnectionRefusal::Timeout => "timeout",
            ConnectionRefusal::Oversized => "oversized",
            ConnectionRefusal::BadHello => "bad_hello",
        }
    }
}

/// Why a connection's first frame was not an acceptable hello. `Display` is the text logged
/// when the connection closes.
#[derive(Debug, thiserror::Error)]
pub enum HelloRefusal {
    /// Nothing arrived by the deadline.
    #[error("no hello in time")]
    Timeout,
    /// The peer closed the connection without sending anything.
    #[error("closed before its hello")]
    Closed,
    /// The first frame's length header claimed more than a hello may be.
    #[error("a first frame over {HELLO_FRAME_BYTES} bytes")]
    Oversized,
    /// Reading the first frame failed.
    #[error("reading: {0}")]
    Unreadable(#[source] std::io::Error),
    /// A hello of another protocol version.
    #[error("peer protocol {protocol} from node {from:?}, this node speaks {PROTOCOL_VERSION}")]
    OtherProtocol {
        /// The version the peer speaks.
        protocol: u32,
        /// The node id it gave, if any.
        from: Option<NodeId>,
    },
    /// A request of another kind before the hello.
    #[error("no hello")]
    NotAHello,
    /// The first frame does not decode.
    #[error("undecodable request: {0}")]
    Undecodable(#[source] statestore_storage::StorageError),
    /// Sending the hello's answer failed.
    #[error("answering the hello: {0}")]
    AnswerFailed(#[source] std::io::Error),
    /// The hello's answer was not taken by the deadline.
    #[error("the hello's answer not taken in time")]
    AnswerTimeout,
}

impl HelloRefusal {
    /// The counter it is counted in; `None` for a connection closed before it sent anything.
    pub fn counted_as(&self) -> Option<ConnectionRefusal> {
        match self {
            HelloRefusal::Closed => None,
            HelloRefusal::Timeout | HelloRefusal::AnswerTimeout => Some(ConnectionRefusal::Timeout),
            HelloRefusal::Oversized => Some(ConnectionRefusal::Oversized),
            HelloRefusal::Unreadable(_)
            | HelloRefusal::OtherProtocol { .. }
            | HelloRefusal::NotAHello
            | HelloRefusal::Undecodable(_)
            | HelloRefusal::AnswerFailed(_) => Some(ConnectionRefusal::BadHello),
        }
    }

    /// The refusal sent back to the peer, if one is (only to a first frame that was read).
    pub fn answer(&self) -> Option<String> {
        match self {
            HelloRefusal::OtherProtocol { .. } | HelloRefusal::Undecodable(_) => {
                Some(self.to_string())
            }
            HelloRefusal::NotAHello => Some("the first frame must be a hello".to_owned()),
            _ => None,
        }
    }
}

/// Why an inbound snapshot transfer was refused: the `reason` label of
/// `statestore_raft_snapshots_refused_total`. `Display` is the refusal sent to the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotRefusal {
    /// The transfer passed `cluster.max_snapshot_mb` (its partial file is removed).
    #[error("the snapshot is larger than this node accepts ({max} bytes; cluster.max_snapshot_mb)")]
    TooLarge {
        /// Bytes this node accepts.
        max: u64,
    },
    /// Another snapshot was still being received.
    #[error("another snapshot is being received")]
    Busy,
    /// The received file failed its checks (framing, checksum, row order): it is removed
    /// before Raft sees it, and the leader sends it again.
    #[error("the snapshot failed this node's checks (framing, checksum or row order)")]
    Corrupt,
}

impl SnapshotRefusal {
    /// Every label, in label order.
    pub const LABELS: [&'static str; 3] = ["too_large", "busy", "corrupt"];

    /// The metric label.
    pub const fn label(&self) -> &'static str {
        match self {
            SnapshotRefusal::TooLarge { .. } => Self::LABELS[0],
            SnapshotRefusal::Busy => Self::LABELS[1],
            SnapshotRefusal::Corrupt => Self::LABELS[2],
        }
    }
}

/// Why a peer's client certificate was refused after its CA check (the handshake fails with a
/// `bad_certificate` alert and this message).
#[derive(Debug, thiserror::Error)]
pub enum CertificateRefusal {
    /// rustls could not parse the certificate.
    #[error("{0}")]
    Unparsable(#[source] rustls::Error),
    /// The certificate is valid for none of the hosts.
    #[error(
        "the peer certificate names {names}, none of them a member's host ({})",
        .hosts.join(", ")
    )]
    NoMemberHost {
        /// The certificate's subjectAltNames as rustls reports them.
        names: String,
        /// The hosts it was checked against, sorted.
        hosts: Vec<String>,
    },
}

#[cfg(test)]
mod tests;
