//! The statestore node: request service, MQTT 5 session, CLI, metrics.
//!
//! Data flow: [`mqtt`] receives a request → [`service`] checks the envelope, parses it with
//! `statestore_protocol` (the wire formats, their own crate), reads linearizably or proposes
//! a typed mutation through `statestore_raft::RaftNode` → the reply goes back out through [`mqtt`]. [`node::run`]
//! assembles the pieces; [`cli`] and [`config`] describe them ([`runtime_config`] turns the
//! settings into each subsystem's); [`http`] and [`metrics`] make them observable.

pub mod admin;
pub mod admin_token;
pub mod admission;
pub mod authz;
pub mod cli;
pub mod config;
pub mod device_metrics;
pub mod error;
pub mod file_watch;
pub mod http;
pub mod https;
pub mod huge_pages;
pub mod kv;
pub mod metrics;
pub mod mqtt;
pub mod node;
pub mod outbound;
pub mod runtime_config;
pub mod service;
pub mod stall;
pub mod supervisor;
pub mod telemetry;
pub mod tls;
pub mod transport;
pub mod verdict;

pub use error::NodeError;
