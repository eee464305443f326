//! A Mosquitto broker per test, configured like the ones we ship (Nagle off, raised in-flight
//! limit, sessions persisted on a clean shutdown), listening on a fresh port.

use std::path::PathBuf;
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
    /// network namespaces reach it too) and waits until it accepts connections on 127.0.0.1.
    pub fn start_on(address: &str) -> Broker {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let config = dir.path().join("mosquitto.conf");
        std::fs::write(
            &config,
            format!(
                "listener {port} {address}\nallow_anonymous true\nset_tcp_nodelay true\nmax_inflight_messages 1000\n\
                 max_queued_messages 100000\nmessage_size_limit 0\n\
                 persistence true\npersistence_location {}/\nautosave_interval 0\n\
                 user root\n",
                dir.path().display()
            ),
        )
        .expect("write mosquitto.conf");
        let log = dir.path().join("mosquitto.log");
        let log_file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(mosquitto_bin())
            .arg("-c")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("mosquitto must be installed (apt-get install -y mosquitto)");
        let broker = Broker {
            child,
            port,
            _dir: dir,
            log,
        };
        broker.wait_listening();
        broker
    }

    fn wait_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "mosquitto did not start: {}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `127.0.0.1:<port>`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Stops the broker (SIGKILL) to test reconnection.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
        let log_file = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.log)
            .expect("log file");
        self.child = Command::new(mosquitto_bin())
            .arg("-c")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("restart mosquitto");
        self.wait_listening();
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
