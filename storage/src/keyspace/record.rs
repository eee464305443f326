//! Records stored in the keyspace tables.

use serde::{Deserialize, Serialize};

use crate::hlc::Hlc;
use crate::keyspace::mutation::Limits;
use crate::keyspace::outcome::Outcome;

/// One key's stored state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The value.
    #[serde(with = "serde_bytes")]
    pub value: Vec<u8>,
    /// Version of the write that produced the value.
    pub version: Hlc,
    /// Expiry instant (ms since epoch, entry time + PX), if any.
    pub expires_at_ms: Option<u64>,
    /// Fencing token protecting the key, if any.
    pub fencing_token: Option<Hlc>,
}

impl Record {
    /// True if the key no longer exists at `time_ms` (protocol §8).
    pub fn is_expired_at(&self, time_ms: u64) -> bool {
        self.expires_at_ms.is_some_and(|at| at <= time_ms)
    }
}

/// Store-wide replicated state kept next to the keys.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyspaceMeta {
    /// Keys stored (expired-but-unswept keys included until removed).
    pub keys: u64,
    /// Sum of key and value lengths stored.
    pub bytes: u64,
    /// Highest version ever issued; every new version is greater.
    pub max_version: Option<Hlc>,
    /// Highest entry time seen: apply's notion of "now" never goes backwards.
    pub time_floor_ms: u64,
    /// Quotas in force.
    pub limits: Limits,
}

/// A remembered reply (protocol §6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RememberedReply {
    /// After this instant a retry is treated as a new request.
    pub expires_at_ms: u64,
    /// What the original request got.
    pub outcome: Outcome,
}
