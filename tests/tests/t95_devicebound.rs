//! Device-bound message queues end to end (devicebound.md): a real Mosquitto, a real node
//! process, a backend speaking the service RPC on `devicebound/v1/command/invoke` and devices
//! that are raw MQTT 5 clients.

use std::time::Duration;

use statestore_tests::devicebound::*;
use statestore_tests::raw_helpers::*;

fn now_ms() -> i64 {
    i64::try_from(statestore_tests::now_ms()).expect("ms fit")
}

/// §2: SEND answers `+OK` once committed, QUEUE counts it with its enqueued time, the queue
/// holds `max_queue_depth` (50) messages and the 51st SEND gets `-ERR device queue is full`;
/// the request metrics count them by verb and result.
#[tokio::test]
async fn s2_send_queue_round_trip_and_the_51st_send_is_refused() {
    let (broker, node) = start_single(&[]).await;
    let mut backend = connect(&broker, "t95-backend-full").await;
    let before = now_ms();
    assert_eq!(
        dcall(
            &mut backend,
            "first SEND",
            &[b"SEND", b"dev-full", b"m0", b"hello"]
        )
        .await,
        b"+OK\r\n"
    );
    let (enqueued, invisible, dead, oldest) = queue(&mut backend, "dev-full").await;
    assert_eq!(enqueued + invisible, 1, "one message queued");
    assert_eq!(dead, 0);
    if enqueued == 1 {
        assert!(
            oldest >= before - 5_000 && oldest <= now_ms() + 5_000,
            "oldest enqueued time {oldest} near now {before}"
        );
    }
    let (_, _, _, empty_oldest) = queue(&mut backend, "dev-nothing").await;
    assert_eq!(empty_oldest, -1, "an unknown device has no oldest message");
    for i in 1..50 {
        let id = format!("m{i}");
        assert_eq!(
            dcall(
                &mut backend,
                "SEND",
                &[b"send", b"dev-full", id.as_bytes(), b"x"]
            )
            .await,
            b"+OK\r\n",
            "SEND {i} (verbs are case-insensitive)"
        );
    }
    assert_eq!(
        dcall(
            &mut backend,
            "51st SEND",
            &[b"SEND", b"dev-full", b"m50", b"x"]
        )
        .await,
        err("device queue is full")
    );
    let (enqueued, invisible, _, _) = queue(&mut backend, "dev-full").await;
    assert_eq!(
        enqueued + invisible,
        50,
        "the refused SEND left the queue as it was"
    );
    let ok = node
        .metric(r#"statestore_devicebound_requests_total{command="send",result="ok"}"#)
        .await;
    assert_eq!(ok, Some(50.0), "SENDs answered +OK");
    let full = node
        .metric(
            r#"statestore_devicebound_requests_total{command="send",result="device_queue_full"}"#,
        )
        .await;
    assert_eq!(full, Some(1.0));
    let enqueued = node
        .metric(r#"statestore_devicebound_messages_total{transition="enqueued"}"#)
        .await;
    assert_eq!(enqueued, Some(50.0));
}

/// §2 errors: malformed commands get their exact `-ERR` text, and the node keeps serving both
/// services afterwards.
#[tokio::test]
async fn s2_malformed_commands_get_their_exact_errors_and_the_node_keeps_serving() {
    let (broker, _node) = start_single(&["--devicebound-max-message-bytes", "1024"]).await;
    let mut backend = connect(&broker, "t95-backend-errors").await;
    let big = vec![b'b'; 1025];
    let long_id = vec![b'd'; 129];
    let long_mid = vec![b'm'; 129];
    let cases: Vec<(Vec<&[u8]>, Vec<u8>)> = vec![
        (vec![b"SEND"], err("wrong number of arguments")),
        (
            vec![b"SEND", b"dev", b"m"],
            err("wrong number of arguments"),
        ),
        (
            vec![b"SEND", b"bad/id", b"m", b"b"],
            err("invalid device id"),
        ),
        (vec![b"SEND", b"", b"m", b"b"], err("invalid device id")),
        (
            vec![b"SEND", &long_id, b"m", b"b"],
            err("invalid device id"),
        ),
        (vec![b"SEND", b"dev", b"", b"b"], err("invalid message id")),
        (
            vec![b"SEND", b"dev", &long_mid, b"b"],
            err("invalid message id"),
        ),
        (vec![b"SEND", b"dev", b"m", &big], err("message too large")),
        (
            vec![b"SEND", b"dev", b"m", b"b", b"TTL", b"soon"],
            err("syntax error"),
        ),
        (
            vec![b"SEND", b"dev", b"m", b"b", b"ACK", b"maybe"],
            err("syntax error"),
        ),
        (
            vec![b"SEND", b"dev", b"m", b"b", b"COLOR", b"red"],
            err("syntax error"),
        ),
        (vec![b"PURGE"], err("wrong number of arguments")),
        (vec![b"QUEUE", b"a", b"b"], err("wrong number of arguments")),
        (vec![b"QUEUE", b"bad#id"], err("invalid device id")),
        (vec![b"FEEDBACK", b"MAYBE", b"tok"], err("syntax error")),
        (vec![b"NOPE", b"dev"], err("unknown command")),
        (vec![b"GET", b"key"], err("unknown command")),
    ];
    for (parts, expected) in cases {
        let what = format!(
            "{:?}",
            parts
                .iter()
                .map(|p| String::from_utf8_lossy(p))
                .collect::<Vec<_>>()
        );
        let got = dcall(&mut backend, &what, &parts).await;
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&expected),
            "{what}"
        );
    }
    // Not RESP3 at all.
    let p = props(&mut backend);
    let reply = dcall_props(&mut backend, "garbage", b"\x00\xffnot resp", p).await;
    assert_eq!(reply.payload.as_ref(), err("syntax error").as_slice());
    // Exactly at the limit is fine, and both services still serve.
    let limit = vec![b'b'; 1024];
    assert_eq!(
        dcall(
            &mut backend,
            "SEND at the limit",
            &[b"SEND", b"dev", b"m", &limit]
        )
        .await,
        b"+OK\r\n"
    );
    assert_still_serving(&mut backend, "after malformed device-bound requests").await;
}

/// §2 / protocol §6: a retried SEND (same requester, same correlation data) gets the
/// remembered reply and enqueues once; PURGE and FORGET answer their counts; DEADLETTERS of a
/// device without dead letters is an empty array.
#[tokio::test]
async fn s2_retried_send_takes_effect_once_and_purge_forget_count() {
    let (broker, _node) = start_single(&[]).await;
    let mut backend = connect(&broker, "t95-backend-retry").await;
    let p = props(&mut backend);
    let payload = statestore_tests::raw::resp(&[b"SEND", b"dev-retry", b"m1", b"once"]);
    let first = dcall_props(&mut backend, "SEND", &payload, p.clone()).await;
    let again = dcall_props(&mut backend, "retried SEND", &payload, p).await;
    assert_eq!(first.payload.as_ref(), b"+OK\r\n");
    assert_eq!(again.payload.as_ref(), b"+OK\r\n");
    let (enqueued, invisible, _, _) = queue(&mut backend, "dev-retry").await;
    assert_eq!(enqueued + invisible, 1, "the retry enqueued nothing");

    for i in 0..3 {
        let id = format!("p{i}");
        assert_eq!(
            dcall(
                &mut backend,
                "SEND",
                &[b"SEND", b"dev-retry", id.as_bytes(), b"x"]
            )
            .await,
            b"+OK\r\n"
        );
    }
    assert_eq!(
        dcall(&mut backend, "PURGE", &[b"PURGE", b"dev-retry"]).await,
        b":4\r\n"
    );
    assert_eq!(queue(&mut backend, "dev-retry").await, (0, 0, 0, -1));
    assert_eq!(
        dcall(&mut backend, "PURGE again", &[b"PURGE", b"dev-retry"]).await,
        b":0\r\n"
    );
    for i in 0..2 {
        let id = format!("f{i}");
        assert_eq!(
            dcall(
                &mut backend,
                "SEND",
                &[b"SEND", b"dev-retry", id.as_bytes(), b"x"]
            )
            .await,
            b"+OK\r\n"
        );
    }
    assert_eq!(
        dcall(&mut backend, "FORGET", &[b"FORGET", b"dev-retry"]).await,
        b":2\r\n"
    );
    assert_eq!(queue(&mut backend, "dev-retry").await, (0, 0, 0, -1));
    assert_eq!(
        dcall(&mut backend, "DEADLETTERS", &[b"DEADLETTERS", b"dev-retry"]).await,
        b"*0\r\n"
    );
    assert_eq!(
        dcall(
            &mut backend,
            "FEEDBACK of an unknown token",
            &[b"FEEDBACK", b"COMPLETE", b"nope"]
        )
        .await,
        b":0\r\n"
    );
}

/// How long a delivery may take.
const DELIVERY_WAIT: Duration = Duration::from_secs(10);

/// Waits until QUEUE of `device` equals `expected` (enqueued, invisible, dead-lettered).
async fn wait_queue(
    backend: &mut statestore_tests::raw::RawClient,
    device: &str,
    expected: (i64, i64, i64),
) {
    wait_queue_within(backend, device, expected, DELIVERY_WAIT).await;
}

fn lock_token(delivery: &statestore_tests::raw::Received) -> String {
    delivery
        .user_property("$.lt")
        .unwrap_or_else(|| panic!("delivery without $.lt: {delivery:?}"))
        .to_owned()
}

/// §3: messages sent to an offline device wait (PUBACK 0x10 gives the delivery back and
/// backs the device off); once the device subscribes and shows activity it receives them in
/// order, one at a time (window 1), with `$.mid`/`$.lt`/`$.exp`/`$.ct` and the application
/// properties as user properties and in the property bag; complete removes a message,
/// abandon redelivers it with a new lock token, reject dead-letters it (DEADLETTERS shape),
/// an earlier token no longer settles, and a device cannot settle another device's token.
#[tokio::test]
async fn s3_push_to_an_offline_device_then_settle_complete_abandon_reject() {
    let (broker, node) = start_single(&[]).await;
    let mut backend = connect(&broker, "t95-backend-push").await;
    let reply = dcall_with(
        &mut backend,
        "SEND m1",
        &[
            b"SEND",
            b"dev-a",
            b"m1",
            b"one",
            b"CONTENTTYPE",
            b"text/plain",
        ],
        &[("color", "red"), ("__hidden", "x"), ("size", "big & small")],
    )
    .await;
    assert_eq!(reply.payload.as_ref(), b"+OK\r\n");
    // An application property named like the delivery's own would stand next to them.
    let forged = dcall_with(
        &mut backend,
        "SEND with a $.lt property",
        &[b"SEND", b"dev-a", b"forged", b"x"],
        &[("color", "red"), ("$.lt", "forged-token")],
    )
    .await;
    assert_eq!(forged.payload.as_ref(), b"-ERR invalid property name\r\n");
    for (id, body) in [("m2", "two"), ("m3", "three")] {
        assert_eq!(
            dcall(
                &mut backend,
                "SEND",
                &[b"SEND", b"dev-a", id.as_bytes(), body.as_bytes()]
            )
            .await,
            b"+OK\r\n"
        );
    }
    // Offline: the push was refused (0x10) and gave the delivery back.
    let backed_off = statestore_tests::wait_for(DELIVERY_WAIT, || async {
        node.metric("statestore_devicebound_offline_backoffs_total")
            .await
            .filter(|n| *n >= 1.0)
    })
    .await;
    assert!(backed_off.is_some(), "an offline device is backed off");
    wait_queue(&mut backend, "dev-a", (3, 0, 0)).await;

    let mut dev = device(&broker, "dev-a").await;
    // Any publish under its messages/ topics ends the backoff at once.
    publish_plain(&dev, "devices/dev-a/messages/events", b"hello").await;
    let first = next_delivery(&mut dev, DELIVERY_WAIT)
        .await
        .expect("m1 delivered once the device is online");
    assert_eq!(first.payload.as_ref(), b"one");
    assert!(
        first
            .topic
            .starts_with("devices/dev-a/messages/devicebound/%24.mid=m1&%24.lt="),
        "delivery topic {}",
        first.topic
    );
    assert!(
        first
            .topic
            .contains("&%24.ct=text%2Fplain&color=red&size=big%20%26%20small"),
        "{}",
        first.topic
    );
    assert!(
        !first.topic.contains("hidden"),
        "__ properties are not application properties"
    );
    assert_eq!(first.user_property("$.mid"), Some("m1"));
    assert_eq!(first.user_property("$.ct"), Some("text/plain"));
    assert_eq!(first.user_property("color"), Some("red"));
    assert_eq!(first.user_property("size"), Some("big & small"));
    assert_eq!(first.user_property("__hidden"), None);
    let exp = first.user_property("$.exp").expect("$.exp");
    assert!(
        exp.ends_with('Z') && exp.len() == 24,
        "ISO 8601 with ms: {exp}"
    );
    let interval = first
        .properties
        .message_expiry_interval
        .expect("Message Expiry Interval");
    assert!(
        (3_500..=3_600).contains(&interval),
        "remaining TTL {interval}"
    );
    let t1 = lock_token(&first);
    // Window 1: nothing else until m1 is settled.
    assert!(
        next_delivery(&mut dev, Duration::from_millis(700))
            .await
            .is_none()
    );
    wait_queue(&mut backend, "dev-a", (2, 1, 0)).await;

    // The token's place with a guessed secret settles nothing.
    assert_eq!(
        t1.len(),
        49,
        "m, 16 hex digits of place, 32 of secret: {t1}"
    );
    let guessed = format!("{}{}", &t1[..17], "0".repeat(32));
    assert_eq!(settle(&mut dev, "complete", &guessed).await, b":0\r\n");
    wait_queue(&mut backend, "dev-a", (2, 1, 0)).await;
    assert_eq!(settle(&mut dev, "complete", &t1).await, b":1\r\n");
    assert_eq!(
        settle(&mut dev, "complete", &t1).await,
        b":0\r\n",
        "already completed"
    );
    let second = next_delivery(&mut dev, DELIVERY_WAIT).await.expect("m2");
    assert_eq!(second.user_property("$.mid"), Some("m2"));
    let t2 = lock_token(&second);
    assert_eq!(settle(&mut dev, "abandon", &t2).await, b":1\r\n");
    let again = next_delivery(&mut dev, DELIVERY_WAIT)
        .await
        .expect("m2 again");
    assert_eq!(
        again.user_property("$.mid"),
        Some("m2"),
        "abandon puts it back at the head"
    );
    assert_eq!(again.payload.as_ref(), b"two");
    let t2b = lock_token(&again);
    assert_ne!(t2, t2b, "every delivery gets a fresh lock token");
    assert_eq!(
        settle(&mut dev, "complete", &t2).await,
        b":0\r\n",
        "an earlier token settles nothing"
    );
    assert_eq!(settle(&mut dev, "reject", &t2b).await, b":1\r\n");

    let third = next_delivery(&mut dev, DELIVERY_WAIT).await.expect("m3");
    assert_eq!(third.user_property("$.mid"), Some("m3"));
    let t3 = lock_token(&third);
    let mut other = device(&broker, "dev-b").await;
    assert_eq!(
        settle_as(&mut other, "dev-b", "complete", &t3).await,
        b":0\r\n",
        "a device cannot settle another device's message"
    );
    wait_queue(&mut backend, "dev-a", (0, 1, 1)).await;
    assert_eq!(settle(&mut dev, "complete", &t3).await, b":1\r\n");
    wait_queue(&mut backend, "dev-a", (0, 0, 1)).await;

    let letters = dcall(&mut backend, "DEADLETTERS", &[b"DEADLETTERS", b"dev-a"]).await;
    let text = String::from_utf8_lossy(&letters).into_owned();
    let prefix = "*1\r\n*4\r\n$2\r\nm2\r\n$3\r\ntwo\r\n$8\r\nRejected\r\n:";
    assert!(text.starts_with(prefix), "DEADLETTERS {text:?}");
    let at: i64 = text[prefix.len()..]
        .strip_suffix("\r\n")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("time in {text:?}"));
    assert!(
        (now_ms() - at).abs() < 60_000,
        "dead-lettered just now: {at}"
    );
    assert_eq!(
        dcall(
            &mut backend,
            "DEADLETTERS COUNT 0",
            &[b"DEADLETTERS", b"dev-a", b"COUNT", b"1"]
        )
        .await,
        letters
    );
    for (transition, at_least) in [
        ("completed", 2.0),
        ("abandoned", 1.0),
        ("rejected", 1.0),
        ("dead_lettered", 1.0),
    ] {
        let series =
            format!("statestore_devicebound_messages_total{{transition=\"{transition}\"}}");
        let value = node.metric(&series).await.unwrap_or(0.0);
        assert!(value >= at_least, "{series} = {value}");
    }
}

/// §3 pull: `devices/{id}/messages/receive` locks and returns the head message with its
/// properties; with no Enqueued message left it answers `__stat` 204 and an empty payload. Malformed device topics get no reply and the node keeps serving.
#[tokio::test]
async fn s3_pull_receive_and_malformed_device_topics() {
    let (broker, node) = start_single(&[]).await;
    let mut backend = connect(&broker, "t95-backend-pull").await;
    assert_eq!(
        dcall(&mut backend, "SEND", &[b"SEND", b"dev-p", b"p1", b"pulled"]).await,
        b"+OK\r\n"
    );
    // The device never subscribes: it pulls. (The push may hold the message for a moment
    // before the broker says the device is offline, so pull until it comes.)
    let mut dev = statestore_tests::raw::RawClient::connect(broker.port, "dev-p").await;
    let deadline = tokio::time::Instant::now() + DELIVERY_WAIT;
    let pulled = loop {
        let p = props(&mut dev);
        let reply = dev
            .request_on("devices/dev-p/messages/receive", b"", p, REPLY_WAIT)
            .await
            .expect("a pull is answered");
        if reply.user_property("__stat") == Some("200") {
            break reply;
        }
        assert_eq!(reply.user_property("__stat"), Some("204"));
        assert!(reply.payload.is_empty());
        assert!(
            tokio::time::Instant::now() < deadline,
            "never pulled the message"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(pulled.payload.as_ref(), b"pulled");
    assert_eq!(pulled.user_property("$.mid"), Some("p1"));
    let token = lock_token(&pulled);
    let p = props(&mut dev);
    let empty = dev
        .request_on("devices/dev-p/messages/receive", b"", p, REPLY_WAIT)
        .await
        .expect("answered");
    assert_eq!(
        empty.user_property("__stat"),
        Some("204"),
        "the only message is locked: nothing to pull"
    );
    assert!(empty.payload.is_empty());
    assert_eq!(settle(&mut dev, "complete", &token).await, b":1\r\n");
    wait_queue(&mut backend, "dev-p", (0, 0, 0)).await;

    // Malformed device topics: no reply, counted, and the node keeps serving.
    for topic in [
        "devices/dev-p/messages/settle/explode/tok",
        "devices/dev-p/messages/settle/complete",
        "devices/bad~id/messages/receive",
        "devices/dev-p/messages/receive/extra",
    ] {
        let p = props(&mut dev);
        let reply = dev
            .request_on(topic, b"", p, Duration::from_millis(800))
            .await;
        assert!(reply.is_none(), "{topic}: no reply, got {reply:?}");
    }
    let dropped = statestore_tests::wait_for(DELIVERY_WAIT, || async {
        let text = node.metrics().await?;
        let total: f64 = text
            .lines()
            .filter(|l| l.starts_with("statestore_devicebound_device_publishes_dropped_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        (total >= 2.0).then_some(total)
    })
    .await;
    assert!(dropped.is_some(), "malformed device publishes are counted");
    assert_eq!(
        dcall(
            &mut backend,
            "still serving",
            &[b"SEND", b"dev-p", b"p2", b"x"]
        )
        .await,
        b"+OK\r\n"
    );
    assert_still_serving(&mut backend, "after malformed device topics").await;
}

/// `statestore_devicebound_device_publishes_dropped_total{reason="forbidden_response_topic"}`.
async fn forbidden_device_replies(node: &statestore_tests::node::StatestoreNode) -> f64 {
    node.metric(
        "statestore_devicebound_device_publishes_dropped_total{reason=\"forbidden_response_topic\"}",
    )
    .await
    .unwrap_or(0.0)
}

/// §3 (issue 27): a pull whose Response Topic is under another device (its deliveries or any
/// other topic), under the device's own delivery topics, on a topic the leader reads, or on
/// the feedback topic gets no reply and locks nothing; a settlement asking for its reply there
/// settles nothing. A watcher of the other device's topics and of the feedback topic receives
/// nothing; each is counted. A pull answered under the device's own `devices/{id}/` works, and
/// the message it returns is the one the refused pulls did not lock.
#[tokio::test]
async fn s3_pull_and_settle_replies_go_only_to_the_device_itself() {
    let (broker, node) = start_single(&[]).await;
    let mut backend = connect(&broker, "t95-backend-victim").await;
    let mut watcher = statestore_tests::raw::RawClient::connect(broker.port, "t95-watch").await;
    watcher.subscribe("devices/victim/#").await;
    watcher.subscribe(&format!("{FEEDBACK_TOPIC}/#")).await;
    watcher.subscribe(FEEDBACK_TOPIC).await;
    assert_eq!(
        dcall(&mut backend, "SEND", &[b"SEND", b"dev-q", b"q1", b"secret"]).await,
        b"+OK\r\n"
    );
    // The device pulls; it never subscribes to its deliveries (the push gives them back).
    let mut dev = statestore_tests::raw::RawClient::connect(broker.port, "dev-q").await;
    dev.subscribe("devices/dev-q/replies/#").await;
    let before = forbidden_device_replies(&node).await;
    let forbidden = [
        "devices/victim/messages/devicebound/%24.mid=x&%24.lt=y",
        "devices/victim/inbox",
        "devices/dev-q/messages/devicebound/%24.mid=x",
        "devices/dev-q/messages/receive",
        FEEDBACK_TOPIC,
    ];
    for topic in forbidden {
        let p = props_on(&mut dev, topic);
        let reply = dev
            .request_on(
                "devices/dev-q/messages/receive",
                b"",
                p,
                Duration::from_millis(300),
            )
            .await;
        assert!(reply.is_none(), "pull answered on {topic}: {reply:?}");
    }
    let counted = statestore_tests::wait_for(DELIVERY_WAIT, || async {
        let n = forbidden_device_replies(&node).await;
        (n >= before + forbidden.len() as f64).then_some(n)
    })
    .await;
    assert!(counted.is_some(), "each refused pull is counted");
    // Nothing locked it: a pull's lock would hold it Invisible for 60 s.
    wait_queue(&mut backend, "dev-q", (1, 0, 0)).await;

    let deadline = tokio::time::Instant::now() + DELIVERY_WAIT;
    let pulled = loop {
        let p = props_on(&mut dev, "devices/dev-q/replies/1");
        let reply = dev
            .request_on("devices/dev-q/messages/receive", b"", p, REPLY_WAIT)
            .await
            .expect("a pull answered under the device's own topics");
        assert_eq!(reply.topic, "devices/dev-q/replies/1");
        if reply.user_property("__stat") == Some("200") {
            break reply;
        }
        assert!(tokio::time::Instant::now() < deadline, "never pulled");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(pulled.payload.as_ref(), b"secret");
    let token = lock_token(&pulled);

    let p = props_on(&mut dev, "devices/victim/inbox");
    let topic = format!("devices/dev-q/messages/settle/complete/{token}");
    let reply = dev
        .request_on(&topic, b"", p, Duration::from_millis(800))
        .await;
    assert!(
        reply.is_none(),
        "settlement answered on another device: {reply:?}"
    );
    wait_queue(&mut backend, "dev-q", (0, 1, 0)).await;
    assert_eq!(
        settle(&mut dev, "complete", &token).await,
        b":1\r\n",
        "the refused settlement settled nothing"
    );
    wait_queue(&mut backend, "dev-q", (0, 0, 0)).await;
    let seen = drain(&mut watcher, Duration::from_millis(300)).await;
    assert!(
        seen.is_empty(),
        "a reply reached another device or the backends: {seen:?}"
    );
    assert!(forbidden_device_replies(&node).await >= before + forbidden.len() as f64 + 1.0);
}

/// §1 lock expiry: a delivered message nobody settles is Enqueued again when its lock runs
/// out (5 s here) and redelivered with a new token; the stale token settles nothing.
#[tokio::test]
async fn s1_an_unsettled_lock_expires_and_the_message_is_redelivered() {
    let (broker, node) = start_single(&["--devicebound-lock-duration-ms", "5000"]).await;
    let mut backend = connect(&broker, "t95-backend-lock").await;
    let mut dev = device(&broker, "dev-l").await;
    assert_eq!(
        dcall(&mut backend, "SEND", &[b"SEND", b"dev-l", b"l1", b"locked"]).await,
        b"+OK\r\n"
    );
    let first = next_delivery(&mut dev, DELIVERY_WAIT)
        .await
        .expect("delivered");
    let t1 = lock_token(&first);
    let delivered_at = tokio::time::Instant::now();
    let again = next_delivery(&mut dev, Duration::from_secs(15))
        .await
        .expect("redelivered after the lock expired");
    let waited = delivered_at.elapsed();
    assert!(
        waited >= Duration::from_millis(4_000),
        "not before the 5 s lock ran out: {waited:?}"
    );
    assert_eq!(again.user_property("$.mid"), Some("l1"));
    assert_eq!(again.payload.as_ref(), b"locked");
    let t2 = lock_token(&again);
    assert_ne!(t1, t2);
    assert_eq!(
        settle(&mut dev, "complete", &t1).await,
        b":0\r\n",
        "the expired lock"
    );
    assert_eq!(settle(&mut dev, "complete", &t2).await, b":1\r\n");
    wait_queue(&mut backend, "dev-l", (0, 0, 0)).await;
    let expiries = node
        .metric("statestore_devicebound_lock_expiries_total")
        .await
        .unwrap_or(0.0);
    assert!(expiries >= 1.0, "lock expiries counted: {expiries}");
}

/// §4 feedback: messages sent with `ACK full` yield `Success` when completed and `Rejected`
/// when rejected; the records arrive batched on `messages/servicebound/feedback` (content
/// type, `$.lt`, `iothub-enqueuedtime`, IoT Hub's JSON fields in order), and
/// `FEEDBACK COMPLETE <token>` settles a batch once.
#[tokio::test]
async fn s4_feedback_batches_arrive_with_exact_fields_and_feedback_complete_settles() {
    let (broker, node) = start_single(&[]).await;
    let mut backend = connect(&broker, "t95-backend-feedback").await;
    backend.subscribe(FEEDBACK_TOPIC).await;
    let mut dev = device(&broker, "dev-f").await;
    for (id, ack) in [("f1", "full"), ("f2", "FULL"), ("f3", "none")] {
        assert_eq!(
            dcall(
                &mut backend,
                "SEND",
                &[
                    b"SEND",
                    b"dev-f",
                    id.as_bytes(),
                    b"x",
                    b"ACK",
                    ack.as_bytes(),
                    b"GENERATION",
                    b"gen-7"
                ]
            )
            .await,
            b"+OK\r\n"
        );
    }
    let started = now_ms();
    for action in ["complete", "reject", "complete"] {
        let delivery = next_delivery(&mut dev, DELIVERY_WAIT)
            .await
            .expect("delivered");
        assert_eq!(
            settle(&mut dev, action, &lock_token(&delivery)).await,
            b":1\r\n"
        );
    }
    // Both records arrive (the first batch may be cut at once, the next 15 s later).
    let mut records: Vec<serde_json::Value> = Vec::new();
    let mut tokens = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    while records.len() < 2 {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let message = backend
            .next(left)
            .await
            .unwrap_or_else(|| panic!("feedback records so far: {records:?}"));
        if message.topic != FEEDBACK_TOPIC {
            continue;
        }
        assert_eq!(
            message.properties.content_type.as_deref(),
            Some("application/vnd.microsoft.iothub.feedback.json")
        );
        let enqueued = message
            .user_property("iothub-enqueuedtime")
            .expect("iothub-enqueuedtime");
        assert!(
            enqueued.ends_with('Z') && enqueued.len() == 24,
            "{enqueued}"
        );
        tokens.push(message.user_property("$.lt").expect("$.lt").to_owned());
        let text = String::from_utf8(message.payload.to_vec()).expect("JSON text");
        let order = [
            "originalMessageId",
            "enqueuedTimeUtc",
            "statusCode",
            "description",
            "deviceId",
            "deviceGenerationId",
        ];
        let positions: Vec<usize> = order
            .iter()
            .map(|k| {
                text.find(&format!("\"{k}\""))
                    .unwrap_or_else(|| panic!("{k} in {text}"))
            })
            .collect();
        assert!(
            positions.windows(2).all(|w| w[0] < w[1]),
            "field order in {text}"
        );
        let batch: Vec<serde_json::Value> = serde_json::from_str(&text).expect("a JSON array");
        assert!(!batch.is_empty());
        records.extend(batch);
    }
    assert_eq!(records.len(), 2, "ACK none yields no record: {records:?}");
    let by_id = |id: &str| {
        records
            .iter()
            .find(|r| r["originalMessageId"] == id)
            .unwrap_or_else(|| panic!("record of {id} in {records:?}"))
            .clone()
    };
    let success = by_id("f1");
    assert_eq!(success["statusCode"], "Success");
    assert_eq!(success["description"], "Success");
    assert_eq!(success["deviceId"], "dev-f");
    assert_eq!(success["deviceGenerationId"], "gen-7");
    let rejected = by_id("f2");
    assert_eq!(rejected["statusCode"], "Rejected");
    assert_eq!(rejected["description"], "Rejected");
    let at = rejected["enqueuedTimeUtc"].as_str().expect("a time");
    assert!(at.ends_with('Z') && at.len() == 24, "{at}");
    assert!(now_ms() - started < 60_000);
    for token in &tokens {
        // The count of tokens issued is in the token; the secret after it is not guessable.
        let guessed = format!("{}{}", &token[..17], "0".repeat(32));
        assert_eq!(
            dcall(
                &mut backend,
                "FEEDBACK COMPLETE with a guessed token",
                &[b"FEEDBACK", b"COMPLETE", guessed.as_bytes()]
            )
            .await,
            b":0\r\n"
        );
        assert_eq!(
            dcall(
                &mut backend,
                "FEEDBACK COMPLETE",
                &[b"FEEDBACK", b"COMPLETE", token.as_bytes()]
            )
            .await,
            b":1\r\n"
        );
        assert_eq!(
            dcall(
                &mut backend,
                "FEEDBACK COMPLETE again",
                &[b"FEEDBACK", b"complete", token.as_bytes()]
            )
            .await,
            b":0\r\n"
        );
    }
    let published = node
        .metric(r#"statestore_devicebound_feedback_batches_total{event="published"}"#)
        .await
        .unwrap_or(0.0);
    assert!(
        published >= tokens.len() as f64,
        "batches published: {published}"
    );
    let settled = node
        .metric(r#"statestore_devicebound_feedback_batches_total{event="settled"}"#)
        .await
        .unwrap_or(0.0);
    assert_eq!(settled, tokens.len() as f64);
}
