//! Rate-limited reporting of slow log durability: an append that took longer than
//! [`SLOW_LOG_DURABILITY`] from hand-over to `fdatasync` is counted in
//! `statestore_disk_log_slow_flushes_total`, and a WARN line names the worst one at most once
//! per [`REPORT_EVERY`], with how many more were seen since the last line.
//!
//! Why it matters: a follower answers a heartbeat only after everything it has accepted is
//! durable (openraft responds to an AppendEntries once the latest accepted log I/O is flushed),
//! and openraft times a heartbeat out after one heartbeat interval. A disk that stalls an
//! `fdatasync` therefore shows up on the leader as a heartbeat timeout; this line on the
//! follower says whose disk it was.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Time to durability above which an append counts as slow.
pub const SLOW_LOG_DURABILITY: Duration = Duration::from_millis(50);
/// At most one WARN line per this interval.
pub const REPORT_EVERY: Duration = Duration::from_secs(1);

/// What to log for a slow append, when a line is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlowReport {
    /// The slowest time to durability since the last line (this append included).
    pub worst: Duration,
    /// Slow appends since the last line (this append included).
    pub count: u64,
}

/// Pure rate limiter: feed it every slow append with the current instant.
#[derive(Debug, Default)]
pub struct SlowFlushLimiter {
    last_report: Option<Instant>,
    pending_count: u64,
    pending_worst: Duration,
}

impl SlowFlushLimiter {
    /// Records one append's time to durability; returns a report when a line is due.
    pub fn observe(&mut self, took: Duration, now: Instant) -> Option<SlowReport> {
        if took < SLOW_LOG_DURABILITY {
            return None;
        }
        self.pending_count += 1;
        self.pending_worst = self.pending_worst.max(took);
        let due = self
            .last_report
            .is_none_or(|last| now.saturating_duration_since(last) >= REPORT_EVERY);
        if !due {
            return None;
        }
        self.last_report = Some(now);
        let report = SlowReport {
            worst: self.pending_worst,
            count: self.pending_count,
        };
        self.pending_count = 0;
        self.pending_worst = Duration::ZERO;
        Some(report)
    }
}

/// The limiter shared by the WAL's flush callbacks, with the counter of slow appends.
pub struct SlowFlushReporter {
    limiter: Mutex<SlowFlushLimiter>,
    slow_total: prometheus::IntCounter,
}

impl SlowFlushReporter {
    /// Counts slow appends in `slow_total`.
    pub fn new(slow_total: prometheus::IntCounter) -> Self {
        SlowFlushReporter {
            limiter: Mutex::new(SlowFlushLimiter::default()),
            slow_total,
        }
    }

    /// The counter of slow appends (for registration).
    pub fn counter(&self) -> prometheus::IntCounter {
        self.slow_total.clone()
    }

    /// Records one append that became durable `took` after it was handed over.
    pub fn observe(&self, took: Duration) {
        if took < SLOW_LOG_DURABILITY {
            return;
        }
        self.slow_total.inc();
        let report = match self.limiter.lock() {
            Ok(mut limiter) => limiter.observe(took, Instant::now()),
            Err(poisoned) => poisoned.into_inner().observe(took, Instant::now()),
        };
        if let Some(report) = report {
            tracing::warn!(
                worst_ms = report.worst.as_millis() as u64,
                slow_appends = report.count,
                threshold_ms = SLOW_LOG_DURABILITY.as_millis() as u64,
                "slow raft log fdatasync: appends waited this long to become durable (a follower \
                 answers heartbeats only after it; check the disk's latency)"
            );
        }
    }
}

#[cfg(test)]
mod tests;
