//! The `compare` and `run` commands: for each target (floor, etcd, statestore-1,
//! statestore-3, or an already running statestore) start what it needs, load keys where a
//! workload reads them, run every workload cell while accounting the CPU of every process
//! involved, record memory, stop everything, then print the tables, ratios and notes and
//! write the JSON document.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::cell::{self, CellSpec, Measured};
use crate::cli::{CompareArgs, LoadArgs, NamedPid, Programs, Resolved, RunArgs, Target};
use crate::cpu::{Role, Watched};
use crate::driver::Plan;
use crate::echo_responder::{self, EchoResponder};
use crate::etcd_load;
use crate::mqtt_load::{self, Broker, Check, LoadOptions};
use crate::processes::{
    EtcdCluster, Mosquitto, StatestoreCluster, WorkDir, find_program, log_findings, program_version,
};
use crate::report::{self, CellOutcome, CellResult, Machine, ProcessMemory, Report, Settings};
use crate::stats::CellStats;
use crate::workload::{ValueKind, WorkloadSpec};

/// Connections and in-flight requests used to load keys before GET/DEL/mixed cells.
const PRELOAD_CLIENTS: usize = 16;
const PRELOAD_IN_FLIGHT: usize = 8;

/// Results of one command, accumulated target by target.
struct Collected {
    results: Vec<CellResult>,
    memory: Vec<ProcessMemory>,
    notes: Vec<String>,
}

impl Collected {
    fn new() -> Collected {
        Collected {
            results: Vec::new(),
            memory: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Marks every workload of `target` with the same outcome (skipped or failed).
    fn all(&mut self, target: &str, workloads: &[WorkloadSpec], outcome: &CellOutcome) {
        for workload in workloads {
            self.results.push(CellResult {
                target: target.to_owned(),
                workload: *workload,
                outcome: outcome.clone(),
                cpu: None,
            });
        }
    }

    fn push(
        &mut self,
        target: &str,
        workload: WorkloadSpec,
        result: anyhow::Result<Measured>,
        window: Duration,
    ) {
        let (outcome, cpu) = match result {
            Ok(Measured { stats, cpu, .. }) => {
                let summary = stats.summary(window);
                let store_cpu = cpu
                    .as_ref()
                    .map(|c| report::us_per_op(c.total(Role::Store)))
                    .unwrap_or_else(|| "–".to_owned());
                eprintln!(
                    "   {target} {workload}: {:.0} ops/s, p50 {:.2} ms, p99 {:.2} ms, {} errors, {} timeouts, store CPU {store_cpu} µs/op",
                    summary.throughput,
                    summary.p50_ms,
                    summary.p99_ms,
                    summary.errors,
                    summary.timeouts
                );
                (CellOutcome::Ran(summary), cpu)
            }
            Err(err) => {
                eprintln!("   {target} {workload}: FAILED: {err:#}");
                let reason = format!("{err:#}");
                (CellOutcome::Failed { reason }, None)
            }
        };
        self.results.push(CellResult {
            target: target.to_owned(),
            workload,
            outcome,
            cpu,
        });
    }
}

/// The statestore binary: `--statestore-bin`, or `statestore` next to this executable.
pub fn statestore_bin(programs: &Programs) -> anyhow::Result<PathBuf> {
    let bin = match &programs.statestore_bin {
        Some(bin) => bin.clone(),
        None => std::env::current_exe()
            .context("locate this executable")?
            .parent()
            .context("this executable has no directory")?
            .join("statestore"),
    };
    if !bin.is_file() {
        bail!(
            "{} not found: build it with `cargo build --release -p statestore-node` or pass --statestore-bin",
            bin.display()
        );
    }
    Ok(bin)
}

/// The Mosquitto binary: `--mosquitto-bin`, `mosquitto` on PATH, or /usr/sbin/mosquitto.
pub fn mosquitto_bin(programs: &Programs) -> anyhow::Result<PathBuf> {
    match &programs.mosquitto_bin {
        Some(bin) => Ok(bin.clone()),
        None => find_program("mosquitto", "/usr/sbin/mosquitto")
            .context("mosquitto not found: run scripts/prereqs.sh or pass --mosquitto-bin"),
    }
}

/// Versions of the programs involved, for the machine description.
pub fn tool_versions(
    statestore: Option<&Path>,
    mosquitto: Option<&Path>,
    etcd: Option<&Path>,
) -> BTreeMap<String, String> {
    let mut tools = BTreeMap::new();
    tools.insert(
        "statestore-bench".to_owned(),
        env!("CARGO_PKG_VERSION").to_owned(),
    );
    let mut add = |name: &str, program: Option<&Path>, args: &[&str]| {
        if let Some(version) = program.and_then(|p| program_version(p, args)) {
            tools.insert(name.to_owned(), version);
        }
    };
    add("statestore", statestore, &["--version"]);
    add("mosquitto", mosquitto, &["-h"]);
    add("etcd", etcd, &["--version"]);
    tools
}

fn settings(load: &LoadArgs, resolved: &Resolved) -> Settings {
    Settings {
        duration_secs: resolved.duration.as_secs_f64(),
        warmup_secs: resolved.warmup.as_secs_f64(),
        keys: load.keys,
        value_size: load.value_size,
        timeout_secs: load.timeout.as_secs_f64(),
        smoke: load.smoke,
    }
}

/// Loads keys `0..keys` through `broker` so GETs find them.
async fn preload_mqtt(broker: &Broker, load: &LoadArgs) -> anyhow::Result<()> {
    let options = LoadOptions {
        clients: PRELOAD_CLIENTS,
        in_flight: PRELOAD_IN_FLIGHT,
        value_size: load.value_size,
        values: ValueKind::Pattern,
        timeout: load.timeout,
        check: Check::Store,
    };
    let stats = mqtt_load::run(broker, &options, || Plan::fill(load.keys)).await?;
    check_preload(&stats, load.keys)
}

fn check_preload(stats: &CellStats, keys: u64) -> anyhow::Result<()> {
    if stats.errors > 0 || stats.timeouts > 0 {
        bail!(
            "loading {keys} keys: {} errors, {} timeouts {:?}",
            stats.errors,
            stats.timeouts,
            stats.error_kinds
        );
    }
    Ok(())
}

/// The cell of `workload` with the load flags (no timeline: `compare` prints none).
fn cell_spec(workload: WorkloadSpec, load: &LoadArgs, resolved: &Resolved) -> CellSpec {
    CellSpec {
        workload,
        keys: load.keys,
        value_size: load.value_size,
        timeout: load.timeout,
        warmup: resolved.warmup,
        duration: resolved.duration,
        timeline: false,
    }
}

/// The processes of a statestore target: its nodes, its Mosquitto, and this tool.
pub fn statestore_watch(cluster: &StatestoreCluster, broker: &Mosquitto) -> Arc<[Watched]> {
    let mut watched: Vec<Watched> = cluster
        .pids()
        .into_iter()
        .enumerate()
        .filter_map(|(i, pid)| {
            pid.map(|pid| Watched::pid(format!("node {}", i + 1), Role::Store, pid))
        })
        .collect();
    watched.push(Watched::pid("mosquitto", Role::Broker, broker.pid()));
    watched.push(Watched::load_generator(&[echo_responder::THREAD_NAME]));
    watched.into()
}

/// The processes of the floor: the echo responder (a thread of this tool), its Mosquitto, and
/// the rest of this tool.
pub fn floor_watch(broker: &Mosquitto) -> Arc<[Watched]> {
    vec![
        Watched {
            name: "echo responder".to_owned(),
            role: Role::Store,
            source: crate::cpu::Source::OwnThread(echo_responder::THREAD_NAME.to_owned()),
        },
        Watched::pid("mosquitto", Role::Broker, broker.pid()),
        Watched::load_generator(&[echo_responder::THREAD_NAME]),
    ]
    .into()
}

/// The processes of an etcd target: its members and this tool.
pub fn etcd_watch(cluster: &EtcdCluster) -> Arc<[Watched]> {
    let mut watched: Vec<Watched> = cluster
        .pids()
        .into_iter()
        .enumerate()
        .map(|(i, pid)| Watched::pid(format!("etcd m{}", i + 1), Role::Store, pid))
        .collect();
    watched.push(Watched::load_generator(&[echo_responder::THREAD_NAME]));
    watched.into()
}

/// The processes `run` accounts: this tool and every `--pid NAME=PID` (`mosquitto` is the
/// broker, any other name part of the store).
pub fn named_watch(pids: &[NamedPid]) -> Arc<[Watched]> {
    let mut watched: Vec<Watched> = pids
        .iter()
        .map(|p| {
            let role = if p.name.eq_ignore_ascii_case("mosquitto") {
                Role::Broker
            } else {
                Role::Store
            };
            Watched::pid(p.name.clone(), role, p.pid)
        })
        .collect();
    watched.push(Watched::load_generator(&[echo_responder::THREAD_NAME]));
    watched.into()
}

/// Runs every workload through an MQTT broker (floor or statestore).
async fn mqtt_cells(
    target: &str,
    broker: &Broker,
    check: Check,
    load: &LoadArgs,
    resolved: &Resolved,
    watched: &Arc<[Watched]>,
    out: &mut Collected,
) {
    // the floor answers without storage: nothing to load
    let mut loaded = check == Check::Echo;
    for workload in &resolved.workloads {
        if workload.mix.needs_preload() && !loaded {
            eprintln!("   {target}: loading {} keys", load.keys);
            if let Err(err) = preload_mqtt(broker, load).await {
                out.notes.push(format!("{target}: {err:#}"));
            }
            loaded = true;
        }
        let disconnects_before = mqtt_load::disconnects();
        let spec = cell_spec(*workload, load, resolved);
        let result = cell::mqtt(broker, check, &spec, watched).await;
        let lost = mqtt_load::disconnects() - disconnects_before;
        if lost > 0 {
            out.notes.push(format!(
                "{target} {workload}: {lost} MQTT load connections lost and reconnected"
            ));
        }
        out.push(target, *workload, result, resolved.duration);
    }
}

/// Runs every workload against etcd.
async fn etcd_cells(
    endpoints: &[String],
    load: &LoadArgs,
    resolved: &Resolved,
    watched: &Arc<[Watched]>,
    out: &mut Collected,
) {
    let mut loaded = false;
    for workload in &resolved.workloads {
        if workload.mix.needs_preload() && !loaded {
            eprintln!("   etcd: loading {} keys", load.keys);
            let stats = etcd_load::run(
                endpoints,
                PRELOAD_CLIENTS,
                PRELOAD_IN_FLIGHT,
                load.value_size,
                load.timeout,
                || Plan::fill(load.keys),
            )
            .await
            .and_then(|stats| check_preload(&stats, load.keys));
            if let Err(err) = stats {
                out.notes.push(format!("etcd: {err:#}"));
            }
            loaded = true;
        }
        let spec = cell_spec(*workload, load, resolved);
        let result = cell::etcd(endpoints, &spec, watched).await;
        out.push("etcd", *workload, result, resolved.duration);
    }
}

async fn floor(
    mosquitto: &Path,
    load: &LoadArgs,
    resolved: &Resolved,
    keep: bool,
    out: &mut Collected,
) -> anyhow::Result<()> {
    let dir = WorkDir::new("floor", keep)?;
    note_kept(&dir, keep, "floor");
    let broker = Mosquitto::start(mosquitto, dir.path())?;
    let echo = EchoResponder::start(&broker.broker())?;
    let watched = floor_watch(&broker);
    mqtt_cells(
        "floor",
        &broker.broker(),
        Check::Echo,
        load,
        resolved,
        &watched,
        out,
    )
    .await;
    eprintln!(
        "   floor: echo responder answered {} requests",
        echo.answered()
    );
    out.memory.push(ProcessMemory {
        target: "floor".to_owned(),
        process: "mosquitto".to_owned(),
        rss_kib: broker.rss_kib(),
    });
    Ok(())
}

async fn etcd(
    bin: &Path,
    load: &LoadArgs,
    resolved: &Resolved,
    keep: bool,
    out: &mut Collected,
) -> anyhow::Result<()> {
    let dir = WorkDir::new("etcd", keep)?;
    note_kept(&dir, keep, "etcd");
    let mut cluster = EtcdCluster::start(bin, dir.path(), 3)?;
    let ready = etcd_load::wait_ready(&cluster.endpoints, Duration::from_secs(60)).await;
    if let Err(err) = ready {
        cluster.check_alive()?;
        return Err(err);
    }
    let watched = etcd_watch(&cluster);
    etcd_cells(&cluster.endpoints, load, resolved, &watched, out).await;
    if let Err(err) = cluster.check_alive() {
        out.notes.push(format!("etcd: {err:#}"));
    }
    for (i, rss) in cluster.rss_kib().into_iter().enumerate() {
        out.memory.push(ProcessMemory {
            target: "etcd".to_owned(),
            process: format!("etcd m{}", i + 1),
            rss_kib: rss,
        });
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn statestore(
    name: &str,
    nodes: usize,
    bin: &Path,
    mosquitto: &Path,
    load: &LoadArgs,
    resolved: &Resolved,
    keep: bool,
    out: &mut Collected,
) -> anyhow::Result<()> {
    let dir = WorkDir::new(name, keep)?;
    note_kept(&dir, keep, name);
    let broker = Mosquitto::start(mosquitto, dir.path())?;
    let mut cluster = StatestoreCluster::start(bin, &broker.broker(), nodes, dir.path(), &[])?;
    let ready = cluster.wait_ready(Duration::from_secs(60)).await?;
    eprintln!("   {name}: ready after {:.2} s", ready.as_secs_f64());
    let watched = statestore_watch(&cluster, &broker);
    mqtt_cells(
        name,
        &broker.broker(),
        Check::Store,
        load,
        resolved,
        &watched,
        out,
    )
    .await;
    for i in 0..nodes {
        if let Err(err) = cluster.check_alive(i) {
            out.notes.push(format!("{name}: {err:#}"));
        }
        let (count, examples) = log_findings(cluster.log_path(i), &["WARN", "ERROR"], 3);
        if count > 0 {
            let examples: Vec<String> = examples.iter().map(|e| format!("`{e}`")).collect();
            out.notes.push(format!(
                "{name}: node {} logged {count} WARN/ERROR lines, e.g. {}",
                i + 1,
                examples.join("; ")
            ));
        }
    }
    for (i, rss) in cluster.rss_kib().into_iter().enumerate() {
        out.memory.push(ProcessMemory {
            target: name.to_owned(),
            process: format!("node {}", i + 1),
            rss_kib: rss,
        });
    }
    out.memory.push(ProcessMemory {
        target: name.to_owned(),
        process: "mosquitto".to_owned(),
        rss_kib: broker.rss_kib(),
    });
    Ok(())
}

fn note_kept(dir: &WorkDir, keep: bool, target: &str) {
    if keep {
        eprintln!("   {target}: files kept in {}", dir.path().display());
    }
}

/// `statestore-bench compare`: returns whether the run passed.
pub async fn compare(args: CompareArgs) -> anyhow::Result<bool> {
    let resolved = args.load.resolve()?;
    let started_unix_ms = mqtt_load::now_ms();
    let statestore_bin = statestore_bin(&args.programs);
    let mosquitto_bin = mosquitto_bin(&args.programs);
    let etcd_bin = args
        .programs
        .etcd_bin
        .is_file()
        .then(|| args.programs.etcd_bin.clone());
    let machine = Machine::collect(tool_versions(
        statestore_bin.as_ref().ok().map(PathBuf::as_path),
        mosquitto_bin.as_ref().ok().map(PathBuf::as_path),
        etcd_bin.as_deref(),
    ));
    eprintln!("{}", machine.line());
    let mut out = Collected::new();
    for target in &args.targets {
        let name = target.name();
        eprintln!("== {name}");
        let workloads = &resolved.workloads;
        let result = match target {
            Target::Floor => match &mosquitto_bin {
                Ok(mosquitto) => {
                    floor(mosquitto, &args.load, &resolved, args.keep_temp, &mut out).await
                }
                Err(err) => Err(anyhow::anyhow!("{err:#}")),
            },
            Target::Etcd => match &etcd_bin {
                Some(etcd_bin) => {
                    etcd(etcd_bin, &args.load, &resolved, args.keep_temp, &mut out).await
                }
                None => {
                    eprintln!(
                        "   etcd: skipped: {} not found (install etcd-server)",
                        args.programs.etcd_bin.display()
                    );
                    out.all(
                        name,
                        workloads,
                        &CellOutcome::Skipped {
                            reason: "etcd-server not installed".to_owned(),
                        },
                    );
                    Ok(())
                }
            },
            Target::Statestore1 | Target::Statestore3 => {
                let nodes = if *target == Target::Statestore1 { 1 } else { 3 };
                match (&statestore_bin, &mosquitto_bin) {
                    (Ok(bin), Ok(mosquitto)) => {
                        statestore(
                            name,
                            nodes,
                            bin,
                            mosquitto,
                            &args.load,
                            &resolved,
                            args.keep_temp,
                            &mut out,
                        )
                        .await
                    }
                    (Err(err), _) | (_, Err(err)) => Err(anyhow::anyhow!("{err:#}")),
                }
            }
        };
        if let Err(err) = result {
            eprintln!("   {name}: FAILED: {err:#}");
            // cells that ran before the failure stay; the rest are marked failed
            let done: Vec<WorkloadSpec> = out
                .results
                .iter()
                .filter(|r| r.target == name)
                .map(|r| r.workload)
                .collect();
            let missing: Vec<WorkloadSpec> = workloads
                .iter()
                .filter(|w| !done.contains(w))
                .copied()
                .collect();
            out.all(
                name,
                &missing,
                &CellOutcome::Failed {
                    reason: format!("{err:#}"),
                },
            );
        }
    }
    finish(
        "compare",
        started_unix_ms,
        settings(&args.load, &resolved),
        machine,
        out,
        &args.load,
    )
}

/// `statestore-bench run`: drives a running statestore; returns whether the run passed.
pub async fn run(args: RunArgs) -> anyhow::Result<bool> {
    let resolved = args.load.resolve()?;
    let broker = Broker::parse(&args.broker)?;
    let started_unix_ms = mqtt_load::now_ms();
    let machine = Machine::collect(tool_versions(None, None, None));
    eprintln!("{}", machine.line());
    eprintln!("== {} at {}", args.label, args.broker);
    let mut out = Collected::new();
    let watched = named_watch(&args.pids);
    mqtt_cells(
        &args.label,
        &broker,
        Check::Store,
        &args.load,
        &resolved,
        &watched,
        &mut out,
    )
    .await;
    finish(
        "run",
        started_unix_ms,
        settings(&args.load, &resolved),
        machine,
        out,
        &args.load,
    )
}

/// Prints the report, writes the JSON, and decides pass/fail.
fn finish(
    command: &str,
    started_unix_ms: u64,
    settings: Settings,
    machine: Machine,
    out: Collected,
    load: &LoadArgs,
) -> anyhow::Result<bool> {
    let ratios = report::ratios(&out.results);
    let report = Report {
        tool: format!("statestore-bench {}", env!("CARGO_PKG_VERSION")),
        command: command.to_owned(),
        started_unix_ms,
        settings,
        machine,
        ratios,
        results: out.results,
        memory: out.memory,
        notes: out.notes,
    };
    println!("{}", report.text());
    if let Some(path) = &load.json {
        report::write_json(path, &report)?;
        eprintln!("JSON written to {}", path.display());
    }
    let failures: Vec<String> = if load.smoke {
        report
            .results
            .iter()
            .filter_map(CellResult::smoke_failure)
            .collect()
    } else {
        report
            .results
            .iter()
            .filter(|r| matches!(r.outcome, CellOutcome::Failed { .. }))
            .map(|r| format!("{} {} failed", r.target, r.workload))
            .collect()
    };
    for failure in &failures {
        eprintln!("FAIL: {failure}");
    }
    if load.smoke && failures.is_empty() {
        eprintln!("smoke: every cell produced figures with zero errors and timeouts");
    }
    Ok(failures.is_empty())
}
