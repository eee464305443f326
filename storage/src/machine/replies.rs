//! The reply memory (protocol §6), common to every command that answers a client request:
//! before an entry's mutation is applied, a retry of a request whose reply is remembered gets
//! that reply and changes nothing; after it, the new reply is remembered, and the memory is
//! pruned of expired replies and kept within its caps.
//!
//! # Cost per proposal
//!
//! - **Reply memory (§6).** Every proposal drops up to [`REPLIES_PRUNED_PER_ENTRY`] replies
//!   that are expired at its (clamped, hence non-decreasing) time, earliest expiry first:
//!   exactly what a scan of the reply-expiry index from its start would find. Instead of that
//!   scan, which would walk again past every index entry earlier proposals of the transaction
//!   removed (quadratic in the batch), the [`crate::machine::Machine`] keeps a *cursor*: a
//!   lower bound of the live index entries of this transaction. A prune scans from the cursor,
//!   then moves it past what it removed (or to the due bound when it removed everything due); a
//!   reply remembered below the cursor (a tiny expiry) moves the cursor back. So a prune reads
//!   the entries it removes, plus, at most once each, index entries a retry replaced (hidden by
//!   the overlay); when nothing is due it is one empty range scan, and none at all while the
//!   time stays the same. It removes the same entries as the plain scan, so pruning does not
//!   depend on how proposals are grouped into transactions: replicas that group them
//!   differently (openraft hands each replica its own runs of committed entries) stay equal.
//!   A pruned reply expired at the pruning proposal's time, so no later proposal, whose time is
//!   at least as late, and no leader read (its time is at least the store's) could still get it.
//!   A per-transaction budget instead would make the pruned set depend on the grouping.
//! - **Reply memory looked up once** per proposal: the lookup also yields what the new reply
//!   replaces. Replies are decoded and encoded from borrowed parts.
//! - **Reply-memory caps (§6).** Eviction (below) scans from the same cursor as pruning and
//!   moves it past what it removed, so it reads the entries it evicts (plus, like a prune,
//!   replaced entries hidden by the overlay) and takes no scan at all while the memory is
//!   within its caps. The sizes it subtracts are in the index entries it reads anyway.
//!
//! # Caps
//!
//! Correlation data is whatever requests say, so the reply memory is capped store-wide by
//! [`crate::keyspace::Limits`] (replicated like the key quotas):
//!
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
use crate::devicebound::{DeviceCounters, DeviceOutcome};
use crate::engine::Txn;
use crate::error::{Result, StorageError};
use crate::keyspace::KeyspaceMeta;
use crate::layout::Table;
use crate::machine::outcome::Outcome;
use crate::machine::proposal::RequestId;
use crate::machine::reply_rows::{self, RememberedReply, RememberedReplyOut};

/// At most this many expired remembered replies are dropped per applied proposal. One proposal
/// adds at most one, so the memory shrinks as fast as it grows once replies expire.
pub const REPLIES_PRUNED_PER_ENTRY: usize = 32;

/// The reply memory of one transaction: the transaction, the meta record that counts the
/// replies (as the machine holds it) and the machine's cursor (see the module docs).
pub(super) struct Replies<'a, T: Txn> {
    pub(super) txn: &'a mut T,
    pub(super) meta: &'a mut KeyspaceMeta,
    pub(super) meta_changed: &'a mut bool,
    /// No live [`Table::ReplyExpiry`] entry of the transaction sorts below this key.
    pub(super) cursor: &'a mut Vec<u8>,
}

/// Where a proposal's reply is remembered, and the reply it replaces.
pub(super) struct ReplySlot<'p> {
    request: &'p RequestId,
    key: Vec<u8>,
    replaced: Option<Replaced>,
}

/// A reply that the new one replaces: expired but not pruned yet, or a live one of another
/// request with the same client and correlation data.
struct Replaced {
    expires_at_ms: u64,
    /// Its counted size ([`reply_rows::reply_size`]).
    size: u64,
}

impl<T: Txn> Replies<'_, T> {
    /// Looks the request up in the reply memory (§6): `Err(outcome)` if a retry at `time` must
    /// get the remembered outcome, otherwise where its reply will be remembered. A live reply
    /// of another request (same client and correlation data, another digest) is never given:
    /// this request is executed as new, its reply replaces that one, and the mismatch is
    /// counted.
    pub(super) fn reply_slot<'p>(
        &mut self,
        request: &'p RequestId,
        time: u64,
    ) -> Result<Result<ReplySlot<'p>, Outcome>> {
        let key = reply_rows::reply_key(&request.client, &request.correlation);
        let replaced = match self.txn.get_ref(&key)? {
            Some(bytes) => {
                let old: RememberedReply = codec::decode("remembered reply", &bytes)?;
                if old.expires_at_ms > time {
                    if old.digest == request.digest {
                        return Ok(Err(old.outcome));
                    }
                    self.meta.reply_mismatches = self.meta.reply_mismatches.saturating_add(1);
                    *self.meta_changed = true;
                }
                Some(Replaced {
                    expires_at_ms: old.expires_at_ms,
                    size: reply_rows::reply_size(key.len(), bytes.len()),
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
    pub(super) fn remember(
        &mut self,
        slot: ReplySlot<'_>,
        outcome: &Outcome,
        time: u64,
    ) -> Result<()> {
        let ReplySlot {
            request,
            key,
            replaced,
        } = slot;
        if let Some(old) = &replaced {
            self.txn
                .remove(reply_rows::reply_expiry_key(old.expires_at_ms, &key));
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
        let size = reply_rows::reply_size(key.len(), remembered.len());
        let limits = self.meta.limits;
        *self.meta_changed = true;
        if limits.max_remembered_replies == 0 || size > limits.max_remembered_reply_bytes {
            // It could never fit: it is not remembered, and nothing is evicted to make room
            // for it (only what a lowered cap requires).
            if replaced.is_some() {
                self.txn.remove(key);
            }
            self.meta.replies_evicted = self.meta.replies_evicted.saturating_add(1);
            return self.evict_replies();
        }
        let index_key = reply_rows::reply_expiry_key(expires_at_ms, &key);
        if index_key < *self.cursor {
            self.cursor.clone_from(&index_key);
        }
        self.txn.put(index_key, reply_rows::reply_size_value(size));
        self.txn.put(key, remembered);
        self.meta.remembered_replies = self.meta.remembered_replies.saturating_add(1);
        self.meta.remembered_reply_bytes = self.meta.remembered_reply_bytes.saturating_add(size);
        self.evict_replies()
    }

    /// Takes one removed reply of counted size `size` off the reply-memory counters.
    fn forget_reply_counts(&mut self, size: u64) {
        self.meta.remembered_replies = self.meta.remembered_replies.saturating_sub(1);
        self.meta.remembered_reply_bytes = self.meta.remembered_reply_bytes.saturating_sub(size);
        *self.meta_changed = true;
    }

    /// Removes the replies of these reply-expiry index entries (ascending, all at or above the
    /// cursor) with their index entries, and moves the cursor right after the last one.
    fn remove_replies(&mut self, index_entries: Vec<(Vec<u8>, u64)>) {
        for (index_key, size) in &index_entries {
            if let Some((_, reply_key)) = reply_rows::split_reply_expiry_key(index_key) {
                self.txn.remove(reply_key.to_vec());
            }
            self.forget_reply_counts(*size);
        }
        if let Some((last, _)) = index_entries.last() {
            let mut next = Vec::with_capacity(last.len() + 1);
            next.extend_from_slice(last);
            next.push(0);
            *self.cursor = next;
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
        for entry in self.txn.range(self.cursor, &end) {
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
    pub(super) fn prune_replies(&mut self, time: u64) -> Result<()> {
        let due_bound = reply_rows::reply_expiry_due_bound(time);
        if *self.cursor >= due_bound {
            return Ok(()); // everything due at `time` is already gone
        }
        let due: Vec<(Vec<u8>, u64)> = self
            .txn
            .range(self.cursor, &due_bound)
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
            *self.cursor = due_bound;
        }
        Ok(())
    }
}

/// The counted size a reply-expiry index entry holds.
fn indexed_reply_size(value: &[u8]) -> Result<u64> {
    reply_rows::parse_reply_size_value(value).ok_or_else(|| StorageError::Corrupt {
        what: "reply-expiry index entry",
        reason: format!("{} bytes that are not one size varint", value.len()),
    })
}
