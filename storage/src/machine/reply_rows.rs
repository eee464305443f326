//! The reply memory's rows: where a remembered reply and its expiry-index entry live in the
//! one ordered byte map ([`Table::Replies`], [`Table::ReplyExpiry`]), what the index entry
//! holds (the reply's counted size), and the [`RememberedReply`] record.

use serde::{Deserialize, Serialize};

use crate::codec;
use crate::error::Result;
use crate::layout::{Table, push_len_prefixed, with_prefix};
use crate::machine::outcome::Outcome;

/// Key of a remembered reply in [`Table::Replies`].
pub fn reply_key(client: &[u8], correlation: &[u8]) -> Vec<u8> {
    let mut out = with_prefix(Table::Replies, 4 + client.len() + correlation.len());
    push_len_prefixed(&mut out, client);
    out.extend_from_slice(correlation);
    out
}

/// Key in [`Table::ReplyExpiry`].
pub fn reply_expiry_key(expires_at_ms: u64, reply_key: &[u8]) -> Vec<u8> {
    let mut out = with_prefix(Table::ReplyExpiry, 8 + reply_key.len());
    out.extend_from_slice(&expires_at_ms.to_be_bytes());
    out.extend_from_slice(reply_key);
    out
}

/// Exclusive upper bound of reply-expiry entries due at `time_ms`.
pub fn reply_expiry_due_bound(time_ms: u64) -> Vec<u8> {
    match time_ms.checked_add(1) {
        Some(next) => {
            let mut out = with_prefix(Table::ReplyExpiry, 8);
            out.extend_from_slice(&next.to_be_bytes());
            out
        }
        None => Table::ReplyExpiry.bounds().1,
    }
}

/// Splits a [`Table::ReplyExpiry`] key into (expires_at_ms, reply key).
pub fn split_reply_expiry_key(raw: &[u8]) -> Option<(u64, &[u8])> {
    let at = raw.get(1..9)?;
    let at = u64::from_be_bytes(at.try_into().ok()?);
    Some((at, raw.get(9..)?))
}

/// Value of a [`Table::ReplyExpiry`] entry: the size the reply it indexes counts against the
/// reply-memory byte cap, as an LEB128 varint (one byte below 128, two below 16 KiB), so
/// pruning and eviction subtract it without reading the reply.
pub fn reply_size_value(size: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(3);
    let mut rest = size;
    loop {
        let low = (rest & 0x7f) as u8;
        rest >>= 7;
        if rest == 0 {
            out.push(low);
            return out;
        }
        out.push(low | 0x80);
    }
}

/// Reads a [`reply_size_value`]; `None` unless `raw` is exactly one canonical varint that
/// fits a u64.
pub fn parse_reply_size_value(raw: &[u8]) -> Option<u64> {
    let mut size = 0u64;
    for (i, &byte) in raw.iter().enumerate() {
        let shift = 7 * u32::try_from(i).ok()?;
        let low = u64::from(byte & 0x7f);
        if shift >= 64 || (shift > 0 && low >> (64 - shift) != 0) {
            return None; // more than 64 bits
        }
        size |= low << shift;
        if byte & 0x80 == 0 {
            let last = i + 1 == raw.len();
            let canonical = byte != 0 || i == 0;
            return (last && canonical).then_some(size);
        }
    }
    None // empty, or the last byte says more follow
}

/// What a remembered reply counts against the reply-memory byte cap: its reply-table key
/// length plus its encoded value length.
pub fn reply_size(key_len: usize, value_len: usize) -> u64 {
    u64::try_from(key_len.saturating_add(value_len)).unwrap_or(u64::MAX)
}

/// The reply-expiry index entry (key and value) that apply writes beside the remembered reply
/// `value` at `reply_key`, rebuilt from the reply alone: the reply memory's log stores the
/// replies and not the index (see `store::resident::is_derived`). `Corrupt` if `value` is not
/// a remembered reply.
pub fn expiry_entry(reply_key: &[u8], value: &[u8]) -> Result<(Vec<u8>, Vec<u8>)> {
    let reply: RememberedReply = codec::decode("remembered reply", value)?;
    Ok((
        reply_expiry_key(reply.expires_at_ms, reply_key),
        reply_size_value(reply_size(reply_key.len(), value.len())),
    ))
}

/// A remembered reply (protocol §6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RememberedReply {
    /// After this instant a retry is treated as a new request.
    pub expires_at_ms: u64,
    /// [`crate::machine::RequestId::digest`] of the request it answered.
    pub digest: u128,
    /// What the original request got.
    pub outcome: Outcome,
}

/// The encoded value of a remembered reply expiring at `expires_at_ms`: a SET's outcome whose
/// version names `node` (its length sets the value's). For tests of the layers below apply,
/// which rebuild the reply-expiry index from such values.
#[cfg(test)]
pub(crate) fn remembered_value(expires_at_ms: u64, node: &str) -> Vec<u8> {
    codec::encode(&RememberedReply {
        expires_at_ms,
        digest: u128::from(expires_at_ms),
        outcome: Outcome::Stored {
            version: statestore_vocab::hlc::Hlc::new(expires_at_ms, 0, node),
        },
    })
}

/// A [`RememberedReply`] as apply writes it, borrowing the outcome. Encodes to exactly the
/// bytes of the equal `RememberedReply`.
#[derive(Debug, Serialize)]
pub(crate) struct RememberedReplyOut<'a> {
    pub expires_at_ms: u64,
    pub digest: u128,
    pub outcome: &'a Outcome,
}

#[cfg(test)]
mod tests;
