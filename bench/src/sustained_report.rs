//! What `sustained` prints and writes: the prefill, the Raft state of each node, one
//! per-second timeline table per statestore cell with its stability line and CPU table, the
//! node-log counts, the median and range over rounds per target and the statestore/baseline
//! ratios, and the PASS/FAIL checks; all of it (every timeline included) in the JSON document.

use std::fmt::Write as _;

use serde::Serialize;

use crate::cpu::{CpuReport, Role};
use crate::processes::NodeStatus;
use crate::report::{CellOutcome, Machine, ProcessMemory, us_per_op};
use crate::stability::{CheckResult, Spread, Stability};
use crate::stats::Summary;
use crate::timeline::Second;
use crate::workload::WorkloadSpec;

/// The settings a `sustained` run used.
#[derive(Debug, Clone, Serialize)]
pub struct SustainedSettings {
    /// Statestore nodes.
    pub nodes: usize,
    /// Writes before measuring.
    pub prefill: u64,
    /// Keys the measured workloads pick from.
    pub keys: u64,
    /// Value size, bytes.
    pub value_size: usize,
    /// Request timeout, s.
    pub timeout_secs: f64,
    /// Warm-up per cell, s.
    pub warmup_secs: f64,
    /// Measured window per cell, s.
    pub cell_secs: f64,
    /// Rounds.
    pub rounds: usize,
    /// Baselines kept alive next to statestore.
    pub baselines: Vec<String>,
    /// Extra node arguments.
    pub node_args: Vec<String>,
    /// Smoke mode.
    pub smoke: bool,
    /// Checks decide the exit code.
    pub strict: bool,
}

/// The writes made before measuring, on one target.
#[derive(Debug, Clone, Serialize)]
pub struct Prefill {
    /// `statestore-3` or `etcd`.
    pub target: String,
    /// Writes asked for.
    pub writes: u64,
    /// Connections × in-flight.
    pub concurrency: String,
    /// From the first request to the last reply, s.
    pub secs: f64,
    /// Replies per second; latency; errors.
    pub latency: Summary,
}

/// A node's Raft state at one point of the run.
#[derive(Debug, Clone, Serialize)]
pub struct NodeRaft {
    /// 1-based node.
    pub node: usize,
    /// `/admin/status` (None if it did not answer).
    pub status: Option<NodeStatus>,
}

/// One measured cell.
#[derive(Debug, Clone, Serialize)]
pub struct SustainedCell {
    /// 1-based round.
    pub round: usize,
    /// `statestore-3`, `floor`, `etcd`.
    pub target: String,
    /// Mix and concurrency.
    pub workload: WorkloadSpec,
    /// Figures over the window, or why there are none.
    pub outcome: CellOutcome,
    /// Median and weakest second.
    pub stability: Option<Stability>,
    /// One row per second of the window.
    pub timeline: Vec<Second>,
    /// CPU per process over the window.
    pub cpu: Option<CpuReport>,
}

impl SustainedCell {
    /// `statestore-3 SET 64×8, round 1`.
    pub fn label(&self) -> String {
        format!("{} {}, round {}", self.target, self.workload, self.round)
    }

    fn summary(&self) -> Option<&Summary> {
        self.outcome.summary()
    }

    fn store_us_per_op(&self) -> Option<f64> {
        self.cpu.as_ref().and_then(CpuReport::store_us_per_op)
    }
}

/// A target × workload over its rounds.
#[derive(Debug, Clone, Serialize)]
pub struct Aggregate {
    /// Target.
    pub target: String,
    /// Workload.
    pub workload: WorkloadSpec,
    /// Rounds that produced figures.
    pub rounds: usize,
    /// ops/s.
    pub throughput: Option<Spread>,
    /// p50, ms.
    pub p50_ms: Option<Spread>,
    /// p99, ms.
    pub p99_ms: Option<Spread>,
    /// Store CPU µs/op (nodes, members or echo responder summed).
    pub store_us_per_op: Option<Spread>,
    /// Mosquitto CPU µs/op.
    pub broker_us_per_op: Option<Spread>,
    /// Load generator CPU µs/op.
    pub load_generator_us_per_op: Option<Spread>,
    /// Weakest second / median second.
    pub min_interval_ratio: Option<Spread>,
}

/// statestore / a baseline, computed per round and summarised over rounds.
#[derive(Debug, Clone, Serialize)]
pub struct RoundRatio {
    /// The statestore target.
    pub target: String,
    /// `etcd` or `floor`.
    pub baseline: String,
    /// Workload.
    pub workload: WorkloadSpec,
    /// Throughput ratio.
    pub throughput: Option<Spread>,
    /// p50 ratio.
    pub p50: Option<Spread>,
    /// p99 ratio.
    pub p99: Option<Spread>,
    /// Store CPU µs/op ratio.
    pub store_us_per_op: Option<Spread>,
}

/// Log lines of one node in one phase.
#[derive(Debug, Clone, Serialize)]
pub struct NodeLogs {
    /// 1-based node.
    pub node: usize,
    /// `prefill` or `measured`.
    pub phase: String,
    /// Lines mentioning a timeout.
    pub timeout_lines: usize,
    /// WARN lines.
    pub warn_lines: usize,
    /// ERROR lines.
    pub error_lines: usize,
    /// A few distinct examples.
    pub examples: Vec<String>,
}

/// The whole `sustained` document.
#[derive(Debug, Clone, Serialize)]
pub struct SustainedReport {
    /// `statestore-bench <version>`.
    pub tool: String,
    /// `sustained`.
    pub command: String,
    /// Start, ms since the Unix epoch.
    pub started_unix_ms: u64,
    /// Machine.
    pub machine: Machine,
    /// Settings.
    pub settings: SustainedSettings,
    /// Cluster start to ready, s.
    pub ready_secs: f64,
    /// The machine's 1-minute load average when the run started and when it ended (the
    /// machine may be shared: a high one means other work competed for the CPUs).
    pub load_average: [Option<f64>; 2],
    /// The prefill of statestore (and etcd).
    pub prefill: Vec<Prefill>,
    /// Raft state after the prefill.
    pub raft_after_prefill: Vec<NodeRaft>,
    /// Raft state at the end.
    pub raft_at_end: Vec<NodeRaft>,
    /// Every cell in the order run.
    pub cells: Vec<SustainedCell>,
    /// Per target × workload over rounds.
    pub aggregates: Vec<Aggregate>,
    /// statestore / baselines over rounds.
    pub ratios: Vec<RoundRatio>,
    /// Node log counts.
    pub node_logs: Vec<NodeLogs>,
    /// Verdicts.
    pub checks: Vec<CheckResult>,
    /// RSS at the end.
    pub memory: Vec<ProcessMemory>,
    /// Anything odd.
    pub notes: Vec<String>,
}

/// Every target × workload over its rounds, in first-run order.
pub fn aggregates(cells: &[SustainedCell]) -> Vec<Aggregate> {
    let mut keys: Vec<(String, WorkloadSpec)> = Vec::new();
    for c in cells {
        let key = (c.target.clone(), c.workload);
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys.into_iter()
        .map(|(target, workload)| {
            let ran: Vec<&SustainedCell> = cells
                .iter()
                .filter(|c| c.target == target && c.workload == workload && c.summary().is_some())
                .collect();
            let spread = |f: &dyn Fn(&SustainedCell) -> Option<f64>| {
                Spread::of(&ran.iter().filter_map(|c| f(c)).collect::<Vec<_>>())
            };
            let role = |role: Role| {
                move |c: &SustainedCell| {
                    c.cpu
                        .as_ref()
                        .and_then(|cpu| cpu.total(role))
                        .and_then(|f| f.us_per_op)
                }
            };
            Aggregate {
                rounds: ran.len(),
                throughput: spread(&|c| c.summary().map(|s| s.throughput)),
                p50_ms: spread(&|c| c.summary().map(|s| s.p50_ms)),
                p99_ms: spread(&|c| c.summary().map(|s| s.p99_ms)),
                store_us_per_op: spread(&role(Role::Store)),
                broker_us_per_op: spread(&role(Role::Broker)),
                load_generator_us_per_op: spread(&role(Role::LoadGenerator)),
                min_interval_ratio: spread(&|c| c.stability.as_ref().and_then(|s| s.min_ratio)),
                target,
                workload,
            }
        })
        .collect()
}

/// For each baseline and workload: the ratio `target / baseline` of each round in which both
/// produced figures, summarised over rounds.
pub fn round_ratios(cells: &[SustainedCell], target: &str, baselines: &[&str]) -> Vec<RoundRatio> {
    let mut out = Vec::new();
    let mut workloads: Vec<WorkloadSpec> = Vec::new();
    for c in cells.iter().filter(|c| c.target == target) {
        if !workloads.contains(&c.workload) {
            workloads.push(c.workload);
        }
    }
    let div = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    for baseline in baselines {
        for workload in &workloads {
            let pairs: Vec<(&SustainedCell, &SustainedCell)> = cells
                .iter()
                .filter(|c| c.target == target && c.workload == *workload)
                .filter_map(|ours| {
                    cells
                        .iter()
                        .find(|b| {
                            b.target == *baseline
                                && b.workload == *workload
                                && b.round == ours.round
                        })
                        .map(|theirs| (ours, theirs))
                })
                .filter(|(a, b)| a.summary().is_some() && b.summary().is_some())
                .collect();
            if pairs.is_empty() {
                continue;
            }
            let ratio = |f: &dyn Fn(&SustainedCell) -> Option<f64>| {
                let values: Vec<f64> = pairs
                    .iter()
                    .filter_map(|(a, b)| Some(div(f(a)?, f(b)?)))
                    .collect();
                Spread::of(&values)
            };
            out.push(RoundRatio {
                target: target.to_owned(),
                baseline: (*baseline).to_owned(),
                workload: *workload,
                throughput: ratio(&|c| c.summary().map(|s| s.throughput)),
                p50: ratio(&|c| c.summary().map(|s| s.p50_ms)),
                p99: ratio(&|c| c.summary().map(|s| s.p99_ms)),
                store_us_per_op: ratio(&SustainedCell::store_us_per_op),
            });
        }
    }
    out
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

fn spread_text(spread: Option<&Spread>, f: impl Fn(f64) -> String) -> String {
    spread.map_or("–".to_owned(), |s| s.text(f))
}

/// The per-second table.
pub fn timeline_table(seconds: &[Second]) -> String {
    let mut out = String::from(
        "| s | ops | p50 ms | p99 ms | max ms | errors | timeouts |\n|--:|--:|--:|--:|--:|--:|--:|\n",
    );
    for s in seconds {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            s.second,
            s.ops,
            ms(s.p50_ms),
            ms(s.p99_ms),
            ms(s.max_ms),
            s.errors,
            s.timeouts
        );
    }
    out
}

/// The name of the per-role store total for a target.
fn store_total_label(target: &str) -> &'static str {
    if target.starts_with("statestore") {
        "nodes total"
    } else if target == "etcd" {
        "etcd members total"
    } else if target == "floor" {
        "echo responder"
    } else {
        "store total"
    }
}

/// The CPU table of one window: every process, the store total after the store processes.
pub fn cpu_table(cpu: &CpuReport, target: &str) -> String {
    let mut out = String::from("| process | CPU s | cores | µs/op |\n|---|--:|--:|--:|\n");
    let mut row = |name: &str, figure: Option<&crate::cpu::CpuFigure>| {
        let (secs, cores) = figure.map_or(("–".to_owned(), "–".to_owned()), |f| {
            (format!("{:.2}", f.cpu_secs), format!("{:.2}", f.cores))
        });
        let _ = writeln!(out, "| {name} | {secs} | {cores} | {} |", us_per_op(figure));
    };
    for p in cpu.processes.iter().filter(|p| p.role == Role::Store) {
        row(&p.process, p.cpu.as_ref());
    }
    if cpu.count(Role::Store) > 1 {
        row(store_total_label(target), cpu.total(Role::Store));
    }
    for p in cpu.processes.iter().filter(|p| p.role != Role::Store) {
        row(&p.process, p.cpu.as_ref());
    }
    let cores = |c: Option<f64>| c.map_or("–".to_owned(), |c| format!("{c:.2}"));
    let _ = writeln!(
        out,
        "| other processes on the machine | – | {} | – |\n| machine busy (all processes) | – | {} | – |",
        cores(cpu.other_cores),
        cores(cpu.machine_busy_cores)
    );
    out
}

/// One line about a cell's figures.
fn cell_line(cell: &SustainedCell) -> String {
    match &cell.outcome {
        CellOutcome::Ran(s) => {
            let stability = cell.stability.as_ref().map_or(String::new(), |st| {
                format!(
                    "; per second: median {:.0} ops/s, min {} in second {} ({})",
                    st.median_ops,
                    st.min_ops,
                    st.min_second,
                    st.min_ratio
                        .map_or("the median is 0".to_owned(), |r| format!(
                            "{r:.2}× the median"
                        ))
                )
            });
            let store = cell.cpu.as_ref().map_or(String::new(), |c| {
                format!(
                    "; {} CPU {} µs/op",
                    store_total_label(&cell.target),
                    us_per_op(c.total(Role::Store))
                )
            });
            format!(
                "{:.0} ops/s over the window{stability}; p50 {} ms, p99 {} ms, p99.9 {} ms, max {} ms; {} errors, {} timeouts{store}",
                s.throughput,
                ms(s.p50_ms),
                ms(s.p99_ms),
                ms(s.p999_ms),
                ms(s.max_ms),
                s.errors,
                s.timeouts
            )
        }
        CellOutcome::Skipped { reason } => format!("skipped: {reason}"),
        CellOutcome::Failed { reason } => format!("FAILED: {reason}"),
    }
}

fn raft_line(nodes: &[NodeRaft]) -> String {
    let opt = |v: Option<u64>| v.map_or("none".to_owned(), |v| v.to_string());
    nodes
        .iter()
        .map(|n| match &n.status {
            Some(s) => format!(
                "node {} {} log {} applied {} snapshot {} purged {} keys {}",
                n.node,
                s.state,
                opt(s.last_log_index),
                opt(s.applied_index),
                opt(s.snapshot_index),
                opt(s.purged_index),
                s.keys
            ),
            None => format!("node {} no status", n.node),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

impl SustainedReport {
    /// Everything printed for a person.
    pub fn text(&self) -> String {
        let mut out = format!("{}\n\n", self.machine.line());
        let st = &self.settings;
        let _ = writeln!(
            out,
            "sustained: statestore {} nodes + Mosquitto (ready after {:.2} s){}; {} round(s) of {:.0} s windows after {:.1} s warm-up; keys {}, values {} B",
            st.nodes,
            self.ready_secs,
            if st.baselines.is_empty() {
                String::new()
            } else {
                format!(", alternating with {}", st.baselines.join(", "))
            },
            st.rounds,
            st.cell_secs,
            st.warmup_secs,
            st.keys,
            st.value_size
        );
        let load = |l: Option<f64>| l.map_or("?".to_owned(), |l| format!("{l:.2}"));
        let _ = writeln!(
            out,
            "machine load average (1 min): {} at the start, {} at the end, on {} CPUs",
            load(self.load_average[0]),
            load(self.load_average[1]),
            self.machine.nproc
        );
        for p in &self.prefill {
            let l = &p.latency;
            let _ = writeln!(
                out,
                "prefill {}: {} SETs at {} in {:.1} s = {:.0} ops/s; p50 {} ms, p99 {} ms, max {} ms; {} errors, {} timeouts",
                p.target,
                p.writes,
                p.concurrency,
                p.secs,
                l.throughput,
                ms(l.p50_ms),
                ms(l.p99_ms),
                ms(l.max_ms),
                l.errors,
                l.timeouts
            );
        }
        if !self.raft_after_prefill.is_empty() {
            let _ = writeln!(
                out,
                "raft after prefill: {}",
                raft_line(&self.raft_after_prefill)
            );
        }
        for cell in &self.cells {
            let _ = writeln!(out, "\n### {} ({:.0} s)\n", cell.label(), st.cell_secs);
            if cell.target.starts_with("statestore") && !cell.timeline.is_empty() {
                out.push_str(&timeline_table(&cell.timeline));
                out.push('\n');
            }
            let _ = writeln!(out, "{}", cell_line(cell));
            if let Some(cpu) = &cell.cpu {
                let _ = writeln!(
                    out,
                    "\nCPU over the window ({:.1} s, {} acknowledged ops):\n",
                    cpu.wall_secs, cpu.ops
                );
                out.push_str(&cpu_table(cpu, &cell.target));
            }
        }
        if !self.raft_at_end.is_empty() {
            let _ = writeln!(out, "\nraft at the end: {}", raft_line(&self.raft_at_end));
        }
        if !self.node_logs.is_empty() {
            out.push_str(
                "\nNode log lines (timeout: any line mentioning a timeout):\n\n\
                 | node | phase | timeout | WARN | ERROR |\n|--:|---|--:|--:|--:|\n",
            );
            for l in &self.node_logs {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} |",
                    l.node, l.phase, l.timeout_lines, l.warn_lines, l.error_lines
                );
            }
            for l in self.node_logs.iter().filter(|l| !l.examples.is_empty()) {
                for e in &l.examples {
                    let _ = writeln!(out, "- node {} ({}): `{e}`", l.node, l.phase);
                }
            }
        }
        if self.aggregates.iter().any(|a| a.rounds > 1) || !self.ratios.is_empty() {
            out.push_str(
                "\nOver rounds, median [min–max]:\n\n\
                 | target | workload | rounds | ops/s | p50 ms | p99 ms | min second / median | store CPU µs/op | mosquitto µs/op | load generator µs/op |\n\
                 |---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n",
            );
            let f0 = |v: f64| format!("{v:.0}");
            let us = |v: f64| {
                if v >= 100.0 {
                    format!("{v:.0}")
                } else {
                    format!("{v:.1}")
                }
            };
            let f2 = |v: f64| format!("{v:.2}");
            for a in &self.aggregates {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    a.target,
                    a.workload,
                    a.rounds,
                    spread_text(a.throughput.as_ref(), f0),
                    spread_text(a.p50_ms.as_ref(), ms),
                    spread_text(a.p99_ms.as_ref(), ms),
                    spread_text(a.min_interval_ratio.as_ref(), f2),
                    spread_text(a.store_us_per_op.as_ref(), us),
                    spread_text(a.broker_us_per_op.as_ref(), us),
                    spread_text(a.load_generator_us_per_op.as_ref(), us),
                );
            }
        }
        if !self.ratios.is_empty() {
            out.push_str(
                "\nRatios per round, median [min–max] (throughput: higher is better for statestore; the rest: lower is better):\n\n\
                 | ratio | workload | ops/s | p50 | p99 | store CPU µs/op |\n|---|---|--:|--:|--:|--:|\n",
            );
            let x = |v: f64| format!("{v:.2}×");
            for r in &self.ratios {
                let _ = writeln!(
                    out,
                    "| {} / {} | {} | {} | {} | {} | {} |",
                    r.target,
                    r.baseline,
                    r.workload,
                    spread_text(r.throughput.as_ref(), x),
                    spread_text(r.p50.as_ref(), x),
                    spread_text(r.p99.as_ref(), x),
                    spread_text(r.store_us_per_op.as_ref(), x),
                );
            }
        }
        if !self.memory.is_empty() {
            out.push_str("\nRSS at the end:\n");
            out.push_str(&crate::report::memory_lines(&self.memory));
        }
        if !self.notes.is_empty() {
            out.push_str("\nNotes:\n");
            for note in &self.notes {
                let _ = writeln!(out, "- {note}");
            }
        }
        out.push_str("\nChecks (goals; --strict makes them decide the exit code):\n");
        for check in &self.checks {
            let _ = writeln!(out, "{}", check.line());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::{CpuFigure, ProcessCpu};
    use crate::workload::Mix;
    use std::collections::BTreeMap;

    fn summary(throughput: f64, p99_ms: f64) -> Summary {
        Summary {
            ops: throughput as u64,
            throughput,
            p50_ms: p99_ms / 4.0,
            p90_ms: p99_ms / 2.0,
            p99_ms,
            p999_ms: p99_ms,
            max_ms: p99_ms,
            latency_samples: 10,
            errors: 0,
            timeouts: 0,
            error_kinds: BTreeMap::new(),
        }
    }

    fn cpu(store_us: f64) -> CpuReport {
        let figure = CpuFigure {
            cpu_secs: 1.0,
            cores: 0.1,
            us_per_op: Some(store_us),
        };
        CpuReport {
            wall_secs: 10.0,
            ops: 1000,
            clock_ticks_per_sec: 100,
            processes: vec![
                ProcessCpu {
                    process: "node 1".to_owned(),
                    role: Role::Store,
                    cpu: Some(figure),
                },
                ProcessCpu {
                    process: "node 2".to_owned(),
                    role: Role::Store,
                    cpu: None,
                },
                ProcessCpu {
                    process: "load generator".to_owned(),
                    role: Role::LoadGenerator,
                    cpu: Some(figure),
                },
            ],
            totals: [(Role::Store, figure), (Role::LoadGenerator, figure)]
                .into_iter()
                .collect(),
            machine_busy_cores: Some(1.5),
            other_cores: Some(1.3),
        }
    }

    fn cell(round: usize, target: &str, throughput: f64, p99: f64, store_us: f64) -> SustainedCell {
        SustainedCell {
            round,
            target: target.to_owned(),
            workload: WorkloadSpec {
                mix: Mix::Set,
                clients: 64,
                in_flight: 8,
            },
            outcome: CellOutcome::Ran(summary(throughput, p99)),
            stability: None,
            timeline: Vec::new(),
            cpu: Some(cpu(store_us)),
        }
    }

    fn rounds() -> Vec<SustainedCell> {
        vec![
            cell(1, "statestore-3", 6000.0, 200.0, 100.0),
            cell(1, "etcd", 8000.0, 100.0, 50.0),
            cell(2, "statestore-3", 7000.0, 150.0, 90.0),
            cell(2, "etcd", 7000.0, 150.0, 60.0),
            cell(3, "statestore-3", 9000.0, 100.0, 80.0),
            SustainedCell {
                outcome: CellOutcome::Failed {
                    reason: "etcd died".to_owned(),
                },
                cpu: None,
                ..cell(3, "etcd", 0.0, 0.0, 0.0)
            },
        ]
    }

    #[test]
    fn aggregates_over_rounds() -> anyhow::Result<()> {
        let aggregates = aggregates(&rounds());
        assert_eq!(aggregates.len(), 2);
        let ours = &aggregates[0];
        assert_eq!((ours.target.as_str(), ours.rounds), ("statestore-3", 3));
        let t = ours
            .throughput
            .ok_or_else(|| anyhow::anyhow!("throughput"))?;
        assert_eq!((t.median, t.min, t.max), (7000.0, 6000.0, 9000.0));
        let cpu = ours.store_us_per_op.ok_or_else(|| anyhow::anyhow!("cpu"))?;
        assert_eq!(cpu.median, 90.0);
        assert!(ours.broker_us_per_op.is_none(), "no broker process");
        assert_eq!(aggregates[1].rounds, 2, "the failed etcd round is left out");
        Ok(())
    }

    #[test]
    fn ratios_pair_cells_of_the_same_round() -> anyhow::Result<()> {
        let ratios = round_ratios(&rounds(), "statestore-3", &["etcd", "floor"]);
        assert_eq!(ratios.len(), 1, "no floor cells");
        let r = &ratios[0];
        let t = r.throughput.ok_or_else(|| anyhow::anyhow!("throughput"))?;
        // round 1: 0.75, round 2: 1.0; round 3 has no etcd figures
        assert_eq!(t.n, 2);
        assert!((t.min - 0.75).abs() < 1e-9 && (t.max - 1.0).abs() < 1e-9);
        assert!((t.median - 0.875).abs() < 1e-9);
        let p99 = r.p99.ok_or_else(|| anyhow::anyhow!("p99"))?;
        assert!((p99.min - 1.0).abs() < 1e-9 && (p99.max - 2.0).abs() < 1e-9);
        let c = r.store_us_per_op.ok_or_else(|| anyhow::anyhow!("cpu"))?;
        assert!((c.max - 2.0).abs() < 1e-9 && (c.min - 1.5).abs() < 1e-9);
        Ok(())
    }

    #[test]
    fn tables() {
        let seconds = vec![
            Second {
                second: 0,
                ops: 6000,
                p50_ms: 70.0,
                p99_ms: 180.5,
                max_ms: 201.0,
                errors: 0,
                timeouts: 0,
            },
            Second {
                second: 1,
                ops: 0,
                p50_ms: 0.0,
                p99_ms: 0.0,
                max_ms: 0.0,
                errors: 1,
                timeouts: 2,
            },
        ];
        let table = timeline_table(&seconds);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[2], "| 0 | 6000 | 70.0 | 180 | 201 | 0 | 0 |");
        assert_eq!(lines[3], "| 1 | 0 | 0.00 | 0.00 | 0.00 | 1 | 2 |");
        let table = cpu_table(&cpu(123.4), "statestore-3");
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[2..],
            [
                "| node 1 | 1.00 | 0.10 | 123 |",
                "| node 2 | – | – | – |",
                "| nodes total | 1.00 | 0.10 | 123 |",
                "| load generator | 1.00 | 0.10 | 123 |",
                "| other processes on the machine | – | 1.30 | – |",
                "| machine busy (all processes) | – | 1.50 | – |",
            ]
        );
        assert!(!cpu_table(&cpu(1.0), "etcd").contains("nodes total"));
        assert!(cpu_table(&cpu(1.0), "etcd").contains("etcd members total"));
    }
}
