//! The `scale` command: load many keys (16-byte keys, value-size values) into a fresh
//! statestore cluster, then report the load rate, how long the followers took to apply
//! everything, RSS and on-disk size per node (and both per key, the disk as space
//! amplification over the bytes of keys and values), the stalls of apply while loading, and
//! after a full-cluster restart (SIGTERM, start again on the same data) the time to ready and a
//! check that GETs still hit; then one follower is killed (SIGKILL) and started again on its data,
//! and the time until it holds every key again (an unclean start: `state/` kept, or rebuilt from
//! the snapshot) is reported; last, one follower is wiped and rejoins empty, and the time until
//! it holds every key again (a snapshot transfer) is reported.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::bail;
use serde::Serialize;

use crate::cli::ScaleArgs;
use crate::compare::{mosquitto_bin, statestore_bin, tool_versions};
use crate::driver::{self, Plan};
use crate::mqtt_load::{self, Check, LoadOptions};
use crate::node_counters::{self, Counters};
use crate::processes::{DiskPart, Mosquitto, StatestoreCluster, WorkDir};
use crate::report::{self, Machine};
use crate::stats::Summary;
use crate::timeline::Second;
use crate::workload::{self, KEY_LEN, Mix, ValueKind};

/// The figures of a scale run.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleReport {
    /// `statestore-bench <version>`.
    pub tool: String,
    /// Machine.
    pub machine: Machine,
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Keys loaded.
    pub keys: u64,
    /// Key size, bytes.
    pub key_size: usize,
    /// Value size, bytes.
    pub value_size: usize,
    /// What the values look like (`pattern`: one printable value for every key; `random`:
    /// incompressible, different for every key).
    pub values: ValueKind,
    /// Loading connections × in-flight.
    pub concurrency: String,
    /// Fresh cluster start to ready, seconds.
    pub start_to_ready_secs: f64,
    /// Loading time, seconds.
    pub load_secs: f64,
    /// Keys per second while loading.
    pub load_rate: f64,
    /// Latency of the loading SETs.
    pub load_latency: Summary,
    /// From the last SET reply until every node reported all keys, seconds.
    pub replicas_caught_up_secs: Option<f64>,
    /// Keys each node reports after loading.
    pub keys_per_node: Vec<u64>,
    /// RSS per node after loading, KiB.
    pub rss_kib_after_load: Vec<Option<u64>>,
    /// Data directory size per node after loading, bytes.
    pub disk_bytes_after_load: Vec<u64>,
    /// ... by entry of the data directory (`state`, `snapshots`, `raft-log`, `replies`).
    pub disk_parts_after_load: Vec<BTreeMap<String, DiskPart>>,
    /// Longest SIGTERM-to-exit time of the nodes, seconds.
    pub stop_secs: f64,
    /// Data directory size per node after the clean stop, bytes.
    pub disk_bytes_after_stop: Vec<u64>,
    /// ... by entry of the data directory (`state`, `snapshots`, `raft-log`, `replies`).
    pub disk_parts_after_stop: Vec<BTreeMap<String, DiskPart>>,
    /// Restart (all nodes started again) to ready, seconds.
    pub restart_to_ready_secs: f64,
    /// Restart until every node reports all keys, seconds.
    pub restart_to_all_keys_secs: Option<f64>,
    /// RSS per node after the restart and the read check, KiB.
    pub rss_kib_after_restart: Vec<Option<u64>>,
    /// The read check after the restart: GETs of random loaded keys that must hit.
    pub reads_after_restart: Summary,
    /// Stalls of apply during the load, all nodes together.
    pub load_stalls: Stalls,
    /// When the load started, milliseconds since the Unix epoch (to match the timeline's
    /// seconds with the nodes' logs).
    pub load_started_unix_ms: u64,
    /// The load second by second (its last row may be a partial second).
    pub load_timeline: Vec<Second>,
    /// A follower killed (SIGKILL, no clean stop) and started again on its data until it held
    /// every key, seconds (an unclean start: `state/` kept, or rebuilt from the snapshot; then
    /// the log).
    pub killed_follower_back_secs: Option<f64>,
    /// A wiped follower started empty with `--join` until it held every key, seconds.
    pub wiped_follower_caught_up_secs: Option<f64>,
    /// Data directory size per node once the wiped follower caught up, bytes.
    pub disk_bytes_after_catch_up: Vec<u64>,
}

/// Waits of apply of 50 ms or more (`statestore_apply_stall_seconds`) and whole-process stalls
/// of 500 ms or more (`statestore_process_stalls_total`), counted over a phase.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stalls {
    /// Apply waits of at least 50 ms.
    pub apply_over_50ms: u64,
    /// ... of them, at least 100 ms.
    pub apply_over_100ms: u64,
    /// The smallest histogram bound the longest wait fits under, seconds (`None`: no stall, or
    /// one beyond the largest bound).
    pub longest_under_secs: Option<f64>,
    /// Whole-process stalls.
    pub process: u64,
    /// Per `waiting_on` label: the stalls and their seconds in all.
    pub by_cause: BTreeMap<String, CauseStalls>,
    /// Starts of snapshot builds (`statestore_disk_snapshot_duration_seconds{op="begin"}`:
    /// the memory layers are held, apply waits), their number and seconds in all.
    pub snapshot_begins: CauseStalls,
    /// Times a node's flush thread waited because a snapshot export's pre-images were at their
    /// cap (`statestore_disk_snapshot_preimage_waits_total`; commits wait behind it once the
    /// memtable is full).
    pub preimage_waits: u64,
}

/// The stalls of apply with one `waiting_on` label.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct CauseStalls {
    /// Waits of at least 50 ms.
    pub count: u64,
    /// Their length in all, seconds.
    pub seconds: f64,
}

impl Stalls {
    /// The counters read from every node (Prometheus text), summed.
    fn read(texts: &[String]) -> Counters {
        let mut total = Counters::new();
        for text in texts {
            for (series, value) in node_counters::parse(text, STALL_SERIES) {
                *total.entry(series).or_default() += value;
            }
        }
        total
    }

    /// What happened between `before` and `after` (see [`Stalls::read`]).
    fn between(before: &Counters, after: &Counters) -> Stalls {
        let grew = node_counters::increase(before, after);
        let count = |name: &str| -> u64 {
            grew.iter()
                .filter(|(series, _)| series.split('{').next() == Some(name))
                .map(|(_, v)| *v as u64)
                .sum()
        };
        // Cumulative buckets per bound, all labels together.
        let mut buckets: BTreeMap<String, u64> = BTreeMap::new();
        for (series, value) in &grew {
            if let Some(bound) = series
                .strip_prefix("statestore_apply_stall_seconds_bucket{")
                .and_then(|rest| rest.split("le=\"").nth(1))
                .and_then(|rest| rest.split('"').next())
            {
                *buckets.entry(bound.to_owned()).or_default() += *value as u64;
            }
        }
        let total = count("statestore_apply_stall_seconds_count");
        let under = |bound: &str| buckets.get(bound).copied().unwrap_or(0);
        let mut bounds: Vec<f64> = buckets.keys().filter_map(|b| b.parse().ok()).collect();
        bounds.sort_by(f64::total_cmp);
        let longest_under_secs = (total > 0)
            .then(|| {
                bounds
                    .into_iter()
                    .find(|b| buckets.get(&b.to_string()).copied().unwrap_or(0) >= total)
            })
            .flatten();
        let mut by_cause: BTreeMap<String, CauseStalls> = BTreeMap::new();
        for (series, value) in &grew {
            let Some((name, labels)) = series.split_once('{') else {
                continue;
            };
            let Some(cause) = labels
                .split("waiting_on=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
            else {
                continue;
            };
            let entry = by_cause.entry(cause.to_owned()).or_default();
            match name {
                "statestore_apply_stall_seconds_count" => entry.count += *value as u64,
                "statestore_apply_stall_seconds_sum" => entry.seconds += *value,
                _ => {}
            }
        }
        by_cause.retain(|_, stalls| stalls.count > 0);
        let begin = |name: &str| {
            grew.get(&format!("{name}{{op=\"begin\"}}"))
                .copied()
                .unwrap_or(0.0)
        };
        Stalls {
            by_cause,
            snapshot_begins: CauseStalls {
                count: begin("statestore_disk_snapshot_duration_seconds_count") as u64,
                seconds: begin("statestore_disk_snapshot_duration_seconds_sum"),
            },
            apply_over_50ms: total,
            apply_over_100ms: total.saturating_sub(under("0.1")),
            longest_under_secs,
            process: count("statestore_process_stalls_total"),
            preimage_waits: count("statestore_disk_snapshot_preimage_waits_total"),
        }
    }
}

/// The series [`Stalls`] reads.
const STALL_SERIES: &[&str] = &[
    "statestore_apply_stall_seconds_bucket",
    "statestore_apply_stall_seconds_count",
    "statestore_apply_stall_seconds_sum",
    "statestore_process_stalls_total",
    "statestore_disk_snapshot_duration_seconds_count",
    "statestore_disk_snapshot_duration_seconds_sum",
    "statestore_disk_snapshot_preimage_waits_total",
];

impl ScaleReport {
    /// The printed table.
    pub fn text(&self) -> String {
        let mib = |bytes: u64| format!("{:.1}", bytes as f64 / (1024.0 * 1024.0));
        let rss = |v: &[Option<u64>]| {
            v.iter()
                .map(|kib| kib.map_or("–".to_owned(), |k| mib(k * 1024)))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        let disk = |v: &[u64]| v.iter().map(|b| mib(*b)).collect::<Vec<_>>().join(" / ");
        let logical = self.keys * (self.key_size + self.value_size) as u64;
        let amplification = |v: &[u64]| {
            v.iter()
                .map(|b| format!("{:.2}×", *b as f64 / logical.max(1) as f64))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        let per_key = |v: &[Option<u64>]| {
            v.iter()
                .map(|kib| {
                    kib.map_or("–".to_owned(), |k| {
                        format!("{:.0}", (k * 1024) as f64 / self.keys.max(1) as f64)
                    })
                })
                .collect::<Vec<_>>()
                .join(" / ")
        };
        // "state 96.0 (25) / 96.1 (25) / 93.2 (23), snapshots 66.1 (1) / 138.0 (2) / 69.0 (1),
        // ...": MiB per node, with the number of files under each entry.
        let parts = |nodes: &[BTreeMap<String, DiskPart>]| {
            let names: std::collections::BTreeSet<&String> =
                nodes.iter().flat_map(BTreeMap::keys).collect();
            names
                .into_iter()
                .filter(|name| {
                    nodes
                        .iter()
                        .any(|n| n.get(*name).is_some_and(|p| p.bytes > 0))
                })
                .map(|name| {
                    let per_node = nodes
                        .iter()
                        .map(|n| {
                            let part = n.get(name).copied().unwrap_or_default();
                            format!("{} ({})", mib(part.bytes), part.files)
                        })
                        .collect::<Vec<_>>()
                        .join(" / ");
                    format!("{name} {per_node}")
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let secs = |s: Option<f64>| s.map_or("not reached".to_owned(), |s| format!("{s:.2}"));
        let l = &self.load_latency;
        let r = &self.reads_after_restart;
        let mut out = format!(
            "{}\n\n| measure | value |\n|---|---|\n",
            self.machine.line()
        );
        let mut row = |name: &str, value: String| {
            let _ = writeln!(out, "| {name} | {value} |");
        };
        row("cluster", format!("{} nodes", self.nodes));
        row(
            "keys loaded",
            format!(
                "{} ({} B keys, {} B {} values, loaded at {} clients×in-flight)",
                self.keys, self.key_size, self.value_size, self.values, self.concurrency
            ),
        );
        row(
            "fresh start → ready, s",
            format!("{:.2}", self.start_to_ready_secs),
        );
        row("load time, s", format!("{:.1}", self.load_secs));
        row("load rate, keys/s", format!("{:.0}", self.load_rate));
        row(
            "load SET latency p50 / p99 / p99.9 / max, ms",
            format!(
                "{:.2} / {:.2} / {:.2} / {:.1}",
                l.p50_ms, l.p99_ms, l.p999_ms, l.max_ms
            ),
        );
        row(
            "load errors / timeouts",
            format!("{} / {} {}", l.errors, l.timeouts, kinds(l)),
        );
        row(
            "last reply → all replicas hold every key, s",
            secs(self.replicas_caught_up_secs),
        );
        row(
            "keys per node",
            self.keys_per_node
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" / "),
        );
        row(
            "RSS per node after load, MiB",
            rss(&self.rss_kib_after_load),
        );
        row(
            "RSS per key after load, bytes",
            per_key(&self.rss_kib_after_load),
        );
        row(
            "data dir per node after load, MiB allocated",
            disk(&self.disk_bytes_after_load),
        );
        row(
            "space amplification after load (data dir / bytes of keys and values)",
            amplification(&self.disk_bytes_after_load),
        );
        row(
            "after load by directory, MiB (files)",
            parts(&self.disk_parts_after_load),
        );
        let st = &self.load_stalls;
        row(
            "apply stalls while loading (≥ 50 ms / ≥ 100 ms, longest under), process stalls",
            format!(
                "{} / {}, {}, {}",
                st.apply_over_50ms,
                st.apply_over_100ms,
                st.longest_under_secs
                    .map_or("–".to_owned(), |s| format!("{:.0} ms", s * 1000.0)),
                st.process
            ),
        );
        row(
            "apply stalls by what apply waited on (count, seconds in all)",
            if st.by_cause.is_empty() {
                "–".to_owned()
            } else {
                st.by_cause
                    .iter()
                    .map(|(cause, c)| format!("{cause} {} / {:.1} s", c.count, c.seconds))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        );
        row(
            "snapshot builds started while loading (count, seconds holding the memory layers), flush waits for pre-image room",
            format!(
                "{} / {:.3} s, {}",
                st.snapshot_begins.count, st.snapshot_begins.seconds, st.preimage_waits
            ),
        );
        row("stop (SIGTERM → exit), s", format!("{:.2}", self.stop_secs));
        row(
            "data dir per node after stop, MiB allocated",
            disk(&self.disk_bytes_after_stop),
        );
        row(
            "space amplification after stop",
            amplification(&self.disk_bytes_after_stop),
        );
        row(
            "after stop by directory, MiB (files)",
            parts(&self.disk_parts_after_stop),
        );
        row(
            "restart → ready, s",
            format!("{:.2}", self.restart_to_ready_secs),
        );
        row(
            "restart → every node reports all keys, s",
            secs(self.restart_to_all_keys_secs),
        );
        row(
            "RSS per node after restart, MiB",
            rss(&self.rss_kib_after_restart),
        );
        row(
            "RSS per key after restart, bytes",
            per_key(&self.rss_kib_after_restart),
        );
        row(
            "killed follower (SIGKILL, started again on its data) → holds every key, s",
            secs(self.killed_follower_back_secs),
        );
        row(
            "wiped follower (removed, started empty with --join, added again) → holds every key, s",
            secs(self.wiped_follower_caught_up_secs),
        );
        row(
            "data dir per node after that catch-up, MiB allocated",
            disk(&self.disk_bytes_after_catch_up),
        );
        row(
            "GETs after restart (must hit)",
            format!(
                "{} ok, {} errors, {} timeouts, p50 {:.2} ms, p99 {:.2} ms {}",
                r.ops,
                r.errors,
                r.timeouts,
                r.p50_ms,
                r.p99_ms,
                kinds(r)
            ),
        );
        out.push_str(&self.slowest_seconds_text());
        out
    }

    /// The load's slowest seconds by their longest reply, as a table (empty without a timeline).
    fn slowest_seconds_text(&self) -> String {
        let slowest = slowest_seconds(&self.load_timeline, SLOWEST_SECONDS);
        if slowest.is_empty() {
            return String::new();
        }
        let mut out = format!(
            "\nThe load's {} slowest seconds by their longest reply (time of day UTC; the nodes' logs use it):\n\n\
             | second | UTC | replies | p50, ms | p99, ms | max, ms |\n|--:|---|--:|--:|--:|--:|\n",
            slowest.len()
        );
        for s in slowest {
            let at_ms = self.load_started_unix_ms + s.second as u64 * 1000;
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.1} | {:.1} | {:.1} |",
                s.second,
                time_of_day_utc(at_ms),
                s.ops,
                s.p50_ms,
                s.p99_ms,
                s.max_ms
            );
        }
        out
    }

    /// Whether the run is clean: no errors or timeouts and every key everywhere.
    pub fn passed(&self) -> bool {
        self.load_latency.errors == 0
            && self.load_latency.timeouts == 0
            && self.reads_after_restart.errors == 0
            && self.reads_after_restart.timeouts == 0
            && self.reads_after_restart.ops > 0
            && self.keys_per_node.iter().all(|k| *k == self.keys)
            && self.restart_to_all_keys_secs.is_some()
            && self.killed_follower_back_secs.is_some()
            && self.wiped_follower_caught_up_secs.is_some()
    }
}

/// How many of the load's slowest seconds the report lists.
const SLOWEST_SECONDS: usize = 5;

/// The `count` seconds with the longest replies, slowest first (seconds without replies are
/// left out: the timeouts and errors of a load are reported on their own).
fn slowest_seconds(timeline: &[Second], count: usize) -> Vec<&Second> {
    let mut seconds: Vec<&Second> = timeline.iter().filter(|s| s.ops > 0).collect();
    seconds.sort_by(|a, b| b.max_ms.total_cmp(&a.max_ms).then(a.second.cmp(&b.second)));
    seconds.truncate(count);
    seconds
}

/// `HH:MM:SS` (UTC) of a Unix time in milliseconds.
fn time_of_day_utc(unix_ms: u64) -> String {
    let secs = (unix_ms / 1000) % 86_400;
    format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

fn kinds(summary: &Summary) -> String {
    if summary.error_kinds.is_empty() {
        String::new()
    } else {
        format!("{:?}", summary.error_kinds)
    }
}

/// Polls until every node reports `keys` keys; the time it took, or `None` after `within`.
async fn wait_all_keys(
    cluster: &StatestoreCluster,
    keys: u64,
    within: Duration,
) -> (Option<Duration>, Vec<u64>) {
    let start = Instant::now();
    loop {
        let mut counts = Vec::with_capacity(cluster.nodes.len());
        for i in 0..cluster.nodes.len() {
            counts.push(cluster.status(i).await.map(|s| s.keys).unwrap_or_default());
        }
        if counts.iter().all(|k| *k == keys) {
            return (Some(start.elapsed()), counts);
        }
        if start.elapsed() > within {
            return (None, counts);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every node's `/metrics` (empty for a node that does not answer).
async fn metrics_texts(cluster: &StatestoreCluster) -> Vec<String> {
    let mut texts = Vec::with_capacity(cluster.nodes.len());
    for i in 0..cluster.nodes.len() {
        texts.push(cluster.metrics_text(i).await.unwrap_or_default());
    }
    texts
}

/// A node that does not hold the request subscription (the last one if all answer so).
async fn follower(cluster: &StatestoreCluster) -> usize {
    for i in (0..cluster.nodes.len()).rev() {
        if let Ok(status) = cluster.status(i).await
            && !status.request_subscription_active
        {
            return i;
        }
    }
    cluster.nodes.len() - 1
}

/// The index of the node holding the request subscription, if one answers that it does.
async fn leader(cluster: &StatestoreCluster) -> Option<usize> {
    for i in 0..cluster.nodes.len() {
        if let Ok(status) = cluster.status(i).await
            && status.request_subscription_active
        {
            return Some(i);
        }
    }
    None
}

/// Polls until node index `i` reports `keys` keys; false after `within`.
async fn wait_node_keys(
    cluster: &StatestoreCluster,
    i: usize,
    keys: u64,
    within: Duration,
) -> bool {
    let start = Instant::now();
    while start.elapsed() < within {
        if cluster.status(i).await.is_ok_and(|s| s.keys == keys) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// `statestore-bench scale`: returns whether the run passed.
pub async fn scale(args: ScaleArgs) -> anyhow::Result<bool> {
    if args.keys == 0 || args.nodes == 0 {
        bail!("--keys and --nodes must be at least 1");
    }
    let bin = statestore_bin(&args.programs)?;
    let mosquitto = mosquitto_bin(&args.programs)?;
    let machine = Machine::collect(tool_versions(Some(&bin), Some(&mosquitto), None));
    eprintln!("{}", machine.line());
    let dir = WorkDir::new("scale", args.keep_temp)?;
    if args.keep_temp {
        eprintln!("files kept in {}", dir.path().display());
    }
    let broker = Mosquitto::start(&mosquitto, dir.path())?;
    // room for every key: the default quota is exactly 1,000,000 keys and 1 GiB
    let stored_bytes = args.keys * (KEY_LEN + args.value_size) as u64;
    let mut extra = vec![
        "--max-keys".to_owned(),
        (args.keys + args.keys / 10 + 1000)
            .max(1_000_000)
            .to_string(),
        "--max-bytes".to_owned(),
        (stored_bytes * 2).max(1 << 30).to_string(),
    ];
    extra.extend(args.node_args.iter().cloned());
    let mut cluster =
        StatestoreCluster::start(&bin, &broker.broker(), args.nodes, dir.path(), &extra)?;
    let start_to_ready = cluster.wait_ready(Duration::from_secs(60)).await?;
    eprintln!(
        "cluster ready after {:.2} s; loading {} keys",
        start_to_ready.as_secs_f64(),
        args.keys
    );

    let options = LoadOptions {
        clients: args.clients,
        in_flight: args.in_flight,
        value_size: args.value_size,
        values: args.values,
        timeout: args.timeout,
        check: Check::Store,
    };
    let connections = mqtt_load::connect_all(&broker.broker(), &options).await?;
    let plan = Plan::fill(args.keys).with_timeline();
    let load_started_unix_ms = mqtt_load::now_ms();
    let progress = plan.fill_counter();
    let total = args.keys;
    let reporter = tokio::spawn(async move {
        let start = Instant::now();
        loop {
            tokio::time::sleep(Duration::from_secs(10)).await;
            if let Some(sent) = progress
                .as_ref()
                .map(|p| p.load(Ordering::Relaxed).min(total))
            {
                eprintln!(
                    "   {sent} / {total} keys sent after {:.0} s ({:.0} keys/s)",
                    start.elapsed().as_secs_f64(),
                    sent as f64 / start.elapsed().as_secs_f64()
                );
            }
        }
    });
    let stalls_before = Stalls::read(&metrics_texts(&cluster).await);
    let load_start = Instant::now();
    let stats = driver::drive(
        connections,
        args.in_flight,
        plan,
        workload::Values::new(args.values, args.value_size),
    )
    .await;
    let load_time = load_start.elapsed();
    reporter.abort();
    let stats = stats?;
    let load_latency = stats.summary(load_time);
    eprintln!(
        "loaded in {:.1} s ({:.0} keys/s), {} errors, {} timeouts",
        load_time.as_secs_f64(),
        load_latency.throughput,
        load_latency.errors,
        load_latency.timeouts
    );

    let expected = stats.succeeded.min(args.keys);
    let (caught_up, keys_per_node) =
        wait_all_keys(&cluster, expected, Duration::from_secs(120)).await;
    let rss_after_load = cluster.rss_kib();
    let disk_after_load = cluster.disk_bytes();
    let disk_parts_after_load = cluster.disk_parts();
    let load_stalls = Stalls::between(
        &stalls_before,
        &Stalls::read(&metrics_texts(&cluster).await),
    );

    eprintln!("stopping every node (SIGTERM)");
    let stop = cluster.stop_all(Duration::from_secs(60));
    let disk_after_stop = cluster.disk_bytes();
    let disk_parts_after_stop = cluster.disk_parts();
    eprintln!("restarting");
    let restart = Instant::now();
    cluster.spawn_all()?;
    let restart_to_ready = cluster.wait_ready(Duration::from_secs(600)).await?;
    let (all_keys, _) = wait_all_keys(&cluster, expected, Duration::from_secs(300)).await;
    let restart_to_all_keys = all_keys.map(|_| restart.elapsed());
    eprintln!(
        "ready {:.2} s after restart; checking reads",
        restart_to_ready.as_secs_f64()
    );

    let read_options = LoadOptions {
        clients: 4,
        in_flight: 4,
        value_size: args.value_size,
        values: args.values,
        timeout: args.timeout,
        check: Check::GetsHit,
    };
    let read_window = Duration::from_secs(2);
    let reads = mqtt_load::run(&broker.broker(), &read_options, || {
        Plan::timed(Mix::Get, expected.max(1), Duration::ZERO, read_window)
    })
    .await?;
    let rss_after_restart = cluster.rss_kib();

    let killed = follower(&cluster).await;
    eprintln!(
        "killing node {} (SIGKILL) and starting it again on its data",
        killed + 1
    );
    cluster.kill(killed);
    let killed_at = Instant::now();
    cluster.spawn_all()?;
    let killed_back = wait_node_keys(&cluster, killed, expected, Duration::from_secs(600))
        .await
        .then(|| killed_at.elapsed());
    eprintln!(
        "killed follower holds every key: {}",
        killed_back.map_or("no".to_owned(), |d| format!(
            "after {:.1} s",
            d.as_secs_f64()
        ))
    );

    let wiped = follower(&cluster).await;
    let via = leader(&cluster)
        .await
        .unwrap_or((wiped + 1) % cluster.nodes.len());
    eprintln!(
        "replacing node {}: removed, wiped, started empty with --join, added again",
        wiped + 1
    );
    let catch_up_limit = Duration::from_secs(900);
    let replaced = Instant::now();
    let wiped_caught_up = match cluster
        .replace_wiped(wiped, via, Duration::from_secs(60), catch_up_limit)
        .await
    {
        Ok(()) => wait_node_keys(&cluster, wiped, expected, catch_up_limit)
            .await
            .then(|| replaced.elapsed()),
        Err(e) => {
            eprintln!("replacing the wiped node failed: {e:#}");
            None
        }
    };
    eprintln!(
        "wiped follower holds every key: {}",
        wiped_caught_up.map_or("no".to_owned(), |d| format!(
            "after {:.1} s",
            d.as_secs_f64()
        ))
    );
    let disk_after_catch_up = cluster.disk_bytes();
    let report = ScaleReport {
        tool: format!("statestore-bench {}", env!("CARGO_PKG_VERSION")),
        machine,
        nodes: args.nodes,
        keys: args.keys,
        key_size: KEY_LEN,
        value_size: args.value_size,
        values: args.values,
        concurrency: format!("{}×{}", args.clients, args.in_flight),
        start_to_ready_secs: start_to_ready.as_secs_f64(),
        load_secs: load_time.as_secs_f64(),
        load_rate: load_latency.throughput,
        load_latency,
        replicas_caught_up_secs: caught_up.map(|d| d.as_secs_f64()),
        keys_per_node,
        rss_kib_after_load: rss_after_load,
        disk_bytes_after_load: disk_after_load,
        disk_parts_after_load,
        stop_secs: stop.as_secs_f64(),
        disk_bytes_after_stop: disk_after_stop,
        disk_parts_after_stop,
        restart_to_ready_secs: restart_to_ready.as_secs_f64(),
        restart_to_all_keys_secs: restart_to_all_keys.map(|d| d.as_secs_f64()),
        rss_kib_after_restart: rss_after_restart,
        reads_after_restart: reads.summary(read_window),
        load_stalls,
        load_started_unix_ms,
        load_timeline: stats.timeline_rows(),
        killed_follower_back_secs: killed_back.map(|d| d.as_secs_f64()),
        wiped_follower_caught_up_secs: wiped_caught_up.map(|d| d.as_secs_f64()),
        disk_bytes_after_catch_up: disk_after_catch_up,
    };
    println!("{}", report.text());
    if let Some(path) = &args.json {
        report::write_json(path, &report)?;
        eprintln!("JSON written to {}", path.display());
    }
    Ok(report.passed())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(lines: &str) -> Counters {
        node_counters::parse(lines, STALL_SERIES)
    }

    #[test]
    fn stalls_count_what_grew_and_bound_the_longest() {
        // Two scrapes of one node's stall series (Prometheus text), before and after a phase.
        let before = counters(include_str!("scale/stalls_before.prom"));
        let after = counters(include_str!("scale/stalls_after.prom"));
        let stalls = Stalls::between(&before, &after);
        assert_eq!(stalls.apply_over_50ms, 3, "three new stalls");
        assert_eq!(stalls.apply_over_100ms, 1, "one of them over 100 ms");
        assert_eq!(stalls.longest_under_secs, Some(0.25));
        assert_eq!(stalls.process, 2);
        assert_eq!(
            stalls.preimage_waits, 4,
            "the flush waited four times for pre-image room"
        );
        assert_eq!(
            stalls.by_cause.len(),
            1,
            "commit did not grow: {:?}",
            stalls.by_cause
        );
        let apply = &stalls.by_cause["apply"];
        assert_eq!(apply.count, 3);
        assert!((apply.seconds - 0.5).abs() < 1e-9, "{}", apply.seconds);
        assert_eq!(stalls.snapshot_begins.count, 2, "two snapshot builds began");
        assert!(
            (stalls.snapshot_begins.seconds - 0.03).abs() < 1e-9,
            "{}",
            stalls.snapshot_begins.seconds
        );
        let none = Stalls::between(&after, &after);
        assert_eq!((none.apply_over_50ms, none.longest_under_secs), (0, None));
    }
    fn second(second: usize, ops: u64, max_ms: f64) -> Second {
        Second {
            second,
            ops,
            p50_ms: max_ms / 2.0,
            p99_ms: max_ms,
            max_ms,
            errors: 0,
            timeouts: 0,
        }
    }

    #[test]
    fn slowest_seconds_are_the_longest_replies_first_and_skip_empty_seconds() {
        let timeline = [
            second(0, 10, 5.0),
            second(1, 0, 0.0),
            second(2, 10, 90.0),
            second(3, 10, 40.0),
            second(4, 10, 90.0),
        ];
        let slowest: Vec<usize> = slowest_seconds(&timeline, 3)
            .iter()
            .map(|s| s.second)
            .collect();
        assert_eq!(slowest, [2, 4, 3], "ties in time order");
        assert_eq!(
            slowest_seconds(&timeline, 10).len(),
            4,
            "the empty second is left out"
        );
        assert!(slowest_seconds(&[], 5).is_empty());
    }

    #[test]
    fn time_of_day_is_utc() {
        // 2026-12-06T12:27:36.500Z
        assert_eq!(time_of_day_utc(1_796_560_056_500), "12:27:36");
        assert_eq!(time_of_day_utc(0), "00:00:00");
        assert_eq!(time_of_day_utc(86_399_999), "23:59:59");
    }
}
