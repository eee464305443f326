//! The process side of the black-box tests: real Mosquitto ([`broker`]) and real `statestore`
//! processes ([`node`], [`cluster`]) on loopback ports chosen per test, with network and
//! process faults ([`netlab`], [`process_faults`]) and power cuts ([`powercut`]). It has no MQTT client of its own, so test
//! crates bring whichever client (or SDK version) they exercise: `statestore-tests` the SDK
//! 1.x line, `sdk-next` the newest beta.

pub mod broker;
pub mod cluster;
pub mod netlab;
pub mod node;
pub mod pki;
pub mod plugin;
pub mod powercut;
pub mod process_faults;

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A free TCP port on 127.0.0.1 for a listener a test starts later.
///
/// Chosen below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`). A port from that
/// range can be taken, between here and the listener's bind, as the source port of any
/// outgoing connection, including a peer dialling that very port while nothing listens there
/// yet: TCP connects the socket to itself, and the node that starts next fails with "Address
/// already in use" (seen in CI: t82, 2026-11-26). Ports are handed out in turn from an offset
/// per process, each checked free by binding it.
pub fn free_port() -> u16 {
    static HANDED_OUT: AtomicU32 = AtomicU32::new(0);
    const LOWEST: u32 = 10_000;
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let span = ephemeral_low.saturating_sub(LOWEST);
    if span < 1_000 {
        // No room below the ephemeral range: let the kernel choose.
        return TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free loopback port");
    }
    let start = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let turn = HANDED_OUT.fetch_add(1, Ordering::Relaxed);
        let port = LOWEST + (start + turn) % span;
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port between {LOWEST} and {ephemeral_low}");
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
