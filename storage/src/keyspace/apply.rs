//! The keyspace commands: what a SET, DEL, VDEL, KEYNOTIFY, expiry sweep or client departure
//! does to the keys, decided from the entry and the stored state alone (fencing §4, conditions
//! §2, key quotas §9, expiry §8, registrations §7, versions §3), so every replica reaches the
//! same state and the same [`Outcome`]. No clock, no I/O beyond the transaction, no panics on
//! stored data (corruption surfaces as an error). The machine ([`crate::machine`]) opens a
//! [`Keyspace`] over its transaction and its copy of the [`KeyspaceMeta`] for each command,
//! after the store time and the reply memory are settled.
//!
//! # Cost per command
//!
//! Work per command must not grow with the number of proposals already applied in the
//! transaction, nor with the size of the store:
//!
//! - **Notifications (§7).** A change yields one [`KeyEvent`] if its key has at least one
//!   registration: one point read of the key's registration count (none at all while the
//!   store holds no registration, which the meta counts), never a scan or a list of the
//!   registrations (the notifier reads the observers later, page by page, off this thread).
//!   A scan would not do: the memtable in front of the state database copies every row of a
//!   scanned range it holds, so right after 1,000 clients registered a key, each write of it
//!   would copy 1,000 rows.
//! - **Copies.** Stored records are read through [`crate::engine::OrderedRead::get_ref`] and
//!   decoded with borrowed values; records are encoded from borrowed parts, and a SET's value
//!   is copied once, into the encoded record (plus once into the event if someone observes the
//!   key).
//! - **Registration caps (§7, §9).** The store-wide cap is one comparison with a counter, the
//!   per-key cap one with the key's registration count
//!   ([`crate::layout::Table::ObserverCounts`], also what notifications look up); the
//!   per-client cap counts the client's registrations with a prefix scan that stops at the cap
//!   (registering a pair again reads none of them). The per-key count costs one read and one
//!   write per registration, STOP, and registration a departure drops; it is kept exact by each
//!   of them, never recounted.
//! - **Counters** (keys, bytes, versions, registrations, refusals) live in the
//!   [`KeyspaceMeta`] the machine reads once per transaction and writes back once; they are
//!   kept exact by every change, never recounted.
//!
//! # Caps on the tables clients make grow
//!
//! Client ids are whatever requests say, so the registrations are capped store-wide by
//! [`crate::keyspace::Limits`] (replicated like the key quotas):
//!
//! - **KEYNOTIFY registrations (§7, §9).** A new (client, key) registration is refused with
//!   [`Rejection::QuotaExceeded`] once `registrations` has reached `max_registrations`, as
//!   well as once its client holds `max_registrations_per_client`, or its key has
//!   `max_observers_per_key` observers (what one change fans out to; these refusals are counted
//!   in `observer_cap_refusals`). Registering a pair again is not a new registration and always
//!   succeeds; STOP and a client's departure free room.
//! - **Registration floors (§7).** A registration row holds the store's `max_version` when it
//!   was made: the notifier, reading registrations after the change, tells by it which came
//!   before the change (floor below the change's version) and so are notified.

use crate::codec;
use crate::engine::Txn;
use crate::error::Result;
use crate::keyspace::layout;
use crate::keyspace::outcome::{Change, KeyEvent, Outcome, Rejection};
use crate::keyspace::read;
use crate::keyspace::record::{self, KeyspaceMeta, RecordOut, RecordView};
use statestore_vocab::hlc::Hlc;
use statestore_vocab::keyspace::SetCondition;

/// The keyspace of one transaction, for one command: the transaction and the keyspace meta
/// record as the machine holds them (`meta_changed`: set when the record must be written back).
pub(crate) struct Keyspace<'a, T: Txn> {
    txn: &'a mut T,
    meta: &'a mut KeyspaceMeta,
    meta_changed: &'a mut bool,
}

/// What apply needs of a stored record; its value stays in the store.
struct Stored {
    version: Hlc,
    expires_at_ms: Option<u64>,
    fencing_token: Option<Hlc>,
    value_len: usize,
    /// The stored value equals the value the caller asked to compare with.
    value_matches: bool,
}

impl Stored {
    /// True if the key no longer exists at `time_ms` (protocol §8).
    fn is_expired_at(&self, time_ms: u64) -> bool {
        self.expires_at_ms.is_some_and(|at| at <= time_ms)
    }
}

impl<'a, T: Txn> Keyspace<'a, T> {
    /// The keyspace over `txn`, whose meta record the caller holds in `meta`.
    pub(crate) fn new(
        txn: &'a mut T,
        meta: &'a mut KeyspaceMeta,
        meta_changed: &'a mut bool,
    ) -> Self {
        Keyspace {
            txn,
            meta,
            meta_changed,
        }
    }

    /// SET key value [NX|NEX] [PX ms], fenced or not (§2, §4, §8, §9).
    pub(crate) fn set<D>(
        &mut self,
        stamp: &Hlc,
        time: u64,
        write: SetWrite<'_>,
        events: &mut Vec<KeyEvent>,
    ) -> Result<Outcome<D>> {
        let SetWrite {
            key,
            value,
            condition,
            expire_after_ms,
            fencing_token,
        } = write;
        let compare_with = (condition == SetCondition::IfAbsentOrEqual).then_some(value);
        let existing = self.live_record(stamp, time, key, compare_with, events)?;
        if let Some(rejection) = fencing_rejection(existing.as_ref(), fencing_token) {
            return Ok(Outcome::Rejected(rejection));
        }
        if let Some(record) = &existing {
            let holds = match condition {
                SetCondition::Always => true,
                SetCondition::IfAbsent => false,
                SetCondition::IfAbsentOrEqual => record.value_matches,
            };
            if !holds {
                return Ok(Outcome::NotStored {
                    version: record.version.clone(),
                });
            }
        }

        let new_size = entry_size(key.len(), value.len());
        let old_size = existing
            .as_ref()
            .map_or(0, |r| entry_size(key.len(), r.value_len));
        let limits = self.meta.limits;
        if existing.is_none() && self.meta.keys >= limits.max_keys {
            return Ok(Outcome::Rejected(Rejection::QuotaExceeded));
        }
        let bytes_after = self
            .meta
            .bytes
            .saturating_sub(old_size)
            .saturating_add(new_size);
        if new_size > old_size && bytes_after > limits.max_bytes {
            return Ok(Outcome::Rejected(Rejection::QuotaExceeded));
        }

        let version = self.issue_version(stamp);
        let stored_token = existing.as_ref().and_then(|r| r.fencing_token.as_ref());
        let fencing_token = match (stored_token, fencing_token) {
            (Some(stored), Some(request)) => Some(stored.max(request)),
            (stored, request) => stored.or(request),
        };
        let expires_at_ms = expire_after_ms.map(|px| time.saturating_add(px));
        if let Some(old) = existing.as_ref().and_then(|r| r.expires_at_ms)
            && Some(old) != expires_at_ms
        {
            self.txn.remove(layout::expiry_key(old, key));
        }
        if let Some(at) = expires_at_ms {
            self.txn.put(layout::expiry_key(at, key), Vec::new());
        }
        let record = RecordOut {
            value,
            version: &version,
            expires_at_ms,
            fencing_token,
        };
        self.txn
            .put(layout::record_key(key), codec::encode(&record));
        if existing.is_none() {
            self.meta.keys += 1;
        }
        self.meta.bytes = bytes_after;
        *self.meta_changed = true;
        self.notify(key, version.clone(), Some(value), events)?;
        Ok(Outcome::Stored { version })
    }

    /// DEL (no `expected_value`) or VDEL (§2, §4).
    pub(crate) fn delete<D>(
        &mut self,
        stamp: &Hlc,
        time: u64,
        key: &[u8],
        expected_value: Option<&[u8]>,
        fencing_token: Option<&Hlc>,
        events: &mut Vec<KeyEvent>,
    ) -> Result<Outcome<D>> {
        let Some(record) = self.live_record(stamp, time, key, expected_value, events)? else {
            return Ok(Outcome::Missing);
        };
        if let Some(rejection) = fencing_rejection(Some(&record), fencing_token) {
            return Ok(Outcome::Rejected(rejection));
        }
        if expected_value.is_some() && !record.value_matches {
            return Ok(Outcome::ValueDiffers);
        }
        self.remove_record(key, &record);
        let version = self.issue_version(stamp);
        self.notify(key, version.clone(), None, events)?;
        Ok(Outcome::Deleted { version })
    }

    /// KEYNOTIFY: registers `client` for changes of `key` (§7, §9).
    pub(crate) fn observe<D>(&mut self, client: &str, key: &[u8]) -> Result<Outcome<D>> {
        let by_key = layout::observer_key(key, client);
        if self.txn.get_ref(&by_key)?.is_some() {
            return Ok(Outcome::Observing);
        }
        if self.meta.registrations >= self.meta.limits.max_registrations {
            return Ok(Outcome::Rejected(Rejection::QuotaExceeded));
        }
        let max =
            usize::try_from(self.meta.limits.max_registrations_per_client).unwrap_or(usize::MAX);
        if read::count_prefix(&*self.txn, &layout::observed_prefix(client), max)? >= max {
            return Ok(Outcome::Rejected(Rejection::QuotaExceeded));
        }
        let on_key = read::observer_count(&*self.txn, key)?;
        if on_key >= u64::from(self.meta.limits.max_observers_per_key) {
            self.meta.observer_cap_refusals = self.meta.observer_cap_refusals.saturating_add(1);
            *self.meta_changed = true;
            return Ok(Outcome::Rejected(Rejection::QuotaExceeded));
        }
        let floor = record::encode_observer_floor(self.meta.max_version.as_ref());
        self.txn.put(by_key, floor);
        self.txn.put(layout::observed_key(client, key), Vec::new());
        self.set_observer_count(key, on_key.saturating_add(1));
        self.meta.registrations = self.meta.registrations.saturating_add(1);
        *self.meta_changed = true;
        Ok(Outcome::Observing)
    }

    /// KEYNOTIFY STOP (§7).
    pub(crate) fn unobserve<D>(&mut self, client: &str, key: &[u8]) -> Result<Outcome<D>> {
        let by_key = layout::observer_key(key, client);
        if self.txn.get_ref(&by_key)?.is_none() {
            return Ok(Outcome::NotObserving);
        }
        self.txn.remove(by_key);
        self.txn.remove(layout::observed_key(client, key));
        self.drop_observer_count(key)?;
        self.meta.registrations = self.meta.registrations.saturating_sub(1);
        *self.meta_changed = true;
        Ok(Outcome::StoppedObserving)
    }

    /// A leader sweep: removes the `keys` still due at `time`, each with its DELETE event (§8).
    pub(crate) fn expire<D>(
        &mut self,
        stamp: &Hlc,
        time: u64,
        keys: &[serde_bytes::ByteBuf],
        events: &mut Vec<KeyEvent>,
    ) -> Result<Outcome<D>> {
        let mut version = None;
        let mut removed = 0u32;
        for key in keys {
            let Some(record) = self.stored(key, None)? else {
                continue;
            };
            if !record.is_expired_at(time) {
                continue; // renewed or rewritten since the sweeper looked
            }
            self.remove_record(key, &record);
            let version = match &version {
                Some(v) => Hlc::clone(v),
                None => version.insert(self.issue_version(stamp)).clone(),
            };
            self.notify(key, version, None, events)?;
            removed += 1;
        }
        Ok(Outcome::Expired { keys: removed })
    }

    /// Drops every registration of a client that is gone (§7).
    pub(crate) fn forget_client<D>(&mut self, client: &str) -> Result<Outcome<D>> {
        let prefix = layout::observed_prefix(client);
        let keys = read::keys_with_prefix(&*self.txn, &prefix, usize::MAX)?;
        for observed in &keys {
            let key = observed.get(prefix.len()..).unwrap_or_default();
            self.txn.remove(layout::observer_key(key, client));
            self.txn.remove(observed.clone());
            self.drop_observer_count(key)?;
        }
        if !keys.is_empty() {
            let removed = u64::try_from(keys.len()).unwrap_or(u64::MAX);
            self.meta.registrations = self.meta.registrations.saturating_sub(removed);
            *self.meta_changed = true;
        }
        Ok(Outcome::ForgotClient {
            registrations: u32::try_from(keys.len()).unwrap_or(u32::MAX),
        })
    }

    /// A version greater than every version issued before, at least `stamp`.
    fn issue_version(&mut self, stamp: &Hlc) -> Hlc {
        let version = match &self.meta.max_version {
            Some(max) if stamp <= max => max.successor(&stamp.node),
            _ => stamp.clone(),
        };
        self.meta.max_version = Some(version.clone());
        *self.meta_changed = true;
        version
    }

    /// The key's stored record, expired or not; `compare_with` is checked against its value.
    fn stored(&self, key: &[u8], compare_with: Option<&[u8]>) -> Result<Option<Stored>> {
        let Some(bytes) = self.txn.get_ref(&layout::record_key(key))? else {
            return Ok(None);
        };
        let record: RecordView<'_> = record::decode_borrowed("record", &bytes)?;
        Ok(Some(Stored {
            value_len: record.value.len(),
            value_matches: compare_with.is_some_and(|value| value == record.value),
            version: record.version,
            expires_at_ms: record.expires_at_ms,
            fencing_token: record.fencing_token,
        }))
    }

    /// The key's record if it exists at `time`. A record past its expiry is removed here (with
    /// its DELETE notification) so that nothing can observe it any more.
    fn live_record(
        &mut self,
        stamp: &Hlc,
        time: u64,
        key: &[u8],
        compare_with: Option<&[u8]>,
        events: &mut Vec<KeyEvent>,
    ) -> Result<Option<Stored>> {
        let Some(stored) = self.stored(key, compare_with)? else {
            return Ok(None);
        };
        if !stored.is_expired_at(time) {
            return Ok(Some(stored));
        }
        self.remove_record(key, &stored);
        let version = self.issue_version(stamp);
        self.notify(key, version, None, events)?;
        Ok(None)
    }

    fn remove_record(&mut self, key: &[u8], record: &Stored) {
        self.txn.remove(layout::record_key(key));
        if let Some(at) = record.expires_at_ms {
            self.txn.remove(layout::expiry_key(at, key));
        }
        self.meta.keys = self.meta.keys.saturating_sub(1);
        self.meta.bytes = self
            .meta
            .bytes
            .saturating_sub(entry_size(key.len(), record.value_len));
        *self.meta_changed = true;
    }

    /// Stores `key`'s registration count (a count of zero is no row).
    fn set_observer_count(&mut self, key: &[u8], count: u64) {
        let row = layout::observer_count_key(key);
        if count == 0 {
            self.txn.remove(row);
        } else {
            self.txn.put(row, layout::observer_count_value(count));
        }
    }

    /// Takes one removed registration off `key`'s count.
    fn drop_observer_count(&mut self, key: &[u8]) -> Result<()> {
        let count = read::observer_count(&*self.txn, key)?;
        self.set_observer_count(key, count.saturating_sub(1));
        Ok(())
    }

    /// Queues one event for the change of `key` if some client observes it (none: no event).
    /// `new_value` is the value a SET stored; `None` is a deletion. Who observes it is left to
    /// the notifier (see [`KeyEvent`]).
    fn notify(
        &mut self,
        key: &[u8],
        version: Hlc,
        new_value: Option<&[u8]>,
        events: &mut Vec<KeyEvent>,
    ) -> Result<()> {
        if self.meta.registrations == 0 || read::observer_count(&*self.txn, key)? == 0 {
            return Ok(());
        }
        events.push(KeyEvent {
            key: key.to_vec(),
            version,
            change: new_value.map_or(Change::Delete, |value| Change::Set(value.to_vec())),
        });
        Ok(())
    }
}

/// The arguments of a SET, borrowed from the proposal.
pub(crate) struct SetWrite<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) value: &'a [u8],
    pub(crate) condition: SetCondition,
    pub(crate) expire_after_ms: Option<u64>,
    pub(crate) fencing_token: Option<&'a Hlc>,
}

/// Protocol §4: a fenced key needs a token at least as high as the stored one.
fn fencing_rejection(record: Option<&Stored>, request_token: Option<&Hlc>) -> Option<Rejection> {
    let stored = record?.fencing_token.as_ref()?;
    match request_token {
        None => Some(Rejection::FencingTokenRequired),
        Some(token) if token < stored => Some(Rejection::FencingTokenLower),
        Some(_) => None,
    }
}

/// Bytes a key counts against the byte quota (key length plus value length).
fn entry_size(key_len: usize, value_len: usize) -> u64 {
    u64::try_from(key_len.saturating_add(value_len)).unwrap_or(u64::MAX)
}
