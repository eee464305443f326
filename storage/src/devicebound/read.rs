//! Read-only queries over the device-bound rows, shared by apply and by the leader (DEADLETTERS
//! replies, the feedback sweeps, which ask when work is next due instead of scanning). The
//! queues' own questions (QUEUE, deliverable devices, due locks and expiries) are answered by
//! the [`crate::devicebound::DeviceIndex`]. Time is always an argument; none of these needs a
//! log entry.

use crate::codec;
use crate::devicebound::apply::{FEEDBACK_BATCH_RECORDS, FEEDBACK_CUT_INTERVAL_MS};
use crate::devicebound::layout::{self, DeviceTable};
use crate::devicebound::record::{
    DeadLetter, DeviceState, DeviceboundMeta, FeedbackBatch, FeedbackRecord, StoredMessage,
};
use crate::engine::OrderedRead;
use crate::engine::prefix_end;
use crate::error::{Result, StorageError};
pub use statestore_vocab::devicebound::QueueStats;

/// The store-wide device-bound record (defaults on an empty store).
pub fn meta(view: &(impl OrderedRead + ?Sized)) -> Result<DeviceboundMeta> {
    match view.get_ref(&layout::meta_key())? {
        Some(bytes) => codec::decode("devicebound meta", &bytes),
        None => Ok(DeviceboundMeta::default()),
    }
}

/// A device's row, if it has state.
pub fn device_state(
    view: &(impl OrderedRead + ?Sized),
    device: &[u8],
) -> Result<Option<DeviceState>> {
    view.get_ref(&layout::device_key(device))?
        .map(|bytes| codec::decode("device row", &bytes))
        .transpose()
}

/// DEADLETTERS: up to `count` dead letters of `device`, oldest first.
pub fn dead_letters(
    view: &(impl OrderedRead + ?Sized),
    device: &[u8],
    count: usize,
) -> Result<Vec<DeadLetter>> {
    entries_in(view, &layout::dead_letters_prefix(device), count)?
        .into_iter()
        .map(|(_, value)| codec::decode("dead letter", &value))
        .collect()
}

/// Up to `limit` messages of `device`'s queue in queue order, with their sequence numbers.
pub fn messages(
    view: &(impl OrderedRead + ?Sized),
    device: &[u8],
    limit: usize,
) -> Result<Vec<(u64, StoredMessage)>> {
    entries_in(view, &layout::messages_prefix(device), limit)?
        .into_iter()
        .map(|(key, value)| {
            let seq = layout::message_seq(device, &key).ok_or_else(|| StorageError::Corrupt {
                what: "device message key",
                reason: format!("{key:?}"),
            })?;
            Ok((seq, codec::decode("device message", &value)?))
        })
        .collect()
}

/// A device with Enqueued messages and room in its window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliverableDevice {
    /// Its Invisible messages now.
    pub invisible: u32,
    /// Device id.
    pub device: Vec<u8>,
}

/// The first instant in a due-time table (`None`: empty).
fn next_due(view: &(impl OrderedRead + ?Sized), table: DeviceTable) -> Result<Option<u64>> {
    let (start, end) = table.bounds();
    match view.range(&start, &end).next().transpose()? {
        Some((key, _)) => Ok(key
            .get(1..9)
            .and_then(|at| at.try_into().ok())
            .map(u64::from_be_bytes)),
        None => Ok(None),
    }
}

/// When the earliest feedback batch lock runs out.
pub fn next_feedback_lock_expiry(view: &(impl OrderedRead + ?Sized)) -> Result<Option<u64>> {
    next_due(view, DeviceTable::BatchLockExpiry)
}

/// When the earliest feedback batch expires.
pub fn next_feedback_expiry(view: &(impl OrderedRead + ?Sized)) -> Result<Option<u64>> {
    next_due(view, DeviceTable::BatchExpiry)
}

/// From when a `CutFeedbackBatch` would cut a batch (`None`: no record waits). `Some(0)`
/// when a full batch waits.
pub fn next_feedback_cut(meta: &DeviceboundMeta) -> Option<u64> {
    match meta.pending_feedback {
        0 => None,
        n if n >= FEEDBACK_BATCH_RECORDS => Some(0),
        _ => Some(meta.last_cut_ms.saturating_add(FEEDBACK_CUT_INTERVAL_MS)),
    }
}

/// True if a feedback batch is Enqueued (a `DeliverFeedback` has work).
pub fn feedback_deliverable(view: &(impl OrderedRead + ?Sized)) -> Result<bool> {
    let (start, end) = DeviceTable::EnqueuedBatches.bounds();
    Ok(view.range(&start, &end).next().transpose()?.is_some())
}

/// Up to `limit` feedback records waiting to be cut, oldest first.
pub fn pending_feedback(
    view: &(impl OrderedRead + ?Sized),
    limit: usize,
) -> Result<Vec<FeedbackRecord>> {
    let (start, end) = DeviceTable::PendingFeedback.bounds();
    view.range(&start, &end)
        .take(limit)
        .map(|entry| codec::decode("feedback record", &entry?.1))
        .collect()
}

/// Up to `limit` feedback batches, oldest first, with their sequence numbers.
pub fn feedback_batches(
    view: &(impl OrderedRead + ?Sized),
    limit: usize,
) -> Result<Vec<(u64, FeedbackBatch)>> {
    let (start, end) = DeviceTable::FeedbackBatches.bounds();
    view.range(&start, &end)
        .take(limit)
        .map(|entry| {
            let (key, value) = entry?;
            let seq = layout::seq_of(&key).ok_or_else(|| StorageError::Corrupt {
                what: "feedback batch key",
                reason: format!("{key:?}"),
            })?;
            Ok((seq, codec::decode("feedback batch", &value)?))
        })
        .collect()
}

/// Up to `limit` entries whose key starts with `prefix`.
pub fn entries_in(
    view: &(impl OrderedRead + ?Sized),
    prefix: &[u8],
    limit: usize,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let end = prefix_end(prefix).unwrap_or_else(|| vec![u8::MAX; prefix.len() + 1]);
    view.range(prefix, &end).take(limit).collect()
}

/// Up to `limit` keys starting with `prefix`.
pub fn keys_in(
    view: &(impl OrderedRead + ?Sized),
    prefix: &[u8],
    limit: usize,
) -> Result<Vec<Vec<u8>>> {
    Ok(entries_in(view, prefix, limit)?
        .into_iter()
        .map(|(key, _)| key)
        .collect())
}
