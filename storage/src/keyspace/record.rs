//! Records stored in the keyspace tables, and the borrowed twins apply uses on its hot path to
//! read and write them without copying values (same bytes on disk, pinned by `record/tests.rs`).

use serde::{Deserialize, Serialize};

use crate::codec;

use crate::keyspace::limits::Limits;
use statestore_vocab::hlc::Hlc;

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

/// Store-wide replicated state kept next to the keys, in one record. The keyspace keeps the key,
/// version and registration fields; the machine ([`crate::machine::Machine`]), which reads and
/// writes the record once per transaction, keeps the time floor, the reply-memory fields and the
/// limits.
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
    /// KEYNOTIFY registrations stored, all clients together.
    pub registrations: u64,
    /// Remembered replies stored (expired-but-unpruned ones included until removed).
    pub remembered_replies: u64,
    /// Sum of the counted sizes of the remembered replies: reply-table key length plus encoded
    /// value length each.
    pub remembered_reply_bytes: u64,
    /// Remembered replies evicted to stay within the reply-memory caps, since the store began
    /// (never decreases; pruning of expired replies is not counted).
    pub replies_evicted: u64,
    /// New KEYNOTIFY registrations refused because their key already had
    /// `limits.max_observers_per_key` observers, since the store began (never decreases).
    pub observer_cap_refusals: u64,
    /// Requests that found a live remembered reply of their client and correlation data for
    /// another request (another digest), since the store began: each was executed as new.
    pub reply_mismatches: u64,
    /// Quotas in force.
    pub limits: Limits,
}

/// A [`Record`] as apply reads it: the value stays in the stored bytes (no copy of what can
/// be a 4 MiB value just to compare or measure it). Decodes exactly the bytes of a `Record`.
#[derive(Debug, Deserialize)]
pub(crate) struct RecordView<'a> {
    #[serde(borrow, with = "serde_bytes")]
    pub value: &'a [u8],
    pub version: Hlc,
    pub expires_at_ms: Option<u64>,
    pub fencing_token: Option<Hlc>,
}

/// A [`Record`] as apply writes it, borrowing its parts from the proposal. Encodes to exactly
/// the bytes of the equal `Record`.
#[derive(Debug, Serialize)]
pub(crate) struct RecordOut<'a> {
    #[serde(with = "serde_bytes")]
    pub value: &'a [u8],
    pub version: &'a Hlc,
    pub expires_at_ms: Option<u64>,
    pub fencing_token: Option<&'a Hlc>,
}

pub(crate) use codec::decode_borrowed;

/// The value of a registration row in [`crate::keyspace::layout::Table::ObserversByKey`]: the
/// store's highest version when the client registered (its *floor*, §7: a change at or below
/// it came before the registration and is not notified to it). Empty when no version had been
/// issued yet.
pub(crate) fn encode_observer_floor(floor: Option<&Hlc>) -> Vec<u8> {
    floor.map_or_else(Vec::new, codec::encode)
}

/// The floor a registration row holds ([`encode_observer_floor`]); an empty value has none.
pub(crate) fn decode_observer_floor(value: &[u8]) -> crate::error::Result<Option<Hlc>> {
    if value.is_empty() {
        return Ok(None);
    }
    codec::decode("registration floor", value).map(Some)
}

#[cfg(test)]
mod tests;
