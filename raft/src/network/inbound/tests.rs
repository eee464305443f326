//! Unit tests of [`super`]: the listener's connection cap, snapshot byte cap and one-snapshot gate.

use super::*;

fn refused(metrics: &PeerRpcMetrics, reason: &str) -> u64 {
    metrics.connections_refused(reason).get()
}

#[test]
fn connections_beyond_the_cap_are_refused_and_slots_come_back() {
    let metrics = PeerRpcMetrics::default();
    let inbound = Inbound::new(
        InboundLimits {
            max_connections: 2,
            max_snapshot_bytes: 10,
        },
        metrics.clone(),
    );
    let first = inbound.admit().expect("first");
    let second = inbound.admit().expect("second");
    assert_eq!(metrics.connections_open().get(), 2);
    assert!(inbound.admit().is_none(), "over the cap");
    assert_eq!(refused(&metrics, "limit"), 1);
    drop(first);
    assert_eq!(metrics.connections_open().get(), 1);
    let third = inbound
        .admit()
        .expect("a slot freed by a closed connection");
    assert_eq!(metrics.connections_open().get(), 2);
    drop((second, third));
    assert_eq!(metrics.connections_open().get(), 0);
    inbound.refused(ConnectionRefusal::Timeout);
    assert_eq!(refused(&metrics, "timeout"), 1);
}

#[test]
fn a_snapshot_past_the_cap_is_refused_naming_the_setting() {
    let metrics = PeerRpcMetrics::default();
    let inbound = Inbound::new(
        InboundLimits {
            max_connections: 1,
            max_snapshot_bytes: 10,
        },
        metrics.clone(),
    );
    let mut budget = inbound.snapshot_budget();
    budget.take(6).expect("6 of 10");
    budget.take(4).expect("exactly 10");
    let err = budget.take(1).expect_err("11 of 10");
    assert!(err.to_string().contains("cluster.max_snapshot_mb"), "{err}");
    assert_eq!(metrics.snapshots_refused("too_large").get(), 1);
    // A new transfer starts from zero.
    inbound.snapshot_budget().take(10).expect("a new budget");
}

#[tokio::test(start_paused = true)]
async fn one_snapshot_at_a_time_a_second_waits_then_is_refused() {
    let metrics = PeerRpcMetrics::default();
    let inbound = Inbound::new(InboundLimits::default(), metrics.clone());
    let first = inbound.snapshot_permit().await.expect("first");
    let err = inbound.snapshot_permit().await.expect_err("busy");
    assert!(err.to_string().contains("another snapshot"), "{err}");
    assert_eq!(metrics.snapshots_refused("busy").get(), 1);
    // Released while the next one waits: it gets the permit.
    let waiting = {
        let inbound = inbound.clone();
        tokio::spawn(async move { inbound.snapshot_permit().await.is_ok() })
    };
    tokio::task::yield_now().await;
    drop(first);
    assert!(
        waiting.await.expect("task"),
        "the waiting transfer proceeds"
    );
}
