//! The `devicebound` command: one long-lived statestore cluster with its own Mosquitto, used
//! by four phases in order.
//!
//! 1. **SET reference**: the sustained SET cell (clients × in-flight, 1,000 keys) for the
//!    window, so SEND is compared with SET of the same cluster in the same run.
//! 2. **SEND throughput**: the same closed loop sending `SEND bench-dev-NNNN c:<n> <body>` to a
//!    random device of `--devices` online devices, each completing every delivery at once.
//!    Then it waits until every SEND answered `+OK` has been delivered (the backlog).
//! 3. **Open loop**: SENDs on a fixed schedule at half the SEND throughput, round-robin over
//!    the devices, each body stamped with its due instant; the devices record send-to-delivery
//!    latency; stragglers are waited for, then undelivered and duplicate messages are counted.
//! 4. **Drain**: `--drain-messages` SENDs to each of `--devices` devices that never connected
//!    (`bench-drain-NNNN`), each device's in order; then all of them connect (bounded
//!    concurrency) and complete as deliveries arrive, until every message is drained; each
//!    device's deliveries are checked: exactly its messages, in order, once.
//!
//! Node log lines and a few node counters (dropped requests and why, device-bound replies by
//! result) are reported per phase; every figure goes to the report.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::cell::{self, CellSpec, Measured};
use crate::cli::{DeviceboundArgs, DeviceboundPlan};
use crate::compare::{mosquitto_bin, statestore_bin, tool_versions};
use crate::cpu::{self, WindowSampler};
use crate::device_drain::{self, Quantiles, check_sequence};
use crate::device_fleet::{self, Connected, Fleet};
use crate::device_open_loop::{Schedule, send_on_schedule};
use crate::device_recorder::{OpenLog, Recorder};
use crate::device_send::{DeviceIds, DeviceSender, QUEUE_FULL};
use crate::devicebound_report::{
    Backlog, ClosedPhase, DELIVERY_P99_GOAL_MS, DeviceboundReport, DeviceboundSettings, DrainPhase,
    Fill, Latency, OpenLoopPhase, send_set_ratios,
};
use crate::mqtt_load::{self, Broker, Check, Connection, LoadOptions};
use crate::node_counters::{self, Counters, PhaseCounters};
use crate::proc_stat;
use crate::report::{self, CellOutcome, Machine, ProcessMemory};
use crate::stability::{self, CheckResult};
use crate::sustained::{Statestore, log_offsets, node_logs, raft_state, start_statestore};
use crate::sustained_report::NodeLogs;
use crate::workload::{Mix, ValueKind, WorkloadSpec};

/// Outstanding requests per backend connection in the open loop (the sender never waits for
/// them; this only sizes the MQTT client's in-flight window).
const OPEN_LOOP_IN_FLIGHT: usize = 64;
/// Drain devices that failed their check listed by name.
const FAILURES_LISTED: usize = 10;
/// How often the waits look at the devices' counts.
const POLL: Duration = Duration::from_millis(20);

/// The cluster and what the run found so far.
struct Run<'a> {
    plan: &'a DeviceboundPlan,
    args: &'a DeviceboundArgs,
    target: Statestore,
    broker: Broker,
    recorder: Arc<Recorder>,
    log_from: Vec<u64>,
    logs: Vec<NodeLogs>,
    counters_from: Counters,
    counters: Vec<PhaseCounters>,
    notes: Vec<String>,
    failures: Vec<String>,
}

impl Run<'_> {
    /// Counts the node log lines written, and how the node counters moved, since the previous
    /// phase ended.
    async fn end_phase(&mut self, phase: &str) {
        let counters = node_counters::snapshot(&self.target.cluster).await;
        self.counters.push(PhaseCounters {
            phase: phase.to_owned(),
            increase: node_counters::increase(&self.counters_from, &counters),
        });
        self.counters_from = counters;
        let to = log_offsets(&self.target.cluster);
        self.logs.extend(node_logs(
            &self.target.cluster,
            &self.log_from,
            Some(&to),
            phase,
        ));
        self.log_from = to;
        for i in 0..self.target.cluster.nodes.len() {
            if let Err(err) = self.target.cluster.check_alive(i) {
                self.failures.push(format!("after {phase}: {err:#}"));
            }
        }
    }

    fn spec(&self, keys: u64) -> CellSpec {
        CellSpec {
            workload: WorkloadSpec {
                mix: Mix::Set,
                clients: self.plan.clients,
                in_flight: self.plan.in_flight,
            },
            keys,
            value_size: self.args.value_size,
            timeout: self.args.timeout,
            warmup: self.plan.warmup,
            duration: self.plan.duration,
            timeline: true,
        }
    }

    /// Backend connections outside the closed-loop driver.
    async fn backends(&self, in_flight: usize) -> anyhow::Result<Vec<Arc<Connection>>> {
        let options = LoadOptions {
            clients: self.plan.clients,
            in_flight,
            value_size: self.args.value_size,
            values: ValueKind::Pattern,
            timeout: self.args.timeout,
            check: Check::Store,
        };
        Ok(mqtt_load::connect_all(&self.broker, &options)
            .await?
            .into_iter()
            .map(Arc::new)
            .collect())
    }
}

async fn disconnect_all(connections: Vec<Arc<Connection>>) {
    for c in connections {
        c.disconnect().await;
    }
}

/// A closed-loop phase's figures from its cell.
fn closed_phase(
    phase: &str,
    workload: String,
    duration: Duration,
    result: anyhow::Result<Measured>,
) -> (ClosedPhase, u64, Option<(Instant, Instant)>) {
    match result {
        Ok(Measured { stats, cpu, window }) => {
            let timeline = stats
                .timeline
                .as_ref()
                .map(|t| t.seconds())
                .unwrap_or_default();
            let summary = stats.summary(duration);
            eprintln!(
                "   {phase}: {:.0} ops/s, p50 {:.2} ms, p99 {:.2} ms, {} errors, {} timeouts",
                summary.throughput,
                summary.p50_ms,
                summary.p99_ms,
                summary.errors,
                summary.timeouts
            );
            let phase = ClosedPhase {
                phase: phase.to_owned(),
                workload,
                queue_full: stats.error_kinds.get(QUEUE_FULL).copied().unwrap_or(0),
                outcome: CellOutcome::Ran(summary),
                delivered_per_sec: None,
                stability: stability::stability(&timeline),
                timeline,
                cpu,
            };
            (phase, stats.succeeded, window)
        }
        Err(err) => {
            eprintln!("   {phase}: FAILED: {err:#}");
            let phase = ClosedPhase {
                phase: phase.to_owned(),
                workload,
                outcome: CellOutcome::Failed {
                    reason: format!("{err:#}"),
                },
                queue_full: 0,
                delivered_per_sec: None,
                stability: None,
                timeline: Vec::new(),
                cpu: None,
            };
            (phase, 0, None)
        }
    }
}

/// What fails the run in a closed-loop phase: failure, errors (queue full only in smoke, for
/// SEND), timeouts in smoke, zero throughput.
fn closed_failures(phase: &ClosedPhase, smoke: bool) -> Vec<String> {
    let mut out = Vec::new();
    match &phase.outcome {
        CellOutcome::Ran(s) => {
            let other_errors = s.errors - phase.queue_full.min(s.errors);
            if other_errors > 0 || (smoke && s.errors > 0) || (smoke && s.timeouts > 0) {
                out.push(format!(
                    "{}: {} errors ({} queue full), {} timeouts {:?}",
                    phase.phase, s.errors, phase.queue_full, s.timeouts, s.error_kinds
                ));
            }
            if s.ops == 0 {
                out.push(format!("{}: zero throughput", phase.phase));
            }
        }
        CellOutcome::Skipped { reason } | CellOutcome::Failed { reason } => {
            out.push(format!("{}: failed: {reason}", phase.phase));
        }
    }
    out
}

/// Waits (at most `within`) until the devices received every closed-loop SEND answered `+OK`.
async fn wait_backlog(recorder: &Recorder, sends_ok: u64, within: Duration) -> Backlog {
    let start = Instant::now();
    while recorder.closed() < sends_ok && start.elapsed() < within {
        tokio::time::sleep(POLL).await;
    }
    let delivered = recorder.closed();
    Backlog {
        sends_ok,
        delivered,
        waited_secs: start.elapsed().as_secs_f64(),
        drained: delivered >= sends_ok,
    }
}

/// Phase 3.
async fn open_loop(
    run: &mut Run<'_>,
    ids: &Arc<DeviceIds>,
    rate: f64,
    rate_source: String,
) -> anyhow::Result<OpenLoopPhase> {
    let plan = run.plan;
    let connections = run.backends(OPEN_LOOP_IN_FLIGHT).await?;
    let start = Instant::now() + Duration::from_millis(200);
    let schedule = Schedule::new(start, rate, plan.duration);
    let count = usize::try_from(schedule.count()).unwrap_or(usize::MAX);
    run.recorder
        .start_open(OpenLog::new(count, start, plan.duration));
    let sampler = WindowSampler::spawn(run.target.watched.clone(), start, start + plan.duration);
    eprintln!(
        "   sending {} SENDs at {rate:.0}/s ({rate_source})",
        schedule.count()
    );
    let sent = send_on_schedule(
        &connections,
        ids,
        &schedule,
        run.recorder.origin(),
        run.args.value_size,
    )
    .await;
    disconnect_all(connections).await;
    let cpu = sampler.finish(sent.replies.succeeded).await;
    let wait_start = Instant::now();
    let undelivered = |recorder: &Recorder| {
        recorder
            .with_open(|log| log.undelivered(&sent.answered_ok).0)
            .unwrap_or(0)
    };
    while undelivered(&run.recorder) > 0 && wait_start.elapsed() < plan.straggler_wait {
        tokio::time::sleep(POLL).await;
    }
    let straggler_wait_secs = wait_start.elapsed().as_secs_f64();
    let log = run
        .recorder
        .take_open()
        .context("the open-loop log vanished")?;
    let (undelivered, delivered_unanswered) = log.undelivered(&sent.answered_ok);
    let sending = sent.last_publish.saturating_duration_since(start);
    let replies = sent.replies.summary(plan.duration);
    let us_to_ms = |us: u64| us as f64 / 1000.0;
    Ok(OpenLoopPhase {
        target_rate: rate,
        rate_source,
        duration_secs: plan.duration.as_secs_f64(),
        sent: sent.sent,
        achieved_rate: if sending > Duration::ZERO {
            // sends 0..n are due over n − 1 intervals
            sent.sent.saturating_sub(1) as f64 / sending.as_secs_f64()
        } else {
            0.0
        },
        queue_full: replies.error_kinds.get(QUEUE_FULL).copied().unwrap_or(0),
        replies,
        delivered: log.delivered,
        duplicates: log.duplicates,
        unexpected: log.unexpected,
        undelivered,
        delivered_unanswered,
        latency: Latency::of(&log.histogram),
        sender_lag_p99_ms: us_to_ms(sent.lag.value_at_quantile(0.99)),
        sender_lag_max_ms: us_to_ms(sent.lag.max()),
        straggler_wait_secs,
        timeline: log
            .timeline
            .as_ref()
            .map(|t| t.seconds())
            .unwrap_or_default(),
        cpu,
    })
}

/// Phase 4.
async fn drain(run: &mut Run<'_>) -> anyhow::Result<DrainPhase> {
    let plan = run.plan;
    let ids = Arc::new(DeviceIds::new("bench-drain", plan.devices));
    let connections = run.backends(plan.in_flight).await?;
    eprintln!(
        "   filling {} offline devices with {} messages each",
        ids.len(),
        plan.drain_messages
    );
    let filled = device_drain::fill(
        &connections,
        &ids,
        plan.drain_messages,
        plan.clients * plan.in_flight,
        run.args.value_size,
    )
    .await;
    disconnect_all(connections).await;
    let fill_summary = filled.replies.summary(filled.elapsed);
    let fill = Fill {
        secs: filled.elapsed.as_secs_f64(),
        rate: fill_summary.throughput,
        ok: filled.replies.succeeded,
        errors: fill_summary.errors,
        queue_full: fill_summary
            .error_kinds
            .get(QUEUE_FULL)
            .copied()
            .unwrap_or(0),
        timeouts: fill_summary.timeouts,
        retries: filled.retries,
        error_kinds: fill_summary.error_kinds.clone(),
        p50_ms: fill_summary.p50_ms,
        p99_ms: fill_summary.p99_ms,
    };
    eprintln!(
        "   filled: {} SENDs answered +OK in {:.1} s ({:.0}/s), {} errors, {} retries, {} timeouts",
        fill.ok, fill.secs, fill.rate, fill.errors, fill.retries, fill.timeouts
    );
    let expected: u64 = filled.enqueued.iter().sum();

    eprintln!(
        "   connecting {} devices, {} at a time",
        ids.len(),
        plan.connect_concurrency
    );
    let watched = run.target.watched.clone();
    let cpu_start = cpu::sample(&watched);
    let drain_start = Instant::now();
    let (fleet, connected) =
        Fleet::connect(&run.broker, &ids, &run.recorder, plan.connect_concurrency)
            .await
            .context("connect the drain devices")?;
    let connected_secs = connected
        .iter()
        .map(|c| c.subscribed.saturating_duration_since(drain_start))
        .max()
        .unwrap_or_default()
        .as_secs_f64();
    let deadline = drain_start + plan.drain_timeout;
    while run.recorder.drain_total() < expected && Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
    }
    let cpu_end = cpu::sample(&watched);
    let completed = run.recorder.drain_total() >= expected;
    // a moment for deliveries beyond the expected ones (duplicates) to show up
    tokio::time::sleep(if run.args.smoke {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(1)
    })
    .await;
    let logs = run.recorder.drain_logs();
    fleet.disconnect().await;

    let received: u64 = logs.iter().map(|l| l.seqs.len() as u64).sum();
    let last_completion = logs.iter().filter_map(|l| l.last_completion).max();
    let drain_secs = match (completed, last_completion) {
        (true, Some(last)) => last.saturating_duration_since(drain_start),
        _ => deadline.saturating_duration_since(drain_start),
    }
    .as_secs_f64();
    let mut per_device = Vec::new();
    let mut first_delivery = Vec::new();
    let mut failures = Vec::new();
    let mut devices_failed = 0;
    for (d, log) in logs.iter().enumerate() {
        let want = filled.enqueued.get(d).copied().unwrap_or(0);
        let check = check_sequence(&log.seqs, want);
        if !check.passed() {
            devices_failed += 1;
            if failures.len() < FAILURES_LISTED {
                failures.push(format!(
                    "{}: {} (received {} of {want})",
                    ids.get(d),
                    check.problems(),
                    check.received
                ));
            }
        }
        let Some(Connected {
            started,
            subscribed,
        }) = connected.get(d).copied()
        else {
            continue;
        };
        if let Some(last) = log.last_completion {
            per_device.push(last.saturating_duration_since(started));
        }
        if let Some(first) = log.first_delivery {
            first_delivery.push(first.saturating_duration_since(subscribed));
        }
    }
    let cpu = cpu::CpuReport::between(
        &watched,
        &cpu_start,
        &cpu_end,
        received,
        proc_stat::clock_ticks_per_second(),
    );
    Ok(DrainPhase {
        devices: ids.len(),
        messages_per_device: plan.drain_messages,
        fill,
        connect_concurrency: plan.connect_concurrency,
        connected_secs,
        completed,
        expected,
        received,
        drain_secs,
        messages_per_sec: if drain_secs > 0.0 {
            received as f64 / drain_secs
        } else {
            0.0
        },
        per_device_drain: Quantiles::of(&per_device),
        first_delivery: Quantiles::of(&first_delivery),
        devices_ok: logs.len() - devices_failed,
        devices_failed,
        failures,
        cpu: Some(cpu),
    })
}

/// Half the sustainable SEND throughput of phase 2: SENDs answered `+OK` per second, unless
/// the devices fell behind (queue-full replies, or deliveries per second more than 10 % below
/// SENDs per second: queues were filling up); then the deliveries are what can be sustained,
/// and SENDs faster than that would only fill the queues.
fn open_loop_rate(send: &ClosedPhase) -> (f64, String) {
    let send_ops = send.summary().map_or(0.0, |s| s.throughput);
    match send.delivered_per_sec {
        Some(delivered) if fell_behind(send_ops, delivered, send.queue_full) => (
            delivered / 2.0,
            format!(
                "half the {delivered:.0} deliveries/s of phase 2, fewer than its {send_ops:.0} SENDs/s"
            ),
        ),
        _ => (
            send_ops / 2.0,
            format!("half the {send_ops:.0} SENDs/s of phase 2"),
        ),
    }
}

/// Whether the devices received fewer messages than the SENDs accepted: queue-full replies, or
/// deliveries more than 10 % below SENDs (the rest is messages in flight at the window's end).
pub fn fell_behind(sends_per_sec: f64, delivered_per_sec: f64, queue_full: u64) -> bool {
    delivered_per_sec < sends_per_sec && (queue_full > 0 || delivered_per_sec < 0.9 * sends_per_sec)
}

/// What fails the run in the open loop and the drain.
fn delivery_failures(
    open: Option<&OpenLoopPhase>,
    drain: Option<&DrainPhase>,
    smoke: bool,
) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(o) = open {
        let r = &o.replies;
        let other_errors = r.errors - o.queue_full.min(r.errors);
        if other_errors > 0 || (smoke && (r.errors > 0 || r.timeouts > 0)) {
            out.push(format!(
                "open loop: {} errors ({} queue full), {} timeouts {:?}",
                r.errors, o.queue_full, r.timeouts, r.error_kinds
            ));
        }
        if o.undelivered > 0 || o.duplicates > 0 || o.unexpected > 0 {
            out.push(format!(
                "open loop: {} undelivered after {:.1} s, {} duplicates, {} unexpected deliveries",
                o.undelivered, o.straggler_wait_secs, o.duplicates, o.unexpected
            ));
        }
        if o.delivered == 0 {
            out.push("open loop: nothing delivered".to_owned());
        }
    }
    if let Some(d) = drain {
        if d.fill.errors > 0 || d.fill.timeouts > 0 {
            out.push(format!(
                "drain fill: {} errors ({} queue full), {} timeouts {:?}",
                d.fill.errors, d.fill.queue_full, d.fill.timeouts, d.fill.error_kinds
            ));
        }
        if !d.completed {
            out.push(format!(
                "drain: {} of {} messages delivered within {:.0} s",
                d.received, d.expected, d.drain_secs
            ));
        }
        if d.devices_failed > 0 {
            out.push(format!(
                "drain: {} devices did not receive exactly their messages in order once, e.g. {}",
                d.devices_failed,
                d.failures.first().map(String::as_str).unwrap_or("?")
            ));
        }
        if d.received == 0 {
            out.push("drain: nothing delivered".to_owned());
        }
    }
    out
}

/// The goals.
fn checks(
    send: Option<&ClosedPhase>,
    open: Option<&OpenLoopPhase>,
    drain: Option<&DrainPhase>,
    logs: &[NodeLogs],
) -> Vec<CheckResult> {
    let mut out = Vec::new();
    if let Some(send) = send {
        out.push(CheckResult {
            name: "SEND throughput: devices keep up".to_owned(),
            passed: send.queue_full == 0,
            detail: format!(
                "{} `device queue is full` replies (goal 0)",
                send.queue_full
            ),
        });
    }
    if let Some(o) = open {
        let p99 = o.latency.as_ref().map(|l| l.p99_ms);
        out.push(CheckResult {
            name: "open loop: p99 send-to-delivery".to_owned(),
            passed: p99.is_some_and(|p| p <= DELIVERY_P99_GOAL_MS),
            detail: format!(
                "{} at {:.0} SENDs/s (goal ≤ {DELIVERY_P99_GOAL_MS:.0} ms)",
                p99.map_or("no deliveries".to_owned(), |p| format!("{p:.1} ms")),
                o.achieved_rate
            ),
        });
    }
    if let Some(d) = drain {
        out.push(CheckResult {
            name: "drain: every device got exactly its messages, in order, once".to_owned(),
            passed: d.completed && d.devices_failed == 0,
            detail: format!(
                "{} of {} devices; {} of {} messages",
                d.devices_ok, d.devices, d.received, d.expected
            ),
        });
    }
    let (timeouts, errors) = logs
        .iter()
        .fold((0, 0), |(t, e), l| (t + l.timeout_lines, e + l.error_lines));
    out.push(stability::log_check(timeouts, errors));
    out
}

/// `statestore-bench devicebound`: returns whether the run passed.
pub async fn devicebound(args: DeviceboundArgs) -> anyhow::Result<bool> {
    let plan = args.resolve()?;
    let started_unix_ms = mqtt_load::now_ms();
    let load_at_start = proc_stat::load_average();
    let bin = statestore_bin(&args.programs)?;
    let mosquitto = mosquitto_bin(&args.programs)?;
    let machine = Machine::collect(tool_versions(Some(&bin), Some(&mosquitto), None));
    eprintln!("{}", machine.line());

    eprintln!("== starting statestore-{} with its Mosquitto", plan.nodes);
    let (target, ready) = start_statestore(
        "devicebound",
        plan.nodes,
        &args.programs,
        args.keep_temp,
        &args.node_args,
    )
    .await?;
    let broker = target.broker.broker();
    let log_from = log_offsets(&target.cluster);
    let counters_from = node_counters::snapshot(&target.cluster).await;
    let mut run = Run {
        plan: &plan,
        args: &args,
        broker,
        recorder: Arc::new(Recorder::new(plan.devices)),
        log_from,
        logs: Vec::new(),
        counters_from,
        counters: Vec::new(),
        notes: Vec::new(),
        failures: Vec::new(),
        target,
    };

    let concurrency = format!("{}×{}", plan.clients, plan.in_flight);
    eprintln!("== 1. SET reference, {concurrency}");
    let spec = run.spec(args.keys);
    let result = cell::mqtt(&run.broker, Check::Store, &spec, &run.target.watched).await;
    let (set, _, _) = closed_phase(
        "SET reference",
        format!("SET {concurrency}"),
        plan.duration,
        result,
    );
    run.failures.extend(closed_failures(&set, args.smoke));
    run.end_phase("1 SET").await;

    eprintln!(
        "== connecting {} online devices, {} at a time",
        plan.devices, plan.connect_concurrency
    );
    let ids = Arc::new(DeviceIds::new("bench-dev", plan.devices));
    let connect_start = Instant::now();
    let (fleet, connected) =
        Fleet::connect(&run.broker, &ids, &run.recorder, plan.connect_concurrency)
            .await
            .context("connect the online devices")?;
    let devices_connected_secs = connected
        .iter()
        .map(|c| c.subscribed.saturating_duration_since(connect_start))
        .max()
        .map(|d| d.as_secs_f64());
    let devices_rss_kib = crate::processes::rss_kib(std::process::id());

    eprintln!(
        "== 2. SEND throughput, {concurrency} to {} devices",
        fleet.len()
    );
    let spec = run.spec(plan.devices as u64);
    let result = cell::mqtt_with(
        &run.broker,
        Check::Store,
        &spec,
        &run.target.watched,
        |i, connection| DeviceSender::new(i, connection, ids.clone()),
    )
    .await;
    let (mut send, sends_ok, window) = closed_phase(
        "SEND throughput",
        format!("SEND {concurrency} → {} devices", plan.devices),
        plan.duration,
        result,
    );
    send.delivered_per_sec = window.map(|(start, end)| {
        let secs = end.saturating_duration_since(start).as_secs_f64();
        run.recorder.closed_between(start, end) as f64 / secs.max(1e-9)
    });
    run.failures.extend(closed_failures(&send, args.smoke));
    let backlog = wait_backlog(&run.recorder, sends_ok, plan.drain_timeout).await;
    eprintln!(
        "   backlog: {} of {} delivered after {:.1} s",
        backlog.delivered, backlog.sends_ok, backlog.waited_secs
    );
    if !backlog.drained {
        run.failures.push(format!(
            "SEND throughput: {} SENDs answered +OK still undelivered {:.0} s after the window",
            backlog.sends_ok - backlog.delivered,
            backlog.waited_secs
        ));
    }
    run.end_phase("2 SEND").await;

    let (rate, rate_source) = match plan.rate {
        Some(rate) => (rate, "--rate".to_owned()),
        None => open_loop_rate(&send),
    };
    let open = if rate >= 1.0 {
        eprintln!("== 3. open loop at {rate:.0} SENDs/s");
        match open_loop(&mut run, &ids, rate, rate_source).await {
            Ok(open) => {
                eprintln!(
                    "   delivered {} of {}, p99 {} ms, {} undelivered",
                    open.delivered,
                    open.sent,
                    open.latency
                        .map_or("–".to_owned(), |l| format!("{:.1}", l.p99_ms)),
                    open.undelivered
                );
                Some(open)
            }
            Err(err) => {
                run.failures.push(format!("open loop: {err:#}"));
                None
            }
        }
    } else {
        run.failures
            .push(format!("open loop: not run, rate {rate:.1} SENDs/s"));
        None
    };
    run.end_phase("3 open loop").await;
    fleet.disconnect().await;

    eprintln!(
        "== 4. drain: {} offline devices × {} messages",
        plan.devices, plan.drain_messages
    );
    let drain = match drain(&mut run).await {
        Ok(drain) => {
            eprintln!(
                "   drained {} of {} in {:.2} s ({:.0} messages/s); {} devices failed the check",
                drain.received,
                drain.expected,
                drain.drain_secs,
                drain.messages_per_sec,
                drain.devices_failed
            );
            Some(drain)
        }
        Err(err) => {
            run.failures.push(format!("drain: {err:#}"));
            None
        }
    };
    run.end_phase("4 drain").await;

    run.failures
        .extend(delivery_failures(open.as_ref(), drain.as_ref(), args.smoke));
    let device_disconnects = device_fleet::disconnects();
    let settle_failures = device_fleet::settle_failures();
    let unrecognised = run.recorder.unrecognised();
    if device_disconnects > 0 || settle_failures > 0 || unrecognised > 0 {
        run.notes.push(format!(
            "devices: {device_disconnects} connection losses, {settle_failures} completions not published, {unrecognised} unrecognised deliveries"
        ));
    }
    let lost = mqtt_load::disconnects();
    if lost > 0 {
        run.notes.push(format!(
            "{lost} backend MQTT connections lost and reconnected"
        ));
    }
    if args.keep_temp {
        eprintln!("   logs in {}", run.target.dir.path().display());
    }
    let raft_at_end = raft_state(&run.target.cluster).await;
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
    memory.push(ProcessMemory {
        target: "statestore-bench".to_owned(),
        process: "load generator + devices".to_owned(),
        rss_kib: crate::processes::rss_kib(std::process::id()),
    });

    let (send_set_ratio, send_set_cpu_ratio) = send_set_ratios(Some(&set), Some(&send));
    let report = DeviceboundReport {
        tool: format!("statestore-bench {}", env!("CARGO_PKG_VERSION")),
        command: "devicebound".to_owned(),
        started_unix_ms,
        machine,
        settings: DeviceboundSettings {
            nodes: plan.nodes,
            devices: plan.devices,
            clients: plan.clients,
            in_flight: plan.in_flight,
            duration_secs: plan.duration.as_secs_f64(),
            warmup_secs: plan.warmup.as_secs_f64(),
            keys: args.keys,
            value_size: args.value_size,
            timeout_secs: args.timeout.as_secs_f64(),
            drain_messages: plan.drain_messages,
            rate: plan.rate,
            connect_concurrency: plan.connect_concurrency,
            straggler_wait_secs: plan.straggler_wait.as_secs_f64(),
            drain_timeout_secs: plan.drain_timeout.as_secs_f64(),
            node_args: args.node_args.clone(),
            smoke: args.smoke,
        },
        ready_secs: ready.as_secs_f64(),
        load_average: [load_at_start, proc_stat::load_average()],
        devices_connected_secs,
        devices_rss_kib,
        checks: checks(Some(&send), open.as_ref(), drain.as_ref(), &run.logs),
        set_reference: Some(set),
        send: Some(send),
        send_set_ratio,
        send_set_cpu_ratio,
        backlog: Some(backlog),
        open_loop: open,
        drain,
        node_logs: run.logs,
        node_counters: run.counters,
        raft_at_end,
        memory,
        device_disconnects,
        settle_failures,
        unrecognised_deliveries: unrecognised,
        failures: run.failures,
        notes: run.notes,
    };
    println!("{}", report.text());
    if let Some(path) = &args.json {
        report::write_json(path, &report)?;
        eprintln!("JSON written to {}", path.display());
    }
    for failure in &report.failures {
        eprintln!("FAIL: {failure}");
    }
    if args.smoke && report.failures.is_empty() {
        eprintln!(
            "smoke: every phase produced figures with no error, timeout, lost or duplicate delivery"
        );
    }
    Ok(report.failures.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Summary;
    use std::collections::BTreeMap;

    fn ran(errors: u64, queue_full: u64, timeouts: u64, ops: u64) -> ClosedPhase {
        let mut error_kinds = BTreeMap::new();
        if queue_full > 0 {
            error_kinds.insert(QUEUE_FULL.to_owned(), queue_full);
        }
        ClosedPhase {
            phase: "SEND throughput".to_owned(),
            workload: "SEND 4×4".to_owned(),
            outcome: CellOutcome::Ran(Summary {
                ops,
                throughput: ops as f64,
                p50_ms: 1.0,
                p90_ms: 1.0,
                p99_ms: 1.0,
                p999_ms: 1.0,
                max_ms: 1.0,
                latency_samples: ops,
                errors,
                timeouts,
                error_kinds,
            }),
            queue_full,
            delivered_per_sec: None,
            stability: None,
            timeline: Vec::new(),
            cpu: None,
        }
    }

    #[test]
    fn the_open_loop_runs_at_half_the_sustainable_send_rate() {
        // (SENDs/s, deliveries/s, queue-full replies, rate)
        for (ops, delivered, full, rate) in [
            (1000, None, 0, 500.0),
            (1000, Some(1001.0), 0, 500.0),
            (1000, Some(999.0), 0, 500.0),
            (1000, Some(999.0), 3, 499.5),
            (1000, Some(300.0), 0, 150.0),
            (1000, Some(300.0), 7, 150.0),
            (0, Some(0.0), 0, 0.0),
        ] {
            let phase = ClosedPhase {
                delivered_per_sec: delivered,
                ..ran(full, full, 0, ops)
            };
            assert_eq!(open_loop_rate(&phase).0, rate, "{ops} {delivered:?} {full}");
        }
    }

    #[test]
    fn what_fails_a_closed_phase() {
        // (errors, of them queue full, timeouts, ops, fails in smoke, fails in a full run)
        let cases = [
            (0, 0, 0, 100, false, false),
            (5, 5, 0, 100, true, false),
            (5, 4, 0, 100, true, true),
            (0, 0, 3, 100, true, false),
            (0, 0, 0, 0, true, true),
        ];
        for (errors, full, timeouts, ops, smoke_fails, full_fails) in cases {
            let phase = ran(errors, full, timeouts, ops);
            assert_eq!(
                !closed_failures(&phase, true).is_empty(),
                smoke_fails,
                "smoke {errors}/{full}/{timeouts}/{ops}"
            );
            assert_eq!(
                !closed_failures(&phase, false).is_empty(),
                full_fails,
                "full {errors}/{full}/{timeouts}/{ops}"
            );
        }
        let failed = ClosedPhase {
            outcome: CellOutcome::Failed {
                reason: "broker gone".to_owned(),
            },
            ..ran(0, 0, 0, 0)
        };
        assert_eq!(closed_failures(&failed, false).len(), 1);
    }
}
