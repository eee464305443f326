//! Words of the device-bound queues (`shared/spec/devicebound.md`) shared by the node, which
//! parses requests and writes replies, and the storage layer, which applies and stores them.
//! [`Expiry`], [`FeedbackSettlement`], [`DeadLetterReason`] and [`FeedbackStatus`] are part of
//! the replicated encoding (commands in the log, dead letters and feedback records on disk).

use serde::{Deserialize, Serialize};

/// When a SENT message expires. Whatever is asked, at most two days after enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Expiry {
    /// `TTL ms`: this long after the entry's time.
    Ttl(u64),
    /// `EXPIRES unix-ms`: at this instant.
    At(u64),
    /// `default_ttl_ms` after the entry's time.
    Default,
}

/// Which outcomes of a message produce feedback records (spec §4; IoT Hub's `iothub-ack`): the
/// `ACK` option of a SEND. Part of the replicated encoding (variants only ever appended).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Ack {
    /// No feedback (the default, as in IoT Hub).
    #[default]
    None,
    /// `Success` on completion.
    Positive,
    /// `Expired`, `DeliveryCountExceeded`, `Rejected`, `Purged`.
    Negative,
    /// Both.
    Full,
}

impl Ack {
    /// Every mode, in wire order.
    pub const ALL: [Ack; 4] = [Ack::None, Ack::Positive, Ack::Negative, Ack::Full];

    /// The `ACK` option value: `none`, `positive`, `negative`, `full`.
    pub fn keyword(self) -> &'static str {
        match self {
            Ack::None => "none",
            Ack::Positive => "positive",
            Ack::Negative => "negative",
            Ack::Full => "full",
        }
    }

    /// Completion yields a `Success` record.
    pub fn on_success(self) -> bool {
        matches!(self, Ack::Positive | Ack::Full)
    }

    /// Dead-lettering and purging yield a record.
    pub fn on_failure(self) -> bool {
        matches!(self, Ack::Negative | Ack::Full)
    }
}

/// The service's settlement of a feedback batch (spec §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FeedbackSettlement {
    /// Removed.
    Complete,
    /// Enqueued again, its delivery count kept.
    Abandon,
}

impl FeedbackSettlement {
    /// The wire keyword, `COMPLETE` or `ABANDON` (`FEEDBACK COMPLETE token`).
    pub fn keyword(self) -> &'static str {
        match self {
            FeedbackSettlement::Complete => "COMPLETE",
            FeedbackSettlement::Abandon => "ABANDON",
        }
    }
}

/// Why a message was dead-lettered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DeadLetterReason {
    /// Its expiry passed.
    Expired,
    /// A delivery would have exceeded `max_delivery_count`.
    DeliveryCountExceeded,
    /// The device rejected it.
    Rejected,
}

impl DeadLetterReason {
    /// Every reason.
    pub const ALL: [DeadLetterReason; 3] = [
        DeadLetterReason::Expired,
        DeadLetterReason::DeliveryCountExceeded,
        DeadLetterReason::Rejected,
    ];

    /// Wire text (DEADLETTERS reply).
    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetterReason::Expired => "Expired",
            DeadLetterReason::DeliveryCountExceeded => "DeliveryCountExceeded",
            DeadLetterReason::Rejected => "Rejected",
        }
    }

    /// The feedback status it reports.
    pub fn feedback_status(self) -> FeedbackStatus {
        match self {
            DeadLetterReason::Expired => FeedbackStatus::Expired,
            DeadLetterReason::DeliveryCountExceeded => FeedbackStatus::DeliveryCountExceeded,
            DeadLetterReason::Rejected => FeedbackStatus::Rejected,
        }
    }
}

/// Feedback status codes (spec §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FeedbackStatus {
    /// Completed.
    Success,
    /// Expired.
    Expired,
    /// Dead-lettered at the delivery-count limit.
    DeliveryCountExceeded,
    /// Rejected by the device.
    Rejected,
    /// Purged.
    Purged,
}

impl FeedbackStatus {
    /// Every status.
    pub const ALL: [FeedbackStatus; 5] = [
        FeedbackStatus::Success,
        FeedbackStatus::Expired,
        FeedbackStatus::DeliveryCountExceeded,
        FeedbackStatus::Rejected,
        FeedbackStatus::Purged,
    ];

    /// The `statusCode` (and `description`) text.
    pub fn as_str(self) -> &'static str {
        match self {
            FeedbackStatus::Success => "Success",
            FeedbackStatus::Expired => "Expired",
            FeedbackStatus::DeliveryCountExceeded => "DeliveryCountExceeded",
            FeedbackStatus::Rejected => "Rejected",
            FeedbackStatus::Purged => "Purged",
        }
    }
}

/// The QUEUE reply (spec §2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Messages Enqueued.
    pub enqueued: u32,
    /// Messages Invisible.
    pub invisible: u32,
    /// Dead letters kept.
    pub dead_lettered: u32,
    /// Earliest enqueued time of an Enqueued message, if any.
    pub oldest_enqueued_ms: Option<u64>,
}

impl QueueStats {
    /// The fourth QUEUE element: the oldest enqueued time, or -1.
    pub fn oldest_enqueued_or_minus_one(&self) -> i64 {
        self.oldest_enqueued_ms
            .map_or(-1, |ms| i64::try_from(ms).unwrap_or(i64::MAX))
    }
}
