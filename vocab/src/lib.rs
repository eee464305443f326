//! statestore-vocab: the words the crates of statestore share, so that each is defined once.
//!
//! Owns the hybrid logical clock ([`hlc`]), the spec's constants ([`spec`]: topics, hard limits), and the plain
//! enums and records both the storage layer and the node speak ([`keyspace`], [`devicebound`]).
//! Several of these are part of the replicated encoding (postcard, by variant position): their
//! variants are only ever appended. Knows nothing about storage, Raft, MQTT or RESP3, and
//! depends on nothing but serde and thiserror (a fuzzing crate uses it without tokio or sled).

pub mod devicebound;
pub mod hlc;
pub mod keyspace;
pub mod spec;
