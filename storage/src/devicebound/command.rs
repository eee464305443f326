//! The typed device-bound commands a proposal carries ([`DeviceCommand`]). Requests are
//! validated at the door (device id alphabet, message id length, option syntax); apply
//! re-checks only what the replicated settings decide (queue depth, body size, device cap).

use serde::{Deserialize, Serialize};

use crate::devicebound::settings::DeviceboundSettings;
pub use statestore_vocab::devicebound::{Expiry, FeedbackSettlement};

/// A change to the device-bound state, inside [`crate::machine::Mutation::Device`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeviceCommand {
    /// SEND: append a message to a device's queue.
    Send(SendMessage),
    /// PURGE: remove every message of the queue (dead letters stay).
    Purge {
        /// Device id.
        #[serde(with = "serde_bytes")]
        device: Vec<u8>,
    },
    /// FORGET: remove the queue, the dead letters and the feedback records about the device
    /// not yet cut into a batch.
    Forget {
        /// Device id.
        #[serde(with = "serde_bytes")]
        device: Vec<u8>,
    },
    /// The leader locks head messages before publishing them (they go out after commit).
    Deliver {
        /// Device id.
        #[serde(with = "serde_bytes")]
        device: Vec<u8>,
        /// At most this many (also bounded by the free window).
        max: u32,
    },
    /// PUBACK 0x10 (no subscriber): the delivery did not happen; the message is Enqueued again
    /// at its place with its delivery count given back, if `token` still locks it.
    Undeliver {
        /// Device id.
        #[serde(with = "serde_bytes")]
        device: Vec<u8>,
        /// The delivery's lock token.
        token: String,
    },
    /// Pull: lock and return the head Enqueued message, if the window allows one.
    Receive {
        /// Device id.
        #[serde(with = "serde_bytes")]
        device: Vec<u8>,
    },
    /// A device settles one of its messages.
    Settle {
        /// The settling device (from the topic: its identity).
        #[serde(with = "serde_bytes")]
        device: Vec<u8>,
        /// Lock token of the delivery.
        token: String,
        /// complete / abandon / reject.
        settlement: Settlement,
    },
    /// Sweep: return up to `max` messages whose lock is due at the entry's time to Enqueued,
    /// earliest lock expiry first.
    ExpireLocks {
        /// Bound of this entry's work (also capped by [`crate::devicebound::MAX_SWEEP_PER_ENTRY`]).
        max: u32,
    },
    /// Sweep: dead-letter up to `max` messages expired at the entry's time, earliest first.
    ExpireMessages {
        /// Bound of this entry's work.
        max: u32,
    },
    /// Cut one feedback batch if 64 records wait, or 15 s passed since the last cut and one
    /// waits.
    CutFeedbackBatch,
    /// The leader locks up to `max` Enqueued feedback batches before publishing them.
    DeliverFeedback {
        /// Bound of this entry's work.
        max: u32,
    },
    /// PUBACK 0x10 on a feedback batch: Enqueued again, delivery count given back.
    UndeliverFeedback {
        /// The delivery's lock token.
        token: String,
    },
    /// FEEDBACK COMPLETE / ABANDON.
    SettleFeedback {
        /// Lock token of the batch delivery.
        token: String,
        /// complete / abandon.
        settlement: FeedbackSettlement,
    },
    /// Sweep: return up to `max` feedback batches whose lock is due to Enqueued.
    ExpireFeedbackLocks {
        /// Bound of this entry's work.
        max: u32,
    },
    /// Sweep: drop up to `max` feedback batches past their TTL.
    ExpireFeedbackBatches {
        /// Bound of this entry's work.
        max: u32,
    },
    /// Replace the replicated settings (proposed by a leader whose configuration differs).
    SetSettings(DeviceboundSettings),
    /// SEND, then, if the message was enqueued, what [`DeviceCommand::Deliver`] does for its
    /// device (head messages first, within the window). The leader proposes it for a device it
    /// does not know to be offline: a message to an online device then costs one proposal, and
    /// one commit before it is published, less. (Variants are only ever appended: the log and
    /// the reply memory encode them by position.)
    SendAndDeliver(SendMessage),
    /// [`DeviceCommand::Settle`], then, if it took effect, what [`DeviceCommand::Deliver`]
    /// does for the device: the device that settles is online, and its window has a free slot.
    SettleAndDeliver {
        /// The settling device (from the topic: its identity).
        #[serde(with = "serde_bytes")]
        device: Vec<u8>,
        /// Lock token of the delivery.
        token: String,
        /// complete / abandon / reject.
        settlement: Settlement,
    },
}

impl DeviceCommand {
    /// Short name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            DeviceCommand::Send(_) => "device_send",
            DeviceCommand::Purge { .. } => "device_purge",
            DeviceCommand::Forget { .. } => "device_forget",
            DeviceCommand::Deliver { .. } => "device_deliver",
            DeviceCommand::Undeliver { .. } => "device_undeliver",
            DeviceCommand::Receive { .. } => "device_receive",
            DeviceCommand::Settle { .. } => "device_settle",
            DeviceCommand::ExpireLocks { .. } => "device_expire_locks",
            DeviceCommand::ExpireMessages { .. } => "device_expire_messages",
            DeviceCommand::CutFeedbackBatch => "feedback_cut",
            DeviceCommand::DeliverFeedback { .. } => "feedback_deliver",
            DeviceCommand::UndeliverFeedback { .. } => "feedback_undeliver",
            DeviceCommand::SettleFeedback { .. } => "feedback_settle",
            DeviceCommand::ExpireFeedbackLocks { .. } => "feedback_expire_locks",
            DeviceCommand::ExpireFeedbackBatches { .. } => "feedback_expire_batches",
            DeviceCommand::SetSettings(_) => "device_set_settings",
            DeviceCommand::SendAndDeliver(_) => "device_send_deliver",
            DeviceCommand::SettleAndDeliver { .. } => "device_settle_deliver",
        }
    }

    /// Bytes of payload the command carries (what proposal batches are capped by).
    pub fn approximate_bytes(&self) -> usize {
        match self {
            DeviceCommand::Send(send) | DeviceCommand::SendAndDeliver(send) => {
                send.device.len()
                    + send.message_id.len()
                    + send.body.len()
                    + send
                        .properties
                        .iter()
                        .map(|(name, value)| name.len() + value.len())
                        .sum::<usize>()
                    + send.content_type.as_ref().map_or(0, Vec::len)
                    + send.content_encoding.as_ref().map_or(0, Vec::len)
                    + send.generation.as_ref().map_or(0, Vec::len)
            }
            DeviceCommand::Purge { device }
            | DeviceCommand::Forget { device }
            | DeviceCommand::Deliver { device, .. }
            | DeviceCommand::Receive { device } => device.len(),
            DeviceCommand::Undeliver { device, token }
            | DeviceCommand::Settle { device, token, .. }
            | DeviceCommand::SettleAndDeliver { device, token, .. } => device.len() + token.len(),
            DeviceCommand::UndeliverFeedback { token }
            | DeviceCommand::SettleFeedback { token, .. } => token.len(),
            DeviceCommand::ExpireLocks { .. }
            | DeviceCommand::ExpireMessages { .. }
            | DeviceCommand::CutFeedbackBatch
            | DeviceCommand::DeliverFeedback { .. }
            | DeviceCommand::ExpireFeedbackLocks { .. }
            | DeviceCommand::ExpireFeedbackBatches { .. }
            | DeviceCommand::SetSettings(_) => 0,
        }
    }
}

/// The arguments of a SEND.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendMessage {
    /// Device id (1–128 bytes of IoT Hub's alphabet, checked at the door).
    #[serde(with = "serde_bytes")]
    pub device: Vec<u8>,
    /// Message id set by the sender (1–128 bytes, not unique).
    #[serde(with = "serde_bytes")]
    pub message_id: Vec<u8>,
    /// Body.
    #[serde(with = "serde_bytes")]
    pub body: Vec<u8>,
    /// Application properties, in request order.
    pub properties: Vec<(String, String)>,
    /// `CONTENTTYPE`.
    pub content_type: Option<Vec<u8>>,
    /// `CONTENTENCODING`.
    pub content_encoding: Option<Vec<u8>>,
    /// `ACK`.
    pub ack: Ack,
    /// `TTL` / `EXPIRES` / neither.
    pub expiry: Expiry,
    /// `GENERATION`: the device generation id feedback reports.
    pub generation: Option<Vec<u8>>,
}

pub use statestore_vocab::devicebound::Ack;

/// A device's settlement of a delivered message (spec §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Settlement {
    /// Completed: removed (feedback `Success` for ack positive/full).
    Complete,
    /// Enqueued again at the head of the queue, its delivery count kept.
    Abandon,
    /// Dead-lettered (`Rejected`).
    Reject,
}
