//! The steady-state verdicts of `sustained`: the median and the weakest one-second interval of
//! a timeline, the spread (median, min, max) of a figure over rounds, and the checks with their
//! goals: no second below half of the median, p99 within a second, no errors or timeouts, and
//! no timeout or ERROR lines in the node logs while measuring.

use serde::Serialize;

use crate::stats::Summary;
use crate::timeline::Second;

/// Goal: no one-second interval below this fraction of the run's median.
pub const MIN_INTERVAL_GOAL: f64 = 0.5;
/// Goal: overall p99 at most this, ms.
pub const P99_GOAL_MS: f64 = 1_000.0;

/// The median of `values` (mean of the middle two for an even count); `None` when empty. NaN
/// values are ignored.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if sorted.len().is_multiple_of(2) {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    })
}

/// How even a timeline is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stability {
    /// Seconds in the timeline.
    pub seconds: usize,
    /// Median of the per-second operation counts, ops/s.
    pub median_ops: f64,
    /// The smallest per-second count, ops/s.
    pub min_ops: u64,
    /// The (first) second with that count.
    pub min_second: usize,
    /// `min_ops / median_ops` (`None` when the median is 0).
    pub min_ratio: Option<f64>,
}

/// The median second and the weakest second of a timeline; `None` for an empty one.
pub fn stability(seconds: &[Second]) -> Option<Stability> {
    let counts: Vec<f64> = seconds.iter().map(|s| s.ops as f64).collect();
    let median_ops = median(&counts)?;
    let weakest = seconds.iter().min_by_key(|s| s.ops)?;
    Some(Stability {
        seconds: seconds.len(),
        median_ops,
        min_ops: weakest.ops,
        min_second: weakest.second,
        min_ratio: (median_ops > 0.0).then(|| weakest.ops as f64 / median_ops),
    })
}

/// Median, smallest and largest of a figure over rounds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// Median.
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// Values it is made of.
    pub n: usize,
}

impl Spread {
    /// Over the non-NaN `values`; `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let values: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
        Some(Spread {
            median: median(&values)?,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            n: values.len(),
        })
    }

    /// `median [min–max]`, each formatted by `f`.
    pub fn text(&self, f: impl Fn(f64) -> String) -> String {
        if self.n == 1 {
            f(self.median)
        } else {
            format!("{} [{}–{}]", f(self.median), f(self.min), f(self.max))
        }
    }
}

/// One verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckResult {
    /// What was checked, e.g. `statestore-3 SET 64×8 round 1: min one-second interval`.
    pub name: String,
    /// Met.
    pub passed: bool,
    /// The figure against the goal.
    pub detail: String,
}

impl CheckResult {
    /// `PASS name: detail` / `FAIL ...`.
    pub fn line(&self) -> String {
        let verdict = if self.passed { "PASS" } else { "FAIL" };
        format!("{verdict}  {}: {}", self.name, self.detail)
    }
}

/// The checks of one measured cell: the weakest second, p99, errors and timeouts.
pub fn cell_checks(
    cell: &str,
    stability: Option<&Stability>,
    summary: &Summary,
) -> Vec<CheckResult> {
    let name = format!("{cell}: min one-second interval");
    let interval = match stability {
        Some(Stability {
            min_ratio: Some(ratio),
            min_ops,
            min_second,
            median_ops,
            ..
        }) => CheckResult {
            name,
            passed: *ratio >= MIN_INTERVAL_GOAL,
            detail: format!(
                "{min_ops} ops in second {min_second} = {ratio:.2}× the median {median_ops:.0} ops/s (goal ≥ {MIN_INTERVAL_GOAL:.2}×)"
            ),
        },
        Some(s) => CheckResult {
            name,
            passed: false,
            detail: format!(
                "median 0 ops/s: at least half of the {} seconds had no successful reply",
                s.seconds
            ),
        },
        None => CheckResult {
            name,
            passed: false,
            detail: "no whole second measured".to_owned(),
        },
    };
    let p99 = CheckResult {
        name: format!("{cell}: p99"),
        passed: summary.latency_samples > 0 && summary.p99_ms <= P99_GOAL_MS,
        detail: format!(
            "{:.1} ms over {} replies (goal ≤ {P99_GOAL_MS:.0} ms)",
            summary.p99_ms, summary.latency_samples
        ),
    };
    let clean = CheckResult {
        name: format!("{cell}: errors and timeouts"),
        passed: summary.errors == 0 && summary.timeouts == 0,
        detail: format!(
            "{} errors, {} timeouts (goal 0)",
            summary.errors, summary.timeouts
        ),
    };
    vec![interval, p99, clean]
}

/// The node-log check over the measured windows.
pub fn log_check(timeout_lines: usize, error_lines: usize) -> CheckResult {
    CheckResult {
        name: "node logs while measuring".to_owned(),
        passed: timeout_lines == 0 && error_lines == 0,
        detail: format!(
            "{timeout_lines} lines mentioning a timeout, {error_lines} ERROR lines (goal 0)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn second(second: usize, ops: u64) -> Second {
        Second {
            second,
            ops,
            p50_ms: 1.0,
            p99_ms: 2.0,
            max_ms: 3.0,
            errors: 0,
            timeouts: 0,
        }
    }

    fn summary(p99_ms: f64, errors: u64, timeouts: u64) -> Summary {
        Summary {
            ops: 100,
            throughput: 10.0,
            p50_ms: 1.0,
            p90_ms: 1.0,
            p99_ms,
            p999_ms: p99_ms,
            max_ms: p99_ms,
            latency_samples: 100,
            errors,
            timeouts,
            error_kinds: BTreeMap::new(),
        }
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN]), None);
        assert_eq!(median(&[5.0]), Some(5.0));
        assert_eq!(median(&[9.0, 1.0, 5.0]), Some(5.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[1.0, f64::NAN, 3.0]), Some(2.0));
    }

    #[test]
    fn weakest_second_against_the_median() -> anyhow::Result<()> {
        let rows: Vec<Second> = [100, 110, 40, 90, 105]
            .iter()
            .enumerate()
            .map(|(i, ops)| second(i, *ops))
            .collect();
        let s = stability(&rows).ok_or_else(|| anyhow::anyhow!("non-empty"))?;
        assert_eq!(s.seconds, 5);
        assert_eq!(s.median_ops, 100.0);
        assert_eq!((s.min_ops, s.min_second), (40, 2));
        assert_eq!(s.min_ratio, Some(0.4));
        let checks = cell_checks("x", Some(&s), &summary(10.0, 0, 0));
        assert!(!checks[0].passed, "0.40× < 0.50×");
        assert!(
            checks[0]
                .line()
                .starts_with("FAIL  x: min one-second interval: 40 ops in second 2 = 0.40×")
        );
        assert!(checks[1].passed && checks[2].passed);

        // an empty second is the weakest: ratio 0
        let with_gap = [second(0, 100), second(1, 0), second(2, 100)];
        let s = stability(&with_gap).ok_or_else(|| anyhow::anyhow!("non-empty"))?;
        assert_eq!((s.min_ops, s.min_second, s.min_ratio), (0, 1, Some(0.0)));
        // exactly half passes
        let half = [second(0, 100), second(1, 50), second(2, 100)];
        let s = stability(&half).ok_or_else(|| anyhow::anyhow!("non-empty"))?;
        assert!(cell_checks("x", Some(&s), &summary(1.0, 0, 0))[0].passed);
        // nothing at all: no ratio, fails
        let idle = [second(0, 0), second(1, 0)];
        let s = stability(&idle).ok_or_else(|| anyhow::anyhow!("non-empty"))?;
        assert_eq!(s.min_ratio, None);
        let check = &cell_checks("x", Some(&s), &summary(1.0, 0, 0))[0];
        assert!(!check.passed);
        assert!(
            check.detail.starts_with("median 0 ops/s"),
            "{}",
            check.detail
        );
        assert!(stability(&[]).is_none());
        assert!(!cell_checks("x", None, &summary(1.0, 0, 0))[0].passed);
        Ok(())
    }

    #[test]
    fn p99_errors_and_logs() {
        let ok = cell_checks("c", None, &summary(1_000.0, 0, 0));
        assert!(ok[1].passed, "1000 ms is within the goal");
        let slow = cell_checks("c", None, &summary(1_000.5, 0, 0));
        assert!(!slow[1].passed);
        assert!(!cell_checks("c", None, &summary(1.0, 1, 0))[2].passed);
        assert!(!cell_checks("c", None, &summary(1.0, 0, 1))[2].passed);
        assert!(log_check(0, 0).passed);
        assert!(!log_check(1, 0).passed);
        assert!(!log_check(0, 2).passed);
    }

    #[test]
    fn spreads() -> anyhow::Result<()> {
        let s = Spread::of(&[3.0, 1.0, f64::NAN, 2.0]).ok_or_else(|| anyhow::anyhow!("values"))?;
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        assert_eq!(s.text(|v| format!("{v:.1}")), "2.0 [1.0–3.0]");
        let one = Spread::of(&[0.74]).ok_or_else(|| anyhow::anyhow!("values"))?;
        assert_eq!(one.text(|v| format!("{v:.2}")), "0.74");
        assert!(Spread::of(&[f64::NAN]).is_none());
        Ok(())
    }
}
