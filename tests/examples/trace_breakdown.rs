//! Latency breakdown from traces: runs an OTLP/gRPC collector on `127.0.0.1:<port>` for a
//! while, then prints, per span name, how many spans arrived and their duration percentiles,
//! plus the gaps of a write's critical path (validate end → commit start, fsync end → apply
//! start, apply end → commit end, commit end → reply start).
//!
//! ```sh
//! cargo run --release -p statestore-tests --example trace_breakdown -- 4317 60
//! # meanwhile: nodes with --otlp-endpoint http://127.0.0.1:4317 --trace-sample-ratio 1
//! ```

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use statestore_tests::otlp::{Collector, Span};

fn percentiles(mut values: Vec<u64>) -> String {
    if values.is_empty() {
        return "-".into();
    }
    values.sort_unstable();
    let at = |q: f64| {
        let index = ((values.len() as f64 - 1.0) * q).round() as usize;
        values[index] as f64 / 1000.0
    };
    format!(
        "n={:>6}  p50 {:>8.1} µs  p90 {:>8.1} µs  p99 {:>8.1} µs",
        values.len(),
        at(0.5),
        at(0.9),
        at(0.99)
    )
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let port: u16 = args.get(1).and_then(|p| p.parse().ok()).unwrap_or(4317);
    let seconds: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(60);
    let collector = Collector::start_on(port);
    eprintln!("collecting on {} for {seconds} s", collector.endpoint());
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let spans = collector.spans();

    let mut by_name: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for span in &spans {
        by_name
            .entry(span.name.as_str())
            .or_default()
            .push(span.end_ns.saturating_sub(span.start_ns));
    }
    println!("span durations:");
    for (name, durations) in by_name {
        println!("  {name:<12} {}", percentiles(durations));
    }

    // Gaps on each traced write's critical path.
    let mut traces: HashMap<&str, Vec<&Span>> = HashMap::new();
    for span in &spans {
        traces.entry(span.trace_id.as_str()).or_default().push(span);
    }
    let mut gaps: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for trace in traces.values() {
        let find = |name: &str| trace.iter().find(|s| s.name == name);
        let (Some(request), Some(commit), Some(reply)) =
            (find("request"), find("commit"), find("reply"))
        else {
            continue;
        };
        let mut gap = |name: &'static str, from: u64, to: u64| {
            gaps.entry(name).or_default().push(to.saturating_sub(from));
        };
        gap("request total", request.start_ns, request.end_ns);
        gap(
            "request start → commit start",
            request.start_ns,
            commit.start_ns,
        );
        gap("commit end → reply end", commit.end_ns, reply.end_ns);
        if let (Some(append), Some(fsync), Some(apply)) =
            (find("raft.append"), find("raft.fsync"), find("raft.apply"))
        {
            gap(
                "commit start → append start",
                commit.start_ns,
                append.start_ns,
            );
            gap(
                "fsync end → apply start (quorum)",
                fsync.end_ns,
                apply.start_ns,
            );
            gap("apply end → commit end", apply.end_ns, commit.end_ns);
        }
    }
    println!("critical path of traced writes:");
    for (name, values) in gaps {
        println!("  {name:<34} {}", percentiles(values));
    }
}
