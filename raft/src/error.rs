//! The raft crate's one error type, [`Error`], and the error enums inside it: [`StopCause`]
//! (why Raft stopped or could not start), [`PeerError`] (the peer network: dialling a peer, its
//! hello, its answers, serving a peer's connection) and [`PeerTlsError`] (unusable
//! `cluster.tls` files). Refusals the listener counts are small enums of their own
//! ([`crate::network::refusal`]); openraft's network errors are built from these at the
//! transport's boundary, and its storage traits get them inside an `io::Error`. The `Display`
//! texts are the ones logged and shown to operators.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, Fatal, InitializeError, RaftError};

use crate::network::protocol::{PROTOCOL_VERSION, RemoteError};
use crate::network::refusal::{HelloRefusal, SnapshotRefusal};
use crate::types::{LogId, NodeId, TypeConfig};

/// Failures of the consensus layer as the node sees them.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// This node is not the leader; `leader` is who is, if known.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader {
        /// Current leader, if known.
        leader: Option<NodeId>,
    },
    /// The leader's lease had lapsed (no quorum acknowledgement for an election timeout), so
    /// Raft refused the write without logging it; the batcher writes it again once a quorum
    /// answers.
    #[error("the leader's lease lapsed: write refused until a quorum answers")]
    LeaseExpired,
    /// The proposal queue is full: the leader is not keeping up (the request gets no reply).
    #[error("proposal queue full")]
    Overloaded,
    /// Raft has stopped (shutdown or a fatal storage error), or could not start.
    #[error("raft stopped: {0}")]
    Stopped(#[from] StopCause),
    /// Storage failure.
    #[error("storage: {0}")]
    Storage(#[from] statestore_storage::StorageError),
    /// Applying a committed entry to the state machine failed.
    #[error("applying entry {log_id}: {source}")]
    Apply {
        /// The entry.
        log_id: LogId,
        /// Why.
        #[source]
        source: statestore_storage::StorageError,
    },
    /// Raft refused a membership change.
    #[error("membership change: {0}")]
    Membership(#[source] ClientWriteError<TypeConfig>),
    /// A node to add as a voter never acknowledged replication, so it was not added.
    #[error(
        "membership change: node {id} at {addr} acknowledged no replication within {within:?}, so it was not added \
         (is it running with --join, reachable from the leader at that address, and holding a certificate \
         of the cluster's CA when peers use TLS?)"
    )]
    LearnerSilent {
        /// The node.
        id: NodeId,
        /// Its Raft address.
        addr: String,
        /// How long the leader waited for its acknowledgement.
        within: Duration,
    },
    /// A node to add as a voter acknowledged replication but not the entry that added it in
    /// time (it kept needing newer snapshots, or it is far too slow), so it was not added.
    #[error(
        "membership change: node {id} at {addr} answered but did not catch up with the entry that added it within \
         {within:?}, so it was not added (is its disk or link much slower than the others', or are snapshots \
         taken more often than one can be sent? see snapshot_after_entries)"
    )]
    LearnerBehind {
        /// The node.
        id: NodeId,
        /// Its Raft address.
        addr: String,
        /// How long the leader waited.
        within: Duration,
    },
    /// A membership change forwarded to the leader failed on the way there or was refused by
    /// it.
    #[error("membership change: leader at {leader_addr}: {source}")]
    Forward {
        /// The leader's Raft address.
        leader_addr: String,
        /// What failed.
        #[source]
        source: PeerError,
    },
    /// A membership change forwarded to the leader did not finish in time.
    #[error(
        "membership change: leader at {leader_addr} did not finish the change within {within:?}"
    )]
    ForwardTimeout {
        /// The leader's Raft address.
        leader_addr: String,
        /// How long the forwarding waited.
        within: Duration,
    },
    /// openraft refused the Raft configuration.
    #[error("configuration: {0}")]
    Config(#[source] openraft::ConfigError),
    /// The peer network's TLS settings are unusable.
    #[error("configuration: {0}")]
    PeerTls(#[from] PeerTlsError),
    /// Registering the consensus metrics failed.
    #[error("configuration: metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// Initialising the cluster failed.
    #[error("configuration: bootstrap: {0}")]
    Bootstrap(#[source] RaftError<TypeConfig, InitializeError<TypeConfig>>),
    /// Network listener failure.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// A chunk of the Raft log could not be read while checking it.
    #[error("i/o: reading raft log chunk {}: {source}", .path.display())]
    ReadWal {
        /// The chunk file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A Raft log frame to write is longer than its kind may be.
    #[error("{what} frame of {len} bytes, over {max}")]
    FrameTooLong {
        /// The frame's kind.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The most it may be.
        max: u32,
    },
    /// A Raft log frame read claims a length beyond what its kind may be: damage.
    #[error("{what} frame length {len} over {max}")]
    FrameLengthOver {
        /// The frame's kind.
        what: &'static str,
        /// The length stored.
        len: u32,
        /// The most it may be.
        max: u32,
    },
    /// A Raft log frame shorter than its length says.
    #[error("{what} frame cut short")]
    FrameCutShort {
        /// The frame's kind.
        what: &'static str,
    },
    /// The Raft log on disk is damaged where it is not a torn last write: the node refuses to
    /// start rather than drop acknowledged entries (the message names the file, the offset and
    /// the way out).
    #[error("{0}")]
    WalCorrupt(Box<crate::wal_check::WalCorruption>),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Shows an inbound handshake failure as [`crate::network::describe_handshake_failure`] does.
struct InboundHandshakeText<'e>(&'e std::io::Error);

impl std::fmt::Display for InboundHandshakeText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::network::describe_handshake_failure(self.0, f)
    }
}

/// Why Raft stopped, could not start, or is no longer there to take a request.
#[derive(Debug, thiserror::Error)]
pub enum StopCause {
    /// openraft stopped: a fatal error (a failed log write or fsync, a failed apply, a panic
    /// in its core), or a shutdown.
    #[error(transparent)]
    Fatal(#[from] Fatal<TypeConfig>),
    /// openraft's metrics channel closed: Raft is gone.
    #[error("raft metrics closed")]
    MetricsClosed,
    /// Stopping Raft's tasks failed.
    #[error("{0}")]
    Shutdown(#[source] tokio::task::JoinError),
    /// The task opening the Raft log failed.
    #[error("opening the log: {0}")]
    OpenLog(#[source] tokio::task::JoinError),
    /// The state machine could not be opened.
    #[error("state machine: {0}")]
    StateMachine(#[source] std::io::Error),
    /// The proposal batcher is gone.
    #[error("proposal batcher stopped")]
    BatcherStopped,
    /// A write's answer was dropped before it came.
    #[error("raft dropped the write")]
    WriteDropped,
    /// Raft dropped a write's answer.
    #[error("raft dropped the write (shutting down or leadership lost)")]
    WriteAbandoned,
    /// Leadership changed before the write committed.
    #[error("leadership changed before the write committed; outcome unknown")]
    LeadershipChanged,
    /// Applying a batch gave another number of outcomes than it had proposals.
    #[error("batch of {proposals} proposals got {outcomes} outcomes")]
    OutcomeCount {
        /// Proposals in the batch.
        proposals: usize,
        /// Outcomes Raft returned.
        outcomes: usize,
    },
    /// The batch this proposal was in failed (every proposal of it gets this).
    #[error("{0}")]
    Batch(#[source] Arc<Error>),
}

/// Unusable peer TLS settings (`cluster.tls`): which setting, and why.
#[derive(Debug, thiserror::Error)]
pub enum PeerTlsError {
    /// A file could not be read.
    #[error("peer TLS: {setting}: {}: {source}", .path.display())]
    Read {
        /// The setting naming the file.
        setting: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A file is no valid PEM.
    #[error("peer TLS: {setting}: {source}")]
    Pem {
        /// The setting naming the file.
        setting: &'static str,
        /// The parser's error.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// A file holds no certificate.
    #[error("peer TLS: {setting}: no certificate in it")]
    NoCertificate {
        /// The setting naming the file.
        setting: &'static str,
    },
    /// rustls refused what it was given.
    #[error("peer TLS: {what}: {source}")]
    Rustls {
        /// What was being built, or the settings it came from.
        what: &'static str,
        /// rustls's error.
        #[source]
        source: rustls::Error,
    },
    /// The client certificate verifier could not be built.
    #[error("peer TLS: client verifier: {0}")]
    Verifier(#[source] rustls::server::VerifierBuilderError),
}

/// A failure of the peer network. `Display` is the text openraft and the logs get.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    // --- A peer's address.
    /// The address has no `:port`.
    #[error("peer address {addr:?} is not host:port")]
    NotHostPort {
        /// The address.
        addr: String,
    },
    /// The host of the address is neither a DNS name nor an IP address.
    #[error("peer address {addr:?}: {host:?} is no DNS name or IP address: {source}")]
    BadHost {
        /// The address.
        addr: String,
        /// Its host part.
        host: String,
        /// Why it is no name.
        #[source]
        source: rustls::pki_types::InvalidDnsNameError,
    },

    // --- Dialling a peer and its hello.
    /// The TCP connection failed.
    #[error("connect {addr}: {source}")]
    Connect {
        /// The peer's address.
        addr: String,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
    /// The TLS handshake failed.
    #[error("TLS handshake with {addr}: {source}")]
    Handshake {
        /// The peer's address.
        addr: String,
        /// rustls's error.
        #[source]
        source: std::io::Error,
    },
    /// Sending the hello failed.
    #[error("hello to {addr}: {source}")]
    SendHello {
        /// The peer's address.
        addr: String,
        /// The socket error.
        #[source]
        source: std::io::Error,
    },
    /// The peer speaks another protocol version.
    #[error("{addr} speaks peer protocol {protocol}, this node {PROTOCOL_VERSION}")]
    OtherProtocol {
        /// The peer's address.
        addr: String,
        /// Its version.
        protocol: u32,
    },
    /// The peer refused the hello.
    #[error("{addr} refused: {reason}")]
    HelloRefused {
        /// The peer's address.
        addr: String,
        /// Its refusal.
        reason: String,
    },
    /// The peer answered the hello with something else than a hello.
    #[error("{addr} answered the hello with something else")]
    NoHelloAnswer {
        /// The peer's address.
        addr: String,
    },
    /// Connecting and the hello took longer than the connect deadline.
    #[error("connect {addr}: no answer within {within:?}")]
    ConnectTimeout {
        /// The peer's address.
        addr: String,
        /// The deadline.
        within: Duration,
    },

    // --- Requests and their answers.
    /// Sending a request (or reading the snapshot file to send) failed.
    #[error("{0}")]
    Send(#[source] std::io::Error),
    /// An answer did not decode.
    #[error("{0}")]
    UndecodableAnswer(#[source] statestore_storage::StorageError),
    /// Reading an answer failed.
    #[error("reading answer: {0}")]
    ReadAnswer(#[source] std::io::Error),
    /// The peer closed the connection before answering.
    #[error("peer closed the connection")]
    Closed,
    /// The answer is not one to the request sent (`to` names the request).
    #[error("answer of another kind to {to}")]
    UnexpectedAnswer {
        /// The request, as the message names it.
        to: &'static str,
    },
    /// The answer to a forwarded membership change is of another kind.
    #[error("answer of another kind")]
    UnexpectedForwardAnswer,
    /// The peer refused the request (it broke the protocol, or the peer failed serving it).
    #[error("refused: {reason}")]
    Refused {
        /// The peer's refusal.
        reason: String,
    },
    /// The peer could not carry out the request.
    #[error(transparent)]
    Remote(RemoteError),
    /// The peer's Raft has stopped.
    #[error("raft on node {target} stopped: {source}")]
    RemoteStopped {
        /// The peer.
        target: NodeId,
        /// Its answer.
        #[source]
        source: RemoteError,
    },
    /// The AppendEntries writer could not send a request.
    #[error("sending AppendEntries failed")]
    AppendNotSent,
    /// The AppendEntries writer task failed.
    #[error("AppendEntries writer: {0}")]
    AppendWriter(#[source] tokio::task::JoinError),
    /// openraft handed over a snapshot that is not this node's export (a build's result or a
    /// received one): nothing to send.
    #[error("not a snapshot to send")]
    NotSendable,
    /// The snapshot to send could not be written or opened.
    #[error("preparing the snapshot to send: {0}")]
    SnapshotNotWritten(#[source] std::io::Error),
    /// The peer did not take a snapshot chunk in time.
    #[error("snapshot chunk not accepted in time")]
    SnapshotChunkTimeout,
    /// The peer did not answer a snapshot transfer in time.
    #[error("snapshot not installed in time")]
    SnapshotInstallTimeout,
    /// The peer refused a snapshot transfer.
    #[error("snapshot refused: {reason}")]
    SnapshotRefusedByPeer {
        /// The peer's refusal.
        reason: String,
    },
    /// The peer could not install a snapshot.
    #[error("installing snapshot: {0}")]
    SnapshotNotInstalled(#[source] RemoteError),

    // --- Serving a peer's connection (why this node closed it).
    /// An inbound TLS handshake failed (a refused certificate shows its refusal's message).
    #[error("{}", InboundHandshakeText(.0))]
    InboundHandshake(#[source] std::io::Error),
    /// An inbound TLS handshake did not finish in time.
    #[error("no handshake within {within:?}")]
    InboundHandshakeTimeout {
        /// The deadline.
        within: Duration,
    },
    /// The first frame was no acceptable hello.
    #[error(transparent)]
    NoHello(#[from] HelloRefusal),
    /// Reading a request failed.
    #[error("reading: {0}")]
    ReadRequest(#[source] std::io::Error),
    /// A request did not decode.
    #[error("undecodable request: {0}")]
    UndecodableRequest(#[source] statestore_storage::StorageError),
    /// A second hello.
    #[error("second hello")]
    SecondHello,
    /// An inbound snapshot transfer was refused.
    #[error(transparent)]
    Snapshot(#[from] SnapshotRefusal),
    /// Creating the file of an inbound snapshot failed.
    #[error("creating {}: {source}", .path.display())]
    CreateSnapshot {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Writing an inbound snapshot's file failed.
    #[error("writing snapshot: {0}")]
    WriteSnapshot(#[source] std::io::Error),
    /// A snapshot chunk without a snapshot begun.
    #[error("stray snapshot chunk")]
    StraySnapshotChunk,
    /// A snapshot end without a snapshot begun.
    #[error("stray snapshot end")]
    StraySnapshotEnd,
    /// The connection's answer writer has stopped.
    #[error("connection writer stopped")]
    WriterStopped,
}
