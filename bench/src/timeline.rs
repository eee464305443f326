//! The per-second timeline of a measured window: every outcome is put in the one-second
//! interval in which it became known (a reply's arrival, an error reply, a timeout's expiry),
//! counting successes with a small latency histogram per second, errors and timeouts. Only the
//! whole seconds of the window are covered; seconds in which nothing happened are reported as
//! zero rather than left out, since an empty second is the most important thing to see. A
//! window of unknown length (a load that ends when every key is written) grows one second at a
//! time up to a limit instead.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

/// Highest latency a per-second histogram holds (60 s in µs); larger values saturate.
const HIGHEST_US: u64 = 60_000_000;
/// Two significant digits keep a per-second histogram near 10 KiB.
const DIGITS: u8 = 2;

/// What happened in one second.
#[derive(Debug, Clone, Default)]
struct Bucket {
    ok: u64,
    errors: u64,
    timeouts: u64,
    /// Latencies (µs) of the successful replies, created on the first one.
    latencies: Option<Histogram<u32>>,
}

/// Outcomes bucketed by second since `origin`.
#[derive(Debug, Clone)]
pub struct Timeline {
    origin: Instant,
    buckets: Vec<Bucket>,
    /// Seconds the timeline may hold; outcomes after them are not bucketed.
    limit: usize,
}

/// One printed row of the timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Second {
    /// 0-based second of the window: the row covers `[second, second + 1)` s after its start.
    pub second: usize,
    /// Successful replies that arrived in this second.
    pub ops: u64,
    /// Median latency of those replies, ms (0 when none).
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Largest, ms.
    pub max_ms: f64,
    /// Wrong replies received (or failed sends) in this second.
    pub errors: u64,
    /// Requests whose timeout expired in this second.
    pub timeouts: u64,
}

impl Timeline {
    /// A timeline of the whole seconds of a window of `length` starting at `origin`.
    pub fn new(origin: Instant, length: Duration) -> Timeline {
        let seconds = usize::try_from(length.as_secs()).unwrap_or(usize::MAX);
        Timeline {
            origin,
            buckets: vec![Bucket::default(); seconds],
            limit: seconds,
        }
    }

    /// A timeline from `origin` whose end is not known yet: it covers every second up to the
    /// last one an outcome fell in (so its last row may be a partial second), at most `limit`.
    pub fn open_ended(origin: Instant, limit: Duration) -> Timeline {
        Timeline {
            origin,
            buckets: Vec::new(),
            limit: usize::try_from(limit.as_secs()).unwrap_or(usize::MAX),
        }
    }

    /// The bucket of instant `at`, if it falls inside the covered seconds.
    fn bucket(&mut self, at: Instant) -> Option<&mut Bucket> {
        let offset = at.checked_duration_since(self.origin)?;
        let index = usize::try_from(offset.as_secs()).ok()?;
        if index >= self.limit {
            return None;
        }
        if index >= self.buckets.len() {
            self.buckets.resize(index + 1, Bucket::default());
        }
        self.buckets.get_mut(index)
    }

    /// A successful reply that arrived at `at` after `latency`.
    pub fn record_ok(&mut self, at: Instant, latency: Duration) {
        let Some(bucket) = self.bucket(at) else {
            return;
        };
        bucket.ok += 1;
        let us = u64::try_from(latency.as_micros())
            .unwrap_or(u64::MAX)
            .clamp(1, HIGHEST_US);
        let histogram = bucket.latencies.get_or_insert_with(|| {
            Histogram::new_with_bounds(1, HIGHEST_US, DIGITS)
                .expect("constant bounds 1 µs..60 s at 2 digits are valid")
        });
        histogram.saturating_record(us);
    }

    /// A wrong reply (or failed send) known at `at`.
    pub fn record_error(&mut self, at: Instant) {
        if let Some(bucket) = self.bucket(at) {
            bucket.errors += 1;
        }
    }

    /// A timeout that expired at `at`.
    pub fn record_timeout(&mut self, at: Instant) {
        if let Some(bucket) = self.bucket(at) {
            bucket.timeouts += 1;
        }
    }

    /// One row per second, empty seconds included.
    pub fn seconds(&self) -> Vec<Second> {
        let ms = |us: u64| us as f64 / 1000.0;
        self.buckets
            .iter()
            .enumerate()
            .map(|(second, b)| {
                let (p50_ms, p99_ms, max_ms) = match &b.latencies {
                    Some(h) if !h.is_empty() => (
                        ms(h.value_at_quantile(0.50)),
                        ms(h.value_at_quantile(0.99)),
                        ms(h.max()),
                    ),
                    _ => (0.0, 0.0, 0.0),
                };
                Second {
                    second,
                    ops: b.ok,
                    p50_ms,
                    p99_ms,
                    max_ms,
                    errors: b.errors,
                    timeouts: b.timeouts,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn outcomes_land_in_the_second_they_are_known() {
        let before = Instant::now();
        let origin = before + ms(10);
        let mut timeline = Timeline::new(origin, Duration::from_millis(3_500));
        timeline.record_ok(origin, ms(2)); // first instant of second 0
        timeline.record_ok(origin + ms(999), ms(4)); // last ms of second 0
        timeline.record_ok(origin + ms(1_000), ms(10)); // second 1
        timeline.record_error(origin + ms(1_500));
        timeline.record_timeout(origin + ms(2_999));
        timeline.record_ok(origin + ms(2_500), ms(100));
        // outside: before the origin, in the partial last second, long after
        timeline.record_ok(before, ms(1));
        timeline.record_ok(origin + ms(3_200), ms(1));
        timeline.record_timeout(origin + ms(60_000));
        let rows = timeline.seconds();
        assert_eq!(rows.len(), 3, "only whole seconds: 3.5 s → 3 rows");
        let counts: Vec<(u64, u64, u64)> =
            rows.iter().map(|r| (r.ops, r.errors, r.timeouts)).collect();
        assert_eq!(counts, [(2, 0, 0), (1, 1, 0), (1, 0, 1)]);
        assert_eq!(rows.iter().map(|r| r.second).collect::<Vec<_>>(), [0, 1, 2]);
        assert!((rows[0].max_ms - 4.0).abs() < 0.05, "{}", rows[0].max_ms);
        assert!((rows[0].p50_ms - 2.0).abs() < 0.05, "{}", rows[0].p50_ms);
        assert!((rows[2].max_ms - 100.0).abs() < 1.0, "{}", rows[2].max_ms);
    }

    #[test]
    fn empty_seconds_are_zero_rows() {
        let origin = Instant::now();
        let mut timeline = Timeline::new(origin, Duration::from_secs(4));
        timeline.record_ok(origin + ms(3_100), ms(7));
        let rows = timeline.seconds();
        assert_eq!(rows.len(), 4);
        for row in &rows[..3] {
            assert_eq!(
                (
                    row.ops,
                    row.p50_ms,
                    row.p99_ms,
                    row.max_ms,
                    row.errors,
                    row.timeouts
                ),
                (0, 0.0, 0.0, 0.0, 0, 0),
                "second {}",
                row.second
            );
        }
        assert_eq!(rows[3].ops, 1);
        assert!((rows[3].p99_ms - 7.0).abs() < 0.1);
        assert!(Timeline::new(origin, ms(900)).seconds().is_empty());
    }

    #[test]
    fn an_open_ended_timeline_grows_to_its_last_outcome_and_stops_at_its_limit() {
        let origin = Instant::now();
        let mut timeline = Timeline::open_ended(origin, Duration::from_secs(5));
        assert!(timeline.seconds().is_empty());
        timeline.record_ok(origin + ms(2_300), ms(3));
        timeline.record_timeout(origin + ms(4_999));
        timeline.record_ok(origin + ms(5_000), ms(1)); // past the limit
        timeline.record_error(origin + ms(60_000));
        let counts: Vec<(u64, u64, u64)> = timeline
            .seconds()
            .iter()
            .map(|r| (r.ops, r.errors, r.timeouts))
            .collect();
        assert_eq!(
            counts,
            [(0, 0, 0), (0, 0, 0), (1, 0, 0), (0, 0, 0), (0, 0, 1)]
        );
    }

    #[test]
    fn percentiles_per_second() {
        let origin = Instant::now();
        let mut timeline = Timeline::new(origin, Duration::from_secs(1));
        for i in 1..=100 {
            timeline.record_ok(origin + ms(5), ms(i));
        }
        let row = &timeline.seconds()[0];
        assert_eq!(row.ops, 100);
        assert!((row.p50_ms - 50.0).abs() < 1.0, "{}", row.p50_ms);
        assert!((row.p99_ms - 99.0).abs() < 1.0, "{}", row.p99_ms);
        assert!((row.max_ms - 100.0).abs() < 1.0, "{}", row.max_ms);
    }
}
