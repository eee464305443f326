//! A real Prometheus server (Debian's `/usr/bin/prometheus`, installed by
//! `scripts/prereqs.sh`) on a loopback port, scraping statestore nodes every second into a
//! temporary storage directory; killed when dropped. Used to evaluate the Grafana dashboards'
//! queries against live data.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::free_port;

/// Debian's Prometheus server binary.
pub const PROMETHEUS_BIN: &str = "/usr/bin/prometheus";

/// The scrape job name the dashboards' `job` variable finds and the alert rules match.
pub const JOB: &str = "statestore";

/// A running Prometheus; killed (and its storage removed) on drop.
pub struct PrometheusServer {
    /// `http://127.0.0.1:<port>`
    pub url: String,
    child: Option<Child>,
    log: PathBuf,
    http: reqwest::Client,
    dir: tempfile::TempDir,
}

/// Outcome of one instant query.
#[derive(Debug, Clone)]
pub enum QueryOutcome {
    /// The query ran; `(labels, value)` per series (NaN and ±Inf kept as such).
    Series(Vec<(serde_json::Map<String, serde_json::Value>, f64)>),
    /// Prometheus refused or failed it (`errorType: error`).
    Error(String),
}

impl PrometheusServer {
    /// Starts Prometheus scraping `targets` (`host:port`, path `/metrics`) every
    /// `scrape_interval` as job [`JOB`]. Panics with a message if the binary is missing.
    pub fn start(targets: &[String], scrape_interval: Duration) -> PrometheusServer {
        assert!(
            std::path::Path::new(PROMETHEUS_BIN).exists(),
            "{PROMETHEUS_BIN} not found: run scripts/prereqs.sh (installs Debian's prometheus \
             package and disables its daemon)"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let interval = format!("{}ms", scrape_interval.as_millis());
        let target_list = targets
            .iter()
            .map(|t| format!("'{t}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let config = format!(
            "global:\n  scrape_interval: {interval}\n  scrape_timeout: {interval}\n  \
             evaluation_interval: {interval}\nscrape_configs:\n  - job_name: {JOB}\n    \
             static_configs:\n      - targets: [{target_list}]\n"
        );
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).expect("write prometheus.yml");
        let log = dir.path().join("prometheus.log");
        let log_file = std::fs::File::create(&log).expect("prometheus log");
        let child = Command::new(PROMETHEUS_BIN)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("start prometheus");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .no_proxy()
            .build()
            .expect("http client");
        PrometheusServer {
            url: format!("http://127.0.0.1:{port}"),
            child: Some(child),
            log,
            http,
            dir,
        }
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The temporary directory holding config, storage and log.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Evaluates `expr` at the current time through `/api/v1/query`; `None` if Prometheus did
    /// not answer at all.
    pub async fn query(&self, expr: &str) -> Option<QueryOutcome> {
        let url = reqwest::Url::parse_with_params(
            &format!("{}/api/v1/query", self.url),
            [("query", expr)],
        )
        .ok()?;
        let response = self.http.get(url).send().await.ok()?;
        let body: serde_json::Value = response.json().await.ok()?;
        if body["status"] != "success" {
            return Some(QueryOutcome::Error(format!(
                "{}: {}",
                body["errorType"].as_str().unwrap_or("?"),
                body["error"].as_str().unwrap_or("?")
            )));
        }
        let data = &body["data"];
        let series = match data["resultType"].as_str() {
            Some("vector") => data["result"]
                .as_array()
                .map(|items| {
                    items
                        .iter()
                        .map(|item| {
                            let labels = item["metric"].as_object().cloned().unwrap_or_default();
                            (labels, sample_value(&item["value"]))
                        })
                        .collect()
                })
                .unwrap_or_default(),
            Some("scalar") => vec![(serde_json::Map::new(), sample_value(&data["result"]))],
            other => {
                return Some(QueryOutcome::Error(format!(
                    "unexpected result type {other:?}"
                )));
            }
        };
        Some(QueryOutcome::Series(series))
    }

    /// `query_range` from `start` to `end` (Unix seconds) every `step` seconds: the raw
    /// `data.result` array.
    pub async fn query_range(
        &self,
        expr: &str,
        start: f64,
        end: f64,
        step: f64,
    ) -> Option<serde_json::Value> {
        let url = reqwest::Url::parse_with_params(
            &format!("{}/api/v1/query_range", self.url),
            [
                ("query", expr.to_owned()),
                ("start", format!("{start:.3}")),
                ("end", format!("{end:.3}")),
                ("step", format!("{step}")),
            ],
        )
        .ok()?;
        let response = self.http.get(url).send().await.ok()?;
        let body: serde_json::Value = response.json().await.ok()?;
        (body["status"] == "success").then(|| body["data"]["result"].clone())
    }

    /// Waits until every one of `targets` was scraped successfully at least `scrapes` times
    /// since `since` (polling the query API); panics with the log on timeout.
    pub async fn wait_scraped_since(
        &self,
        targets: &[String],
        scrapes: u32,
        since: Instant,
        timeout: Duration,
    ) {
        let deadline = Instant::now() + timeout;
        let mut last = None;
        loop {
            let window = since.elapsed().as_millis().max(1);
            let expr = format!("sum_over_time(up{{job=\"{JOB}\"}}[{window}ms])");
            if let Some(QueryOutcome::Series(series)) = self.query(&expr).await {
                let done = targets.iter().all(|target| {
                    series.iter().any(|(labels, value)| {
                        labels.get("instance").and_then(|v| v.as_str()) == Some(target.as_str())
                            && *value >= f64::from(scrapes)
                    })
                });
                if done {
                    return;
                }
                last = Some(series);
            }
            assert!(
                Instant::now() < deadline,
                "Prometheus did not scrape {targets:?} {scrapes} times within {timeout:?}; \
                 last: {last:?}\nlog:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn sample_value(sample: &serde_json::Value) -> f64 {
    sample[1]
        .as_str()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(f64::NAN)
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
