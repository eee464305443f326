//! The process side of the black-box tests: real Mosquitto ([`broker`]) and real `statestore`
//! processes ([`node`], [`cluster`]) on loopback ports chosen per test, with network and
//! process faults ([`netlab`], [`process_faults`]). It has no MQTT client of its own, so test
//! crates bring whichever client (or SDK version) they exercise: `statestore-tests` the SDK
//! 1.x line, `sdk-next` the newest beta.

pub mod broker;
pub mod cluster;
pub mod netlab;
pub mod node;
pub mod pki;
pub mod process_faults;

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
