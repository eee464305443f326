//! Device-bound message queues (`shared/spec/devicebound.md`): the replicated semantics of
//! IoT Hub style cloud-to-device queues as pure, deterministic functions over a [`Txn`] and the
//! queues' in-memory [`DeviceIndex`] (derived from the rows, rebuilt at start).
//!
//! Owns what a SEND/PURGE/FORGET, a delivery, a settlement, a sweep or a feedback step does to
//! the replicated state: per-device FIFO queues with locks and delivery counts, dead letters,
//! feedback records and feedback batches. Reached through
//! [`crate::machine::Mutation::Device`], so the machine's reply memory (§6 of the state store
//! protocol) covers these commands too. A sibling of the keyspace over the engine: imports
//! neither the keyspace nor the machine. Knows nothing about fjall, openraft or MQTT, and never
//! reads a clock: time is the entry's store time handed in by [`crate::machine::Machine`].
//!
//! [`Txn`]: crate::engine::Txn

mod apply;
mod command;
mod index;
pub mod layout;
mod outcome;
pub mod read;
mod record;
mod settings;
pub mod token;

pub use apply::{MAX_SWEEP_PER_ENTRY, apply_to, write_meta};
pub use command::{Ack, DeviceCommand, Expiry, FeedbackSettlement, SendMessage, Settlement};
pub use index::{DEPTH_CLASSES, DeviceId, DeviceIndex, IndexedDevice, QueuedMessage, SavedDevice};
pub use outcome::{
    DeviceCounters, DeviceOutcome, DeviceRejection, DeviceResult, FeedbackDelivery, MessageDelivery,
};
pub use read::{DeliverableDevice, QueueStats};
pub use record::{
    DeadLetter, DeadLetterReason, DeviceState, DeviceboundMeta, FeedbackBatch, FeedbackRecord,
    FeedbackStatus, LockState, Message, StoredMessage,
};
pub use settings::DeviceboundSettings;
pub use token::TokenSeed;

#[cfg(test)]
mod tests;
