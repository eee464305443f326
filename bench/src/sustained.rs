//! The `sustained` command: start one statestore cluster with its own Mosquitto (and, if
//! asked, the floor and a 3-member etcd cluster) once, prefill it into steady state, then run
//! long measured windows — alternating the targets round by round when baselines are kept —
//! recording a per-second timeline and the CPU of every process, and judge stability.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::task::JoinHandle;

use crate::cell::{self, CellSpec, Measured};
use crate::cli::{Baseline, Programs, SustainedArgs, SustainedPlan};
use crate::compare::{
    etcd_watch, floor_watch, mosquitto_bin, statestore_bin, statestore_watch, tool_versions,
};
use crate::cpu::{Role, Watched};
use crate::driver::Plan;
use crate::echo_responder::EchoResponder;
use crate::etcd_load;
use crate::mqtt_load::{self, Broker, Check, LoadOptions};
use crate::proc_stat;
use crate::processes::{
    EtcdCluster, Mosquitto, StatestoreCluster, WorkDir, file_len, log_findings_in,
};
use crate::report::{self, CellOutcome, Machine, ProcessMemory};
use crate::stability::{self, CheckResult};
use crate::stats::CellStats;
use crate::sustained_report::{
    NodeLogs, NodeRaft, Prefill, SustainedCell, SustainedReport, SustainedSettings, aggregates,
    round_ratios,
};
use crate::workload::ValueKind;

/// Connections and requests in flight of the prefill.
const PREFILL_CLIENTS: usize = 64;
const PREFILL_IN_FLIGHT: usize = 8;
/// Log lines that count as a (replication) timeout.
const TIMEOUT_NEEDLES: &[&str] = &["timeout", "Timeout", "timed out", "TimedOut"];
/// Distinct example log lines kept per node and phase.
const LOG_EXAMPLES: usize = 3;

// Fields drop in declaration order: clients before their broker, processes before the
// directory that holds their data and logs.

/// The statestore target: a cluster with its own Mosquitto (also used by `devicebound`).
pub struct Statestore {
    /// `statestore-3`.
    pub name: String,
    /// Its processes and this tool, for CPU accounting.
    pub watched: Arc<[Watched]>,
    /// The nodes.
    pub cluster: StatestoreCluster,
    /// Its broker.
    pub broker: Mosquitto,
    /// Configs, data and logs.
    pub dir: WorkDir,
}

/// The floor, kept alive.
struct Floor {
    watched: Arc<[Watched]>,
    echo: EchoResponder,
    broker: Mosquitto,
    _dir: WorkDir,
}

/// The etcd baseline, kept alive.
struct Etcd {
    watched: Arc<[Watched]>,
    cluster: EtcdCluster,
    _dir: WorkDir,
}

/// Which target a cell runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    Statestore,
    Floor,
    Etcd,
}

/// The order of the targets in a round.
fn round_order(baselines: &[Baseline]) -> Vec<Which> {
    let mut order = vec![Which::Statestore];
    order.extend(baselines.iter().map(|b| match b {
        Baseline::Floor => Which::Floor,
        Baseline::Etcd => Which::Etcd,
    }));
    order
}

fn note_kept(dir: &WorkDir, keep: bool, what: &str) {
    if keep {
        eprintln!("   {what}: files kept in {}", dir.path().display());
    }
}

/// Builds a fill plan once the clients are connected, remembering when it started and
/// reporting progress every 10 s.
fn fill_plan(
    target: &str,
    writes: u64,
    started: &mut Option<Instant>,
    reporter: &mut Option<JoinHandle<()>>,
) -> Plan {
    let plan = Plan::fill(writes);
    let start = Instant::now();
    *started = Some(start);
    if let Some(counter) = plan.fill_counter() {
        let target = target.to_owned();
        *reporter = Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                let sent = counter.load(Ordering::Relaxed).min(writes);
                let secs = start.elapsed().as_secs_f64();
                eprintln!(
                    "   {target}: {sent} / {writes} writes sent after {secs:.0} s ({:.0}/s)",
                    sent as f64 / secs
                );
            }
        }));
    }
    plan
}

/// Turns the stats of a fill into its report line.
fn prefill_result(
    target: &str,
    writes: u64,
    stats: &CellStats,
    started: Option<Instant>,
) -> Prefill {
    let secs = started.map_or(0.0, |s| s.elapsed().as_secs_f64());
    let latency = stats.summary(Duration::from_secs_f64(secs));
    eprintln!(
        "   {target}: prefilled {writes} in {secs:.1} s ({:.0} ops/s), {} errors, {} timeouts",
        latency.throughput, latency.errors, latency.timeouts
    );
    Prefill {
        target: target.to_owned(),
        writes,
        concurrency: format!("{PREFILL_CLIENTS}×{PREFILL_IN_FLIGHT}"),
        secs,
        latency,
    }
}

async fn prefill_mqtt(
    target: &str,
    broker: &Broker,
    writes: u64,
    args: &SustainedArgs,
) -> anyhow::Result<Prefill> {
    let options = LoadOptions {
        clients: PREFILL_CLIENTS,
        in_flight: PREFILL_IN_FLIGHT,
        value_size: args.value_size,
        values: ValueKind::Pattern,
        timeout: args.timeout,
        check: Check::Store,
    };
    let (mut started, mut reporter) = (None, None);
    let stats = mqtt_load::run(broker, &options, || {
        fill_plan(target, writes, &mut started, &mut reporter)
    })
    .await;
    if let Some(reporter) = reporter {
        reporter.abort();
    }
    Ok(prefill_result(target, writes, &stats?, started))
}

async fn prefill_etcd(
    endpoints: &[String],
    writes: u64,
    args: &SustainedArgs,
) -> anyhow::Result<Prefill> {
    let (mut started, mut reporter) = (None, None);
    let stats = etcd_load::run(
        endpoints,
        PREFILL_CLIENTS,
        PREFILL_IN_FLIGHT,
        args.value_size,
        args.timeout,
        || fill_plan("etcd", writes, &mut started, &mut reporter),
    )
    .await;
    if let Some(reporter) = reporter {
        reporter.abort();
    }
    Ok(prefill_result("etcd", writes, &stats?, started))
}

/// `/admin/status` of every node.
pub async fn raft_state(cluster: &StatestoreCluster) -> Vec<NodeRaft> {
    let mut out = Vec::with_capacity(cluster.nodes.len());
    for i in 0..cluster.nodes.len() {
        out.push(NodeRaft {
            node: i + 1,
            status: cluster.status(i).await.ok(),
        });
    }
    out
}

/// Counts the log lines of every node written between the byte offsets `from` and `to`
/// (`None`: until now).
pub fn node_logs(
    cluster: &StatestoreCluster,
    from: &[u64],
    to: Option<&[u64]>,
    phase: &str,
) -> Vec<NodeLogs> {
    (0..cluster.nodes.len())
        .map(|i| {
            let path = cluster.log_path(i);
            let start = from.get(i).copied().unwrap_or(0);
            let end = to.and_then(|to| to.get(i).copied()).unwrap_or(u64::MAX);
            let find = |needles: &[&str]| log_findings_in(path, start..end, needles, LOG_EXAMPLES);
            let (timeout_lines, mut examples) = find(TIMEOUT_NEEDLES);
            let (error_lines, errors) = find(&["ERROR"]);
            let (warn_lines, warns) = find(&["WARN"]);
            for e in errors.into_iter().chain(warns) {
                if examples.len() < LOG_EXAMPLES && !examples.contains(&e) {
                    examples.push(e);
                }
            }
            NodeLogs {
                node: i + 1,
                phase: phase.to_owned(),
                timeout_lines,
                warn_lines,
                error_lines,
                examples,
            }
        })
        .collect()
}

/// Where every node's log ends now.
pub fn log_offsets(cluster: &StatestoreCluster) -> Vec<u64> {
    (0..cluster.nodes.len())
        .map(|i| file_len(cluster.log_path(i)))
        .collect()
}

/// Starts a statestore target of `nodes` nodes (each with `node_args`) and its Mosquitto in a
/// `statestore-bench-{command}-statestore-N-*` directory, and waits until it is ready.
pub async fn start_statestore(
    command: &str,
    nodes: usize,
    programs: &Programs,
    keep_temp: bool,
    node_args: &[String],
) -> anyhow::Result<(Statestore, Duration)> {
    let bin = statestore_bin(programs)?;
    let mosquitto = mosquitto_bin(programs)?;
    let name = format!("statestore-{nodes}");
    let dir = WorkDir::new(&format!("{command}-{name}"), keep_temp)?;
    note_kept(&dir, keep_temp, &name);
    let broker = Mosquitto::start(&mosquitto, dir.path())?;
    let mut cluster =
        StatestoreCluster::start(&bin, &broker.broker(), nodes, dir.path(), node_args)?;
    let ready = cluster.wait_ready(Duration::from_secs(60)).await?;
    eprintln!("   {name}: ready after {:.2} s", ready.as_secs_f64());
    let watched = statestore_watch(&cluster, &broker);
    Ok((
        Statestore {
            name,
            dir,
            broker,
            cluster,
            watched,
        },
        ready,
    ))
}

async fn start_floor(args: &SustainedArgs) -> anyhow::Result<Floor> {
    let mosquitto = mosquitto_bin(&args.programs)?;
    let dir = WorkDir::new("sustained-floor", args.keep_temp)?;
    note_kept(&dir, args.keep_temp, "floor");
    let broker = Mosquitto::start(&mosquitto, dir.path())?;
    let echo = EchoResponder::start(&broker.broker())?;
    let watched = floor_watch(&broker);
    eprintln!("   floor: running");
    Ok(Floor {
        _dir: dir,
        broker,
        echo,
        watched,
    })
}

async fn start_etcd(args: &SustainedArgs) -> anyhow::Result<Etcd> {
    let bin = &args.programs.etcd_bin;
    if !bin.is_file() {
        bail!(
            "{} not found (install etcd-server or leave etcd out of --baselines)",
            bin.display()
        );
    }
    let dir = WorkDir::new("sustained-etcd", args.keep_temp)?;
    note_kept(&dir, args.keep_temp, "etcd");
    let mut cluster = EtcdCluster::start(bin, dir.path(), 3)?;
    if let Err(err) = etcd_load::wait_ready(&cluster.endpoints, Duration::from_secs(60)).await {
        cluster.check_alive()?;
        return Err(err);
    }
    eprintln!("   etcd: 3 members ready");
    let watched = etcd_watch(&cluster);
    Ok(Etcd {
        _dir: dir,
        cluster,
        watched,
    })
}

/// The processes kept alive and the figures gathered so far.
struct Run<'a> {
    plan: &'a SustainedPlan,
    args: &'a SustainedArgs,
    statestore: Statestore,
    floor: Option<Floor>,
    etcd: Option<Etcd>,
    cells: Vec<SustainedCell>,
    notes: Vec<String>,
}

impl Run<'_> {
    fn target_name(&self, which: Which) -> String {
        match which {
            Which::Statestore => self.statestore.name.clone(),
            Which::Floor => "floor".to_owned(),
            Which::Etcd => "etcd".to_owned(),
        }
    }

    /// Runs one cell on `which` and records it.
    async fn cell(&mut self, round: usize, which: Which, spec: &CellSpec) {
        let target = self.target_name(which);
        let disconnects_before = mqtt_load::disconnects();
        let result: anyhow::Result<Measured> = match which {
            Which::Statestore => {
                let s = &self.statestore;
                cell::mqtt(&s.broker.broker(), Check::Store, spec, &s.watched).await
            }
            Which::Floor => match &self.floor {
                Some(f) => cell::mqtt(&f.broker.broker(), Check::Echo, spec, &f.watched).await,
                None => Err(anyhow::anyhow!("floor not running")),
            },
            Which::Etcd => match &self.etcd {
                Some(e) => cell::etcd(&e.cluster.endpoints, spec, &e.watched).await,
                None => Err(anyhow::anyhow!("etcd not running")),
            },
        };
        let lost = mqtt_load::disconnects() - disconnects_before;
        if lost > 0 {
            self.notes.push(format!(
                "{target} {} round {round}: {lost} MQTT load connections lost and reconnected",
                spec.workload
            ));
        }
        let cell = match result {
            Ok(Measured { stats, cpu, .. }) => {
                let timeline = stats.timeline_rows();
                SustainedCell {
                    round,
                    target,
                    workload: spec.workload,
                    outcome: CellOutcome::Ran(stats.summary(spec.duration)),
                    stability: stability::stability(&timeline),
                    timeline,
                    cpu,
                }
            }
            Err(err) => SustainedCell {
                round,
                target,
                workload: spec.workload,
                outcome: CellOutcome::Failed {
                    reason: format!("{err:#}"),
                },
                stability: None,
                timeline: Vec::new(),
                cpu: None,
            },
        };
        eprintln!("   {}: {}", cell.label(), progress_line(&cell));
        self.cells.push(cell);
        if which == Which::Statestore {
            for i in 0..self.statestore.cluster.nodes.len() {
                if let Err(err) = self.statestore.cluster.check_alive(i) {
                    self.notes
                        .push(format!("{}: {err:#}", self.statestore.name));
                }
            }
        }
    }

    /// Every round: every target, every workload.
    async fn rounds(&mut self) {
        let order = round_order(&self.plan.baselines);
        for round in 1..=self.plan.rounds {
            if self.plan.rounds > 1 {
                eprintln!("== round {round} of {}", self.plan.rounds);
            }
            for which in &order {
                for workload in &self.plan.workloads {
                    let spec = CellSpec {
                        workload: *workload,
                        keys: self.plan.keys,
                        value_size: self.args.value_size,
                        timeout: self.args.timeout,
                        warmup: self.plan.warmup,
                        duration: self.plan.cell_duration,
                        timeline: true,
                    };
                    self.cell(round, *which, &spec).await;
                }
            }
        }
    }
}

/// One stderr line per cell while running.
fn progress_line(cell: &SustainedCell) -> String {
    match &cell.outcome {
        CellOutcome::Ran(s) => {
            let min = cell
                .stability
                .as_ref()
                .and_then(|st| st.min_ratio)
                .map_or("n/a (median 0)".to_owned(), |r| {
                    format!("{r:.2}× the median")
                });
            let store = cell
                .cpu
                .as_ref()
                .map(|c| report::us_per_op(c.total(Role::Store)))
                .unwrap_or_else(|| "–".to_owned());
            format!(
                "{:.0} ops/s, weakest second {min}, p99 {:.1} ms, {} errors, {} timeouts, store CPU {store} µs/op",
                s.throughput, s.p99_ms, s.errors, s.timeouts
            )
        }
        CellOutcome::Skipped { reason } => format!("skipped: {reason}"),
        CellOutcome::Failed { reason } => format!("FAILED: {reason}"),
    }
}

/// RSS of every process kept alive, at the end.
fn memory(run: &Run<'_>) -> Vec<ProcessMemory> {
    let mut out = Vec::new();
    let mut push = |target: &str, process: String, rss_kib: Option<u64>| {
        out.push(ProcessMemory {
            target: target.to_owned(),
            process,
            rss_kib,
        });
    };
    let s = &run.statestore;
    for (i, rss) in s.cluster.rss_kib().into_iter().enumerate() {
        push(&s.name, format!("node {}", i + 1), rss);
    }
    push(&s.name, "mosquitto".to_owned(), s.broker.rss_kib());
    if let Some(floor) = &run.floor {
        push("floor", "mosquitto".to_owned(), floor.broker.rss_kib());
    }
    if let Some(etcd) = &run.etcd {
        for (i, rss) in etcd.cluster.rss_kib().into_iter().enumerate() {
            push("etcd", format!("etcd m{}", i + 1), rss);
        }
    }
    out
}

/// What makes the run fail regardless of `--strict`: failed cells, error replies, prefill
/// errors; in smoke mode also timeouts and zero throughput.
fn hard_failures(cells: &[SustainedCell], prefill: &[Prefill], smoke: bool) -> Vec<String> {
    let mut out = Vec::new();
    for p in prefill {
        let l = &p.latency;
        if l.errors > 0 || (smoke && l.timeouts > 0) {
            out.push(format!(
                "prefill {}: {} errors, {} timeouts {:?}",
                p.target, l.errors, l.timeouts, l.error_kinds
            ));
        }
    }
    for c in cells {
        match &c.outcome {
            CellOutcome::Ran(s) if s.errors > 0 || (smoke && s.timeouts > 0) => out.push(format!(
                "{}: {} errors, {} timeouts {:?}",
                c.label(),
                s.errors,
                s.timeouts,
                s.error_kinds
            )),
            CellOutcome::Ran(s) if smoke && s.ops == 0 => {
                out.push(format!("{}: zero throughput", c.label()))
            }
            CellOutcome::Ran(_) | CellOutcome::Skipped { .. } => {}
            CellOutcome::Failed { reason } => out.push(format!("{}: failed: {reason}", c.label())),
        }
    }
    out
}

/// The checks: per statestore cell, then the node logs of the measured phase.
fn checks(cells: &[SustainedCell], logs: &[NodeLogs]) -> Vec<CheckResult> {
    let mut out = Vec::new();
    for c in cells.iter().filter(|c| c.target.starts_with("statestore")) {
        match &c.outcome {
            CellOutcome::Ran(summary) => out.extend(stability::cell_checks(
                &c.label(),
                c.stability.as_ref(),
                summary,
            )),
            CellOutcome::Skipped { reason } | CellOutcome::Failed { reason } => {
                out.push(CheckResult {
                    name: c.label(),
                    passed: false,
                    detail: format!("no figures: {}", reason.lines().next().unwrap_or_default()),
                })
            }
        }
    }
    let measured = logs.iter().filter(|l| l.phase == "measured");
    let (timeouts, errors) =
        measured.fold((0, 0), |(t, e), l| (t + l.timeout_lines, e + l.error_lines));
    out.push(stability::log_check(timeouts, errors));
    out
}

/// `statestore-bench sustained`: returns whether the run passed.
pub async fn sustained(args: SustainedArgs) -> anyhow::Result<bool> {
    let plan = args.resolve()?;
    let started_unix_ms = mqtt_load::now_ms();
    let load_at_start = proc_stat::load_average();
    let bin = statestore_bin(&args.programs)?;
    let mosquitto = mosquitto_bin(&args.programs)?;
    let wants_etcd = plan.baselines.contains(&Baseline::Etcd);
    let machine = Machine::collect(tool_versions(
        Some(&bin),
        Some(&mosquitto),
        wants_etcd.then_some(args.programs.etcd_bin.as_path()),
    ));
    eprintln!("{}", machine.line());

    eprintln!("== starting the long-lived targets");
    let (statestore, ready) = start_statestore(
        "sustained",
        plan.nodes,
        &args.programs,
        args.keep_temp,
        &args.node_args,
    )
    .await?;
    let floor = match plan.baselines.contains(&Baseline::Floor) {
        true => Some(start_floor(&args).await.context("floor")?),
        false => None,
    };
    let etcd = match wants_etcd {
        true => Some(start_etcd(&args).await.context("etcd")?),
        false => None,
    };
    let mut run = Run {
        plan: &plan,
        args: &args,
        statestore,
        floor,
        etcd,
        cells: Vec::new(),
        notes: Vec::new(),
    };

    let before_prefill = log_offsets(&run.statestore.cluster);
    let mut prefill = Vec::new();
    if plan.prefill > 0 {
        eprintln!("== prefill: {} writes", plan.prefill);
        let name = run.statestore.name.clone();
        let broker = run.statestore.broker.broker();
        prefill.push(prefill_mqtt(&name, &broker, plan.prefill, &args).await?);
        if let Some(etcd) = &run.etcd {
            prefill.push(prefill_etcd(&etcd.cluster.endpoints, plan.prefill, &args).await?);
        }
    }
    let raft_after_prefill = raft_state(&run.statestore.cluster).await;
    if raft_after_prefill
        .iter()
        .all(|n| n.status.as_ref().is_none_or(|s| s.snapshot_index.is_none()))
    {
        run.notes.push(
            "no node had taken a snapshot when measuring began (raise --prefill, or pass \
             --node-arg=--snapshot-after-entries=N): the windows include the first snapshot"
                .to_owned(),
        );
    }
    let measured_from = log_offsets(&run.statestore.cluster);

    eprintln!(
        "== measuring: {} round(s), {:.0} s windows",
        plan.rounds,
        plan.cell_duration.as_secs_f64()
    );
    run.rounds().await;

    let cluster = &run.statestore.cluster;
    let mut logs = node_logs(cluster, &before_prefill, Some(&measured_from), "prefill");
    logs.extend(node_logs(cluster, &measured_from, None, "measured"));
    let raft_at_end = raft_state(&run.statestore.cluster).await;
    let memory = memory(&run);
    if let Some(etcd) = run.etcd.as_mut()
        && let Err(err) = etcd.cluster.check_alive()
    {
        run.notes.push(format!("etcd: {err:#}"));
    }
    if let Some(floor) = &run.floor {
        eprintln!(
            "   floor: echo responder answered {} requests",
            floor.echo.answered()
        );
    }
    if args.keep_temp {
        eprintln!(
            "   {}: logs in {}",
            run.statestore.name,
            run.statestore.dir.path().display()
        );
    }

    let baseline_names: Vec<&str> = plan
        .baselines
        .iter()
        .map(|b| match b {
            Baseline::Floor => "floor",
            Baseline::Etcd => "etcd",
        })
        .collect();
    let checks = checks(&run.cells, &logs);
    let failures = hard_failures(&run.cells, &prefill, args.smoke);
    let report = SustainedReport {
        tool: format!("statestore-bench {}", env!("CARGO_PKG_VERSION")),
        command: "sustained".to_owned(),
        started_unix_ms,
        machine,
        settings: SustainedSettings {
            nodes: plan.nodes,
            prefill: plan.prefill,
            keys: plan.keys,
            value_size: args.value_size,
            timeout_secs: args.timeout.as_secs_f64(),
            warmup_secs: plan.warmup.as_secs_f64(),
            cell_secs: plan.cell_duration.as_secs_f64(),
            rounds: plan.rounds,
            baselines: baseline_names.iter().map(|b| (*b).to_owned()).collect(),
            node_args: args.node_args.clone(),
            smoke: args.smoke,
            strict: args.strict,
        },
        ready_secs: ready.as_secs_f64(),
        load_average: [load_at_start, proc_stat::load_average()],
        prefill,
        raft_after_prefill,
        raft_at_end,
        aggregates: aggregates(&run.cells),
        ratios: round_ratios(&run.cells, &run.statestore.name, &baseline_names),
        cells: run.cells,
        node_logs: logs,
        checks,
        memory,
        notes: run.notes,
    };
    println!("{}", report.text());
    if let Some(path) = &args.json {
        report::write_json(path, &report)?;
        eprintln!("JSON written to {}", path.display());
    }
    for failure in &failures {
        eprintln!("FAIL: {failure}");
    }
    let failed_checks = report.checks.iter().filter(|c| !c.passed).count();
    if failed_checks > 0 {
        eprintln!(
            "{failed_checks} check(s) not met{}",
            if args.strict {
                " (--strict: failing the run)"
            } else {
                " (goals only; --strict fails the run on them)"
            }
        );
    }
    if args.smoke && failures.is_empty() {
        eprintln!("smoke: every cell produced figures with zero errors and timeouts");
    }
    Ok(failures.is_empty() && (!args.strict || failed_checks == 0))
}
