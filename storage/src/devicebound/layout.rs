//! Where the device-bound state lives in the store's one ordered byte map: tables with their
//! own one-byte prefixes (upper-case letters, apart from the keyspace's lower-case ones and
//! below [`crate::layout::Table::ConsensusState`], so digests and snapshots cover
//! them), length-prefixed device ids, big-endian numbers so keys sort by time and sequence.
//!
//! A queued message is a [`DeviceTable::Messages`] row (its content and delivery state), a
//! device's counters its [`DeviceTable::Devices`] row. What apply looks messages up by (queue
//! order, due locks and expiries, devices with deliverable messages) is the in-memory
//! [`crate::devicebound::DeviceIndex`], rebuilt from these two tables; the feedback batches
//! keep their due-time and lock-token tables here. A message lock token names its message's
//! place ([`crate::devicebound::token::message_token`]), so messages need no token index.

/// The device-bound tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum DeviceTable {
    /// (len device, device) -> [`crate::devicebound::DeviceState`]
    Devices = b'D',
    /// (len device, device, seq BE) -> [`crate::devicebound::StoredMessage`]
    Messages = b'M',
    /// (len device, device, dead-letter seq BE) -> [`crate::devicebound::DeadLetter`]
    DeadLetters = b'A',
    /// (feedback seq BE) -> [`crate::devicebound::FeedbackRecord`] not yet in a batch
    PendingFeedback = b'F',
    /// (len device, device, feedback seq BE) -> () for every pending feedback record
    PendingFeedbackByDevice = b'G',
    /// (batch seq BE) -> [`crate::devicebound::FeedbackBatch`]
    FeedbackBatches = b'B',
    /// (batch seq BE) -> () for Enqueued batches
    EnqueuedBatches = b'J',
    /// (lock expiry BE, batch seq BE) -> () for Invisible batches
    BatchLockExpiry = b'H',
    /// (expires_at BE, batch seq BE) -> () for every batch
    BatchExpiry = b'I',
    /// lock token -> batch seq BE of the Invisible batch it locks
    BatchTokens = b'U',
}

impl DeviceTable {
    /// Every table, for layout checks.
    pub const ALL: [DeviceTable; 10] = [
        DeviceTable::Devices,
        DeviceTable::Messages,
        DeviceTable::DeadLetters,
        DeviceTable::PendingFeedback,
        DeviceTable::PendingFeedbackByDevice,
        DeviceTable::FeedbackBatches,
        DeviceTable::EnqueuedBatches,
        DeviceTable::BatchLockExpiry,
        DeviceTable::BatchExpiry,
        DeviceTable::BatchTokens,
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

/// Name of the [`crate::devicebound::DeviceboundMeta`] record in [`crate::layout::Table::Meta`].
pub const META_DEVICEBOUND: &[u8] = b"devicebound";

/// Key of the devicebound meta record.
pub fn meta_key() -> Vec<u8> {
    crate::layout::meta_key(META_DEVICEBOUND)
}

fn with_prefix(table: DeviceTable, capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + capacity);
    out.push(table.prefix());
    out
}

fn push_device(out: &mut Vec<u8>, device: &[u8]) {
    // Device ids are at most 128 bytes (checked at the door); saturate rather than wrap.
    let len = u32::try_from(device.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(device);
}

/// Reads a length-prefixed device id at the start of `raw`; returns it and the rest.
fn take_device(raw: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_be_bytes(raw.get(..4)?.try_into().ok()?);
    let len = usize::try_from(len).ok()?;
    let device = raw.get(4..4 + len)?;
    Some((device, raw.get(4 + len..)?))
}

fn take_u64(raw: &[u8]) -> Option<(u64, &[u8])> {
    let number = u64::from_be_bytes(raw.get(..8)?.try_into().ok()?);
    Some((number, raw.get(8..)?))
}

/// Key of a device row.
pub fn device_key(device: &[u8]) -> Vec<u8> {
    let mut out = with_prefix(DeviceTable::Devices, 4 + device.len());
    push_device(&mut out, device);
    out
}

/// The device id of a [`device_key`].
pub fn device_of_key(raw: &[u8]) -> Option<&[u8]> {
    if raw.first() != Some(&DeviceTable::Devices.prefix()) {
        return None;
    }
    let (device, rest) = take_device(raw.get(1..)?)?;
    rest.is_empty().then_some(device)
}

/// Prefix of every message of `device`, in queue order.
pub fn messages_prefix(device: &[u8]) -> Vec<u8> {
    let mut out = with_prefix(DeviceTable::Messages, 12 + device.len());
    push_device(&mut out, device);
    out
}

/// Key of a queued message.
pub fn message_key(device: &[u8], seq: u64) -> Vec<u8> {
    let mut out = messages_prefix(device);
    out.extend_from_slice(&seq.to_be_bytes());
    out
}

/// Splits a [`message_key`] into (device, seq).
pub fn split_message_key(raw: &[u8]) -> Option<(&[u8], u64)> {
    if raw.first() != Some(&DeviceTable::Messages.prefix()) {
        return None;
    }
    let (device, rest) = take_device(raw.get(1..)?)?;
    let (seq, rest) = take_u64(rest)?;
    rest.is_empty().then_some((device, seq))
}

/// The sequence number of a [`message_key`] of `device`.
pub fn message_seq(device: &[u8], raw: &[u8]) -> Option<u64> {
    let (number, rest) = take_u64(raw.get(1 + 4 + device.len()..)?)?;
    rest.is_empty().then_some(number)
}

/// Exclusive bound of the entries of a due-time table due at `time_ms` (everything `<=`).
pub fn due_bound(table: u8, time_ms: u64) -> Vec<u8> {
    match time_ms.checked_add(1) {
        Some(next) => {
            let mut out = vec![table];
            out.extend_from_slice(&next.to_be_bytes());
            out
        }
        None => vec![table + 1],
    }
}

/// Prefix of the dead letters of `device`, oldest first.
pub fn dead_letters_prefix(device: &[u8]) -> Vec<u8> {
    let mut out = with_prefix(DeviceTable::DeadLetters, 12 + device.len());
    push_device(&mut out, device);
    out
}

/// Key of a dead letter.
pub fn dead_letter_key(device: &[u8], seq: u64) -> Vec<u8> {
    let mut out = dead_letters_prefix(device);
    out.extend_from_slice(&seq.to_be_bytes());
    out
}

/// Key of a pending feedback record.
pub fn pending_feedback_key(seq: u64) -> Vec<u8> {
    let mut out = with_prefix(DeviceTable::PendingFeedback, 8);
    out.extend_from_slice(&seq.to_be_bytes());
    out
}

/// Sequence number of a [`pending_feedback_key`] or a [`batch_key`]-shaped key.
pub fn seq_of(raw: &[u8]) -> Option<u64> {
    let (seq, rest) = take_u64(raw.get(1..)?)?;
    rest.is_empty().then_some(seq)
}

/// Prefix of the pending feedback records about `device`.
pub fn pending_by_device_prefix(device: &[u8]) -> Vec<u8> {
    let mut out = with_prefix(DeviceTable::PendingFeedbackByDevice, 12 + device.len());
    push_device(&mut out, device);
    out
}

/// Key in [`DeviceTable::PendingFeedbackByDevice`].
pub fn pending_by_device_key(device: &[u8], seq: u64) -> Vec<u8> {
    let mut out = pending_by_device_prefix(device);
    out.extend_from_slice(&seq.to_be_bytes());
    out
}

/// The feedback sequence number of a [`pending_by_device_key`] of `device`.
pub fn pending_by_device_seq(device: &[u8], raw: &[u8]) -> Option<u64> {
    let (seq, rest) = take_u64(raw.get(1 + 4 + device.len()..)?)?;
    rest.is_empty().then_some(seq)
}

/// Key of a batch ([`DeviceTable::FeedbackBatches`]) or of its Enqueued mark
/// ([`DeviceTable::EnqueuedBatches`]).
pub fn batch_key(table: DeviceTable, seq: u64) -> Vec<u8> {
    let mut out = with_prefix(table, 8);
    out.extend_from_slice(&seq.to_be_bytes());
    out
}

/// Key of a batch due-time entry ([`DeviceTable::BatchLockExpiry`],
/// [`DeviceTable::BatchExpiry`]).
pub fn batch_due_key(table: DeviceTable, at_ms: u64, seq: u64) -> Vec<u8> {
    let mut out = with_prefix(table, 16);
    out.extend_from_slice(&at_ms.to_be_bytes());
    out.extend_from_slice(&seq.to_be_bytes());
    out
}

/// Splits a [`batch_due_key`] into (at, seq).
pub fn split_batch_due_key(raw: &[u8]) -> Option<(u64, u64)> {
    let (at, rest) = take_u64(raw.get(1..)?)?;
    let (seq, rest) = take_u64(rest)?;
    rest.is_empty().then_some((at, seq))
}

/// Key in [`DeviceTable::BatchTokens`].
pub fn batch_token_key(token: &str) -> Vec<u8> {
    let mut out = with_prefix(DeviceTable::BatchTokens, token.len());
    out.extend_from_slice(token.as_bytes());
    out
}
