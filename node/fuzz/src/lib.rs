//! Compiles the node's pure protocol layer (`node/src/protocol`) on its own for
//! the fuzz targets. Including the sources rather than depending on
//! `statestore-node` keeps fuzz builds to seconds and independent of the node's
//! async, MQTT, Raft and storage crates, and it enforces the module's purity:
//! an import from elsewhere in the node crate breaks this build.

#[path = "../../src/protocol/mod.rs"]
pub mod protocol;
