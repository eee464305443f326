//! CPU time per process over a measured window: which processes to account (each with the
//! role it plays: the store, the broker, the load generator), a sample of their `utime +
//! stime` taken at the start and at the end of the window, and what the difference means per
//! acknowledged operation (µs of CPU per op, cores busy) per process and summed per role;
//! plus the machine's busy time, so CPU taken by processes outside the run is visible.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tokio::task::JoinHandle;

use crate::proc_stat;

/// What a process is to the measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The system under test: statestore nodes, etcd members, the floor's echo responder.
    Store,
    /// Mosquitto.
    Broker,
    /// This tool's own load generation.
    LoadGenerator,
}

/// Where a process's CPU time is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `/proc/<pid>/stat`.
    Pid(u32),
    /// The live threads of this process whose name (comm) is this, e.g. `echo-responder`.
    OwnThread(String),
    /// This process minus its live threads with these names (accounted separately).
    OwnProcessExcept(Vec<String>),
}

/// One process to account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    /// Name in tables: `node 1`, `mosquitto`, `etcd m2`, `load generator`.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// Where its ticks come from.
    pub source: Source,
}

impl Watched {
    /// A child or external process.
    pub fn pid(name: impl Into<String>, role: Role, pid: u32) -> Watched {
        Watched {
            name: name.into(),
            role,
            source: Source::Pid(pid),
        }
    }

    /// This tool's own CPU, minus the threads named in `except` (accounted on their own).
    pub fn load_generator(except: &[&str]) -> Watched {
        Watched {
            name: "load generator".to_owned(),
            role: Role::LoadGenerator,
            source: Source::OwnProcessExcept(except.iter().map(|s| (*s).to_owned()).collect()),
        }
    }

    /// Ticks so far; `None` if unreadable (process gone).
    fn ticks(&self) -> Option<u64> {
        let own_threads = |names: &[String]| -> u64 {
            proc_stat::own_threads()
                .iter()
                .filter(|t| names.contains(&t.comm))
                .map(proc_stat::ProcStat::ticks)
                .sum()
        };
        match &self.source {
            Source::Pid(pid) => proc_stat::read_pid(*pid).map(|s| s.ticks()),
            Source::OwnThread(name) => Some(own_threads(std::slice::from_ref(name))),
            Source::OwnProcessExcept(names) => {
                let own = proc_stat::read_pid(std::process::id())?.ticks();
                Some(own.saturating_sub(own_threads(names)))
            }
        }
    }
}

/// Ticks of every watched process at one instant.
#[derive(Debug, Clone)]
pub struct Sample {
    at: Instant,
    ticks: Vec<Option<u64>>,
    machine: Option<proc_stat::MachineTicks>,
}

/// Reads every watched process, and the machine, now.
pub fn sample(watched: &[Watched]) -> Sample {
    Sample {
        at: Instant::now(),
        ticks: watched.iter().map(Watched::ticks).collect(),
        machine: proc_stat::read_machine(),
    }
}

/// CPU over a window, for one process or a sum of them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CpuFigure {
    /// CPU seconds (user + system).
    pub cpu_secs: f64,
    /// `cpu_secs / wall_secs`: cores kept busy on average.
    pub cores: f64,
    /// µs of CPU per acknowledged operation (`None` without operations).
    pub us_per_op: Option<f64>,
}

impl CpuFigure {
    fn new(cpu_secs: f64, wall_secs: f64, ops: u64) -> CpuFigure {
        CpuFigure {
            cpu_secs,
            cores: if wall_secs > 0.0 {
                cpu_secs / wall_secs
            } else {
                0.0
            },
            us_per_op: (ops > 0).then(|| cpu_secs * 1e6 / ops as f64),
        }
    }
}

/// One process's CPU over the window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessCpu {
    /// Name.
    pub process: String,
    /// Role.
    pub role: Role,
    /// Its figures; `None` when it could not be read at both ends of the window.
    pub cpu: Option<CpuFigure>,
}

/// CPU of every watched process over one measured window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuReport {
    /// Wall time between the two samples, s.
    pub wall_secs: f64,
    /// Acknowledged operations in the window (the divisor of `us_per_op`).
    pub ops: u64,
    /// Clock ticks per second used to convert.
    pub clock_ticks_per_sec: u64,
    /// Per process.
    pub processes: Vec<ProcessCpu>,
    /// Summed per role over the processes that could be read.
    pub totals: BTreeMap<Role, CpuFigure>,
    /// Cores the whole machine was busy on average (every process, accounted or not).
    pub machine_busy_cores: Option<f64>,
    /// Of those, cores used by processes outside this accounting (other work on the machine).
    pub other_cores: Option<f64>,
}

impl CpuReport {
    /// The figures between two samples of `watched`, for `ops` acknowledged operations.
    pub fn between(
        watched: &[Watched],
        start: &Sample,
        end: &Sample,
        ops: u64,
        ticks_per_sec: u64,
    ) -> CpuReport {
        let wall_secs = end.at.saturating_duration_since(start.at).as_secs_f64();
        let hz = ticks_per_sec.max(1) as f64;
        let mut sums: BTreeMap<Role, f64> = BTreeMap::new();
        let processes = watched
            .iter()
            .zip(start.ticks.iter().zip(&end.ticks))
            .map(|(w, (a, b))| {
                let cpu_secs = match (a, b) {
                    (Some(a), Some(b)) => Some(b.saturating_sub(*a) as f64 / hz),
                    _ => None,
                };
                if let Some(secs) = cpu_secs {
                    *sums.entry(w.role).or_default() += secs;
                }
                ProcessCpu {
                    process: w.name.clone(),
                    role: w.role,
                    cpu: cpu_secs.map(|s| CpuFigure::new(s, wall_secs, ops)),
                }
            })
            .collect();
        let accounted: f64 = sums.values().sum();
        let machine_busy_cores = match (start.machine, end.machine) {
            (Some(a), Some(b)) if wall_secs > 0.0 => {
                Some(b.busy.saturating_sub(a.busy) as f64 / hz / wall_secs)
            }
            _ => None,
        };
        CpuReport {
            wall_secs,
            ops,
            clock_ticks_per_sec: ticks_per_sec,
            processes,
            totals: sums
                .into_iter()
                .map(|(role, secs)| (role, CpuFigure::new(secs, wall_secs, ops)))
                .collect(),
            machine_busy_cores,
            other_cores: machine_busy_cores.map(|busy| (busy - accounted / wall_secs).max(0.0)),
        }
    }

    /// The total of a role.
    pub fn total(&self, role: Role) -> Option<&CpuFigure> {
        self.totals.get(&role)
    }

    /// The store's CPU µs per operation (its processes summed).
    pub fn store_us_per_op(&self) -> Option<f64> {
        self.total(Role::Store).and_then(|f| f.us_per_op)
    }

    /// How many processes have a role.
    pub fn count(&self, role: Role) -> usize {
        self.processes.iter().filter(|p| p.role == role).count()
    }
}

/// Samples the watched processes at the start and at the end of a window in the background.
pub struct WindowSampler {
    watched: Arc<[Watched]>,
    window: (Instant, Instant),
    task: JoinHandle<(Sample, Sample)>,
}

impl WindowSampler {
    /// Starts sampling `watched` at `start` and `end` (must run inside a Tokio runtime).
    pub fn spawn(watched: Arc<[Watched]>, start: Instant, end: Instant) -> WindowSampler {
        let for_task = watched.clone();
        let task = tokio::spawn(async move {
            tokio::time::sleep_until(start.into()).await;
            let first = sample(&for_task);
            tokio::time::sleep_until(end.into()).await;
            (first, sample(&for_task))
        });
        WindowSampler {
            watched,
            window: (start, end),
            task,
        }
    }

    /// The window `[start, end)` it samples.
    pub fn window(&self) -> (Instant, Instant) {
        self.window
    }

    /// Waits for the end sample and turns both into figures for `ops` operations.
    pub async fn finish(mut self, ops: u64) -> Option<CpuReport> {
        let (start, end) = (&mut self.task).await.ok()?;
        Some(CpuReport::between(
            &self.watched,
            &start,
            &end,
            ops,
            proc_stat::clock_ticks_per_second(),
        ))
    }
}

impl Drop for WindowSampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn watched() -> Vec<Watched> {
        vec![
            Watched::pid("node 1", Role::Store, 1),
            Watched::pid("node 2", Role::Store, 2),
            Watched::pid("mosquitto", Role::Broker, 3),
            Watched::load_generator(&[]),
        ]
    }

    #[test]
    fn per_process_and_per_role_figures() {
        let t0 = Instant::now();
        let machine = |busy: u64| {
            Some(proc_stat::MachineTicks {
                busy,
                total: busy * 2,
            })
        };
        let start = Sample {
            at: t0,
            ticks: vec![Some(100), Some(1000), Some(50), Some(7)],
            machine: machine(10_000),
        };
        let end = Sample {
            at: t0 + Duration::from_secs(10),
            ticks: vec![Some(600), Some(1300), None, Some(107)],
            machine: machine(11_500),
        };
        let report = CpuReport::between(&watched(), &start, &end, 20_000, 100);
        assert!((report.wall_secs - 10.0).abs() < 1e-9);
        let node1 = report.processes[0].cpu.expect("node 1 read twice");
        assert!((node1.cpu_secs - 5.0).abs() < 1e-9);
        assert!((node1.cores - 0.5).abs() < 1e-9);
        assert_eq!(node1.us_per_op, Some(250.0)); // 5 s / 20,000 ops
        assert_eq!(report.processes[2].cpu, None, "mosquitto vanished");
        let store = report.total(Role::Store).expect("store total");
        assert!((store.cpu_secs - 8.0).abs() < 1e-9);
        assert_eq!(store.us_per_op, Some(400.0));
        assert!(report.total(Role::Broker).is_none());
        let load = report.total(Role::LoadGenerator).expect("load generator");
        assert!((load.cpu_secs - 1.0).abs() < 1e-9);
        assert_eq!(report.count(Role::Store), 2);
        // 15 s of machine CPU in 10 s: 1.5 cores busy, 0.9 of them accounted (node 1, node 2,
        // load generator), 0.6 by others
        assert_eq!(report.machine_busy_cores, Some(1.5));
        let others = report.other_cores.expect("machine read");
        assert!((others - 0.6).abs() < 1e-9, "{others}");
    }

    #[test]
    fn no_ops_no_per_op_figure() {
        let t0 = Instant::now();
        let start = Sample {
            at: t0,
            ticks: vec![Some(0); 4],
            machine: None,
        };
        let end = Sample {
            at: t0,
            ticks: vec![Some(10); 4],
            machine: None,
        };
        let report = CpuReport::between(&watched(), &start, &end, 0, 100);
        let figure = report.processes[0].cpu.expect("read");
        assert_eq!(figure.us_per_op, None);
        assert_eq!(figure.cores, 0.0, "no wall time: no cores figure");
        assert_eq!(report.other_cores, None);
    }

    #[tokio::test]
    async fn own_cpu_is_sampled_over_a_window() {
        let watched: Arc<[Watched]> = vec![
            Watched::load_generator(&[]),
            Watched::pid("self", Role::Store, std::process::id()),
            Watched::pid("gone", Role::Broker, u32::MAX),
        ]
        .into();
        let start = Instant::now();
        let sampler = WindowSampler::spawn(watched, start, start + Duration::from_millis(300));
        // burn CPU on a blocking thread so the window sees some
        tokio::task::spawn_blocking(move || {
            let mut x = 0u64;
            while start.elapsed() < Duration::from_millis(250) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        })
        .await
        .expect("spin");
        let report = sampler.finish(1000).await.expect("sampled");
        assert!(report.wall_secs >= 0.29, "{}", report.wall_secs);
        let own = report.processes[1].cpu.expect("own process");
        assert!(own.cpu_secs > 0.05, "{own:?}");
        assert!(report.processes[2].cpu.is_none());
        let busy = report.machine_busy_cores.expect("machine read");
        assert!(busy >= report.other_cores.unwrap_or_default(), "{report:?}");
    }
}
