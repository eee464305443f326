//! The Grafana dashboards in `dashboards/*.json` against a live cluster: three real nodes and
//! real Mosquitto under a light mixed load with a leader failover, scraped every second by a
//! real Prometheus (Debian's `/usr/bin/prometheus`). Every query of every panel (and every
//! variable query) is evaluated through `/api/v1/query` with Grafana's variables substituted,
//! and must parse and return at least one series; a few panels must also show what the test
//! did (one leader, one subscription holder, three members up, the failover, the load).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use azure_iot_operations_services::state_store::SetOptions;
use serde_json::Value;
use statestore_tests::cluster::Cluster;
use statestore_tests::now_ms;
use statestore_tests::prometheus::{JOB, PrometheusServer, QueryOutcome};
use statestore_tests::sdk::{SdkClient, TIMEOUT};

/// `$__rate_interval` as Grafana computes it for a 1 s scrape interval (4 × scrape).
const RATE_INTERVAL: &str = "4s";

fn dashboards_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards")
}

/// Every `dashboards/*.json`, parsed, by file name.
fn load_dashboards() -> Vec<(String, Value)> {
    let mut boards: Vec<(String, Value)> = std::fs::read_dir(dashboards_dir())
        .expect("dashboards/")
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            (path.extension()? == "json").then_some(path)
        })
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("read dashboard");
            let board = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
            let name = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into();
            (name, board)
        })
        .collect();
    boards.sort_by(|a, b| a.0.cmp(&b.0));
    boards
}

/// Every panel, rows' nested panels included.
fn panels(board: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for panel in list.as_array().into_iter().flatten() {
            out.push(panel);
            walk(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&board["panels"], &mut out);
    out
}

/// Grafana's substitution for a multi-value "All" selection: the values regex-escaped and
/// joined as `(a|b)`, placed in a PromQL double-quoted string (so `\.` is written `\\.`).
fn all_regex(values: &[String]) -> String {
    let escaped: Vec<String> = values
        .iter()
        .map(|v| {
            v.chars()
                .map(|c| {
                    if ".+*?^$()[]{}|\\".contains(c) {
                        format!("\\\\{c}")
                    } else {
                        c.to_string()
                    }
                })
                .collect()
        })
        .collect();
    format!("({})", escaped.join("|"))
}

fn substitute(expr: &str, instances: &[String]) -> String {
    expr.replace("${datasource}", "prometheus")
        .replace("$datasource", "prometheus")
        .replace("$__rate_interval", RATE_INTERVAL)
        .replace("$__interval", "1s")
        .replace("$__range", "1m")
        .replace("$job", JOB)
        .replace("$instance", &all_regex(instances))
}

/// The dashboards' static shape: what an operator relies on and the schema does not check.
fn check_shape(name: &str, board: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let version = board["schemaVersion"].as_u64().unwrap_or(0);
    if !(39..=41).contains(&version) {
        problems.push(format!("{name}: schemaVersion {version} not in 39..=41"));
    }
    for key in ["__inputs", "__requires"] {
        if board.get(key).is_some() {
            problems.push(format!("{name}: has {key} (export-for-sharing key)"));
        }
    }
    let vars = board["templating"]["list"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let var = |n: &str| vars.iter().find(|v| v["name"] == n).cloned();
    match var("datasource") {
        Some(v) if v["type"] == "datasource" && v["query"] == "prometheus" => {}
        other => problems.push(format!(
            "{name}: no Prometheus datasource variable ({other:?})"
        )),
    }
    for n in ["job", "instance"] {
        match var(n) {
            Some(v) if v["multi"] == true && v["includeAll"] == true && v["type"] == "query" => {}
            other => problems.push(format!(
                "{name}: variable {n} missing or not multi + include-all ({other:?})"
            )),
        }
    }
    for panel in panels(board) {
        if panel["type"] == "row" {
            continue;
        }
        let title = panel["title"].as_str().unwrap_or("?");
        let defaults = &panel["fieldConfig"]["defaults"];
        if panel["description"].as_str().unwrap_or("").is_empty() {
            problems.push(format!("{name} / {title}: no description"));
        }
        if defaults["unit"].as_str().unwrap_or("").is_empty() {
            problems.push(format!("{name} / {title}: no unit"));
        }
        if defaults["thresholds"]["steps"]
            .as_array()
            .is_none_or(|s| s.is_empty())
        {
            problems.push(format!("{name} / {title}: no thresholds"));
        }
        let exprs = panel["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| !t["expr"].as_str().unwrap_or("").trim().is_empty())
            .count();
        if exprs == 0 {
            problems.push(format!("{name} / {title}: no query"));
        }
        if !panel["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|t| t["expr"].as_str().is_some_and(|e| e.contains("$instance")))
        {
            problems.push(format!("{name} / {title}: a query ignores $instance"));
        }
    }
    problems
}

/// Per-request timeout of the load: short, so a request lost with the killed leader does not
/// pause the load for long.
const LOAD_TIMEOUT: Duration = Duration::from_secs(2);

/// Light mixed load through the official SDK until `stop`: SET, GET, DEL, SET with PX (so
/// the expiry sweep removes keys) and a write to a key another client observes (KEYNOTIFY).
/// `done` counts successful requests.
async fn load(sdk: Arc<SdkClient>, stop: Arc<AtomicBool>, done: Arc<AtomicU64>) {
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("dash-{}", i % 50).into_bytes();
        let c = &sdk.client;
        let short = SetOptions {
            expires: Some(Duration::from_millis(300)),
            ..SetOptions::default()
        };
        let results = [
            c.set(
                key.clone(),
                b"v".to_vec(),
                LOAD_TIMEOUT,
                None,
                SetOptions::default(),
            )
            .await
            .is_ok(),
            c.get(key.clone(), LOAD_TIMEOUT).await.is_ok(),
            c.set(
                format!("px-{i}").into_bytes(),
                b"x".to_vec(),
                LOAD_TIMEOUT,
                None,
                short,
            )
            .await
            .is_ok(),
            c.set(
                b"watched".to_vec(),
                i.to_be_bytes().to_vec(),
                LOAD_TIMEOUT,
                None,
                SetOptions::default(),
            )
            .await
            .is_ok(),
            c.del(key, None, LOAD_TIMEOUT).await.is_ok(),
        ];
        done.fetch_add(
            results.iter().filter(|ok| **ok).count() as u64,
            Ordering::Relaxed,
        );
        i += 1;
    }
}

fn values(outcome: &QueryOutcome) -> Vec<f64> {
    match outcome {
        QueryOutcome::Series(series) => series.iter().map(|(_, v)| *v).collect(),
        QueryOutcome::Error(_) => Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_returns_series_from_a_live_cluster() {
    let started = Instant::now();
    let boards = load_dashboards();
    assert!(
        boards.len() >= 2,
        "expected the overview and details dashboards in {}",
        dashboards_dir().display()
    );
    let shape: Vec<String> = boards.iter().flat_map(|(n, b)| check_shape(n, b)).collect();
    assert!(shape.is_empty(), "dashboard shape:\n{}", shape.join("\n"));

    // Small snapshot thresholds so a snapshot is built (snapshot and purge panels have data).
    let mut cluster = Cluster::start(
        3,
        &[
            "--snapshot-after-proposals",
            "20",
            "--snapshot-after-entries",
            "20",
            "--snapshot-after-state-percent",
            "0",
            "--entries-kept-after-snapshot",
            "10",
        ],
    );
    cluster.wait_ready(Duration::from_secs(30)).await;
    let first_leader = cluster.wait_serving_leader(Duration::from_secs(30)).await;
    let targets: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("{}:{}", n.http_host, n.http_port))
        .collect();
    let prometheus = PrometheusServer::start(&targets, Duration::from_secs(1));
    let prometheus_start = now_ms() as f64 / 1000.0;
    // Two scrapes of every member before the failover, so the data shows the before and after.
    prometheus
        .wait_scraped_since(&targets, 2, Instant::now(), Duration::from_secs(30))
        .await;
    // scripts/render-dashboard.sh sets this: longer load around the failover, and the
    // overview's query_range data written to this file for the picture.
    let render = std::env::var_os("STATESTORE_DASHBOARD_RENDER").map(PathBuf::from);
    let (before, after) = if render.is_some() { (25, 25) } else { (3, 0) };

    let sdk = Arc::new(SdkClient::connect(cluster.broker.port, "t96-load").await);
    let observer = SdkClient::connect(cluster.broker.port, "t96-observer").await;
    let _notifications = observer
        .client
        .observe(b"watched".to_vec(), TIMEOUT)
        .await
        .expect("KEYNOTIFY")
        .response;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let load_task = tokio::spawn(load(sdk.clone(), stop.clone(), done.clone()));

    // Load, then a failover: the leader is killed, another takes over, the old one restarts.
    tokio::time::sleep(Duration::from_secs(before)).await;
    let killed_at = now_ms() as f64 / 1000.0;
    cluster.nodes[first_leader].kill();
    let second_leader = cluster.wait_serving_leader(Duration::from_secs(30)).await;
    assert_ne!(second_leader, first_leader);
    cluster.nodes[first_leader].spawn();
    cluster.wait_ready(Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(after)).await;
    // The load goes on against the new leader (a request lost with the old one timed out).
    let resumed = done.load(Ordering::Relaxed);
    let progressed = statestore_tests::wait_for(Duration::from_secs(30), || {
        let done = done.clone();
        async move { (done.load(Ordering::Relaxed) >= resumed + 50).then_some(()) }
    })
    .await;
    assert!(
        progressed.is_some(),
        "the load does not progress after the failover"
    );
    let failover_done = Instant::now();
    // Two successful scrapes of every member since then, with the load still running.
    prometheus
        .wait_scraped_since(&targets, 2, failover_done, Duration::from_secs(30))
        .await;
    let scraped_at = Instant::now();

    let instances = targets.clone();
    let mut failures = Vec::new();
    let mut results: BTreeMap<(String, String, String), QueryOutcome> = BTreeMap::new();
    let mut checked = 0usize;
    for (name, board) in &boards {
        // Variable queries: label_values(<selector>, <label>) must find every member.
        for var in board["templating"]["list"].as_array().into_iter().flatten() {
            let Some(query) = var["query"].as_str() else {
                continue;
            };
            let Some(inner) = query
                .strip_prefix("label_values(")
                .and_then(|q| q.strip_suffix(')'))
            else {
                continue;
            };
            let (selector, label) = inner.rsplit_once(',').expect("label_values(sel, label)");
            let expr = substitute(selector.trim(), &instances);
            checked += 1;
            let found: Vec<String> = match prometheus.query(&expr).await {
                Some(QueryOutcome::Series(series)) => series
                    .iter()
                    .filter_map(|(l, _)| l.get(label.trim())?.as_str().map(str::to_owned))
                    .collect(),
                other => {
                    failures.push(format!(
                        "{name} / variable {}: {expr}: {other:?}",
                        var["name"]
                    ));
                    continue;
                }
            };
            let expected: Vec<String> = if label.trim() == "job" {
                vec![JOB.to_owned()]
            } else {
                instances.clone()
            };
            for value in expected {
                if !found.contains(&value) {
                    failures.push(format!(
                        "{name} / variable {}: {expr} has no {label}={value} (found {found:?})",
                        var["name"]
                    ));
                }
            }
        }
        for panel in panels(board) {
            let title = panel["title"].as_str().unwrap_or("?").to_owned();
            for target in panel["targets"].as_array().into_iter().flatten() {
                let Some(raw) = target["expr"].as_str() else {
                    continue;
                };
                let refid = target["refId"].as_str().unwrap_or("?").to_owned();
                let expr = substitute(raw, &instances);
                checked += 1;
                match prometheus.query(&expr).await {
                    Some(QueryOutcome::Series(series)) if series.is_empty() => {
                        failures.push(format!("{name} / {title} / {refid}: no series: {expr}"));
                    }
                    Some(outcome @ QueryOutcome::Series(_)) => {
                        results.insert((name.clone(), title.clone(), refid), outcome);
                    }
                    Some(QueryOutcome::Error(error)) => {
                        failures.push(format!("{name} / {title} / {refid}: {error}: {expr}"));
                    }
                    None => failures.push(format!(
                        "{name} / {title} / {refid}: Prometheus did not answer: {expr}"
                    )),
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = load_task.await;
    let requests = done.load(Ordering::Relaxed);
    assert!(
        failures.is_empty(),
        "{} of {checked} dashboard queries failed:\n{}\nPrometheus log:\n{}",
        failures.len(),
        failures.join("\n"),
        prometheus.log()
    );

    // The panels show what happened.
    let panel = |board: &str, title: &str, refid: &str| -> Vec<f64> {
        let key = (board.to_owned(), title.to_owned(), refid.to_owned());
        let outcome = results
            .get(&key)
            .unwrap_or_else(|| panic!("no result for {key:?}"));
        values(outcome)
    };
    let overview = "statestore-overview.json";
    let details = "statestore-details.json";
    assert_eq!(panel(overview, "Leaders", "A"), vec![1.0], "one leader");
    assert_eq!(panel(overview, "Subscription holders", "A"), vec![1.0]);
    assert_eq!(panel(overview, "Members up", "A"), vec![3.0]);
    let leader_id = panel(overview, "Leader id", "A");
    assert_eq!(
        leader_id,
        vec![cluster.nodes[second_leader].id as f64],
        "the leader id panel names the new leader"
    );
    let roles = panel(overview, "Role by member", "A");
    assert_eq!(roles.len(), 3);
    assert_eq!(roles.iter().sum::<f64>(), 1.0, "one LEADER among {roles:?}");
    let term = panel(overview, "Term", "A");
    assert!(term[0] >= 2.0, "the failover raised the term: {term:?}");
    let changes = panel(overview, "Leader changes (range)", "A");
    assert!(changes[0] >= 1.0, "the failover is counted: {changes:?}");
    let rate: f64 = panel(overview, "Requests by command and result", "A")
        .iter()
        .filter(|v| v.is_finite())
        .sum();
    assert!(rate > 0.0, "the request-rate panel shows the load");
    let QueryOutcome::Series(by_command) = &results[&(
        overview.to_owned(),
        "Requests by command and result".to_owned(),
        "A".to_owned(),
    )] else {
        unreachable!()
    };
    for command in ["set", "get", "del"] {
        let rate: f64 = by_command
            .iter()
            .filter(|(l, _)| {
                l.get("command").and_then(Value::as_str) == Some(command)
                    && l.get("result").and_then(Value::as_str) == Some("ok")
            })
            .map(|(_, v)| *v)
            .sum();
        assert!(rate > 0.0, "no {command} ok rate in {by_command:?}");
    }
    assert_eq!(
        panel(details, "Registrations", "A"),
        vec![1.0],
        "the KEYNOTIFY registration is counted"
    );
    let sent: f64 = panel(details, "Notifications sent by op", "A").iter().sum();
    assert!(
        sent > 0.0,
        "notifications for the observed key are published"
    );
    let p99 = panel(overview, "Latency p50 / p99 by command", "B");
    assert!(
        p99.iter().any(|v| v.is_finite() && *v > 0.0),
        "a p99 latency is shown: {p99:?}"
    );
    assert!(
        panel(details, "Snapshot and purged index", "A")
            .iter()
            .any(|v| *v > 0.0),
        "a snapshot was built"
    );
    let expired = prometheus
        .query(&format!(
            "sum(statestore_expiry_keys_expired_total{{job=\"{JOB}\"}})"
        ))
        .await
        .map(|o| values(&o))
        .unwrap_or_default();
    assert!(
        expired.first().is_some_and(|v| *v > 0.0),
        "PX keys expired: {expired:?}"
    );
    assert_eq!(
        panel(details, "Request-subscription holders", "A"),
        vec![1.0]
    );

    if let Some(path) = render {
        write_render_data(
            &path,
            &prometheus,
            &boards,
            &instances,
            prometheus_start,
            killed_at,
        )
        .await;
    }
    observer.shutdown().await;
    if let Ok(sdk) = Arc::try_unwrap(sdk) {
        sdk.shutdown().await;
    }
    drop(prometheus);
    println!(
        "{} dashboards, {checked} queries checked against Prometheus ({} series); {requests} \
         requests of load; failover to node {} done {:?} into the test, scraped twice {:?} later; test took {:?}",
        boards.len(),
        results
            .values()
            .map(|o| match o {
                QueryOutcome::Series(s) => s.len(),
                QueryOutcome::Error(_) => 0,
            })
            .sum::<usize>(),
        cluster.nodes[second_leader].id,
        failover_done.duration_since(started),
        scraped_at.duration_since(failover_done),
        started.elapsed()
    );
}

/// Writes the overview's panels with each query's `query_range` result (1 s steps over the
/// test's run) for `dashboards/tools/render_page.py`.
async fn write_render_data(
    path: &Path,
    prometheus: &PrometheusServer,
    boards: &[(String, Value)],
    instances: &[String],
    start: f64,
    failover: f64,
) {
    let end = now_ms() as f64 / 1000.0;
    let board = &boards
        .iter()
        .find(|(name, _)| name == "statestore-overview.json")
        .expect("overview dashboard")
        .1;
    let range = format!("{}s", (end - start).ceil() as u64);
    let mut out = Vec::new();
    for panel in panels(board) {
        if panel["type"] == "row" {
            continue;
        }
        let mut targets = Vec::new();
        for target in panel["targets"].as_array().into_iter().flatten() {
            let raw = target["expr"].as_str().unwrap_or_default();
            let expr = substitute(&raw.replace("$__range", &range), instances);
            let result = prometheus
                .query_range(&expr, start, end, 1.0)
                .await
                .unwrap_or_else(|| panic!("query_range {expr}"));
            targets.push(serde_json::json!({"legend": target["legendFormat"], "result": result}));
        }
        let defaults = &panel["fieldConfig"]["defaults"];
        out.push(serde_json::json!({
            "title": panel["title"], "type": panel["type"], "gridPos": panel["gridPos"],
            "unit": defaults["unit"], "thresholds": defaults["thresholds"],
            "mappings": defaults["mappings"], "custom": defaults["custom"], "targets": targets,
        }));
    }
    let data = serde_json::json!({
        "title": board["title"],
        "caption": "3 nodes + Mosquitto under load, leader SIGKILLed at the dashed line and restarted; \
                    real Prometheus data, drawn with uPlot (not Grafana's renderer)",
        "start": start.floor(), "end": end.floor(), "step": 1, "marks": [failover],
        "panels": out,
    });
    std::fs::write(path, serde_json::to_string(&data).expect("json")).expect("write render data");
}
