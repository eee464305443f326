//! Device-bound message queues (devicebound.md) where t95 does not go: a `kill -9` of the
//! serving leader in the middle of a stream of sends and settlements on a 3-node cluster
//! (§6), dead-lettering by delivery count and by expiry (§1), feedback batches of 64 records
//! and their redelivery (§4), and `Purged` feedback (§2, §4). Real Mosquitto, real node
//! processes; the backend and the devices are raw MQTT 5 clients.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use statestore_tests::cluster::Cluster;
use statestore_tests::devicebound::*;
use statestore_tests::raw::{RawClient, Received, resp};
use statestore_tests::raw_helpers::*;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

fn now_ms() -> i64 {
    i64::try_from(statestore_tests::now_ms()).expect("ms fit")
}

/// How long a delivery, a feedback batch or a retried request may take.
const WAIT: Duration = Duration::from_secs(20);

fn mid(delivery: &Received) -> String {
    delivery
        .user_property("$.mid")
        .unwrap_or_else(|| panic!("delivery without $.mid: {delivery:?}"))
        .to_owned()
}

/// Every dead letter of `device` (DEADLETTERS reply): message id, reason, time (ms).
async fn dead_letters(backend: &mut RawClient, device: &str) -> Vec<(String, String, i64)> {
    let payload = dcall(backend, "DEADLETTERS", &[b"DEADLETTERS", device.as_bytes()]).await;
    let text = String::from_utf8(payload).expect("DEADLETTERS reply is text here");
    let mut lines = text.split("\r\n");
    let count: usize = lines
        .next()
        .and_then(|l| l.strip_prefix('*'))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("DEADLETTERS shape: {text:?}"));
    let mut letters = Vec::new();
    for _ in 0..count {
        assert_eq!(lines.next(), Some("*4"), "{text:?}");
        let mut bulk = || {
            lines.next().expect("length");
            lines.next().expect("bulk").to_owned()
        };
        let message_id = bulk();
        let _body = bulk();
        let reason = bulk();
        let time = lines
            .next()
            .and_then(|t| t.strip_prefix(':'))
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("dead letter time in {text:?}"));
        letters.push((message_id, reason, time));
    }
    letters
}

// ---------------------------------------------------------------------------------------------
// 1. Leader killed in the middle of a stream of sends and settlements
// ---------------------------------------------------------------------------------------------

const DEVICES: usize = 4;
const MESSAGES: usize = 40;
const LOCK_MS: u64 = 5_000;
/// The first message of this device is delivered and left locked across the kill: it must not
/// be redelivered before its lock runs out.
const HELD_DEVICE: usize = 3;
/// The first message of this device is delivered before the kill and completed after it,
/// with the token of the old leader's delivery, while the lock holds.
const LATE_DEVICE: usize = 2;

/// What one device saw.
#[derive(Debug, Default)]
struct DeviceLog {
    /// Every delivery: message id, lock token, when it arrived.
    deliveries: Vec<(String, String, Instant)>,
    /// Message ids whose `complete` was answered `:1`, and when.
    completed: HashMap<String, Instant>,
    /// `complete` answered `:0` (the lock had run out): message ids.
    refused: Vec<String>,
    /// Contract violations seen on the way.
    violations: Vec<String>,
    /// Settlements that needed more than one attempt (sent while no leader served).
    retried: usize,
    /// The reply to the late settlement (LATE_DEVICE only) and when it was sent.
    late: Option<(Vec<u8>, Instant, usize)>,
}

/// What a device does with its first delivery (after announcing it).
enum First {
    /// Completes it like any other.
    Complete,
    /// Leaves it locked, to expire.
    Hold,
    /// Completes it with its token once told to.
    CompleteWhen(watch::Receiver<bool>),
}

/// A device that completes every delivery (retrying each settlement with the same correlation
/// data until answered) until `expected` messages are completed. Its first delivery is
/// announced on `announce` and handled as `first` says.
async fn run_device(
    mut dev: RawClient,
    expected: usize,
    announce: oneshot::Sender<Instant>,
    first: First,
    deadline: Instant,
) -> (RawClient, DeviceLog) {
    let mut log = DeviceLog::default();
    let mut announce = Some(announce);
    let mut first = Some(first);
    while log.completed.len() < expected {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(delivery) = next_delivery(&mut dev, left).await else {
            log.violations.push(format!(
                "{}: {} of {expected} completed by the deadline; deliveries {:?}",
                dev.id,
                log.completed.len(),
                log.deliveries
                    .iter()
                    .map(|(m, t, _)| format!("{m}/{t}"))
                    .collect::<Vec<_>>()
            ));
            return (dev, log);
        };
        let at = Instant::now();
        let id = mid(&delivery);
        let token = lock_token(&delivery);
        if log.completed.contains_key(&id) {
            log.violations.push(format!(
                "{}: {id} delivered again (token {token}) after its completion was answered :1",
                dev.id
            ));
        }
        log.deliveries.push((id.clone(), token.clone(), at));
        if let Some(announce) = announce.take() {
            let _ = announce.send(at);
        }
        match first.take() {
            Some(First::Hold) => continue, // left locked, to expire
            Some(First::CompleteWhen(mut go)) => {
                // Completed late, with this (old leader's) token, once the leader is killed.
                if go.wait_for(|go| *go).await.is_err() {
                    log.violations
                        .push(format!("{}: never told to settle", dev.id));
                    return (dev, log);
                }
                let sent = Instant::now();
                let (reply, attempts) = settle_retry(&mut dev, "complete", &token, WAIT).await;
                log.retried += usize::from(attempts > 1);
                if reply == b":1\r\n" {
                    log.completed.insert(id, Instant::now());
                } else {
                    log.refused.push(id);
                }
                log.late = Some((reply, sent, attempts));
                continue;
            }
            Some(First::Complete) | None => {}
        }
        let (reply, attempts) = settle_retry(&mut dev, "complete", &token, WAIT).await;
        log.retried += usize::from(attempts > 1);
        match reply.as_slice() {
            b":1\r\n" => {
                if log.completed.insert(id.clone(), Instant::now()).is_some() {
                    log.violations
                        .push(format!("{}: {id} completed twice", dev.id));
                }
            }
            b":0\r\n" => log.refused.push(id),
            other => log.violations.push(format!(
                "{}: settle of {id} answered {:?}",
                dev.id,
                String::from_utf8_lossy(other)
            )),
        }
    }
    (dev, log)
}

/// §6 across `kill -9` of the serving leader of 3 nodes, in the middle of a stream of 40 SENDs
/// to 4 online devices that complete what they receive:
/// - every SEND is answered `+OK` (an unanswered one is retried with the same correlation data)
///   and every one of the 40 messages is delivered and completed exactly once;
/// - nothing whose completion was answered `:1` is ever delivered again;
/// - a lock taken on the old leader is honoured by the new one: a message delivered and left
///   locked before the kill is not redelivered before its 5 s lock runs out, and another one
///   completed with the old leader's token, published right after the kill while no node
///   serves and retried until answered, is settled (`:1`);
/// - QUEUE on the new leader agrees with what the devices saw: nothing enqueued, nothing
///   invisible, no dead letters.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s6_leader_kill_amid_sends_and_settlements_loses_nothing_and_honours_locks() {
    let started = Instant::now();
    let mut cluster = Cluster::start(3, &["--devicebound-lock-duration-ms", &LOCK_MS.to_string()]);
    cluster.wait_ready(Duration::from_secs(30)).await;
    let leader = cluster.wait_serving_leader(Duration::from_secs(30)).await;
    let port = cluster.broker.port;
    let ids: Vec<String> = (0..DEVICES).map(|d| format!("t97-dev-{d}")).collect();
    let deadline = Instant::now() + Duration::from_secs(90);

    let (go_tx, go_rx) = watch::channel(false);
    let mut firsts = Vec::new();
    let mut devices = Vec::new();
    for (d, id) in ids.iter().enumerate() {
        let dev = device(&cluster.broker, id).await;
        let (tx, rx) = oneshot::channel();
        firsts.push(rx);
        let first = match d {
            HELD_DEVICE => First::Hold,
            LATE_DEVICE => First::CompleteWhen(go_rx.clone()),
            _ => First::Complete,
        };
        devices.push(tokio::spawn(run_device(
            dev,
            MESSAGES / DEVICES,
            tx,
            first,
            deadline,
        )));
    }

    // The stream of SENDs: message i to device i % 4, paced so that it spans the failover.
    let answered = Arc::new(AtomicUsize::new(0));
    let sender = {
        let answered = answered.clone();
        let ids = ids.clone();
        let mut backend = RawClient::connect(port, "t97-backend-stream").await;
        tokio::spawn(async move {
            let mut attempts = Vec::new();
            for i in 0..MESSAGES {
                let device = &ids[i % DEVICES];
                let message_id = format!("m{i}");
                let body = format!("body-{i}");
                let payload = resp(&[
                    b"SEND",
                    device.as_bytes(),
                    message_id.as_bytes(),
                    body.as_bytes(),
                ]);
                let p = props(&mut backend);
                let (reply, tries) = dcall_retry(
                    &mut backend,
                    &format!("SEND {message_id}"),
                    &payload,
                    p,
                    WAIT,
                )
                .await;
                assert_eq!(
                    reply.payload.as_ref(),
                    b"+OK\r\n",
                    "SEND {message_id} after {tries} attempts"
                );
                attempts.push(tries);
                answered.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
            (backend, attempts)
        })
    };

    // Both held messages delivered, a quarter of the stream answered: kill the leader.
    let mut first_at = Vec::new();
    for (d, rx) in firsts.into_iter().enumerate() {
        let at = tokio::time::timeout(WAIT, rx)
            .await
            .unwrap_or_else(|_| panic!("{}: no first delivery within {WAIT:?}", ids[d]))
            .expect("device task alive");
        first_at.push(at);
    }
    while answered.load(Ordering::SeqCst) < MESSAGES / 4 {
        assert!(Instant::now() < deadline, "SENDs stalled before the kill");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let killed_at = Instant::now();
    let sent_before_kill = answered.load(Ordering::SeqCst);
    cluster.nodes[leader].kill();
    go_tx.send(true).expect("late device listening");
    let new_leader = cluster.wait_serving_leader(Duration::from_secs(30)).await;
    let serving_at = Instant::now();
    assert_ne!(new_leader, leader, "a new leader serves");

    let held_at = first_at[HELD_DEVICE];
    let late_at = first_at[LATE_DEVICE];
    let lock = Duration::from_millis(LOCK_MS);
    // The checks below prove something only if the locks spanned the change.
    assert!(
        serving_at < held_at + lock - Duration::from_millis(500)
            && serving_at + RETRY_ATTEMPT_WAIT < late_at + lock - Duration::from_millis(500),
        "the new leader served {:?} after the held delivery, {:?} after the late one: \
         not within the {lock:?} lock (less a retry for the late one)",
        serving_at - held_at,
        serving_at - late_at
    );

    let (mut backend, attempts) = sender.await.expect("sender");
    let retried = attempts.iter().filter(|a| **a > 1).count();
    let mut logs = Vec::new();
    for task in devices {
        logs.push(task.await.expect("device task"));
    }

    // No violation anywhere, each of the 40 messages completed exactly once.
    let mut completed: HashSet<String> = HashSet::new();
    for (_, log) in &logs {
        assert!(log.violations.is_empty(), "{:?}", log.violations);
        for id in log.completed.keys() {
            assert!(
                completed.insert(id.clone()),
                "{id} completed on two devices"
            );
        }
    }
    let expected: HashSet<String> = (0..MESSAGES).map(|i| format!("m{i}")).collect();
    assert_eq!(
        completed, expected,
        "every acknowledged SEND delivered and completed"
    );
    for (d, (_, log)) in logs.iter().enumerate() {
        for (id, _, _) in &log.deliveries {
            let i: usize = id[1..].parse().expect("m<i>");
            assert_eq!(i % DEVICES, d, "{id} delivered to {}", ids[d]);
        }
    }

    // The held lock: redelivered only once it ran out, on the new leader.
    let held_log = &logs[HELD_DEVICE].1;
    let held_id = &held_log.deliveries[0].0;
    let again = held_log
        .deliveries
        .iter()
        .skip(1)
        .find(|(id, _, _)| id == held_id)
        .unwrap_or_else(|| panic!("{held_id} redelivered after its lock ran out"));
    assert_ne!(again.1, held_log.deliveries[0].1, "a fresh lock token");
    let waited = again.2 - held_at;
    assert!(
        waited >= lock - Duration::from_millis(500),
        "{held_id} redelivered {waited:?} after its delivery, before the {lock:?} lock ran out"
    );
    assert!(
        held_log.deliveries[1].0 == *held_id,
        "window 1: nothing else before the held message is settled: {:?}",
        held_log.deliveries
    );

    // The late settlement with the old leader's token, while its lock held.
    let late_log = &logs[LATE_DEVICE].1;
    let (late_reply, late_sent, late_attempts) =
        late_log.late.clone().expect("late settlement made");
    assert!(
        late_attempts >= 2,
        "the late settlement, published while no node served, was retried ({late_attempts})"
    );
    assert!(
        late_sent < late_at + lock - Duration::from_millis(500),
        "late settlement sent {:?} after the delivery",
        late_sent - late_at
    );
    assert_eq!(
        String::from_utf8_lossy(&late_reply),
        ":1\r\n",
        "the new leader honours the lock the old one gave ({:?} into it)",
        late_sent - late_at
    );
    let late_id = &late_log.deliveries[0].0;
    assert_eq!(
        late_log
            .deliveries
            .iter()
            .filter(|(id, _, _)| id == late_id)
            .count(),
        1,
        "{late_id} completed under the old lock is not delivered again"
    );

    let refused: usize = logs.iter().map(|(_, log)| log.refused.len()).sum();
    let settle_retries: usize = logs.iter().map(|(_, log)| log.retried).sum();

    // QUEUE on the new leader agrees with the devices; and nothing else arrives.
    for id in &ids {
        wait_queue_within(&mut backend, id, (0, 0, 0), WAIT).await;
        assert_eq!(dead_letters(&mut backend, id).await, vec![]);
    }
    for (mut dev, _) in logs {
        if let Some(extra) = next_delivery(&mut dev, Duration::from_millis(300)).await {
            panic!(
                "{}: delivered after everything was completed: {extra:?}",
                dev.id
            );
        }
    }
    println!(
        "kill -9 of the leader after {sent_before_kill} of {MESSAGES} SENDs: {retried} SENDs \
         retried, new leader serving {} ms after the kill, held lock redelivered after {} ms, \
         {settle_retries} settlements retried, {refused} answered :0; whole test {} s",
        (serving_at - killed_at).as_millis(),
        waited.as_millis(),
        started.elapsed().as_secs()
    );
}

// ---------------------------------------------------------------------------------------------
// 2-5. Dead letters and feedback (one node each)
// ---------------------------------------------------------------------------------------------

/// SEND `parts`, expecting `+OK`.
async fn send_ok(backend: &mut RawClient, parts: &[&[u8]]) {
    let what = format!("SEND {}", String::from_utf8_lossy(parts[2]));
    let mut all: Vec<&[u8]> = vec![b"SEND"];
    all.extend_from_slice(parts);
    assert_eq!(
        String::from_utf8_lossy(&dcall(backend, &what, &all).await),
        "+OK\r\n",
        "{what}"
    );
}

/// The one record about `message_id` among `records`.
fn record_of<'r>(records: &'r [serde_json::Value], message_id: &str) -> &'r serde_json::Value {
    let found: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["originalMessageId"] == message_id)
        .collect();
    assert_eq!(found.len(), 1, "one record of {message_id} in {records:?}");
    found[0]
}

/// Settles every batch with `FEEDBACK COMPLETE`.
async fn complete_batches(backend: &mut RawClient, batches: &[FeedbackBatch]) {
    for batch in batches {
        assert_eq!(
            dcall(
                backend,
                "FEEDBACK COMPLETE",
                &[b"FEEDBACK", b"COMPLETE", batch.token.as_bytes()]
            )
            .await,
            b":1\r\n"
        );
    }
}

/// §1 delivery count: with `max_delivery_count` 2, a message abandoned at each delivery is
/// delivered twice (a fresh lock token each time) and then, instead of a third delivery,
/// dead-lettered with reason `DeliveryCountExceeded`; sent `ACK full`, it yields a
/// `DeliveryCountExceeded` feedback record (§4) with its device and generation.
#[tokio::test]
async fn s1_delivery_count_exceeded_dead_letters_with_feedback() {
    let (broker, _node) = start_single(&["--devicebound-max-delivery-count", "2"]).await;
    let mut backend = connect(&broker, "t97-backend-count").await;
    backend.subscribe(FEEDBACK_TOPIC).await;
    let mut dev = device(&broker, "t97-dev-count").await;
    send_ok(
        &mut backend,
        &[
            b"t97-dev-count",
            b"c1",
            b"bounce",
            b"ACK",
            b"full",
            b"GENERATION",
            b"gen-2",
        ],
    )
    .await;
    let mut tokens = Vec::new();
    for n in 1..=2 {
        let delivery = next_delivery(&mut dev, WAIT)
            .await
            .unwrap_or_else(|| panic!("delivery {n}"));
        assert_eq!(mid(&delivery), "c1");
        assert_eq!(delivery.payload.as_ref(), b"bounce");
        let token = lock_token(&delivery);
        assert_eq!(settle(&mut dev, "abandon", &token).await, b":1\r\n");
        tokens.push(token);
    }
    assert_ne!(tokens[0], tokens[1], "a fresh token per delivery");
    wait_queue_within(&mut backend, "t97-dev-count", (0, 0, 1), WAIT).await;
    let letters = dead_letters(&mut backend, "t97-dev-count").await;
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(
        (letters[0].0.as_str(), letters[0].1.as_str()),
        ("c1", "DeliveryCountExceeded")
    );
    assert!(
        next_delivery(&mut dev, Duration::from_millis(300))
            .await
            .is_none(),
        "no third delivery"
    );
    assert_eq!(
        settle(&mut dev, "complete", &tokens[1]).await,
        b":0\r\n",
        "a dead letter cannot be settled"
    );
    let batches = feedback_until(&mut backend, WAIT, |records| !records.is_empty()).await;
    let records: Vec<serde_json::Value> = batches.iter().flat_map(|b| b.records.clone()).collect();
    assert_eq!(records.len(), 1, "{records:?}");
    let record = record_of(&records, "c1");
    assert_eq!(record["statusCode"], "DeliveryCountExceeded");
    assert_eq!(record["description"], "DeliveryCountExceeded");
    assert_eq!(record["deviceId"], "t97-dev-count");
    assert_eq!(record["deviceGenerationId"], "gen-2");
    complete_batches(&mut backend, &batches).await;
}

/// §1 expiry: a TTL is at least 1 ms (`TTL 0` is a syntax error). A message sent `TTL 1000
/// ACK negative` to a device that never comes online is dead-lettered once its second has
/// passed: QUEUE shows nothing enqueued or invisible and one dead letter, DEADLETTERS lists it
/// with reason `Expired` and a time no earlier than its expiry, and an `Expired` feedback
/// record reports it (§4).
#[tokio::test]
async fn s1_an_expired_message_is_dead_lettered_with_feedback() {
    let (broker, _node) = start_single(&[]).await;
    let mut backend = connect(&broker, "t97-backend-expiry").await;
    backend.subscribe(FEEDBACK_TOPIC).await;
    assert_eq!(
        dcall(
            &mut backend,
            "TTL 0",
            &[b"SEND", b"t97-dev-expiry", b"e0", b"x", b"TTL", b"0"]
        )
        .await,
        err("syntax error")
    );
    let before = now_ms();
    send_ok(
        &mut backend,
        &[
            b"t97-dev-expiry",
            b"e1",
            b"stale",
            b"TTL",
            b"1000",
            b"ACK",
            b"negative",
        ],
    )
    .await;
    wait_queue_within(&mut backend, "t97-dev-expiry", (0, 0, 1), WAIT).await;
    let letters = dead_letters(&mut backend, "t97-dev-expiry").await;
    assert_eq!(letters.len(), 1, "{letters:?}");
    let (id, reason, at) = &letters[0];
    assert_eq!((id.as_str(), reason.as_str()), ("e1", "Expired"));
    assert!(
        *at >= before + 1_000 && *at <= now_ms(),
        "dead-lettered at {at}, sent at {before} with TTL 1000"
    );
    let batches = feedback_until(&mut backend, WAIT, |records| !records.is_empty()).await;
    let records: Vec<serde_json::Value> = batches.iter().flat_map(|b| b.records.clone()).collect();
    assert_eq!(records.len(), 1, "{records:?}");
    let record = record_of(&records, "e1");
    assert_eq!(record["statusCode"], "Expired");
    assert_eq!(record["description"], "Expired");
    assert_eq!(record["deviceId"], "t97-dev-expiry");
    let outcome = iso_ms(record["enqueuedTimeUtc"].as_str().expect("a time")).expect("ISO 8601");
    assert_eq!(outcome, *at, "the record's time is the dead-lettering's");
    complete_batches(&mut backend, &batches).await;
}

/// §2/§4 PURGE: purging an offline device's queue removes its messages without delivery or
/// dead letters, and yields a `Purged` feedback record for each message sent `ACK negative` or
/// `ACK full`, none for `ACK positive` or no ACK.
#[tokio::test]
async fn s4_purge_yields_purged_feedback_for_negative_acks() {
    let (broker, _node) = start_single(&[]).await;
    let mut backend = connect(&broker, "t97-backend-purge").await;
    backend.subscribe(FEEDBACK_TOPIC).await;
    for (id, ack) in [
        ("p-neg", Some("negative")),
        ("p-full", Some("full")),
        ("p-pos", Some("positive")),
        ("p-none", None),
    ] {
        let mut parts: Vec<&[u8]> = vec![b"t97-dev-purge", id.as_bytes(), b"x"];
        if let Some(ack) = ack {
            parts.extend_from_slice(&[b"ACK", ack.as_bytes()]);
        }
        send_ok(&mut backend, &parts).await;
    }
    assert_eq!(
        dcall(&mut backend, "PURGE", &[b"PURGE", b"t97-dev-purge"]).await,
        b":4\r\n"
    );
    assert_eq!(queue(&mut backend, "t97-dev-purge").await, (0, 0, 0, -1));
    let batches = feedback_until(&mut backend, WAIT, |records| records.len() >= 2).await;
    let records: Vec<serde_json::Value> = batches.iter().flat_map(|b| b.records.clone()).collect();
    let got: HashSet<(String, String)> = records
        .iter()
        .map(|r| {
            assert_eq!(r["statusCode"], r["description"]);
            assert_eq!(r["deviceId"], "t97-dev-purge");
            (
                r["originalMessageId"].as_str().expect("id").to_owned(),
                r["statusCode"].as_str().expect("status").to_owned(),
            )
        })
        .collect();
    let expected: HashSet<(String, String)> = [("p-neg", "Purged"), ("p-full", "Purged")]
        .into_iter()
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect();
    assert_eq!(got, expected, "{records:?}");
    assert_eq!(records.len(), 2, "{records:?}");
    complete_batches(&mut backend, &batches).await;
}

/// §4 batching and redelivery: a feedback batch is cut as soon as 64 records wait, not at the
/// 15 s timer. After a first batch (one record) is cut, 64 messages sent `ACK positive` and
/// completed within a few seconds arrive as one batch of exactly their 64 `Success` records,
/// cut well before 15 s after the first. Left unsettled, that batch is published again once
/// its 5 s lock has run out, with the same records, cut time and a new `$.lt`; the old token no
/// longer settles it and `FEEDBACK COMPLETE` with the new one does.
#[tokio::test]
async fn s4_sixty_four_records_cut_a_batch_and_an_unsettled_batch_comes_again() {
    const PER_DEVICE: usize = 32;
    let (broker, _node) = start_single(&[
        "--devicebound-feedback-lock-duration-ms",
        "5000",
        "--devicebound-device-window",
        "32",
    ])
    .await;
    let mut backend = connect(&broker, "t97-backend-batch").await;
    backend.subscribe(FEEDBACK_TOPIC).await;
    let ids = ["t97-dev-batch-0", "t97-dev-batch-1"];
    let mut devs = Vec::new();
    for id in ids {
        devs.push(device(&broker, id).await);
    }

    // A first batch: one record, cut at once (no batch was ever cut).
    send_ok(
        &mut backend,
        &[ids[0].as_bytes(), b"warm", b"x", b"ACK", b"positive"],
    )
    .await;
    let warm = next_delivery(&mut devs[0], WAIT).await.expect("warm");
    assert_eq!(
        settle(&mut devs[0], "complete", &lock_token(&warm)).await,
        b":1\r\n"
    );
    let first = next_feedback(&mut backend, WAIT)
        .await
        .expect("first batch");
    assert_eq!(first.records.len(), 1, "{:?}", first.records);
    assert_eq!(first.records[0]["originalMessageId"], "warm");
    complete_batches(&mut backend, std::slice::from_ref(&first)).await;

    // 64 records within a few seconds.
    let mut expected = HashSet::new();
    for i in 0..PER_DEVICE {
        for id in ids {
            let message_id = format!("{id}-{i}");
            send_ok(
                &mut backend,
                &[
                    id.as_bytes(),
                    message_id.as_bytes(),
                    b"x",
                    b"ACK",
                    b"positive",
                ],
            )
            .await;
            expected.insert(message_id);
        }
    }
    for dev in &mut devs {
        for _ in 0..PER_DEVICE {
            let delivery = next_delivery(dev, WAIT).await.expect("delivered");
            assert_eq!(
                settle(dev, "complete", &lock_token(&delivery)).await,
                b":1\r\n"
            );
        }
    }
    let last_completed = Instant::now();
    let full = next_feedback(&mut backend, WAIT)
        .await
        .expect("a full batch");
    let ids_in = |batch: &FeedbackBatch| -> HashSet<String> {
        batch
            .records
            .iter()
            .map(|r| {
                assert_eq!(r["statusCode"], "Success", "{r}");
                r["originalMessageId"].as_str().expect("id").to_owned()
            })
            .collect()
    };
    assert_eq!(full.records.len(), 64, "exactly 64 records");
    assert_eq!(ids_in(&full), expected);
    let since_first = full.cut_ms - first.cut_ms;
    assert!(
        since_first < 15_000,
        "cut {since_first} ms after the previous cut: the timer, not the 64 records"
    );
    let after_last = full.received.saturating_duration_since(last_completed);
    assert!(
        after_last < Duration::from_secs(5),
        "the full batch came {after_last:?} after the 64th completion"
    );

    // Unsettled: published again when its lock runs out.
    let again = next_feedback(&mut backend, WAIT)
        .await
        .expect("the unsettled batch again");
    let waited = again.received - full.received;
    assert!(
        waited >= Duration::from_millis(4_500),
        "published again {waited:?} after, before its 5 s lock ran out"
    );
    assert_ne!(again.token, full.token, "a new lock token");
    assert_eq!(again.cut_ms, full.cut_ms, "the same batch");
    assert_eq!(again.records, full.records, "the same records");
    assert_eq!(
        dcall(
            &mut backend,
            "FEEDBACK COMPLETE (old token)",
            &[b"FEEDBACK", b"COMPLETE", full.token.as_bytes()]
        )
        .await,
        b":0\r\n"
    );
    complete_batches(&mut backend, std::slice::from_ref(&again)).await;
    println!(
        "64-record batch cut {since_first} ms after the previous cut, received {} ms after the \
         64th completion; published again {} ms later",
        after_last.as_millis(),
        waited.as_millis()
    );
}
