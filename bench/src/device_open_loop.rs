//! The open-loop sender of the `devicebound` latency phase: SENDs issued on a fixed schedule
//! (send `i` is due at `start + i / rate`), each published as soon as it is due without waiting
//! for earlier replies, so a slow server cannot slow the sender down and hide its own delays
//! (no coordinated omission). Each body carries the instant the send was *due* (an offset from
//! the devices' shared origin), so a late sender counts against the latency too. Replies are
//! counted as they come; which sequence numbers were answered `+OK` is kept to find the
//! undelivered ones.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::task::JoinSet;

use crate::device_send::{self, DeviceIds, Kind, MessageId};
use crate::driver::Outcome;
use crate::mqtt_load::Connection;
use crate::stats::CellStats;

/// A fixed-rate schedule of `count` sends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    start: Instant,
    rate: f64,
    count: u64,
}

impl Schedule {
    /// `rate` sends per second for `duration` from `start` (`⌊rate × duration⌋` sends).
    pub fn new(start: Instant, rate: f64, duration: Duration) -> Schedule {
        let rate = if rate.is_finite() { rate.max(0.0) } else { 0.0 };
        Schedule {
            start,
            rate,
            count: (rate * duration.as_secs_f64()).floor() as u64,
        }
    }

    /// How many sends.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// When send `i` is due.
    pub fn at(&self, i: u64) -> Instant {
        if self.rate <= 0.0 {
            return self.start;
        }
        self.start + Duration::from_secs_f64(i as f64 / self.rate)
    }

    /// The first send.
    pub fn start(&self) -> Instant {
        self.start
    }
}

/// What the sender did.
#[derive(Debug)]
pub struct Sent {
    /// Sends issued.
    pub sent: u64,
    /// The replies (latency from publish to reply, errors, timeouts).
    pub replies: CellStats,
    /// Per sequence number: answered `+OK`.
    pub answered_ok: Vec<bool>,
    /// How late sends were published after they were due, µs.
    pub lag: Histogram<u64>,
    /// When the last send was published.
    pub last_publish: Instant,
}

/// Issues every send of `schedule` to device `i % devices` over connection `i % connections`,
/// `body_size` bytes each, stamped with the due instant as an offset from `origin`.
pub async fn send_on_schedule(
    connections: &[Arc<Connection>],
    devices: &Arc<DeviceIds>,
    schedule: &Schedule,
    origin: Instant,
    body_size: usize,
) -> Sent {
    let count = usize::try_from(schedule.count()).unwrap_or(usize::MAX);
    let mut replies = CellStats::new();
    let mut answered_ok = vec![false; count];
    let mut lag = Histogram::new_with_bounds(1, 60_000_000, 2)
        .expect("constant bounds 1 µs..60 s at 2 digits are valid");
    let mut tasks: JoinSet<(u64, Outcome)> = JoinSet::new();
    let mut last_publish = schedule.start();
    let mut record = |(seq, outcome): (u64, Outcome), replies: &mut CellStats| match outcome {
        Outcome::Ok { latency, .. } => {
            replies.record_ok(latency, true, true);
            if let Some(flag) = usize::try_from(seq)
                .ok()
                .and_then(|i| answered_ok.get_mut(i))
            {
                *flag = true;
            }
        }
        Outcome::Error(kind) => replies.record_error(&kind),
        Outcome::Timeout => replies.record_timeout(),
    };
    if !connections.is_empty() && !devices.is_empty() {
        for seq in 0..schedule.count() {
            let due = schedule.at(seq);
            tokio::time::sleep_until(due.into()).await;
            let now = Instant::now();
            let late =
                u64::try_from(now.saturating_duration_since(due).as_micros()).unwrap_or(u64::MAX);
            lag.saturating_record(late.max(1));
            last_publish = now;
            let i = usize::try_from(seq).unwrap_or_default();
            let connection = connections[i % connections.len()].clone();
            let device = devices.get(i).to_owned();
            let body = device_send::stamped_body(due.saturating_duration_since(origin), body_size);
            tasks.spawn(async move {
                let id = MessageId {
                    kind: Kind::Open,
                    seq,
                };
                (
                    seq,
                    device_send::send(&connection, &device, id, &body).await,
                )
            });
            while let Some(done) = tasks.try_join_next() {
                if let Ok(done) = done {
                    record(done, &mut replies);
                }
            }
        }
    }
    while let Some(done) = tasks.join_next().await {
        if let Ok(done) = done {
            record(done, &mut replies);
        }
    }
    Sent {
        sent: schedule.count(),
        replies,
        answered_ok,
        lag,
        last_publish,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_space_sends_evenly() {
        let t0 = Instant::now();
        /// (send, due ms after start)
        type Dues = &'static [(u64, u64)];
        // (rate, duration ms, count, dues)
        let cases: [(f64, u64, u64, Dues); 5] = [
            (
                100.0,
                2_000,
                200,
                &[(0, 0), (1, 10), (100, 1_000), (199, 1_990)],
            ),
            (1_000.0, 1_000, 1_000, &[(0, 0), (15, 15), (999, 999)]),
            (2.5, 1_000, 2, &[(0, 0), (1, 400)]),
            (0.0, 5_000, 0, &[(3, 0)]),
            (f64::NAN, 5_000, 0, &[]),
        ];
        for (rate, duration, count, dues) in cases {
            let schedule = Schedule::new(t0, rate, Duration::from_millis(duration));
            assert_eq!(schedule.count(), count, "rate {rate}");
            for (i, due) in dues {
                let at = schedule.at(*i).duration_since(t0);
                let off = at.as_secs_f64() * 1000.0 - *due as f64;
                assert!(off.abs() < 0.001, "rate {rate}, send {i}: {at:?}");
            }
        }
    }

    #[tokio::test]
    async fn without_connections_nothing_is_sent_but_the_schedule_is_reported() {
        let schedule = Schedule::new(Instant::now(), 100.0, Duration::from_millis(50));
        let devices = Arc::new(DeviceIds::new("d", 2));
        let sent = send_on_schedule(&[], &devices, &schedule, Instant::now(), 16).await;
        assert_eq!(sent.sent, 5);
        assert_eq!(sent.answered_ok, [false; 5]);
        assert_eq!(sent.replies.succeeded + sent.replies.errors, 0);
    }
}
