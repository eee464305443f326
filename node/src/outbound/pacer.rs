//! The pace of the bulk lane: at most so many bytes and so many messages a second leave the
//! node as notifications, device deliveries, feedback and large replies.
//!
//! The outbound budget bounds the *memory* these messages take; the pace bounds the *rate*, so
//! that what one client can make the node publish (1,000 notifications per write of a watched
//! key, 4 MiB per GET of a large value) cannot saturate the broker and the CPU the store shares
//! with it, and small replies keep their latency. Two token buckets, one of bytes and one of
//! messages, each refilled at its rate and holding at most [`BURST`] of it (so a burst, such as
//! one write's notifications to a key's observers, goes out at once). A message may leave while
//! both buckets hold at least one token, and then takes its cost even if that puts them in
//! debt: a message larger than the burst is not held for ever, and the debt delays the next
//! ones.
//!
//! Pure: the caller passes the instant (a [`tokio::time::Instant`], so a paused clock drives
//! the tests).

use std::time::Duration;

use tokio::time::Instant;

use crate::transport::OutboundMessage;

/// How much of a second's rate a bucket holds.
pub const BURST: Duration = Duration::from_millis(100);

/// The two rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PaceLimits {
    /// Bytes a second (as [`paced_bytes`] counts them).
    pub bytes_per_sec: u64,
    /// Messages a second.
    pub messages_per_sec: u64,
}

/// The bytes of `message` its pace counts: what the broker moves, its payload and topic (the
/// message rate bounds the per-message cost of small ones).
pub fn paced_bytes(message: &OutboundMessage) -> usize {
    message.payload.len() + message.topic.len()
}

/// One bucket: tokens accrue at `rate` a second up to `capacity`, and may go negative.
#[derive(Debug, Clone)]
struct Bucket {
    rate: f64,
    capacity: f64,
    tokens: f64,
}

impl Bucket {
    fn new(per_sec: u64) -> Bucket {
        let rate = per_sec.max(1) as f64;
        let capacity = rate * BURST.as_secs_f64();
        Bucket {
            rate,
            capacity,
            tokens: capacity,
        }
    }

    fn refill(&mut self, elapsed: Duration) {
        self.tokens = (self.tokens + self.rate * elapsed.as_secs_f64()).min(self.capacity);
    }

    /// Time until the bucket holds a token (zero if it does).
    fn wait(&self) -> Duration {
        if self.tokens >= 1.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - self.tokens) / self.rate)
        }
    }
}

/// The bulk lane's pace.
#[derive(Debug, Clone)]
pub struct Pacer {
    bytes: Bucket,
    messages: Bucket,
    updated: Instant,
}

impl Pacer {
    /// Full buckets at `now`.
    pub fn new(limits: PaceLimits, now: Instant) -> Pacer {
        Pacer {
            bytes: Bucket::new(limits.bytes_per_sec),
            messages: Bucket::new(limits.messages_per_sec),
            updated: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.updated);
        self.bytes.refill(elapsed);
        self.messages.refill(elapsed);
        self.updated = self.updated.max(now);
    }

    /// When the next message may leave (`now` or earlier: at once).
    pub fn ready_at(&mut self, now: Instant) -> Instant {
        self.refill(now);
        now + self.bytes.wait().max(self.messages.wait())
    }

    /// True if a message may leave at `now`.
    pub fn ready(&mut self, now: Instant) -> bool {
        self.ready_at(now) <= now
    }

    /// Records a message of `bytes` leaving at `now`.
    pub fn spend(&mut self, bytes: usize, now: Instant) {
        self.refill(now);
        self.bytes.tokens -= bytes as f64;
        self.messages.tokens -= 1.0;
    }
}

#[cfg(test)]
mod tests;
