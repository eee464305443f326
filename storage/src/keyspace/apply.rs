//! The deterministic state machine: applies one [`Proposal`] to a [`Txn`].
//!
//! Every decision (fencing §4, conditions §2, quota §9, expiry §8, reply memory §6,
//! registrations §7, versions §3) is made here from the entry and the stored state alone, so
//! every replica reaches the same state and the same [`Outcome`]. No clock, no I/O beyond the
//! transaction, no panics on stored data (corruption surfaces as an error).

use crate::codec;
use crate::error::Result;
use crate::hlc::Hlc;
use crate::keyspace::layout::{self, Table};
use crate::keyspace::mutation::{Limits, Mutation, Proposal, RequestId, SetCondition};
use crate::keyspace::outcome::{Applied, Change, KeyEvent, Outcome, Rejection};
use crate::keyspace::read;
use crate::keyspace::record::{KeyspaceMeta, Record, RememberedReply};
use crate::keyspace::txn::Txn;

/// At most this many expired remembered replies are dropped per applied entry. One entry adds
/// at most one, so the memory shrinks as fast as it grows once replies expire.
const REPLIES_PRUNED_PER_ENTRY: usize = 32;

/// The keyspace inside one transaction. Open it, apply entries in log order, then
/// [`Keyspace::finish`] to write back the store-wide counters.
pub struct Keyspace<'t, T: Txn> {
    txn: &'t mut T,
    meta: KeyspaceMeta,
    meta_changed: bool,
}

impl<'t, T: Txn> Keyspace<'t, T> {
    /// Loads the store-wide state from `txn`.
    pub fn open(txn: &'t mut T) -> Result<Self> {
        let meta = read::meta(&*txn)?;
        Ok(Keyspace {
            txn,
            meta,
            meta_changed: false,
        })
    }

    /// The transaction, for the consensus layer's own records in the same atomic batch.
    pub fn txn_mut(&mut self) -> &mut T {
        self.txn
    }

    /// Store-wide state as of the entries applied so far.
    pub fn meta(&self) -> &KeyspaceMeta {
        &self.meta
    }

    /// Writes the store-wide state back; returns it.
    pub fn finish(self) -> KeyspaceMeta {
        if self.meta_changed {
            self.txn.put(
                layout::meta_key(layout::META_KEYSPACE),
                codec::encode(&self.meta),
            );
        }
        self.meta
    }

    /// Applies one entry.
    pub fn apply(&mut self, proposal: &Proposal) -> Result<Applied> {
        let time = proposal.wall_ms.max(self.meta.time_floor_ms);
        if time != self.meta.time_floor_ms {
            self.meta.time_floor_ms = time;
            self.meta_changed = true;
        }
        self.prune_replies(time)?;

        if let Some(request) = &proposal.request
            && let Some(outcome) = read::remembered_reply(&*self.txn, request, time)?
        {
            return Ok(Applied {
                outcome,
                events: Vec::new(),
            });
        }

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
                Some(value),
                fencing_token.as_ref(),
                &mut events,
            )?,
            Mutation::Observe { client, key } => self.observe(client, key)?,
            Mutation::Unobserve { client, key } => self.unobserve(client, key)?,
            Mutation::Expire { keys } => self.expire(&proposal.stamp, time, keys, &mut events)?,
            Mutation::ForgetClient { client } => self.forget_client(client)?,
            Mutation::SetLimits(limits) => self.set_limits(*limits),
        };

        if let Some(request) = &proposal.request {
            self.remember(request, &outcome, time)?;
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

    /// The key's record if it exists at `time`. A record past its expiry is removed here (with
    /// its DELETE notification) so that nothing can observe it any more.
    fn live_record(
        &mut self,
        stamp: &Hlc,
        time: u64,
        key: &[u8],
        events: &mut Vec<KeyEvent>,
    ) -> Result<Option<Record>> {
        let Some(record) = read::record(&*self.txn, key)? else {
            return Ok(None);
        };
        if !record.is_expired_at(time) {
            return Ok(Some(record));
        }
        self.remove_record(key, &record);
        let version = self.issue_version(stamp);
        self.notify(key, version, Change::Delete, events)?;
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
        let existing = self.live_record(stamp, time, key, events)?;
        if let Some(rejection) = fencing_rejection(existing.as_ref(), fencing_token) {
            return Ok(Outcome::Rejected(rejection));
        }
        if let Some(record) = &existing {
            let holds = match condition {
                SetCondition::Always => true,
                SetCondition::IfAbsent => false,
                SetCondition::IfAbsentOrEqual => record.value == *value,
            };
            if !holds {
                return Ok(Outcome::NotStored {
                    version: record.version.clone(),
                });
            }
        }

        let new_size = entry_size(key, value);
        let old_size = existing.as_ref().map_or(0, |r| entry_size(key, &r.value));
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
        let stored_token = existing.as_ref().and_then(|r| r.fencing_token.clone());
        let fencing_token = match (stored_token, fencing_token) {
            (Some(stored), Some(request)) => Some(stored.max(request.clone())),
            (stored, request) => stored.or_else(|| request.cloned()),
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
        let record = Record {
            value: value.to_vec(),
            version: version.clone(),
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
        self.notify(key, version.clone(), Change::Set(record.value), events)?;
        Ok(Outcome::Stored { version })
    }

    fn delete(
        &mut self,
        stamp: &Hlc,
        time: u64,
        key: &[u8],
        expected_value: Option<&Vec<u8>>,
        fencing_token: Option<&Hlc>,
        events: &mut Vec<KeyEvent>,
    ) -> Result<Outcome> {
        let Some(record) = self.live_record(stamp, time, key, events)? else {
            return Ok(Outcome::Missing);
        };
        if let Some(rejection) = fencing_rejection(Some(&record), fencing_token) {
            return Ok(Outcome::Rejected(rejection));
        }
        if expected_value.is_some_and(|expected| *expected != record.value) {
            return Ok(Outcome::ValueDiffers);
        }
        self.remove_record(key, &record);
        let version = self.issue_version(stamp);
        self.notify(key, version.clone(), Change::Delete, events)?;
        Ok(Outcome::Deleted { version })
    }

    fn observe(&mut self, client: &str, key: &[u8]) -> Result<Outcome> {
        let by_key = layout::observer_key(key, client);
        if self.txn.get(&by_key)?.is_some() {
            return Ok(Outcome::Observing);
        }
        let max =
            usize::try_from(self.meta.limits.max_registrations_per_client).unwrap_or(usize::MAX);
        if read::count_prefix(&*self.txn, &layout::observed_prefix(client), max)? >= max {
            return Ok(Outcome::Rejected(Rejection::QuotaExceeded));
        }
        self.txn.put(by_key, Vec::new());
        self.txn.put(layout::observed_key(client, key), Vec::new());
        Ok(Outcome::Observing)
    }

    fn unobserve(&mut self, client: &str, key: &[u8]) -> Result<Outcome> {
        let by_key = layout::observer_key(key, client);
        if self.txn.get(&by_key)?.is_none() {
            return Ok(Outcome::NotObserving);
        }
        self.txn.remove(by_key);
        self.txn.remove(layout::observed_key(client, key));
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
            let Some(record) = read::record(&*self.txn, key)? else {
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
            self.notify(key, version, Change::Delete, events)?;
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

    fn remove_record(&mut self, key: &[u8], record: &Record) {
        self.txn.remove(layout::record_key(key));
        if let Some(at) = record.expires_at_ms {
            self.txn.remove(layout::expiry_key(at, key));
        }
        self.meta.keys = self.meta.keys.saturating_sub(1);
        self.meta.bytes = self
            .meta
            .bytes
            .saturating_sub(entry_size(key, &record.value));
        self.meta_changed = true;
    }

    /// Queues a notification for every client registered on `key` (none: no event).
    fn notify(
        &self,
        key: &[u8],
        version: Hlc,
        change: Change,
        events: &mut Vec<KeyEvent>,
    ) -> Result<()> {
        let observers = read::observers(&*self.txn, key)?;
        if !observers.is_empty() {
            events.push(KeyEvent {
                key: key.to_vec(),
                version,
                change,
                observers,
            });
        }
        Ok(())
    }

    fn remember(&mut self, request: &RequestId, outcome: &Outcome, time: u64) -> Result<()> {
        let reply_key = layout::reply_key(&request.client, &request.correlation);
        if let Some(bytes) = self.txn.get(&reply_key)? {
            let old: RememberedReply = codec::decode("remembered reply", &bytes)?;
            self.txn
                .remove(layout::reply_expiry_key(old.expires_at_ms, &reply_key));
        }
        let expires_at_ms = time.saturating_add(request.remember_for_ms);
        let remembered = RememberedReply {
            expires_at_ms,
            outcome: outcome.clone(),
        };
        self.txn.put(
            layout::reply_expiry_key(expires_at_ms, &reply_key),
            Vec::new(),
        );
        self.txn.put(reply_key, codec::encode(&remembered));
        Ok(())
    }

    fn prune_replies(&mut self, time: u64) -> Result<()> {
        let (start, _) = Table::ReplyExpiry.bounds();
        let due: Vec<Vec<u8>> = self
            .txn
            .range(&start, &layout::reply_expiry_due_bound(time))
            .take(REPLIES_PRUNED_PER_ENTRY)
            .map(|entry| entry.map(|(k, _)| k))
            .collect::<Result<_>>()?;
        for index_key in due {
            if let Some((_, reply_key)) = layout::split_reply_expiry_key(&index_key) {
                self.txn.remove(reply_key.to_vec());
            }
            self.txn.remove(index_key);
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
fn fencing_rejection(record: Option<&Record>, request_token: Option<&Hlc>) -> Option<Rejection> {
    let stored = record?.fencing_token.as_ref()?;
    match request_token {
        None => Some(Rejection::FencingTokenRequired),
        Some(token) if token < stored => Some(Rejection::FencingTokenLower),
        Some(_) => None,
    }
}

/// Bytes a key counts against the byte quota.
fn entry_size(key: &[u8], value: &[u8]) -> u64 {
    u64::try_from(key.len().saturating_add(value.len())).unwrap_or(u64::MAX)
}
