//! What applying a [`crate::devicebound::DeviceCommand`] produced: the reply-level
//! [`DeviceResult`] (the same on every replica) and the [`DeviceCounters`] the node turns into
//! metrics.

use serde::{Deserialize, Serialize};

use crate::devicebound::record::{FeedbackRecord, Message};

/// Result of one device command plus what it changed, for metrics.
///
/// The reply memory remembers the outcome with zero counters: a retried request that gets the
/// remembered outcome changed nothing, so nothing is counted twice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceOutcome {
    /// The reply-level result.
    pub result: DeviceResult,
    /// Transitions this command made.
    pub counters: DeviceCounters,
}

/// Reply-level result of a device command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeviceResult {
    /// SEND enqueued the message (`+OK`).
    Sent {
        /// The message's expiry instant.
        expires_at_ms: u64,
    },
    /// Refused by a rule decided at apply.
    Rejected(DeviceRejection),
    /// PURGE (`:<messages>`).
    Purged {
        /// Messages removed.
        messages: u32,
    },
    /// FORGET (`:<messages + dead_letters>`).
    Forgot {
        /// Queue messages removed.
        messages: u32,
        /// Dead letters removed.
        dead_letters: u32,
        /// Feedback records not yet cut into a batch removed.
        feedback_records: u32,
    },
    /// Deliver: the messages now Invisible, in queue order, to publish.
    Delivered {
        /// The deliveries.
        messages: Vec<MessageDelivery>,
    },
    /// Receive: the message now Invisible, or none (204).
    Received(Option<Box<MessageDelivery>>),
    /// Undeliver / UndeliverFeedback: whether the token still held the lock.
    Undelivered {
        /// True if it was Enqueued again.
        restored: bool,
    },
    /// Settle / SettleFeedback (`:1` / `:0`).
    Settled {
        /// True if the token held the lock and the settlement took effect.
        settled: bool,
    },
    /// ExpireLocks / ExpireFeedbackLocks.
    LocksExpired {
        /// Messages (or batches) Enqueued again.
        count: u32,
    },
    /// ExpireMessages / ExpireFeedbackBatches.
    Expired {
        /// Messages dead-lettered (or batches dropped).
        count: u32,
    },
    /// CutFeedbackBatch.
    FeedbackCut {
        /// Records in the new batch (0: no batch was due).
        records: u32,
    },
    /// DeliverFeedback: the batches now Invisible, to publish.
    FeedbackDelivered {
        /// The deliveries.
        batches: Vec<FeedbackDelivery>,
    },
    /// New settings are in force.
    SettingsSet,
    /// SendAndDeliver enqueued the message (`+OK`) and locked these for delivery.
    SentAndDelivered {
        /// The message's expiry instant.
        expires_at_ms: u64,
        /// The deliveries to publish, in queue order (perhaps none: window full).
        messages: Vec<MessageDelivery>,
    },
    /// SettleAndDeliver (`:1` / `:0`) and the deliveries it locked after a settlement.
    SettledAndDelivered {
        /// True if the token held the lock and the settlement took effect.
        settled: bool,
        /// The deliveries to publish, in queue order (none unless settled).
        messages: Vec<MessageDelivery>,
    },
}

impl DeviceResult {
    /// The result without its deliveries, as the reply memory keeps it: a retried request
    /// gets its reply, never a second publish of the deliveries (they went out once, after the
    /// first commit; the bodies would only weigh on the reply memory).
    pub fn without_deliveries(&self) -> Option<DeviceResult> {
        match self {
            DeviceResult::SentAndDelivered { expires_at_ms, .. } => Some(DeviceResult::Sent {
                expires_at_ms: *expires_at_ms,
            }),
            DeviceResult::SettledAndDelivered { settled, .. } => {
                Some(DeviceResult::Settled { settled: *settled })
            }
            _ => None,
        }
    }

    /// The deliveries a push-side command locked (to publish after commit).
    pub fn deliveries(self) -> Vec<MessageDelivery> {
        match self {
            DeviceResult::Delivered { messages }
            | DeviceResult::SentAndDelivered { messages, .. }
            | DeviceResult::SettledAndDelivered { messages, .. } => messages,
            _ => Vec::new(),
        }
    }
}

/// Apply-time refusals of a SEND.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DeviceRejection {
    /// The queue holds `max_queue_depth` messages (`device queue is full`).
    QueueFull,
    /// The body is over `max_message_bytes` (`message too large`).
    MessageTooLarge,
    /// The device has no state and `max_devices` devices have some (`the quota has been
    /// exceeded`).
    TooManyDevices,
    /// `max_messages` messages are queued in the whole store (`the quota has been exceeded`).
    TooManyMessages,
}

/// A message locked for one delivery: everything the node needs to publish it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageDelivery {
    /// Device id.
    #[serde(with = "serde_bytes")]
    pub device: Vec<u8>,
    /// Lock token (`$.lt`).
    pub token: String,
    /// The lock holds until this instant.
    pub lock_expires_at_ms: u64,
    /// Delivery count including this delivery.
    pub delivery_count: u32,
    /// The message (expiry for `$.exp` and the Message Expiry Interval).
    pub message: Message,
}

/// A feedback batch locked for one delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedbackDelivery {
    /// Lock token (`$.lt`).
    pub token: String,
    /// When the batch was cut (`iothub-enqueuedtime`).
    pub cut_ms: u64,
    /// The lock holds until this instant.
    pub lock_expires_at_ms: u64,
    /// The batch expires at this instant (Message Expiry Interval).
    pub expires_at_ms: u64,
    /// Delivery count including this delivery.
    pub delivery_count: u32,
    /// The records (the JSON array's elements).
    pub records: Vec<FeedbackRecord>,
}

/// Transitions made by one command, for the node's metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceCounters {
    /// Messages enqueued by SEND.
    pub enqueued: u32,
    /// Messages locked for a delivery (Deliver, Receive).
    pub delivered: u32,
    /// Deliveries given back (Undeliver).
    pub undelivered: u32,
    /// Messages completed.
    pub completed: u32,
    /// Messages abandoned.
    pub abandoned: u32,
    /// Messages rejected (dead-lettered `Rejected`).
    pub rejected: u32,
    /// Messages dead-lettered because they expired.
    pub expired: u32,
    /// Messages dead-lettered for any reason (rejected + expired + delivery count exceeded).
    pub dead_lettered: u32,
    /// Dead letters dropped to stay within the per-device cap.
    pub dead_letters_dropped: u32,
    /// Messages removed by PURGE.
    pub purged: u32,
    /// Messages and dead letters removed by FORGET.
    pub forgotten: u32,
    /// Message locks that expired (messages Enqueued again).
    pub lock_expiries: u32,
    /// Feedback records written.
    pub feedback_records: u32,
    /// Waiting feedback records dropped (cap, FORGET).
    pub feedback_records_dropped: u32,
    /// Feedback batches cut.
    pub feedback_batches_cut: u32,
    /// Feedback batches locked for a delivery.
    pub feedback_batches_delivered: u32,
    /// Feedback batch deliveries given back (UndeliverFeedback).
    pub feedback_batches_undelivered: u32,
    /// Feedback batches completed or abandoned by the service.
    pub feedback_batches_settled: u32,
    /// Feedback batch locks that expired (the batch is published again).
    pub feedback_batches_redelivered: u32,
    /// Feedback batches dropped (TTL, delivery count, batch cap).
    pub feedback_batches_dropped: u32,
}
