//! Read-only queries over the keyspace's tables, shared by apply and by the leader's read path
//! (GET, SCAN, the expiry sweeper, the notifier). Time is always an argument (the store time a
//! read must use is the machine's: [`crate::machine::read::read_time`]).

use crate::codec;
use crate::engine::{OrderedRead, prefix_end};
use crate::error::{Result, StorageError};
use crate::keyspace::layout;
use crate::keyspace::record::{KeyspaceMeta, Record, RecordView, decode_observer_floor};
use crate::layout::Table;
use statestore_vocab::hlc::Hlc;

/// The store-wide record (defaults on an empty store).
pub fn meta(view: &(impl OrderedRead + ?Sized)) -> Result<KeyspaceMeta> {
    match view.get_ref(&layout::meta_key())? {
        Some(bytes) => codec::decode("keyspace meta", &bytes),
        None => Ok(KeyspaceMeta::default()),
    }
}

/// The stored record of `key`, expired or not.
pub fn record(view: &(impl OrderedRead + ?Sized), key: &[u8]) -> Result<Option<Record>> {
    view.get_ref(&layout::record_key(key))?
        .map(|bytes| codec::decode("record", &bytes))
        .transpose()
}

/// The record of `key` if it exists at `time_ms` (expired keys are invisible, §8).
pub fn live_record(
    view: &(impl OrderedRead + ?Sized),
    key: &[u8],
    time_ms: u64,
) -> Result<Option<Record>> {
    Ok(record(view, key)?.filter(|r| !r.is_expired_at(time_ms)))
}

/// Up to `limit` keys whose expiry instant is `<= time_ms`, earliest first.
pub fn due_keys(
    view: &(impl OrderedRead + ?Sized),
    time_ms: u64,
    limit: usize,
) -> Result<Vec<Vec<u8>>> {
    let (start, _) = Table::Expiry.bounds();
    let mut keys = Vec::new();
    for entry in view
        .range(&start, &layout::expiry_due_bound(time_ms))
        .take(limit)
    {
        let (raw, _) = entry?;
        if let Some((_, key)) = layout::split_expiry_key(&raw) {
            keys.push(key.to_vec());
        }
    }
    Ok(keys)
}

/// Stored keys strictly after `after` (from the first key when `None`), ascending, each with
/// whether it exists at `time_ms` (expired keys stay stored until the sweeper removes them)
/// and the bytes read for it (its record row, value included).
/// Lazy: a caller that stops early reads no further (SCAN bounds its pages this way).
pub fn keys_after<'a>(
    view: &'a (impl OrderedRead + ?Sized),
    after: Option<&[u8]>,
    time_ms: u64,
) -> impl Iterator<Item = Result<(Vec<u8>, bool, usize)>> + 'a {
    let (table_start, table_end) = Table::Keys.bounds();
    // The smallest record key greater than `after`'s: the same bytes with a zero byte added.
    let start = after.map_or(table_start, |key| {
        let mut start = layout::record_key(key);
        start.push(0);
        start
    });
    view.range(&start, &table_end).map(move |entry| {
        let (raw, bytes) = entry?;
        let record: RecordView<'_> = codec::decode_borrowed("record", &bytes)?;
        let live = record.expires_at_ms.is_none_or(|at| at > time_ms);
        Ok((
            layout::user_key(&raw).to_vec(),
            live,
            raw.len() + bytes.len(),
        ))
    })
}

/// One registration on a key, as the notifier reads it (§7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observer {
    /// The client id the notifications are addressed to.
    pub client: String,
    /// The store's highest version when the client registered: every change at or below it
    /// was applied before the registration. `None`: no version had been issued then (or the
    /// row was written by a build that stored no floor).
    pub floor: Option<Hlc>,
}

impl Observer {
    /// Whether the change of `version` came after this registration, so it is notified (§7:
    /// changes before KEYNOTIFY are not). Every version issued after the registration is
    /// greater than its floor, every one issued before is at most the floor.
    pub fn is_notified_of(&self, version: &Hlc) -> bool {
        self.floor.as_ref().is_none_or(|floor| floor < version)
    }
}

/// Up to `limit` registrations on `key`, in client-id byte order, starting after client
/// `after` (from the first when `None`): the notifier pages through a key's observers with it,
/// so no caller ever holds them all.
pub fn observers_page(
    view: &(impl OrderedRead + ?Sized),
    key: &[u8],
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<Observer>> {
    let prefix = layout::observers_prefix(key);
    let start = after.map_or_else(
        || prefix.clone(),
        |client| {
            // The smallest row key greater than `after`'s: the same bytes with a zero byte added.
            let mut start = layout::observer_key(key, client);
            start.push(0);
            start
        },
    );
    let end = prefix_end(&prefix).unwrap_or_else(|| vec![u8::MAX; prefix.len() + 1]);
    view.range(&start, &end)
        .take(limit)
        .map(|entry| {
            let (raw, value) = entry?;
            let client = raw.get(prefix.len()..).unwrap_or_default();
            Ok(Observer {
                client: String::from_utf8_lossy(client).into_owned(),
                floor: decode_observer_floor(&value)?,
            })
        })
        .collect()
}

/// How many clients are registered for notifications on `key` (one point read of its
/// count, kept by apply with every registration, STOP and client departure).
pub fn observer_count(view: &(impl OrderedRead + ?Sized), key: &[u8]) -> Result<u64> {
    match view.get_ref(&layout::observer_count_key(key))? {
        None => Ok(0),
        Some(value) => {
            layout::parse_observer_count_value(&value).ok_or_else(|| StorageError::Corrupt {
                what: "registration count",
                reason: format!("{} bytes, not eight", value.len()),
            })
        }
    }
}

/// Up to `limit` full keys starting with `prefix`.
pub fn keys_with_prefix(
    view: &(impl OrderedRead + ?Sized),
    prefix: &[u8],
    limit: usize,
) -> Result<Vec<Vec<u8>>> {
    let end = prefix_end(prefix).unwrap_or_else(|| vec![u8::MAX; prefix.len() + 1]);
    view.range(prefix, &end)
        .take(limit)
        .map(|entry| entry.map(|(k, _)| k))
        .collect()
}

/// Number of keys starting with `prefix`, counting no further than `limit`.
pub fn count_prefix(
    view: &(impl OrderedRead + ?Sized),
    prefix: &[u8],
    limit: usize,
) -> Result<usize> {
    let end = prefix_end(prefix).unwrap_or_else(|| vec![u8::MAX; prefix.len() + 1]);
    let mut count = 0;
    for entry in view.range(prefix, &end).take(limit) {
        entry?;
        count += 1;
    }
    Ok(count)
}
