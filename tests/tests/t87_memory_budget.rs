//! A node's memory stays bounded under a flood of large requests (issue: bounded work in
//! flight). One node with a 16 MiB request budget and small caches; 8 raw MQTT clients publish
//! 1,280 requests of 1 MiB each at once (1.25 GiB), far more than the node can hold. Requests beyond the
//! budget must wait at the broker (flow control) or be refused at once (PUBACK 0x97, counted as
//! dropped `overloaded`), never pile up in the node: its peak resident memory may grow by the
//! budget plus its caches, not by the flood. Every request is answered or refused, none hangs,
//! the budget is returned in full, and the node serves afterwards. The node's broker connection
//! survives the flood: the PUBACKs of its replies queue behind megabytes of requests, which
//! must not be taken for a dead broker (a short `mqtt.ack_timeout_ms` makes that certain to
//! show, as lost requests, if it were).
//!
//! The same for replies: 128 small GETs of a 4 MiB value hold at most the outbound budget,
//! not a value each (issue 27: bytes, not counts).

use std::time::{Duration, Instant};

use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use statestore_tests::raw::{REQUEST_TOPIC, RawClient, resp};
use statestore_tests::raw_helpers::start_single;
use statestore_tests::wait_for;

const CLIENTS: usize = 8;
const REQUESTS_PER_CLIENT: usize = 160;
const VALUE_BYTES: usize = 1 << 20;

/// Peak growth allowed over the resident size before the flood. The request path holds at most
/// the 16 MiB budget, but the write path holds far more than that with 1 MiB values: 320
/// sequential 1 MiB SETs to 8 keys on this configuration plateau at +285 MiB (memtable up to
/// 64 MiB, 8 MiB log cache, the state database with its 16 MiB cache, copies on their way
/// through Raft, allocator slack; measured 2026-11-24, when the state database was sled). The
/// bound leaves room for that and is a third of the flood: had the node kept what it read (up
/// to `receive_maximum` = 1,024 requests in flight), it would blow through it.
const MAX_GROWTH_MIB: u64 = 448;

/// `VmRSS` and `VmHWM` (peak) of a process, in KiB.
fn memory_kib(pid: i32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_of_large_requests_stays_within_the_request_budget() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("statestore.toml");
    std::fs::write(
        &config,
        "[limits]\nrequest_budget_mb = 16\nrequest_timeout_ms = 60000\n\n\
         [cluster]\nlog_cache_mb = 8\n\n[storage]\ncache_capacity_mb = 16\n\n\
         [mqtt]\nack_timeout_ms = 1000\n",
    )
    .expect("write config");
    let config = config.display().to_string();
    let (broker, node) = start_single(&["--config", &config]).await;

    // Warm up (one large write through every layer), then take the baseline.
    let mut warm = RawClient::connect(broker.port, "warm").await;
    let value = vec![b'v'; VALUE_BYTES];
    let reply = warm
        .request(&resp(&[b"SET", b"warm", &value]))
        .await
        .expect("warm-up SET answered");
    assert_eq!(&reply.payload[..], b"+OK\r\n");
    let (baseline_kib, _) = memory_kib(node.pid());
    let refused_before = node
        .metric("statestore_server_requests_dropped_total{reason=\"overloaded\"}")
        .await
        .expect("dropped metric");

    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        clients.push(RawClient::connect(broker.port, &format!("flood-{c}")).await);
    }
    let started = Instant::now();
    let payload = |c: usize| Bytes::from(resp(&[b"SET", format!("k{c}").as_bytes(), &value]));
    for _ in 0..REQUESTS_PER_CLIENT {
        for (c, client) in clients.iter_mut().enumerate() {
            let correlation = client.correlation();
            let mut properties = client.request_properties(correlation);
            properties.message_expiry_interval = Some(60);
            client
                .publish(REQUEST_TOPIC, QoS::AtLeastOnce, payload(c), properties)
                .await;
        }
    }
    let sent = (CLIENTS * REQUESTS_PER_CLIENT) as f64;

    // Wait until every request is answered or refused.
    let mut answered = 0usize;
    let mut peak_kib = 0;
    let settled = loop {
        for client in clients.iter_mut() {
            while let Some(reply) = client.next(Duration::from_millis(1)).await {
                assert_eq!(&reply.payload[..], b"+OK\r\n", "a flood SET failed");
                answered += 1;
            }
        }
        peak_kib = peak_kib.max(memory_kib(node.pid()).1);
        let refused = node
            .metric("statestore_server_requests_dropped_total{reason=\"overloaded\"}")
            .await
            .unwrap_or(refused_before)
            - refused_before;
        if answered as f64 + refused >= sent {
            break refused;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "after 90 s: {answered} answered, {refused} refused of {sent} requests"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let growth_mib = peak_kib.saturating_sub(baseline_kib) / 1024;
    println!(
        "{sent} requests of 1 MiB: {answered} answered, {settled} refused in {} ms; resident \
         {} MiB before, peak {} MiB (+{growth_mib} MiB)",
        started.elapsed().as_millis(),
        baseline_kib / 1024,
        peak_kib / 1024
    );
    assert_eq!(answered as f64 + settled, sent, "answered + refused");
    assert_eq!(
        node.metric("statestore_mqtt_disconnects_total").await,
        Some(0.0),
        "the node dropped its broker connection under the flood"
    );
    assert!(
        settled > 0.0,
        "nothing was refused: the flood did not exceed the budget, so it proves nothing"
    );
    assert!(answered > 0, "nothing was answered");
    assert!(
        growth_mib <= MAX_GROWTH_MIB,
        "peak resident memory grew by {growth_mib} MiB under the flood (allowed {MAX_GROWTH_MIB})"
    );
    let returned = wait_for(Duration::from_secs(10), || async {
        (node
            .metric("statestore_server_request_budget_used_bytes")
            .await
            == Some(0.0))
        .then_some(())
    })
    .await;
    assert!(returned.is_some(), "the request budget was not returned");
    let reply = warm
        .request(&resp(&[b"GET", b"k0"]))
        .await
        .expect("GET after the flood answered");
    assert!(
        reply.payload.len() > VALUE_BYTES,
        "GET returns the 1 MiB value"
    );
}

const GET_CLIENTS: usize = 4;
const GETS_PER_CLIENT: usize = 32;
const BIG_VALUE_BYTES: usize = 4 << 20;

/// Peak growth allowed while 128 GETs of a 4 MiB value (512 MiB of replies, each GET charged
/// ~1 KiB at intake) are answered by a node with a 16 MiB outbound budget (8 MiB for the bulk
/// lane, where large replies go: one such reply at a time). The node may hold the budgets (16 + 16 MiB), a read per runtime
/// worker before it finds no room and lets go, and the reply's copies on its way into the
/// socket. Measured 2026-11-27 (debug build, 2-core machine shared with other builds): +6, +10
/// and +22 MiB in three runs; with the budget made too large to matter (`outbound_budget_mb = 65536`, replies
/// built before they have room, as before issue 27) the same flood took +218 MiB.
const MAX_GET_GROWTH_MIB: u64 = 96;

/// Issue 27 (bytes, not counts): a small GET of a large value is charged its reply in the
/// outbound budget before the reply is built, so a flood of them holds at most the budget,
/// not one value each. Every GET is answered with the whole value, some had to wait for room
/// (`statestore_mqtt_outbound_waits_total{lane="bulk"}`: replies over 16 KiB go in the bulk
/// lane, whose pace is raised here so that only the budget holds them back), both budgets are returned in full
/// afterwards, and the node's peak memory stays far below the replies' total.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gets_of_a_large_value_stay_within_the_outbound_budget() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("statestore.toml");
    std::fs::write(
        &config,
        "[limits]\nrequest_budget_mb = 16\noutbound_budget_mb = 16\nrequest_timeout_ms = 60000\n\
         bulk_egress_mb_per_sec = 4096\n\n\
         [cluster]\nlog_cache_mb = 8\n\n[storage]\ncache_capacity_mb = 16\n",
    )
    .expect("write config");
    let config = config.display().to_string();
    let (broker, node) = start_single(&["--config", &config]).await;

    let mut warm = RawClient::connect(broker.port, "warm-get").await;
    let value = vec![b'g'; BIG_VALUE_BYTES];
    let reply = warm
        .request(&resp(&[b"SET", b"big", &value]))
        .await
        .expect("SET of the large value answered");
    assert_eq!(&reply.payload[..], b"+OK\r\n");
    let reply = warm
        .request(&resp(&[b"GET", b"big"]))
        .await
        .expect("warm-up GET answered");
    assert!(reply.payload.len() > BIG_VALUE_BYTES);
    // The warm-up's own peak must not hide the flood's: reset the peak (VmHWM) to now.
    std::fs::write(format!("/proc/{}/clear_refs", node.pid()), "5").expect("reset VmHWM");
    let (baseline_kib, _) = memory_kib(node.pid());
    let waits = "statestore_mqtt_outbound_waits_total{lane=\"bulk\"}";
    let waits_before = node.metric(waits).await.expect("waits metric");

    let mut clients = Vec::new();
    for c in 0..GET_CLIENTS {
        clients.push(RawClient::connect(broker.port, &format!("get-flood-{c}")).await);
    }
    let started = Instant::now();
    let get = Bytes::from(resp(&[b"GET", b"big"]));
    for _ in 0..GETS_PER_CLIENT {
        for client in clients.iter_mut() {
            let correlation = client.correlation();
            let mut properties = client.request_properties(correlation);
            properties.message_expiry_interval = Some(60);
            client
                .publish(REQUEST_TOPIC, QoS::AtLeastOnce, get.clone(), properties)
                .await;
        }
    }
    let sent = GET_CLIENTS * GETS_PER_CLIENT;
    let mut answered = 0usize;
    let mut peak_kib = 0;
    while answered < sent {
        for client in clients.iter_mut() {
            while let Some(reply) = client.next(Duration::from_millis(1)).await {
                assert_eq!(
                    reply.payload.len(),
                    BIG_VALUE_BYTES + format!("${BIG_VALUE_BYTES}\r\n\r\n").len(),
                    "a GET answered with the whole value"
                );
                answered += 1;
            }
        }
        peak_kib = peak_kib.max(memory_kib(node.pid()).1);
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "after 90 s: {answered} of {sent} GETs answered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let growth_mib = peak_kib.saturating_sub(baseline_kib) / 1024;
    let waited = node.metric(waits).await.expect("waits metric") - waits_before;
    println!(
        "{sent} GETs of a 4 MiB value answered in {} ms ({waited} waited for room); resident \
         {} MiB before, peak {} MiB (+{growth_mib} MiB)",
        started.elapsed().as_millis(),
        baseline_kib / 1024,
        peak_kib / 1024
    );
    assert!(
        waited > 0.0,
        "no reply waited for room: the flood did not exceed the budget, so it proves nothing"
    );
    assert!(
        growth_mib <= MAX_GET_GROWTH_MIB,
        "peak resident memory grew by {growth_mib} MiB (allowed {MAX_GET_GROWTH_MIB})"
    );
    for series in [
        "statestore_mqtt_outbound_bytes{lane=\"replies\"}",
        "statestore_mqtt_outbound_bytes{lane=\"bulk\"}",
        "statestore_server_request_budget_used_bytes",
    ] {
        let returned = wait_for(Duration::from_secs(10), || async {
            (node.metric(series).await == Some(0.0)).then_some(())
        })
        .await;
        assert!(returned.is_some(), "{series} was not returned to 0");
    }
}
