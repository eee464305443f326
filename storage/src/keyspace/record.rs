//! Records stored in the keyspace tables, and the borrowed twins apply uses on its hot path to
//! read and write them without copying values (same bytes on disk, pinned by the tests below).

use serde::{Deserialize, Serialize};

use crate::codec;

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

/// A remembered reply (protocol §6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RememberedReply {
    /// After this instant a retry is treated as a new request.
    pub expires_at_ms: u64,
    /// [`crate::keyspace::RequestId::digest`] of the request it answered.
    pub digest: u128,
    /// What the original request got.
    pub outcome: Outcome,
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

/// A [`RememberedReply`] as apply writes it, borrowing the outcome. Encodes to exactly the
/// bytes of the equal `RememberedReply`.
#[derive(Debug, Serialize)]
pub(crate) struct RememberedReplyOut<'a> {
    pub expires_at_ms: u64,
    pub digest: u128,
    pub outcome: &'a Outcome,
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
mod tests {
    use super::*;
    use crate::error::StorageError;
    use crate::keyspace::outcome::Rejection;

    fn records() -> Vec<Record> {
        vec![
            Record {
                value: b"v\r\n\xff".to_vec(),
                version: Hlc::new(1_700_000_000_000, 3, "n1"),
                expires_at_ms: Some(1_700_000_000_100),
                fencing_token: Some(Hlc::new(5, 0, "client")),
            },
            Record {
                value: vec![7; 300], // a length that needs a two-byte varint
                version: Hlc::new(0, 0, ""),
                expires_at_ms: None,
                fencing_token: None,
            },
            Record {
                value: Vec::new(),
                version: Hlc::new(u64::MAX, u64::MAX, "x"),
                expires_at_ms: Some(u64::MAX),
                fencing_token: None,
            },
        ]
    }

    #[test]
    fn borrowed_record_twins_use_the_record_encoding() {
        for record in records() {
            let bytes = codec::encode(&record);
            let out = RecordOut {
                value: &record.value,
                version: &record.version,
                expires_at_ms: record.expires_at_ms,
                fencing_token: record.fencing_token.as_ref(),
            };
            assert_eq!(codec::encode(&out), bytes, "{record:?}");
            let view: RecordView<'_> = decode_borrowed("record", &bytes).expect("decodes");
            assert_eq!(view.value, record.value.as_slice());
            assert_eq!(view.version, record.version);
            assert_eq!(view.expires_at_ms, record.expires_at_ms);
            assert_eq!(view.fencing_token, record.fencing_token);
        }
    }

    #[test]
    fn borrowed_reply_twin_uses_the_reply_encoding() {
        for outcome in [
            Outcome::Stored {
                version: Hlc::new(9, 1, "n2"),
            },
            Outcome::Rejected(Rejection::QuotaExceeded),
            Outcome::Missing,
        ] {
            let reply = RememberedReply {
                expires_at_ms: 1_234_567,
                digest: u128::MAX - 5,
                outcome: outcome.clone(),
            };
            let out = RememberedReplyOut {
                expires_at_ms: 1_234_567,
                digest: u128::MAX - 5,
                outcome: &outcome,
            };
            assert_eq!(codec::encode(&out), codec::encode(&reply));
        }
    }

    #[test]
    fn observer_floor_round_trips_and_an_empty_row_has_none() {
        assert_eq!(encode_observer_floor(None), Vec::<u8>::new());
        assert_eq!(decode_observer_floor(&[]).expect("empty"), None);
        let floor = Hlc::new(1_700_000_000_000, 7, "n3");
        let bytes = encode_observer_floor(Some(&floor));
        assert_eq!(decode_observer_floor(&bytes).expect("decodes"), Some(floor));
        assert!(matches!(
            decode_observer_floor(&bytes[..2]),
            Err(StorageError::Corrupt { .. })
        ));
    }

    #[test]
    fn borrowed_decode_checks_the_format_version() {
        let mut bytes = codec::encode(&records()[0]);
        assert!(decode_borrowed::<RecordView<'_>>("record", &bytes[..3]).is_err());
        assert!(matches!(
            decode_borrowed::<RecordView<'_>>("record", &[]),
            Err(StorageError::Corrupt { .. })
        ));
        bytes[0] = codec::FORMAT_VERSION + 1;
        assert!(matches!(
            decode_borrowed::<RecordView<'_>>("record", &bytes),
            Err(StorageError::FormatVersion { .. })
        ));
    }
}
