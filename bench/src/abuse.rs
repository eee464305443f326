//! The `abuse` command (issue 27): one long-lived statestore cluster with its own Mosquitto,
//! a well-behaved client doing closed-loop SETs (`--clients` × `--in-flight`), measured in a
//! quiet window and then under each attack of [`crate::abuse_attacks`] in turn, a quiet window
//! before each. Per attack it reports the well-behaved SET p50/p99/max, count, errors and
//! timeouts, the attack's own request rate and what came back, the ratio of the p99 under
//! attack to the median quiet p99 (the goal: at most 2×), the nodes' CPU per
//! well-behaved SET, and how the nodes' dropped-request and notification counters moved.

use std::time::{Duration, Instant};

use crate::abuse_attacks::{self, Attack, Context};
use crate::abuse_report::{
    AbuseReport, AbuseSettings, AttackRow, Window, fill_ratios, goal_checks, p99_with_timeouts,
};
use crate::cell::{self, CellSpec, Measured};
use crate::cli::{AbuseArgs, AbusePlan};
use crate::compare::{mosquitto_bin, statestore_bin, tool_versions};
use crate::cpu::Role;
use crate::mqtt_load::{self, Broker, Check};
use crate::node_counters::{self, Counters};
use crate::proc_stat;
use crate::report::{self, CellOutcome, Machine, ProcessMemory};
use crate::stability;
use crate::sustained::{Statestore, log_offsets, node_logs, start_statestore};
use crate::sustained_report::NodeLogs;
use crate::workload::{Mix, WorkloadSpec};

/// The node counters reported per window.
const COUNTERS: &[&str] = &[
    "statestore_server_requests_dropped_total",
    "statestore_server_dedup_hits_total",
    "statestore_notify_sent_total",
    "statestore_notify_dropped_total",
];

/// The cluster and what the run found so far.
struct Run<'a> {
    args: &'a AbuseArgs,
    plan: &'a AbusePlan,
    /// Where the attackers run: a runtime of their own, on its own thread, so their work
    /// (decoding 4 MiB replies, thousands of notifications) never holds up the well-behaved
    /// client's tasks inside this process; only the machine is shared, as with a real attacker.
    attackers: tokio::runtime::Handle,
    target: Statestore,
    broker: Broker,
    log_from: Vec<u64>,
    logs: Vec<NodeLogs>,
    failures: Vec<String>,
}

impl Run<'_> {
    fn spec(&self) -> CellSpec {
        CellSpec {
            workload: WorkloadSpec {
                mix: Mix::Set,
                clients: self.args.clients,
                in_flight: self.args.in_flight,
            },
            keys: self.args.keys,
            value_size: self.args.value_size,
            timeout: self.args.timeout,
            warmup: self.plan.warmup,
            duration: self.plan.duration,
            timeline: false,
        }
    }

    /// One measured window of the well-behaved client, labelled `label`.
    async fn window(&mut self, label: String) -> Window {
        let before = node_counters::snapshot_of(&self.target.cluster, COUNTERS).await;
        let result = cell::mqtt(
            &self.broker,
            Check::Store,
            &self.spec(),
            &self.target.watched,
        )
        .await;
        let after = node_counters::snapshot_of(&self.target.cluster, COUNTERS).await;
        let window = window_of(
            label,
            result,
            node_counters::increase(&before, &after),
            self.plan.duration,
            self.args.timeout,
        );
        let to = log_offsets(&self.target.cluster);
        self.logs.extend(node_logs(
            &self.target.cluster,
            &self.log_from,
            Some(&to),
            &window.label,
        ));
        self.log_from = to;
        for i in 0..self.target.cluster.nodes.len() {
            if let Err(err) = self.target.cluster.check_alive(i) {
                self.failures
                    .push(format!("after {}: {err:#}", window.label));
            }
        }
        window
    }
}

/// Longest wait after an attack for the nodes to finish the requests it left behind.
const SETTLE_WITHIN: Duration = Duration::from_secs(60);

/// Waits (at most [`SETTLE_WITHIN`]) until no node holds a request in flight
/// (`statestore_server_requests_in_flight`), so the next quiet window is quiet; returns how
/// long it took, `None` if the nodes never settled.
async fn settle(cluster: &crate::processes::StatestoreCluster) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < SETTLE_WITHIN {
        let mut in_flight = 0.0;
        for i in 0..cluster.nodes.len() {
            if let Ok(text) = cluster.metrics_text(i).await {
                in_flight += in_flight_of(&text);
            }
        }
        if in_flight == 0.0 {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// `statestore_server_requests_in_flight` in a node's metrics text (0 when absent).
fn in_flight_of(metrics: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| {
            line.strip_prefix("statestore_server_requests_in_flight ")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

/// The figures of one window.
fn window_of(
    label: String,
    result: anyhow::Result<Measured>,
    counters: Counters,
    duration: Duration,
    timeout: Duration,
) -> Window {
    match result {
        Ok(Measured { stats, cpu, .. }) => {
            let summary = stats.summary(duration);
            eprintln!(
                "   {label}: {} SETs, p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms, {} errors, {} timeouts",
                summary.ops,
                summary.p50_ms,
                summary.p99_ms,
                summary.max_ms,
                summary.errors,
                summary.timeouts
            );
            let per_node = cpu
                .as_ref()
                .map(|c| {
                    c.processes
                        .iter()
                        .filter(|p| p.role == Role::Store)
                        .map(|p| (p.process.clone(), p.cpu.and_then(|f| f.us_per_op)))
                        .collect()
                })
                .unwrap_or_default();
            Window {
                label,
                p99_with_timeouts_ms: p99_with_timeouts(&summary, timeout.as_secs_f64() * 1000.0),
                outcome: CellOutcome::Ran(summary),
                nodes_us_per_set: cpu.as_ref().and_then(|c| c.store_us_per_op()),
                per_node_us_per_set: per_node,
                counters,
            }
        }
        Err(err) => {
            eprintln!("   {label}: FAILED: {err:#}");
            Window {
                label,
                outcome: CellOutcome::Failed {
                    reason: format!("{err:#}"),
                },
                nodes_us_per_set: None,
                per_node_us_per_set: Vec::new(),
                counters,
                p99_with_timeouts_ms: None,
            }
        }
    }
}

/// What fails the run in a quiet window: no figures, no throughput, and in smoke any error or
/// timeout.
fn quiet_failures(window: &Window, smoke: bool) -> Vec<String> {
    match &window.outcome {
        CellOutcome::Ran(s) => {
            let mut out = Vec::new();
            if s.ops == 0 {
                out.push(format!("{}: zero throughput", window.label));
            }
            if smoke && (s.errors > 0 || s.timeouts > 0) {
                out.push(format!(
                    "{}: {} errors, {} timeouts {:?}",
                    window.label, s.errors, s.timeouts, s.error_kinds
                ));
            }
            out
        }
        CellOutcome::Skipped { reason } | CellOutcome::Failed { reason } => {
            vec![format!("{}: failed: {reason}", window.label)]
        }
    }
}

/// One attack: the quiet window before it, then the window under it.
async fn attack_row(run: &mut Run<'_>, attack: Attack) -> AttackRow {
    eprintln!("== quiet before {}", attack.name());
    let quiet = run.window(format!("quiet before {}", attack.name())).await;
    run.failures.extend(quiet_failures(&quiet, run.args.smoke));
    let quiet_rate = quiet
        .outcome
        .summary()
        .map_or(0.0, |s| s.throughput / run.args.clients as f64);
    let context = Context {
        broker: run.broker.clone(),
        // The attackers' ids come from their own counter: these are the ids the cell's
        // connections take next.
        victims: mqtt_load::next_unique_ids("bench", run.args.clients),
        victim_rate_per_client: quiet_rate,
        window: run.plan.warmup + run.plan.duration,
    };
    eprintln!("== {}: preparing", attack.name());
    let started = run
        .attackers
        .spawn(async move { abuse_attacks::start(attack, &context).await })
        .await
        .map_err(|err| anyhow::anyhow!("attack task: {err}"))
        .and_then(|started| started);
    let running = match started {
        Ok(running) => running,
        Err(err) => {
            let failure = format!("{}: could not start: {err:#}", attack.name());
            eprintln!("   {failure}");
            run.failures.push(failure.clone());
            return AttackRow {
                attack,
                quiet,
                under: None,
                stats: None,
                failure: Some(failure),
                p99_ratio: None,
                p99_ratio_to_preceding: None,
            };
        }
    };
    eprintln!("== {}: under attack", attack.name());
    let under = run.window(attack.name().to_owned()).await;
    let mut stats = match run.attackers.spawn(running.finish()).await {
        Ok(stats) => stats,
        Err(err) => {
            run.failures
                .push(format!("{}: attack task: {err}", attack.name()));
            Default::default()
        }
    };
    match settle(&run.target.cluster).await {
        Some(took) => stats.notes.push(format!(
            "the nodes finished its requests {:.1} s after it stopped",
            took.as_secs_f64()
        )),
        None => stats.notes.push(format!(
            "the nodes still held requests {} s after it stopped",
            SETTLE_WITHIN.as_secs()
        )),
    }
    eprintln!(
        "   {}: {} requests ({:.0}/s), {} answered ({} -ERR), {} received elsewhere, {} forged answers delivered{}",
        attack.name(),
        stats.sent,
        stats.rate(),
        stats.answered,
        stats.refused,
        stats.received_elsewhere,
        stats.forged_delivered,
        if stats.notes.is_empty() {
            String::new()
        } else {
            format!("; {}", stats.notes.join("; "))
        }
    );
    AttackRow {
        attack,
        quiet,
        under: Some(under),
        stats: Some(stats),
        failure: None,
        p99_ratio: None,
        p99_ratio_to_preceding: None,
    }
}

/// `statestore-bench abuse`: returns whether the run passed (the goals are reported, not
/// enforced).
pub async fn abuse(args: AbuseArgs) -> anyhow::Result<bool> {
    let plan = args.resolve()?;
    let started_unix_ms = mqtt_load::now_ms();
    let load_at_start = proc_stat::load_average();
    let bin = statestore_bin(&args.programs)?;
    let mosquitto = mosquitto_bin(&args.programs)?;
    let machine = Machine::collect(tool_versions(Some(&bin), Some(&mosquitto), None));
    eprintln!("{}", machine.line());

    let mut node_args = abuse_attacks::node_args();
    node_args.extend(args.node_args.iter().cloned());
    eprintln!("== starting statestore-{} with its Mosquitto", args.nodes);
    let (target, ready) = start_statestore(
        "abuse",
        args.nodes,
        &args.programs,
        args.keep_temp,
        &node_args,
    )
    .await?;
    let broker = target.broker.broker();
    eprintln!(
        "== preparing: {} keys of 64 B for the SCANs, a 4 MiB value",
        abuse_attacks::SCAN_KEYS
    );
    abuse_attacks::prepare_store(&broker).await?;
    let log_from = log_offsets(&target.cluster);
    let attackers = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("attackers")
        .enable_all()
        .build()?;
    let mut run = Run {
        args: &args,
        plan: &plan,
        attackers: attackers.handle().clone(),
        target,
        broker,
        log_from,
        logs: Vec::new(),
        failures: Vec::new(),
    };
    let mut rows = Vec::new();
    for attack in &args.attacks {
        rows.push(attack_row(&mut run, *attack).await);
    }
    // Dropped inside this async context a runtime would block on its threads: let them go.
    attackers.shutdown_background();
    let quiet_p99_median_ms = fill_ratios(&mut rows);
    let mut checks = goal_checks(&rows);
    let (timeouts, errors) = run
        .logs
        .iter()
        .fold((0, 0), |(t, e), l| (t + l.timeout_lines, e + l.error_lines));
    checks.push(stability::log_check(timeouts, errors));

    let mut memory: Vec<ProcessMemory> = run
        .target
        .cluster
        .rss_kib()
        .into_iter()
        .enumerate()
        .map(|(i, rss_kib)| ProcessMemory {
            target: run.target.name.clone(),
            process: format!("node {}", i + 1),
            rss_kib,
        })
        .collect();
    memory.push(ProcessMemory {
        target: run.target.name.clone(),
        process: "mosquitto".to_owned(),
        rss_kib: run.target.broker.rss_kib(),
    });
    let mut notes = Vec::new();
    let lost = mqtt_load::disconnects();
    if lost > 0 {
        notes.push(format!(
            "{lost} well-behaved MQTT connections lost and reconnected"
        ));
    }
    if args.keep_temp {
        eprintln!("   logs in {}", run.target.dir.path().display());
    }
    let report = AbuseReport {
        tool: format!("statestore-bench {}", env!("CARGO_PKG_VERSION")),
        command: "abuse".to_owned(),
        started_unix_ms,
        machine,
        settings: AbuseSettings {
            nodes: args.nodes,
            clients: args.clients,
            in_flight: args.in_flight,
            duration_secs: plan.duration.as_secs_f64(),
            warmup_secs: plan.warmup.as_secs_f64(),
            keys: args.keys,
            value_size: args.value_size,
            timeout_secs: args.timeout.as_secs_f64(),
            attacks: args.attacks.clone(),
            node_args,
            smoke: args.smoke,
        },
        ready_secs: ready.as_secs_f64(),
        load_average: [load_at_start, proc_stat::load_average()],
        quiet_p99_median_ms,
        rows,
        node_logs: run.logs,
        memory,
        checks,
        failures: run.failures,
        notes,
    };
    println!("{}", report.text());
    if let Some(path) = &args.json {
        report::write_json(path, &report)?;
        eprintln!("JSON written to {}", path.display());
    }
    for failure in &report.failures {
        eprintln!("FAIL: {failure}");
    }
    Ok(report.failures.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::CellStats;

    #[test]
    fn requests_in_flight_are_read() {
        let text = "# TYPE statestore_server_requests_in_flight gauge\n\
                    statestore_server_requests_in_flight 3\n\
                    statestore_server_requests_in_flight_other 9\n";
        assert_eq!(in_flight_of(text), 3.0);
        assert_eq!(in_flight_of("nothing 1\n"), 0.0);
    }

    #[test]
    fn quiet_windows_fail_the_run_on_no_throughput_and_in_smoke_on_errors() {
        let mut stats = CellStats::new();
        stats.record_ok(Duration::from_millis(2), true, true);
        stats.record_timeout();
        let measured = || Measured {
            stats: {
                let mut s = CellStats::new();
                s.merge(&stats);
                s
            },
            cpu: None,
            window: None,
        };
        let window = window_of(
            "quiet".to_owned(),
            Ok(measured()),
            Counters::new(),
            Duration::from_secs(1),
            Duration::from_secs(5),
        );
        assert!(quiet_failures(&window, false).is_empty());
        assert_eq!(quiet_failures(&window, true).len(), 1);
        let empty = window_of(
            "quiet".to_owned(),
            Ok(Measured {
                stats: CellStats::new(),
                cpu: None,
                window: None,
            }),
            Counters::new(),
            Duration::from_secs(1),
            Duration::from_secs(5),
        );
        assert_eq!(
            quiet_failures(&empty, false),
            vec!["quiet: zero throughput"]
        );
        let failed = window_of(
            "quiet".to_owned(),
            Err(anyhow::anyhow!("broker gone")),
            Counters::new(),
            Duration::from_secs(1),
            Duration::from_secs(5),
        );
        assert_eq!(
            quiet_failures(&failed, false),
            vec!["quiet: failed: broker gone"]
        );
    }
}
