//! Process stall detection, so request expiry is judged from when a message could have arrived,
//! not from when a frozen process finally read it.
//!
//! A request delivered while the process is stopped (SIGSTOP, a paused VM, severe CPU
//! starvation) waits in the socket buffer; read afterwards it would look fresh although its
//! sender gave up long ago (protocol §1: expired requests are neither executed nor answered).
//! A ticker thread notices gaps in its own schedule; messages read during or just after a gap
//! are dated back to the gap's start.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often the ticker runs.
const TICK: Duration = Duration::from_millis(20);
/// A gap in the ticker's schedule longer than this is a stall.
const STALL: Duration = Duration::from_millis(500);
/// Messages read this soon after a stall ended may have arrived during it.
const AFTER_STALL: Duration = Duration::from_millis(200);

/// Shared between the ticker thread and message readers.
pub struct StallDetector {
    epoch: Instant,
    last_tick_us: AtomicU64,
    stall_start_us: AtomicU64,
    stall_end_us: AtomicU64,
    stalls: prometheus::IntCounter,
}

impl StallDetector {
    /// Starts the ticker thread (holding `exit` for the supervisor); stalls are counted in
    /// `stalls`.
    pub fn start(
        stalls: prometheus::IntCounter,
        exit: crate::supervisor::ExitGuard,
    ) -> std::io::Result<Arc<StallDetector>> {
        let detector = Arc::new(StallDetector {
            epoch: Instant::now(),
            last_tick_us: AtomicU64::new(0),
            stall_start_us: AtomicU64::new(0),
            stall_end_us: AtomicU64::new(0),
            stalls,
        });
        let ticker = detector.clone();
        std::thread::Builder::new()
            .name("stall-detector".into())
            .spawn(move || {
                let _exit = exit;
                loop {
                    std::thread::sleep(TICK);
                    ticker.tick(Instant::now());
                }
            })?;
        Ok(detector)
    }

    fn micros(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_micros()).unwrap_or(u64::MAX)
    }

    fn instant(&self, micros: u64) -> Instant {
        self.epoch + Duration::from_micros(micros)
    }

    fn tick(&self, now: Instant) {
        let now_us = self.micros(now);
        let last_us = self.last_tick_us.swap(now_us, Ordering::SeqCst);
        let gap = Duration::from_micros(now_us.saturating_sub(last_us));
        if last_us > 0 && gap > STALL {
            self.stall_start_us.store(last_us, Ordering::SeqCst);
            self.stall_end_us.store(now_us, Ordering::SeqCst);
            self.stalls.inc();
            tracing::warn!(
                stalled_ms = gap.as_millis() as u64,
                "the process was stalled; requests read meanwhile are dated back"
            );
        }
    }

    /// The earliest instant a message read at `read_at` may have been waiting since.
    pub fn arrival_bound(&self, read_at: Instant) -> Instant {
        let last_tick = self.last_tick_us.load(Ordering::SeqCst);
        if last_tick > 0 && read_at.saturating_duration_since(self.instant(last_tick)) > STALL {
            return self.instant(last_tick); // a stall the ticker has not noticed yet
        }
        let (start, end) = (
            self.stall_start_us.load(Ordering::SeqCst),
            self.stall_end_us.load(Ordering::SeqCst),
        );
        if end > 0 {
            let end = self.instant(end);
            if read_at >= end && read_at.saturating_duration_since(end) < AFTER_STALL {
                return self.instant(start);
            }
        }
        read_at
    }
}

#[cfg(test)]
mod tests;
