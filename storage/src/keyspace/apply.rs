//! The deterministic state machine: applies one [`Proposal`] to a [`Txn`].
//!
//! Every decision (fencing §4, conditions §2, quota §9, expiry §8, reply memory §6,
//! registrations §7, versions §3) is made here from the entry and the stored state alone, so
//! every replica reaches the same state and the same [`Outcome`]. No clock, no I/O beyond the
//! transaction, no panics on stored data (corruption surfaces as an error).
//!
//! # Cost per proposal
//!
//! The consensus layer applies many proposals (a log entry holds up to 1,024, and one apply
//! call may cover several entries) in one [`Keyspace`] over one overlay transaction. Work per
//! proposal must not grow with the number of proposals already applied in that transaction,
//! nor with the size of the store:
//!
//! - **Reply memory (§6).** Every proposal drops up to [`REPLIES_PRUNED_PER_ENTRY`] replies
//!   that are expired at its (clamped, hence non-decreasing) time, earliest expiry first:
//!   exactly what a scan of the reply-expiry index from its start would find. Instead of that
//!   scan, which would walk again past every index entry earlier proposals of the transaction
//!   removed (quadratic in the batch), [`Keyspace`] keeps a *cursor*: a lower bound of the
//!   live index entries of this transaction. A prune scans from the cursor, then moves it past
//!   what it removed (or to the due bound when it removed everything due); a reply remembered
//!   below the cursor (a tiny expiry) moves the cursor back. So a prune reads the entries it
//!   removes, plus, at most once each, index entries a retry replaced (hidden by the
//!   overlay); when nothing is due it is one empty range scan, and none at all while the time
//!   stays the same. It removes the same entries as the plain scan, so pruning does not
//!   depend on how proposals are grouped into transactions: replicas that group them
//!   differently (openraft hands each replica its own runs of committed entries) stay equal.
//!   A pruned reply expired at the pruning proposal's time, so no later proposal, whose time is
//!   at least as late, and no leader read (its time is at least the store's) could still get it.
//!   A per-transaction budget instead would make the pruned set depend on the grouping.
//! - **Notifications (§7).** A change yields one [`KeyEvent`] if its key has at least one
//!   registration: one point read of the key's registration count (none at all while the
//!   store holds no registration, which the meta counts), never a scan or a list of the
//!   registrations (the notifier reads the observers later, page by page, off this thread).
//!   A scan would not do: the memtable in front of sled copies every row of a scanned range it
//!   holds, so right after 1,000 clients registered a key, each write of it would copy 1,000
//!   rows.
//! - **Copies.** Stored records and replies are read through
//!   [`crate::keyspace::OrderedRead::get_ref`] and decoded with borrowed values; records and
//!   replies are encoded from borrowed parts, and a SET's value is copied once, into the
//!   encoded record (plus once into the event if someone observes the key). The reply memory
//!   is looked up once per proposal (the lookup also yields what the new reply replaces).
//! - **Reply-memory caps (§6).** Eviction (below) scans from the same cursor as pruning and
//!   moves it past what it removed, so it reads the entries it evicts (plus, like a prune,
//!   replaced entries hidden by the overlay) and takes no scan at all while the memory is
//!   within its caps. The sizes it subtracts are in the index entries it reads anyway.
//! - **Registration caps (§7, §9).** The store-wide cap is one comparison with a counter, the
//!   per-key cap one with the key's registration count ([`Table::ObserverCounts`], also what
//!   notifications look up); the per-client cap counts the client's registrations with a
//!   prefix scan that stops at the cap (registering a pair again reads none of them). The
//!   per-key count costs one read and one write per registration, STOP, and registration a
//!   departure drops; it is kept exact by each of them, never recounted.
//! - **Counters** (keys, bytes, versions, time floor, registrations, remembered replies and
//!   their bytes, evictions) live in [`KeyspaceMeta`], read once at [`Keyspace::open`] and
//!   written once at [`Keyspace::finish`]. They are kept exact by every change, never recounted.
//!   The device-bound meta record is handled the same way: read at the transaction's first
//!   device-bound command, written once at [`Keyspace::finish`].
//!
//! # Caps on the tables clients make grow
//!
//! Client ids and correlation data are whatever requests say, so the two tables keyed by them
//! are capped store-wide by [`Limits`] (replicated like the key quotas):
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
//! - **Reply memory (§6).** A remembered reply counts as one entry and as its reply-table key
//!   length plus its encoded value length (`remembered_replies`, `remembered_reply_bytes`).
//!   Its reply-expiry index entry holds that size, so pruning and eviction subtract it without
//!   reading the reply; a reply replaced by a retry after its expiry is subtracted before its
//!   successor is added. After a reply is remembered, while the memory is over
//!   `max_remembered_replies` or `max_remembered_reply_bytes`, the reply with the earliest
//!   expiry is evicted (index order: expiry instant, then reply key; the reply just remembered
//!   is evicted itself if it expires first). A reply that cannot fit even alone (bigger than
//!   the byte cap, or a cap of zero replies) is not remembered, and nothing is evicted for it.
//!   Each eviction and each reply not remembered adds one to `replies_evicted`. **A retry of an
//!   evicted request is executed again**, as a retry after the request's expiry is: the caps
//!   bound the memory a flood of requests can take, at the price of exactly-once for the
//!   requests evicted; the counter is there so operators see it happen and raise the caps.
//!   Eviction removes exactly the first entries of the index, the same whatever the grouping
//!   of proposals into transactions. Lowering a cap evicts nothing by itself; the next request
//!   whose reply is to be remembered evicts down to the new cap at once (work proportional to
//!   what it removes, in one proposal).
//! - **Replays only of the same request (§6).** Client ids and correlation data are claims, so
//!   a remembered reply also holds the digest of its request ([`RequestId::digest`]), and only
//!   a request with that digest gets it. Another request with the same client and correlation
//!   data is executed as new and its reply replaces the remembered one (one entry per client
//!   and correlation data, as before, so the caps above still bound the memory);
//!   `reply_mismatches` counts these. A client that really reuses correlation data for a new
//!   request gets that request executed, not the old one's reply; a forger who guessed a
//!   victim's correlation data gets its own request executed, never the victim's reply, and
//!   the victim's later retry (a mismatch again) is executed again, not answered with the
//!   forger's.

use crate::codec;
use crate::devicebound::{self, DeviceCounters, DeviceIndex, DeviceOutcome, DeviceboundMeta};
use crate::error::{Result, StorageError};
use crate::hlc::Hlc;
use crate::keyspace::layout::{self, Table};
use crate::keyspace::mutation::{Limits, Mutation, Proposal, RequestId, SetCondition};
use crate::keyspace::outcome::{Applied, Change, KeyEvent, Outcome, Rejection};
use crate::keyspace::read;
use crate::keyspace::record::{
    self, KeyspaceMeta, RecordOut, RecordView, RememberedReply, RememberedReplyOut,
};
use crate::keyspace::txn::Txn;

/// At most this many expired remembered replies are dropped per applied proposal. One proposal
/// adds at most one, so the memory shrinks as fast as it grows once replies expire.
pub const REPLIES_PRUNED_PER_ENTRY: usize = 32;

/// The keyspace inside one transaction. Open it, apply proposals in log order, then
/// [`Keyspace::finish`] to write back the store-wide counters.
///
/// Everything in the keyspace tables must be written through it while it is open (the
/// consensus layer may add its own [`Table::ConsensusState`] records through
/// [`Keyspace::txn_mut`]): it caches facts about the transaction's contents.
pub struct Keyspace<'t, T: Txn> {
    txn: &'t mut T,
    meta: KeyspaceMeta,
    meta_changed: bool,
    /// No live [`Table::ReplyExpiry`] entry of the transaction sorts below this key.
    reply_cursor: Vec<u8>,
    /// The device-bound meta record, read at the transaction's first device-bound command and
    /// written back by [`Keyspace::finish`] (`None`: no such command yet).
    device_meta: Option<DeviceboundMeta>,
    device_meta_changed: bool,
    /// The device queues' index of the store as this transaction changes it.
    devices: Devices<'t>,
}

/// Where a [`Keyspace`] finds the device queues' index.
enum Devices<'t> {
    /// Built from the transaction's rows at its first device-bound command (`None`: not yet):
    /// for callers without a long-lived index (tests, tools).
    Loaded(Option<DeviceIndex>),
    /// The caller's index, kept from one transaction to the next (the consensus layer's).
    Kept(&'t mut DeviceIndex),
}

impl Devices<'_> {
    fn get(
        &mut self,
        view: &(impl crate::keyspace::OrderedRead + ?Sized),
    ) -> Result<&mut DeviceIndex> {
        match self {
            Devices::Kept(index) => Ok(index),
            Devices::Loaded(Some(index)) => Ok(index),
            Devices::Loaded(loaded) => Ok(loaded.insert(DeviceIndex::load(view)?)),
        }
    }
}

/// What one transaction learnt about the store that stays true for the next one, provided
/// every write to the keyspace tables goes through a [`Keyspace`]: the consensus layer carries
/// it from one apply call to the next and drops it when a snapshot replaces the state. With a
/// write-back layer in front of the store, removed reply-index entries linger as tombstones
/// until they are written out; starting the reply scan at the carried cursor skips them.
#[derive(Debug, Clone, Default)]
pub struct Carry {
    reply_cursor: Option<Vec<u8>>,
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

/// Where a proposal's reply is remembered, and the reply it replaces.
struct ReplySlot<'p> {
    request: &'p RequestId,
    key: Vec<u8>,
    replaced: Option<Replaced>,
}

/// A reply that the new one replaces: expired but not pruned yet, or a live one of another
/// request with the same client and correlation data.
struct Replaced {
    expires_at_ms: u64,
    /// Its counted size ([`reply_size`]).
    size: u64,
}

impl<'t, T: Txn> Keyspace<'t, T> {
    /// Loads the store-wide state from `txn`; the device queues' index is built from its rows
    /// when a device-bound command first needs it.
    pub fn open(txn: &'t mut T) -> Result<Self> {
        Self::open_carrying(txn, &Carry::default())
    }

    /// [`Keyspace::open`], starting from what the previous transaction learnt.
    pub fn open_carrying(txn: &'t mut T, carry: &Carry) -> Result<Self> {
        Self::open_with(txn, carry, Devices::Loaded(None))
    }

    /// [`Keyspace::open_carrying`] with the caller's device queues' index, which must be the
    /// index of `txn`'s rows ([`DeviceIndex::load`]) and is changed as device-bound commands
    /// apply. If applying fails, the caller abandons the transaction and must rebuild the index
    /// from the committed rows.
    pub fn open_with_index(
        txn: &'t mut T,
        carry: &Carry,
        index: &'t mut DeviceIndex,
    ) -> Result<Self> {
        Self::open_with(txn, carry, Devices::Kept(index))
    }

    fn open_with(txn: &'t mut T, carry: &Carry, devices: Devices<'t>) -> Result<Self> {
        let meta = read::meta(&*txn)?;
        Ok(Keyspace {
            txn,
            meta,
            meta_changed: false,
            reply_cursor: carry
                .reply_cursor
                .clone()
                .unwrap_or_else(|| Table::ReplyExpiry.bounds().0),
            device_meta: None,
            device_meta_changed: false,
            devices,
        })
    }

    /// What the next transaction may start from (see [`Carry`]).
    pub fn carry(&self) -> Carry {
        Carry {
            reply_cursor: Some(self.reply_cursor.clone()),
        }
    }

    /// The transaction, for the consensus layer's own records in the same atomic batch.
    pub fn txn_mut(&mut self) -> &mut T {
        self.txn
    }

    /// Store-wide state as of the entries applied so far.
    pub fn meta(&self) -> &KeyspaceMeta {
        &self.meta
    }

    /// Writes the store-wide state back (the keyspace's and the device-bound meta records);
    /// returns the keyspace's. Every transaction that applied proposals must end with it, or
    /// their counters are lost.
    pub fn finish(self) -> KeyspaceMeta {
        if self.device_meta_changed
            && let Some(device_meta) = &self.device_meta
        {
            devicebound::write_meta(&mut *self.txn, device_meta);
        }
        if self.meta_changed {
            self.txn.put(
                layout::meta_key(layout::META_KEYSPACE),
                codec::encode(&self.meta),
            );
        }
        self.meta
    }

    /// Applies one proposal.
    pub fn apply(&mut self, proposal: &Proposal) -> Result<Applied> {
        let time = read::store_time(self.meta.time_floor_ms, proposal.wall_ms);
        if time != self.meta.time_floor_ms {
            self.meta.time_floor_ms = time;
            self.meta_changed = true;
        }
        self.prune_replies(time)?;

        let slot = match &proposal.request {
            Some(request) => match self.reply_slot(request, time)? {
                Ok(slot) => Some(slot),
                Err(outcome) => {
                    return Ok(Applied {
                        outcome,
                        events: Vec::new(),
                    });
                }
            },
            None => None,
        };

        let mut events = Vec::new();
        let outcome = match &proposal.mutation {
            Mutation::Set {
                key,
                value,
                condition,
                expire_after_ms,
                fencing_token,
            } => {
                let write = SetWrite {
                    key,
                    value,
                    condition: *condition,
                    expire_after_ms: *expire_after_ms,
                    fencing_token: fencing_token.as_ref(),
                };
                self.set(&proposal.stamp, time, write, &mut events)?
            }
            Mutation::Del { key, fencing_token } => self.delete(
                &proposal.stamp,
                time,
                key,
                None,
                fencing_token.as_ref(),
                &mut events,
            )?,
            Mutation::VDel {
                key,
                value,
                fencing_token,
            } => self.delete(
                &proposal.stamp,
                time,
                key,
                Some(value.as_slice()),
                fencing_token.as_ref(),
                &mut events,
            )?,
            Mutation::Observe { client, key } => self.observe(client, key)?,
            Mutation::Unobserve { client, key } => self.unobserve(client, key)?,
            Mutation::Expire { keys } => self.expire(&proposal.stamp, time, keys, &mut events)?,
            Mutation::ForgetClient { client } => self.forget_client(client)?,
            Mutation::SetLimits(limits) => self.set_limits(*limits),
            Mutation::Device(command) => {
                let device_meta = match &mut self.device_meta {
                    Some(device_meta) => device_meta,
                    None => self
                        .device_meta
                        .insert(devicebound::read::meta(&*self.txn)?),
                };
                let index = self.devices.get(&*self.txn)?;
                let (outcome, changed) = devicebound::apply_to(
                    &mut *self.txn,
                    index,
                    device_meta,
                    (time, proposal.token_seed.as_ref()),
                    command,
                )?;
                self.device_meta_changed |= changed;
                Outcome::Device(Box::new(outcome))
            }
        };

        if let Some(slot) = slot {
            self.remember(slot, &outcome, time)?;
        }
        Ok(Applied { outcome, events })
    }

    /// A version greater than every version issued before, at least `stamp`.
    fn issue_version(&mut self, stamp: &Hlc) -> Hlc {
        let version = match &self.meta.max_version {
            Some(max) if stamp <= max => max.successor(&stamp.node),
            _ => stamp.clone(),
        };
        self.meta.max_version = Some(version.clone());
        self.meta_changed = true;
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

    fn set(
        &mut self,
        stamp: &Hlc,
        time: u64,
        write: SetWrite<'_>,
        events: &mut Vec<KeyEvent>,
    ) -> Result<Outcome> {
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
        self.meta_changed = true;
        self.notify(key, version.clone(), Some(value), events)?;
        Ok(Outcome::Stored { version })
    }

    fn delete(
        &mut self,
        stamp: &Hlc,
        time: u64,
        key: &[u8],
        expected_value: Option<&[u8]>,
        fencing_token: Option<&Hlc>,
        events: &mut Vec<KeyEvent>,
    ) -> Result<Outcome> {
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

    fn observe(&mut self, client: &str, key: &[u8]) -> Result<Outcome> {
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
            self.meta_changed = true;
            return Ok(Outcome::Rejected(Rejection::QuotaExceeded));
        }
        let floor = record::encode_observer_floor(self.meta.max_version.as_ref());
        self.txn.put(by_key, floor);
        self.txn.put(layout::observed_key(client, key), Vec::new());
        self.set_observer_count(key, on_key.saturating_add(1));
        self.meta.registrations = self.meta.registrations.saturating_add(1);
        self.meta_changed = true;
        Ok(Outcome::Observing)
    }

    fn unobserve(&mut self, client: &str, key: &[u8]) -> Result<Outcome> {
        let by_key = layout::observer_key(key, client);
        if self.txn.get_ref(&by_key)?.is_none() {
            return Ok(Outcome::NotObserving);
        }
        self.txn.remove(by_key);
        self.txn.remove(layout::observed_key(client, key));
        self.drop_observer_count(key)?;
        self.meta.registrations = self.meta.registrations.saturating_sub(1);
        self.meta_changed = true;
        Ok(Outcome::StoppedObserving)
    }

    fn expire(
        &mut self,
        stamp: &Hlc,
        time: u64,
        keys: &[serde_bytes::ByteBuf],
        events: &mut Vec<KeyEvent>,
    ) -> Result<Outcome> {
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

    fn forget_client(&mut self, client: &str) -> Result<Outcome> {
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
            self.meta_changed = true;
        }
        Ok(Outcome::ForgotClient {
            registrations: u32::try_from(keys.len()).unwrap_or(u32::MAX),
        })
    }

    fn set_limits(&mut self, limits: Limits) -> Outcome {
        self.meta.limits = limits;
        self.meta_changed = true;
        Outcome::LimitsSet
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
        self.meta_changed = true;
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

    /// Looks the request up in the reply memory (§6): `Err(outcome)` if a retry at `time` must
    /// get the remembered outcome, otherwise where its reply will be remembered. A live reply
    /// of another request (same client and correlation data, another digest) is never given:
    /// this request is executed as new, its reply replaces that one, and the mismatch is
    /// counted.
    fn reply_slot<'p>(
        &mut self,
        request: &'p RequestId,
        time: u64,
    ) -> Result<Result<ReplySlot<'p>, Outcome>> {
        let key = layout::reply_key(&request.client, &request.correlation);
        let replaced = match self.txn.get_ref(&key)? {
            Some(bytes) => {
                let old: RememberedReply = codec::decode("remembered reply", &bytes)?;
                if old.expires_at_ms > time {
                    if old.digest == request.digest {
                        return Ok(Err(old.outcome));
                    }
                    self.meta.reply_mismatches = self.meta.reply_mismatches.saturating_add(1);
                    self.meta_changed = true;
                }
                Some(Replaced {
                    expires_at_ms: old.expires_at_ms,
                    size: reply_size(key.len(), bytes.len()),
                })
            }
            None => None,
        };
        Ok(Ok(ReplySlot {
            request,
            key,
            replaced,
        }))
    }

    /// Remembers the reply (§6), replacing an expired one of the same request (or a live one of
    /// another request with the same identity), then evicts the earliest-expiring replies while
    /// the memory is over a cap (see the module docs).
    fn remember(&mut self, slot: ReplySlot<'_>, outcome: &Outcome, time: u64) -> Result<()> {
        let ReplySlot {
            request,
            key,
            replaced,
        } = slot;
        if let Some(old) = &replaced {
            self.txn
                .remove(layout::reply_expiry_key(old.expires_at_ms, &key));
            self.forget_reply_counts(old.size);
        }
        let expires_at_ms = time.saturating_add(request.remember_for_ms);
        let remembered = match outcome {
            // A retry that gets this reply changes nothing: it must count nothing (and publish
            // nothing) either.
            Outcome::Device(device) => {
                let quiet = DeviceOutcome {
                    result: device
                        .result
                        .without_deliveries()
                        .unwrap_or_else(|| device.result.clone()),
                    counters: DeviceCounters::default(),
                };
                codec::encode(&RememberedReplyOut {
                    expires_at_ms,
                    digest: request.digest,
                    outcome: &Outcome::Device(Box::new(quiet)),
                })
            }
            _ => codec::encode(&RememberedReplyOut {
                expires_at_ms,
                digest: request.digest,
                outcome,
            }),
        };
        let size = reply_size(key.len(), remembered.len());
        let limits = self.meta.limits;
        self.meta_changed = true;
        if limits.max_remembered_replies == 0 || size > limits.max_remembered_reply_bytes {
            // It could never fit: it is not remembered, and nothing is evicted to make room
            // for it (only what a lowered cap requires).
            if replaced.is_some() {
                self.txn.remove(key);
            }
            self.meta.replies_evicted = self.meta.replies_evicted.saturating_add(1);
            return self.evict_replies();
        }
        let index_key = layout::reply_expiry_key(expires_at_ms, &key);
        if index_key < self.reply_cursor {
            self.reply_cursor.clone_from(&index_key);
        }
        self.txn.put(index_key, layout::reply_size_value(size));
        self.txn.put(key, remembered);
        self.meta.remembered_replies = self.meta.remembered_replies.saturating_add(1);
        self.meta.remembered_reply_bytes = self.meta.remembered_reply_bytes.saturating_add(size);
        self.evict_replies()
    }

    /// Takes one removed reply of counted size `size` off the reply-memory counters.
    fn forget_reply_counts(&mut self, size: u64) {
        self.meta.remembered_replies = self.meta.remembered_replies.saturating_sub(1);
        self.meta.remembered_reply_bytes = self.meta.remembered_reply_bytes.saturating_sub(size);
        self.meta_changed = true;
    }

    /// Removes the replies of these reply-expiry index entries (ascending, all at or above the
    /// cursor) with their index entries, and moves the cursor right after the last one.
    fn remove_replies(&mut self, index_entries: Vec<(Vec<u8>, u64)>) {
        for (index_key, size) in &index_entries {
            if let Some((_, reply_key)) = layout::split_reply_expiry_key(index_key) {
                self.txn.remove(reply_key.to_vec());
            }
            self.forget_reply_counts(*size);
        }
        if let Some((last, _)) = index_entries.last() {
            let mut next = Vec::with_capacity(last.len() + 1);
            next.extend_from_slice(last);
            next.push(0);
            self.reply_cursor = next;
        }
        for (index_key, _) in index_entries {
            self.txn.remove(index_key);
        }
    }

    /// Evicts remembered replies, earliest expiry first (the index order, scanned from the
    /// cursor like pruning), until the memory is within both caps again.
    fn evict_replies(&mut self) -> Result<()> {
        let limits = self.meta.limits;
        let (mut count, mut bytes) = (
            self.meta.remembered_replies,
            self.meta.remembered_reply_bytes,
        );
        let over = |count: u64, bytes: u64| {
            count > limits.max_remembered_replies || bytes > limits.max_remembered_reply_bytes
        };
        if !over(count, bytes) {
            return Ok(());
        }
        let (_, end) = Table::ReplyExpiry.bounds();
        let mut victims = Vec::new();
        for entry in self.txn.range(&self.reply_cursor, &end) {
            let (index_key, value) = entry?;
            let size = indexed_reply_size(&value)?;
            count = count.saturating_sub(1);
            bytes = bytes.saturating_sub(size);
            victims.push((index_key, size));
            if !over(count, bytes) {
                break;
            }
        }
        // Counted above what the index holds only if the store is corrupt; then the index runs
        // out first and the counters stay as far off as they were.
        let evicted = u64::try_from(victims.len()).unwrap_or(u64::MAX);
        self.meta.replies_evicted = self.meta.replies_evicted.saturating_add(evicted);
        self.remove_replies(victims);
        Ok(())
    }

    /// Drops up to [`REPLIES_PRUNED_PER_ENTRY`] replies expired at `time`, earliest first,
    /// scanning from the cursor (see the module docs).
    fn prune_replies(&mut self, time: u64) -> Result<()> {
        let due_bound = layout::reply_expiry_due_bound(time);
        if self.reply_cursor >= due_bound {
            return Ok(()); // everything due at `time` is already gone
        }
        let due: Vec<(Vec<u8>, u64)> = self
            .txn
            .range(&self.reply_cursor, &due_bound)
            .take(REPLIES_PRUNED_PER_ENTRY)
            .map(|entry| {
                let (index_key, value) = entry?;
                Ok((index_key, indexed_reply_size(&value)?))
            })
            .collect::<Result<_>>()?;
        let exhausted = due.len() < REPLIES_PRUNED_PER_ENTRY;
        // Everything up to and including the last one is removed: start right after it ...
        self.remove_replies(due);
        if exhausted {
            // ... or, when that was everything in [cursor, due_bound), at the due bound.
            self.reply_cursor = due_bound;
        }
        Ok(())
    }
}

/// The arguments of a SET, borrowed from the proposal.
struct SetWrite<'a> {
    key: &'a [u8],
    value: &'a [u8],
    condition: SetCondition,
    expire_after_ms: Option<u64>,
    fencing_token: Option<&'a Hlc>,
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

/// What a remembered reply counts against the reply-memory byte cap: its reply-table key
/// length plus its encoded value length.
fn reply_size(key_len: usize, value_len: usize) -> u64 {
    entry_size(key_len, value_len)
}

/// The counted size a reply-expiry index entry holds.
fn indexed_reply_size(value: &[u8]) -> Result<u64> {
    layout::parse_reply_size_value(value).ok_or_else(|| StorageError::Corrupt {
        what: "reply-expiry index entry",
        reason: format!("{} bytes that are not one size varint", value.len()),
    })
}

/// Bytes a key counts against the byte quota (key length plus value length).
fn entry_size(key_len: usize, value_len: usize) -> u64 {
    u64::try_from(key_len.saturating_add(value_len)).unwrap_or(u64::MAX)
}
