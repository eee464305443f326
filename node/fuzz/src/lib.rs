//! Compiles the node's pure protocol layer (`node/src/protocol`), the
//! device-bound codecs (`node/src/devicebound`, which builds on it) and the
//! `statestore kv` client's reply parsers (`node/src/kv/wire.rs`) on their own
//! for the fuzz targets. Including the sources rather than depending on
//! `statestore-node` keeps fuzz builds to seconds and independent of the node's
//! async, MQTT, Raft and storage crates, and it enforces the modules' purity:
//! an import from elsewhere in the node crate breaks this build.

#[path = "../../src/protocol/mod.rs"]
pub mod protocol;

#[path = "../../src/devicebound/mod.rs"]
pub mod devicebound;

#[path = "../../src/kv/wire.rs"]
pub mod kv_wire;
