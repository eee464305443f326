//! Every process the tool starts, and their cleanup: Mosquitto with the shipped settings, a
//! statestore cluster of 1..n nodes, a 3-member etcd cluster, each in a temporary directory,
//! each killed when its guard is dropped (normal return, error, panic or Ctrl-C cancelling
//! the command). Also the measurements of a process from outside: RSS and on-disk size.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::net::TcpStream;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::mqtt_load::Broker;

/// `n` distinct free loopback ports for listeners started later, chosen below the kernel's
/// ephemeral range like the tests' ports (see [`statestore_harness::free_port`]: a port from
/// that range can become the source port of a peer's connection before its listener binds it).
pub fn free_ports(n: usize) -> Vec<u16> {
    let mut ports = Vec::with_capacity(n);
    while ports.len() < n {
        // Distinct: on a host without room below its ephemeral range the harness falls back
        // to the kernel's choice, which can repeat a port it gave back.
        let port = statestore_harness::free_port();
        if !ports.contains(&port) {
            ports.push(port);
        }
    }
    ports
}

/// A temporary directory, removed on drop unless kept (`--keep-temp`).
pub struct WorkDir {
    dir: tempfile::TempDir,
}

impl WorkDir {
    /// A fresh `statestore-bench-<label>-*` directory.
    pub fn new(label: &str, keep: bool) -> anyhow::Result<WorkDir> {
        let mut dir = tempfile::Builder::new()
            .prefix(&format!("statestore-bench-{label}-"))
            .tempdir()
            .context("create a temporary directory")?;
        dir.disable_cleanup(keep);
        Ok(WorkDir { dir })
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A child process, killed (SIGKILL) and reaped on drop.
pub struct ProcessGuard {
    name: String,
    child: Child,
    log: PathBuf,
}

impl ProcessGuard {
    /// Spawns `command` with stdout discarded and stderr appended to `log`.
    pub fn spawn(name: &str, command: &mut Command, log: &Path) -> anyhow::Result<ProcessGuard> {
        let stderr = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("open {}", log.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("start {name} ({:?})", command.get_program()))?;
        Ok(ProcessGuard {
            name: name.to_owned(),
            child,
            log: log.to_owned(),
        })
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// An error with the end of its log if it has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => bail!(
                "{} exited ({status}); end of its log:\n{}",
                self.name,
                log_tail(&self.log, 30)
            ),
            Err(err) => bail!("{}: {err}", self.name),
        }
    }

    /// SIGTERM, then SIGKILL after `grace`; returns how long it took to exit.
    pub fn terminate(&mut self, grace: Duration) -> Duration {
        let start = Instant::now();
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .stderr(Stdio::null())
            .status();
        while start.elapsed() < grace {
            if let Ok(Some(_)) = self.child.try_wait() {
                return start.elapsed();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        start.elapsed()
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Resident set size, KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        rss_kib(self.pid())
    }
}

impl Drop for ProcessGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `lines` lines of a log file.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(file) = File::open(path) else {
        return format!("(no log at {})", path.display());
    };
    let all: Vec<String> = BufReader::new(file).lines().map_while(Result::ok).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Lines of a log file that contain any of `needles`: how many, and up to `samples`
/// distinct examples (ANSI colours and the leading timestamp removed, cut to 200 chars).
pub fn log_findings(path: &Path, needles: &[&str], samples: usize) -> (usize, Vec<String>) {
    log_findings_in(path, 0..u64::MAX, needles, samples)
}

/// As [`log_findings`], over the bytes `range` of the file only: offsets taken with
/// [`file_len`] at two moments delimit what was logged in between.
pub fn log_findings_in(
    path: &Path,
    range: Range<u64>,
    needles: &[&str],
    samples: usize,
) -> (usize, Vec<String>) {
    let Ok(mut file) = File::open(path) else {
        return (0, Vec::new());
    };
    if file.seek(SeekFrom::Start(range.start)).is_err() {
        return (0, Vec::new());
    }
    let reader = BufReader::new(file.take(range.end.saturating_sub(range.start)));
    let mut count = 0;
    let mut examples: Vec<String> = Vec::new();
    for line in reader.lines().map_while(Result::ok) {
        if !needles.iter().any(|n| line.contains(n)) {
            continue;
        }
        count += 1;
        let clean = clean_log_line(&line);
        let prefix: String = clean.chars().take(60).collect();
        if examples.len() < samples && !examples.iter().any(|e| e.starts_with(&prefix)) {
            examples.push(clean);
        }
    }
    (count, examples)
}

/// A log line without ANSI escapes and without its leading RFC 3339 timestamp.
fn clean_log_line(line: &str) -> String {
    let mut plain = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // skip `ESC [ ... m`
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    let trimmed = plain.trim();
    let without_time = match trimmed.split_once(char::is_whitespace) {
        Some((first, rest)) if first.len() >= 19 && first.as_bytes()[4] == b'-' => {
            rest.trim_start()
        }
        _ => trimmed,
    };
    without_time.chars().take(200).collect()
}

/// The current length of a file in bytes (0 if missing): where lines written from now on start.
pub fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// `VmRSS` of a process from `/proc/<pid>/status`, KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_vm_rss(&status)
}

fn parse_vm_rss(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

/// Disk space the files under `path` occupy: their allocated blocks, not their lengths (as
/// `du` counts files; directories' own blocks are left out). 0 if missing. A file sized ahead of its writes without allocating (fjall creates
/// each journal file at 64 MiB this way) occupies only what was written into it.
pub fn dir_size(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.blocks() * 512;
    }
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .map_while(Result::ok)
                .map(|entry| dir_size(&entry.path()))
                .sum()
        })
        .unwrap_or(0)
}

/// What one entry of a data directory holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct DiskPart {
    /// Allocated bytes, as [`dir_size`] counts them.
    pub bytes: u64,
    /// Files under it (1 for a file).
    pub files: u64,
}

/// [`DiskPart`] of each entry of `dir` (empty if missing).
pub fn dir_parts(dir: &Path) -> BTreeMap<String, DiskPart> {
    fn files(path: &Path) -> u64 {
        match std::fs::read_dir(path) {
            Ok(entries) => entries
                .map_while(Result::ok)
                .map(|e| files(&e.path()))
                .sum(),
            Err(_) => 1,
        }
    }
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map_while(Result::ok)
                .map(|entry| {
                    let path = entry.path();
                    let part = DiskPart {
                        bytes: dir_size(&path),
                        files: files(&path),
                    };
                    (entry.file_name().to_string_lossy().into_owned(), part)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until something accepts TCP connections on 127.0.0.1:`port`.
fn wait_listening(port: u16, within: Duration, guard: &mut ProcessGuard) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        guard.check_alive()?;
        if Instant::now() > deadline {
            bail!(
                "{} not listening on {port} within {within:?}; end of its log:\n{}",
                guard.name,
                log_tail(&guard.log, 30)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// `name` on PATH, else `fallback` if it exists.
pub fn find_program(name: &str, fallback: &str) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    on_path.or_else(|| {
        let fallback = PathBuf::from(fallback);
        fallback.is_file().then_some(fallback)
    })
}

/// The first line `program args` prints (stdout or stderr), for the report.
pub fn program_version(program: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let text = if output.stdout.is_empty() {
        output.stderr
    } else {
        output.stdout
    };
    String::from_utf8_lossy(&text)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_owned)
}

/// A Mosquitto broker configured as shipped, on a free loopback port.
pub struct Mosquitto {
    /// Its port on 127.0.0.1.
    pub port: u16,
    guard: ProcessGuard,
}

impl Mosquitto {
    /// Writes `mosquitto.conf` into `dir` and starts the broker.
    pub fn start(bin: &Path, dir: &Path) -> anyhow::Result<Mosquitto> {
        let port = free_ports(1)[0];
        let config = dir.join("mosquitto.conf");
        std::fs::write(&config, mosquitto_config(port))
            .with_context(|| format!("write {}", config.display()))?;
        let mut guard = ProcessGuard::spawn(
            "mosquitto",
            Command::new(bin).arg("-c").arg(&config),
            &dir.join("mosquitto.log"),
        )?;
        wait_listening(port, Duration::from_secs(10), &mut guard)?;
        Ok(Mosquitto { port, guard })
    }

    /// Where clients connect.
    pub fn broker(&self) -> Broker {
        Broker::loopback(self.port)
    }

    /// Its RSS, KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        self.guard.rss_kib()
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.guard.pid()
    }
}

/// The broker configuration the README asks for (Nagle off, raised in-flight and queue limits).
pub fn mosquitto_config(port: u16) -> String {
    format!(
        "listener {port} 127.0.0.1\nallow_anonymous true\nset_tcp_nodelay true\n\
         max_inflight_messages 1000\nmax_queued_messages 100000\npersistence false\n"
    )
}

/// One statestore node process (restartable on the same data directory).
pub struct StatestoreNode {
    /// Raft id.
    pub id: u64,
    /// HTTP port (health, metrics, admin).
    pub http_port: u16,
    /// Data directory.
    pub data_dir: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    process: Option<ProcessGuard>,
}

/// A statestore cluster sharing one broker.
pub struct StatestoreCluster {
    bin: PathBuf,
    /// The nodes, in id order.
    pub nodes: Vec<StatestoreNode>,
    http: reqwest::Client,
}

/// What `/admin/status` says, as far as the tool reads it.
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize)]
pub struct NodeStatus {
    /// Raft role.
    #[serde(default)]
    pub state: String,
    /// Holds the request subscription.
    #[serde(default)]
    pub request_subscription_active: bool,
    /// Keys stored.
    #[serde(default)]
    pub keys: u64,
    /// Last applied log index.
    #[serde(default)]
    pub applied_index: Option<u64>,
    /// Last log index.
    #[serde(default)]
    pub last_log_index: Option<u64>,
    /// Last log index covered by the node's snapshot (none before its first snapshot).
    #[serde(default)]
    pub snapshot_index: Option<u64>,
    /// Last purged log index.
    #[serde(default)]
    pub purged_index: Option<u64>,
}

impl StatestoreCluster {
    /// Starts `nodes` nodes (ids 1..=n) against `broker`, data under `dir`; `extra` is added
    /// to every node's command line.
    pub fn start(
        bin: &Path,
        broker: &Broker,
        nodes: usize,
        dir: &Path,
        extra: &[String],
    ) -> anyhow::Result<StatestoreCluster> {
        let ports = free_ports(nodes * 2);
        let peers: Vec<String> = (0..nodes)
            .map(|i| format!("{}=127.0.0.1:{}", i + 1, ports[nodes + i]))
            .collect();
        let mut cluster = StatestoreCluster {
            bin: bin.to_owned(),
            nodes: Vec::with_capacity(nodes),
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(2))
                .build()
                .context("HTTP client")?,
        };
        for i in 0..nodes {
            let id = i as u64 + 1;
            let data_dir = dir.join(format!("node{id}"));
            let mut args = vec![
                "run".to_owned(),
                "--id".to_owned(),
                id.to_string(),
                "--data-dir".to_owned(),
                data_dir.display().to_string(),
                "--broker".to_owned(),
                format!("{}:{}", broker.host, broker.port),
                "--http".to_owned(),
                format!("127.0.0.1:{}", ports[i]),
                "--raft".to_owned(),
                format!("127.0.0.1:{}", ports[nodes + i]),
            ];
            if nodes > 1 {
                for peer in &peers {
                    args.push("--peer".to_owned());
                    args.push(peer.clone());
                }
            }
            args.extend(extra.iter().cloned());
            cluster.nodes.push(StatestoreNode {
                id,
                http_port: ports[i],
                data_dir,
                args,
                log: dir.join(format!("node{id}.log")),
                process: None,
            });
        }
        cluster.spawn_all()?;
        Ok(cluster)
    }

    /// Starts every node that is not running (again, on its data directory).
    pub fn spawn_all(&mut self) -> anyhow::Result<()> {
        for node in &mut self.nodes {
            if node.process.is_none() {
                let mut command = Command::new(&self.bin);
                command.args(&node.args).env_remove("RUST_LOG");
                node.process = Some(ProcessGuard::spawn(
                    &format!("statestore node {}", node.id),
                    &mut command,
                    &node.log,
                )?);
            }
        }
        Ok(())
    }

    /// Replaces node index `i` as an operator replaces a member that lost its disk: stops it
    /// (SIGTERM), removes it from the cluster through node index `via`, deletes its data
    /// directory, starts it empty with `--join` and adds it again. The add returns once the
    /// leader has brought the new learner close (with a snapshot) and made it a voter; `within`
    /// bounds it. (Starting a wiped member under its old id without the removal would leave it
    /// behind forever: the leader remembers how far that id's log reached and Raft does not let
    /// a member's log go backwards.)
    pub async fn replace_wiped(
        &mut self,
        i: usize,
        via: usize,
        grace: Duration,
        within: Duration,
    ) -> anyhow::Result<()> {
        let node = &mut self.nodes[i];
        if let Some(mut process) = node.process.take() {
            process.terminate(grace);
        }
        let id = node.id;
        let raft = node
            .args
            .iter()
            .position(|a| a == "--raft")
            .and_then(|at| node.args.get(at + 1))
            .cloned()
            .context("the node's --raft address")?;
        self.change_members(
            via,
            &serde_json::json!({"action": "remove", "id": id}),
            within,
        )
        .await
        .with_context(|| format!("remove node {id}"))?;
        let node = &mut self.nodes[i];
        std::fs::remove_dir_all(&node.data_dir)
            .with_context(|| format!("remove {}", node.data_dir.display()))?;
        if !node.args.iter().any(|a| a == "--join") {
            node.args.push("--join".to_owned());
        }
        self.spawn_all()?;
        self.change_members(
            via,
            &serde_json::json!({"action": "add", "id": id, "raft": raft}),
            within,
        )
        .await
        .with_context(|| format!("add node {id} again"))
    }

    /// `POST /admin/members` with `change` to node index `via`, answered within `within`.
    async fn change_members(
        &self,
        via: usize,
        change: &serde_json::Value,
        within: Duration,
    ) -> anyhow::Result<()> {
        let url = format!(
            "http://127.0.0.1:{}/admin/members",
            self.nodes[via].http_port
        );
        let response = self
            .http
            .post(&url)
            .json(change)
            .timeout(within)
            .send()
            .await
            .with_context(|| format!("POST {url}"))?;
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        anyhow::ensure!(status.is_success(), "{url}: {status}: {}", body.trim());
        Ok(())
    }

    /// SIGKILL to node index `i` (no clean stop: its next start keeps or rebuilds its state),
    /// reaped.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut process) = self.nodes[i].process.take() {
            process.kill();
        }
    }

    /// SIGTERM to every node, then waits (SIGKILL after `grace`); the longest stop time.
    pub fn stop_all(&mut self, grace: Duration) -> Duration {
        let mut longest = Duration::ZERO;
        for node in &mut self.nodes {
            if let Some(mut process) = node.process.take() {
                longest = longest.max(process.terminate(grace));
            }
        }
        longest
    }

    /// `/admin/status` of node index `i`.
    pub async fn status(&self, i: usize) -> anyhow::Result<NodeStatus> {
        let url = format!("http://127.0.0.1:{}/admin/status", self.nodes[i].http_port);
        let body = self.http.get(&url).send().await?.bytes().await?;
        serde_json::from_slice(&body).with_context(|| format!("parse {url}"))
    }

    /// `/metrics` (Prometheus text) of node index `i`.
    pub async fn metrics_text(&self, i: usize) -> anyhow::Result<String> {
        let url = format!("http://127.0.0.1:{}/metrics", self.nodes[i].http_port);
        Ok(self.http.get(&url).send().await?.text().await?)
    }

    async fn ready(&self, i: usize) -> bool {
        let url = format!("http://127.0.0.1:{}/readyz", self.nodes[i].http_port);
        matches!(self.http.get(&url).send().await, Ok(r) if r.status().is_success())
    }

    /// Waits until every node's `/readyz` is 200 and exactly one node holds the request
    /// subscription; returns how long that took.
    pub async fn wait_ready(&mut self, within: Duration) -> anyhow::Result<Duration> {
        let start = Instant::now();
        loop {
            for node in &mut self.nodes {
                if let Some(process) = node.process.as_mut() {
                    process.check_alive()?;
                }
            }
            let mut all_ready = true;
            let mut subscribed = 0;
            for i in 0..self.nodes.len() {
                all_ready &= self.ready(i).await;
                if let Ok(status) = self.status(i).await {
                    subscribed += usize::from(status.request_subscription_active);
                }
            }
            if all_ready && subscribed == 1 {
                return Ok(start.elapsed());
            }
            let last = format!(
                "all /readyz 200: {all_ready}; nodes holding the subscription: {subscribed}"
            );
            if start.elapsed() > within {
                let logs: Vec<String> = self
                    .nodes
                    .iter()
                    .map(|n| format!("--- node {} ---\n{}", n.id, log_tail(&n.log, 15)))
                    .collect();
                bail!(
                    "statestore not ready within {within:?} ({last}); logs:\n{}",
                    logs.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// RSS of every node, KiB (None when not running).
    pub fn rss_kib(&self) -> Vec<Option<u64>> {
        self.nodes
            .iter()
            .map(|n| n.process.as_ref().and_then(ProcessGuard::rss_kib))
            .collect()
    }

    /// Pid of every node (None when not running).
    pub fn pids(&self) -> Vec<Option<u32>> {
        self.nodes
            .iter()
            .map(|n| n.process.as_ref().map(ProcessGuard::pid))
            .collect()
    }

    /// On-disk size of every node's data directory, bytes.
    pub fn disk_bytes(&self) -> Vec<u64> {
        self.nodes.iter().map(|n| dir_size(&n.data_dir)).collect()
    }

    /// On-disk size of each entry of every node's data directory (`state`, `snapshots`,
    /// `raft-log`, ...), bytes, with the number of files under it.
    pub fn disk_parts(&self) -> Vec<BTreeMap<String, DiskPart>> {
        self.nodes.iter().map(|n| dir_parts(&n.data_dir)).collect()
    }

    /// An error with the end of its log if node index `i` has exited.
    pub fn check_alive(&mut self, i: usize) -> anyhow::Result<()> {
        match self.nodes[i].process.as_mut() {
            Some(process) => process.check_alive(),
            None => Ok(()),
        }
    }

    /// The log of node index `i`.
    pub fn log_path(&self, i: usize) -> &Path {
        &self.nodes[i].log
    }
}

/// A 3-member (or n-member) etcd cluster on loopback.
pub struct EtcdCluster {
    /// Client URLs, `http://127.0.0.1:P`.
    pub endpoints: Vec<String>,
    members: Vec<ProcessGuard>,
}

impl EtcdCluster {
    /// Starts `members` members with data under `dir`.
    pub fn start(bin: &Path, dir: &Path, members: usize) -> anyhow::Result<EtcdCluster> {
        let ports = free_ports(members * 2);
        let client_url = |i: usize| format!("http://127.0.0.1:{}", ports[i]);
        let peer_url = |i: usize| format!("http://127.0.0.1:{}", ports[members + i]);
        let initial_cluster = (0..members)
            .map(|i| format!("m{}={}", i + 1, peer_url(i)))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = EtcdCluster {
            endpoints: (0..members).map(client_url).collect(),
            members: Vec::with_capacity(members),
        };
        for i in 0..members {
            let name = format!("m{}", i + 1);
            let mut command = Command::new(bin);
            command
                .arg("--name")
                .arg(&name)
                .arg("--data-dir")
                .arg(dir.join(&name))
                .arg("--listen-client-urls")
                .arg(client_url(i))
                .arg("--advertise-client-urls")
                .arg(client_url(i))
                .arg("--listen-peer-urls")
                .arg(peer_url(i))
                .arg("--initial-advertise-peer-urls")
                .arg(peer_url(i))
                .arg("--initial-cluster")
                .arg(&initial_cluster)
                .arg("--initial-cluster-state")
                .arg("new")
                .arg("--initial-cluster-token")
                .arg("bench");
            cluster.members.push(ProcessGuard::spawn(
                &format!("etcd {name}"),
                &mut command,
                &dir.join(format!("{name}.log")),
            )?);
        }
        Ok(cluster)
    }

    /// Fails if a member has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        self.members
            .iter_mut()
            .try_for_each(ProcessGuard::check_alive)
    }

    /// RSS of every member, KiB.
    pub fn rss_kib(&self) -> Vec<Option<u64>> {
        self.members.iter().map(ProcessGuard::rss_kib).collect()
    }

    /// Pid of every member.
    pub fn pids(&self) -> Vec<u32> {
        self.members.iter().map(ProcessGuard::pid).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct_and_below_the_ephemeral_range() {
        let ephemeral_low: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|range| range.split_whitespace().next()?.parse().ok())
            .unwrap_or(32_768);
        let ports = free_ports(12);
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
        // The harness uses 10,000 up to the range when there are at least 1,000 ports there.
        if ephemeral_low >= 11_000 {
            assert!(ports.iter().all(|&port| port < ephemeral_low), "{ports:?}");
        }
    }

    #[test]
    fn vm_rss_is_parsed() {
        let status = "Name:\tstatestore\nVmPeak:\t  99999 kB\nVmRSS:\t   12345 kB\nThreads:\t9\n";
        assert_eq!(parse_vm_rss(status), Some(12345));
        assert_eq!(parse_vm_rss("Name: x\n"), None);
        assert!(rss_kib(std::process::id()).is_some_and(|kib| kib > 0));
    }

    #[test]
    fn log_lines_are_found_and_cleaned() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let log = dir.path().join("node.log");
        std::fs::write(
            &log,
            "2026-11-22T03:09:38.272968Z \u{1b}[33m WARN\u{1b}[0m raft: a message will be ignored because vote changed: sent by T1-N1\n\
             2026-11-22T03:09:38.272969Z \u{1b}[33m WARN\u{1b}[0m raft: a message will be ignored because vote changed: sent by T1-N2\n\
             2026-11-22T03:09:38.3Z  INFO node: ready\n\
             2026-11-22T03:09:39.1Z ERROR node: disk full\n",
        )?;
        let (count, examples) = log_findings(&log, &["WARN", "ERROR"], 3);
        assert_eq!(count, 3);
        assert_eq!(
            examples,
            [
                "WARN raft: a message will be ignored because vote changed: sent by T1-N1",
                "ERROR node: disk full"
            ]
        );
        assert_eq!(log_findings(&dir.path().join("none"), &["WARN"], 3).0, 0);
        // only what was written after an offset
        let offset = file_len(&log);
        let mut file = OpenOptions::new().append(true).open(&log)?;
        std::io::Write::write_all(
            &mut file,
            b"2026-11-22T03:09:40.1Z  WARN raft: append entries timeout to node 2\n",
        )?;
        let end = file_len(&log);
        let (count, examples) = log_findings_in(&log, offset..u64::MAX, &["timeout", "ERROR"], 3);
        assert_eq!(count, 1);
        assert_eq!(examples, ["WARN raft: append entries timeout to node 2"]);
        assert_eq!(log_findings(&log, &["WARN", "ERROR"], 3).0, 4);
        assert_eq!(log_findings_in(&log, end..u64::MAX, &["WARN"], 3).0, 0);
        // up to an offset: the line written after it is not seen
        assert_eq!(log_findings_in(&log, 0..offset, &["WARN", "ERROR"], 3).0, 3);
        assert_eq!(log_findings_in(&log, 0..offset, &["timeout"], 3).0, 0);
        assert_eq!(clean_log_line("plain line"), "plain line");
        Ok(())
    }

    #[test]
    fn dir_size_sums_allocated_space_not_lengths() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("a"), vec![1u8; 100_000])?;
        std::fs::create_dir(dir.path().join("sub"))?;
        std::fs::write(dir.path().join("sub/b"), vec![1u8; 50_000])?;
        // 64 MiB long, nothing written: no blocks.
        std::fs::File::create(dir.path().join("sparse"))?.set_len(64 << 20)?;
        // Whole file-system blocks hold the written bytes (up to a block of slack per file; on
        // a file system that compresses, constant bytes would take less).
        let size = dir_size(dir.path());
        assert!((150_000..150_000 + 2 * 65_536).contains(&size), "{size}");
        assert_eq!(dir_size(&dir.path().join("missing")), 0);
        let parts = dir_parts(dir.path());
        assert_eq!(parts.keys().collect::<Vec<_>>(), ["a", "sparse", "sub"]);
        assert_eq!(parts["sparse"], DiskPart { bytes: 0, files: 1 });
        assert_eq!(parts["sub"].files, 1);
        assert!(parts["sub"].bytes >= 50_000, "{:?}", parts["sub"]);
        assert!(dir_parts(&dir.path().join("missing")).is_empty());
        Ok(())
    }

    #[test]
    fn ports_are_distinct() -> anyhow::Result<()> {
        let ports = free_ports(6);
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 6);
        Ok(())
    }

    #[test]
    fn mosquitto_config_has_the_shipped_settings() {
        let config = mosquitto_config(1884);
        for line in [
            "listener 1884 127.0.0.1",
            "allow_anonymous true",
            "set_tcp_nodelay true",
            "max_inflight_messages 1000",
            "max_queued_messages 100000",
            "persistence false",
        ] {
            assert!(config.lines().any(|l| l == line), "{line}");
        }
    }
}
