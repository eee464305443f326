//! [`Limits`]: the quotas of protocol §9 that apply decides, part of the replicated state (in
//! the [`crate::keyspace::KeyspaceMeta`] record): the keyspace judges keys, bytes and
//! registrations by them, the machine the reply memory.

use serde::{Deserialize, Serialize};

/// Quotas of protocol §9 that apply decides. They are replicated state, so every replica
/// judges a write against the same numbers whatever its local configuration says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Limits {
    /// Keys stored.
    pub max_keys: u64,
    /// Sum of key and value lengths stored.
    pub max_bytes: u64,
    /// KEYNOTIFY registrations per client.
    pub max_registrations_per_client: u32,
    /// KEYNOTIFY registrations of all clients together (client ids are whatever requests
    /// say, so the per-client cap alone bounds nothing).
    pub max_registrations: u64,
    /// KEYNOTIFY registrations of one key, all clients together: what one change of a key
    /// can fan out to (the same reason: one caller can register under any number of ids).
    pub max_observers_per_key: u32,
    /// Remembered replies (§6). Over it, the replies with the earliest expiry are evicted.
    pub max_remembered_replies: u64,
    /// Bytes of remembered replies, each counted as its reply-table key plus its encoded
    /// value. Over it, the replies with the earliest expiry are evicted.
    pub max_remembered_reply_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_keys: 1_000_000,
            max_bytes: 1 << 30,
            max_registrations_per_client: 1_000,
            max_registrations: 1_000_000,
            max_observers_per_key: 1_000,
            max_remembered_replies: 1_000_000,
            max_remembered_reply_bytes: 256 << 20,
        }
    }
}
