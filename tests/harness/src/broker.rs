//! A Mosquitto broker per test, configured like the ones we ship (Nagle off, raised in-flight
//! limit, sessions persisted on a clean shutdown), listening on a fresh port.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::free_port;

/// A running Mosquitto; killed on drop.
pub struct Broker {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    _dir: tempfile::TempDir,
    log: PathBuf,
}

impl Broker {
    /// Starts Mosquitto on 127.0.0.1 and waits until it accepts connections.
    pub fn start() -> Broker {
        Broker::start_on("127.0.0.1")
    }

    /// Starts Mosquitto listening on `address` (`0.0.0.0`: every interface, so nodes in
    /// network namespaces reach it too) and waits until it runs. If another test took the port
    /// between [`free_port`] and Mosquitto's bind, Mosquitto exits: it is started again on a
    /// fresh port (connecting to the port would not tell, it may be the other test's listener).
    pub fn start_on(address: &str) -> Broker {
        Broker::start_with(address, "")
    }

    /// Like [`Broker::start_on`], with `extra` appended to its configuration (e.g. a second,
    /// TLS listener).
    pub fn start_with(address: &str, extra: &str) -> Broker {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("mosquitto.conf");
        let log = dir.path().join("mosquitto.log");
        for _ in 0..5 {
            let port = free_port();
            std::fs::write(
                &config,
                format!(
                    "listener {port} {address}\nallow_anonymous true\nset_tcp_nodelay true\n\
                     max_inflight_messages 1000\nmax_queued_messages 100000\n\
                     message_size_limit 0\npersistence true\npersistence_location {}/\n\
                     autosave_interval 0\nuser root\n{extra}",
                    dir.path().display()
                ),
            )
            .expect("write mosquitto.conf");
            let log_file = std::fs::File::create(&log).expect("log file");
            let mut child = spawn_mosquitto(&config, log_file);
            if wait_running(&mut child, &log, 0) {
                return Broker {
                    child,
                    port,
                    _dir: dir,
                    log,
                };
            }
        }
        panic!(
            "mosquitto did not start in 5 attempts: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// `127.0.0.1:<port>`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Mosquitto's log so far (connections, with the user name of each client).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops the broker (SIGKILL) to test reconnection.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGSTOP: the broker freezes with its sockets open, so no request reaches a node and no
    /// reply leaves one; Raft traffic (node to node, not through the broker) goes on. Lets a
    /// test compare replicas while its workloads keep running.
    pub fn pause(&self) {
        crate::node::send_signal(self.child.id() as i32, "STOP");
    }

    /// SIGCONT after [`Broker::pause`].
    pub fn resume(&self) {
        crate::node::send_signal(self.child.id() as i32, "CONT");
    }

    /// Starts it again on the same port after a SIGKILL: sessions and queued messages are
    /// gone.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn_again();
    }

    /// Stops it with SIGTERM (Mosquitto then saves its sessions, subscriptions and queued
    /// messages to its persistence file) and starts it again on the same port: a broker
    /// upgrade or rescheduling, which clients with persistent sessions survive.
    pub fn restart_gracefully(&mut self) {
        crate::node::send_signal(self.child.id() as i32, "TERM");
        let _ = self.child.wait();
        self.spawn_again();
    }

    fn spawn_again(&mut self) {
        let config = self._dir.path().join("mosquitto.conf");
        let runs_before = runs_logged(&self.log);
        let log_file = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.log)
            .expect("log file");
        self.child = spawn_mosquitto(&config, log_file);
        assert!(
            wait_running(&mut self.child, &self.log, runs_before),
            "mosquitto did not restart on port {}: {}",
            self.port,
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }
}

fn spawn_mosquitto(config: &Path, log: std::fs::File) -> Child {
    Command::new(mosquitto_bin())
        .arg("-c")
        .arg(config)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("mosquitto must be installed (apt-get install -y mosquitto)")
}

/// Times Mosquitto logged that it runs (its listeners are bound).
fn runs_logged(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .matches(" running")
        .count()
}

/// Waits until `log` shows one more run than `runs_before`: true; false if the process
/// exited first (a listener could not bind). Panics after 10 s.
fn wait_running(child: &mut Child, log: &Path, runs_before: usize) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if runs_logged(log) > runs_before {
            return true;
        }
        if matches!(child.try_wait(), Ok(Some(_))) {
            return false;
        }
        assert!(
            Instant::now() < deadline,
            "mosquitto did not start: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn mosquitto_bin() -> String {
    std::env::var("MOSQUITTO_BIN").unwrap_or_else(|_| {
        if std::path::Path::new("/usr/sbin/mosquitto").exists() {
            "/usr/sbin/mosquitto".into()
        } else {
            "mosquitto".into()
        }
    })
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}
