//! What `devicebound` prints and writes: one markdown table per phase (the closed-loop SET
//! reference and SEND throughput side by side with their ratio, the SEND per-second timeline
//! and CPU, the open-loop send-to-delivery latency with its timeline and CPU, the drain), the
//! node-log counts per phase, and the checks; all of it in the JSON document.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::cpu::{CpuReport, Role};
use crate::device_drain::Quantiles;
use crate::node_counters::PhaseCounters;
use crate::report::{CellOutcome, Machine, ProcessMemory, us_per_op};
use crate::stability::{CheckResult, Stability};
use crate::stats::Summary;
use crate::sustained_report::{NodeLogs, NodeRaft, cpu_table, timeline_table};
use crate::timeline::Second;

/// Goal of the issue: p99 send-to-delivery at half the SEND throughput.
pub const DELIVERY_P99_GOAL_MS: f64 = 50.0;

/// The settings a `devicebound` run used.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceboundSettings {
    /// Statestore nodes.
    pub nodes: usize,
    /// Devices.
    pub devices: usize,
    /// Backend connections.
    pub clients: usize,
    /// Requests outstanding per backend connection.
    pub in_flight: usize,
    /// Window of the SET, SEND and open-loop phases, s.
    pub duration_secs: f64,
    /// Warm-up of the SET and SEND phases, s.
    pub warmup_secs: f64,
    /// Keys of the SET reference.
    pub keys: u64,
    /// SET value and SEND body size, bytes.
    pub value_size: usize,
    /// Request timeout, s.
    pub timeout_secs: f64,
    /// Messages per device in the drain.
    pub drain_messages: u64,
    /// `--rate`, if given.
    pub rate: Option<f64>,
    /// Devices connecting at once.
    pub connect_concurrency: usize,
    /// Open-loop straggler wait, s.
    pub straggler_wait_secs: f64,
    /// Backlog and drain bound, s.
    pub drain_timeout_secs: f64,
    /// Extra node arguments.
    pub node_args: Vec<String>,
    /// Smoke mode.
    pub smoke: bool,
}

/// A closed-loop phase: the SET reference or the SEND throughput.
#[derive(Debug, Clone, Serialize)]
pub struct ClosedPhase {
    /// `SET reference`, `SEND throughput`.
    pub phase: String,
    /// `SET 64×8`, `SEND 64×8 → 1000 devices`.
    pub workload: String,
    /// Figures over the window, or why there are none.
    pub outcome: CellOutcome,
    /// Error replies that were `device queue is full`.
    pub queue_full: u64,
    /// SEND only: messages the devices received per second of the window.
    pub delivered_per_sec: Option<f64>,
    /// Median and weakest second.
    pub stability: Option<Stability>,
    /// One row per second of the window.
    pub timeline: Vec<Second>,
    /// CPU per process over the window.
    pub cpu: Option<CpuReport>,
}

impl ClosedPhase {
    /// The figures, if it ran.
    pub fn summary(&self) -> Option<&Summary> {
        self.outcome.summary()
    }

    fn store_us(&self) -> Option<f64> {
        self.cpu.as_ref().and_then(CpuReport::store_us_per_op)
    }
}

/// Waiting, after the SEND window, until the devices have received every SEND answered `+OK`.
#[derive(Debug, Clone, Serialize)]
pub struct Backlog {
    /// SENDs of the closed-loop phase answered `+OK` (warm-up and drain included).
    pub sends_ok: u64,
    /// Closed-loop deliveries when the wait ended.
    pub delivered: u64,
    /// How long it waited, s.
    pub waited_secs: f64,
    /// Every `+OK` SEND was delivered.
    pub drained: bool,
}

/// Percentiles of a latency, ms.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latency {
    /// Values.
    pub samples: u64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

impl Latency {
    /// Of an HdrHistogram in µs; `None` when empty.
    pub fn of(histogram: &hdrhistogram::Histogram<u64>) -> Option<Latency> {
        if histogram.is_empty() {
            return None;
        }
        let q = |quantile: f64| histogram.value_at_quantile(quantile) as f64 / 1000.0;
        Some(Latency {
            samples: histogram.len(),
            p50_ms: q(0.50),
            p90_ms: q(0.90),
            p99_ms: q(0.99),
            p999_ms: q(0.999),
            max_ms: histogram.max() as f64 / 1000.0,
        })
    }
}

/// The open-loop phase.
#[derive(Debug, Clone, Serialize)]
pub struct OpenLoopPhase {
    /// SENDs per second asked for.
    pub target_rate: f64,
    /// Where the rate came from.
    pub rate_source: String,
    /// Sending window, s.
    pub duration_secs: f64,
    /// SENDs issued.
    pub sent: u64,
    /// `sent` over the time from the first due instant to the last publish.
    pub achieved_rate: f64,
    /// The SEND replies: latency from publish to reply, errors, timeouts.
    pub replies: Summary,
    /// Error replies that were `device queue is full`.
    pub queue_full: u64,
    /// Messages delivered (first deliveries).
    pub delivered: u64,
    /// Deliveries of a message already delivered.
    pub duplicates: u64,
    /// Open-loop deliveries not matching a scheduled send.
    pub unexpected: u64,
    /// SENDs answered `+OK` never delivered by the end of the straggler wait.
    pub undelivered: u64,
    /// Messages delivered whose SEND was not answered `+OK` (e.g. its reply timed out).
    pub delivered_unanswered: u64,
    /// Send-to-delivery latency (due instant to receipt), first deliveries.
    pub latency: Option<Latency>,
    /// How late the sender published after the due instant: p99, ms.
    pub sender_lag_p99_ms: f64,
    /// Largest sender lag, ms.
    pub sender_lag_max_ms: f64,
    /// Time waited for stragglers after the last reply, s.
    pub straggler_wait_secs: f64,
    /// Deliveries per second of the sending window, with their latency.
    pub timeline: Vec<Second>,
    /// CPU over the sending window, per SEND answered `+OK` in it.
    pub cpu: Option<CpuReport>,
}

/// The fill before the drain.
#[derive(Debug, Clone, Serialize)]
pub struct Fill {
    /// From the first SEND to the last reply, s.
    pub secs: f64,
    /// SENDs answered `+OK` per second.
    pub rate: f64,
    /// SENDs answered `+OK`.
    pub ok: u64,
    /// Error replies.
    pub errors: u64,
    /// Of them `device queue is full`.
    pub queue_full: u64,
    /// SENDs still unanswered after every publish.
    pub timeouts: u64,
    /// SENDs published again (same correlation data) after going unanswered.
    pub retries: u64,
    /// Error descriptions.
    pub error_kinds: BTreeMap<String, u64>,
    /// SEND reply latency p50, ms.
    pub p50_ms: f64,
    /// SEND reply latency p99, ms.
    pub p99_ms: f64,
}

/// The drain.
#[derive(Debug, Clone, Serialize)]
pub struct DrainPhase {
    /// Devices.
    pub devices: usize,
    /// Messages sent to each.
    pub messages_per_device: u64,
    /// The fill.
    pub fill: Fill,
    /// Devices connecting at once.
    pub connect_concurrency: usize,
    /// First connect to the last SUBACK, s.
    pub connected_secs: f64,
    /// Every enqueued message arrived before the drain timeout.
    pub completed: bool,
    /// Messages enqueued (SENDs answered `+OK`).
    pub expected: u64,
    /// Deliveries (redeliveries included).
    pub received: u64,
    /// First connect to the last completion, s.
    pub drain_secs: f64,
    /// `received / drain_secs`.
    pub messages_per_sec: f64,
    /// Per device: its connect to its last completion.
    pub per_device_drain: Option<Quantiles>,
    /// Per device: its SUBACK to its first delivery.
    pub first_delivery: Option<Quantiles>,
    /// Devices that received exactly their messages, in order, once.
    pub devices_ok: usize,
    /// Devices that did not.
    pub devices_failed: usize,
    /// The first few of them, e.g. `bench-drain-0003: 2 missing`.
    pub failures: Vec<String>,
    /// CPU from the first connect to the last completion, per message drained.
    pub cpu: Option<CpuReport>,
}

/// The whole `devicebound` document.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceboundReport {
    /// `statestore-bench <version>`.
    pub tool: String,
    /// `devicebound`.
    pub command: String,
    /// Start, ms since the Unix epoch.
    pub started_unix_ms: u64,
    /// Machine.
    pub machine: Machine,
    /// Settings.
    pub settings: DeviceboundSettings,
    /// Cluster start to ready, s.
    pub ready_secs: f64,
    /// 1-minute load average at the start and at the end.
    pub load_average: [Option<f64>; 2],
    /// Online devices connecting (phases 2–3): first connect to last SUBACK, s.
    pub devices_connected_secs: Option<f64>,
    /// This process's RSS once the online devices were connected, KiB.
    pub devices_rss_kib: Option<u64>,
    /// Phase 1.
    pub set_reference: Option<ClosedPhase>,
    /// Phase 2.
    pub send: Option<ClosedPhase>,
    /// SEND ops/s over SET ops/s.
    pub send_set_ratio: Option<f64>,
    /// Nodes' CPU µs per SEND over per SET.
    pub send_set_cpu_ratio: Option<f64>,
    /// After phase 2.
    pub backlog: Option<Backlog>,
    /// Phase 3.
    pub open_loop: Option<OpenLoopPhase>,
    /// Phase 4.
    pub drain: Option<DrainPhase>,
    /// Node log counts per phase.
    pub node_logs: Vec<NodeLogs>,
    /// Node counters that moved, per phase.
    pub node_counters: Vec<PhaseCounters>,
    /// Raft state at the end.
    pub raft_at_end: Vec<NodeRaft>,
    /// RSS at the end.
    pub memory: Vec<ProcessMemory>,
    /// Device connection losses.
    pub device_disconnects: u64,
    /// Completions the devices could not publish.
    pub settle_failures: u64,
    /// Deliveries whose message id this run did not write, or outside their phase.
    pub unrecognised_deliveries: u64,
    /// Goals.
    pub checks: Vec<CheckResult>,
    /// What fails the run.
    pub failures: Vec<String>,
    /// Anything odd.
    pub notes: Vec<String>,
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

fn opt(value: Option<f64>, f: impl Fn(f64) -> String) -> String {
    value.map_or("–".to_owned(), f)
}

/// The closed-loop table: one row per phase.
pub fn closed_table(phases: &[&ClosedPhase]) -> String {
    let mut out = String::from(
        "| phase | workload | ops/s | median second | weakest second | p50 ms | p99 ms | p99.9 ms | max ms | errors | of them queue full | timeouts | nodes µs/op | mosquitto µs/op | load generator µs/op |\n\
         |---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
    );
    for p in phases {
        let cpu = |role: Role| us_per_op(p.cpu.as_ref().and_then(|c| c.total(role)));
        match &p.outcome {
            CellOutcome::Ran(s) => {
                let (median, weakest) = p
                    .stability
                    .as_ref()
                    .map_or(("–".to_owned(), "–".to_owned()), |st| {
                        (format!("{:.0}", st.median_ops), st.min_ops.to_string())
                    });
                let _ = writeln!(
                    out,
                    "| {} | {} | {:.0} | {median} | {weakest} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    p.phase,
                    p.workload,
                    s.throughput,
                    ms(s.p50_ms),
                    ms(s.p99_ms),
                    ms(s.p999_ms),
                    ms(s.max_ms),
                    s.errors,
                    p.queue_full,
                    s.timeouts,
                    cpu(Role::Store),
                    cpu(Role::Broker),
                    cpu(Role::LoadGenerator),
                );
            }
            CellOutcome::Skipped { reason } | CellOutcome::Failed { reason } => {
                let first = reason.lines().next().unwrap_or_default().replace('|', "/");
                let _ = writeln!(
                    out,
                    "| {} | {} | FAILED: {first} | – | – | – | – | – | – | – | – | – | – | – | – |",
                    p.phase, p.workload
                );
            }
        }
    }
    out
}

/// The open-loop table.
pub fn open_loop_table(o: &OpenLoopPhase) -> String {
    let mut out = String::from(
        "| target SENDs/s | achieved SENDs/s | sent | +OK | errors | of them queue full | timeouts | delivered | duplicates | undelivered | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | sender lag p99 / max ms |\n\
         |--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
    );
    let l = |f: fn(&Latency) -> f64| opt(o.latency.as_ref().map(f), ms);
    let _ = writeln!(
        out,
        "| {:.0} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} |",
        o.target_rate,
        o.achieved_rate,
        o.sent,
        o.replies.latency_samples,
        o.replies.errors,
        o.queue_full,
        o.replies.timeouts,
        o.delivered,
        o.duplicates,
        o.undelivered,
        l(|l| l.p50_ms),
        l(|l| l.p90_ms),
        l(|l| l.p99_ms),
        l(|l| l.p999_ms),
        l(|l| l.max_ms),
        ms(o.sender_lag_p99_ms),
        ms(o.sender_lag_max_ms),
    );
    out
}

fn quantiles(q: Option<&Quantiles>) -> String {
    q.map_or("–".to_owned(), |q| {
        format!("{} / {} / {}", ms(q.p50_ms), ms(q.p99_ms), ms(q.max_ms))
    })
}

/// The drain table.
pub fn drain_table(d: &DrainPhase) -> String {
    let mut out = String::from(
        "| devices | messages / device | fill s | fill SENDs/s | fill errors (queue full) | fill retries / timeouts | connect concurrency | all subscribed s | drain s | messages drained | messages/s | per-device drain p50 / p99 / max ms | SUBACK → first delivery p50 / p99 / max ms | devices OK |\n\
         |--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
    );
    let _ = writeln!(
        out,
        "| {} | {} | {:.1} | {:.0} | {} ({}) | {} / {} | {} | {:.2} | {:.2}{} | {} / {} | {:.0} | {} | {} | {} / {} |",
        d.devices,
        d.messages_per_device,
        d.fill.secs,
        d.fill.rate,
        d.fill.errors,
        d.fill.queue_full,
        d.fill.retries,
        d.fill.timeouts,
        d.connect_concurrency,
        d.connected_secs,
        d.drain_secs,
        if d.completed { "" } else { " (timed out)" },
        d.received,
        d.expected,
        d.messages_per_sec,
        quantiles(d.per_device_drain.as_ref()),
        quantiles(d.first_delivery.as_ref()),
        d.devices_ok,
        d.devices,
    );
    out
}

fn cpu_section(out: &mut String, title: &str, cpu: Option<&CpuReport>, per: &str) {
    if let Some(cpu) = cpu {
        let _ = writeln!(
            out,
            "\n{title} ({:.1} s, {} {per}; the load generator includes the devices):\n",
            cpu.wall_secs, cpu.ops
        );
        out.push_str(&cpu_table(cpu, "statestore"));
    }
}

impl DeviceboundReport {
    /// Everything printed for a person.
    pub fn text(&self) -> String {
        let mut out = format!("{}\n\n", self.machine.line());
        let st = &self.settings;
        let _ = writeln!(
            out,
            "devicebound: statestore {} nodes + Mosquitto (ready after {:.2} s); {} devices; backend {}×{}; {:.0} s windows ({:.1} s warm-up); bodies {} B; {} drain messages per device",
            st.nodes,
            self.ready_secs,
            st.devices,
            st.clients,
            st.in_flight,
            st.duration_secs,
            st.warmup_secs,
            st.value_size,
            st.drain_messages
        );
        let load = |l: Option<f64>| l.map_or("?".to_owned(), |l| format!("{l:.2}"));
        let _ = writeln!(
            out,
            "machine load average (1 min): {} at the start, {} at the end, on {} CPUs",
            load(self.load_average[0]),
            load(self.load_average[1]),
            self.machine.nproc
        );
        if let Some(secs) = self.devices_connected_secs {
            let _ = writeln!(
                out,
                "{} online devices connected and subscribed in {secs:.2} s ({} at a time); load generator RSS then {}",
                st.devices,
                st.connect_concurrency,
                self.devices_rss_kib.map_or("?".to_owned(), |kib| format!(
                    "{:.0} MiB",
                    kib as f64 / 1024.0
                ))
            );
        }

        out.push_str(
            "\n## 1–2. Closed loop: SET reference and SEND throughput (same cluster, same run)\n\n",
        );
        let closed: Vec<&ClosedPhase> = [self.set_reference.as_ref(), self.send.as_ref()]
            .into_iter()
            .flatten()
            .collect();
        out.push_str(&closed_table(&closed));
        let _ = writeln!(
            out,
            "\nSEND / SET: {} throughput, {} nodes CPU per operation",
            opt(self.send_set_ratio, |r| format!("{r:.2}×")),
            opt(self.send_set_cpu_ratio, |r| format!("{r:.2}×"))
        );
        if let Some(send) = &self.send
            && let Some(delivered) = send.delivered_per_sec
        {
            let sends = send.summary().map_or(0.0, |s| s.throughput);
            let behind = crate::devicebound::fell_behind(sends, delivered, send.queue_full);
            let _ = writeln!(
                out,
                "devices received {delivered:.0} messages/s during the SEND window{}",
                if behind {
                    ", fewer than the SENDs accepted: queues filled, the devices (the push) did not keep up"
                } else {
                    ""
                }
            );
        }
        for p in &closed {
            if let Some(s) = p.summary()
                && !s.error_kinds.is_empty()
            {
                let _ = writeln!(out, "{} errors: {:?}", p.phase, s.error_kinds);
            }
        }
        if let Some(send) = &self.send {
            if !send.timeline.is_empty() {
                out.push_str("\n### SEND per second\n\n");
                out.push_str(&timeline_table(&send.timeline));
            }
            cpu_section(
                &mut out,
                "CPU over the SEND window",
                send.cpu.as_ref(),
                "SENDs answered +OK",
            );
        }
        if let Some(b) = &self.backlog {
            let _ = writeln!(
                out,
                "\nBacklog after the SEND window: {:.1} s later the devices had received {} closed-loop messages for {} SENDs answered +OK{}",
                b.waited_secs,
                b.delivered,
                b.sends_ok,
                if b.drained {
                    " (all; more when SENDs whose reply timed out were enqueued)"
                } else {
                    ": NOT all delivered"
                },
            );
        }

        out.push_str("\n## 3. Open loop: send-to-delivery latency\n\n");
        match &self.open_loop {
            Some(o) => {
                let _ = writeln!(
                    out,
                    "{:.0} SENDs/s ({}) for {:.0} s, round-robin over the devices; latency = device receipt − the instant the SEND was due (stamped in the body); stragglers waited for {:.1} s\n",
                    o.target_rate, o.rate_source, o.duration_secs, o.straggler_wait_secs
                );
                out.push_str(&open_loop_table(o));
                let p99 = o.latency.as_ref().map(|l| l.p99_ms);
                let _ = writeln!(
                    out,
                    "\n{} p99 send-to-delivery {} ms (goal ≤ {DELIVERY_P99_GOAL_MS:.0} ms); SEND reply p50 {} ms, p99 {} ms; {} delivered without a +OK reply, {} unexpected",
                    if p99.is_some_and(|p| p <= DELIVERY_P99_GOAL_MS) {
                        "PASS"
                    } else {
                        "FAIL"
                    },
                    opt(p99, ms),
                    ms(o.replies.p50_ms),
                    ms(o.replies.p99_ms),
                    o.delivered_unanswered,
                    o.unexpected
                );
                if !o.replies.error_kinds.is_empty() {
                    let _ = writeln!(out, "SEND errors: {:?}", o.replies.error_kinds);
                }
                if !o.timeline.is_empty() {
                    out.push_str("\n### Deliveries per second (latency send → delivery)\n\n");
                    out.push_str(&timeline_table(&o.timeline));
                }
                cpu_section(
                    &mut out,
                    "CPU over the sending window",
                    o.cpu.as_ref(),
                    "SENDs answered +OK",
                );
            }
            None => out.push_str("not run\n"),
        }

        out.push_str("\n## 4. Drain: full queues, every device connects at once\n\n");
        match &self.drain {
            Some(d) => {
                let _ = writeln!(
                    out,
                    "drain s = first connect → last completion; per-device drain = the device's connect → its last completion\n"
                );
                out.push_str(&drain_table(d));
                if !d.fill.error_kinds.is_empty() {
                    let _ = writeln!(out, "\nfill errors: {:?}", d.fill.error_kinds);
                }
                if d.devices_failed > 0 {
                    let _ = writeln!(
                        out,
                        "\nFAIL: {} devices did not receive exactly their messages in order once:",
                        d.devices_failed
                    );
                    for f in &d.failures {
                        let _ = writeln!(out, "- {f}");
                    }
                } else {
                    let _ = writeln!(
                        out,
                        "\nPASS: every device received exactly its {} messages, in order, no duplicates",
                        d.messages_per_device
                    );
                }
                cpu_section(
                    &mut out,
                    "CPU over the drain",
                    d.cpu.as_ref(),
                    "messages drained",
                );
            }
            None => out.push_str("not run\n"),
        }

        if !self.node_logs.is_empty() {
            out.push_str(
                "\nNode log lines per phase (timeout: any line mentioning a timeout):\n\n\
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
        if !self.node_counters.is_empty() {
            out.push_str(
                "\nNode counters that moved per phase (summed over nodes; requests dropped get no reply, the client sees a timeout):\n\n",
            );
            for c in &self.node_counters {
                let _ = writeln!(out, "- {}: {}", c.phase, c.line());
            }
        }
        let _ = writeln!(
            out,
            "\ndevices: {} connection losses, {} completions not published, {} unrecognised deliveries",
            self.device_disconnects, self.settle_failures, self.unrecognised_deliveries
        );
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
        out.push_str("\nChecks (goals):\n");
        for check in &self.checks {
            let _ = writeln!(out, "{}", check.line());
        }
        out
    }
}

/// The ratio of SEND to SET throughput and of their nodes' CPU per operation.
pub fn send_set_ratios(
    set: Option<&ClosedPhase>,
    send: Option<&ClosedPhase>,
) -> (Option<f64>, Option<f64>) {
    let div = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let ops = |p: Option<&ClosedPhase>| p.and_then(ClosedPhase::summary).map(|s| s.throughput);
    let cpu = |p: Option<&ClosedPhase>| p.and_then(ClosedPhase::store_us);
    (div(ops(send), ops(set)), div(cpu(send), cpu(set)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(throughput: f64) -> Summary {
        Summary {
            ops: throughput as u64,
            throughput,
            p50_ms: 1.0,
            p90_ms: 2.0,
            p99_ms: 3.0,
            p999_ms: 4.0,
            max_ms: 5.0,
            latency_samples: 10,
            errors: 2,
            timeouts: 0,
            error_kinds: BTreeMap::new(),
        }
    }

    fn phase(name: &str, throughput: f64) -> ClosedPhase {
        ClosedPhase {
            phase: name.to_owned(),
            workload: format!("{name} 64×8"),
            outcome: CellOutcome::Ran(summary(throughput)),
            queue_full: 1,
            delivered_per_sec: None,
            stability: None,
            timeline: Vec::new(),
            cpu: None,
        }
    }

    #[test]
    fn closed_rows_and_ratio() {
        let set = phase("SET", 8000.0);
        let send = phase("SEND", 2000.0);
        let (ops, cpu) = send_set_ratios(Some(&set), Some(&send));
        assert_eq!(ops, Some(0.25));
        assert_eq!(cpu, None, "no CPU figures");
        assert_eq!(send_set_ratios(None, Some(&send)), (None, None));
        let table = closed_table(&[&set, &send]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(
            lines[3],
            "| SEND | SEND 64×8 | 2000 | – | – | 1.00 | 3.00 | 4.00 | 5.00 | 2 | 1 | 0 | – | – | – |"
        );
        let failed = ClosedPhase {
            outcome: CellOutcome::Failed {
                reason: "no broker | gone\nmore".to_owned(),
            },
            ..phase("SEND", 0.0)
        };
        assert!(closed_table(&[&failed]).contains("FAILED: no broker / gone |"));
    }

    #[test]
    fn latency_percentiles_in_ms() -> anyhow::Result<()> {
        let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
        assert_eq!(Latency::of(&h), None);
        for us in 1..=1000u64 {
            h.record(us * 100)?;
        }
        let l = Latency::of(&h).ok_or_else(|| anyhow::anyhow!("latency"))?;
        assert_eq!(l.samples, 1000);
        assert!((l.p50_ms - 50.0).abs() < 0.1, "{l:?}");
        assert!((l.p99_ms - 99.0).abs() < 0.1, "{l:?}");
        assert!((l.max_ms - 100.0).abs() < 0.1, "{l:?}");
        Ok(())
    }
}
