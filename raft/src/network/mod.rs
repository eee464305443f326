//! Peer transport for openraft: a small framed protocol over persistent TCP connections (see
//! [`protocol`]), plain or mutual TLS ([`PeerTls`]). Replication pipelines AppendEntries on
//! one connection per follower; votes, heartbeats and snapshots use connections of their own;
//! snapshots travel as a stream of chunks, so no snapshot is ever held whole in memory. The
//! listener admits a bounded number of connections, a small hello first, peers whose
//! certificate names a member ([`PeerNames`]) and one snapshot of bounded size at a time
//! ([`InboundLimits`]).

mod client;
mod inbound;
mod peer_names;
pub mod protocol;
pub mod refusal;
mod server;
mod tls;

pub use client::{NetworkFactory, PeerClient, PeerTimeouts};
pub(crate) use client::{connect, read_response};
pub use inbound::InboundLimits;
pub use peer_names::PeerNames;
pub use refusal::{CertificateRefusal, ConnectionRefusal, HelloRefusal, SnapshotRefusal};
pub(crate) use server::serve;
pub use tls::PeerTls;
pub(crate) use tls::{Transport, describe_handshake_failure};
