//! [`DeviceboundSettings`]: the limits and durations the device-bound semantics judge by.
//!
//! Like the keyspace quotas ([`crate::machine::Mutation::SetLimits`]) they are replicated state
//! (in the devicebound meta record, changed only through
//! [`crate::devicebound::DeviceCommand::SetSettings`] in the log), so every replica decides the
//! same way whatever its local configuration says. Ranges are checked when
//! the node reads its configuration (spec §5); apply copes with any value (a zero cap refuses
//! or drops everything, it never panics).

use serde::{Deserialize, Serialize};

/// Spec §5 settings plus the store-wide caps that keep the tables bounded (§6 "nothing grows
/// without bound").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeviceboundSettings {
    /// Messages a device's queue holds, Enqueued and Invisible together (1–5000).
    pub max_queue_depth: u32,
    /// Largest message body in bytes.
    pub max_message_bytes: u64,
    /// Expiry of a SEND without TTL or EXPIRES (1 min – 2 days).
    pub default_ttl_ms: u64,
    /// Deliveries a message gets; one more attempt dead-letters it (DeliveryCountExceeded).
    pub max_delivery_count: u32,
    /// Lock of a delivered message (5–300 s).
    pub lock_duration_ms: u64,
    /// Invisible messages a device may hold at once (1–32; 1 is strict FIFO).
    pub device_window: u32,
    /// Lifetime of a feedback batch from its cut (1 min – 2 days).
    pub feedback_ttl_ms: u64,
    /// Deliveries a feedback batch gets before it is dropped (1–100).
    pub feedback_max_delivery_count: u32,
    /// Lock of a delivered feedback batch (5–300 s).
    pub feedback_lock_duration_ms: u64,
    /// Dead letters kept per device; the oldest is dropped to make room.
    pub max_dead_letters_per_device: u32,
    /// Devices with state (a message or a dead letter) in the whole store. A SEND to a device
    /// without state is refused once this many have some.
    pub max_devices: u64,
    /// Messages queued in all devices' queues together. A SEND is refused once this many are
    /// queued: every queued message has an entry in the in-memory queue index
    /// ([`crate::devicebound::DeviceIndex`], about 150 bytes), so this caps its memory.
    pub max_messages: u64,
    /// Feedback records waiting to be cut into a batch. Over it the oldest waiting record is
    /// dropped (counted in the meta's `feedback_records_dropped`).
    pub max_pending_feedback_records: u64,
    /// Feedback batches stored. Cutting one more drops the oldest (counted as a dropped batch).
    pub max_feedback_batches: u64,
}

impl Default for DeviceboundSettings {
    fn default() -> Self {
        DeviceboundSettings {
            max_queue_depth: 50,
            max_message_bytes: 65_536,
            default_ttl_ms: 3_600_000,
            max_delivery_count: 10,
            lock_duration_ms: 60_000,
            device_window: 1,
            feedback_ttl_ms: 3_600_000,
            feedback_max_delivery_count: 10,
            feedback_lock_duration_ms: 60_000,
            max_dead_letters_per_device: 100,
            max_devices: 1_000_000,
            max_messages: 1_000_000,
            max_pending_feedback_records: 100_000,
            max_feedback_batches: 10_000,
        }
    }
}
