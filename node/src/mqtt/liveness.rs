//! When a broker connection is presumed dead: an acknowledgement (PUBACK) is overdue *and*
//! nothing at all has arrived from the broker for as long.
//!
//! A late PUBACK alone is no proof: the broker answers in the order it writes, so under a flood
//! of large requests the PUBACK of a reply queues behind megabytes of publishes on their way to
//! this node, and may take longer than the ack timeout while the broker is busy but well. A
//! connection whose packets vanish (a cut, a frozen broker) delivers nothing at all, so it is
//! still dropped one ack timeout after it went quiet.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The last time anything arrived from the broker on one connection.
#[derive(Debug)]
pub(super) struct Liveness {
    last_heard: Cell<Instant>,
    ack_timeout: Duration,
}

impl Liveness {
    /// A connection that was just established (the CONNACK counts as heard).
    pub(super) fn new(ack_timeout: Duration, now: Instant) -> Self {
        Self {
            last_heard: Cell::new(now),
            ack_timeout,
        }
    }

    /// Records a packet from the broker (a publish, an acknowledgement).
    pub(super) fn heard(&self, now: Instant) {
        if now > self.last_heard.get() {
            self.last_heard.set(now);
        }
    }

    /// How long the broker has been silent at `now`.
    pub(super) fn silent_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.last_heard.get())
    }

    /// Whether the connection should be dropped at `now`, given when the oldest publish still
    /// waiting for its acknowledgement was sent (`None`: nothing is waiting).
    pub(super) fn presumed_dead(
        &self,
        oldest_unacknowledged: Option<Instant>,
        now: Instant,
    ) -> bool {
        let Some(sent) = oldest_unacknowledged else {
            return false;
        };
        now.saturating_duration_since(sent) > self.ack_timeout
            && self.silent_for(now) > self.ack_timeout
    }
}

#[cfg(test)]
mod tests;
