//! The keys of the keyspace's tables (records, expiry index, registrations both ways,
//! registration counts, the keyspace meta record) in the one ordered byte map; the table
//! prefixes themselves are registered in [`crate::layout`]. Length prefixes keep every
//! composite key unambiguous so prefix scans never mix two keys.

use crate::layout::{Table, push_len_prefixed, with_prefix};

/// Name of the [`crate::keyspace::KeyspaceMeta`] record in [`Table::Meta`].
pub const META_KEYSPACE: &[u8] = b"keyspace";

/// Key of the [`crate::keyspace::KeyspaceMeta`] record.
pub fn meta_key() -> Vec<u8> {
    crate::layout::meta_key(META_KEYSPACE)
}

/// Key of a record in [`Table::Keys`].
pub fn record_key(key: &[u8]) -> Vec<u8> {
    let mut out = with_prefix(Table::Keys, key.len());
    out.extend_from_slice(key);
    out
}

/// Strips the table prefix from a [`Table::Keys`] key.
pub fn user_key(record_key: &[u8]) -> &[u8] {
    record_key.get(1..).unwrap_or_default()
}

/// Key in [`Table::Expiry`].
pub fn expiry_key(expires_at_ms: u64, key: &[u8]) -> Vec<u8> {
    let mut out = with_prefix(Table::Expiry, 8 + key.len());
    out.extend_from_slice(&expires_at_ms.to_be_bytes());
    out.extend_from_slice(key);
    out
}

/// Exclusive upper bound of expiry entries due at `time_ms` (everything `<= time_ms`).
pub fn expiry_due_bound(time_ms: u64) -> Vec<u8> {
    match time_ms.checked_add(1) {
        Some(next) => {
            let mut out = with_prefix(Table::Expiry, 8);
            out.extend_from_slice(&next.to_be_bytes());
            out
        }
        None => Table::Expiry.bounds().1,
    }
}

/// Splits a [`Table::Expiry`] key into (expires_at_ms, key).
pub fn split_expiry_key(raw: &[u8]) -> Option<(u64, &[u8])> {
    let at = raw.get(1..9)?;
    let at = u64::from_be_bytes(at.try_into().ok()?);
    Some((at, raw.get(9..)?))
}

/// Prefix of every registration of `key` in [`Table::ObserversByKey`].
pub fn observers_prefix(key: &[u8]) -> Vec<u8> {
    let mut out = with_prefix(Table::ObserversByKey, 4 + key.len());
    push_len_prefixed(&mut out, key);
    out
}

/// Key of the (key, client) registration in [`Table::ObserversByKey`].
pub fn observer_key(key: &[u8], client: &str) -> Vec<u8> {
    let mut out = observers_prefix(key);
    out.extend_from_slice(client.as_bytes());
    out
}

/// Key of `key`'s registration count in [`Table::ObserverCounts`].
pub fn observer_count_key(key: &[u8]) -> Vec<u8> {
    let mut out = with_prefix(Table::ObserverCounts, key.len());
    out.extend_from_slice(key);
    out
}

/// The value of a [`Table::ObserverCounts`] row: the count, eight bytes big-endian.
pub fn observer_count_value(count: u64) -> Vec<u8> {
    count.to_be_bytes().to_vec()
}

/// The count an [`observer_count_value`] holds (`None`: not eight bytes).
pub fn parse_observer_count_value(value: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(value.try_into().ok()?))
}

/// Prefix of every registration of `client` in [`Table::ObservedByClient`].
pub fn observed_prefix(client: &str) -> Vec<u8> {
    let mut out = with_prefix(Table::ObservedByClient, 4 + client.len());
    push_len_prefixed(&mut out, client.as_bytes());
    out
}

/// Key of the (client, key) registration in [`Table::ObservedByClient`].
pub fn observed_key(client: &str, key: &[u8]) -> Vec<u8> {
    let mut out = observed_prefix(client);
    out.extend_from_slice(key);
    out
}

#[cfg(test)]
mod tests;
