//! Presenting results: the markdown comparison table, the CPU-per-operation table, the
//! statestore/etcd and statestore/floor ratios under them, the machine description (CPU,
//! kernel, tool versions) and the JSON document with all of it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::Serialize;

use crate::cpu::{CpuFigure, CpuReport, Role};
use crate::stats::Summary;
use crate::workload::WorkloadSpec;

/// The result of one (target, workload) cell.
#[derive(Debug, Clone, Serialize)]
pub struct CellResult {
    /// `floor`, `etcd`, `statestore-1`, `statestore-3`, ...
    pub target: String,
    /// Mix and concurrency.
    pub workload: WorkloadSpec,
    /// What happened.
    pub outcome: CellOutcome,
    /// CPU per process over the measured window, when it ran and could be sampled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuReport>,
}

/// Ran, skipped or failed.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum CellOutcome {
    /// Figures.
    Ran(Summary),
    /// Not run, e.g. etcd not installed.
    Skipped {
        /// Why.
        reason: String,
    },
    /// The target could not be started or the load could not run.
    Failed {
        /// Why.
        reason: String,
    },
}

impl CellOutcome {
    /// The figures, if the cell ran.
    pub fn summary(&self) -> Option<&Summary> {
        match self {
            CellOutcome::Ran(summary) => Some(summary),
            _ => None,
        }
    }
}

impl CellResult {
    /// The figures, if it ran.
    pub fn summary(&self) -> Option<&Summary> {
        self.outcome.summary()
    }

    /// Why this cell fails a smoke run, if it does: errors, timeouts, no throughput, or not run
    /// for another reason than being skipped.
    pub fn smoke_failure(&self) -> Option<String> {
        let name = format!("{} {}", self.target, self.workload);
        match &self.outcome {
            CellOutcome::Ran(s) if s.errors > 0 || s.timeouts > 0 => Some(format!(
                "{name}: {} errors, {} timeouts {:?}",
                s.errors, s.timeouts, s.error_kinds
            )),
            CellOutcome::Ran(s) if s.ops == 0 || s.throughput <= 0.0 => {
                Some(format!("{name}: zero throughput"))
            }
            CellOutcome::Ran(_) | CellOutcome::Skipped { .. } => None,
            CellOutcome::Failed { reason } => Some(format!("{name}: failed: {reason}")),
        }
    }
}

/// A milliseconds cell.
fn ms(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// The comparison as a markdown table.
pub fn markdown_table(results: &[CellResult]) -> String {
    let mut out = String::from(
        "| target | workload | clients×in-flight | throughput ops/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | errors | timeouts |\n\
         |---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n",
    );
    for r in results {
        let head = format!(
            "| {} | {} | {} ",
            r.target,
            r.workload.mix.label(),
            r.workload.concurrency()
        );
        let tail = match &r.outcome {
            CellOutcome::Ran(s) => format!(
                "| {:.0} | {} | {} | {} | {} | {} | {} | {} |",
                s.throughput,
                ms(s.p50_ms),
                ms(s.p90_ms),
                ms(s.p99_ms),
                ms(s.p999_ms),
                ms(s.max_ms),
                s.errors,
                s.timeouts
            ),
            CellOutcome::Skipped { reason } => {
                format!("| skipped ({reason}) | – | – | – | – | – | – | – |")
            }
            CellOutcome::Failed { reason } => {
                let first_line = reason.lines().next().unwrap_or_default();
                format!(
                    "| FAILED: {} | – | – | – | – | – | – | – |",
                    first_line.replace('|', "/")
                )
            }
        };
        out.push_str(&head);
        out.push_str(&tail);
        out.push('\n');
    }
    out
}

/// A µs/op figure, or `–`.
pub fn us_per_op(figure: Option<&CpuFigure>) -> String {
    match figure.and_then(|f| f.us_per_op) {
        Some(us) if us >= 100.0 => format!("{us:.0}"),
        Some(us) => format!("{us:.1}"),
        None => "–".to_owned(),
    }
}

/// The CPU per acknowledged operation of every cell that has it, as a markdown table: the
/// store (statestore nodes, etcd members or the floor's echo responder, summed), Mosquitto,
/// the load generator, and each store process on its own.
pub fn cpu_table(results: &[CellResult]) -> String {
    let mut out = String::from(
        "| target | workload | clients×in-flight | store µs/op | store cores | mosquitto µs/op | load generator µs/op | other processes, cores | per store process µs/op |\n\
         |---|---|---|--:|--:|--:|--:|--:|---|\n",
    );
    let mut rows = 0;
    for r in results {
        let Some(cpu) = &r.cpu else { continue };
        rows += 1;
        let store = cpu.total(Role::Store);
        let per_process: Vec<String> = cpu
            .processes
            .iter()
            .filter(|p| p.role == Role::Store)
            .map(|p| format!("{} {}", p.process, us_per_op(p.cpu.as_ref())))
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.target,
            r.workload.mix.label(),
            r.workload.concurrency(),
            us_per_op(store),
            store.map_or("–".to_owned(), |f| format!("{:.2}", f.cores)),
            us_per_op(cpu.total(Role::Broker)),
            us_per_op(cpu.total(Role::LoadGenerator)),
            cpu.other_cores
                .map_or("–".to_owned(), |c| format!("{c:.2}")),
            per_process.join(", ")
        );
    }
    if rows == 0 { String::new() } else { out }
}

/// One ratio line: a statestore target against a baseline on one workload.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Ratio {
    /// Workload.
    pub workload: WorkloadSpec,
    /// The statestore target.
    pub target: String,
    /// `etcd` or `floor`.
    pub baseline: String,
    /// target throughput / baseline throughput.
    pub throughput: f64,
    /// target p50 / baseline p50.
    pub p50: f64,
    /// target p99 / baseline p99.
    pub p99: f64,
}

/// Ratios of every `statestore*` target to `etcd` and to `floor`, per workload, where both ran.
pub fn ratios(results: &[CellResult]) -> Vec<Ratio> {
    let find = |target: &str, workload: &WorkloadSpec| {
        results
            .iter()
            .find(|r| r.target == target && &r.workload == workload)
            .and_then(CellResult::summary)
    };
    let div = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    let mut out = Vec::new();
    for r in results
        .iter()
        .filter(|r| r.target.starts_with("statestore"))
    {
        let Some(s) = r.summary() else { continue };
        for baseline in ["etcd", "floor"] {
            if let Some(b) = find(baseline, &r.workload) {
                out.push(Ratio {
                    workload: r.workload,
                    target: r.target.clone(),
                    baseline: baseline.to_owned(),
                    throughput: div(s.throughput, b.throughput),
                    p50: div(s.p50_ms, b.p50_ms),
                    p99: div(s.p99_ms, b.p99_ms),
                });
            }
        }
    }
    out
}

/// The ratio lines printed under the table.
pub fn ratio_lines(ratios: &[Ratio]) -> String {
    let mut out = String::new();
    for r in ratios {
        let _ = writeln!(
            out,
            "- {} / {}, {}: throughput {:.2}×, p50 {:.2}×, p99 {:.2}×",
            r.target, r.baseline, r.workload, r.throughput, r.p50, r.p99
        );
    }
    out
}

/// Error descriptions seen per cell, for the lines under the table.
pub fn error_lines(results: &[CellResult]) -> String {
    let mut out = String::new();
    for r in results {
        if let Some(s) = r.summary().filter(|s| !s.error_kinds.is_empty()) {
            let kinds: Vec<String> = s
                .error_kinds
                .iter()
                .map(|(kind, n)| format!("{n}× `{kind}`"))
                .collect();
            let _ = writeln!(out, "- {} {}: {}", r.target, r.workload, kinds.join(", "));
        }
        if let CellOutcome::Failed { reason } = &r.outcome {
            let _ = writeln!(out, "- {} {}: failed: {reason}", r.target, r.workload);
        }
    }
    out
}

/// The machine the figures come from.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// Logical CPUs available.
    pub nproc: usize,
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
    /// Kernel release.
    pub kernel: String,
    /// `MemTotal`, KiB.
    pub memory_kib: Option<u64>,
    /// Versions of the programs involved.
    pub tools: BTreeMap<String, String>,
}

impl Machine {
    /// Reads /proc; `tools` are the versions the caller found.
    pub fn collect(tools: BTreeMap<String, String>) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        Machine {
            nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model: cpu_model(&cpuinfo).unwrap_or_else(|| "unknown".to_owned()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|k| k.trim().to_owned())
                .unwrap_or_else(|_| "unknown".to_owned()),
            memory_kib: meminfo
                .lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse().ok()),
            tools,
        }
    }

    /// One line for the top of the printed report.
    pub fn line(&self) -> String {
        let tools: Vec<String> = self
            .tools
            .iter()
            .map(|(name, version)| format!("{name}: {version}"))
            .collect();
        format!(
            "machine: {} CPUs ({}), kernel {}, {} MiB; {}",
            self.nproc,
            self.cpu_model,
            self.kernel,
            self.memory_kib.unwrap_or_default() / 1024,
            tools.join("; ")
        )
    }
}

fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, model)| model.trim().to_owned())
}

/// Memory of one process after a target's cells.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessMemory {
    /// Target.
    pub target: String,
    /// Process, e.g. `node 1`, `mosquitto`, `etcd m2`.
    pub process: String,
    /// VmRSS, KiB.
    pub rss_kib: Option<u64>,
}

/// The lines listing process memory.
pub fn memory_lines(memory: &[ProcessMemory]) -> String {
    let mut out = String::new();
    let mut targets: Vec<&str> = memory.iter().map(|m| m.target.as_str()).collect();
    targets.dedup();
    for target in targets {
        let parts: Vec<String> = memory
            .iter()
            .filter(|m| m.target == target)
            .map(|m| match m.rss_kib {
                Some(kib) => format!("{} {:.1} MiB", m.process, kib as f64 / 1024.0),
                None => format!("{} –", m.process),
            })
            .collect();
        let _ = writeln!(out, "- {target}: {}", parts.join(", "));
    }
    out
}

/// Settings a run used, for the JSON document.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    /// Measurement window per cell, seconds.
    pub duration_secs: f64,
    /// Warm-up per cell, seconds.
    pub warmup_secs: f64,
    /// Keys the workloads pick from.
    pub keys: u64,
    /// Value size, bytes.
    pub value_size: usize,
    /// Request timeout, seconds.
    pub timeout_secs: f64,
    /// Smoke mode.
    pub smoke: bool,
}

/// The whole JSON document of `compare` / `run`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `statestore-bench <version>`.
    pub tool: String,
    /// Subcommand.
    pub command: String,
    /// Start time, ms since the Unix epoch.
    pub started_unix_ms: u64,
    /// Settings.
    pub settings: Settings,
    /// Machine.
    pub machine: Machine,
    /// Every cell.
    pub results: Vec<CellResult>,
    /// Ratios.
    pub ratios: Vec<Ratio>,
    /// Process memory per target.
    pub memory: Vec<ProcessMemory>,
    /// Anything odd noticed besides the figures (failed preloads, exited processes, warnings).
    pub notes: Vec<String>,
}

impl Report {
    /// Everything printed for a person.
    pub fn text(&self) -> String {
        let mut out = format!(
            "{}\n\n{}",
            self.machine.line(),
            markdown_table(&self.results)
        );
        let cpu = cpu_table(&self.results);
        if !cpu.is_empty() {
            out.push_str(
                "\nCPU per acknowledged operation over each measured window (store = the statestore nodes, \
                 the etcd members or the floor's echo responder, summed; cores = CPU s / wall s; other processes = \
                 machine busy time not accounted to the run, i.e. other work on the machine):\n\n",
            );
            out.push_str(&cpu);
        }
        if !self.ratios.is_empty() {
            out.push_str("\nRatios (throughput: higher is better for statestore; latency: lower is better):\n");
            out.push_str(&ratio_lines(&self.ratios));
        }
        let errors = error_lines(&self.results);
        if !errors.is_empty() {
            out.push_str("\nErrors seen:\n");
            out.push_str(&errors);
        }
        if !self.memory.is_empty() {
            out.push_str("\nRSS after each target's cells:\n");
            out.push_str(&memory_lines(&self.memory));
        }
        if !self.notes.is_empty() {
            out.push_str("\nNotes:\n");
            for note in &self.notes {
                let _ = writeln!(out, "- {note}");
            }
        }
        out
    }
}

/// Writes `value` as pretty JSON to `path`.
pub fn write_json(path: &Path, value: &impl Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value).context("serialise the report")?;
    std::fs::write(path, text + "\n").with_context(|| format!("write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Mix;

    fn summary(throughput: f64, p50: f64, p99: f64) -> Summary {
        Summary {
            ops: (throughput * 10.0) as u64,
            throughput,
            p50_ms: p50,
            p90_ms: p50 * 1.5,
            p99_ms: p99,
            p999_ms: p99 * 2.0,
            max_ms: 123.456,
            latency_samples: 10,
            errors: 0,
            timeouts: 0,
            error_kinds: BTreeMap::new(),
        }
    }

    fn cell(target: &str, mix: Mix, outcome: CellOutcome) -> CellResult {
        CellResult {
            target: target.to_owned(),
            workload: WorkloadSpec {
                mix,
                clients: 64,
                in_flight: 8,
            },
            outcome,
            cpu: None,
        }
    }

    fn sample() -> Vec<CellResult> {
        vec![
            cell(
                "floor",
                Mix::Set,
                CellOutcome::Ran(summary(40_000.0, 1.0, 4.0)),
            ),
            cell(
                "etcd",
                Mix::Set,
                CellOutcome::Skipped {
                    reason: "etcd-server not installed".to_owned(),
                },
            ),
            cell(
                "statestore-3",
                Mix::Set,
                CellOutcome::Ran(summary(10_000.0, 5.0, 12.0)),
            ),
            cell(
                "statestore-1",
                Mix::Get,
                CellOutcome::Failed {
                    reason: "not ready | x\nmore".to_owned(),
                },
            ),
        ]
    }

    #[test]
    fn table_has_a_row_per_cell() {
        let table = markdown_table(&sample());
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 6);
        assert!(lines[0].starts_with("| target | workload | clients×in-flight | throughput ops/s"));
        assert_eq!(
            lines[2],
            "| floor | SET | 64×8 | 40000 | 1.00 | 1.50 | 4.00 | 8.00 | 123 | 0 | 0 |"
        );
        assert_eq!(
            lines[3],
            "| etcd | SET | 64×8 | skipped (etcd-server not installed) | – | – | – | – | – | – | – |"
        );
        assert_eq!(
            lines[5],
            "| statestore-1 | GET | 64×8 | FAILED: not ready / x | – | – | – | – | – | – | – |"
        );
        for line in &lines {
            assert_eq!(line.matches('|').count(), 12, "{line}");
        }
    }

    #[test]
    fn ratios_only_where_both_ran() {
        let ratios = ratios(&sample());
        assert_eq!(ratios.len(), 1, "etcd skipped, statestore-1 failed");
        let r = &ratios[0];
        assert_eq!(
            (r.target.as_str(), r.baseline.as_str()),
            ("statestore-3", "floor")
        );
        assert!((r.throughput - 0.25).abs() < 1e-9);
        assert!((r.p50 - 5.0).abs() < 1e-9);
        assert!((r.p99 - 3.0).abs() < 1e-9);
        assert_eq!(
            ratio_lines(&ratios),
            "- statestore-3 / floor, SET 64×8: throughput 0.25×, p50 5.00×, p99 3.00×\n"
        );
    }

    #[test]
    fn smoke_failures() {
        let cells = sample();
        assert!(cells[0].smoke_failure().is_none());
        assert!(cells[1].smoke_failure().is_none(), "skipped is fine");
        assert!(cells[3].smoke_failure().is_some());
        let mut bad = summary(1.0, 1.0, 1.0);
        bad.timeouts = 1;
        assert!(
            cell("x", Mix::Set, CellOutcome::Ran(bad))
                .smoke_failure()
                .is_some()
        );
        let zero = Summary {
            ops: 0,
            throughput: 0.0,
            ..summary(0.0, 0.0, 0.0)
        };
        assert!(
            cell("x", Mix::Set, CellOutcome::Ran(zero))
                .smoke_failure()
                .is_some()
        );
    }

    #[test]
    fn json_has_status_tags_and_figures() -> anyhow::Result<()> {
        let json = serde_json::to_value(sample())?;
        assert_eq!(json[0]["outcome"]["status"], "ran");
        assert_eq!(json[0]["outcome"]["throughput"], 40_000.0);
        assert_eq!(json[0]["workload"]["mix"], "set");
        assert_eq!(json[1]["outcome"]["status"], "skipped");
        assert_eq!(json[3]["outcome"]["status"], "failed");
        Ok(())
    }

    #[test]
    fn cpu_model_and_ms_formatting() {
        let info = "processor\t: 0\nvendor_id\t: X\nmodel name\t: Some CPU @ 2.0GHz\n";
        assert_eq!(cpu_model(info).as_deref(), Some("Some CPU @ 2.0GHz"));
        assert_eq!(cpu_model(""), None);
        assert_eq!(ms(0.1234), "0.12");
        assert_eq!(ms(12.345), "12.3");
        assert_eq!(ms(1234.4), "1234");
    }

    #[test]
    fn memory_lines_group_by_target() {
        let memory = vec![
            ProcessMemory {
                target: "floor".into(),
                process: "mosquitto".into(),
                rss_kib: Some(2048),
            },
            ProcessMemory {
                target: "statestore-3".into(),
                process: "node 1".into(),
                rss_kib: None,
            },
        ];
        assert_eq!(
            memory_lines(&memory),
            "- floor: mosquitto 2.0 MiB\n- statestore-3: node 1 –\n"
        );
    }

    #[test]
    fn cpu_table_lists_cells_with_cpu_figures() {
        use crate::cpu::ProcessCpu;
        let figure = |cpu_secs: f64, us: f64| CpuFigure {
            cpu_secs,
            cores: cpu_secs / 10.0,
            us_per_op: Some(us),
        };
        let process = |name: &str, role: Role, f: Option<CpuFigure>| ProcessCpu {
            process: name.to_owned(),
            role,
            cpu: f,
        };
        let mut cells = sample();
        assert_eq!(cpu_table(&cells), "", "no CPU figures: no table");
        cells[2].cpu = Some(CpuReport {
            wall_secs: 10.0,
            ops: 100_000,
            clock_ticks_per_sec: 100,
            processes: vec![
                process("node 1", Role::Store, Some(figure(4.0, 40.0))),
                process("node 2", Role::Store, None),
                process("mosquitto", Role::Broker, Some(figure(2.0, 20.0))),
                process(
                    "load generator",
                    Role::LoadGenerator,
                    Some(figure(1.23, 12.3)),
                ),
            ],
            totals: [
                (Role::Store, figure(4.0, 40.0)),
                (Role::Broker, figure(2.0, 20.0)),
                (Role::LoadGenerator, figure(1.23, 12.3)),
            ]
            .into_iter()
            .collect(),
            machine_busy_cores: Some(1.2),
            other_cores: Some(0.5),
        });
        let table = cpu_table(&cells);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[2],
            "| statestore-3 | SET | 64×8 | 40.0 | 0.40 | 20.0 | 12.3 | 0.50 | node 1 40.0, node 2 – |"
        );
        assert_eq!(us_per_op(Some(&figure(1.0, 123.4))), "123");
        let json = serde_json::to_value(&cells[2]).expect("serialises");
        assert_eq!(json["cpu"]["totals"]["store"]["us_per_op"], 40.0);
        assert!(
            serde_json::to_value(&cells[0])
                .expect("serialises")
                .get("cpu")
                .is_none()
        );
    }
}
