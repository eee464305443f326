//! [`DeviceIndex`]: the device queues' delivery state and due instants, typed and in memory.
//!
//! The rows stay the truth (a [`DeviceState`] row per device with state, a [`StoredMessage`]
//! row per queued message; snapshots and restarts read them), and every transaction still
//! writes what it changes. What used to be four more index tables (Enqueued by time,
//! deliverable devices, due locks, due expiries), each written and removed again per message,
//! and the reads of a device row and a message row per settlement, now live here: apply asks
//! the index what is queued, locked, due or deliverable, and reads a message row only when it
//! needs the message's content (to publish, dead-letter, requeue or report it).
//!
//! The index is derived state: [`DeviceIndex::load`] rebuilds it from the rows (at start, after
//! a snapshot is installed, after a failed transaction), and it must equal that rebuild after
//! every committed transaction; the model test checks exactly that. Every entry is bounded by
//! the replicated caps: one [`IndexedDevice`] per device with state (`max_devices`) and one
//! [`QueuedMessage`] per queued message (`max_messages`).

use std::collections::btree_map::{self, BTreeMap};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::codec;
use crate::devicebound::command::Ack;
use crate::devicebound::layout::{self, DeviceTable};
use crate::devicebound::read::{DeliverableDevice, QueueStats};
use crate::devicebound::record::{DeviceState, LockState, StoredMessage};
use crate::engine::OrderedRead;
use crate::error::{Result, StorageError};

/// A device id as the index holds it (shared by the device map and the ordered sets).
pub type DeviceId = Arc<[u8]>;

/// A due-time entry: (instant, device, queue place).
type Due = (u64, DeviceId, u64);

/// Upper bounds of the queue-depth classes [`DeviceIndex::depth_distribution`] counts devices
/// in (the last class holds every deeper queue; `max_queue_depth` is at most 5,000).
pub const DEPTH_CLASSES: [u64; 8] = [1, 5, 10, 25, 50, 100, 1_000, u64::MAX];

/// The class of a queue holding `depth` messages (`None`: empty).
fn depth_class(depth: u64) -> Option<usize> {
    if depth == 0 {
        return None;
    }
    DEPTH_CLASSES.iter().position(|&bound| depth <= bound)
}

/// Bytes an index entry is accounted at beyond its device id (map nodes, the due-set entries).
const MESSAGE_BYTES: u64 = 152;
/// Bytes a device entry is accounted at beyond its id.
const DEVICE_BYTES: u64 = 160;
/// Bytes a lock adds to its message's entry (the token and the due-set entry).
const LOCK_BYTES: u64 = 112;

/// What the index keeps of a queued message: what apply decides by, without its content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedMessage {
    /// Time of the SEND entry.
    pub enqueued_ms: u64,
    /// Expiry instant.
    pub expires_at_ms: u64,
    /// Which outcomes produce feedback.
    pub ack: Ack,
    /// Enqueued → Invisible transitions so far.
    pub delivery_count: u32,
    /// `None`: Enqueued. `Some`: Invisible, locked.
    pub lock: Option<LockState>,
}

impl QueuedMessage {
    /// What the index keeps of a message row.
    pub fn of(stored: &StoredMessage) -> Self {
        QueuedMessage {
            enqueued_ms: stored.message.enqueued_ms,
            expires_at_ms: stored.message.expires_at_ms,
            ack: stored.message.ack,
            delivery_count: stored.delivery_count,
            lock: stored.lock.clone(),
        }
    }
}

/// A device with state: the counters of its row and its queue in order.
#[derive(Debug, Clone)]
pub struct IndexedDevice {
    state: DeviceState,
    queue: BTreeMap<u64, QueuedMessage>,
    /// Its row exists in the store (as of the last [`DeviceIndex::save`]).
    stored: bool,
    /// Changed since the last [`DeviceIndex::save`]: its row must be written.
    dirty: bool,
}

impl IndexedDevice {
    /// Counters and sequence numbers, as its row holds them.
    pub fn state(&self) -> &DeviceState {
        &self.state
    }

    /// The queued messages by place (queue order).
    pub fn queue(&self) -> btree_map::Iter<'_, u64, QueuedMessage> {
        self.queue.iter()
    }

    /// The message at `seq`.
    pub fn message(&self, seq: u64) -> Option<&QueuedMessage> {
        self.queue.get(&seq)
    }
}

/// What a device's row must become ([`DeviceIndex::save`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SavedDevice {
    /// Write this row; `created`: there was none.
    Put {
        /// The row.
        state: DeviceState,
        /// No row existed before.
        created: bool,
    },
    /// The device has no state left: remove its row (`existed`: there was one).
    Remove {
        /// A row existed.
        existed: bool,
    },
}

/// The device queues' index (see the module doc).
#[derive(Debug, Clone, Default)]
pub struct DeviceIndex {
    devices: HashMap<DeviceId, IndexedDevice>,
    /// Invisible messages by lock expiry.
    lock_due: BTreeSet<Due>,
    /// Every queued message by expiry.
    expiry_due: BTreeSet<Due>,
    /// Devices with an Enqueued message, by their Invisible count.
    deliverable: BTreeSet<(u32, DeviceId)>,
    messages: u64,
    id_bytes: u64,
    /// Devices by the class of their queue's depth ([`DEPTH_CLASSES`]).
    depths: [u64; DEPTH_CLASSES.len()],
}

/// Equal entries index the same state; whether a row still has to be written is not state.
impl PartialEq for IndexedDevice {
    fn eq(&self, other: &Self) -> bool {
        self.state == other.state && self.queue == other.queue && self.stored == other.stored
    }
}

impl Eq for IndexedDevice {}

/// Equal when they index the same state (the accounting follows from it).
impl PartialEq for DeviceIndex {
    fn eq(&self, other: &Self) -> bool {
        self.devices == other.devices
            && self.lock_due == other.lock_due
            && self.expiry_due == other.expiry_due
            && self.deliverable == other.deliverable
            && self.messages == other.messages
            && self.depths == other.depths
    }
}

impl Eq for DeviceIndex {}

fn corrupt(what: &'static str, reason: impl Into<String>) -> StorageError {
    StorageError::Corrupt {
        what,
        reason: reason.into(),
    }
}

impl DeviceIndex {
    /// The index of the state `view` holds: every device row and every message row. A device
    /// row whose counters disagree with its queued messages is reported as corrupt.
    pub fn load(view: &(impl OrderedRead + ?Sized)) -> Result<DeviceIndex> {
        let mut index = DeviceIndex::default();
        // The counters each row claims (Enqueued, Invisible): rebuilt below from the messages,
        // then compared.
        let mut claimed: HashMap<DeviceId, (u32, u32)> = HashMap::new();
        let (start, end) = DeviceTable::Devices.bounds();
        for entry in view.range(&start, &end) {
            let (key, value) = entry?;
            let device = layout::device_of_key(&key)
                .ok_or_else(|| corrupt("device row key", format!("{key:?}")))?;
            let row: DeviceState = codec::decode("device row", &value)?;
            let id: DeviceId = Arc::from(device);
            claimed.insert(id.clone(), (row.enqueued, row.invisible));
            index.id_bytes += id.len() as u64;
            index.devices.insert(
                id,
                IndexedDevice {
                    state: DeviceState {
                        enqueued: 0,
                        invisible: 0,
                        ..row
                    },
                    queue: BTreeMap::new(),
                    stored: true,
                    dirty: false,
                },
            );
        }
        let (start, end) = DeviceTable::Messages.bounds();
        for entry in view.range(&start, &end) {
            let (key, value) = entry?;
            let (device, seq) = layout::split_message_key(&key)
                .ok_or_else(|| corrupt("device message key", format!("{key:?}")))?;
            let stored: StoredMessage = codec::decode("device message", &value)?;
            let id = index.id(device).ok_or_else(|| {
                corrupt("device message", "a queued message without its device row")
            })?;
            index.insert(&id, seq, QueuedMessage::of(&stored))?;
        }
        for (id, claimed) in &claimed {
            let entry = index.devices.get_mut(id);
            let counted = entry
                .as_ref()
                .map(|e| (e.state.enqueued, e.state.invisible));
            if counted != Some(*claimed) {
                return Err(corrupt(
                    "device row",
                    format!("{id:?}: its counters disagree with its queued messages"),
                ));
            }
            if let Some(entry) = entry {
                entry.dirty = false;
            }
        }
        Ok(index)
    }

    /// The device's entry, if it has state.
    pub fn device(&self, device: &[u8]) -> Option<&IndexedDevice> {
        self.devices.get(device)
    }

    /// The index's own handle on a device id (shared, no copy).
    pub fn id(&self, device: &[u8]) -> Option<DeviceId> {
        self.devices.get_key_value(device).map(|(id, _)| id.clone())
    }

    /// The device's entry, created empty (fresh counters, no row yet) if it has none.
    pub fn ensure(&mut self, device: &[u8]) -> DeviceId {
        if let Some(id) = self.id(device) {
            return id;
        }
        let id: DeviceId = Arc::from(device);
        self.id_bytes += id.len() as u64;
        self.devices.insert(
            id.clone(),
            IndexedDevice {
                state: DeviceState::new(),
                queue: BTreeMap::new(),
                stored: false,
                dirty: true,
            },
        );
        id
    }

    /// Devices with state.
    pub fn devices(&self) -> usize {
        self.devices.len()
    }

    /// Messages queued in all queues.
    pub fn messages(&self) -> u64 {
        self.messages
    }

    /// Devices with a non-empty queue, by the class of its depth: `n[i]` queues hold at most
    /// [`DEPTH_CLASSES`]`[i]` messages and more than the class before allows.
    pub fn depth_distribution(&self) -> [u64; DEPTH_CLASSES.len()] {
        self.depths
    }

    /// What the index holds in memory, estimated from its entries.
    pub fn approximate_bytes(&self) -> u64 {
        let devices = self.devices.len() as u64;
        let locks = self.lock_due.len() as u64;
        devices * DEVICE_BYTES + self.messages * MESSAGE_BYTES + locks * LOCK_BYTES + self.id_bytes
    }

    /// The device's entry, to change (it is marked for a row write).
    fn entry(&mut self, device: &[u8]) -> Result<&mut IndexedDevice> {
        let entry = self
            .devices
            .get_mut(device)
            .ok_or_else(|| corrupt("device index", "a change to a device without state"))?;
        entry.dirty = true;
        Ok(entry)
    }

    /// Moves the device's entries in the deliverable set and the depth classes from its
    /// counters `before` (Enqueued, Invisible) to its counters now.
    fn reindex_deliverable(&mut self, id: &DeviceId, before: (u32, u32)) {
        let Some(entry) = self.devices.get(&id[..]) else {
            return;
        };
        let now = (entry.state.enqueued, entry.state.invisible);
        if now == before {
            return;
        }
        if before.0 > 0 {
            self.deliverable.remove(&(before.1, id.clone()));
        }
        if now.0 > 0 {
            self.deliverable.insert((now.1, id.clone()));
        }
        let depth = |(enqueued, invisible): (u32, u32)| u64::from(enqueued) + u64::from(invisible);
        let (was, is) = (depth_class(depth(before)), depth_class(depth(now)));
        if was != is {
            if let Some(class) = was {
                self.depths[class] = self.depths[class].saturating_sub(1);
            }
            if let Some(class) = is {
                self.depths[class] += 1;
            }
        }
    }

    /// Queues `message` at `seq` of the device `id` (which [`DeviceIndex::ensure`] made); the
    /// place must be free.
    pub fn insert(&mut self, id: &DeviceId, seq: u64, message: QueuedMessage) -> Result<()> {
        let entry = self.entry(id)?;
        if entry.queue.contains_key(&seq) {
            return Err(corrupt(
                "device index",
                format!("queue place {seq} is taken"),
            ));
        }
        let before = (entry.state.enqueued, entry.state.invisible);
        match &message.lock {
            Some(_) => entry.state.invisible = entry.state.invisible.saturating_add(1),
            None => entry.state.enqueued = entry.state.enqueued.saturating_add(1),
        }
        let lock_due = message.lock.as_ref().map(|lock| lock.expires_at_ms);
        let expires_at_ms = message.expires_at_ms;
        entry.queue.insert(seq, message);
        if let Some(at) = lock_due {
            self.lock_due.insert((at, id.clone(), seq));
        }
        self.expiry_due.insert((expires_at_ms, id.clone(), seq));
        self.messages += 1;
        self.reindex_deliverable(id, before);
        Ok(())
    }

    /// Takes the message at `seq` out of the device's queue.
    pub fn remove(&mut self, device: &[u8], seq: u64) -> Result<QueuedMessage> {
        let entry = self.entry(device)?;
        let before = (entry.state.enqueued, entry.state.invisible);
        let message = entry
            .queue
            .remove(&seq)
            .ok_or_else(|| corrupt("device index", format!("no message at place {seq}")))?;
        match &message.lock {
            Some(_) => entry.state.invisible = entry.state.invisible.saturating_sub(1),
            None => entry.state.enqueued = entry.state.enqueued.saturating_sub(1),
        }
        let id = self.id(device).unwrap_or_else(|| Arc::from(device));
        if let Some(lock) = &message.lock {
            self.lock_due.remove(&(lock.expires_at_ms, id.clone(), seq));
        }
        self.expiry_due
            .remove(&(message.expires_at_ms, id.clone(), seq));
        self.messages = self.messages.saturating_sub(1);
        self.reindex_deliverable(&id, before);
        Ok(message)
    }

    /// Gives the message at `seq` a new delivery state (locked or not, and its count).
    pub fn restate(
        &mut self,
        device: &[u8],
        seq: u64,
        lock: Option<LockState>,
        delivery_count: u32,
    ) -> Result<()> {
        let id = self
            .id(device)
            .ok_or_else(|| corrupt("device index", "a change to a device without state"))?;
        let entry = self.entry(device)?;
        let before = (entry.state.enqueued, entry.state.invisible);
        let message = entry
            .queue
            .get_mut(&seq)
            .ok_or_else(|| corrupt("device index", format!("no message at place {seq}")))?;
        let old = std::mem::replace(&mut message.lock, lock);
        message.delivery_count = delivery_count;
        let new = message.lock.clone();
        match (&old, &new) {
            (None, Some(_)) => {
                entry.state.enqueued = entry.state.enqueued.saturating_sub(1);
                entry.state.invisible = entry.state.invisible.saturating_add(1);
            }
            (Some(_), None) => {
                entry.state.invisible = entry.state.invisible.saturating_sub(1);
                entry.state.enqueued = entry.state.enqueued.saturating_add(1);
            }
            _ => {}
        }
        if let Some(lock) = old {
            self.lock_due.remove(&(lock.expires_at_ms, id.clone(), seq));
        }
        if let Some(lock) = new {
            self.lock_due.insert((lock.expires_at_ms, id.clone(), seq));
        }
        self.reindex_deliverable(&id, before);
        Ok(())
    }

    /// The place the device's next SENT message gets (its tail); counts it taken.
    pub fn take_tail_seq(&mut self, device: &[u8]) -> Result<u64> {
        let state = &mut self.entry(device)?.state;
        let seq = state.next_tail_seq;
        state.next_tail_seq = seq.saturating_add(1);
        Ok(seq)
    }

    /// Counts a dead letter added to the device; returns its sequence number.
    pub fn add_dead_letter(&mut self, device: &[u8]) -> Result<u64> {
        let state = &mut self.entry(device)?.state;
        let seq = state.next_dead_letter_seq;
        state.next_dead_letter_seq = seq.saturating_add(1);
        state.dead_letters = state.dead_letters.saturating_add(1);
        Ok(seq)
    }

    /// Counts `n` dead letters of the device dropped.
    pub fn drop_dead_letters(&mut self, device: &[u8], n: u32) -> Result<()> {
        let state = &mut self.entry(device)?.state;
        state.dead_letters = state.dead_letters.saturating_sub(n);
        Ok(())
    }

    /// What the device's row must become after the changes made to it since the last save
    /// (`None`: nothing changed); a device left without state leaves the index.
    pub fn save(&mut self, device: &[u8]) -> Option<SavedDevice> {
        let entry = self.devices.get_mut(device)?;
        if !entry.dirty {
            return None;
        }
        entry.dirty = false;
        let existed = entry.stored;
        if entry.state.is_empty() {
            if let Some((id, _)) = self.devices.remove_entry(device) {
                self.id_bytes = self.id_bytes.saturating_sub(id.len() as u64);
            }
            return Some(SavedDevice::Remove { existed });
        }
        entry.stored = true;
        Some(SavedDevice::Put {
            state: entry.state.clone(),
            created: !existed,
        })
    }

    /// Up to `max` Invisible messages whose lock runs out at or before `time`, earliest first.
    pub fn due_locks(&self, time: u64, max: usize) -> Vec<(DeviceId, u64)> {
        due(&self.lock_due, time, max)
    }

    /// Up to `max` queued messages that expire at or before `time`, earliest first.
    pub fn due_expiries(&self, time: u64, max: usize) -> Vec<(DeviceId, u64)> {
        due(&self.expiry_due, time, max)
    }

    /// When the earliest message lock runs out (an `ExpireLocks` sweep is due from then on).
    pub fn next_lock_expiry(&self) -> Option<u64> {
        self.lock_due.first().map(|(at, _, _)| *at)
    }

    /// When the earliest queued message expires (an `ExpireMessages` sweep is due from then
    /// on).
    pub fn next_message_expiry(&self) -> Option<u64> {
        self.expiry_due.first().map(|(at, _, _)| *at)
    }

    /// Up to `limit` devices with an Enqueued message and fewer than `window` Invisible ones,
    /// fewest Invisible first, then by device id; after `after` (the last one of a previous
    /// page) if given.
    pub fn deliverable_devices(
        &self,
        window: u32,
        after: Option<&DeliverableDevice>,
        limit: usize,
    ) -> Vec<DeliverableDevice> {
        let start = after.map(|last| (last.invisible, Arc::<[u8]>::from(&last.device[..])));
        let from = match &start {
            Some(key) => std::ops::Bound::Excluded(key),
            None => std::ops::Bound::Unbounded,
        };
        self.deliverable
            .range((from, std::ops::Bound::Unbounded))
            .take_while(|(invisible, _)| *invisible < window)
            .take(limit)
            .map(|(invisible, device)| DeliverableDevice {
                invisible: *invisible,
                device: device.to_vec(),
            })
            .collect()
    }

    /// QUEUE (spec §2): the device's counters and its oldest Enqueued message's time.
    pub fn queue_stats(&self, device: &[u8]) -> QueueStats {
        let Some(entry) = self.devices.get(device) else {
            return QueueStats::default();
        };
        QueueStats {
            enqueued: entry.state.enqueued,
            invisible: entry.state.invisible,
            dead_lettered: entry.state.dead_letters,
            oldest_enqueued_ms: entry
                .queue
                .values()
                .filter(|m| m.lock.is_none())
                .map(|m| m.enqueued_ms)
                .min(),
        }
    }
}

fn due(set: &BTreeSet<Due>, time: u64, max: usize) -> Vec<(DeviceId, u64)> {
    set.iter()
        .take_while(|(at, _, _)| *at <= time)
        .take(max)
        .map(|(_, device, seq)| (device.clone(), *seq))
        .collect()
}
