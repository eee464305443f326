//! The command line (`compare`, `run`, `sustained`, `scale`, `devicebound`, `abuse`) and how its flags
//! turn into the workloads, timings, rounds and phases a run uses, smoke mode included.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::workload::{Mix, ValueKind, WorkloadSpec};

/// statestore-bench: load generator for statestore, compared in one run with the broker floor
/// (an echo responder), a 3-member etcd cluster, and statestore with 1 and 3 nodes.
#[derive(Debug, Parser)]
#[command(name = "statestore-bench", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start every target itself (in temp dirs) and compare them on the same workloads.
    Compare(CompareArgs),
    /// Drive an already running statestore through its broker (starts no process).
    Run(RunArgs),
    /// Steady state: one long-lived cluster, prefilled, then a per-second timeline of long
    /// windows with stability checks and CPU per operation (optionally alternating with the
    /// floor and etcd, kept alive next to it).
    Sustained(SustainedArgs),
    /// Load many keys into a fresh cluster: RSS, disk size, load rate, restart-to-ready time.
    Scale(ScaleArgs),
    /// Device-bound queues on one long-lived cluster: a SET reference, closed-loop SEND
    /// throughput to online devices, open-loop send-to-delivery latency, and the drain of full
    /// queues when every offline device connects at once.
    Devicebound(DeviceboundArgs),
    /// Hostile clients on one long-lived cluster: a well-behaved client's closed-loop SETs
    /// measured in a quiet window, then under each attack in turn (a quiet window before each),
    /// with the p99 under attack against the median quiet p99.
    Abuse(AbuseArgs),
}

/// Flags shared by `compare` and `run`.
#[derive(Debug, Clone, Args)]
pub struct LoadArgs {
    /// MQTT connections (etcd clients) per cell [default: 64; smoke: 4].
    #[arg(long, value_name = "N")]
    pub clients: Option<usize>,
    /// Requests outstanding per connection [default: 8; smoke: 4].
    #[arg(long, value_name = "K")]
    pub in_flight: Option<usize>,
    /// Operation mixes, each run at CLIENTS×IN_FLIGHT [default: set,get].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub mix: Vec<Mix>,
    /// Explicit workloads `MIX:CLIENTSxIN_FLIGHT` (repeatable); overrides --mix/--clients/--in-flight.
    /// Without any of these: set:64x8, get:64x8, set:1x1.
    #[arg(long = "workload", value_name = "MIX:NxK")]
    pub workloads: Vec<WorkloadSpec>,
    /// Measurement window per cell, e.g. 10s, 500ms, 1m [default: 10s; smoke: 2s].
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Warm-up before each window (requests run but are not measured) [default: 1s; smoke: 0.5s].
    #[arg(long, value_parser = parse_duration)]
    pub warmup: Option<Duration>,
    /// Value size, bytes.
    #[arg(long, default_value_t = 64)]
    pub value_size: usize,
    /// Distinct keys the workloads pick from (loaded before GET/DEL/mixed cells).
    #[arg(long, default_value_t = 1000)]
    pub keys: u64,
    /// A request unanswered for this long counts as a timeout.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    pub timeout: Duration,
    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Short run for CI: ~2 s cells, few clients; fails on any error, timeout or zero throughput.
    #[arg(long)]
    pub smoke: bool,
}

/// The targets `compare` can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Target {
    /// Echo responder behind Mosquitto (no storage).
    Floor,
    /// 3-member etcd cluster.
    Etcd,
    /// One statestore node.
    #[value(name = "statestore-1")]
    Statestore1,
    /// Three statestore nodes.
    #[value(name = "statestore-3")]
    Statestore3,
}

impl Target {
    /// Name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Target::Floor => "floor",
            Target::Etcd => "etcd",
            Target::Statestore1 => "statestore-1",
            Target::Statestore3 => "statestore-3",
        }
    }
}

/// `compare`.
#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    /// Load flags.
    #[command(flatten)]
    pub load: LoadArgs,
    /// Targets to run, in this order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "floor,etcd,statestore-1,statestore-3"
    )]
    pub targets: Vec<Target>,
    /// Process locations.
    #[command(flatten)]
    pub programs: Programs,
    /// Keep the temporary directories (configs, data, logs) and print where they are.
    #[arg(long)]
    pub keep_temp: bool,
}

/// Where the programs the tool starts are.
#[derive(Debug, Clone, Args)]
pub struct Programs {
    /// statestore binary [default: `statestore` next to this binary, i.e. target/release].
    #[arg(long, value_name = "PATH")]
    pub statestore_bin: Option<PathBuf>,
    /// Mosquitto binary [default: `mosquitto` on PATH, else /usr/sbin/mosquitto].
    #[arg(long, value_name = "PATH")]
    pub mosquitto_bin: Option<PathBuf>,
    /// etcd binary (Debian's etcd-server); etcd cells are skipped when it is missing.
    #[arg(long, value_name = "PATH", default_value = "/usr/bin/etcd")]
    pub etcd_bin: PathBuf,
}

/// `run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The broker the running statestore uses.
    #[arg(long, value_name = "HOST:PORT")]
    pub broker: String,
    /// Target name in the table.
    #[arg(long, default_value = "statestore")]
    pub label: String,
    /// Load flags.
    #[command(flatten)]
    pub load: LoadArgs,
    /// Also account this process's CPU (repeatable), e.g. `--pid node1=4242 --pid
    /// mosquitto=4000`; `mosquitto` counts as the broker, any other name as the store.
    #[arg(long = "pid", value_name = "NAME=PID")]
    pub pids: Vec<NamedPid>,
}

/// A process named on the command line: `NAME=PID`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedPid {
    /// Name in tables.
    pub name: String,
    /// Its pid.
    pub pid: u32,
}

impl FromStr for NamedPid {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<NamedPid> {
        let (name, pid) = s
            .rsplit_once('=')
            .with_context(|| format!("`{s}`: expected NAME=PID"))?;
        let name = name.trim();
        if name.is_empty() {
            bail!("`{s}`: empty NAME");
        }
        let pid = pid
            .trim()
            .parse()
            .with_context(|| format!("`{s}`: PID must be a number"))?;
        Ok(NamedPid {
            name: name.to_owned(),
            pid,
        })
    }
}

impl fmt::Display for NamedPid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.name, self.pid)
    }
}

/// The baselines `sustained` can keep alive next to statestore.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Baseline {
    /// Mosquitto + the echo responder.
    Floor,
    /// A 3-member etcd cluster.
    Etcd,
}

/// `sustained`.
#[derive(Debug, Clone, Args)]
pub struct SustainedArgs {
    /// Nodes of the statestore cluster (started once, kept for every cell).
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// SET writes of distinct keys before measuring, at 64×8, so the cluster runs in steady
    /// state (reply memory full, log grown; the Raft state printed afterwards shows whether a
    /// snapshot was taken) [default: 100000; smoke: 2000].
    #[arg(long, value_name = "N")]
    pub prefill: Option<u64>,
    /// Measured workloads `MIX:CLIENTSxIN_FLIGHT` (repeatable) [default: set:64x8; smoke: set:4x4].
    #[arg(long = "workload", value_name = "MIX:NxK")]
    pub workloads: Vec<WorkloadSpec>,
    /// Measured window of each workload when run without --baselines [default: 60s; smoke: 3s].
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Warm-up before each window (new clients connect, then run unmeasured) [default: 1s; smoke: 0.5s].
    #[arg(long, value_parser = parse_duration)]
    pub warmup: Option<Duration>,
    /// Keys the measured workloads pick from [default: the prefilled keys, at least 1000].
    #[arg(long, value_name = "N")]
    pub keys: Option<u64>,
    /// Value size, bytes.
    #[arg(long, default_value_t = 64)]
    pub value_size: usize,
    /// A request unanswered for this long counts as a timeout.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    pub timeout: Duration,
    /// Baselines started once and kept alive too; cells then alternate statestore, floor,
    /// etcd, statestore, ... for --rounds rounds of --cell-duration each.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub baselines: Vec<Baseline>,
    /// Rounds (every target runs every workload once per round) [default: 3 with --baselines, else 1].
    #[arg(long, value_name = "R")]
    pub rounds: Option<usize>,
    /// Measured window per cell with --baselines [default: 20s; smoke: 2s].
    #[arg(long, value_parser = parse_duration)]
    pub cell_duration: Option<Duration>,
    /// Extra argument for every statestore node (repeatable), e.g.
    /// `--node-arg=--snapshot-after-entries=1000`.
    #[arg(long = "node-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub node_args: Vec<String>,
    /// Exit 1 when a stability check fails (without it they are reported as goals only).
    #[arg(long)]
    pub strict: bool,
    /// Short run for CI: prefill 2000, 3 s at 4×4, no baselines by default; fails on any
    /// error, timeout or zero throughput.
    #[arg(long)]
    pub smoke: bool,
    /// Also write the results (timelines included) as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Process locations.
    #[command(flatten)]
    pub programs: Programs,
    /// Keep the temporary directories (configs, data, logs) and print where they are.
    #[arg(long)]
    pub keep_temp: bool,
}

/// What a `sustained` run does once defaults are applied.
#[derive(Debug, Clone, PartialEq)]
pub struct SustainedPlan {
    /// Statestore nodes.
    pub nodes: usize,
    /// Writes before measuring.
    pub prefill: u64,
    /// Keys the measured workloads pick from.
    pub keys: u64,
    /// Measured workloads, in order.
    pub workloads: Vec<WorkloadSpec>,
    /// Warm-up per cell.
    pub warmup: Duration,
    /// Measured window per cell.
    pub cell_duration: Duration,
    /// Rounds.
    pub rounds: usize,
    /// Baselines, in the order they run within a round (after statestore).
    pub baselines: Vec<Baseline>,
}

impl SustainedArgs {
    /// Applies the defaults (smoke or full).
    pub fn resolve(&self) -> anyhow::Result<SustainedPlan> {
        // (prefill, clients, in-flight, window, cell window with baselines, warm-up)
        let (prefill_default, clients, in_flight, duration, cell, warmup) = if self.smoke {
            (
                2_000,
                4,
                4,
                Duration::from_secs(3),
                Duration::from_secs(2),
                Duration::from_millis(500),
            )
        } else {
            (
                100_000,
                64,
                8,
                Duration::from_secs(60),
                Duration::from_secs(20),
                Duration::from_secs(1),
            )
        };
        if self.nodes == 0 {
            bail!("--nodes must be at least 1");
        }
        let prefill = self.prefill.unwrap_or(prefill_default);
        let keys = self
            .keys
            .unwrap_or(if prefill > 0 { prefill } else { 1_000 });
        if keys == 0 {
            bail!("--keys must be at least 1");
        }
        let workloads = if self.workloads.is_empty() {
            vec![WorkloadSpec {
                mix: Mix::Set,
                clients,
                in_flight,
            }]
        } else {
            self.workloads.clone()
        };
        let mut baselines = Vec::new();
        for baseline in &self.baselines {
            if !baselines.contains(baseline) {
                baselines.push(*baseline);
            }
        }
        let rounds = self
            .rounds
            .unwrap_or(if baselines.is_empty() { 1 } else { 3 });
        if rounds == 0 {
            bail!("--rounds must be at least 1");
        }
        let cell_duration = if baselines.is_empty() {
            self.duration.unwrap_or(duration)
        } else {
            self.cell_duration.unwrap_or(cell)
        };
        if cell_duration < Duration::from_secs(1) {
            bail!("the measured window must be at least 1 s (the timeline is per second)");
        }
        Ok(SustainedPlan {
            nodes: self.nodes,
            prefill,
            keys,
            workloads,
            warmup: self.warmup.unwrap_or(warmup),
            cell_duration,
            rounds,
            baselines,
        })
    }
}

/// `devicebound`.
#[derive(Debug, Clone, Args)]
pub struct DeviceboundArgs {
    /// Nodes of the statestore cluster (started once, kept for every phase).
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Devices (MQTT clients `bench-dev-0001`..., and `bench-drain-0001`... for the drain)
    /// [default: 1000; smoke: 50].
    #[arg(long, value_name = "N")]
    pub devices: Option<usize>,
    /// Window of the SET reference, the SEND throughput and the open-loop phases
    /// [default: 60s; smoke: 5s].
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Warm-up before the SET and SEND windows [default: 1s; smoke: 0.5s].
    #[arg(long, value_parser = parse_duration)]
    pub warmup: Option<Duration>,
    /// Backend MQTT connections [default: 64; smoke: 1].
    #[arg(long, value_name = "N")]
    pub clients: Option<usize>,
    /// Requests outstanding per backend connection in the closed-loop phases and the fill
    /// [default: 8; smoke: 1].
    #[arg(long, value_name = "K")]
    pub in_flight: Option<usize>,
    /// Messages sent to each offline device before the drain, at most 5000; more than the
    /// nodes' `max_queue_depth` (default 50) gets `device queue is full` [default: 50; smoke: 5].
    #[arg(long, value_name = "N")]
    pub drain_messages: Option<u64>,
    /// Open-loop send rate, SENDs/s [default: half the SEND throughput measured].
    #[arg(long, value_name = "PER_SEC")]
    pub rate: Option<f64>,
    /// Devices connecting at the same time (the drain connects every device this way).
    #[arg(long, default_value_t = 200)]
    pub connect_concurrency: usize,
    /// Keys of the SET reference.
    #[arg(long, default_value_t = 1000)]
    pub keys: u64,
    /// SET value and SEND body size, bytes (open-loop bodies are at least 8: the send stamp).
    #[arg(long, default_value_t = 64)]
    pub value_size: usize,
    /// A request unanswered for this long counts as a timeout.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    pub timeout: Duration,
    /// How long to wait for open-loop stragglers after the last send [default: 30s; smoke: 10s].
    #[arg(long, value_parser = parse_duration)]
    pub straggler_wait: Option<Duration>,
    /// Longest wait for the devices to empty their queues: the SEND phase's backlog, and the
    /// drain [default: 300s; smoke: 60s].
    #[arg(long, value_parser = parse_duration)]
    pub drain_timeout: Option<Duration>,
    /// Extra argument for every statestore node (repeatable), e.g.
    /// `--node-arg=--devicebound-device-window=4`.
    #[arg(long = "node-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub node_args: Vec<String>,
    /// Short run for CI (50 devices, a 1×1 backend, 5 s phases, 5 drain messages); fails on
    /// any error reply (queue full included), timeout, lost or duplicate delivery, or zero
    /// throughput.
    #[arg(long)]
    pub smoke: bool,
    /// Also write the results (timelines included) as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Process locations.
    #[command(flatten)]
    pub programs: Programs,
    /// Keep the temporary directory (configs, data, logs) and print where it is.
    #[arg(long)]
    pub keep_temp: bool,
}

/// What a `devicebound` run does once defaults are applied.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceboundPlan {
    /// Statestore nodes.
    pub nodes: usize,
    /// Devices.
    pub devices: usize,
    /// Backend connections.
    pub clients: usize,
    /// Outstanding requests per backend connection.
    pub in_flight: usize,
    /// Window of the SET, SEND and open-loop phases.
    pub duration: Duration,
    /// Warm-up of the SET and SEND phases.
    pub warmup: Duration,
    /// Messages per device in the drain.
    pub drain_messages: u64,
    /// Open-loop rate if fixed.
    pub rate: Option<f64>,
    /// Devices connecting at once.
    pub connect_concurrency: usize,
    /// Open-loop straggler wait.
    pub straggler_wait: Duration,
    /// Backlog and drain bound.
    pub drain_timeout: Duration,
}

impl DeviceboundArgs {
    /// Applies the defaults (smoke or full).
    pub fn resolve(&self) -> anyhow::Result<DeviceboundPlan> {
        let smoke = self.smoke;
        let pick = |full: u64, small: u64| if smoke { small } else { full };
        let secs = |full: u64, small: u64| Duration::from_secs(pick(full, small));
        let plan = DeviceboundPlan {
            nodes: self.nodes,
            devices: self.devices.unwrap_or(if smoke { 50 } else { 1000 }),
            clients: self.clients.unwrap_or(if smoke { 1 } else { 64 }),
            in_flight: self.in_flight.unwrap_or(if smoke { 1 } else { 8 }),
            duration: self.duration.unwrap_or(secs(60, 5)),
            warmup: self.warmup.unwrap_or(if smoke {
                Duration::from_millis(500)
            } else {
                Duration::from_secs(1)
            }),
            drain_messages: self.drain_messages.unwrap_or(pick(50, 5)),
            rate: self.rate,
            connect_concurrency: self.connect_concurrency,
            straggler_wait: self.straggler_wait.unwrap_or(secs(30, 10)),
            drain_timeout: self.drain_timeout.unwrap_or(secs(300, 60)),
        };
        if plan.nodes == 0 {
            bail!("--nodes must be at least 1");
        }
        if plan.devices == 0 || plan.clients == 0 || plan.in_flight == 0 {
            bail!("--devices, --clients and --in-flight must be at least 1");
        }
        if plan.duration < Duration::from_secs(1) {
            bail!("--duration must be at least 1 s (the timeline is per second)");
        }
        if !(1..=5000).contains(&plan.drain_messages) {
            bail!("--drain-messages must be between 1 and 5000 (the largest max_queue_depth)");
        }
        if plan.connect_concurrency == 0 {
            bail!("--connect-concurrency must be at least 1");
        }
        if plan.rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
            bail!("--rate must be a positive number of SENDs per second");
        }
        if self.keys == 0 {
            bail!("--keys must be at least 1");
        }
        Ok(plan)
    }
}

/// `abuse`.
#[derive(Debug, Clone, Args)]
pub struct AbuseArgs {
    /// Nodes of the statestore cluster (started once, kept for every window).
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// The attacks, in this order, each after a quiet window.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "scan,keynotify,getbig,props,forged,poison"
    )]
    pub attacks: Vec<crate::abuse_attacks::Attack>,
    /// Window of every quiet and attack cell [default: 20s; smoke: 3s].
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Warm-up before each window [default: 1s; smoke: 0.5s].
    #[arg(long, value_parser = parse_duration)]
    pub warmup: Option<Duration>,
    /// Well-behaved MQTT connections.
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// SETs outstanding per well-behaved connection.
    #[arg(long, default_value_t = 2)]
    pub in_flight: usize,
    /// Keys the well-behaved SETs pick from.
    #[arg(long, default_value_t = 1000)]
    pub keys: u64,
    /// Value size of the well-behaved SETs, bytes.
    #[arg(long, default_value_t = 64)]
    pub value_size: usize,
    /// A well-behaved request unanswered for this long counts as a timeout.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    pub timeout: Duration,
    /// Extra argument for every statestore node (repeatable), e.g.
    /// `--node-arg=--max-observers-per-key=100`.
    #[arg(long = "node-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub node_args: Vec<String>,
    /// Short run (3 s windows); fails on a quiet window with errors, timeouts or no
    /// throughput, an attack that cannot start, or a node that dies. The goals (p99 under
    /// attack ≤ 2× quiet) are reported, never fatal.
    #[arg(long)]
    pub smoke: bool,
    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Process locations.
    #[command(flatten)]
    pub programs: Programs,
    /// Keep the temporary directory (configs, data, logs) and print where it is.
    #[arg(long)]
    pub keep_temp: bool,
}

/// What an `abuse` run does once defaults are applied.
#[derive(Debug, Clone, PartialEq)]
pub struct AbusePlan {
    /// Window of every cell.
    pub duration: Duration,
    /// Warm-up before each window.
    pub warmup: Duration,
}

impl AbuseArgs {
    /// Applies the defaults (smoke or full) and checks the flags.
    pub fn resolve(&self) -> anyhow::Result<AbusePlan> {
        let plan = AbusePlan {
            duration: self
                .duration
                .unwrap_or(Duration::from_secs(if self.smoke { 3 } else { 20 })),
            warmup: self.warmup.unwrap_or(if self.smoke {
                Duration::from_millis(500)
            } else {
                Duration::from_secs(1)
            }),
        };
        if self.nodes == 0 || self.clients == 0 || self.in_flight == 0 || self.keys == 0 {
            bail!("--nodes, --clients, --in-flight and --keys must be at least 1");
        }
        if self.attacks.is_empty() {
            bail!("--attacks: name at least one");
        }
        if plan.duration < Duration::from_secs(1) {
            bail!("--duration must be at least 1 s");
        }
        Ok(plan)
    }
}

/// `scale`.
#[derive(Debug, Clone, Args)]
pub struct ScaleArgs {
    /// Keys to load (16-byte keys).
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
    /// Value size, bytes.
    #[arg(long, default_value_t = 64)]
    pub value_size: usize,
    /// Values: one printable pattern for every key, or incompressible bytes different for
    /// every key (what space amplification should be judged on).
    #[arg(long, value_enum, default_value_t = ValueKind::Pattern)]
    pub values: ValueKind,
    /// Cluster size.
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// MQTT connections used to load.
    #[arg(long, default_value_t = 64)]
    pub clients: usize,
    /// Requests outstanding per connection while loading.
    #[arg(long, default_value_t = 8)]
    pub in_flight: usize,
    /// A request unanswered for this long counts as a timeout.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    pub timeout: Duration,
    /// Extra argument for every statestore node (repeatable), e.g.
    /// `--node-arg=--cache-capacity-mb=64`.
    #[arg(long = "node-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub node_args: Vec<String>,
    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Process locations.
    #[command(flatten)]
    pub programs: Programs,
    /// Keep the temporary directory (data, logs) and print where it is.
    #[arg(long)]
    pub keep_temp: bool,
}

/// The timings and workloads a `compare` or `run` uses once defaults are applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// Workloads in order.
    pub workloads: Vec<WorkloadSpec>,
    /// Measurement window.
    pub duration: Duration,
    /// Warm-up.
    pub warmup: Duration,
}

impl LoadArgs {
    /// Applies the defaults (smoke or full).
    pub fn resolve(&self) -> anyhow::Result<Resolved> {
        let (clients, in_flight, duration, warmup) = if self.smoke {
            (4, 4, Duration::from_secs(2), Duration::from_millis(500))
        } else {
            (64, 8, Duration::from_secs(10), Duration::from_secs(1))
        };
        let workloads = if !self.workloads.is_empty() {
            self.workloads.clone()
        } else if !self.mix.is_empty() || self.clients.is_some() || self.in_flight.is_some() {
            let mixes = if self.mix.is_empty() {
                vec![Mix::Set, Mix::Get]
            } else {
                self.mix.clone()
            };
            let clients = self.clients.unwrap_or(clients);
            let in_flight = self.in_flight.unwrap_or(in_flight);
            if clients == 0 || in_flight == 0 {
                bail!("--clients and --in-flight must be at least 1");
            }
            mixes
                .into_iter()
                .map(|mix| WorkloadSpec {
                    mix,
                    clients,
                    in_flight,
                })
                .collect()
        } else {
            vec![
                WorkloadSpec {
                    mix: Mix::Set,
                    clients,
                    in_flight,
                },
                WorkloadSpec {
                    mix: Mix::Get,
                    clients,
                    in_flight,
                },
                WorkloadSpec {
                    mix: Mix::Set,
                    clients: 1,
                    in_flight: 1,
                },
            ]
        };
        if self.keys == 0 {
            bail!("--keys must be at least 1");
        }
        Ok(Resolved {
            workloads,
            duration: self.duration.unwrap_or(duration),
            warmup: self.warmup.unwrap_or(warmup),
        })
    }
}

/// `10s`, `500ms`, `2m`, `1.5s`, or a bare number of seconds.
pub fn parse_duration(text: &str) -> anyhow::Result<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .with_context(|| format!("duration `{text}`: expected e.g. 10s, 500ms, 2m"))?;
    let seconds = match unit.trim() {
        "" | "s" => number,
        "ms" => number / 1000.0,
        "m" | "min" => number * 60.0,
        "h" => number * 3600.0,
        other => bail!("duration `{text}`: unknown unit `{other}` (use ms, s, m or h)"),
    };
    Duration::try_from_secs_f64(seconds).with_context(|| format!("duration `{text}`"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> anyhow::Result<Cli> {
        Ok(Cli::try_parse_from(
            std::iter::once("statestore-bench").chain(args.iter().copied()),
        )?)
    }

    fn load(cli: Cli) -> LoadArgs {
        match cli.command {
            Command::Compare(c) => c.load,
            Command::Run(r) => r.load,
            Command::Scale(_)
            | Command::Sustained(_)
            | Command::Devicebound(_)
            | Command::Abuse(_) => {
                panic!("no load args")
            }
        }
    }

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations() -> anyhow::Result<()> {
        assert_eq!(parse_duration("10s")?, Duration::from_secs(10));
        assert_eq!(parse_duration("500ms")?, Duration::from_millis(500));
        assert_eq!(parse_duration("2m")?, Duration::from_secs(120));
        assert_eq!(parse_duration("1.5")?, Duration::from_millis(1500));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5d").is_err());
        Ok(())
    }

    #[test]
    fn default_compare_workloads() -> anyhow::Result<()> {
        let resolved = load(parse(&["compare"])?).resolve()?;
        let names: Vec<String> = resolved.workloads.iter().map(|w| w.to_string()).collect();
        assert_eq!(names, ["SET 64×8", "GET 64×8", "SET 1×1"]);
        assert_eq!(resolved.duration, Duration::from_secs(10));
        let smoke = load(parse(&["compare", "--smoke"])?).resolve()?;
        let names: Vec<String> = smoke.workloads.iter().map(|w| w.to_string()).collect();
        assert_eq!(names, ["SET 4×4", "GET 4×4", "SET 1×1"]);
        assert_eq!(smoke.duration, Duration::from_secs(2));
        Ok(())
    }

    #[test]
    fn flags_shape_the_workloads() -> anyhow::Result<()> {
        let resolved = load(parse(&[
            "run",
            "--broker",
            "127.0.0.1:1883",
            "--clients",
            "8",
            "--mix",
            "mixed,setnx",
            "--duration",
            "3s",
        ])?)
        .resolve()?;
        let names: Vec<String> = resolved.workloads.iter().map(|w| w.to_string()).collect();
        assert_eq!(names, ["MIXED 8×8", "SET NX PX 8×8"]);
        assert_eq!(resolved.duration, Duration::from_secs(3));
        let explicit = load(parse(&[
            "compare",
            "--workload",
            "del:2x3",
            "--workload",
            "get:1x1",
            "--clients",
            "99",
        ])?)
        .resolve()?;
        let names: Vec<String> = explicit.workloads.iter().map(|w| w.to_string()).collect();
        assert_eq!(names, ["DEL 2×3", "GET 1×1"]);
        assert!(parse(&["compare", "--mix", "bogus"]).is_err());
        assert!(parse(&["run"]).is_err(), "--broker is required");
        Ok(())
    }

    #[test]
    fn targets_parse() -> anyhow::Result<()> {
        let Command::Compare(c) = parse(&["compare", "--targets", "floor,statestore-3"])?.command
        else {
            panic!("compare");
        };
        assert_eq!(c.targets, [Target::Floor, Target::Statestore3]);
        let Command::Compare(c) = parse(&["compare"])?.command else {
            panic!("compare");
        };
        assert_eq!(c.targets.len(), 4);
        Ok(())
    }

    fn sustained(args: &[&str]) -> anyhow::Result<SustainedArgs> {
        let mut full = vec!["sustained"];
        full.extend_from_slice(args);
        match parse(&full)?.command {
            Command::Sustained(s) => Ok(s),
            other => bail!("not sustained: {other:?}"),
        }
    }

    #[test]
    fn sustained_defaults() -> anyhow::Result<()> {
        let plan = sustained(&[])?.resolve()?;
        assert_eq!(plan.nodes, 3);
        assert_eq!(plan.prefill, 100_000);
        assert_eq!(
            plan.keys, 100_000,
            "measured keys default to the prefilled ones"
        );
        let names: Vec<String> = plan.workloads.iter().map(|w| w.to_string()).collect();
        assert_eq!(names, ["SET 64×8"]);
        assert_eq!(plan.cell_duration, Duration::from_secs(60));
        assert_eq!(plan.warmup, Duration::from_secs(1));
        assert_eq!(plan.rounds, 1);
        assert!(plan.baselines.is_empty());
        let smoke = sustained(&["--smoke"])?.resolve()?;
        assert_eq!(smoke.prefill, 2_000);
        assert_eq!(smoke.cell_duration, Duration::from_secs(3));
        let names: Vec<String> = smoke.workloads.iter().map(|w| w.to_string()).collect();
        assert_eq!(names, ["SET 4×4"]);
        assert!(smoke.baselines.is_empty());
        Ok(())
    }

    #[test]
    fn sustained_flags() -> anyhow::Result<()> {
        let args = sustained(&[
            "--nodes",
            "5",
            "--prefill",
            "0",
            "--workload",
            "set:8x2",
            "--workload",
            "get:1x1",
            "--duration",
            "90s",
            "--strict",
            "--node-arg",
            "--snapshot-after-entries=1000",
            "--node-arg=--heartbeat-ms=100",
        ])?;
        assert!(args.strict);
        assert_eq!(
            args.node_args,
            ["--snapshot-after-entries=1000", "--heartbeat-ms=100"]
        );
        let plan = args.resolve()?;
        assert_eq!((plan.nodes, plan.prefill, plan.keys), (5, 0, 1_000));
        let names: Vec<String> = plan.workloads.iter().map(|w| w.to_string()).collect();
        assert_eq!(names, ["SET 8×2", "GET 1×1"]);
        assert_eq!(plan.cell_duration, Duration::from_secs(90));
        assert!(sustained(&["--nodes", "0"])?.resolve().is_err());
        assert!(sustained(&["--rounds", "0"])?.resolve().is_err());
        assert!(sustained(&["--duration", "500ms"])?.resolve().is_err());
        assert!(sustained(&["--baselines", "mysql"]).is_err());
        Ok(())
    }

    #[test]
    fn sustained_baselines_alternate_in_rounds() -> anyhow::Result<()> {
        let plan = sustained(&["--baselines", "floor,etcd", "--duration", "90s"])?.resolve()?;
        assert_eq!(plan.baselines, [Baseline::Floor, Baseline::Etcd]);
        assert_eq!(plan.rounds, 3);
        assert_eq!(
            plan.cell_duration,
            Duration::from_secs(20),
            "--cell-duration, not --duration, with baselines"
        );
        let plan = sustained(&[
            "--baselines",
            "etcd,etcd",
            "--rounds",
            "5",
            "--cell-duration",
            "30s",
        ])?
        .resolve()?;
        assert_eq!(plan.baselines, [Baseline::Etcd]);
        assert_eq!(
            (plan.rounds, plan.cell_duration),
            (5, Duration::from_secs(30))
        );
        Ok(())
    }

    fn devicebound(args: &[&str]) -> anyhow::Result<DeviceboundArgs> {
        let mut full = vec!["devicebound"];
        full.extend_from_slice(args);
        match parse(&full)?.command {
            Command::Devicebound(d) => Ok(d),
            other => bail!("not devicebound: {other:?}"),
        }
    }

    #[test]
    fn devicebound_defaults_and_flags() -> anyhow::Result<()> {
        let plan = devicebound(&[])?.resolve()?;
        assert_eq!(
            (plan.nodes, plan.devices, plan.clients, plan.in_flight),
            (3, 1000, 64, 8)
        );
        assert_eq!(plan.duration, Duration::from_secs(60));
        assert_eq!(
            plan.drain_messages, 50,
            "exactly the default max queue depth"
        );
        assert_eq!(plan.connect_concurrency, 200);
        assert_eq!(plan.rate, None, "half the measured SEND throughput");
        let smoke = devicebound(&["--smoke"])?.resolve()?;
        assert_eq!(
            (
                smoke.devices,
                smoke.clients,
                smoke.in_flight,
                smoke.drain_messages
            ),
            (50, 1, 1, 5)
        );
        assert_eq!(smoke.duration, Duration::from_secs(5));
        assert_eq!(smoke.drain_timeout, Duration::from_secs(60));
        let plan = devicebound(&[
            "--devices",
            "10",
            "--duration",
            "2s",
            "--rate",
            "500",
            "--drain-messages",
            "7",
            "--node-arg=--devicebound-device-window=4",
            "--smoke",
        ])?
        .resolve()?;
        assert_eq!(
            (plan.devices, plan.duration, plan.rate, plan.drain_messages),
            (10, Duration::from_secs(2), Some(500.0), 7),
            "flags win over smoke defaults"
        );
        for bad in [
            &["--devices", "0"][..],
            &["--nodes", "0"],
            &["--duration", "500ms"],
            &["--drain-messages", "0"],
            &["--drain-messages", "5001"],
            &["--rate", "0"],
            &["--rate=-3"],
            &["--connect-concurrency", "0"],
        ] {
            assert!(devicebound(bad)?.resolve().is_err(), "{bad:?}");
        }
        Ok(())
    }

    #[test]
    fn named_pids() -> anyhow::Result<()> {
        let Command::Run(run) = parse(&[
            "run",
            "--broker",
            "127.0.0.1:1883",
            "--pid",
            "node 1=4242",
            "--pid",
            "mosquitto=17",
        ])?
        .command
        else {
            panic!("run");
        };
        assert_eq!(
            run.pids,
            [
                NamedPid {
                    name: "node 1".to_owned(),
                    pid: 4242
                },
                NamedPid {
                    name: "mosquitto".to_owned(),
                    pid: 17
                }
            ]
        );
        assert_eq!(run.pids[0].to_string(), "node 1=4242");
        assert!("4242".parse::<NamedPid>().is_err());
        assert!("=4242".parse::<NamedPid>().is_err());
        assert!("node=x".parse::<NamedPid>().is_err());
        assert!(parse(&["run", "--broker", "h:1", "--pid", "n=-1"]).is_err());
        Ok(())
    }

    #[test]
    fn abuse_defaults_and_smoke() -> anyhow::Result<()> {
        let Command::Abuse(args) = parse(&["abuse"])?.command else {
            panic!("abuse");
        };
        {
            use crate::abuse_attacks::Attack::*;
            assert_eq!(
                args.attacks,
                vec![Scan, Keynotify, Getbig, Props, Forged, Poison]
            );
        }
        assert_eq!((args.clients, args.in_flight), (4, 2));
        let plan = args.resolve()?;
        assert_eq!(plan.duration, Duration::from_secs(20));
        let Command::Abuse(args) =
            parse(&["abuse", "--smoke", "--attacks", "scan,poison"])?.command
        else {
            panic!("abuse");
        };
        assert_eq!(args.resolve()?.duration, Duration::from_secs(3));
        assert_eq!(
            args.attacks,
            vec![
                crate::abuse_attacks::Attack::Scan,
                crate::abuse_attacks::Attack::Poison
            ]
        );
        let Command::Abuse(args) = parse(&["abuse", "--clients", "0"])?.command else {
            panic!("abuse");
        };
        assert!(args.resolve().is_err());
        assert!(parse(&["abuse", "--attacks", "nonsense"]).is_err());
        Ok(())
    }
}
