//! Peer transport for openraft: a small framed protocol over persistent TCP connections (see
//! [`protocol`]), plain or mutual TLS ([`PeerTls`]). Replication pipelines AppendEntries on
//! one connection per follower; votes, heartbeats and snapshots use connections of their own;
//! snapshots travel as a stream of chunks, so no snapshot is ever held whole in memory.

mod client;
pub mod protocol;
mod server;
mod tls;

pub use client::{NetworkFactory, PeerClient, PeerTimeouts};
pub(crate) use client::{connect, read_response};
pub(crate) use server::serve;
pub use tls::PeerTls;
pub(crate) use tls::Transport;
