//! What `abuse` prints and writes: per attack, the well-behaved client's SET figures in the
//! quiet window before it and under it, the attack's own request rate and what came back, the
//! ratio of the p99 under attack to the median quiet p99 (the goal: at most 2×), and
//! the nodes' CPU per well-behaved SET; then the checks. All of it in the JSON document.

use std::fmt::Write as _;

use serde::Serialize;

use crate::abuse_attacks::{Attack, AttackStats};
use crate::node_counters::Counters;
use crate::report::{CellOutcome, Machine, ProcessMemory};
use crate::stability::CheckResult;
use crate::stats::Summary;
use crate::sustained_report::NodeLogs;

/// The goal: under every attack the well-behaved p99 stays within this factor of the
/// quiet p99.
pub const P99_GOAL_RATIO: f64 = 2.0;

/// The settings an `abuse` run used.
#[derive(Debug, Clone, Serialize)]
pub struct AbuseSettings {
    /// Statestore nodes.
    pub nodes: usize,
    /// Well-behaved connections.
    pub clients: usize,
    /// SETs outstanding per connection.
    pub in_flight: usize,
    /// Window of every quiet and attack cell, s.
    pub duration_secs: f64,
    /// Warm-up before each window, s.
    pub warmup_secs: f64,
    /// Keys the SETs pick from.
    pub keys: u64,
    /// Value size, bytes.
    pub value_size: usize,
    /// Request timeout, s.
    pub timeout_secs: f64,
    /// The attacks, in order.
    pub attacks: Vec<Attack>,
    /// Extra node arguments.
    pub node_args: Vec<String>,
    /// Smoke mode.
    pub smoke: bool,
}

/// One window of the well-behaved client.
#[derive(Debug, Clone, Serialize)]
pub struct Window {
    /// `quiet before scan`, `scan`.
    pub label: String,
    /// Its SET figures, or why there are none.
    pub outcome: CellOutcome,
    /// CPU µs of every node together per well-behaved SET.
    pub nodes_us_per_set: Option<f64>,
    /// The same per node (`node 1`, ...).
    pub per_node_us_per_set: Vec<(String, Option<f64>)>,
    /// How the nodes' dropped-request and notification counters moved.
    pub counters: Counters,
    /// The p99 counting unanswered requests as taking the whole timeout
    /// ([`p99_with_timeouts`]), ms: what the ratios use.
    pub p99_with_timeouts_ms: Option<f64>,
}

impl Window {
    fn p99(&self) -> Option<f64> {
        self.p99_with_timeouts_ms
    }
}

/// The p99 of a window in which some requests were never answered: they took at least the
/// timeout, so when they are more than 1 % of the requests the p99 is (at least) the timeout.
/// `None` without any request.
pub fn p99_with_timeouts(summary: &Summary, timeout_ms: f64) -> Option<f64> {
    let requests = summary.latency_samples + summary.timeouts;
    if requests == 0 {
        None
    } else if summary.timeouts * 100 > requests {
        Some(timeout_ms)
    } else {
        Some(summary.p99_ms)
    }
}

/// One attack: the quiet window before it, the window under it, and what it did.
#[derive(Debug, Clone, Serialize)]
pub struct AttackRow {
    /// Which.
    pub attack: Attack,
    /// The quiet window just before.
    pub quiet: Window,
    /// The window under the attack.
    pub under: Option<Window>,
    /// What the attack did (`None` if it could not start).
    pub stats: Option<AttackStats>,
    /// Why it could not run, if it could not.
    pub failure: Option<String>,
    /// p99 under the attack / the median quiet p99.
    pub p99_ratio: Option<f64>,
    /// p99 under the attack / the p99 of the quiet window just before.
    pub p99_ratio_to_preceding: Option<f64>,
}

/// The whole `abuse` document.
#[derive(Debug, Clone, Serialize)]
pub struct AbuseReport {
    /// `statestore-bench <version>`.
    pub tool: String,
    /// `abuse`.
    pub command: String,
    /// When the run started.
    pub started_unix_ms: u64,
    /// The machine.
    pub machine: Machine,
    /// Settings.
    pub settings: AbuseSettings,
    /// Cluster start to ready, s.
    pub ready_secs: f64,
    /// 1-minute load average at the start and the end.
    pub load_average: [Option<f64>; 2],
    /// The median p99 of the quiet windows, ms: the reference of every ratio.
    pub quiet_p99_median_ms: Option<f64>,
    /// One per attack.
    pub rows: Vec<AttackRow>,
    /// Node log lines per window.
    pub node_logs: Vec<NodeLogs>,
    /// Resident memory at the end.
    pub memory: Vec<ProcessMemory>,
    /// Goals.
    pub checks: Vec<CheckResult>,
    /// What failed the run (the goals do not).
    pub failures: Vec<String>,
    /// Anything else worth knowing.
    pub notes: Vec<String>,
}

/// The median of `values` (`None` when empty).
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    })
}

/// `a / b` when both are known and `b` is positive.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// Fills in every row's ratios from the quiet windows; returns the median quiet p99.
pub fn fill_ratios(rows: &mut [AttackRow]) -> Option<f64> {
    let quiet: Vec<f64> = rows.iter().filter_map(|r| r.quiet.p99()).collect();
    let reference = median(&quiet);
    for row in rows.iter_mut() {
        let under = row.under.as_ref().and_then(Window::p99);
        row.p99_ratio = ratio(under, reference);
        row.p99_ratio_to_preceding = ratio(under, row.quiet.p99());
    }
    reference
}

/// The goal per attack: the well-behaved SETs under it were all answered correctly and their
/// p99 is within [`P99_GOAL_RATIO`] of the median quiet p99.
pub fn goal_checks(rows: &[AttackRow]) -> Vec<CheckResult> {
    rows.iter()
        .map(|row| {
            let name = format!(
                "{}: well-behaved SET p99 ≤ {P99_GOAL_RATIO}× quiet",
                row.attack.name()
            );
            let summary = row.under.as_ref().and_then(|w| w.outcome.summary());
            match (summary, row.p99_ratio) {
                (Some(s), Some(r)) => CheckResult {
                    name,
                    passed: r <= P99_GOAL_RATIO && s.errors == 0 && s.timeouts == 0 && s.ops > 0,
                    detail: format!(
                        "{r:.2}× (p99 {}), {} SETs, {} errors, {} timeouts",
                        p99_text(row.under.as_ref()),
                        s.ops,
                        s.errors,
                        s.timeouts
                    ),
                },
                _ => CheckResult {
                    name,
                    passed: false,
                    detail: row
                        .failure
                        .clone()
                        .unwrap_or_else(|| "no figures".to_owned()),
                },
            }
        })
        .collect()
}

fn opt(value: Option<f64>, format: impl Fn(f64) -> String) -> String {
    value.map_or_else(|| "–".to_owned(), format)
}

fn ms(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// The p99 of a window as text: `≥ 5000 ms` when the timeouts make it.
fn p99_text(window: Option<&Window>) -> String {
    let Some(window) = window else {
        return "–".to_owned();
    };
    match (window.outcome.summary(), window.p99_with_timeouts_ms) {
        (Some(s), Some(p99)) if s.timeouts > 0 && p99 != s.p99_ms => format!("≥ {} ms", ms(p99)),
        (_, Some(p99)) => format!("{} ms", ms(p99)),
        _ => "–".to_owned(),
    }
}

/// One table row of a window.
fn window_cells(window: &Window) -> String {
    match &window.outcome {
        CellOutcome::Ran(s) => format!(
            "{} | {} | {} | {} | {} | {} | {}",
            s.ops,
            ms(s.p50_ms),
            p99_text(Some(window)).trim_end_matches(" ms"),
            ms(s.max_ms),
            s.errors,
            s.timeouts,
            opt(window.nodes_us_per_set, |u| format!("{u:.0}"))
        ),
        CellOutcome::Skipped { reason } | CellOutcome::Failed { reason } => {
            format!("failed: {reason} | | | | | |")
        }
    }
}

/// What an attack did, in a few words.
fn attack_cells(stats: Option<&AttackStats>) -> String {
    let Some(s) = stats else {
        return "– | –".to_owned();
    };
    let mut what = format!("{} answered ({} -ERR)", s.answered, s.refused);
    if s.received_elsewhere > 0 {
        let _ = write!(what, ", {} received elsewhere", s.received_elsewhere);
    }
    if s.forged_delivered > 0 {
        let _ = write!(
            what,
            ", **{} forged answers delivered**",
            s.forged_delivered
        );
    }
    format!("{:.0}/s | {what}", s.rate())
}

impl AbuseReport {
    /// The report as text: the settings, the table, the per-node CPU and the checks.
    pub fn text(&self) -> String {
        let mut out = format!("{}\n\n", self.machine.line());
        let st = &self.settings;
        let _ = writeln!(
            out,
            "abuse: statestore {} nodes + Mosquitto (ready after {:.2} s); well-behaved SET {}×{} over {} keys, {} B values; {:.0} s windows ({:.1} s warm-up), a quiet window before each attack",
            st.nodes,
            self.ready_secs,
            st.clients,
            st.in_flight,
            st.keys,
            st.value_size,
            st.duration_secs,
            st.warmup_secs
        );
        let load = |l: Option<f64>| l.map_or("?".to_owned(), |l| format!("{l:.2}"));
        let _ = writeln!(
            out,
            "machine load average (1 min): {} at the start, {} at the end, on {} CPUs",
            load(self.load_average[0]),
            load(self.load_average[1]),
            self.machine.nproc
        );
        let _ = writeln!(
            out,
            "reference: median quiet p99 {} ms\n",
            opt(self.quiet_p99_median_ms, ms)
        );
        out.push_str(
            "| window | attack rate | attack got | SETs | p50 ms | p99 ms | max ms | errors | timeouts | nodes µs/SET | p99 / quiet |\n\
             |---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for row in &self.rows {
            let _ = writeln!(
                out,
                "| {} | – | – | {} | – |",
                row.quiet.label,
                window_cells(&row.quiet)
            );
            match &row.under {
                Some(under) => {
                    let _ = writeln!(
                        out,
                        "| **{}** | {} | {} | {} |",
                        under.label,
                        attack_cells(row.stats.as_ref()),
                        window_cells(under),
                        opt(row.p99_ratio, |r| format!("**{r:.2}×**"))
                    );
                }
                None => {
                    let _ = writeln!(
                        out,
                        "| **{}** | failed: {} | | | | | | | | | |",
                        row.attack.name(),
                        row.failure.as_deref().unwrap_or("?")
                    );
                }
            }
        }
        out.push_str(
            "\nnodes CPU µs per well-behaved SET, per node (quiet before → under attack):\n",
        );
        for row in &self.rows {
            let Some(under) = &row.under else { continue };
            let per_node: Vec<String> = row
                .quiet
                .per_node_us_per_set
                .iter()
                .zip(&under.per_node_us_per_set)
                .map(|((node, quiet), (_, attack))| {
                    format!(
                        "{node} {} → {}",
                        opt(*quiet, |u| format!("{u:.0}")),
                        opt(*attack, |u| format!("{u:.0}"))
                    )
                })
                .collect();
            let _ = writeln!(out, "- {}: {}", row.attack.name(), per_node.join(", "));
        }
        out.push_str("\nnode counters under each attack (increase, all nodes):\n");
        for row in &self.rows {
            let Some(under) = &row.under else { continue };
            let moved: Vec<String> = under
                .counters
                .iter()
                .map(|(series, n)| format!("{series} +{n:.0}"))
                .collect();
            let notes = row
                .stats
                .as_ref()
                .map(|s| s.notes.join("; "))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "- {}: {}{}",
                row.attack.name(),
                if moved.is_empty() {
                    "none".to_owned()
                } else {
                    moved.join(", ")
                },
                if notes.is_empty() {
                    String::new()
                } else {
                    format!(" ({notes})")
                }
            );
        }
        out.push_str("\nchecks:\n");
        for check in &self.checks {
            let _ = writeln!(out, "- {}", check.line());
        }
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Summary;
    use std::collections::BTreeMap;

    fn window(label: &str, p99: f64, errors: u64) -> Window {
        Window {
            label: label.to_owned(),
            outcome: CellOutcome::Ran(Summary {
                ops: 100,
                throughput: 10.0,
                p50_ms: p99 / 2.0,
                p90_ms: p99,
                p99_ms: p99,
                p999_ms: p99,
                max_ms: p99,
                latency_samples: 100,
                errors,
                timeouts: 0,
                error_kinds: BTreeMap::new(),
            }),
            nodes_us_per_set: Some(100.0),
            per_node_us_per_set: vec![("node 1".to_owned(), Some(50.0))],
            counters: Counters::new(),
            p99_with_timeouts_ms: Some(p99),
        }
    }

    #[test]
    fn timeouts_make_the_p99_when_more_than_one_percent() {
        let mut s = match window("w", 3.0, 0).outcome {
            CellOutcome::Ran(s) => s,
            _ => unreachable!(),
        };
        assert_eq!(p99_with_timeouts(&s, 5000.0), Some(3.0));
        s.timeouts = 1; // 1 of 101: under 1 %
        assert_eq!(p99_with_timeouts(&s, 5000.0), Some(3.0));
        s.timeouts = 2;
        assert_eq!(p99_with_timeouts(&s, 5000.0), Some(5000.0));
        s.latency_samples = 0;
        s.timeouts = 0;
        assert_eq!(p99_with_timeouts(&s, 5000.0), None);
        s.timeouts = 8;
        assert_eq!(p99_with_timeouts(&s, 5000.0), Some(5000.0));
    }

    fn row(attack: Attack, quiet: f64, under: f64, errors: u64) -> AttackRow {
        AttackRow {
            attack,
            quiet: window("quiet", quiet, 0),
            under: Some(window(attack.name(), under, errors)),
            stats: Some(AttackStats::default()),
            failure: None,
            p99_ratio: None,
            p99_ratio_to_preceding: None,
        }
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 2.0]), Some(2.0));
    }

    #[test]
    fn ratios_are_against_the_median_quiet_p99_and_the_preceding_one() {
        let mut rows = vec![
            row(Attack::Scan, 4.0, 8.0, 0),
            row(Attack::Props, 2.0, 9.0, 0),
            row(Attack::Poison, 6.0, 3.0, 5),
        ];
        assert_eq!(fill_ratios(&mut rows), Some(4.0));
        assert_eq!(rows[0].p99_ratio, Some(2.0));
        assert_eq!(rows[1].p99_ratio, Some(2.25));
        assert_eq!(rows[1].p99_ratio_to_preceding, Some(4.5));
        assert_eq!(rows[2].p99_ratio, Some(0.75));
        let checks = goal_checks(&rows);
        assert_eq!(
            checks.iter().map(|c| c.passed).collect::<Vec<_>>(),
            vec![true, false, false],
            "2.0× passes, 2.25× fails, errors fail: {checks:?}"
        );
    }

    #[test]
    fn an_attack_that_could_not_run_fails_its_check() {
        let mut failed = row(Attack::Forged, 4.0, 4.0, 0);
        failed.under = None;
        failed.failure = Some("spy: no SUBACK".to_owned());
        let mut rows = vec![failed];
        fill_ratios(&mut rows);
        let checks = goal_checks(&rows);
        assert!(!checks[0].passed);
        assert_eq!(checks[0].detail, "spy: no SUBACK");
    }
}
