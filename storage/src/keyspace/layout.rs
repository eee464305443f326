//! How the replicated state maps onto one ordered byte map (a single sled tree, or a BTreeMap
//! in tests): a one-byte table prefix, then a table-specific key. Length prefixes keep every
//! composite key unambiguous so prefix scans never mix two keys.

/// The tables of the state machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Table {
    /// key -> [`crate::keyspace::Record`]
    Keys = b'k',
    /// (expires_at_ms BE, key) -> ()
    Expiry = b'x',
    /// (len key, key, client) -> ()
    ObserversByKey = b'w',
    /// (len client, client, key) -> ()
    ObservedByClient = b'c',
    /// key -> registrations of the key, all clients together (see [`observer_count_value`])
    ObserverCounts = b'n',
    /// (len client, client, correlation) -> [`crate::keyspace::RememberedReply`]
    Replies = b'r',
    /// (expires_at_ms BE, reply key) -> counted size of the reply (see [`reply_size_value`])
    ReplyExpiry = b'q',
    /// fixed names -> store-wide records ([`crate::keyspace::KeyspaceMeta`])
    Meta = b'm',
    /// opaque records of the consensus layer (last applied log id, membership); written in the
    /// same atomic batch as the keyspace changes but not part of the keyspace digest
    ConsensusState = b'z',
}

impl Table {
    /// The first byte of every key of this table.
    pub fn prefix(self) -> u8 {
        self as u8
    }

    /// `[start, end)` covering the whole table.
    pub fn bounds(self) -> (Vec<u8>, Vec<u8>) {
        (vec![self.prefix()], vec![self.prefix() + 1])
    }
}

/// Name of the [`crate::keyspace::KeyspaceMeta`] record.
pub const META_KEYSPACE: &[u8] = b"keyspace";

fn with_prefix(table: Table, capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + capacity);
    out.push(table.prefix());
    out
}

fn push_len_prefixed(out: &mut Vec<u8>, bytes: &[u8]) {
    // Keys are bounded far below 4 GiB at the door; saturate rather than wrap if not.
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
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

/// Key of a named record in [`Table::Meta`].
pub fn meta_key(name: &[u8]) -> Vec<u8> {
    let mut out = with_prefix(Table::Meta, name.len());
    out.extend_from_slice(name);
    out
}

/// Key of a named record in [`Table::ConsensusState`].
pub fn consensus_key(name: &[u8]) -> Vec<u8> {
    let mut out = with_prefix(Table::ConsensusState, name.len());
    out.extend_from_slice(name);
    out
}

/// Smallest byte string greater than every string starting with `prefix`, or `None` if there
/// is none (all 0xff).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observer_prefixes_never_mix_keys() {
        // key "a" with client "bc" must not share a prefix scan with key "ab", client "c"
        let p = observers_prefix(b"a");
        assert!(observer_key(b"a", "bc").starts_with(&p));
        assert!(!observer_key(b"ab", "c").starts_with(&p));
    }

    #[test]
    fn expiry_keys_sort_by_time_then_key() {
        assert!(expiry_key(1, b"z") < expiry_key(2, b"a"));
        assert!(expiry_key(5, b"a") < expiry_due_bound(5));
        assert!(expiry_key(6, b"") >= expiry_due_bound(5));
        assert_eq!(
            split_expiry_key(&expiry_key(42, b"k\r\n")),
            Some((42, &b"k\r\n"[..]))
        );
    }

    #[test]
    fn reply_size_values_round_trip_and_stay_small() {
        for size in [
            0,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let raw = reply_size_value(size);
            assert_eq!(parse_reply_size_value(&raw), Some(size), "{size}");
        }
        assert_eq!(reply_size_value(100).len(), 1);
        assert_eq!(reply_size_value(16_383).len(), 2);
        assert_eq!(reply_size_value(u64::MAX).len(), 10);
        for bad in [
            &[][..],       // empty (an index entry of an older layout)
            &[0x80],       // truncated
            &[0x05, 0x00], // trailing byte
            &[0x85, 0x00], // non-canonical zero continuation
            &[0xff; 10],   // more than 64 bits
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02], // 65 bits
        ] {
            assert_eq!(parse_reply_size_value(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn prefix_end_handles_carry() {
        assert_eq!(prefix_end(&[1, 2]), Some(vec![1, 3]));
        assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
    }
}
