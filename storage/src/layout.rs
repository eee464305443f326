//! How the replicated state maps onto one ordered byte map (a single fjall keyspace, or a
//! BTreeMap in tests): a one-byte table prefix, then a table-specific key. This module is the
//! register of the prefixes shared by every part of the state (the [`Table`]s, the store-wide
//! [`Table::Meta`] records, the consensus layer's [`Table::ConsensusState`] records, which sort
//! last and are part of neither digests nor snapshots); each part builds its own keys in its
//! `layout` module. Length prefixes keep every composite key unambiguous so prefix scans never
//! mix two keys.

/// The lower-case tables of the state machine: the keyspace's, the reply memory's and the
/// store-wide ones. (The device-bound tables use upper-case prefixes, below
/// [`Table::ConsensusState`] too.)
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
    /// key -> registrations of the key, all clients together (see
    /// [`crate::keyspace::layout::observer_count_value`])
    ObserverCounts = b'n',
    /// (len client, client, correlation) -> [`crate::machine::RememberedReply`]
    Replies = b'r',
    /// (expires_at_ms BE, reply key) -> counted size of the reply (see
    /// [`crate::machine::reply_rows::reply_size_value`])
    ReplyExpiry = b'q',
    /// fixed names -> store-wide records ([`crate::keyspace::KeyspaceMeta`], the device-bound
    /// queues' meta record)
    Meta = b'm',
    /// opaque records of the consensus layer (last applied log id, membership); written in the
    /// same atomic batch as the keyspace changes but not part of the keyspace digest
    ConsensusState = b'z',
}

impl Table {
    /// Every table, for layout checks.
    pub const ALL: [Table; 9] = [
        Table::Keys,
        Table::Expiry,
        Table::ObserversByKey,
        Table::ObservedByClient,
        Table::ObserverCounts,
        Table::Replies,
        Table::ReplyExpiry,
        Table::Meta,
        Table::ConsensusState,
    ];

    /// The first byte of every key of this table.
    pub fn prefix(self) -> u8 {
        self as u8
    }

    /// `[start, end)` covering the whole table.
    pub fn bounds(self) -> (Vec<u8>, Vec<u8>) {
        (vec![self.prefix()], vec![self.prefix() + 1])
    }
}

/// A key of `table` with room for `capacity` more bytes.
pub(crate) fn with_prefix(table: Table, capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + capacity);
    out.push(table.prefix());
    out
}

/// Appends `bytes` with a four-byte big-endian length in front.
pub(crate) fn push_len_prefixed(out: &mut Vec<u8>, bytes: &[u8]) {
    // Keys are bounded far below 4 GiB at the door; saturate rather than wrap if not.
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
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
