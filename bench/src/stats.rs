//! Counting one cell: a latency HdrHistogram (microseconds) plus success, error and timeout
//! counts, mergeable across workers and connections, and the summary (throughput and
//! percentiles in milliseconds) that the report prints.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::timeline::{Second, Timeline};

/// Highest latency the histogram holds exactly (60 s, in µs); larger values saturate.
const HIGHEST_US: u64 = 60_000_000;
/// Distinct error descriptions kept per cell (the rest are counted under `other`).
const MAX_ERROR_KINDS: usize = 16;

/// What one worker, connection or whole cell saw.
#[derive(Debug, Clone)]
pub struct CellStats {
    /// Latencies of successful requests started inside the measurement window, µs.
    pub histogram: Histogram<u64>,
    /// Successful replies received inside the measurement window.
    pub completed_in_window: u64,
    /// Successful replies in total (warm-up and drain included).
    pub succeeded: u64,
    /// Replies that were not the expected kind (or requests that could not be sent).
    pub errors: u64,
    /// Requests without a reply within the timeout.
    pub timeouts: u64,
    /// Error descriptions and how often each was seen.
    pub error_kinds: BTreeMap<String, u64>,
    /// The per-second timeline of the whole cell, when its plan asked for one (shared by all
    /// connections while running, so it is set once on the merged total, never merged).
    pub timeline: Option<Timeline>,
}

impl Default for CellStats {
    fn default() -> Self {
        CellStats::new()
    }
}

impl CellStats {
    /// Empty statistics.
    pub fn new() -> CellStats {
        CellStats {
            histogram: Histogram::new_with_bounds(1, HIGHEST_US, 3)
                .expect("constant bounds 1 µs..60 s at 3 digits are valid"),
            completed_in_window: 0,
            succeeded: 0,
            errors: 0,
            timeouts: 0,
            error_kinds: BTreeMap::new(),
            timeline: None,
        }
    }

    /// The rows of the per-second timeline (none when the plan recorded none).
    pub fn timeline_rows(&self) -> Vec<Second> {
        self.timeline
            .as_ref()
            .map(Timeline::seconds)
            .unwrap_or_default()
    }

    /// A successful request: its latency is recorded if it started inside the window, and it
    /// counts for throughput if its reply arrived inside the window.
    pub fn record_ok(&mut self, latency: Duration, started_in_window: bool, done_in_window: bool) {
        self.succeeded += 1;
        if started_in_window {
            let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
            self.histogram.saturating_record(us.clamp(1, HIGHEST_US));
        }
        if done_in_window {
            self.completed_in_window += 1;
        }
    }

    /// A wrong reply or failed request.
    pub fn record_error(&mut self, kind: &str) {
        self.errors += 1;
        self.count_kind(kind, 1);
    }

    /// A request not answered in time.
    pub fn record_timeout(&mut self) {
        self.timeouts += 1;
    }

    fn count_kind(&mut self, kind: &str, n: u64) {
        if let Some(count) = self.error_kinds.get_mut(kind) {
            *count += n;
        } else if self.error_kinds.len() < MAX_ERROR_KINDS {
            self.error_kinds.insert(kind.to_owned(), n);
        } else {
            *self.error_kinds.entry("other".to_owned()).or_default() += n;
        }
    }

    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &CellStats) {
        // both histograms have the same bounds; values beyond them were saturated on record
        if self.histogram.add(&other.histogram).is_err() {
            for v in other.histogram.iter_recorded() {
                self.histogram
                    .saturating_record_n(v.value_iterated_to(), v.count_at_value());
            }
        }
        self.completed_in_window += other.completed_in_window;
        self.succeeded += other.succeeded;
        self.errors += other.errors;
        self.timeouts += other.timeouts;
        for (kind, n) in &other.error_kinds {
            self.count_kind(kind, *n);
        }
    }

    /// Throughput over a window of `window`, and the latency percentiles.
    pub fn summary(&self, window: Duration) -> Summary {
        let h = &self.histogram;
        let ms = |us: u64| us as f64 / 1000.0;
        let q = |quantile: f64| {
            if h.is_empty() {
                0.0
            } else {
                ms(h.value_at_quantile(quantile))
            }
        };
        let secs = window.as_secs_f64();
        Summary {
            ops: self.completed_in_window,
            throughput: if secs > 0.0 {
                self.completed_in_window as f64 / secs
            } else {
                0.0
            },
            p50_ms: q(0.50),
            p90_ms: q(0.90),
            p99_ms: q(0.99),
            p999_ms: q(0.999),
            max_ms: if h.is_empty() { 0.0 } else { ms(h.max()) },
            latency_samples: h.len(),
            errors: self.errors,
            timeouts: self.timeouts,
            error_kinds: self.error_kinds.clone(),
        }
    }
}

/// The figures of one cell.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    /// Successful replies inside the window.
    pub ops: u64,
    /// `ops` per second.
    pub throughput: f64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 90th percentile, ms.
    pub p90_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// 99.9th percentile, ms.
    pub p999_ms: f64,
    /// Largest latency, ms.
    pub max_ms: f64,
    /// Latencies recorded (requests started inside the window and answered correctly).
    pub latency_samples: u64,
    /// Wrong replies.
    pub errors: u64,
    /// Unanswered requests.
    pub timeouts: u64,
    /// Error descriptions with counts.
    pub error_kinds: BTreeMap<String, u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut stats = CellStats::new();
        for i in 1..=1000 {
            stats.record_ok(Duration::from_micros(i * 10), true, true);
        }
        let s = stats.summary(Duration::from_secs(2));
        assert_eq!(s.ops, 1000);
        assert!((s.throughput - 500.0).abs() < 1e-9);
        assert!((s.p50_ms - 5.0).abs() < 0.01, "{}", s.p50_ms);
        assert!((s.p90_ms - 9.0).abs() < 0.01, "{}", s.p90_ms);
        assert!((s.p99_ms - 9.9).abs() < 0.01, "{}", s.p99_ms);
        assert!((s.p999_ms - 9.99).abs() < 0.01, "{}", s.p999_ms);
        assert!((s.max_ms - 10.0).abs() < 0.01, "{}", s.max_ms);
        assert_eq!(s.latency_samples, 1000);
    }

    #[test]
    fn merge_adds_counts_and_histograms() {
        let mut a = CellStats::new();
        let mut b = CellStats::new();
        a.record_ok(ms(1), true, true);
        a.record_ok(ms(2), false, true); // warm-up: counted for throughput only
        b.record_ok(ms(100), true, false); // drained after the window: latency only
        b.record_error("-ERR syntax error");
        b.record_error("-ERR syntax error");
        a.record_error("__stat 505");
        b.record_timeout();
        a.merge(&b);
        assert_eq!(a.succeeded, 3);
        assert_eq!(a.completed_in_window, 2);
        assert_eq!(a.histogram.len(), 2);
        assert_eq!(a.errors, 3);
        assert_eq!(a.timeouts, 1);
        assert_eq!(a.error_kinds.get("-ERR syntax error"), Some(&2));
        assert_eq!(a.error_kinds.get("__stat 505"), Some(&1));
        let s = a.summary(Duration::from_secs(1));
        assert!((s.max_ms - 100.0).abs() < 0.1, "{}", s.max_ms);
        assert!((s.p50_ms - 1.0).abs() < 0.01, "{}", s.p50_ms);
    }

    #[test]
    fn error_kinds_are_bounded() {
        let mut stats = CellStats::new();
        for i in 0..100 {
            stats.record_error(&format!("kind {i}"));
        }
        assert_eq!(stats.errors, 100);
        assert_eq!(stats.error_kinds.len(), MAX_ERROR_KINDS + 1);
        assert_eq!(
            stats.error_kinds.get("other"),
            Some(&(100 - MAX_ERROR_KINDS as u64))
        );
    }

    #[test]
    fn empty_and_huge() {
        let s = CellStats::new().summary(Duration::ZERO);
        assert_eq!(s.throughput, 0.0);
        assert_eq!(s.p99_ms, 0.0);
        let mut stats = CellStats::new();
        stats.record_ok(Duration::from_secs(3600), true, true);
        assert!(stats.summary(ms(1)).max_ms >= 59_000.0);
    }
}
