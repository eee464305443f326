//! Model-based property test of the device-bound queues (`shared/spec/devicebound.md` and the
//! rules the `devicebound::apply` module documents where the spec is silent).
//!
//! Invariants checked, after every step of a random sequence of SEND, PURGE, FORGET,
//! deliveries, receives, undeliveries, settlements (with live, stale, foreign and made-up
//! tokens), SENDs and settlements that also deliver (`SendAndDeliver`, `SettleAndDeliver`),
//! sweeps, feedback cuts/deliveries/settlements, retried requests and clock moves:
//!
//! - the crate and a deliberately plain model (Vec/VecDeque/BTreeMap, no code shared with the
//!   implementation; the crate's data types are only vocabulary) give the same result;
//! - every device's QUEUE stats, dead letters, the waiting feedback records and the feedback
//!   batches are the same, and the meta's device count equals the model's;
//! - lock tokens are ASCII, at most 64 bytes, never issued twice;
//! - the device queues' index kept from one transaction to the next (as the consensus layer keeps
//!   it) equals the index rebuilt from the committed rows, after every step, on a plain map and
//!   on the store (fjall behind its memtable; and after reopening the store);
//! - replaying the same proposals on a fresh store, one transaction each or grouped into
//!   transactions of random sizes, gives byte-identical state (determinism); so does the
//!   grouped replay on a fjall-backed store whose memtable freezes every 4 KiB (rows that are
//!   created and removed again, in one map or across maps, leave exactly what the plain map
//!   has).
//!
//! The model takes lock tokens from the crate's delivery results (it cannot predict an opaque
//! token) and from then on decides by its own state which token settles what.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use proptest::prelude::*;
use proptest::sample::Index;
use statestore_storage::devicebound::{
    self, Ack, DeadLetterReason, DeviceCommand, DeviceIndex, DeviceOutcome, DeviceRejection,
    DeviceResult, DeviceboundSettings, Expiry, FeedbackDelivery, FeedbackRecord,
    FeedbackSettlement, FeedbackStatus, Message, MessageDelivery, QueueStats, SendMessage,
    Settlement, TokenSeed,
};
use statestore_storage::engine::{OrderedRead, Overlay, Txn};
use statestore_storage::layout;
use statestore_storage::machine::{Carry, Machine, Mutation, Outcome, Proposal, RequestId};
use statestore_storage::store::{Store, StoreConfig};
use statestore_vocab::hlc::Hlc;

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

const BASE_MS: u64 = 1_700_000_000_000;

/// Device ids of equal length (ties between equally due entries go by device id).
const DEVICES: [&[u8]; 3] = [b"d0", b"d1", b"d2"];

const TWO_DAYS_MS: u64 = 2 * 24 * 60 * 60 * 1_000;

fn settings_options() -> [DeviceboundSettings; 2] {
    let small = DeviceboundSettings {
        max_queue_depth: 3,
        max_message_bytes: 6,
        default_ttl_ms: 6_000,
        max_delivery_count: 2,
        lock_duration_ms: 1_000,
        device_window: 1,
        feedback_ttl_ms: 20_000,
        feedback_max_delivery_count: 2,
        feedback_lock_duration_ms: 1_000,
        max_dead_letters_per_device: 2,
        max_devices: 2,
        max_messages: 5,
        max_pending_feedback_records: 5,
        max_feedback_batches: 2,
    };
    let wide = DeviceboundSettings {
        max_queue_depth: 5,
        device_window: 3,
        max_delivery_count: 3,
        max_dead_letters_per_device: 3,
        max_devices: 3,
        max_messages: 8,
        max_pending_feedback_records: 100,
        max_feedback_batches: 4,
        ..small
    };
    [small, wide]
}

#[derive(Debug, Clone)]
enum Op {
    Send {
        device: usize,
        body_len: usize,
        ack: Ack,
        expiry: Expiry,
        /// `SendAndDeliver` instead of `Send`.
        deliver: bool,
    },
    Purge(usize),
    Forget(usize),
    Deliver(usize, u32),
    Receive(usize),
    /// (device, token pick, recent tokens only, the token's own device instead)
    Undeliver(usize, Index, bool, bool),
    /// (device, token pick, recent tokens only, the token's own device instead, settlement,
    /// `SettleAndDeliver` instead of `Settle`)
    Settle(usize, Index, bool, bool, Settlement, bool),
    ExpireLocks(u32),
    ExpireMessages(u32),
    Cut,
    DeliverFeedback(u32),
    UndeliverFeedback(Index),
    SettleFeedback(Index, FeedbackSettlement),
    ExpireFeedbackLocks(u32),
    ExpireFeedbackBatches(u32),
    Retry(Index),
    /// Another request under the identity (client, correlation data) of an earlier one: the
    /// same command with another digest.
    Impostor(Index),
    Advance(u64),
}

fn ack() -> impl Strategy<Value = Ack> {
    prop_oneof![
        Just(Ack::None),
        Just(Ack::Positive),
        Just(Ack::Negative),
        Just(Ack::Full)
    ]
}

fn expiry() -> impl Strategy<Value = Expiry> {
    prop_oneof![
        2 => Just(Expiry::Default),
        2 => (0u64..8_000).prop_map(Expiry::Ttl),
        1 => (0u64..8_000).prop_map(|ms| Expiry::At(BASE_MS + ms)),
        1 => Just(Expiry::Ttl(TWO_DAYS_MS + 5)),
    ]
}

fn settlement() -> impl Strategy<Value = Settlement> {
    prop_oneof![
        Just(Settlement::Complete),
        Just(Settlement::Abandon),
        Just(Settlement::Reject)
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let device = 0..DEVICES.len();
    prop_oneof![
        6 => (device.clone(), 0usize..8, ack(), expiry(), any::<bool>()).prop_map(|(device, body_len, ack, expiry, deliver)| {
            Op::Send { device, body_len, ack, expiry, deliver }
        }),
        1 => device.clone().prop_map(Op::Purge),
        1 => device.clone().prop_map(Op::Forget),
        4 => (device.clone(), 0u32..4).prop_map(|(d, max)| Op::Deliver(d, max)),
        1 => device.clone().prop_map(Op::Receive),
        1 => (device.clone(), any::<Index>(), any::<bool>(), prop::bool::weighted(0.8))
            .prop_map(|(d, i, recent, own)| Op::Undeliver(d, i, recent, own)),
        6 => (device.clone(), any::<Index>(), prop::bool::weighted(0.7), prop::bool::weighted(0.8), settlement(), any::<bool>())
            .prop_map(|(d, i, recent, own, s, deliver)| Op::Settle(d, i, recent, own, s, deliver)),
        2 => (0u32..4).prop_map(Op::ExpireLocks),
        2 => (0u32..4).prop_map(Op::ExpireMessages),
        2 => Just(Op::Cut),
        2 => (0u32..3).prop_map(Op::DeliverFeedback),
        1 => any::<Index>().prop_map(Op::UndeliverFeedback),
        2 => (any::<Index>(), prop_oneof![Just(FeedbackSettlement::Complete), Just(FeedbackSettlement::Abandon)])
            .prop_map(|(i, s)| Op::SettleFeedback(i, s)),
        1 => (0u32..3).prop_map(Op::ExpireFeedbackLocks),
        1 => (0u32..3).prop_map(Op::ExpireFeedbackBatches),
        1 => any::<Index>().prop_map(Op::Retry),
        1 => any::<Index>().prop_map(Op::Impostor),
        4 => prop_oneof![3 => 0u64..300, 1 => Just(1u64), 2 => 0u64..1_500, 1 => Just(15_000u64)]
            .prop_map(Op::Advance),
    ]
}

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

// ---------------------------------------------------------------------------------------------
// The model.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct ModelMessage {
    message: Message,
    count: u32,
    /// (token, lock expiry)
    lock: Option<(String, u64)>,
}

#[derive(Debug, Clone, Default)]
struct ModelDevice {
    queue: Vec<ModelMessage>,
    /// (message id, reason, time)
    dead: VecDeque<(Vec<u8>, DeadLetterReason, u64)>,
}

#[derive(Debug, Clone)]
struct ModelBatch {
    records: Vec<FeedbackRecord>,
    cut: u64,
    expires: u64,
    count: u32,
    lock: Option<(String, u64)>,
}

struct Model {
    s: DeviceboundSettings,
    devices: BTreeMap<Vec<u8>, ModelDevice>,
    pending: VecDeque<FeedbackRecord>,
    batches: Vec<ModelBatch>,
    last_cut: u64,
    now: u64,
    /// Remembered replies: (client, correlation) -> (result, until, request digest).
    replies: HashMap<Vec<u8>, (DeviceResult, u64, u128)>,
}

impl Model {
    fn has_state(&self, device: &[u8]) -> bool {
        self.devices
            .get(device)
            .is_some_and(|d| !d.queue.is_empty() || !d.dead.is_empty())
    }

    fn device(&mut self, device: &[u8]) -> &mut ModelDevice {
        self.devices.entry(device.to_vec()).or_default()
    }

    fn feedback(&mut self, device: &[u8], message: &Message, status: FeedbackStatus) {
        if self.s.max_pending_feedback_records == 0 {
            return;
        }
        while self.pending.len() as u64 >= self.s.max_pending_feedback_records {
            self.pending.pop_front();
        }
        self.pending.push_back(FeedbackRecord {
            original_message_id: message.message_id.clone(),
            time_ms: self.now,
            status,
            device: device.to_vec(),
            generation: message.generation.clone(),
        });
    }

    fn dead_letter(&mut self, device: &[u8], m: ModelMessage, reason: DeadLetterReason) {
        let failure = matches!(m.message.ack, Ack::Negative | Ack::Full);
        if failure {
            let status = match reason {
                DeadLetterReason::Expired => FeedbackStatus::Expired,
                DeadLetterReason::DeliveryCountExceeded => FeedbackStatus::DeliveryCountExceeded,
                DeadLetterReason::Rejected => FeedbackStatus::Rejected,
            };
            self.feedback(device, &m.message, status);
        }
        let cap = self.s.max_dead_letters_per_device as usize;
        let now = self.now;
        let d = self.device(device);
        if cap == 0 {
            return;
        }
        while d.dead.len() >= cap {
            d.dead.pop_front();
        }
        d.dead.push_back((m.message.message_id, reason, now));
    }

    fn send(&mut self, send: &SendMessage) -> DeviceResult {
        if send.body.len() as u64 > self.s.max_message_bytes {
            return DeviceResult::Rejected(DeviceRejection::MessageTooLarge);
        }
        let depth = self.devices.get(&send.device).map_or(0, |d| d.queue.len());
        if depth as u64 >= u64::from(self.s.max_queue_depth) {
            return DeviceResult::Rejected(DeviceRejection::QueueFull);
        }
        let with_state = DEVICES.iter().filter(|d| self.has_state(d)).count() as u64;
        if !self.has_state(&send.device) && with_state >= self.s.max_devices {
            return DeviceResult::Rejected(DeviceRejection::TooManyDevices);
        }
        let queued: usize = self.devices.values().map(|d| d.queue.len()).sum();
        if queued as u64 >= self.s.max_messages {
            return DeviceResult::Rejected(DeviceRejection::TooManyMessages);
        }
        let wanted = match send.expiry {
            Expiry::Ttl(ms) => self.now + ms,
            Expiry::At(at) => at,
            Expiry::Default => self.now + self.s.default_ttl_ms,
        };
        let expires = wanted.min(self.now + TWO_DAYS_MS);
        let message = Message {
            message_id: send.message_id.clone(),
            body: send.body.clone(),
            properties: send.properties.clone(),
            content_type: send.content_type.clone(),
            content_encoding: send.content_encoding.clone(),
            ack: send.ack,
            generation: send.generation.clone(),
            expires_at_ms: expires,
            enqueued_ms: self.now,
        };
        self.device(&send.device).queue.push(ModelMessage {
            message,
            count: 0,
            lock: None,
        });
        DeviceResult::Sent {
            expires_at_ms: expires,
        }
    }

    fn purge(&mut self, device: &[u8]) -> DeviceResult {
        let queue = std::mem::take(&mut self.device(device).queue);
        for m in &queue {
            if matches!(m.message.ack, Ack::Negative | Ack::Full) {
                self.feedback(device, &m.message, FeedbackStatus::Purged);
            }
        }
        DeviceResult::Purged {
            messages: queue.len() as u32,
        }
    }

    fn forget(&mut self, device: &[u8]) -> DeviceResult {
        let d = self.devices.remove(device).unwrap_or_default();
        let before = self.pending.len();
        self.pending.retain(|r| r.device != device);
        DeviceResult::Forgot {
            messages: d.queue.len() as u32,
            dead_letters: d.dead.len() as u32,
            feedback_records: (before - self.pending.len()) as u32,
        }
    }

    /// The deliveries the model expects; tokens are taken from `issued` in order.
    fn deliver(
        &mut self,
        device: &[u8],
        max: u32,
        pull: bool,
        issued: &mut dyn Iterator<Item = String>,
    ) -> Vec<MessageDelivery> {
        let s = self.s;
        let now = self.now;
        let Some(d) = self.devices.get(device) else {
            return Vec::new();
        };
        let invisible = d.queue.iter().filter(|m| m.lock.is_some()).count() as u32;
        // A pull takes the head Enqueued message whatever is locked (spec §3).
        let budget = if pull {
            max
        } else {
            max.min(s.device_window.saturating_sub(invisible))
        };
        if budget == 0 || d.queue.iter().all(|m| m.lock.is_some()) {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut kept = Vec::new();
        let mut died = Vec::new();
        let queue = std::mem::take(&mut self.device(device).queue);
        for mut m in queue {
            if m.lock.is_some() || out.len() as u32 == budget {
                kept.push(m);
            } else if m.message.expires_at_ms <= now {
                died.push((m, DeadLetterReason::Expired));
            } else if m.count >= s.max_delivery_count {
                died.push((m, DeadLetterReason::DeliveryCountExceeded));
            } else {
                let token = issued.next().unwrap_or_default();
                m.count += 1;
                m.lock = Some((token.clone(), now + s.lock_duration_ms));
                out.push(MessageDelivery {
                    device: device.to_vec(),
                    token,
                    lock_expires_at_ms: now + s.lock_duration_ms,
                    delivery_count: m.count,
                    message: m.message.clone(),
                });
                kept.push(m);
            }
        }
        self.device(device).queue = kept;
        for (m, reason) in died {
            self.dead_letter(device, m, reason);
        }
        out
    }

    fn find_locked(&self, device: &[u8], token: &str) -> Option<usize> {
        self.devices
            .get(device)?
            .queue
            .iter()
            .position(|m| m.lock.as_ref().is_some_and(|(t, _)| t == token))
    }

    fn undeliver(&mut self, device: &[u8], token: &str) -> DeviceResult {
        let Some(at) = self.find_locked(device, token) else {
            return DeviceResult::Undelivered { restored: false };
        };
        let m = &mut self.device(device).queue[at];
        m.lock = None;
        m.count -= 1;
        DeviceResult::Undelivered { restored: true }
    }

    fn settle(&mut self, device: &[u8], token: &str, settlement: Settlement) -> DeviceResult {
        let now = self.now;
        let Some(at) = self.find_locked(device, token) else {
            return DeviceResult::Settled { settled: false };
        };
        let m = &self.devices[device].queue[at];
        let lock_until = m.lock.as_ref().map_or(0, |(_, until)| *until);
        if now >= lock_until || m.message.expires_at_ms <= now {
            return DeviceResult::Settled { settled: false };
        }
        let mut m = self.device(device).queue.remove(at);
        match settlement {
            Settlement::Complete => {
                if matches!(m.message.ack, Ack::Positive | Ack::Full) {
                    self.feedback(device, &m.message, FeedbackStatus::Success);
                }
            }
            Settlement::Abandon => {
                m.lock = None;
                self.device(device).queue.insert(0, m);
            }
            Settlement::Reject => self.dead_letter(device, m, DeadLetterReason::Rejected),
        }
        DeviceResult::Settled { settled: true }
    }

    /// (device, position) of every message matching `due`, earliest first (ties by device, then
    /// position), at most `max`. Positions, not contents: a retry executed again (after another
    /// request took its reply slot, `machine::replies`) enqueues a message equal to the first.
    fn due(&self, max: u32, due: impl Fn(&ModelMessage) -> Option<u64>) -> Vec<(Vec<u8>, usize)> {
        let mut all: Vec<(u64, Vec<u8>, usize)> = Vec::new();
        for (device, d) in &self.devices {
            for (i, m) in d.queue.iter().enumerate() {
                if let Some(at) = due(m).filter(|at| *at <= self.now) {
                    all.push((at, device.clone(), i));
                }
            }
        }
        all.sort();
        all.into_iter()
            .take(max as usize)
            .map(|(_, device, position)| (device, position))
            .collect()
    }

    fn expire_locks(&mut self, max: u32) -> DeviceResult {
        let due = self.due(max, |m| m.lock.as_ref().map(|(_, until)| *until));
        for (device, position) in &due {
            self.device(device).queue[*position].lock = None;
        }
        DeviceResult::LocksExpired {
            count: due.len() as u32,
        }
    }

    fn expire_messages(&mut self, max: u32) -> DeviceResult {
        let due = self.due(max, |m| Some(m.message.expires_at_ms));
        for (device, position) in &due {
            let m = self.devices[device].queue[*position].clone();
            self.dead_letter(device, m, DeadLetterReason::Expired);
        }
        for (device, d) in &mut self.devices {
            let mut position = 0;
            d.queue.retain(|_| {
                let expired = due.iter().any(|(d, p)| d == device && *p == position);
                position += 1;
                !expired
            });
        }
        DeviceResult::Expired {
            count: due.len() as u32,
        }
    }

    fn cut(&mut self) -> DeviceResult {
        let n = self.pending.len();
        if !(n >= 64 || (n >= 1 && self.now >= self.last_cut + 15_000)) {
            return DeviceResult::FeedbackCut { records: 0 };
        }
        let records: Vec<_> = self.pending.drain(..n.min(64)).collect();
        let count = records.len() as u32;
        self.last_cut = self.now;
        let cap = self.s.max_feedback_batches as usize;
        while !self.batches.is_empty() && self.batches.len() >= cap {
            self.batches.remove(0);
        }
        if cap > 0 {
            self.batches.push(ModelBatch {
                records,
                cut: self.now,
                expires: self.now + self.s.feedback_ttl_ms,
                count: 0,
                lock: None,
            });
        }
        DeviceResult::FeedbackCut { records: count }
    }

    fn deliver_feedback(
        &mut self,
        max: u32,
        issued: &mut dyn Iterator<Item = String>,
    ) -> DeviceResult {
        let now = self.now;
        let s = self.s;
        let mut out = Vec::new();
        let mut kept = Vec::new();
        for mut b in std::mem::take(&mut self.batches) {
            if max == 0 || b.lock.is_some() || out.len() as u32 == max {
                kept.push(b);
            } else if b.expires <= now || b.count >= s.feedback_max_delivery_count {
                // dropped
            } else {
                let token = issued.next().unwrap_or_default();
                b.count += 1;
                b.lock = Some((token.clone(), now + s.feedback_lock_duration_ms));
                out.push(FeedbackDelivery {
                    token,
                    cut_ms: b.cut,
                    lock_expires_at_ms: now + s.feedback_lock_duration_ms,
                    expires_at_ms: b.expires,
                    delivery_count: b.count,
                    records: b.records.clone(),
                });
                kept.push(b);
            }
        }
        self.batches = kept;
        DeviceResult::FeedbackDelivered { batches: out }
    }

    fn find_batch(&self, token: &str) -> Option<usize> {
        self.batches
            .iter()
            .position(|b| b.lock.as_ref().is_some_and(|(t, _)| t == token))
    }

    fn undeliver_feedback(&mut self, token: &str) -> DeviceResult {
        let Some(at) = self.find_batch(token) else {
            return DeviceResult::Undelivered { restored: false };
        };
        self.batches[at].lock = None;
        self.batches[at].count -= 1;
        DeviceResult::Undelivered { restored: true }
    }

    fn settle_feedback(&mut self, token: &str, settlement: FeedbackSettlement) -> DeviceResult {
        let Some(at) = self.find_batch(token) else {
            return DeviceResult::Settled { settled: false };
        };
        let b = &self.batches[at];
        let until = b.lock.as_ref().map_or(0, |(_, u)| *u);
        if self.now >= until || b.expires <= self.now {
            return DeviceResult::Settled { settled: false };
        }
        match settlement {
            FeedbackSettlement::Complete => {
                self.batches.remove(at);
            }
            FeedbackSettlement::Abandon => self.batches[at].lock = None,
        }
        DeviceResult::Settled { settled: true }
    }

    fn due_batches(&self, max: u32, due: impl Fn(&ModelBatch) -> Option<u64>) -> Vec<usize> {
        let mut all: Vec<(u64, usize)> = self
            .batches
            .iter()
            .enumerate()
            .filter_map(|(i, b)| due(b).filter(|at| *at <= self.now).map(|at| (at, i)))
            .collect();
        all.sort();
        all.into_iter().take(max as usize).map(|(_, i)| i).collect()
    }

    fn expire_feedback_locks(&mut self, max: u32) -> DeviceResult {
        let due = self.due_batches(max, |b| b.lock.as_ref().map(|(_, u)| *u));
        for &i in &due {
            self.batches[i].lock = None;
        }
        DeviceResult::LocksExpired {
            count: due.len() as u32,
        }
    }

    fn expire_feedback_batches(&mut self, max: u32) -> DeviceResult {
        let mut due = self.due_batches(max, |b| Some(b.expires));
        let count = due.len() as u32;
        due.sort_unstable_by(|a, b| b.cmp(a));
        for i in due {
            self.batches.remove(i);
        }
        DeviceResult::Expired { count }
    }

    fn stats(&self, device: &[u8]) -> QueueStats {
        let Some(d) = self.devices.get(device) else {
            return QueueStats::default();
        };
        let enqueued: Vec<_> = d.queue.iter().filter(|m| m.lock.is_none()).collect();
        QueueStats {
            enqueued: enqueued.len() as u32,
            invisible: (d.queue.len() - enqueued.len()) as u32,
            dead_lettered: d.dead.len() as u32,
            oldest_enqueued_ms: enqueued.iter().map(|m| m.message.enqueued_ms).min(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Driving both.
// ---------------------------------------------------------------------------------------------

/// Applies `proposals` in one transaction as the consensus layer does: with the index kept
/// from the previous transactions, changed as they apply. The index must then equal the one
/// rebuilt from the committed rows.
fn apply(
    map: &mut Map,
    index: &mut DeviceIndex,
    proposals: &[Proposal],
) -> Result<Vec<DeviceOutcome>, TestCaseError> {
    let mut txn = Overlay::new(&*map);
    let mut machine = Machine::open_with_index(&mut txn, &Carry::default(), index).map_err(fail)?;
    let outcomes = apply_all(&mut machine, proposals)?;
    machine.finish();
    commit(map, txn.into_writes());
    let rebuilt = DeviceIndex::load(&*map).map_err(fail)?;
    prop_assert!(*index == rebuilt, "the kept index is the index of the rows");
    Ok(outcomes)
}

/// [`apply`] without a kept index: the machine builds one from the rows.
fn apply_loading(map: &mut Map, proposals: &[Proposal]) -> Result<(), TestCaseError> {
    let mut txn = Overlay::new(&*map);
    let mut machine = Machine::open(&mut txn).map_err(fail)?;
    apply_all(&mut machine, proposals)?;
    machine.finish();
    commit(map, txn.into_writes());
    Ok(())
}

fn apply_all<T: Txn>(
    machine: &mut Machine<'_, T>,
    proposals: &[Proposal],
) -> Result<Vec<DeviceOutcome>, TestCaseError> {
    let mut outcomes = Vec::new();
    for proposal in proposals {
        match machine.apply(proposal).map_err(fail)?.outcome {
            Outcome::Device(outcome) => outcomes.push(*outcome),
            other => return Err(fail(format!("a device command gave {other:?}"))),
        }
    }
    Ok(outcomes)
}

fn commit(map: &mut Map, writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>) {
    for (key, write) in writes {
        match write {
            Some(value) => map.insert(key, value),
            None => map.remove(&key),
        };
    }
}

fn pick<T: Clone>(items: &[T], index: &Index) -> Option<T> {
    (!items.is_empty()).then(|| items[index.index(items.len())].clone())
}

/// A token to settle with: any issued so far, or one of the last four; sent by the device
/// it was issued for (`own`) or by `device`.
fn pick_token(
    tokens: &[(String, usize)],
    index: &Index,
    recent: bool,
    own: bool,
    device: usize,
) -> (String, usize) {
    let pool = if recent {
        &tokens[tokens.len().saturating_sub(4)..]
    } else {
        tokens
    };
    match pick(pool, index) {
        Some((token, owner)) => (token, if own { owner } else { device }),
        None => (String::new(), device),
    }
}

/// `token` with the same place (and length) and a guessed secret: its last digit changed.
fn forged(token: &str) -> String {
    let mut forged = token.to_owned();
    let last = forged.pop();
    forged.push(if last == Some('0') { '1' } else { '0' });
    forged
}

fn device_index(device: &[u8]) -> usize {
    DEVICES.iter().position(|d| *d == device).unwrap_or(0)
}

fn tokens_of(result: &DeviceResult) -> Vec<String> {
    match result {
        DeviceResult::Delivered { messages }
        | DeviceResult::SentAndDelivered { messages, .. }
        | DeviceResult::SettledAndDelivered { messages, .. } => {
            messages.iter().map(|m| m.token.clone()).collect()
        }
        DeviceResult::Received(Some(m)) => vec![m.token.clone()],
        DeviceResult::FeedbackDelivered { batches } => {
            batches.iter().map(|b| b.token.clone()).collect()
        }
        _ => Vec::new(),
    }
}

fn run(ops: &[Op], settings: DeviceboundSettings, groups: &[usize]) -> Result<(), TestCaseError> {
    let mut map = Map::new();
    let mut model = Model {
        s: settings,
        devices: BTreeMap::new(),
        pending: VecDeque::new(),
        batches: Vec::new(),
        last_cut: 0,
        now: BASE_MS,
        replies: HashMap::new(),
    };
    let mut wall = BASE_MS;
    let mut counter = 0u64;
    let mut proposals = Vec::new();
    // (token, the device it was issued for)
    let mut message_tokens: Vec<(String, usize)> = vec![("m-made-up".into(), 0)];
    let mut batch_tokens: Vec<String> = vec!["f-made-up".into()];
    let mut seen_tokens = HashSet::new();
    let mut requests: Vec<Proposal> = Vec::new();

    let mut propose = |wall: u64, request: Option<RequestId>, command: DeviceCommand| {
        counter += 1;
        Proposal {
            stamp: Hlc::new(wall, counter, "n1"),
            wall_ms: wall,
            request,
            mutation: Mutation::Device(command),
            token_seed: Some(TokenSeed(std::array::from_fn(|i| {
                counter.to_le_bytes()[i % 8] ^ u8::try_from(i).unwrap_or(0)
            }))),
        }
    };
    let setup = propose(wall, None, DeviceCommand::SetSettings(settings));
    let mut index = DeviceIndex::default();
    apply(&mut map, &mut index, std::slice::from_ref(&setup))?;
    proposals.push(setup);

    for (step, op) in ops.iter().enumerate() {
        let request = |n: usize| RequestId {
            client: b"backend".to_vec(),
            correlation: n.to_be_bytes().to_vec(),
            remember_for_ms: 3_000,
            digest: 0,
        };
        let proposal = match op {
            Op::Advance(ms) => {
                wall += ms;
                continue;
            }
            Op::Send {
                device,
                body_len,
                ack,
                expiry,
                deliver,
            } => propose(
                wall,
                Some(request(step)),
                (if *deliver {
                    DeviceCommand::SendAndDeliver
                } else {
                    DeviceCommand::Send
                })(SendMessage {
                    device: DEVICES[*device].to_vec(),
                    message_id: format!("m{step}").into_bytes(),
                    body: vec![b'x'; *body_len],
                    properties: vec![("p".into(), step.to_string())],
                    content_type: (step % 2 == 0).then(|| b"t".to_vec()),
                    content_encoding: None,
                    ack: *ack,
                    expiry: *expiry,
                    generation: (step % 3 == 0).then(|| b"g".to_vec()),
                }),
            ),
            Op::Purge(d) => propose(
                wall,
                Some(request(step)),
                DeviceCommand::Purge {
                    device: DEVICES[*d].to_vec(),
                },
            ),
            Op::Forget(d) => propose(
                wall,
                Some(request(step)),
                DeviceCommand::Forget {
                    device: DEVICES[*d].to_vec(),
                },
            ),
            Op::Deliver(d, max) => propose(
                wall,
                None,
                DeviceCommand::Deliver {
                    device: DEVICES[*d].to_vec(),
                    max: *max,
                },
            ),
            Op::Receive(d) => propose(
                wall,
                None,
                DeviceCommand::Receive {
                    device: DEVICES[*d].to_vec(),
                },
            ),
            Op::Undeliver(d, i, recent, own) => {
                let (token, device) = pick_token(&message_tokens, i, *recent, *own, *d);
                propose(
                    wall,
                    None,
                    DeviceCommand::Undeliver {
                        device: DEVICES[device].to_vec(),
                        token,
                    },
                )
            }
            Op::Settle(d, i, recent, own, settlement, deliver) => {
                let (token, device) = pick_token(&message_tokens, i, *recent, *own, *d);
                let device = DEVICES[device].to_vec();
                let settlement = *settlement;
                propose(
                    wall,
                    Some(request(step)),
                    if *deliver {
                        DeviceCommand::SettleAndDeliver {
                            device,
                            token,
                            settlement,
                        }
                    } else {
                        DeviceCommand::Settle {
                            device,
                            token,
                            settlement,
                        }
                    },
                )
            }
            Op::ExpireLocks(max) => propose(wall, None, DeviceCommand::ExpireLocks { max: *max }),
            Op::ExpireMessages(max) => {
                propose(wall, None, DeviceCommand::ExpireMessages { max: *max })
            }
            Op::Cut => propose(wall, None, DeviceCommand::CutFeedbackBatch),
            Op::DeliverFeedback(max) => {
                propose(wall, None, DeviceCommand::DeliverFeedback { max: *max })
            }
            Op::UndeliverFeedback(i) => propose(
                wall,
                None,
                DeviceCommand::UndeliverFeedback {
                    token: pick(&batch_tokens, i).unwrap_or_default(),
                },
            ),
            Op::SettleFeedback(i, settlement) => propose(
                wall,
                Some(request(step)),
                DeviceCommand::SettleFeedback {
                    token: pick(&batch_tokens, i).unwrap_or_default(),
                    settlement: *settlement,
                },
            ),
            Op::ExpireFeedbackLocks(max) => {
                propose(wall, None, DeviceCommand::ExpireFeedbackLocks { max: *max })
            }
            Op::ExpireFeedbackBatches(max) => propose(
                wall,
                None,
                DeviceCommand::ExpireFeedbackBatches { max: *max },
            ),
            Op::Retry(i) => match pick(&requests, i) {
                // The same request again, stamped now.
                Some(old) => Proposal {
                    wall_ms: wall,
                    ..old
                },
                None => continue,
            },
            Op::Impostor(i) => match pick(&requests, i) {
                Some(old) => {
                    let mut mutation = old.mutation.clone();
                    // A message of its own (the model tells messages apart by content).
                    if let Mutation::Device(
                        DeviceCommand::Send(send) | DeviceCommand::SendAndDeliver(send),
                    ) = &mut mutation
                    {
                        send.message_id = format!("m{step}").into_bytes();
                    }
                    Proposal {
                        wall_ms: wall,
                        request: old.request.map(|r| RequestId {
                            digest: r.digest + 1,
                            ..r
                        }),
                        mutation,
                        ..old
                    }
                }
                None => continue,
            },
        };
        if proposal.request.is_some() && !matches!(op, Op::Retry(_)) {
            requests.push(proposal.clone());
        }

        let outcome = apply(&mut map, &mut index, std::slice::from_ref(&proposal))?
            .pop()
            .ok_or_else(|| fail("no outcome"))?;
        proposals.push(proposal.clone());

        // The model.
        model.now = wall;
        let issued = tokens_of(&outcome.result);
        for token in &issued {
            prop_assert!(token.is_ascii() && token.len() <= 64, "token {token:?}");
            prop_assert!(
                seen_tokens.insert(token.clone()),
                "token {token:?} issued twice"
            );
        }
        let mut issued_iter = issued.into_iter();
        let reply_key = proposal
            .request
            .as_ref()
            .map(|r| [r.client.clone(), r.correlation.clone()].concat());
        let remembered = reply_key
            .as_ref()
            .and_then(|key| model.replies.get(key))
            .filter(|(_, until, digest)| {
                wall < *until
                    && proposal
                        .request
                        .as_ref()
                        .is_some_and(|r| r.digest == *digest)
            })
            .map(|(result, _, _)| result.clone());
        let expected = match (&remembered, &proposal.mutation) {
            (Some(result), _) => result.clone(),
            (None, Mutation::Device(command)) => match command {
                DeviceCommand::Send(send) => model.send(send),
                DeviceCommand::Purge { device } => model.purge(device),
                DeviceCommand::Forget { device } => model.forget(device),
                DeviceCommand::Deliver { device, max } => DeviceResult::Delivered {
                    messages: model.deliver(device, *max, false, &mut issued_iter),
                },
                DeviceCommand::Receive { device } => DeviceResult::Received(
                    model
                        .deliver(device, 1, true, &mut issued_iter)
                        .into_iter()
                        .next()
                        .map(Box::new),
                ),
                DeviceCommand::Undeliver { device, token } => model.undeliver(device, token),
                DeviceCommand::Settle {
                    device,
                    token,
                    settlement,
                } => model.settle(device, token, *settlement),
                DeviceCommand::ExpireLocks { max } => model.expire_locks(*max),
                DeviceCommand::ExpireMessages { max } => model.expire_messages(*max),
                DeviceCommand::CutFeedbackBatch => model.cut(),
                DeviceCommand::DeliverFeedback { max } => {
                    model.deliver_feedback(*max, &mut issued_iter)
                }
                DeviceCommand::UndeliverFeedback { token } => model.undeliver_feedback(token),
                DeviceCommand::SettleFeedback { token, settlement } => {
                    model.settle_feedback(token, *settlement)
                }
                DeviceCommand::ExpireFeedbackLocks { max } => model.expire_feedback_locks(*max),
                DeviceCommand::ExpireFeedbackBatches { max } => model.expire_feedback_batches(*max),
                DeviceCommand::SetSettings(_) => DeviceResult::SettingsSet,
                DeviceCommand::SendAndDeliver(send) => match model.send(send) {
                    DeviceResult::Sent { expires_at_ms } => DeviceResult::SentAndDelivered {
                        expires_at_ms,
                        messages: model.deliver(&send.device, u32::MAX, false, &mut issued_iter),
                    },
                    refused => refused,
                },
                DeviceCommand::SettleAndDeliver {
                    device,
                    token,
                    settlement,
                } => match model.settle(device, token, *settlement) {
                    DeviceResult::Settled { settled: true } => DeviceResult::SettledAndDelivered {
                        settled: true,
                        messages: model.deliver(device, u32::MAX, false, &mut issued_iter),
                    },
                    _ => DeviceResult::SettledAndDelivered {
                        settled: false,
                        messages: Vec::new(),
                    },
                },
            },
            (None, other) => return Err(fail(format!("not a device command: {other:?}"))),
        };
        prop_assert_eq!(&outcome.result, &expected, "step {} {:?}", step, op);
        if remembered.is_some() {
            prop_assert_eq!(
                outcome.counters,
                Default::default(),
                "a retry counts nothing"
            );
        } else if let Some(key) = reply_key {
            // A retry gets the reply without the deliveries: they are published once.
            let reply = match expected.clone() {
                DeviceResult::SentAndDelivered { expires_at_ms, .. } => {
                    DeviceResult::Sent { expires_at_ms }
                }
                DeviceResult::SettledAndDelivered { settled, .. } => {
                    DeviceResult::Settled { settled }
                }
                other => other,
            };
            let digest = proposal.request.as_ref().map_or(0, |r| r.digest);
            model.replies.insert(key, (reply, wall + 3_000, digest));
        }
        match &outcome.result {
            DeviceResult::Delivered { messages }
            | DeviceResult::SentAndDelivered { messages, .. }
            | DeviceResult::SettledAndDelivered { messages, .. } => {
                for m in messages {
                    let device = device_index(&m.device);
                    message_tokens.push((m.token.clone(), device));
                    message_tokens.push((forged(&m.token), device));
                }
            }
            DeviceResult::Received(Some(m)) => {
                let device = device_index(&m.device);
                message_tokens.push((m.token.clone(), device));
                message_tokens.push((forged(&m.token), device));
            }
            DeviceResult::FeedbackDelivered { batches } => {
                for b in batches {
                    batch_tokens.push(b.token.clone());
                    batch_tokens.push(forged(&b.token));
                }
            }
            _ => {}
        }
        compare_state(&map, &model, step)?;
    }

    // Determinism: the same proposals on a fresh store, one per transaction and grouped.
    let mut single = Map::new();
    for proposal in &proposals {
        apply_loading(&mut single, std::slice::from_ref(proposal))?;
    }
    prop_assert!(single == map, "replay one by one gives the same bytes");
    let mut grouped = Map::new();
    let mut grouped_index = DeviceIndex::default();
    let mut rest = proposals.as_slice();
    let mut sizes = groups.iter().cycle();
    while !rest.is_empty() {
        let size = (*sizes.next().unwrap_or(&1)).clamp(1, rest.len());
        let (chunk, tail) = rest.split_at(size);
        apply(&mut grouped, &mut grouped_index, chunk)?;
        rest = tail;
    }
    prop_assert!(
        grouped == map,
        "replay in transactions of several entries gives the same bytes"
    );
    let on_store = replay_on_store(&proposals, groups)?;
    prop_assert!(
        on_store == map,
        "replay on the store, through a memtable that freezes often, gives the same bytes"
    );
    Ok(())
}

/// Applies `proposals` in transactions of the sizes `groups` cycles through, on a fjall-backed
/// store whose memtable freezes every 4 KiB (several transactions a map), with the store's own kept
/// index as the consensus layer uses it; checks that index against one rebuilt from the rows
/// (and against the reopened store's), and returns every row below the consensus records once
/// all of it is in fjall.
fn replay_on_store(proposals: &[Proposal], groups: &[usize]) -> Result<Map, TestCaseError> {
    let dir = tempfile::tempdir().map_err(fail)?;
    let mut config = StoreConfig::new(dir.path(), 1 << 20);
    config.memtable.flush_bytes = 4096;
    let rows = {
        let store = Store::open(&config).map_err(fail)?;
        let state = store.state().map_err(fail)?;
        let devices = state.device_index();
        let mut rest = proposals;
        let mut sizes = groups.iter().cycle();
        while !rest.is_empty() {
            let size = (*sizes.next().unwrap_or(&1)).clamp(1, rest.len());
            let (chunk, tail) = rest.split_at(size);
            let view = state.view();
            let mut txn = Overlay::new(&view);
            let mut index = devices.lock().map_err(fail)?;
            let mut machine =
                Machine::open_with_index(&mut txn, &Carry::default(), &mut index).map_err(fail)?;
            for proposal in chunk {
                machine.apply(proposal).map_err(fail)?;
            }
            machine.finish();
            state.commit(txn.into_txn_writes()).map_err(fail)?;
            rest = tail;
        }
        state.flush_memtable();
        let kept = devices.lock().map_err(fail)?.clone();
        prop_assert!(
            kept == DeviceIndex::load(&state.view()).map_err(fail)?,
            "the store's kept index is the index of its rows"
        );
        let consensus = layout::consensus_key(b"");
        let rows = state
            .view()
            .range(&[], &consensus)
            .collect::<Result<Map, _>>()
            .map_err(fail)?;
        // A clean stop: the reopen reads fjall's state back (an unclean one rebuilds it).
        store.close_clean().map_err(fail)?;
        prop_assert!(
            kept == *state.view().device_index(),
            "the view shows the kept index"
        );
        (rows, kept)
    };
    let reopened = Store::open(&config).map_err(fail)?;
    let state = reopened.state().map_err(fail)?;
    prop_assert!(
        *state.view().device_index() == rows.1,
        "a reopened store rebuilds the same index"
    );
    Ok(rows.0)
}

fn compare_state(map: &Map, model: &Model, step: usize) -> Result<(), TestCaseError> {
    for device in DEVICES {
        let stats = DeviceIndex::load(map).map_err(fail)?.queue_stats(device);
        prop_assert_eq!(
            stats,
            model.stats(device),
            "step {} stats of {:?}",
            step,
            device
        );
        let letters: Vec<_> = devicebound::read::dead_letters(map, device, usize::MAX)
            .map_err(fail)?
            .into_iter()
            .map(|l| (l.message.message_id, l.reason, l.time_ms))
            .collect();
        let expected: Vec<_> = model
            .devices
            .get(device)
            .map(|d| d.dead.iter().cloned().collect())
            .unwrap_or_default();
        prop_assert_eq!(
            letters,
            expected,
            "step {} dead letters of {:?}",
            step,
            device
        );
    }
    let pending = devicebound::read::pending_feedback(map, usize::MAX).map_err(fail)?;
    let expected: Vec<_> = model.pending.iter().cloned().collect();
    prop_assert_eq!(pending, expected, "step {} pending feedback", step);
    let batches: Vec<_> = devicebound::read::feedback_batches(map, usize::MAX)
        .map_err(fail)?
        .into_iter()
        .map(|(_, b)| {
            let lock = b.lock.map(|l| (l.token, l.expires_at_ms));
            (b.records, b.cut_ms, b.expires_at_ms, b.delivery_count, lock)
        })
        .collect();
    let expected: Vec<_> = model
        .batches
        .iter()
        .map(|b| (b.records.clone(), b.cut, b.expires, b.count, b.lock.clone()))
        .collect();
    prop_assert_eq!(batches, expected, "step {} feedback batches", step);
    let meta = devicebound::read::meta(map).map_err(fail)?;
    let with_state = DEVICES.iter().filter(|d| model.has_state(d)).count() as u64;
    prop_assert_eq!(meta.devices, with_state, "step {} devices with state", step);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Invariant: see the module docs.
    #[test]
    fn devicebound_matches_a_simple_model(
        ops in prop::collection::vec(op(), 1..=250),
        settings in 0usize..2,
        groups in prop::collection::vec(1usize..40, 1..8),
    ) {
        run(&ops, settings_options()[settings], &groups)?;
    }
}
