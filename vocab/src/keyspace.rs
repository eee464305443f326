//! Words of the state store protocol's keyspace commands (protocol §2) shared by the node,
//! which parses them, and the storage layer, which applies them.

use serde::{Deserialize, Serialize};

/// The SET condition (protocol §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SetCondition {
    /// Plain SET.
    Always,
    /// `NX`: only if the key does not exist.
    IfAbsent,
    /// `NEX`: only if the key does not exist or already holds this value.
    IfAbsentOrEqual,
}
