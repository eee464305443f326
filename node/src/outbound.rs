//! The outbound budget: bytes of messages this node publishes, held from the moment a message
//! is queued for the broker until the broker acknowledges it (PUBACK), or it is dropped.
//!
//! A message takes its size ([`message_bytes`]) in its lane before it is queued; when the lane
//! is spent the publisher waits (backpressure: a request task waits holding its admission, so
//! intake and then the broker hold further requests; the notifier and the device push slow
//! down). The bytes come back when the PUBACK arrives, or when the message is dropped, fails
//! or its connection is lost (a [`Charge`] gives its bytes back when dropped).
//!
//! Two lanes with a share each, so a flood of one never delays the other: [`Lane::Replies`]
//! (replies to requests of at most [`LARGE_REPLY_BYTES`]) and [`Lane::Bulk`] (notifications,
//! device deliveries, feedback, forwards and larger replies), whose rate is also paced
//! ([`pacer`]). A message larger than its whole lane is charged the whole lane and goes alone.
//!
//! A reply whose size is known only once it has been read (a GET of a large value) takes its
//! room *before* it is built ([`LaneBudget::try_charge`]); if there is none, the request gives
//! what it read back and waits for room holding nothing ([`LaneBudget::charge`]). So nothing in
//! this process waits for room while holding bytes no budget counts.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::transport::{OutboundKind, OutboundMessage};

pub mod pacer;

/// Replies larger than this (as [`message_bytes`] counts them) go in the bulk lane: a small
/// reply never waits behind a large one, nor behind the bulk lane's pace.
pub const LARGE_REPLY_BYTES: usize = 16 << 10;

/// Fixed cost of a message besides its bytes: the queued command, its in-flight entry, and the
/// MQTT encoding's headers.
pub const MESSAGE_OVERHEAD_BYTES: usize = 256;

/// Cost of one user property besides its name and value (the owned pair and its encoding).
pub const PROPERTY_OVERHEAD_BYTES: usize = 64;

/// Which share of the budget a message takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Replies to requests, up to [`LARGE_REPLY_BYTES`]: served first.
    Replies,
    /// Notifications, device deliveries, feedback, forwards and larger replies: paced.
    Bulk,
}

impl Lane {
    /// Every lane.
    pub const ALL: [Lane; 2] = [Lane::Replies, Lane::Bulk];

    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            Lane::Replies => "replies",
            Lane::Bulk => "bulk",
        }
    }

    /// The lane of `message` (probes are the session's own and take no room).
    pub fn of(message: &OutboundMessage) -> Lane {
        match message.kind {
            OutboundKind::Response => Lane::for_reply(message_bytes(message)),
            OutboundKind::Probe => Lane::Replies,
            OutboundKind::Notification { .. }
            | OutboundKind::DeviceMessage { .. }
            | OutboundKind::Feedback { .. }
            | OutboundKind::DeviceForward { .. } => Lane::Bulk,
        }
    }

    /// The lane of a reply of `bytes` (as [`message_bytes`] counts it).
    pub fn for_reply(bytes: usize) -> Lane {
        if bytes <= LARGE_REPLY_BYTES {
            Lane::Replies
        } else {
            Lane::Bulk
        }
    }
}

/// The bytes `message` is charged: payload, topic, correlation data, response topic, content
/// type, user properties (name, value and [`PROPERTY_OVERHEAD_BYTES`] each), and
/// [`MESSAGE_OVERHEAD_BYTES`].
pub fn message_bytes(message: &OutboundMessage) -> usize {
    let properties: usize = message
        .user_properties
        .iter()
        .map(|(name, value)| name.len() + value.len() + PROPERTY_OVERHEAD_BYTES)
        .sum();
    message.payload.len()
        + message.topic.len()
        + message.correlation_data.as_ref().map_or(0, |c| c.len())
        + message.response_topic.as_ref().map_or(0, |t| t.len())
        + message.content_type.map_or(0, str::len)
        + properties
        + MESSAGE_OVERHEAD_BYTES
}

/// Bytes held in a lane; given back when dropped.
#[derive(Debug)]
pub struct Charge {
    _permit: Option<OwnedSemaphorePermit>,
    bytes: usize,
    charged: Option<prometheus::IntGauge>,
}

impl Charge {
    /// A charge no budget counts (outboxes without a budget: tests).
    pub fn unbudgeted(bytes: usize) -> Charge {
        Charge {
            _permit: None,
            bytes,
            charged: None,
        }
    }

    /// The bytes it holds.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if let Some(charged) = &self.charged {
            charged.sub(i64::try_from(self.bytes).unwrap_or(i64::MAX));
        }
    }
}

/// One lane's share of the budget.
#[derive(Clone)]
pub struct LaneBudget {
    semaphore: Arc<Semaphore>,
    total: usize,
    charged: prometheus::IntGauge,
    waits: prometheus::IntCounter,
}

impl LaneBudget {
    /// A lane of `total_bytes` (at least one message's overhead), its bytes reported in
    /// `charged`, publishes that had to wait for room counted in `waits`.
    pub fn new(
        total_bytes: usize,
        charged: prometheus::IntGauge,
        waits: prometheus::IntCounter,
    ) -> Self {
        let total = total_bytes.clamp(MESSAGE_OVERHEAD_BYTES, u32::MAX as usize);
        LaneBudget {
            semaphore: Arc::new(Semaphore::new(total)),
            total,
            charged,
            waits,
        }
    }

    /// What a message of `bytes` is charged: its bytes, and never more than the whole lane (a
    /// message larger than the lane goes alone).
    pub fn cost(&self, bytes: usize) -> usize {
        bytes.clamp(1, self.total)
    }

    /// Takes room for `bytes` if the lane has it now.
    pub fn try_charge(&self, bytes: usize) -> Option<Charge> {
        let cost = self.cost(bytes);
        let permit = self
            .semaphore
            .clone()
            .try_acquire_many_owned(permits(cost))
            .ok()?;
        Some(self.charge_of(permit, cost))
    }

    /// Takes room for `bytes`, waiting until the lane has it (counted in `waits` if it has
    /// to). Fair: earlier waiters are served first, a large one is not overtaken for ever.
    pub async fn charge(&self, bytes: usize) -> Charge {
        if let Some(charge) = self.try_charge(bytes) {
            return charge;
        }
        self.waits.inc();
        let cost = self.cost(bytes);
        let permit = match self
            .semaphore
            .clone()
            .acquire_many_owned(permits(cost))
            .await
        {
            Ok(permit) => permit,
            // The semaphore is never closed; should it be, nothing is left to protect.
            Err(_) => unreachable!("outbound budget semaphore closed"),
        };
        self.charge_of(permit, cost)
    }

    fn charge_of(&self, permit: OwnedSemaphorePermit, cost: usize) -> Charge {
        self.charged.add(i64::try_from(cost).unwrap_or(i64::MAX));
        Charge {
            _permit: Some(permit),
            bytes: cost,
            charged: Some(self.charged.clone()),
        }
    }

    /// Bytes not taken right now.
    pub fn available(&self) -> usize {
        self.semaphore.available_permits()
    }
}

fn permits(cost: usize) -> u32 {
    u32::try_from(cost).unwrap_or(u32::MAX)
}

/// The two lanes, each half of `limits.outbound_budget_mb`.
#[derive(Clone)]
pub struct OutboundBudget {
    replies: LaneBudget,
    bulk: LaneBudget,
}

impl OutboundBudget {
    /// Lanes of half `total_bytes` each; `charged` and `waits` are labelled by lane.
    pub fn new(
        total_bytes: usize,
        charged: &prometheus::IntGaugeVec,
        waits: &prometheus::IntCounterVec,
    ) -> Self {
        let lane = |lane: Lane| {
            LaneBudget::new(
                total_bytes / 2,
                charged.with_label_values(&[lane.label()]),
                waits.with_label_values(&[lane.label()]),
            )
        };
        OutboundBudget {
            replies: lane(Lane::Replies),
            bulk: lane(Lane::Bulk),
        }
    }

    /// The budget of `lane`.
    pub fn lane(&self, lane: Lane) -> &LaneBudget {
        match lane {
            Lane::Replies => &self.replies,
            Lane::Bulk => &self.bulk,
        }
    }
}

/// A message queued for the broker with the room it holds.
#[derive(Debug)]
pub struct Queued {
    /// The message.
    pub message: OutboundMessage,
    /// Its bytes in its lane, given back when the broker acknowledges it (or it is dropped).
    pub charge: Charge,
}

/// Where publishers queue messages: each takes room in its lane, then goes into its lane's
/// queue (count-bounded too: `capacity` messages), in order.
#[derive(Clone)]
pub struct Outlet {
    budget: OutboundBudget,
    replies: mpsc::Sender<Queued>,
    bulk: mpsc::Sender<Queued>,
}

/// The receiving ends of an [`Outlet`]'s lanes (the MQTT session reads them).
#[derive(Debug)]
pub struct LaneQueues {
    /// Replies, served first.
    pub replies: mpsc::Receiver<Queued>,
    /// Notifications, device deliveries, feedback, forwards, large replies.
    pub bulk: mpsc::Receiver<Queued>,
}

impl Outlet {
    /// An outlet charging `budget`, each lane queueing at most `capacity` messages.
    pub fn new(budget: OutboundBudget, capacity: usize) -> (Outlet, LaneQueues) {
        let (replies, replies_rx) = mpsc::channel(capacity);
        let (bulk, bulk_rx) = mpsc::channel(capacity);
        (
            Outlet {
                budget,
                replies,
                bulk,
            },
            LaneQueues {
                replies: replies_rx,
                bulk: bulk_rx,
            },
        )
    }

    /// The budget it charges.
    pub fn budget(&self) -> &OutboundBudget {
        &self.budget
    }

    /// Queues `message` once its bytes are charged: `prepaid` if that covers them (room a
    /// reply took before it was built), else room taken now (waiting for it). False if the
    /// session is gone (the bytes are given back with the message).
    pub async fn publish(&self, message: OutboundMessage, prepaid: Option<Charge>) -> bool {
        let lane = Lane::of(&message);
        let budget = self.budget.lane(lane);
        let cost = budget.cost(message_bytes(&message));
        let charge = match prepaid {
            Some(prepaid) if prepaid.bytes() >= cost => prepaid,
            other => {
                drop(other);
                budget.charge(cost).await
            }
        };
        let queue = match lane {
            Lane::Replies => &self.replies,
            Lane::Bulk => &self.bulk,
        };
        queue.send(Queued { message, charge }).await.is_ok()
    }
}

#[cfg(test)]
mod tests;
