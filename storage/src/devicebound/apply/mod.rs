//! The deterministic device-bound state machine: applies one [`DeviceCommand`] to a [`Txn`] and
//! the [`DeviceIndex`] at the entry's store time.
//!
//! # Rules (spec §1, §3, §4, and what the spec leaves open)
//!
//! - A message is *expired* at time `t` when `expires_at_ms <= t`; a lock *holds* at `t` when
//!   `t < lock.expires_at_ms`. `t` is always the entry's store time.
//! - SEND checks, in order: body over `max_message_bytes` (`MessageTooLarge`), queue depth
//!   (Enqueued + Invisible) at `max_queue_depth` (`QueueFull`), a device without state while
//!   `max_devices` devices have state (`TooManyDevices`), `max_messages` messages queued in the
//!   store (`TooManyMessages`). Expiry is `t + TTL`, `EXPIRES`, or `t + default_ttl_ms`, then at
//!   most `t + 2 days`.
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
//!   [`MAX_SWEEP_PER_ENTRY`]), not candidate lists: the due instants are replicated state (the
//!   index is derived from the rows), so every replica finds the same messages; the entry stays
//!   a few bytes; and there is nothing to re-check, because what apply finds due is due. Ties
//!   between equally due messages go by device id, then queue place. The leader learns whether
//!   a sweep is worth proposing from the index's next due instants. ExpireLocks makes Invisible
//!   messages with a due lock Enqueued at their place (count kept); ExpireMessages
//!   dead-letters expired messages in either state (their token stops settling).
//! - Dead letters: at most `max_dead_letters_per_device` per device; the oldest are dropped
//!   to make room (`dead_letters_dropped`).
//! - Feedback ([`feedback`]): a record is written when a message of ack positive/full is
//!   completed (`Success`) or one of ack negative/full is dead-lettered or purged. At most
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
//! - Lock tokens ([`crate::devicebound::token`]) carry 128 secret bits drawn from the seed of
//!   the entry that issues them (the same on every replica: no clock, no randomness read
//!   here). A batch token is `f`, the store-wide count of tokens issued and the secret; a
//!   message token is `m`, the message's place in its device's queue and the secret. A
//!   settlement looks up the message at that place in the settling device's queue and settles
//!   only if it is locked by exactly this token (compared in constant time), so a token of
//!   another device, an earlier lock, or one with the right place and a guessed secret settles
//!   nothing.
//!
//! # Rows and cost
//!
//! A message's row ([`StoredMessage`]: content and delivery state) is created when it enters
//! the queue, rewritten when its delivery state changes, and removed when it leaves; its
//! device's row ([`crate::devicebound::DeviceState`]) is rewritten once per command that
//! changed the device. What to deliver, lock, settle or sweep is looked up in the
//! [`DeviceIndex`], never scanned for. So a SEND to an online device writes its message row
//! and its device row, and the completion removes the one and rewrites (or removes) the other,
//! neither reading a row. A message row is read only when apply needs its content: to publish
//! a message that waited in its queue, to give a delivery back or expire its lock (the row is
//! rewritten), to dead-letter, requeue or report it. The devicebound meta record is read once
//! per transaction and written once if it changed. Sweeps and deliveries touch at most
//! [`MAX_SWEEP_PER_ENTRY`] messages, each O(log n); PURGE and FORGET are O(queue depth + dead
//! letters + waiting records of the device).
//!
//! On an error the transaction is abandoned, and the index may hold changes it made: the
//! caller must rebuild it with [`DeviceIndex::load`] from the committed rows.

mod feedback;

use std::collections::HashSet;

use crate::codec;
use crate::devicebound::command::{DeviceCommand, Expiry, SendMessage, Settlement};
use crate::devicebound::index::DeviceId;
use crate::devicebound::index::{DeviceIndex, QueuedMessage, SavedDevice};
use crate::devicebound::layout;
use crate::devicebound::outcome::{
    DeviceCounters, DeviceOutcome, DeviceRejection, DeviceResult, MessageDelivery,
};
use crate::devicebound::record::{
    DeadLetter, DeadLetterReason, DeviceboundMeta, FeedbackBatch, FeedbackStatus, LockState,
    Message, StoredMessage,
};
use crate::devicebound::token::{self, TokenSecrets, TokenSeed};
use crate::engine::Txn;
use crate::error::{Result, StorageError};

/// Most index entries, messages or batches one entry's sweep, delivery or feedback delivery
/// visits.
pub const MAX_SWEEP_PER_ENTRY: u32 = 1_024;

/// Records in a full feedback batch (spec §4).
pub const FEEDBACK_BATCH_RECORDS: u64 = 64;

/// A batch is cut this long after the last cut if a record waits (spec §4).
pub const FEEDBACK_CUT_INTERVAL_MS: u64 = 15_000;

/// Any message expiry is at most this long after enqueue (spec §1).
pub const MAX_MESSAGE_LIFETIME_MS: u64 = 2 * 24 * 60 * 60 * 1_000;

/// Applies `command` at store time `time_ms` to the rows in `txn` and to `index`, the index of
/// those rows as the commands before it left them, and to `meta`, the device-bound meta record
/// likewise; the lock tokens it issues draw their secrets from `seed`, the entry's. The caller
/// ([`crate::machine::Machine`], the one way device commands are applied) reads the record once
/// per transaction and writes it back once with [`write_meta`] if any call returned `true`
/// (meta changed): decoding and encoding it per command was 8 % of a device-bound apply. On an
/// error the transaction is abandoned, `meta` with it, and `index` must be rebuilt.
pub fn apply_to<T: Txn>(
    txn: &mut T,
    index: &mut DeviceIndex,
    meta: &mut DeviceboundMeta,
    (time_ms, seed): (u64, Option<&TokenSeed>),
    command: &DeviceCommand,
) -> Result<(DeviceOutcome, bool)> {
    let mut machine = Machine {
        txn,
        index,
        time: time_ms,
        meta,
        meta_changed: false,
        counters: DeviceCounters::default(),
        secrets: TokenSecrets::new(seed),
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
    index: &'t mut DeviceIndex,
    time: u64,
    meta: &'t mut DeviceboundMeta,
    meta_changed: bool,
    counters: DeviceCounters,
    /// The secrets of the tokens this entry issues.
    secrets: TokenSecrets,
}

/// Whether a delivery respects the push window (`device_window` Invisible at most).
#[derive(Clone, Copy)]
enum Window {
    /// Push: at most `device_window` Invisible at a time.
    Push,
    /// Pull (`receive`): the head Enqueued message, whatever is Invisible.
    Pull,
}

/// What a delivery visit decided for one message.
enum Visit {
    Lock(u64),
    DeadLetter(u64, DeadLetterReason),
}

impl Visit {
    /// The visited message's place.
    fn seq(&self) -> u64 {
        match self {
            Visit::Lock(seq) | Visit::DeadLetter(seq, _) => *seq,
        }
    }
}

/// What a settlement needs of the message a token locks.
#[derive(Clone, Copy)]
struct Locked {
    delivery_count: u32,
    lock_expires_at_ms: u64,
    expires_at_ms: u64,
    ack: crate::devicebound::command::Ack,
}

/// A message this command appended to a queue (indexed, counted) whose row is not written yet.
struct Unwritten {
    seq: u64,
    message: Message,
}

/// What a feedback delivery visit decided for one batch.
enum BatchVisit {
    Lock(u64, FeedbackBatch),
    Drop(u64, FeedbackBatch),
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
            DeviceCommand::Deliver { device, max } => {
                let (messages, _) = self.deliver(device, *max, Window::Push, None)?;
                self.save_device(device);
                Ok(DeviceResult::Delivered { messages })
            }
            DeviceCommand::Receive { device } => {
                let (received, _) = self.deliver(device, 1, Window::Pull, None)?;
                self.save_device(device);
                Ok(DeviceResult::Received(
                    received.into_iter().next().map(Box::new),
                ))
            }
            DeviceCommand::Undeliver { device, token } => Ok(DeviceResult::Undelivered {
                restored: self.undeliver(device, token)?,
            }),
            DeviceCommand::Settle {
                device,
                token,
                settlement,
            } => {
                let settled = self.settle(device, token, *settlement)?;
                self.save_device(device);
                Ok(DeviceResult::Settled { settled })
            }
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
                    self.deliver(device, u32::MAX, Window::Push, None)?.0
                } else {
                    Vec::new()
                };
                self.save_device(device);
                Ok(DeviceResult::SettledAndDelivered { settled, messages })
            }
        }
    }

    // -- rows --------------------------------------------------------------------------------

    /// Writes the device's row as the index now holds it (or removes it when the device has no
    /// state left), keeping the meta's device count; nothing if the device did not change since
    /// its last save. Commands call it once per device they touched, at their end.
    fn save_device(&mut self, device: &[u8]) {
        match self.index.save(device) {
            Some(SavedDevice::Put { state, created }) => {
                let row = codec::encode(&state);
                if created {
                    self.txn.create(layout::device_key(device), row);
                    self.meta.devices = self.meta.devices.saturating_add(1);
                } else {
                    self.txn.put(layout::device_key(device), row);
                }
            }
            Some(SavedDevice::Remove { existed: true }) => {
                self.txn.remove(layout::device_key(device));
                self.meta.devices = self.meta.devices.saturating_sub(1);
            }
            Some(SavedDevice::Remove { existed: false }) | None => return,
        }
        self.meta_changed = true;
    }

    /// The row of the message at `seq` (required to exist: the index queues it).
    fn stored(&self, device: &[u8], seq: u64) -> Result<StoredMessage> {
        let bytes = self
            .txn
            .get_ref(&layout::message_key(device, seq))?
            .ok_or_else(|| corrupt("device message", "an indexed message without its row"))?;
        codec::decode("device message", &bytes)
    }

    /// Queues `stored` at `seq`, a free place: its row (created, so a settlement before the
    /// next memtable flush leaves nothing behind) and its index entry.
    fn enqueue(&mut self, device: &[u8], seq: u64, stored: &StoredMessage) -> Result<()> {
        self.index_queued(device, seq, stored)?;
        self.create_row(device, seq, stored);
        Ok(())
    }

    /// Queues `stored` at `seq`, a free place, in the index only: its row is the caller's to
    /// write ([`Machine::create_row`]).
    fn index_queued(&mut self, device: &[u8], seq: u64, stored: &StoredMessage) -> Result<()> {
        let id = self.index.ensure(device);
        self.index.insert(&id, seq, QueuedMessage::of(stored))?;
        self.meta.messages = self.meta.messages.saturating_add(1);
        self.meta_changed = true;
        Ok(())
    }

    /// Writes the row of a message that has none yet.
    fn create_row(&mut self, device: &[u8], seq: u64, stored: &StoredMessage) {
        self.txn
            .create(layout::message_key(device, seq), codec::encode(stored));
    }

    /// Gives the queued message at `seq` a new delivery state and writes its row, which holds
    /// `message` (`written`: the row exists; else this command appended the message and its
    /// row is written here for the first time).
    fn restate(
        &mut self,
        device: &[u8],
        seq: u64,
        message: Message,
        state: (u32, Option<LockState>),
        written: bool,
    ) -> Result<StoredMessage> {
        let (delivery_count, lock) = state;
        self.index
            .restate(device, seq, lock.clone(), delivery_count)?;
        let stored = StoredMessage {
            message,
            delivery_count,
            lock,
        };
        if written {
            self.txn
                .put(layout::message_key(device, seq), codec::encode(&stored));
        } else {
            self.create_row(device, seq, &stored);
        }
        Ok(stored)
    }

    /// Takes the message at `seq` out of the queue (row and index entry).
    fn dequeue(&mut self, device: &[u8], seq: u64) -> Result<QueuedMessage> {
        let queued = self.index.remove(device, seq)?;
        self.txn.remove(layout::message_key(device, seq));
        self.meta.messages = self.meta.messages.saturating_sub(1);
        self.meta_changed = true;
        Ok(queued)
    }

    /// Counts one more token issued; returns the count and the token's secret.
    fn issue_token(&mut self) -> (u64, [u8; token::SECRET_BYTES]) {
        let secret = self.secrets.next(self.meta.tokens_issued);
        self.meta.tokens_issued = self.meta.tokens_issued.saturating_add(1);
        self.meta_changed = true;
        (self.meta.tokens_issued, secret)
    }

    /// A fresh lock token for the message at `seq`.
    fn message_token(&mut self, seq: u64) -> String {
        let (_, secret) = self.issue_token();
        token::message_token(seq, &secret)
    }

    /// A fresh lock token for a feedback batch.
    fn batch_token(&mut self) -> String {
        let (issued, secret) = self.issue_token();
        token::batch_token(issued, &secret)
    }

    // -- dead letters ------------------------------------------------------------------------

    /// Dead-letters a message already taken out of the queue.
    fn dead_letter(
        &mut self,
        device: &[u8],
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
        let kept = self
            .index
            .device(device)
            .map_or(0, |entry| entry.state().dead_letters);
        if kept >= cap {
            let excess = usize::try_from(kept - cap + 1).unwrap_or(usize::MAX);
            let oldest = crate::devicebound::read::keys_in(
                &*self.txn,
                &layout::dead_letters_prefix(device),
                excess,
            )?;
            for key in &oldest {
                self.txn.remove(key.clone());
            }
            let dropped = u32::try_from(oldest.len()).unwrap_or(u32::MAX);
            self.index.drop_dead_letters(device, dropped)?;
            self.meta.dead_letters = self.meta.dead_letters.saturating_sub(u64::from(dropped));
            self.count_dropped_dead_letters(oldest.len());
        }
        let letter = DeadLetter {
            delivery_count: stored.delivery_count,
            message: stored.message,
            reason,
            time_ms: self.time,
        };
        self.index.ensure(device);
        let seq = self.index.add_dead_letter(device)?;
        self.txn
            .create(layout::dead_letter_key(device, seq), codec::encode(&letter));
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

    /// Takes the message at `seq` out of the queue and dead-letters it.
    fn dequeue_dead(&mut self, device: &[u8], seq: u64, reason: DeadLetterReason) -> Result<()> {
        let stored = self.stored(device, seq)?;
        self.dequeue(device, seq)?;
        self.dead_letter(device, stored, reason)
    }

    // -- commands ----------------------------------------------------------------------------

    /// Checks a SEND against the caps and builds the message it stores.
    fn admit(&self, send: &SendMessage) -> std::result::Result<Message, DeviceRejection> {
        let settings = self.meta.settings;
        let body_len = u64::try_from(send.body.len()).unwrap_or(u64::MAX);
        if body_len > settings.max_message_bytes {
            return Err(DeviceRejection::MessageTooLarge);
        }
        let state = self.index.device(&send.device).map(|entry| entry.state());
        if state.is_some_and(|s| s.depth() >= u64::from(settings.max_queue_depth)) {
            return Err(DeviceRejection::QueueFull);
        }
        // A zero depth refuses every SEND, also to a device without state.
        if settings.max_queue_depth == 0 {
            return Err(DeviceRejection::QueueFull);
        }
        if state.is_none() && self.meta.devices >= settings.max_devices {
            return Err(DeviceRejection::TooManyDevices);
        }
        if self.meta.messages >= settings.max_messages {
            return Err(DeviceRejection::TooManyMessages);
        }
        let time = self.time;
        let asked = match send.expiry {
            Expiry::Ttl(ms) => time.saturating_add(ms),
            Expiry::At(at) => at,
            Expiry::Default => time.saturating_add(settings.default_ttl_ms),
        };
        Ok(Message {
            message_id: send.message_id.clone(),
            body: send.body.clone(),
            properties: send.properties.clone(),
            content_type: send.content_type.clone(),
            content_encoding: send.content_encoding.clone(),
            ack: send.ack,
            generation: send.generation.clone(),
            expires_at_ms: asked.min(time.saturating_add(MAX_MESSAGE_LIFETIME_MS)),
            enqueued_ms: time,
        })
    }

    /// Appends an admitted message at the tail of its device's queue, in the index only;
    /// returns it with its place. Its row is the caller's to write.
    fn append(&mut self, device: &[u8], message: Message) -> Result<Unwritten> {
        self.index.ensure(device);
        let seq = self.index.take_tail_seq(device)?;
        let stored = StoredMessage {
            message,
            delivery_count: 0,
            lock: None,
        };
        self.index_queued(device, seq, &stored)?;
        add(&mut self.counters.enqueued, 1);
        Ok(Unwritten {
            seq,
            message: stored.message,
        })
    }

    /// Writes the row of an appended message that is still Enqueued, never delivered.
    fn write_fresh(&mut self, device: &[u8], appended: Unwritten) {
        let stored = StoredMessage {
            message: appended.message,
            delivery_count: 0,
            lock: None,
        };
        self.create_row(device, appended.seq, &stored);
    }

    /// Admits a SEND and appends its message (index only); returns its expiry and the message
    /// whose row is still to be written, or the refusal.
    fn admit_and_append(
        &mut self,
        send: &SendMessage,
    ) -> Result<std::result::Result<(u64, Unwritten), DeviceRejection>> {
        let message = match self.admit(send) {
            Ok(message) => message,
            Err(rejection) => return Ok(Err(rejection)),
        };
        let expires_at_ms = message.expires_at_ms;
        Ok(Ok((expires_at_ms, self.append(&send.device, message)?)))
    }

    fn send(&mut self, send: &SendMessage) -> Result<DeviceResult> {
        let (expires_at_ms, appended) = match self.admit_and_append(send)? {
            Ok(admitted) => admitted,
            Err(rejection) => return Ok(DeviceResult::Rejected(rejection)),
        };
        self.write_fresh(&send.device, appended);
        self.save_device(&send.device);
        Ok(DeviceResult::Sent { expires_at_ms })
    }

    /// SEND, then a push delivery to the same device, in one command: the device's row and the
    /// new message's row are each written once, the latter in its final state (locked if the
    /// delivery took it), and no row is read back.
    fn send_and_deliver(&mut self, send: &SendMessage) -> Result<DeviceResult> {
        let (expires_at_ms, appended) = match self.admit_and_append(send)? {
            Ok(admitted) => admitted,
            Err(rejection) => return Ok(DeviceResult::Rejected(rejection)),
        };
        let (messages, waiting) =
            self.deliver(&send.device, u32::MAX, Window::Push, Some(appended))?;
        if let Some(waiting) = waiting {
            self.write_fresh(&send.device, waiting);
        }
        self.save_device(&send.device);
        Ok(DeviceResult::SentAndDelivered {
            expires_at_ms,
            messages,
        })
    }

    fn purge(&mut self, device: &[u8]) -> Result<DeviceResult> {
        let places = self.places(device);
        for seq in &places {
            let on_failure = self
                .index
                .device(device)
                .and_then(|entry| entry.message(*seq))
                .is_some_and(|queued| queued.ack.on_failure());
            if on_failure {
                let stored = self.stored(device, *seq)?;
                self.add_feedback(&stored.message, device, FeedbackStatus::Purged)?;
            }
            self.dequeue(device, *seq)?;
        }
        self.save_device(device);
        add(&mut self.counters.purged, places.len());
        Ok(DeviceResult::Purged {
            messages: u32::try_from(places.len()).unwrap_or(u32::MAX),
        })
    }

    /// The places of every message of the device's queue, in order.
    fn places(&self, device: &[u8]) -> Vec<u64> {
        self.index
            .device(device)
            .map(|entry| entry.queue().map(|(seq, _)| *seq).collect())
            .unwrap_or_default()
    }

    fn forget(&mut self, device: &[u8]) -> Result<DeviceResult> {
        let places = self.places(device);
        for seq in &places {
            self.dequeue(device, *seq)?;
        }
        let messages = places.len();
        let mut dead_letters = 0;
        if let Some(kept) = self.index.device(device).map(|e| e.state().dead_letters) {
            let letters = crate::devicebound::read::keys_in(
                &*self.txn,
                &layout::dead_letters_prefix(device),
                usize::MAX,
            )?;
            for key in &letters {
                self.txn.remove(key.clone());
            }
            dead_letters = letters.len();
            self.index.drop_dead_letters(device, kept)?;
            self.meta.dead_letters = self
                .meta
                .dead_letters
                .saturating_sub(u64::try_from(dead_letters).unwrap_or(u64::MAX));
            self.save_device(device);
        }
        let waiting = crate::devicebound::read::keys_in(
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

    /// Locks (or dead-letters) the device's next Enqueued messages within the budget.
    /// `appended` is a message this command appended whose row is not written yet: if the
    /// delivery locks it, its row is written locked; if it dead-letters it, no row is written;
    /// otherwise it is handed back for the caller to write. The caller saves the device's row.
    fn deliver(
        &mut self,
        device: &[u8],
        max: u32,
        window: Window,
        mut appended: Option<Unwritten>,
    ) -> Result<(Vec<MessageDelivery>, Option<Unwritten>)> {
        let Some(entry) = self.index.device(device) else {
            return Ok((Vec::new(), appended));
        };
        let settings = self.meta.settings;
        let state = entry.state();
        let budget = match window {
            Window::Push => max.min(settings.device_window.saturating_sub(state.invisible)),
            Window::Pull => max,
        };
        if budget == 0 || state.enqueued == 0 {
            return Ok((Vec::new(), appended));
        }
        let budget = usize::try_from(budget).unwrap_or(usize::MAX);
        let time = self.time;
        let mut visits = Vec::new();
        let mut locks = 0;
        for (&seq, queued) in entry.queue().take(sweep_bound(u32::MAX)) {
            if queued.lock.is_some() {
                continue;
            }
            if queued.expires_at_ms <= time {
                visits.push(Visit::DeadLetter(seq, DeadLetterReason::Expired));
            } else if queued.delivery_count >= settings.max_delivery_count {
                visits.push(Visit::DeadLetter(
                    seq,
                    DeadLetterReason::DeliveryCountExceeded,
                ));
            } else {
                visits.push(Visit::Lock(seq));
                locks += 1;
                if locks == budget {
                    break;
                }
            }
        }
        let mut deliveries = Vec::with_capacity(locks);
        for visit in visits {
            let unwritten = match appended.take() {
                Some(message) if message.seq == visit.seq() => Some(message),
                other => {
                    appended = other;
                    None
                }
            };
            match (visit, unwritten) {
                (Visit::DeadLetter(seq, reason), None) => self.dequeue_dead(device, seq, reason)?,
                (Visit::DeadLetter(seq, reason), Some(unwritten)) => {
                    // Dead on arrival (already expired, or no delivery allowed): never written.
                    let queued = self.index.remove(device, seq)?;
                    self.meta.messages = self.meta.messages.saturating_sub(1);
                    let stored = StoredMessage {
                        message: unwritten.message,
                        delivery_count: queued.delivery_count,
                        lock: None,
                    };
                    self.dead_letter(device, stored, reason)?;
                }
                (Visit::Lock(seq), unwritten) => {
                    let written = unwritten.is_none();
                    let (message, count) = match unwritten {
                        Some(unwritten) => (unwritten.message, 0),
                        None => {
                            let stored = self.stored(device, seq)?;
                            (stored.message, stored.delivery_count)
                        }
                    };
                    let lock = LockState {
                        token: self.message_token(seq),
                        expires_at_ms: time.saturating_add(settings.lock_duration_ms),
                    };
                    let count = count.saturating_add(1);
                    let published = lock.clone();
                    let locked =
                        self.restate(device, seq, message, (count, Some(lock)), written)?;
                    deliveries.push(MessageDelivery {
                        device: device.to_vec(),
                        token: published.token,
                        lock_expires_at_ms: published.expires_at_ms,
                        delivery_count: count,
                        message: locked.message,
                    });
                }
            }
        }
        add(&mut self.counters.delivered, deliveries.len());
        Ok((deliveries, appended))
    }

    /// The place and delivery state of the message `token` locks, if it belongs to `device`.
    fn locked_message(&self, device: &[u8], token: &str) -> Option<(u64, Locked)> {
        // Only the settling device's own queue is looked at: a device cannot touch another
        // device's message.
        let seq = token::message_token_seq(token)?;
        let queued = self.index.device(device)?.message(seq)?;
        let lock = queued
            .lock
            .as_ref()
            .filter(|lock| token::tokens_match(&lock.token, token))?;
        Some((
            seq,
            Locked {
                delivery_count: queued.delivery_count,
                lock_expires_at_ms: lock.expires_at_ms,
                expires_at_ms: queued.expires_at_ms,
                ack: queued.ack,
            },
        ))
    }

    fn undeliver(&mut self, device: &[u8], token: &str) -> Result<bool> {
        let Some((seq, old)) = self.locked_message(device, token) else {
            return Ok(false);
        };
        let stored = self.stored(device, seq)?;
        let count = old.delivery_count.saturating_sub(1);
        self.restate(device, seq, stored.message, (count, None), true)?;
        self.save_device(device);
        add(&mut self.counters.undelivered, 1);
        Ok(true)
    }

    /// Settles the message `token` locks; the caller saves the device's row.
    fn settle(&mut self, device: &[u8], token: &str, settlement: Settlement) -> Result<bool> {
        let Some((seq, old)) = self.locked_message(device, token) else {
            return Ok(false);
        };
        let time = self.time;
        if old.lock_expires_at_ms <= time || old.expires_at_ms <= time {
            return Ok(false);
        }
        match settlement {
            Settlement::Complete => {
                if old.ack.on_success() {
                    let stored = self.stored(device, seq)?;
                    self.add_feedback(&stored.message, device, FeedbackStatus::Success)?;
                }
                self.dequeue(device, seq)?;
                add(&mut self.counters.completed, 1);
            }
            Settlement::Abandon => {
                // In front of every other message of the queue (its own place if it is first).
                let first_other = self
                    .index
                    .device(device)
                    .and_then(|entry| entry.queue().map(|(at, _)| *at).find(|at| *at != seq));
                let head = first_other.map_or(seq, |first| seq.min(first.saturating_sub(1)));
                let stored = self.stored(device, seq)?;
                if head == seq {
                    // Already in front of every other message: it stays where it is, unlocked.
                    self.restate(
                        device,
                        seq,
                        stored.message,
                        (old.delivery_count, None),
                        true,
                    )?;
                } else {
                    self.dequeue(device, seq)?;
                    let requeued = StoredMessage {
                        message: stored.message,
                        delivery_count: old.delivery_count,
                        lock: None,
                    };
                    self.enqueue(device, head, &requeued)?;
                }
                add(&mut self.counters.abandoned, 1);
            }
            Settlement::Reject => {
                let stored = self.stored(device, seq)?;
                self.dequeue(device, seq)?;
                self.dead_letter(device, stored, DeadLetterReason::Rejected)?;
            }
        }
        Ok(true)
    }

    /// Saves every device of `due` (in the sweep's order, each once).
    fn save_devices(&mut self, due: &[(DeviceId, u64)]) {
        let mut saved: HashSet<&[u8]> = HashSet::with_capacity(due.len());
        for (device, _) in due {
            if saved.insert(device) {
                self.save_device(device);
            }
        }
    }

    fn expire_locks(&mut self, max: u32) -> Result<DeviceResult> {
        let due = self.index.due_locks(self.time, sweep_bound(max));
        for (device, seq) in &due {
            let stored = self.stored(device, *seq)?;
            self.restate(
                device,
                *seq,
                stored.message,
                (stored.delivery_count, None),
                true,
            )?;
        }
        self.save_devices(&due);
        add(&mut self.counters.lock_expiries, due.len());
        Ok(DeviceResult::LocksExpired {
            count: u32::try_from(due.len()).unwrap_or(u32::MAX),
        })
    }

    fn expire_messages(&mut self, max: u32) -> Result<DeviceResult> {
        let due = self.index.due_expiries(self.time, sweep_bound(max));
        for (device, seq) in &due {
            self.dequeue_dead(device, *seq, DeadLetterReason::Expired)?;
        }
        self.save_devices(&due);
        Ok(DeviceResult::Expired {
            count: u32::try_from(due.len()).unwrap_or(u32::MAX),
        })
    }
}
