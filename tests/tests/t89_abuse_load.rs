//! Abuse suite (issue 27), work and memory: hostile SCAN patterns, KEYNOTIFY fan-out, GET
//! floods of a 4 MiB value, and requests with tens of thousands of user properties. Each test
//! runs a 3-node cluster behind a real Mosquitto with a well-behaved SDK client working beside
//! the attacker, whose every request must be answered within the liveness bound; memory is
//! read from `/proc/<pid>/status` like t87. The tests of this file run one at a time (they
//! load the machine). Names the fixes agreed on are constants in `statestore_tests::abuse`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rumqttc::v5::mqttbytes::v5::PublishProperties;
use statestore_tests::abuse::*;
use statestore_tests::cluster::Cluster;
use statestore_tests::raw::{RawClient, resp};
use statestore_tests::raw_helpers::{NOTIFY_PREFIX, REPLY_WAIT, assert_still_serving, cmd};

/// The tests of this file load the machine; they run one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `limits.request_budget_mb` of the memory tests.
const REQUEST_BUDGET_MIB: u64 = 16;
/// `storage.cache_capacity_mb` of the memory tests.
const STORAGE_CACHE_MIB: u64 = 16;
/// `cluster.log_cache_mb` of the memory tests.
const LOG_CACHE_MIB: u64 = 8;
/// What a node may hold beyond its budgets and caches: allocator slack, the MQTT client's
/// buffers, a few requests being decoded.
const SLACK_MIB: u64 = 64;

async fn cluster(extra: &[&str]) -> Cluster {
    let mut cluster = Cluster::start(3, extra);
    cluster.wait_ready(Duration::from_secs(60)).await;
    cluster.wait_serving_leader(Duration::from_secs(30)).await;
    cluster
}

/// A node configuration with small budgets and caches (written into `dir`); returns the
/// `--config` flag's value.
fn small_budgets(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("statestore.toml");
    std::fs::write(
        &path,
        format!(
            "[limits]\nrequest_budget_mb = {REQUEST_BUDGET_MIB}\n\n[cluster]\n\
             log_cache_mb = {LOG_CACHE_MIB}\n\n[storage]\ncache_capacity_mb = {STORAGE_CACHE_MIB}\n"
        ),
    )
    .expect("write config");
    path.display().to_string()
}

fn pids(cluster: &mut Cluster) -> Vec<i32> {
    cluster.nodes.iter().map(|n| n.pid()).collect()
}

/// Reads (and prints) every node's peak growth since `watch` started.
fn growth(what: &str, watch: &PeakWatch, bound: u64) -> Vec<(u64, u64)> {
    let growth = watch.growth_mib();
    println!("{what}: per node (resident MiB before, peak growth MiB): {growth:?}; bound +{bound}");
    growth
}

/// Asserts that no node's peak resident memory grew by more than `bound` MiB.
fn assert_growth_within(what: &str, growth: &[(u64, u64)], bound: u64) {
    for (node, (_, grown)) in growth.iter().enumerate() {
        assert!(
            *grown <= bound,
            "{what}: node {} grew by {grown} MiB (bound {bound} MiB)",
            node + 1
        );
    }
}

// ---------------------------------------------------------------------------------------------
// SCAN
// ---------------------------------------------------------------------------------------------

/// Keys the hostile SCANs look at.
const SCAN_KEYS: usize = 2_000;
/// Patterns of ~64 KiB need the largest key limit the node accepts (the pattern is at most one
/// key long).
const SCAN_MAX_KEY_BYTES: &str = "65526";

/// A 64-character key.
fn scan_key(i: usize) -> String {
    format!("t89-scan-{i:05}-{}", "p".repeat(49))
}

/// `*[Q-QQ-Q…]*`: one class of 21,000 ranges that match no key character (~63 KiB).
fn one_class_many_ranges() -> Vec<u8> {
    let mut pattern = b"*[".to_vec();
    for _ in 0..21_000 {
        pattern.extend_from_slice(b"Q-Q");
    }
    pattern.extend_from_slice(b"]*");
    pattern
}

/// Sixteen classes of 1,300 ranges, each accepting any printable character by its last range
/// but the last class, which accepts none: ~21,000 ranges in all, each looked at for every key.
fn many_classes() -> Vec<u8> {
    let mut pattern = Vec::new();
    for class in 0..16 {
        pattern.push(b'[');
        for _ in 0..1_299 {
            pattern.extend_from_slice(b"Q-Q");
        }
        pattern.extend_from_slice(if class < 15 { b"!-~" } else { b"Q-Q" });
        pattern.push(b']');
    }
    pattern.push(b'*');
    pattern
}

/// The longest pattern of `[` (65,526 bytes, the largest key limit): every one unclosed.
fn unclosed_brackets() -> Vec<u8> {
    vec![b'['; 65_526]
}

/// One SCAN reply: the keys of the page and its continuation token (`None` on the last page);
/// a refusal (`-ERR syntax error`) is an empty last page; anything else is an `Err`.
type Page = (Vec<Vec<u8>>, Option<Vec<u8>>);

fn scan_page(payload: &[u8]) -> Result<Page, String> {
    if payload == SYNTAX_ERROR {
        return Ok((Vec::new(), None));
    }
    let bad = || format!("not a SCAN reply: {:?}", String::from_utf8_lossy(payload));
    let line_end = |s: &[u8]| s.windows(2).position(|w| w == b"\r\n");
    let (with_token, mut rest) = if let Some(rest) = payload.strip_prefix(b"*2\r\n") {
        (true, rest)
    } else if let Some(rest) = payload.strip_prefix(b"*1\r\n") {
        (false, rest)
    } else {
        return Err(bad());
    };
    let number = |prefix: u8, rest: &mut &[u8]| -> Result<usize, String> {
        let body = rest.strip_prefix(&[prefix]).ok_or_else(bad)?;
        let end = line_end(body).ok_or_else(bad)?;
        let n = std::str::from_utf8(&body[..end])
            .ok()
            .and_then(|n| n.parse().ok())
            .ok_or_else(bad)?;
        *rest = &body[end + 2..];
        Ok(n)
    };
    let count = number(b'*', &mut rest)?;
    let bulk = |rest: &mut &[u8]| -> Result<Vec<u8>, String> {
        let len = number(b'$', rest)?;
        let value = rest.get(..len).ok_or_else(bad)?.to_vec();
        if rest.get(len..len + 2) != Some(b"\r\n") {
            return Err(bad());
        }
        *rest = &rest[len + 2..];
        Ok(value)
    };
    let mut keys = Vec::with_capacity(count);
    for _ in 0..count {
        keys.push(bulk(&mut rest)?);
    }
    let token = if with_token {
        Some(bulk(&mut rest)?)
    } else {
        None
    };
    if !rest.is_empty() {
        return Err(bad());
    }
    Ok((keys, token))
}

/// What one hostile SCAN loop saw.
#[derive(Debug, Default)]
struct HostileReport {
    pages: u64,
    refused: u64,
    slowest: Duration,
    failures: Vec<String>,
}

/// SCANs with `patterns` in turn, each followed through its continuation tokens, until `stop`.
async fn hostile_scans(
    attacker: Arc<Flooder>,
    patterns: Vec<Vec<u8>>,
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
) -> HostileReport {
    let mut report = HostileReport::default();
    for pattern in patterns.iter().cycle() {
        let mut token: Option<Vec<u8>> = None;
        loop {
            if stop.load(Ordering::Relaxed) {
                return report;
            }
            let mut parts: Vec<&[u8]> = vec![b"SCAN", pattern];
            if let Some(token) = &token {
                parts.push(token);
            }
            let started = Instant::now();
            let correlation = attacker.send(resp(&parts), attacker.properties()).await;
            let Some(reply) = attacker.reply_to(&correlation, REPLY_WAIT * 3).await else {
                report.failures.push(format!(
                    "a hostile SCAN was not answered within {:?}",
                    REPLY_WAIT * 3
                ));
                return report;
            };
            report.slowest = report.slowest.max(started.elapsed());
            answered.fetch_add(1, Ordering::Relaxed);
            if reply[..] == *SYNTAX_ERROR {
                report.refused += 1;
            } else {
                report.pages += 1;
            }
            match scan_page(&reply) {
                Ok((_, Some(next))) => token = Some(next),
                Ok((_, None)) => break,
                Err(err) => {
                    report.failures.push(err);
                    return report;
                }
            }
        }
    }
    report
}

/// Hostile SCANs (issue 27): over 2,000 keys of 64 characters, two loops of a pattern that is
/// one class of 21,000 ranges and a third alternating sixteen classes of ~21,000 ranges in all
/// with 64 KiB of unclosed `[`, each followed through its continuation tokens, do not stop
/// the well-behaved client's SETs from being answered within the liveness bound; every hostile
/// SCAN is answered, refused (`-ERR syntax error`) or with a page (charged per range, it ends
/// early with a continuation token); and SCAN still finds keys afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_scans_do_not_stall_writes() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cluster = cluster(&["--max-key-bytes", SCAN_MAX_KEY_BYTES]).await;
    let port = cluster.broker.port;
    let filler = Flooder::connect(port, "t89-scan-filler", &[]).await;
    let sets = (0..SCAN_KEYS)
        .map(|i| {
            (
                resp(&[b"SET", scan_key(i).as_bytes(), b"v"]),
                filler.properties(),
            )
        })
        .collect();
    let filled = filler.pipeline(sets, 64, REPLY_WAIT).await;
    let unwritten = filled
        .iter()
        .filter(|r| r.as_deref() != Some(b"+OK\r\n"))
        .count();
    assert_eq!(unwritten, 0, "{unwritten} of {SCAN_KEYS} keys not written");
    let well_behaved = WellBehaved::start(port, "t89-scan-app").await;
    assert!(
        well_behaved.wait_more(5, ATTACK_CAP).await,
        "quiet progress"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let answered: Vec<Arc<AtomicU64>> = (0..3).map(|_| Arc::default()).collect();
    let mut loops = Vec::new();
    for (n, patterns) in [
        vec![one_class_many_ranges()],
        vec![one_class_many_ranges()],
        vec![many_classes(), unclosed_brackets()],
    ]
    .into_iter()
    .enumerate()
    {
        let attacker = Arc::new(Flooder::connect(port, &format!("t89-scanner-{n}"), &[]).await);
        loops.push(tokio::spawn(hostile_scans(
            attacker,
            patterns,
            stop.clone(),
            answered[n].clone(),
        )));
    }
    // Each loop has had at least two answers: the attack ran, not just started.
    let progressed = well_behaved
        .outlast(40, || {
            answered.iter().all(|a| a.load(Ordering::Relaxed) >= 2)
        })
        .await;
    stop.store(true, Ordering::Relaxed);
    let mut reports = Vec::new();
    for task in loops {
        reports.push(task.await.expect("hostile loop"));
    }
    println!("hostile SCAN loops: {reports:?}");
    well_behaved.finish().await.assert_live("hostile SCANs", 40);
    assert!(
        progressed,
        "within {ATTACK_CAP:?}: the well-behaved client made progress and every hostile loop \
         was answered twice"
    );
    for (n, report) in reports.iter().enumerate() {
        assert!(
            report.failures.is_empty(),
            "hostile loop {n}: {:?}",
            report.failures
        );
        assert!(
            report.pages + report.refused > 0,
            "hostile loop {n} got no answer at all"
        );
    }

    let mut after = RawClient::connect(port, "t89-after-scan").await;
    assert_still_serving(&mut after, "after hostile SCANs").await;
    let mut found = Vec::new();
    let mut token: Option<Vec<u8>> = None;
    loop {
        let mut parts: Vec<&[u8]> = vec![b"SCAN", b"t89-scan-0000?-*"];
        if let Some(token) = &token {
            parts.push(token);
        }
        let reply = cmd(&mut after, "SCAN after the attack", &parts).await;
        let (keys, next) = scan_page(&reply.payload).expect("a SCAN page");
        found.extend(keys);
        match next {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    let expected: Vec<Vec<u8>> = (0..10).map(|i| scan_key(i).into_bytes()).collect();
    assert_eq!(found, expected, "SCAN finds the 10 keys t89-scan-00000..9");
}

// ---------------------------------------------------------------------------------------------
// KEYNOTIFY fan-out
// ---------------------------------------------------------------------------------------------

/// Writes of the hot key the fan-out attack makes at least (each fans out to 1,000 observers).
const HOT_WRITES: u64 = 20;

/// KEYNOTIFY fan-out (issue 27): one client registers one key under 1,001 claimed client ids;
/// after the agreed per-key cap (`limits.max_observers_per_key`, 1,000) exactly one
/// registration is refused `-ERR the quota has been exceeded`, as is any further new id, while
/// registering an id again stays `+OK`. Writing that key in a loop (every write fans out to the
/// 1,000 observers, whose notifications the attacker receives) does not stop the well-behaved
/// client's requests from being answered within the liveness bound, and the node serves
/// afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keynotify_fan_out_is_capped_and_does_not_stall_writes() {
    let _one = ONE_AT_A_TIME.lock().await;
    let cluster = cluster(&[]).await;
    let port = cluster.broker.port;
    let notify_filter = format!("{NOTIFY_PREFIX}/#");
    let attacker = Arc::new(Flooder::connect(port, "t89-fan", &[&notify_filter]).await);
    let well_behaved = WellBehaved::start(port, "t89-fan-app").await;

    let registrations = (0..=MAX_OBSERVERS_PER_KEY)
        .map(|i| {
            (
                resp(&[b"KEYNOTIFY", b"t89-hot"]),
                attacker.properties_as(&format!("t89-fan-{i:05}")),
            )
        })
        .collect();
    let replies = attacker.pipeline(registrations, 32, REPLY_WAIT).await;
    let ok = replies
        .iter()
        .filter(|r| r.as_deref() == Some(b"+OK\r\n"))
        .count();
    let quota = replies
        .iter()
        .filter(|r| r.as_deref() == Some(QUOTA_EXCEEDED))
        .count();
    let again = attacker
        .pipeline(
            vec![
                (
                    resp(&[b"KEYNOTIFY", b"t89-hot"]),
                    attacker.properties_as("t89-fan-new"),
                ),
                (
                    resp(&[b"KEYNOTIFY", b"t89-hot"]),
                    attacker.properties_as("t89-fan-00000"),
                ),
            ],
            1,
            REPLY_WAIT,
        )
        .await;

    // The fan-out: write the hot key in a closed loop while the well-behaved client works.
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let writer = {
        let attacker = attacker.clone();
        let stop = stop.clone();
        let writes = writes.clone();
        tokio::spawn(async move {
            let value = vec![b'n'; 1024];
            while !stop.load(Ordering::Relaxed) {
                let correlation = attacker
                    .send(resp(&[b"SET", b"t89-hot", &value]), attacker.properties())
                    .await;
                if attacker.reply_to(&correlation, REPLY_WAIT).await.is_some() {
                    writes.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let progressed = well_behaved
        .outlast(40, || writes.load(Ordering::Relaxed) >= HOT_WRITES)
        .await;
    stop.store(true, Ordering::Relaxed);
    writer.await.expect("writer");
    let writes = writes.load(Ordering::Relaxed);
    let notified = attacker
        .wait_others(MAX_OBSERVERS_PER_KEY as u64, Duration::from_secs(10))
        .await;
    println!(
        "registrations: {ok} +OK, {quota} refused; {writes} writes of the hot key, {notified} \
         notifications received"
    );
    well_behaved
        .finish()
        .await
        .assert_live("KEYNOTIFY fan-out", 40);
    assert!(
        progressed,
        "within {ATTACK_CAP:?}: the well-behaved client made progress and the hot key was \
         written {HOT_WRITES} times"
    );
    assert!(
        notified >= MAX_OBSERVERS_PER_KEY as u64,
        "the fan-out happened: {notified} notifications"
    );
    assert_eq!(
        (ok, quota),
        (MAX_OBSERVERS_PER_KEY, 1),
        "1,001 registrations of one key: the cap admits {MAX_OBSERVERS_PER_KEY}"
    );
    assert_eq!(
        again[0].as_deref(),
        Some(QUOTA_EXCEEDED),
        "a further new id is refused"
    );
    assert_eq!(
        again[1].as_deref(),
        Some(&b"+OK\r\n"[..]),
        "an id already registered registers again"
    );
    let mut after = RawClient::connect(port, "t89-after-fan").await;
    assert_still_serving(&mut after, "after the fan-out").await;
}

// ---------------------------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------------------------

/// The big value: just under the 4 MiB value limit.
const BIG_VALUE_BYTES: usize = (4 << 20) - 1024;
/// Attacker connections of the GET flood, and GETs each keeps unanswered.
const GET_FLOODERS: usize = 2;
const GETS_IN_FLIGHT: u64 = 128;
/// 4 MiB replies the flood must have received to count as one: 160 MiB, two and a half times
/// the outbound budget. Replies this large go in the bulk lane, paced at 8 MiB/s by default
/// (`limits.bulk_egress_mb_per_sec`), so about 20 s of the flood.
const GET_FLOOD_AT_LEAST: u64 = 40;

/// GETs of `big` with `in_flight` unanswered at a time until `stop`; returns how many sent.
async fn get_flood(attacker: Arc<Flooder>, in_flight: u64, stop: Arc<AtomicBool>) -> u64 {
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) {
        while sent.saturating_sub(attacker.replies()) < in_flight {
            attacker
                .send(resp(&[b"GET", b"t89-big"]), attacker.properties())
                .await;
            sent += 1;
        }
        attacker
            .wait_replies(attacker.replies() + 1, Duration::from_secs(1))
            .await;
    }
    sent
}

/// GET-bigkey flood (issue 27): with a 4 MiB value stored, two attackers keep 128 small GETs
/// of it unanswered each (a GiB of replies asked for); every node's peak resident memory grows
/// by no more than its request budget, its outbound budget (replies are charged in bytes until
/// the broker has them), its caches, a few copies of the value and slack; the well-behaved
/// client is answered within the liveness bound throughout, and the node serves afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_get_flood_of_a_big_value_stays_within_the_budgets() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = small_budgets(&dir);
    let mut cluster = cluster(&["--config", &config]).await;
    let port = cluster.broker.port;
    let mut writer = RawClient::connect(port, "t89-big-writer").await;
    let value = vec![b'b'; BIG_VALUE_BYTES];
    let reply = cmd(&mut writer, "SET big", &[b"SET", b"t89-big", &value]).await;
    assert_eq!(&reply.payload[..], b"+OK\r\n");
    // Warm the read path (the value cached, the reply path used) before the baseline.
    let warm = Arc::new(Flooder::connect(port, "t89-big-warm", &[]).await);
    for _ in 0..4 {
        warm.send(resp(&[b"GET", b"t89-big"]), warm.properties())
            .await;
    }
    assert_eq!(warm.wait_replies(4, REPLY_WAIT).await, 4, "warm-up GETs");
    cluster.wait_converged(Duration::from_secs(30)).await;
    let well_behaved = WellBehaved::start(port, "t89-big-app").await;
    let watch = PeakWatch::start(&pids(&mut cluster));

    let stop = Arc::new(AtomicBool::new(false));
    let mut flooders = Vec::new();
    let mut tasks = Vec::new();
    for n in 0..GET_FLOODERS {
        let flooder = Arc::new(Flooder::connect(port, &format!("t89-getter-{n}"), &[]).await);
        tasks.push(tokio::spawn(get_flood(
            flooder.clone(),
            GETS_IN_FLIGHT,
            stop.clone(),
        )));
        flooders.push(flooder);
    }
    let flood = || flooders.iter().map(|f| f.replies()).sum::<u64>();
    let progressed = well_behaved
        .outlast(40, || flood() >= GET_FLOOD_AT_LEAST)
        .await;
    stop.store(true, Ordering::Relaxed);
    let mut sent = 0;
    for task in tasks {
        sent += task.await.expect("flooder");
    }
    println!(
        "GET flood: {sent} GETs sent, {} 4 MiB replies received",
        flood()
    );
    let value_copies = 4 * (BIG_VALUE_BYTES as u64 >> 20);
    let bound = REQUEST_BUDGET_MIB
        + OUTBOUND_BUDGET_MIB
        + STORAGE_CACHE_MIB
        + LOG_CACHE_MIB
        + value_copies
        + SLACK_MIB;
    let grown = growth("GET-bigkey flood", &watch, bound);
    well_behaved
        .finish()
        .await
        .assert_live("GET-bigkey flood", 40);
    assert!(
        progressed,
        "within {ATTACK_CAP:?}: the well-behaved client made progress and the flood got \
         {GET_FLOOD_AT_LEAST} replies ({})",
        flood()
    );
    assert_growth_within("GET-bigkey flood", &grown, bound);
    // 4 MiB replies fill the socket's write buffer: counted, not logged once per reply.
    let mut backpressure = 0.0;
    for (n, node) in cluster.nodes.iter().enumerate() {
        backpressure += node
            .metric("statestore_mqtt_write_backpressure_total")
            .await
            .unwrap_or(0.0);
        assert!(
            !node.log().contains("Control service is not configured"),
            "node {} logged ntex-mqtt's default control warning",
            n + 1
        );
    }
    assert!(
        backpressure >= 1.0,
        "the big replies filled the write buffer at least once ({backpressure})"
    );
    let mut after = RawClient::connect(port, "t89-after-big").await;
    assert_still_serving(&mut after, "after the GET flood").await;
}

/// Empty user properties per flooding request (750 KB on the wire, ~7 MB decoded).
const FLOOD_USER_PROPERTIES: usize = 150_000;
/// Flooding requests.
const FLOOD_REQUESTS: usize = 30;
/// What the flood's freed memory may keep resident beyond the slack: mimalloc returns freed
/// pages to the system only after its purge delay, so the decoded properties of refused
/// packets (~10 MB each, freed in a burst) stay in the resident size meanwhile. Measured
/// 2026-12-06 on a debug build: the leader's peak growth was 48-73 MiB in ten runs of the
/// binary before that day's storage change and 41-95 MiB in eleven runs after it (80 was this
/// test's bound; one CI run failed at 85), and 27-36 MiB with `MIMALLOC_PURGE_DELAY=0`
/// (after). Holding the 30 packets (300 MB and more) still fails.
const ALLOCATOR_RETENTION_MIB: u64 = 48;

/// User-property flood (issue 27): 30 requests each carrying 150,000 empty user properties
/// (750 KB on the wire, ~7 MB once decoded) are refused at the door with no reply, counted as
/// dropped for too many user properties; no node's peak resident memory grows by more than
/// its request budget and slack; the well-behaved client is answered within the liveness bound
/// throughout, and the node serves afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_user_property_flood_is_refused_at_the_door() {
    let _one = ONE_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = small_budgets(&dir);
    let mut cluster = cluster(&["--config", &config]).await;
    let port = cluster.broker.port;
    let well_behaved = WellBehaved::start(port, "t89-props-app").await;
    let attacker = Flooder::connect(port, "t89-props-flood", &[]).await;
    let dropped_before = dropped_on(&mut cluster, DROP_TOO_MANY_USER_PROPERTIES).await;
    let watch = PeakWatch::start(&pids(&mut cluster));

    for _ in 0..FLOOD_REQUESTS {
        let mut p: PublishProperties = attacker.properties();
        p.user_properties.extend(std::iter::repeat_n(
            (String::new(), String::new()),
            FLOOD_USER_PROPERTIES,
        ));
        attacker.send(resp(&[b"GET", b"t89-any"]), p).await;
    }
    let flood = FLOOD_REQUESTS as f64;
    let deadline = Instant::now() + ATTACK_CAP;
    let counted = loop {
        let counted =
            dropped_on(&mut cluster, DROP_TOO_MANY_USER_PROPERTIES).await - dropped_before;
        if counted + attacker.replies() as f64 >= flood || Instant::now() >= deadline {
            break counted;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let progressed = well_behaved.outlast(20, || true).await;
    println!(
        "user-property flood: {counted} dropped, {} answered",
        attacker.replies()
    );
    let bound = REQUEST_BUDGET_MIB + SLACK_MIB + ALLOCATOR_RETENTION_MIB;
    let grown = growth("user-property flood", &watch, bound);
    well_behaved
        .finish()
        .await
        .assert_live("user-property flood", 20);
    assert!(progressed, "the well-behaved client made progress");
    assert_eq!(attacker.replies(), 0, "no flooding request was answered");
    assert_eq!(
        counted, flood,
        "every flooding request counted as {DROP_TOO_MANY_USER_PROPERTIES}"
    );
    assert_growth_within("user-property flood", &grown, bound);
    let mut after = RawClient::connect(port, "t89-after-props").await;
    assert_still_serving(&mut after, "after the user-property flood").await;
}

#[test]
fn scan_replies_are_read() {
    let key = |k: &str| k.as_bytes().to_vec();
    assert_eq!(scan_page(b"*1\r\n*0\r\n"), Ok((vec![], None)));
    assert_eq!(scan_page(SYNTAX_ERROR), Ok((vec![], None)));
    assert_eq!(
        scan_page(b"*1\r\n*2\r\n$1\r\na\r\n$2\r\nbc\r\n"),
        Ok((vec![key("a"), key("bc")], None))
    );
    assert_eq!(
        scan_page(b"*2\r\n*1\r\n$1\r\na\r\n$3\r\ntok\r\n"),
        Ok((vec![key("a")], Some(key("tok"))))
    );
    assert_eq!(
        scan_page(b"*2\r\n*0\r\n$2\r\nxy\r\n"),
        Ok((vec![], Some(key("xy"))))
    );
    assert!(scan_page(b"-ERR other\r\n").is_err());
    assert!(scan_page(b"*2\r\n*1\r\n$1\r\na\r\n").is_err());
    assert!(scan_page(b"*1\r\n*1\r\n$1\r\nab\r\n").is_err());
    assert!(scan_page(b"*1\r\n*0\r\nextra").is_err());
}
