//! Versioned binary encoding of every record this crate persists: one format-version byte,
//! then postcard. Decoding checks the version so an old binary refuses new data loudly instead
//! of misreading it.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Result, StorageError};

/// The record format written by this build.
pub const FORMAT_VERSION: u8 = 1;

/// Encodes `value` as `[FORMAT_VERSION] ++ postcard(value)`.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.push(FORMAT_VERSION);
    encode_into(value, out)
}

/// Encodes `value` after whatever `out` already holds (which must start with the version byte).
fn encode_into<T: Serialize>(value: &T, out: Vec<u8>) -> Vec<u8> {
    // Serialising our own plain data types into a Vec cannot fail: postcard only errors on
    // unsupported serde features (none used) or a full fixed buffer (a Vec grows).
    match postcard::to_extend(value, out) {
        Ok(bytes) => bytes,
        Err(err) => unreachable!("postcard cannot fail on a Vec for plain data: {err}"),
    }
}

/// Decodes a record written by [`encode`]; `what` names the record kind in errors.
pub fn decode<T: DeserializeOwned>(what: &'static str, bytes: &[u8]) -> Result<T> {
    decode_borrowed(what, bytes)
}

/// [`decode`] for types that borrow byte strings from `bytes` instead of copying them.
pub fn decode_borrowed<'a, T: Deserialize<'a>>(what: &'static str, bytes: &'a [u8]) -> Result<T> {
    match bytes.split_first() {
        Some((&FORMAT_VERSION, body)) => {
            postcard::from_bytes(body).map_err(|err| StorageError::Corrupt {
                what,
                reason: err.to_string(),
            })
        }
        Some((&found, _)) => Err(StorageError::FormatVersion {
            what,
            found,
            supported: FORMAT_VERSION,
        }),
        None => Err(StorageError::Corrupt {
            what,
            reason: "empty record".into(),
        }),
    }
}

/// Decodes a record written by [`encode`] from the start of `bytes`, which may hold more after
/// it, and returns it with the number of bytes its encoding took (postcard is self-delimiting).
/// The Raft log check uses it to find where a value ends without trusting a stored length.
pub fn decode_prefix<T: DeserializeOwned>(what: &'static str, bytes: &[u8]) -> Result<(T, usize)> {
    match bytes.split_first() {
        Some((&FORMAT_VERSION, body)) => match postcard::take_from_bytes(body) {
            Ok((value, rest)) => Ok((value, bytes.len() - rest.len())),
            Err(err) => Err(StorageError::Corrupt {
                what,
                reason: err.to_string(),
            }),
        },
        Some((&found, _)) => Err(StorageError::FormatVersion {
            what,
            found,
            supported: FORMAT_VERSION,
        }),
        None => Err(StorageError::Corrupt {
            what,
            reason: "empty record".into(),
        }),
    }
}

#[cfg(test)]
mod tests;
