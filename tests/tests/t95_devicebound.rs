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

#[allow(dead_code)]
const SETTLE_WAIT: Duration = Duration::from_secs(10);
