//! The deterministic device-bound state machine: applies one [`DeviceCommand`] to a [`Txn`] at
//! the entry's store time.
//!
//! # Rules (spec §1, §3, §4, and what the spec leaves open)
//!
//! - A message is *expired* at time `t` when `expires_at_ms <= t`; a lock *holds* at `t` when
//!   `t < lock.expires_at_ms`. `t` is always the entry's store time.
//! - SEND checks, in order: body over `max_message_bytes` (`MessageTooLarge`), queue depth
//!   (Enqueued + Invisible) at `max_queue_depth` (`QueueFull`), a device without state while
//!   `max_devices` devices have state (`TooManyDevices`). Expiry is `t + TTL`, `EXPIRES`, or
//!   `t + default_ttl_ms`, then at most `t + 2 days`.
//! - Deliver: the budget is `min(max, device_window - invisible)`. Receive (a pull) takes the
//!   head Enqueued message whatever the push window holds (spec §3: `204` only when there is
//!   none), so its budget is 1.
//!   Messages are visited in queue order, Invisible ones skipped; an expired one is
//!   dead-lettered (`Expired`), one whose delivery count reached `max_delivery_count` is
//!   dead-lettered (`DeliveryCountExceeded`), any other is locked (count + 1, lock until
//!   `t + lock_duration_ms`, fresh token) until the budget is spent. At most
//!   [`MAX_SWEEP_PER_ENTRY`] messages are visited per entry.
//! - Undeliver: the token must lock a message of that device (the lock may have run out
//!   but not been swept); it becomes Enqueued at its place, its delivery count given back.
//! - Settle: the token must lock a message of the settling device, the lock must hold and
//!   the message must not be expired; otherwise `settled: false` and nothing changes.
//!   Complete removes it (`Success` feedback for ack positive/full); Abandon makes it Enqueued
//!   in front of every message of the queue, its count kept; Reject dead-letters it
//!   (`Rejected`).
//! - Sweeps are "the first `max` due at the entry's time" (capped by
//!   [`MAX_SWEEP_PER_ENTRY`]), not candidate lists: the due indexes are replicated state, so
//!   every replica finds the same entries; the entry stays a few bytes; and there is nothing to
//!   re-check, because what apply finds due is due. The leader learns whether a sweep is worth
//!   proposing from [`crate::devicebound::read`] (next due instants). ExpireLocks makes Invisible
//!   messages with a due lock Enqueued at their place (count kept); ExpireMessages
//!   dead-letters expired messages in either state (their token stops settling).
//! - Dead letters: at most `max_dead_letters_per_device` per device; the oldest are dropped
//!   to make room (`dead_letters_dropped`).
//! - Feedback: a record is written when a message of ack positive/full is completed
//!   (`Success`) or one of ack negative/full is dead-lettered or purged. At most
//!   `max_pending_feedback_records` wait to be batched; a new record over it drops the oldest
//!   waiting one (`feedback_records_dropped`). FORGET drops the waiting records about the
//!   device (batches already cut are not opened again).
//! - CutFeedbackBatch cuts the oldest `min(64, waiting)` records into a batch when 64 wait, or
//!   when one waits and `t >= last cut + 15 s` (never cut: the last cut is time 0). At most
//!   `max_feedback_batches` batches are kept; a cut over it drops the oldest batch.
//! - Feedback batches: DeliverFeedback visits Enqueued batches oldest first, drops expired
//!   ones and ones at `feedback_max_delivery_count`, and locks the others (count + 1) until
//!   `max` are locked. UndeliverFeedback gives a delivery back; SettleFeedback needs the lock
//!   to hold and the batch not to be expired; ExpireFeedbackLocks makes batches with a due lock
//!   Enqueued (they are published again); ExpireFeedbackBatches drops batches past their TTL.
//! - Lock tokens carry the store-wide count of tokens issued, 16 hex digits: unique forever,
//!   the same on every replica, no clock, no randomness. A batch token is `f` and the count; a
//!   message token is `m`, the message's place in its device's queue, then the count
//!   ([`layout::message_token`]). A settlement reads the message at that place in the settling
//!   device's queue and settles only if it is locked by exactly this token, so a token of
//!   another device, an earlier lock or a made-up one settles nothing.
//!
//! # Cost
//!
//! A transaction reads the devicebound meta record once and writes it once if it changed;
//! every message transition is O(log n) reads and writes of the message, its index entries
//! and its device row; sweeps and deliveries touch at most [`MAX_SWEEP_PER_ENTRY`] entries.
//! PURGE and FORGET are O(queue depth + dead letters + waiting records of the device).

use crate::codec;
use crate::devicebound::command::{
    DeviceCommand, Expiry, FeedbackSettlement, SendMessage, Settlement,
};
use crate::devicebound::layout::{self, DeviceTable};
use crate::devicebound::outcome::{
    DeviceCounters, DeviceOutcome, DeviceRejection, DeviceResult, FeedbackDelivery, MessageDelivery,
};
use crate::devicebound::read;
use crate::devicebound::record::{
    DeadLetter, DeadLetterReason, DeviceState, DeviceboundMeta, FeedbackBatch, FeedbackRecord,
    FeedbackStatus, LockState, Message, StoredMessage,
};
use crate::error::{Result, StorageError};
use crate::keyspace::Txn;

/// Most index entries, messages or batches one entry's sweep, delivery or feedback delivery
/// visits.
pub const MAX_SWEEP_PER_ENTRY: u32 = 1_024;

/// Records in a full feedback batch (spec §4).
pub const FEEDBACK_BATCH_RECORDS: u64 = 64;

/// A batch is cut this long after the last cut if a record waits (spec §4).
pub const FEEDBACK_CUT_INTERVAL_MS: u64 = 15_000;

/// Any message expiry is at most this long after enqueue (spec §1).
pub const MAX_MESSAGE_LIFETIME_MS: u64 = 2 * 24 * 60 * 60 * 1_000;

/// Applies `command` at store time `time_ms` to `meta`, the device-bound meta record as the
/// commands before it in the transaction left it. The caller (`Keyspace`, the one way device
/// commands are applied) reads the record once per transaction and writes it back once with
/// [`write_meta`] if any call returned `true` (meta changed): decoding and encoding it per
/// command was 8 % of a device-bound apply. On an error the transaction is abandoned, `meta`
/// with it.
pub fn apply_to<T: Txn>(
    txn: &mut T,
    meta: &mut DeviceboundMeta,
    time_ms: u64,
    command: &DeviceCommand,
) -> Result<(DeviceOutcome, bool)> {
    let mut machine = Machine {
        txn,
        time: time_ms,
        meta,
        meta_changed: false,
        counters: DeviceCounters::default(),
    };
    let result = machine.run(command)?;
    Ok((
        DeviceOutcome {
            result,
            counters: machine.counters,
        },
        machine.meta_changed,
    ))
}

/// Writes the device-bound meta record.
pub fn write_meta<T: Txn>(txn: &mut T, meta: &DeviceboundMeta) {
    txn.put(layout::meta_key(), codec::encode(meta));
}

struct Machine<'t, T: Txn> {
    txn: &'t mut T,
    time: u64,
    meta: &'t mut DeviceboundMeta,
    meta_changed: bool,
    counters: DeviceCounters,
}

/// Whether a delivery respects the push window (`device_window` Invisible at most).
#[derive(Clone, Copy)]
enum Window {
    /// Push: at most `device_window` Invisible at a time.
    Push,
    /// Pull (`receive`): the head Enqueued message, whatever is Invisible.
    Pull,
}

/// A SEND that passed its checks, not yet written.
struct Admitted {
    /// The device's row before the SEND (`None`: it had none).
    before: Option<DeviceState>,
    /// The row after it, the message counted.
    state: DeviceState,
    /// The message's place in the queue (the tail).
    seq: u64,
    /// The message as it is stored, Enqueued.
    stored: StoredMessage,
}

/// What a delivery visit decided for one message.
enum Visit {
    Lock(u64, StoredMessage),
    DeadLetter(u64, StoredMessage, DeadLetterReason),
}

/// What a feedback delivery visit decided for one batch.
enum BatchVisit {
    Lock(u64, FeedbackBatch),
    Drop(u64, FeedbackBatch),
}

/// The index entry of a message's state: its lock's expiry when Invisible, its place among the
/// Enqueued otherwise.
fn state_entry_key(device: &[u8], seq: u64, stored: &StoredMessage) -> Vec<u8> {
    match &stored.lock {
        Some(lock) => {
            layout::message_due_key(DeviceTable::LockExpiry, lock.expires_at_ms, device, seq)
        }
        None => layout::enqueued_by_time_key(device, stored.message.enqueued_ms, seq),
    }
}

fn corrupt(what: &'static str, reason: impl Into<String>) -> StorageError {
    StorageError::Corrupt {
        what,
        reason: reason.into(),
    }
}

fn sweep_bound(max: u32) -> usize {
    usize::try_from(max.min(MAX_SWEEP_PER_ENTRY)).unwrap_or(usize::MAX)
}

fn add(counter: &mut u32, n: usize) {
    *counter = counter.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
}

impl<T: Txn> Machine<'_, T> {
    fn run(&mut self, command: &DeviceCommand) -> Result<DeviceResult> {
        match command {
            DeviceCommand::Send(send) => self.send(send),
            DeviceCommand::Purge { device } => self.purge(device),
            DeviceCommand::Forget { device } => self.forget(device),
            DeviceCommand::Deliver { device, max } => Ok(DeviceResult::Delivered {
                messages: self.deliver(device, *max, Window::Push)?,
            }),
            DeviceCommand::Receive { device } => Ok(DeviceResult::Received(
                self.deliver(device, 1, Window::Pull)?
                    .into_iter()
                    .next()
                    .map(Box::new),
            )),
            DeviceCommand::Undeliver { device, token } => Ok(DeviceResult::Undelivered {
                restored: self.undeliver(device, token)?,
            }),
            DeviceCommand::Settle {
                device,
                token,
                settlement,
            } => Ok(DeviceResult::Settled {
                settled: self.settle(device, token, *settlement)?,
            }),
            DeviceCommand::ExpireLocks { max } => self.expire_locks(*max),
            DeviceCommand::ExpireMessages { max } => self.expire_messages(*max),
            DeviceCommand::CutFeedbackBatch => self.cut_feedback_batch(),
            DeviceCommand::DeliverFeedback { max } => self.deliver_feedback(*max),
            DeviceCommand::UndeliverFeedback { token } => Ok(DeviceResult::Undelivered {
                restored: self.undeliver_feedback(token)?,
            }),
            DeviceCommand::SettleFeedback { token, settlement } => Ok(DeviceResult::Settled {
                settled: self.settle_feedback(token, *settlement)?,
            }),
            DeviceCommand::ExpireFeedbackLocks { max } => self.expire_feedback_locks(*max),
            DeviceCommand::ExpireFeedbackBatches { max } => self.expire_feedback_batches(*max),
            DeviceCommand::SetSettings(settings) => {
                self.meta.settings = *settings;
                self.meta_changed = true;
                Ok(DeviceResult::SettingsSet)
            }
            DeviceCommand::SendAndDeliver(send) => self.send_and_deliver(send),
            DeviceCommand::SettleAndDeliver {
                device,
                token,
                settlement,
            } => {
                let settled = self.settle(device, token, *settlement)?;
                let messages = if settled {
                    self.deliver(device, u32::MAX, Window::Push)?
                } else {
                    Vec::new()
                };
                Ok(DeviceResult::SettledAndDelivered { settled, messages })
            }
        }
    }

    // -- device rows -------------------------------------------------------------------------

    fn device_state(&self, device: &[u8]) -> Result<Option<DeviceState>> {
        read::device_state(&*self.txn, device)
    }

    /// Writes a device row changed from `before` (`None`: it had none) to `after`, keeping the
    /// deliverable index and the device count in step; an empty row is removed.
    fn save_device(&mut self, device: &[u8], before: Option<&DeviceState>, after: &DeviceState) {
        if let Some(old) = before
            && old.enqueued > 0
        {
            self.txn
                .remove(layout::deliverable_key(old.invisible, device));
        }
        if after.is_empty() {
            self.txn.remove(layout::device_key(device));
            if before.is_some() {
                self.meta.devices = self.meta.devices.saturating_sub(1);
            }
        } else {
            // Both rows are new unless they were there before (the deliverable entry of the
            // same window count was removed above, which keeps it a plain write).
            if after.enqueued > 0 {
                self.txn
                    .create(layout::deliverable_key(after.invisible, device), Vec::new());
            }
            let row = codec::encode(after);
            match before {
                Some(_) => self.txn.put(layout::device_key(device), row),
                None => {
                    self.txn.create(layout::device_key(device), row);
                    self.meta.devices = self.meta.devices.saturating_add(1);
                }
            }
        }
        self.meta_changed = true;
    }

    // -- messages ----------------------------------------------------------------------------

    fn stored_message(&self, device: &[u8], seq: u64) -> Result<Option<StoredMessage>> {
        self.txn
            .get_ref(&layout::message_key(device, seq))?
            .map(|bytes| codec::decode("device message", &bytes))
            .transpose()
    }

    /// Writes a message that enters the queue (sent, or abandoned to the head) and every index
    /// entry of its state. Each of these rows is new (a new place, or the rows of the place it
    /// leaves were removed first), so they are created, and a settlement before the next
    /// memtable flush leaves nothing behind.
    fn put_message(&mut self, device: &[u8], seq: u64, stored: &StoredMessage) {
        self.txn.create(
            layout::message_due_key(
                DeviceTable::MessageExpiry,
                stored.message.expires_at_ms,
                device,
                seq,
            ),
            Vec::new(),
        );
        self.create_state_entry(device, seq, stored);
        self.txn
            .create(layout::message_key(device, seq), codec::encode(stored));
    }

    /// Removes a message and every index entry of its state.
    fn remove_message(&mut self, device: &[u8], seq: u64, stored: &StoredMessage) {
        self.txn.remove(layout::message_due_key(
            DeviceTable::MessageExpiry,
            stored.message.expires_at_ms,
            device,
            seq,
        ));
        self.remove_state_entry(device, seq, stored);
        self.txn.remove(layout::message_key(device, seq));
    }

    /// Creates the index entry of a message's state ([`state_entry_key`]).
    fn create_state_entry(&mut self, device: &[u8], seq: u64, stored: &StoredMessage) {
        self.txn
            .create(state_entry_key(device, seq, stored), Vec::new());
    }

    /// Removes the index entry of a message's state ([`state_entry_key`]).
    fn remove_state_entry(&mut self, device: &[u8], seq: u64, stored: &StoredMessage) {
        self.txn.remove(state_entry_key(device, seq, stored));
    }

    /// Takes a message out of the queue (its row and counts).
    fn dequeue(
        &mut self,
        device: &[u8],
        state: &mut DeviceState,
        seq: u64,
        stored: &StoredMessage,
    ) {
        self.remove_message(device, seq, stored);
        if stored.lock.is_some() {
            state.invisible = state.invisible.saturating_sub(1);
        } else {
            state.enqueued = state.enqueued.saturating_sub(1);
        }
        self.meta.messages = self.meta.messages.saturating_sub(1);
        self.meta_changed = true;
    }

    /// Replaces a queued message by `updated` (same place, same expiry), moving it between
    /// states: its row is overwritten and its state's index entry replaced; its expiry entry
    /// stays as it is.
    fn restate(
        &mut self,
        device: &[u8],
        state: &mut DeviceState,
        seq: u64,
        old: &StoredMessage,
        updated: &StoredMessage,
    ) {
        debug_assert_eq!(
            old.message.expires_at_ms, updated.message.expires_at_ms,
            "a state change keeps the message's expiry"
        );
        self.remove_state_entry(device, seq, old);
        self.create_state_entry(device, seq, updated);
        self.txn
            .put(layout::message_key(device, seq), codec::encode(updated));
        match (old.lock.is_some(), updated.lock.is_some()) {
            (false, true) => {
                state.enqueued = state.enqueued.saturating_sub(1);
                state.invisible = state.invisible.saturating_add(1);
            }
            (true, false) => {
                state.invisible = state.invisible.saturating_sub(1);
                state.enqueued = state.enqueued.saturating_add(1);
            }
            _ => {}
        }
    }

    /// Counts one more token issued; returns the count.
    fn issue_token(&mut self) -> u64 {
        self.meta.tokens_issued = self.meta.tokens_issued.saturating_add(1);
        self.meta_changed = true;
        self.meta.tokens_issued
    }

    /// A fresh lock token for the message at `seq`.
    fn message_token(&mut self, seq: u64) -> String {
        let issued = self.issue_token();
        layout::message_token(seq, issued)
    }

    /// A fresh lock token for a feedback batch.
    fn batch_token(&mut self) -> String {
        let issued = self.issue_token();
        layout::batch_token(issued)
    }

    // -- dead letters and feedback -----------------------------------------------------------

    /// Dead-letters a message already taken out of the queue.
    fn dead_letter(
        &mut self,
        device: &[u8],
        state: &mut DeviceState,
        stored: StoredMessage,
        reason: DeadLetterReason,
    ) -> Result<()> {
        self.counters.dead_lettered = self.counters.dead_lettered.saturating_add(1);
        match reason {
            DeadLetterReason::Expired => add(&mut self.counters.expired, 1),
            DeadLetterReason::Rejected => add(&mut self.counters.rejected, 1),
            DeadLetterReason::DeliveryCountExceeded => {}
        }
        if stored.message.ack.on_failure() {
            self.add_feedback(&stored.message, device, reason.feedback_status())?;
        }
        let cap = self.meta.settings.max_dead_letters_per_device;
        if cap == 0 {
            self.count_dropped_dead_letters(1);
            return Ok(());
        }
        if state.dead_letters >= cap {
            let excess = usize::try_from(state.dead_letters - cap + 1).unwrap_or(usize::MAX);
            let oldest = read::keys_in(&*self.txn, &layout::dead_letters_prefix(device), excess)?;
            for key in &oldest {
                self.txn.remove(key.clone());
            }
            let dropped = u32::try_from(oldest.len()).unwrap_or(u32::MAX);
            state.dead_letters = state.dead_letters.saturating_sub(dropped);
            self.meta.dead_letters = self.meta.dead_letters.saturating_sub(u64::from(dropped));
            self.count_dropped_dead_letters(oldest.len());
        }
        let letter = DeadLetter {
            delivery_count: stored.delivery_count,
            message: stored.message,
            reason,
            time_ms: self.time,
        };
        let seq = state.next_dead_letter_seq;
        state.next_dead_letter_seq = seq.saturating_add(1);
        self.txn
            .create(layout::dead_letter_key(device, seq), codec::encode(&letter));
        state.dead_letters = state.dead_letters.saturating_add(1);
        self.meta.dead_letters = self.meta.dead_letters.saturating_add(1);
        self.meta_changed = true;
        Ok(())
    }

    fn count_dropped_dead_letters(&mut self, n: usize) {
        add(&mut self.counters.dead_letters_dropped, n);
        self.meta.dead_letters_dropped = self
            .meta
            .dead_letters_dropped
            .saturating_add(u64::try_from(n).unwrap_or(u64::MAX));
        self.meta_changed = true;
    }

    /// Writes a feedback record about `message`, dropping the oldest waiting ones over the cap.
    fn add_feedback(
        &mut self,
        message: &Message,
        device: &[u8],
        status: FeedbackStatus,
    ) -> Result<()> {
        let cap = self.meta.settings.max_pending_feedback_records;
        self.meta_changed = true;
        if cap == 0 {
            self.count_dropped_feedback(1);
            return Ok(());
        }
        if self.meta.pending_feedback >= cap {
            let excess =
                usize::try_from(self.meta.pending_feedback - cap + 1).unwrap_or(usize::MAX);
            let (start, end) = DeviceTable::PendingFeedback.bounds();
            let oldest: Vec<(Vec<u8>, Vec<u8>)> = self
                .txn
                .range(&start, &end)
                .take(excess)
                .collect::<Result<_>>()?;
            for (key, value) in &oldest {
                self.remove_pending_feedback(key, value)?;
            }
            self.count_dropped_feedback(oldest.len());
        }
        let record = FeedbackRecord {
            original_message_id: message.message_id.clone(),
            time_ms: self.time,
            status,
            device: device.to_vec(),
            generation: message.generation.clone(),
        };
        let seq = self.meta.next_feedback_seq;
        self.meta.next_feedback_seq = seq.saturating_add(1);
        self.txn
            .create(layout::pending_feedback_key(seq), codec::encode(&record));
        self.txn
            .create(layout::pending_by_device_key(device, seq), Vec::new());
        self.meta.pending_feedback = self.meta.pending_feedback.saturating_add(1);
        add(&mut self.counters.feedback_records, 1);
        Ok(())
    }

    /// Removes a waiting record (row `key` holding `value`) and its by-device entry.
    fn remove_pending_feedback(&mut self, key: &[u8], value: &[u8]) -> Result<FeedbackRecord> {
        let seq = layout::seq_of(key)
            .ok_or_else(|| corrupt("feedback record key", format!("{key:?}")))?;
        let record: FeedbackRecord = codec::decode("feedback record", value)?;
        self.txn.remove(key.to_vec());
        self.txn
            .remove(layout::pending_by_device_key(&record.device, seq));
        self.meta.pending_feedback = self.meta.pending_feedback.saturating_sub(1);
        self.meta_changed = true;
        Ok(record)
    }

    fn count_dropped_feedback(&mut self, n: usize) {
        add(&mut self.counters.feedback_records_dropped, n);
        self.meta.feedback_records_dropped = self
            .meta
            .feedback_records_dropped
            .saturating_add(u64::try_from(n).unwrap_or(u64::MAX));
        self.meta_changed = true;
    }

    // -- commands ----------------------------------------------------------------------------

    /// Checks a SEND against the caps and builds the message it stores, with its device's row
    /// before and after (the message counted Enqueued, at the tail).
    fn admit(&self, send: &SendMessage) -> Result<std::result::Result<Admitted, DeviceRejection>> {
        let settings = self.meta.settings;
        let body_len = u64::try_from(send.body.len()).unwrap_or(u64::MAX);
        if body_len > settings.max_message_bytes {
            return Ok(Err(DeviceRejection::MessageTooLarge));
        }
        let before = self.device_state(&send.device)?;
        let mut state = before.clone().unwrap_or_else(DeviceState::new);
        if state.depth() >= u64::from(settings.max_queue_depth) {
            return Ok(Err(DeviceRejection::QueueFull));
        }
        if before.is_none() && self.meta.devices >= settings.max_devices {
            return Ok(Err(DeviceRejection::TooManyDevices));
        }
        let time = self.time;
        let asked = match send.expiry {
            Expiry::Ttl(ms) => time.saturating_add(ms),
            Expiry::At(at) => at,
            Expiry::Default => time.saturating_add(settings.default_ttl_ms),
        };
        let expires_at_ms = asked.min(time.saturating_add(MAX_MESSAGE_LIFETIME_MS));
        let stored = StoredMessage {
            message: Message {
                message_id: send.message_id.clone(),
                body: send.body.clone(),
                properties: send.properties.clone(),
                content_type: send.content_type.clone(),
                content_encoding: send.content_encoding.clone(),
                ack: send.ack,
                generation: send.generation.clone(),
                expires_at_ms,
                enqueued_ms: time,
            },
            delivery_count: 0,
            lock: None,
        };
        let seq = state.next_tail_seq;
        state.next_tail_seq = seq.saturating_add(1);
        state.enqueued = state.enqueued.saturating_add(1);
        Ok(Ok(Admitted {
            before,
            state,
            seq,
            stored,
        }))
    }

    /// Stores an admitted message as it is (Enqueued, or already locked by the caller).
    fn store_admitted(&mut self, device: &[u8], admitted: &Admitted) {
        self.put_message(device, admitted.seq, &admitted.stored);
        self.meta.messages = self.meta.messages.saturating_add(1);
        self.save_device(device, admitted.before.as_ref(), &admitted.state);
        add(&mut self.counters.enqueued, 1);
    }

    fn send(&mut self, send: &SendMessage) -> Result<DeviceResult> {
        let admitted = match self.admit(send)? {
            Ok(admitted) => admitted,
            Err(rejection) => return Ok(DeviceResult::Rejected(rejection)),
        };
        self.store_admitted(&send.device, &admitted);
        Ok(DeviceResult::Sent {
            expires_at_ms: admitted.stored.message.expires_at_ms,
        })
    }

    /// SEND, then a push delivery to the same device. When the new message is the only
    /// Enqueued one, the window has room and the message is deliverable, the delivery would
    /// lock exactly it: it is stored locked at once, without reading the queue back (same
    /// rows, same reply; the Enqueued rows the general path creates and removes again leave
    /// no write either way, see [`Txn::create`]). Skipping that queue scan saves about 7 % of
    /// a device-bound apply (`apply_cost`, BENCHMARKS.md, fourth stop on issue 9).
    fn send_and_deliver(&mut self, send: &SendMessage) -> Result<DeviceResult> {
        let mut admitted = match self.admit(send)? {
            Ok(admitted) => admitted,
            Err(rejection) => return Ok(DeviceResult::Rejected(rejection)),
        };
        let expires_at_ms = admitted.stored.message.expires_at_ms;
        let settings = self.meta.settings;
        let only_enqueued = admitted.state.enqueued == 1;
        // A delivery visits at most MAX_SWEEP_PER_ENTRY messages, the locked ones ahead of
        // the new message included: beyond that it would not reach it either.
        let window_open = admitted.state.invisible < settings.device_window
            && admitted.state.invisible < MAX_SWEEP_PER_ENTRY;
        let deliverable = expires_at_ms > self.time && settings.max_delivery_count > 0;
        if !(only_enqueued && window_open && deliverable) {
            self.store_admitted(&send.device, &admitted);
            let messages = self.deliver(&send.device, u32::MAX, Window::Push)?;
            return Ok(DeviceResult::SentAndDelivered {
                expires_at_ms,
                messages,
            });
        }
        let lock = LockState {
            token: self.message_token(admitted.seq),
            expires_at_ms: self.time.saturating_add(settings.lock_duration_ms),
        };
        admitted.stored.delivery_count = 1;
        admitted.stored.lock = Some(lock.clone());
        admitted.state.enqueued = admitted.state.enqueued.saturating_sub(1);
        admitted.state.invisible = admitted.state.invisible.saturating_add(1);
        self.store_admitted(&send.device, &admitted);
        add(&mut self.counters.delivered, 1);
        Ok(DeviceResult::SentAndDelivered {
            expires_at_ms,
            messages: vec![MessageDelivery {
                device: send.device.clone(),
                token: lock.token,
                lock_expires_at_ms: lock.expires_at_ms,
                delivery_count: 1,
                message: admitted.stored.message,
            }],
        })
    }

    /// Every message of `device`'s queue, in order.
    fn queue(&self, device: &[u8]) -> Result<Vec<(u64, StoredMessage)>> {
        let prefix = layout::messages_prefix(device);
        read::entries_in(&*self.txn, &prefix, usize::MAX)?
            .into_iter()
            .map(|(key, value)| {
                let seq = layout::message_seq(device, &key)
                    .ok_or_else(|| corrupt("device message key", format!("{key:?}")))?;
                Ok((seq, codec::decode("device message", &value)?))
            })
            .collect()
    }

    fn purge(&mut self, device: &[u8]) -> Result<DeviceResult> {
        let Some(before) = self.device_state(device)? else {
            return Ok(DeviceResult::Purged { messages: 0 });
        };
        let mut state = before.clone();
        let queue = self.queue(device)?;
        for (seq, stored) in &queue {
            self.dequeue(device, &mut state, *seq, stored);
            if stored.message.ack.on_failure() {
                self.add_feedback(&stored.message, device, FeedbackStatus::Purged)?;
            }
        }
        self.save_device(device, Some(&before), &state);
        add(&mut self.counters.purged, queue.len());
        Ok(DeviceResult::Purged {
            messages: u32::try_from(queue.len()).unwrap_or(u32::MAX),
        })
    }

    fn forget(&mut self, device: &[u8]) -> Result<DeviceResult> {
        let before = self.device_state(device)?;
        let mut messages = 0;
        let mut dead_letters = 0;
        if let Some(before) = &before {
            let mut state = before.clone();
            let queue = self.queue(device)?;
            for (seq, stored) in &queue {
                self.dequeue(device, &mut state, *seq, stored);
            }
            messages = queue.len();
            let letters =
                read::keys_in(&*self.txn, &layout::dead_letters_prefix(device), usize::MAX)?;
            for key in &letters {
                self.txn.remove(key.clone());
            }
            dead_letters = letters.len();
            state.dead_letters = 0;
            self.meta.dead_letters = self
                .meta
                .dead_letters
                .saturating_sub(u64::try_from(dead_letters).unwrap_or(u64::MAX));
            self.save_device(device, Some(before), &state);
        }
        let waiting = read::keys_in(
            &*self.txn,
            &layout::pending_by_device_prefix(device),
            usize::MAX,
        )?;
        for key in &waiting {
            let seq = layout::pending_by_device_seq(device, key)
                .ok_or_else(|| corrupt("feedback by device key", format!("{key:?}")))?;
            self.txn.remove(layout::pending_feedback_key(seq));
            self.txn.remove(key.clone());
        }
        if !waiting.is_empty() {
            self.meta.pending_feedback = self
                .meta
                .pending_feedback
                .saturating_sub(u64::try_from(waiting.len()).unwrap_or(u64::MAX));
            self.meta_changed = true;
        }
        add(&mut self.counters.forgotten, messages + dead_letters);
        add(&mut self.counters.feedback_records_dropped, waiting.len());
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Ok(DeviceResult::Forgot {
            messages: count(messages),
            dead_letters: count(dead_letters),
            feedback_records: count(waiting.len()),
        })
    }

    fn deliver(&mut self, device: &[u8], max: u32, window: Window) -> Result<Vec<MessageDelivery>> {
        let Some(before) = self.device_state(device)? else {
            return Ok(Vec::new());
        };
        let settings = self.meta.settings;
        let budget = match window {
            Window::Push => max.min(settings.device_window.saturating_sub(before.invisible)),
            Window::Pull => max,
        };
        if budget == 0 || before.enqueued == 0 {
            return Ok(Vec::new());
        }
        let budget = usize::try_from(budget).unwrap_or(usize::MAX);
        let time = self.time;
        let mut visits = Vec::new();
        let mut locks = 0;
        {
            let prefix = layout::messages_prefix(device);
            let end = crate::keyspace::layout::prefix_end(&prefix)
                .unwrap_or_else(|| vec![u8::MAX; prefix.len() + 1]);
            for entry in self.txn.range(&prefix, &end).take(sweep_bound(u32::MAX)) {
                let (key, value) = entry?;
                let stored: StoredMessage = codec::decode("device message", &value)?;
                if stored.lock.is_some() {
                    continue;
                }
                let seq = layout::message_seq(device, &key)
                    .ok_or_else(|| corrupt("device message key", format!("{key:?}")))?;
                if stored.message.expires_at_ms <= time {
                    visits.push(Visit::DeadLetter(seq, stored, DeadLetterReason::Expired));
                } else if stored.delivery_count >= settings.max_delivery_count {
                    visits.push(Visit::DeadLetter(
                        seq,
                        stored,
                        DeadLetterReason::DeliveryCountExceeded,
                    ));
                } else {
                    visits.push(Visit::Lock(seq, stored));
                    locks += 1;
                    if locks == budget {
                        break;
                    }
                }
            }
        }
        let mut state = before.clone();
        let mut deliveries = Vec::with_capacity(locks);
        for visit in visits {
            match visit {
                Visit::DeadLetter(seq, stored, reason) => {
                    self.dequeue(device, &mut state, seq, &stored);
                    self.dead_letter(device, &mut state, stored, reason)?;
                }
                Visit::Lock(seq, old) => {
                    let lock = LockState {
                        token: self.message_token(seq),
                        expires_at_ms: time.saturating_add(settings.lock_duration_ms),
                    };
                    let locked = StoredMessage {
                        message: old.message.clone(),
                        delivery_count: old.delivery_count.saturating_add(1),
                        lock: Some(lock.clone()),
                    };
                    self.restate(device, &mut state, seq, &old, &locked);
                    deliveries.push(MessageDelivery {
                        device: device.to_vec(),
                        token: lock.token,
                        lock_expires_at_ms: lock.expires_at_ms,
                        delivery_count: locked.delivery_count,
                        message: locked.message,
                    });
                }
            }
        }
        self.save_device(device, Some(&before), &state);
        add(&mut self.counters.delivered, deliveries.len());
        Ok(deliveries)
    }

    /// The message `token` locks, if it belongs to `device`.
    fn locked_message(
        &self,
        device: &[u8],
        token: &str,
    ) -> Result<Option<(u64, StoredMessage, DeviceState)>> {
        // Only the settling device's own queue is read: a device cannot touch another
        // device's message.
        let Some(seq) = layout::message_token_seq(token) else {
            return Ok(None);
        };
        let Some(stored) = self.stored_message(device, seq)? else {
            return Ok(None);
        };
        if stored.lock.as_ref().is_none_or(|lock| lock.token != token) {
            return Ok(None);
        }
        let state = self
            .device_state(device)?
            .ok_or_else(|| corrupt("device row", "a queued message without its device row"))?;
        Ok(Some((seq, stored, state)))
    }

    fn undeliver(&mut self, device: &[u8], token: &str) -> Result<bool> {
        let Some((seq, old, before)) = self.locked_message(device, token)? else {
            return Ok(false);
        };
        let mut state = before.clone();
        let given_back = StoredMessage {
            message: old.message.clone(),
            delivery_count: old.delivery_count.saturating_sub(1),
            lock: None,
        };
        self.restate(device, &mut state, seq, &old, &given_back);
        self.save_device(device, Some(&before), &state);
        add(&mut self.counters.undelivered, 1);
        Ok(true)
    }

    fn settle(&mut self, device: &[u8], token: &str, settlement: Settlement) -> Result<bool> {
        let Some((seq, old, before)) = self.locked_message(device, token)? else {
            return Ok(false);
        };
        let time = self.time;
        let lock_holds = old
            .lock
            .as_ref()
            .is_some_and(|lock| time < lock.expires_at_ms);
        if !lock_holds || old.message.expires_at_ms <= time {
            return Ok(false);
        }
        let mut state = before.clone();
        self.dequeue(device, &mut state, seq, &old);
        match settlement {
            Settlement::Complete => {
                if old.message.ack.on_success() {
                    self.add_feedback(&old.message, device, FeedbackStatus::Success)?;
                }
                add(&mut self.counters.completed, 1);
            }
            Settlement::Abandon => {
                let first = read::keys_in(&*self.txn, &layout::messages_prefix(device), 1)?
                    .first()
                    .and_then(|key| layout::message_seq(device, key));
                let head = match first {
                    Some(first) => seq.min(first.saturating_sub(1)),
                    None => seq,
                };
                let requeued = StoredMessage {
                    message: old.message,
                    delivery_count: old.delivery_count,
                    lock: None,
                };
                self.put_message(device, head, &requeued);
                state.enqueued = state.enqueued.saturating_add(1);
                self.meta.messages = self.meta.messages.saturating_add(1);
                add(&mut self.counters.abandoned, 1);
            }
            Settlement::Reject => {
                self.dead_letter(device, &mut state, old, DeadLetterReason::Rejected)?;
            }
        }
        self.save_device(device, Some(&before), &state);
        Ok(true)
    }

    /// Up to `max` (device, seq) entries of a message due-time table due now.
    fn due_messages(&self, table: DeviceTable, max: u32) -> Result<Vec<(Vec<u8>, u64)>> {
        let (start, _) = table.bounds();
        let end = layout::due_bound(table.prefix(), self.time);
        let mut due = Vec::new();
        for entry in self.txn.range(&start, &end).take(sweep_bound(max)) {
            let (key, _) = entry?;
            let (_, device, seq) = layout::split_message_due_key(&key)
                .ok_or_else(|| corrupt("device due index key", format!("{key:?}")))?;
            due.push((device.to_vec(), seq));
        }
        Ok(due)
    }

    /// A queued message and its device row, both required to exist.
    fn queued(&self, device: &[u8], seq: u64) -> Result<(StoredMessage, DeviceState)> {
        let stored = self
            .stored_message(device, seq)?
            .ok_or_else(|| corrupt("device index", "an index entry without its message"))?;
        let state = self
            .device_state(device)?
            .ok_or_else(|| corrupt("device row", "a queued message without its device row"))?;
        Ok((stored, state))
    }

    fn expire_locks(&mut self, max: u32) -> Result<DeviceResult> {
        let due = self.due_messages(DeviceTable::LockExpiry, max)?;
        for (device, seq) in &due {
            let (old, before) = self.queued(device, *seq)?;
            let mut state = before.clone();
            let released = StoredMessage {
                message: old.message.clone(),
                delivery_count: old.delivery_count,
                lock: None,
            };
            self.restate(device, &mut state, *seq, &old, &released);
            self.save_device(device, Some(&before), &state);
        }
        add(&mut self.counters.lock_expiries, due.len());
        Ok(DeviceResult::LocksExpired {
            count: u32::try_from(due.len()).unwrap_or(u32::MAX),
        })
    }

    fn expire_messages(&mut self, max: u32) -> Result<DeviceResult> {
        let due = self.due_messages(DeviceTable::MessageExpiry, max)?;
        for (device, seq) in &due {
            let (stored, before) = self.queued(device, *seq)?;
            let mut state = before.clone();
            self.dequeue(device, &mut state, *seq, &stored);
            self.dead_letter(device, &mut state, stored, DeadLetterReason::Expired)?;
            self.save_device(device, Some(&before), &state);
        }
        Ok(DeviceResult::Expired {
            count: u32::try_from(due.len()).unwrap_or(u32::MAX),
        })
    }

    // -- feedback batches --------------------------------------------------------------------

    fn batch(&self, seq: u64) -> Result<FeedbackBatch> {
        let bytes = self
            .txn
            .get_ref(&layout::batch_key(DeviceTable::FeedbackBatches, seq))?
            .ok_or_else(|| corrupt("feedback batch index", "an index entry without its batch"))?;
        codec::decode("feedback batch", &bytes)
    }

    /// Writes a batch and the index entries of its state.
    fn put_batch(&mut self, seq: u64, batch: &FeedbackBatch) {
        self.txn.put(
            layout::batch_due_key(DeviceTable::BatchExpiry, batch.expires_at_ms, seq),
            Vec::new(),
        );
        match &batch.lock {
            Some(lock) => {
                self.txn.put(
                    layout::batch_due_key(DeviceTable::BatchLockExpiry, lock.expires_at_ms, seq),
                    Vec::new(),
                );
                self.txn.put(
                    layout::batch_token_key(&lock.token),
                    seq.to_be_bytes().to_vec(),
                );
            }
            None => self.txn.put(
                layout::batch_key(DeviceTable::EnqueuedBatches, seq),
                Vec::new(),
            ),
        }
        self.txn.put(
            layout::batch_key(DeviceTable::FeedbackBatches, seq),
            codec::encode(batch),
        );
    }

    /// Removes a batch and the index entries of its state.
    fn remove_batch(&mut self, seq: u64, batch: &FeedbackBatch) {
        self.txn.remove(layout::batch_due_key(
            DeviceTable::BatchExpiry,
            batch.expires_at_ms,
            seq,
        ));
        match &batch.lock {
            Some(lock) => {
                self.txn.remove(layout::batch_due_key(
                    DeviceTable::BatchLockExpiry,
                    lock.expires_at_ms,
                    seq,
                ));
                self.txn.remove(layout::batch_token_key(&lock.token));
            }
            None => self
                .txn
                .remove(layout::batch_key(DeviceTable::EnqueuedBatches, seq)),
        }
        self.txn
            .remove(layout::batch_key(DeviceTable::FeedbackBatches, seq));
    }

    /// Removes a batch for good; `dropped` counts it as lost (TTL, delivery count, cap).
    fn discard_batch(&mut self, seq: u64, batch: &FeedbackBatch, dropped: bool) {
        self.remove_batch(seq, batch);
        self.meta.feedback_batches = self.meta.feedback_batches.saturating_sub(1);
        if dropped {
            self.meta.feedback_batches_dropped =
                self.meta.feedback_batches_dropped.saturating_add(1);
            add(&mut self.counters.feedback_batches_dropped, 1);
        }
        self.meta_changed = true;
    }

    fn cut_feedback_batch(&mut self) -> Result<DeviceResult> {
        let pending = self.meta.pending_feedback;
        let interval_passed = self.time
            >= self
                .meta
                .last_cut_ms
                .saturating_add(FEEDBACK_CUT_INTERVAL_MS);
        if !(pending >= FEEDBACK_BATCH_RECORDS || (pending >= 1 && interval_passed)) {
            return Ok(DeviceResult::FeedbackCut { records: 0 });
        }
        let (start, end) = DeviceTable::PendingFeedback.bounds();
        let rows: Vec<(Vec<u8>, Vec<u8>)> = self
            .txn
            .range(&start, &end)
            .take(usize::try_from(FEEDBACK_BATCH_RECORDS).unwrap_or(64))
            .collect::<Result<_>>()?;
        let mut records = Vec::with_capacity(rows.len());
        for (key, value) in &rows {
            records.push(self.remove_pending_feedback(key, value)?);
        }
        let settings = self.meta.settings;
        if self.meta.feedback_batches >= settings.max_feedback_batches {
            let excess =
                usize::try_from(self.meta.feedback_batches - settings.max_feedback_batches + 1)
                    .unwrap_or(usize::MAX);
            let (start, end) = DeviceTable::FeedbackBatches.bounds();
            let oldest: Vec<(Vec<u8>, Vec<u8>)> = self
                .txn
                .range(&start, &end)
                .take(excess)
                .collect::<Result<_>>()?;
            for (key, value) in &oldest {
                let seq = layout::seq_of(key)
                    .ok_or_else(|| corrupt("feedback batch key", format!("{key:?}")))?;
                let batch: FeedbackBatch = codec::decode("feedback batch", value)?;
                self.discard_batch(seq, &batch, true);
            }
        }
        let time = self.time;
        let count = u32::try_from(records.len()).unwrap_or(u32::MAX);
        self.meta.last_cut_ms = time;
        self.meta_changed = true;
        add(&mut self.counters.feedback_batches_cut, 1);
        if settings.max_feedback_batches == 0 {
            self.meta.feedback_batches_dropped =
                self.meta.feedback_batches_dropped.saturating_add(1);
            add(&mut self.counters.feedback_batches_dropped, 1);
            return Ok(DeviceResult::FeedbackCut { records: count });
        }
        let batch = FeedbackBatch {
            records,
            cut_ms: time,
            expires_at_ms: time.saturating_add(settings.feedback_ttl_ms),
            delivery_count: 0,
            lock: None,
        };
        let seq = self.meta.next_batch_seq;
        self.meta.next_batch_seq = seq.saturating_add(1);
        self.put_batch(seq, &batch);
        self.meta.feedback_batches = self.meta.feedback_batches.saturating_add(1);
        Ok(DeviceResult::FeedbackCut { records: count })
    }

    fn deliver_feedback(&mut self, max: u32) -> Result<DeviceResult> {
        let budget = sweep_bound(max);
        let settings = self.meta.settings;
        let time = self.time;
        let mut visits = Vec::new();
        if budget > 0 {
            let mut locks = 0;
            let (start, end) = DeviceTable::EnqueuedBatches.bounds();
            for entry in self.txn.range(&start, &end).take(sweep_bound(u32::MAX)) {
                let (key, _) = entry?;
                let seq = layout::seq_of(&key)
                    .ok_or_else(|| corrupt("enqueued batch key", format!("{key:?}")))?;
                let batch = self.batch(seq)?;
                if batch.expires_at_ms <= time
                    || batch.delivery_count >= settings.feedback_max_delivery_count
                {
                    visits.push(BatchVisit::Drop(seq, batch));
                } else {
                    visits.push(BatchVisit::Lock(seq, batch));
                    locks += 1;
                    if locks == budget {
                        break;
                    }
                }
            }
        }
        let mut batches = Vec::new();
        for visit in visits {
            match visit {
                BatchVisit::Drop(seq, batch) => self.discard_batch(seq, &batch, true),
                BatchVisit::Lock(seq, old) => {
                    let lock = LockState {
                        token: self.batch_token(),
                        expires_at_ms: time.saturating_add(settings.feedback_lock_duration_ms),
                    };
                    let locked = FeedbackBatch {
                        delivery_count: old.delivery_count.saturating_add(1),
                        lock: Some(lock.clone()),
                        ..old.clone()
                    };
                    self.remove_batch(seq, &old);
                    self.put_batch(seq, &locked);
                    batches.push(FeedbackDelivery {
                        token: lock.token,
                        cut_ms: locked.cut_ms,
                        lock_expires_at_ms: lock.expires_at_ms,
                        expires_at_ms: locked.expires_at_ms,
                        delivery_count: locked.delivery_count,
                        records: locked.records,
                    });
                }
            }
        }
        add(&mut self.counters.feedback_batches_delivered, batches.len());
        Ok(DeviceResult::FeedbackDelivered { batches })
    }

    /// The batch `token` locks now.
    fn locked_batch(&self, token: &str) -> Result<Option<(u64, FeedbackBatch)>> {
        let Some(bytes) = self.txn.get_ref(&layout::batch_token_key(token))? else {
            return Ok(None);
        };
        let seq = <[u8; 8]>::try_from(bytes.as_ref())
            .map(u64::from_be_bytes)
            .map_err(|_| corrupt("batch token", format!("{} bytes", bytes.len())))?;
        let batch = self.batch(seq)?;
        if batch.lock.as_ref().is_none_or(|lock| lock.token != token) {
            return Ok(None);
        }
        Ok(Some((seq, batch)))
    }

    fn undeliver_feedback(&mut self, token: &str) -> Result<bool> {
        let Some((seq, old)) = self.locked_batch(token)? else {
            return Ok(false);
        };
        let given_back = FeedbackBatch {
            delivery_count: old.delivery_count.saturating_sub(1),
            lock: None,
            ..old.clone()
        };
        self.remove_batch(seq, &old);
        self.put_batch(seq, &given_back);
        add(&mut self.counters.feedback_batches_undelivered, 1);
        self.meta_changed = true;
        Ok(true)
    }

    fn settle_feedback(&mut self, token: &str, settlement: FeedbackSettlement) -> Result<bool> {
        let Some((seq, old)) = self.locked_batch(token)? else {
            return Ok(false);
        };
        let time = self.time;
        let lock_holds = old
            .lock
            .as_ref()
            .is_some_and(|lock| time < lock.expires_at_ms);
        if !lock_holds || old.expires_at_ms <= time {
            return Ok(false);
        }
        match settlement {
            FeedbackSettlement::Complete => self.discard_batch(seq, &old, false),
            FeedbackSettlement::Abandon => {
                let released = FeedbackBatch {
                    lock: None,
                    ..old.clone()
                };
                self.remove_batch(seq, &old);
                self.put_batch(seq, &released);
            }
        }
        add(&mut self.counters.feedback_batches_settled, 1);
        Ok(true)
    }

    /// Up to `max` batch seqs of a batch due-time table due now.
    fn due_batches(&self, table: DeviceTable, max: u32) -> Result<Vec<u64>> {
        let (start, _) = table.bounds();
        let end = layout::due_bound(table.prefix(), self.time);
        let mut due = Vec::new();
        for entry in self.txn.range(&start, &end).take(sweep_bound(max)) {
            let (key, _) = entry?;
            let (_, seq) = layout::split_batch_due_key(&key)
                .ok_or_else(|| corrupt("batch due index key", format!("{key:?}")))?;
            due.push(seq);
        }
        Ok(due)
    }

    fn expire_feedback_locks(&mut self, max: u32) -> Result<DeviceResult> {
        let due = self.due_batches(DeviceTable::BatchLockExpiry, max)?;
        for seq in &due {
            let old = self.batch(*seq)?;
            let released = FeedbackBatch {
                lock: None,
                ..old.clone()
            };
            self.remove_batch(*seq, &old);
            self.put_batch(*seq, &released);
        }
        add(&mut self.counters.feedback_batches_redelivered, due.len());
        Ok(DeviceResult::LocksExpired {
            count: u32::try_from(due.len()).unwrap_or(u32::MAX),
        })
    }

    fn expire_feedback_batches(&mut self, max: u32) -> Result<DeviceResult> {
        let due = self.due_batches(DeviceTable::BatchExpiry, max)?;
        for seq in &due {
            let batch = self.batch(*seq)?;
            self.discard_batch(*seq, &batch, true);
        }
        Ok(DeviceResult::Expired {
            count: u32::try_from(due.len()).unwrap_or(u32::MAX),
        })
    }
}
