//! `statestore` processes: start, stop (SIGTERM), kill (SIGKILL), pause (SIGSTOP/SIGCONT),
//! restart on the same data directory, and read their admin API (plain HTTP, or HTTPS with
//! a bearer token: [`AdminAccess`]). A node's log is printed when a test panics while the node
//! is alive, so CI failures explain themselves.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::broker::Broker;
use crate::free_port;
use crate::powercut::{Cut, PowerCutFs};

/// The `statestore` binary: `$STATESTORE_BIN`, or the one next to the test executable's
/// target directory (built by `cargo build --bin statestore`).
pub fn statestore_bin() -> PathBuf {
    if let Ok(path) = std::env::var("STATESTORE_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile> directory");
    let bin = profile_dir.join("statestore");
    assert!(
        bin.exists(),
        "{} not found: run `cargo build --bin statestore` first (scripts/test.sh does)",
        bin.display()
    );
    bin
}

/// One node process.
pub struct StatestoreNode {
    /// Raft node id.
    pub id: u64,
    /// HTTP port (metrics, health, admin).
    pub http_port: u16,
    /// Raft port.
    pub raft_port: u16,
    /// Data directory (kept across restarts).
    pub data_dir: PathBuf,
    /// Address of the HTTP listener (127.0.0.1, or the node's namespace address).
    pub http_host: String,
    /// How the test reaches the HTTP listener (default: plain HTTP, no token).
    pub admin: AdminAccess,
    netns: Option<String>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    mounts: Vec<PathBuf>,
    powercut: Option<PowerCutFs>,
    child: Option<Child>,
    log: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

/// What to start.
#[derive(Debug, Clone, Default)]
pub struct NodeSpec {
    /// Node id (default 1).
    pub id: u64,
    /// Initial members `(id, raft address)`; empty: single node.
    pub peers: Vec<(u64, String)>,
    /// Raft port to use (default: a fresh one).
    pub raft_port: Option<u16>,
    /// More flags for `statestore run`.
    pub extra_args: Vec<String>,
    /// `--broker` (default: the broker's plain listener, or the placement's).
    pub broker: Option<String>,
    /// Run inside a network namespace (default: the test's own, on 127.0.0.1).
    pub placement: Option<Placement>,
}

/// How a test talks to a node's HTTP listener: over HTTPS trusting `ca` (then through `curl`),
/// and with `token` as the admin bearer token.
#[derive(Debug, Clone, Default)]
pub struct AdminAccess {
    /// CA certificate (PEM) of the listener's HTTPS certificate; `None`: plain HTTP.
    pub ca: Option<PathBuf>,
    /// Sent as `Authorization: Bearer <token>`.
    pub token: Option<String>,
}

/// One HTTP request of `method` to `url` (body: JSON): status and body, `None` when no answer
/// came within `timeout`. HTTPS goes through `curl --cacert` (the harness's reqwest has no TLS).
pub async fn http_request(
    url: &str,
    access: &AdminAccess,
    method: &str,
    body: Option<&serde_json::Value>,
    timeout: Duration,
) -> Option<(u16, String)> {
    if let Some(ca) = &access.ca {
        let mut curl = tokio::process::Command::new("curl");
        curl.args(["-sS", "--noproxy", "*", "-X", method, "--cacert"])
            .arg(ca)
            .args(["--max-time", &format!("{:.3}", timeout.as_secs_f64())])
            .args(["-o", "-", "-w", "\n%{http_code}"]);
        if let Some(token) = &access.token {
            curl.args(["-H", &format!("Authorization: Bearer {token}")]);
        }
        if let Some(body) = body {
            curl.args(["-H", "content-type: application/json", "--data-binary"])
                .arg(body.to_string());
        }
        let output = curl.arg(url).output().await.ok()?;
        if !output.status.success() {
            return None;
        }
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n')?;
        return Some((code.trim().parse().ok()?, body.to_owned()));
    }
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .no_proxy()
        .build()
        .ok()?;
    let method = reqwest::Method::from_bytes(method.as_bytes()).ok()?;
    let mut request = client.request(method, url);
    if let Some(token) = &access.token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.ok()?))
}

/// Where a node runs when it has its own network namespace.
#[derive(Debug, Clone)]
pub struct Placement {
    /// The namespace (`ip netns exec <netns>`).
    pub netns: String,
    /// Address for the HTTP listener (reachable from the test).
    pub http_ip: String,
    /// Address for the Raft listener.
    pub raft_ip: String,
    /// Broker address as seen from the namespace.
    pub broker: String,
}

impl StatestoreNode {
    /// Starts a node against `broker` in a fresh temporary data directory.
    pub fn start(broker: &Broker, spec: NodeSpec) -> StatestoreNode {
        let dir = tempfile::tempdir().expect("temp dir");
        let data_dir = dir.path().join("data");
        let mut node = StatestoreNode::prepare(broker, spec, data_dir, dir.path().join("node.log"));
        node._dir = Some(dir);
        node.spawn();
        node
    }

    fn prepare(broker: &Broker, spec: NodeSpec, data_dir: PathBuf, log: PathBuf) -> StatestoreNode {
        let id = if spec.id == 0 { 1 } else { spec.id };
        let http_port = free_port();
        let raft_port = spec.raft_port.unwrap_or_else(free_port);
        let (http_host, raft_host, default_broker) = match &spec.placement {
            Some(p) => (p.http_ip.clone(), p.raft_ip.clone(), p.broker.clone()),
            None => (
                "127.0.0.1".to_owned(),
                "127.0.0.1".to_owned(),
                broker.address(),
            ),
        };
        let broker_address = spec.broker.unwrap_or(default_broker);
        let mut args = vec![
            "run".to_owned(),
            "--id".to_owned(),
            id.to_string(),
            "--data-dir".to_owned(),
            data_dir.display().to_string(),
            "--broker".to_owned(),
            broker_address,
            "--http".to_owned(),
            format!("{http_host}:{http_port}"),
            "--raft".to_owned(),
            format!("{raft_host}:{raft_port}"),
            "--log".to_owned(),
            "info,openraft=warn,raft_log=warn,chunked_wal=warn,lsm_tree=warn".to_owned(),
        ];
        for (peer, address) in &spec.peers {
            args.push("--peer".to_owned());
            args.push(format!("{peer}={address}"));
        }
        // A node in its own network namespace serves HTTP on its link's address; the tests
        // that place nodes so use no admin token, which off loopback must be said explicitly.
        let loopback = http_host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
        if !loopback {
            args.push("--allow-insecure-http".to_owned());
        }
        args.extend(spec.extra_args);
        StatestoreNode {
            id,
            http_port,
            raft_port,
            data_dir,
            http_host,
            admin: AdminAccess::default(),
            netns: spec.placement.map(|p| p.netns),
            args,
            env: Vec::new(),
            mounts: Vec::new(),
            powercut: None,
            child: None,
            log,
            _dir: None,
        }
    }

    /// Starts the process (again) with the same arguments and data directory.
    pub fn spawn(&mut self) {
        assert!(self.child.is_none(), "node {} already running", self.id);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("node log");
        // `ip netns exec` enters the namespace and execs the node: the child is the node.
        let mut command = match &self.netns {
            Some(netns) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", netns]).arg(statestore_bin());
                command
            }
            None => Command::new(statestore_bin()),
        };
        let child = command
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start statestore");
        self.child = Some(child);
    }

    /// Environment variables for the next [`StatestoreNode::spawn`] (replacing earlier ones),
    /// e.g. a skewed clock (see [`crate::process_faults::skewed_clock_env`]).
    pub fn set_env(&mut self, env: Vec<(String, String)>) {
        self.env = env;
    }

    /// Kills the node, moves its data directory onto a fresh tmpfs of `size_mib` MiB and starts
    /// it again on it: a small disk that a test can fill
    /// ([`crate::process_faults::DiskFill`]). Needs root; unmounted when the node is dropped.
    pub fn put_data_on_tmpfs(&mut self, size_mib: u64) {
        self.kill();
        let old = self.data_dir.with_extension("before-tmpfs");
        if self.data_dir.exists() {
            std::fs::rename(&self.data_dir, &old).expect("move the data directory aside");
        } else {
            std::fs::create_dir(&old).expect("an empty data directory");
        }
        std::fs::create_dir(&self.data_dir).expect("mount point");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(&self.data_dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            mounted,
            "mount tmpfs on {} (root?)",
            self.data_dir.display()
        );
        self.mounts.push(self.data_dir.clone());
        let copied = Command::new("cp")
            .arg("-a")
            .arg(old.join("."))
            .arg(&self.data_dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(copied, "copy the data directory onto the tmpfs");
        std::fs::remove_dir_all(&old).expect("remove the old data directory");
        self.spawn();
    }

    /// Kills the node, moves its data directory onto a fresh power-cut filesystem
    /// ([`PowerCutFs`]; its durable state under a sibling `*.durable` directory) and starts it
    /// again on it. What the node had written so far becomes durable state. Needs root and
    /// fuse3; unmounted when the node is dropped.
    pub fn put_data_on_powercut_fs(&mut self) {
        self.kill();
        let backing = self.data_dir.with_extension("durable");
        if self.data_dir.exists() {
            std::fs::rename(&self.data_dir, &backing).expect("move the data directory aside");
        } else {
            std::fs::create_dir(&backing).expect("an empty durable directory");
        }
        std::fs::create_dir(&self.data_dir).expect("mount point");
        self.powercut = Some(PowerCutFs::mount(&backing, &self.data_dir));
        self.spawn();
    }

    /// Kills the node for good and unmounts its power-cut filesystem (its FUSE daemon exits):
    /// for a node removed from the cluster that will not run again, so a long run does not keep
    /// a daemon per removed node. The durable state stays in the `*.durable` directory; the
    /// data directory is left an empty mount point.
    pub fn retire_powercut_fs(&mut self) {
        self.kill();
        self.powercut = None;
    }

    /// Cuts this node's power: SIGKILL, then its power-cut filesystem drops what was not
    /// synced (see [`Cut`]). The node stays down until [`StatestoreNode::spawn`].
    pub fn cut_power(&mut self, cut: Cut) {
        self.kill();
        self.powercut
            .as_ref()
            .expect("node data on a power-cut filesystem (put_data_on_powercut_fs)")
            .cut(cut);
    }

    /// The status text of this node's power-cut filesystem.
    pub fn powercut_status(&self) -> String {
        self.powercut
            .as_ref()
            .map(PowerCutFs::status)
            .unwrap_or_default()
    }

    /// Waits up to `timeout` for the process to exit by itself; its exit status, or `None`
    /// if it still runs (or was not running).
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let status = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = status {
                self.child = None;
                return Some(status);
            }
            if self.child.is_none() || Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The process id (the node must be running).
    pub fn pid(&self) -> i32 {
        self.child
            .as_ref()
            .map(|c| c.id() as i32)
            .expect("node running")
    }

    fn signal(&self, signal: &str) {
        assert!(
            send_signal(self.pid(), signal),
            "kill -{signal} {} failed",
            self.pid()
        );
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then wait up to `timeout` for a clean exit; returns the exit status.
    pub fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let pid = child.id() as i32;
        send_signal(pid, "TERM");
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGSTOP (the process freezes; sockets stay open).
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal("CONT");
    }

    /// `http://<http host>:<http port>` (`https://` with [`AdminAccess::ca`]).
    pub fn http_url(&self) -> String {
        let scheme = if self.admin.ca.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}:{}", self.http_host, self.http_port)
    }

    /// HTTP GET of `path` on the node's admin listener: status and body.
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        self.request("GET", path, None, Duration::from_secs(2))
            .await
    }

    /// A request to the node's admin listener, with its [`AdminAccess`].
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
        timeout: Duration,
    ) -> Option<(u16, String)> {
        let url = format!("{}{}", self.http_url(), path);
        http_request(&url, &self.admin, method, body, timeout).await
    }

    /// True if `/readyz` answers 200.
    pub async fn is_ready(&self) -> bool {
        matches!(self.get("/readyz").await, Some((200, _)))
    }

    /// Waits until `/readyz` answers 200; panics with the node log after `timeout`.
    pub async fn wait_ready(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.is_ready().await {
            assert!(
                Instant::now() < deadline,
                "node {} not ready after {timeout:?}; log:\n{}",
                self.id,
                self.log_tail(60)
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// `/admin/status` as JSON.
    pub async fn status(&self) -> Option<serde_json::Value> {
        let (code, body) = self.get("/admin/status").await?;
        (code == 200)
            .then(|| serde_json::from_str(&body).ok())
            .flatten()
    }

    /// `/admin/digest` as JSON.
    pub async fn digest(&self) -> Option<serde_json::Value> {
        // Hashing reads every record: tens of MB take a while in a debug build.
        let (code, body) = self
            .request("GET", "/admin/digest", None, Duration::from_secs(20))
            .await?;
        (code == 200)
            .then(|| serde_json::from_str(&body).ok())
            .flatten()
    }

    /// `/metrics` text.
    pub async fn metrics(&self) -> Option<String> {
        let (code, body) = self.get("/metrics").await?;
        (code == 200).then_some(body)
    }

    /// The value of an unlabelled (or fully labelled, as written) metric line.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let text = self.metrics().await?;
        text.lines().find_map(|line| {
            line.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
    }

    /// The last `lines` lines of the node's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The whole log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// For a failed test: prints the log's tail and every panic the log holds (a backtrace
    /// pushes the message itself out of the tail), and copies the whole log into
    /// `STATESTORE_TEST_LOG_DIR` when that is set (the temporary directory goes with the test),
    /// named after the test and the node.
    fn report_failure(&self) {
        let text = self.log();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(80)..].join("\n");
        eprintln!("---- node {} log (tail) ----\n{tail}\n----", self.id);
        for (at, line) in lines.iter().enumerate() {
            if line.contains("panicked at") {
                let message = lines[at..lines.len().min(at + 3)].join("\n");
                eprintln!("---- node {} panicked ----\n{message}\n----", self.id);
            }
        }
        if let Some(dir) = std::env::var_os("STATESTORE_TEST_LOG_DIR") {
            let dir = Path::new(&dir);
            let test = std::thread::current()
                .name()
                .unwrap_or("test")
                .replace("::", "-");
            let kept = dir.join(format!("{test}-node-{}.log", self.id));
            let copied = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&kept, &text));
            match copied {
                Ok(()) => eprintln!("---- node {} log kept in {} ----", self.id, kept.display()),
                Err(e) => eprintln!(
                    "---- node {} log not kept in {}: {e} ----",
                    self.id,
                    dir.display()
                ),
            }
        }
    }
}

/// Sends `signal` (e.g. `TERM`, `STOP`) with kill(1).
/// `kill -s SIGNAL pid`; true if the signal was delivered.
pub fn send_signal(pid: i32, signal: &str) -> bool {
    Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Drop for StatestoreNode {
    fn drop(&mut self) {
        if std::thread::panicking() && self.child.is_some() {
            self.report_failure();
        }
        if let Some(child) = &self.child {
            send_signal(child.id() as i32, "CONT");
        }
        self.kill();
        for mount in self.mounts.drain(..) {
            let _ = Command::new("umount").arg("-l").arg(&mount).status();
        }
    }
}
