//! Records stored in the device-bound tables (see [`crate::devicebound::layout`]), all encoded
//! with [`crate::codec`].

use serde::{Deserialize, Serialize};

use crate::devicebound::command::Ack;
use crate::devicebound::settings::DeviceboundSettings;
pub use statestore_vocab::devicebound::{DeadLetterReason, FeedbackStatus};

/// A message as the sender made it, plus the times apply gave it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Message id set by the sender.
    #[serde(with = "serde_bytes")]
    pub message_id: Vec<u8>,
    /// Body.
    #[serde(with = "serde_bytes")]
    pub body: Vec<u8>,
    /// Application properties, in request order.
    pub properties: Vec<(String, String)>,
    /// Content type, if set.
    pub content_type: Option<Vec<u8>>,
    /// Content encoding, if set.
    pub content_encoding: Option<Vec<u8>>,
    /// Which outcomes produce feedback.
    pub ack: Ack,
    /// Device generation id reported in feedback.
    pub generation: Option<Vec<u8>>,
    /// Expiry instant (ms since the epoch).
    pub expires_at_ms: u64,
    /// Time of the SEND entry.
    pub enqueued_ms: u64,
}

/// A message in a device's queue (its row).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredMessage {
    /// The message.
    pub message: Message,
    /// Enqueued → Invisible transitions so far.
    pub delivery_count: u32,
    /// `None`: Enqueued. `Some`: Invisible, locked.
    pub lock: Option<LockState>,
}

/// The lock of an Invisible message or feedback batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockState {
    /// Opaque ASCII token of this delivery (never issued twice).
    pub token: String,
    /// The lock holds while the store time is below this instant.
    pub expires_at_ms: u64,
}

/// Per-device counters and sequence numbers (one row per device with state).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceState {
    /// Messages Enqueued.
    pub enqueued: u32,
    /// Messages Invisible (locked).
    pub invisible: u32,
    /// Dead letters kept.
    pub dead_letters: u32,
    /// Sequence number the next SENT message gets (the queue's tail).
    pub next_tail_seq: u64,
    /// Sequence number of the next dead letter.
    pub next_dead_letter_seq: u64,
}

impl DeviceState {
    /// A device without state: queue sequence numbers start in the middle of the u64 range
    /// so abandoned messages can be put in front of the head (lower numbers) for as long as
    /// messages can be appended at the tail.
    pub fn new() -> Self {
        DeviceState {
            next_tail_seq: FIRST_TAIL_SEQ,
            ..DeviceState::default()
        }
    }

    /// Messages in the queue (what `max_queue_depth` caps).
    pub fn depth(&self) -> u64 {
        u64::from(self.enqueued) + u64::from(self.invisible)
    }

    /// Nothing left: the row goes away.
    pub fn is_empty(&self) -> bool {
        self.enqueued == 0 && self.invisible == 0 && self.dead_letters == 0
    }
}

/// First tail sequence number of a device queue.
pub const FIRST_TAIL_SEQ: u64 = 1 << 63;

/// A dead-lettered message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// The message.
    pub message: Message,
    /// Its delivery count when it died.
    pub delivery_count: u32,
    /// Why.
    pub reason: DeadLetterReason,
    /// When (the entry's time).
    pub time_ms: u64,
}

/// One feedback record (spec §4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedbackRecord {
    /// `originalMessageId`.
    #[serde(with = "serde_bytes")]
    pub original_message_id: Vec<u8>,
    /// `enqueuedTimeUtc`: when the outcome happened (entry time, ms).
    pub time_ms: u64,
    /// `statusCode`.
    pub status: FeedbackStatus,
    /// `deviceId`.
    #[serde(with = "serde_bytes")]
    pub device: Vec<u8>,
    /// `deviceGenerationId`.
    pub generation: Option<Vec<u8>>,
}

/// A batch of feedback records: itself a queue entry with a lock, a delivery count and a TTL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedbackBatch {
    /// The records, oldest first (at most 64).
    pub records: Vec<FeedbackRecord>,
    /// When it was cut (`iothub-enqueuedtime`).
    pub cut_ms: u64,
    /// Dropped from this instant on.
    pub expires_at_ms: u64,
    /// Deliveries so far.
    pub delivery_count: u32,
    /// `None`: Enqueued. `Some`: Invisible.
    pub lock: Option<LockState>,
}

/// Store-wide device-bound state (one record in the meta table).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceboundMeta {
    /// Settings in force.
    pub settings: DeviceboundSettings,
    /// Devices with a row (a message or a dead letter).
    pub devices: u64,
    /// Messages in all queues.
    pub messages: u64,
    /// Dead letters of all devices.
    pub dead_letters: u64,
    /// Lock tokens issued so far (messages and batches): a batch token carries its count, and
    /// the count before an entry's first token picks the stream of its secrets.
    pub tokens_issued: u64,
    /// Sequence number of the next feedback record.
    pub next_feedback_seq: u64,
    /// Feedback records waiting to be cut.
    pub pending_feedback: u64,
    /// Sequence number of the next feedback batch.
    pub next_batch_seq: u64,
    /// Feedback batches stored.
    pub feedback_batches: u64,
    /// Time of the last batch cut (0: never).
    pub last_cut_ms: u64,
    /// Dead letters dropped to stay within `max_dead_letters_per_device`, since the store began.
    pub dead_letters_dropped: u64,
    /// Waiting feedback records dropped to stay within `max_pending_feedback_records`.
    pub feedback_records_dropped: u64,
    /// Feedback batches dropped (TTL, delivery count, batch cap), since the store began.
    pub feedback_batches_dropped: u64,
}
