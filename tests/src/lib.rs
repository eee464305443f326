//! Black-box test harness for statestore: real Mosquitto and real `statestore` processes on
//! loopback ports chosen per test, driven by the official SDK client ([`sdk`]) and by a raw
//! MQTT 5 client ([`raw`]) for what the SDK hides. Nothing here reaches into node internals:
//! processes are observed through MQTT, their HTTP admin API, their exit status and (for
//! durability) the syscalls `strace` sees them make.

pub mod broker;
pub mod certs;
pub mod cluster;
pub mod devicebound;
pub mod history;
pub mod linearizability;
pub mod netlab;
pub mod node;
pub mod otlp;
pub mod process_faults;
pub mod prometheus;
pub mod raw;
pub mod raw_helpers;
pub mod sdk;
pub mod sdk_helpers;
pub mod syscall_trace;
pub mod version_audit;
pub mod workload;

use std::net::TcpListener;
use std::time::{Duration, Instant};

/// A free TCP port on 127.0.0.1 (bound and released; the OS rarely hands it out again soon).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Polls `condition` every 25 ms until it returns `Some` or `timeout` passes.
pub async fn wait_for<T, F, Fut>(timeout: Duration, mut condition: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = condition().await {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The current wall clock in ms since the epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
