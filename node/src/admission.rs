//! The request budget: bytes of requests a node holds at once, from the moment a PUBLISH is
//! read until its reply is queued (or it is dropped).
//!
//! The budget has two equal halves. A request read from the broker first takes room in the
//! *waiting* half, without waiting: if there is none, it is refused at once (PUBACK 0x97
//! Quota exceeded, counted as dropped `overloaded`), because its payload is already in this
//! process's memory. It then waits for room in the *admitted* half, and only then gets its
//! PUBACK. So while requests wait, the broker's flow control (our `receive_maximum`) holds
//! further requests at the broker, and the bytes of requests in this process never exceed the
//! whole budget, whatever their size or number.
//!
//! A request is charged for all of it, not just its payload ([`request_bytes`]): topic,
//! Content Type, each user property's name and value plus what holding one costs
//! ([`USER_PROPERTY_OVERHEAD_BYTES`]), its Response Topic and Correlation Data twice (a small
//! reply repeats them until it has room in the outbound budget, [`crate::outbound`]), plus
//! [`REQUEST_OVERHEAD_BYTES`]. A large reply (GET, DEADLETTERS) takes its own room in the
//! outbound budget before it is built.
//! A request with more than [`MAX_USER_PROPERTIES`] user properties, or more than
//! [`MAX_USER_PROPERTY_BYTES`] of them, is refused before it is copied
//! ([`Intake::screen_properties`]): a packet of empty properties would otherwise cost some
//! ten times its size once decoded.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::transport::{Admitted, InboundMessage};

/// Fixed cost charged per request on top of its bytes ([`request_bytes`]): the request's
/// task, and a small reply while it waits for room in the outbound budget.
pub const REQUEST_OVERHEAD_BYTES: usize = 1024;

/// What holding one user property costs besides its name and value: the pair of `String`s
/// (48 bytes) and the allocator's rounding of their two allocations.
pub const USER_PROPERTY_OVERHEAD_BYTES: usize = 96;

/// Most user properties a request may carry. The SDKs send a handful; a device-bound SEND's
/// application properties are the one use for more (its delivery topic, which repeats them,
/// is at most 65,535 bytes).
pub const MAX_USER_PROPERTIES: usize = 128;

/// Most bytes of user property names and values a request may carry: twice what a delivery
/// topic can repeat, so every SEND whose properties might fit one still gets its exact answer
/// (`+OK` or `message too large`).
pub const MAX_USER_PROPERTY_BYTES: usize = 128 << 10;

/// The bytes a request is charged for (before [`REQUEST_OVERHEAD_BYTES`]): payload, topic,
/// Content Type, its user properties, and its Response Topic and Correlation Data twice (its
/// reply repeats them while it waits for room in the outbound budget).
pub fn request_bytes(message: &InboundMessage) -> usize {
    let properties: usize = message
        .user_properties
        .iter()
        .map(|(name, value)| name.len() + value.len() + USER_PROPERTY_OVERHEAD_BYTES)
        .sum();
    let reply_address = message.response_topic.as_ref().map_or(0, String::len)
        + message.correlation_data.as_ref().map_or(0, |c| c.len());
    message.payload.len()
        + message.topic.len()
        + 2 * reply_address
        + message.content_type.as_ref().map_or(0, String::len)
        + properties
}

/// A shared budget of request bytes.
#[derive(Clone)]
pub struct RequestBudget {
    semaphore: Arc<Semaphore>,
    total: usize,
    used: prometheus::IntGauge,
}

/// A request's share of the budget; given back when dropped.
pub struct Admission {
    _permit: OwnedSemaphorePermit,
    bytes: usize,
    used: prometheus::IntGauge,
}

impl RequestBudget {
    /// A budget of `total_bytes` (at least one request's overhead), reported in `used`.
    pub fn new(total_bytes: usize, used: prometheus::IntGauge) -> Self {
        let total = total_bytes.clamp(REQUEST_OVERHEAD_BYTES, Semaphore::MAX_PERMITS);
        RequestBudget {
            semaphore: Arc::new(Semaphore::new(total)),
            total,
            used,
        }
    }

    /// What a request of `request_bytes` ([`request_bytes`]) is charged: its bytes plus the
    /// overhead, and never more than the whole budget (a request larger than the budget runs
    /// alone).
    pub fn cost(&self, request_bytes: usize) -> usize {
        request_bytes
            .saturating_add(REQUEST_OVERHEAD_BYTES)
            .min(self.total)
    }

    /// Waits until the request's cost fits, and takes it.
    pub async fn admit(&self, request_bytes: usize) -> Admission {
        let bytes = self.cost(request_bytes);
        let permits = u32::try_from(bytes).unwrap_or(u32::MAX);
        let permit = match self.semaphore.clone().acquire_many_owned(permits).await {
            Ok(permit) => permit,
            // The semaphore is never closed; should it be, nothing is left to protect.
            Err(_) => unreachable!("request budget semaphore closed"),
        };
        self.admission(permit, bytes)
    }

    /// Takes the request's cost if it fits right now; `None` if it does not.
    pub fn try_admit(&self, request_bytes: usize) -> Option<Admission> {
        let bytes = self.cost(request_bytes);
        let permits = u32::try_from(bytes).unwrap_or(u32::MAX);
        let permit = self
            .semaphore
            .clone()
            .try_acquire_many_owned(permits)
            .ok()?;
        Some(self.admission(permit, bytes))
    }

    /// Records `bytes` as used for as long as the returned admission lives.
    fn admission(&self, permit: OwnedSemaphorePermit, bytes: usize) -> Admission {
        self.used.add(i64::try_from(bytes).unwrap_or(i64::MAX));
        Admission {
            _permit: permit,
            bytes,
            used: self.used.clone(),
        }
    }

    /// Bytes not taken right now.
    pub fn available(&self) -> usize {
        self.semaphore.available_permits()
    }
}

/// Where the MQTT session hands requests over: waiting room, admission, then the queue.
#[derive(Clone)]
pub struct Intake {
    /// Admitted requests, read by the dispatcher.
    queue: mpsc::Sender<Admitted>,
    /// Requests being served (from admission until their reply is queued).
    admitted: RequestBudget,
    /// Requests read from the broker, waiting for admission (their PUBACK waits too).
    waiting: RequestBudget,
    /// Requests refused because the waiting room was full.
    refused: prometheus::IntCounter,
    /// Requests refused for carrying too many user properties (or too many bytes of them).
    too_many_properties: prometheus::IntCounter,
}

/// What became of a request handed to [`Intake::deliver`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Admitted and queued for the dispatcher.
    Queued,
    /// The waiting room was full: refused, nothing else happens to it.
    Refused,
    /// The service stopped.
    Stopped,
}

impl Intake {
    /// An intake whose two halves together hold at most `total_bytes` (reported in `used`);
    /// refusals are counted in `refused` (the budget was full) and `too_many_properties`.
    pub fn new(
        queue: mpsc::Sender<Admitted>,
        total_bytes: usize,
        used: prometheus::IntGauge,
        refused: prometheus::IntCounter,
        too_many_properties: prometheus::IntCounter,
    ) -> Intake {
        let half = total_bytes / 2;
        Intake {
            queue,
            admitted: RequestBudget::new(half, used.clone()),
            waiting: RequestBudget::new(total_bytes.saturating_sub(half), used),
            refused,
            too_many_properties,
        }
    }

    /// Whether a request whose user properties have these name + value `lengths` may be taken
    /// in at all: false (and counted) beyond [`MAX_USER_PROPERTIES`] or
    /// [`MAX_USER_PROPERTY_BYTES`]. Looks at no more than the cap's worth of properties.
    pub fn screen_properties(&self, lengths: impl ExactSizeIterator<Item = usize>) -> bool {
        let fits = lengths.len() <= MAX_USER_PROPERTIES
            && lengths.sum::<usize>() <= MAX_USER_PROPERTY_BYTES;
        if !fits {
            self.too_many_properties.inc();
        }
        fits
    }

    /// Takes room in the waiting half or refuses at once, then waits for room in the admitted
    /// half and queues `message`.
    pub async fn deliver(&self, message: InboundMessage) -> Delivery {
        let bytes = request_bytes(&message);
        let Some(waiting) = self.waiting.try_admit(bytes) else {
            self.refused.inc();
            return Delivery::Refused;
        };
        let admission = self.admitted.admit(bytes).await;
        drop(waiting);
        match self.queue.send(Admitted { message, admission }).await {
            Ok(()) => Delivery::Queued,
            Err(_) => Delivery::Stopped,
        }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.used.sub(i64::try_from(self.bytes).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests;
