//! Raw wire-level checks of reply properties (§1.2), payloads (§2), error messages (§5.1),
//! protocol version refusal (§5.3), notification topics and payloads (§7) and client-id
//! discovery (§1.1), with a hand-driven MQTT 5 client.

use std::time::Duration;

use rumqttc::v5::mqttbytes::QoS;
use statestore_tests::raw::{REQUEST_TOPIC, RawClient, Received, resp};
use statestore_tests::raw_helpers::*;

/// Sends `payload` as a well-formed request and waits for its (checked) reply and for
/// `notifications` messages on `notify_topic`; returns (reply, notifications on that topic).
async fn call_and_notifications(
    client: &mut RawClient,
    what: &str,
    payload: &[u8],
    notify_topic: &str,
    notifications: usize,
) -> (Received, Vec<Received>) {
    let props = props(client);
    let sent = props.clone();
    let correlation = props.correlation_data.clone();
    send(client, QoS::AtLeastOnce, payload, props).await;
    let got = collect_until(client, REPLY_WAIT, |seen| {
        seen.iter()
            .any(|m| m.properties.correlation_data == correlation)
            && seen.iter().filter(|m| m.topic == notify_topic).count() >= notifications
    })
    .await;
    let reply = got
        .iter()
        .find(|m| m.properties.correlation_data == correlation && m.topic != REQUEST_TOPIC)
        .cloned()
        .unwrap_or_else(|| panic!("{what}: no reply; got {got:?}"));
    assert_envelope(what, &reply, &sent);
    let notes: Vec<Received> = got
        .into_iter()
        .filter(|m| m.topic == notify_topic)
        .collect();
    (reply, notes)
}

/// §1.2: on each of the three SDK response-topic shapes (Rust, Go hex, .NET), every reply
/// (+OK, bulk, integer and -ERR) is published QoS 1 to exactly the request's response topic
/// and nowhere else, echoes the correlation data, carries `__stat`=200 and `__protVer`=1.0,
/// content type octet-stream or none, payload format indicator 0/absent, and a message
/// expiry no larger than the request's.
#[tokio::test]
async fn s1_2_reply_envelope_on_all_three_response_topic_shapes() {
    let (broker, _node) = start_single(&[]).await;
    // An observer of every `clients/...` topic sees where replies really go.
    let mut observer = RawClient::connect(broker.port, "t50-observer").await;
    observer.subscribe("clients/#").await;
    for shape in Shape::ALL {
        let id = format!("t50-shape-{shape:?}").to_lowercase();
        let mut client = connect(&broker, &id).await;
        let topic = shape.topic(&id);
        let key = format!("shape-key-{shape:?}");
        let requests: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (resp(&[b"SET", key.as_bytes(), b"v"]), b"+OK\r\n".to_vec()),
            (resp(&[b"GET", key.as_bytes()]), b"$1\r\nv\r\n".to_vec()),
            (resp(&[b"DEL", key.as_bytes()]), b":1\r\n".to_vec()),
            (resp(&[b"GET", key.as_bytes()]), b"$-1\r\n".to_vec()),
            (resp(&[b"NOPE", key.as_bytes()]), err("unknown command")),
        ];
        for (expiry, (payload, expected)) in [10u32, 3, 60, 10, 5].into_iter().zip(requests) {
            let what = format!("{shape:?} {:?}", String::from_utf8_lossy(&payload));
            let mut p = props_on(&mut client, &topic);
            p.message_expiry_interval = Some(expiry);
            let correlation = p.correlation_data.clone();
            let reply = call(&mut client, &what, &payload, p).await;
            assert_payload(&what, &reply, &expected);
            // Exactly one message with this correlation under clients/#, on that topic.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let seen: Vec<Received> = drain(&mut observer, Duration::from_millis(100))
                .await
                .into_iter()
                .filter(|m| m.properties.correlation_data == correlation)
                .collect();
            assert_eq!(
                seen.len(),
                1,
                "{what}: observer saw {} replies: {seen:?}",
                seen.len()
            );
            assert_eq!(seen[0].topic, topic, "{what}: observer saw it elsewhere");
        }
    }
}

/// §1.2: the reply's Message Expiry is the remaining request expiry (never above the
/// request's), and a request without Message Expiry is still answered.
#[tokio::test]
async fn s1_2_message_expiry_is_bounded_by_request_expiry() {
    let (broker, _node) = start_single(&[]).await;
    let mut client = connect(&broker, "t50-expiry").await;
    for expiry in [1u32, 2, 7, 30, 3600] {
        let mut p = props(&mut client);
        p.message_expiry_interval = Some(expiry);
        let reply = call(
            &mut client,
            &format!("GET with expiry {expiry}"),
            &resp(&[b"GET", b"nokey"]),
            p,
        )
        .await;
        let got = reply
            .properties
            .message_expiry_interval
            .expect("reply carries a message expiry");
        // Remaining expiry, rounded up: at most the request's, and (loopback, fast) at least
        // the request's minus one.
        assert!(
            got <= expiry && got + 1 >= expiry,
            "expiry {expiry}: reply expiry {got}"
        );
    }
    let mut p = props(&mut client);
    p.message_expiry_interval = None;
    let reply = call(
        &mut client,
        "GET without expiry",
        &resp(&[b"GET", b"nokey"]),
        p,
    )
    .await;
    assert_payload("GET without expiry", &reply, b"$-1\r\n");
}

/// §1.2 and §2: byte-exact payloads of every reply kind, and `__ts` presence: present on
/// SET +OK and SET :-1 (equal to the stored version), on GET hits (equal to the SET's), on
/// DEL/VDEL :1; absent on a GET miss. A SET's version is above the request's `__ts`.
#[tokio::test]
async fn s1_2_ts_presence_and_byte_exact_payloads() {
    let (broker, _node) = start_single(&[]).await;
    let mut c = connect(&broker, "t50-payloads").await;

    // SET +OK with __ts above the request's __ts.
    let mut p = props(&mut c);
    let request_ts = hlc(statestore_tests::now_ms() - 5_000, 7, "t50-client");
    set_user(&mut p, "__ts", &request_ts);
    let set = call(&mut c, "SET k", &resp(&[b"SET", b"k", b"v1"]), p).await;
    assert_payload("SET k", &set, b"+OK\r\n");
    let v1 = ts_of("SET k", &set);
    let parsed = parse_hlc(&v1).expect("SET __ts is an HLC");
    let requested = parse_hlc(&request_ts).expect("request ts");
    assert!(
        (parsed.0, parsed.1) > (requested.0, requested.1),
        "SET version {v1} must be above the request's {request_ts}"
    );

    // GET hit: same version.
    let get = cmd(&mut c, "GET k", &[b"GET", b"k"]).await;
    assert_payload("GET k", &get, b"$2\r\nv1\r\n");
    assert_eq!(ts_of("GET k", &get), v1, "GET version = SET version");

    // SET NX on an existing key: :-1 with the stored version.
    let nx = cmd(&mut c, "SET k NX", &[b"SET", b"k", b"other", b"NX"]).await;
    assert_payload("SET k NX", &nx, b":-1\r\n");
    assert_eq!(ts_of("SET k NX", &nx), v1, ":-1 carries the stored version");

    // SET NEX with a different value: :-1, stored version; with the same value: +OK.
    let nex = cmd(&mut c, "SET k NEX diff", &[b"SET", b"k", b"x", b"NEX"]).await;
    assert_payload("SET k NEX diff", &nex, b":-1\r\n");
    assert_eq!(ts_of("SET k NEX diff", &nex), v1);
    let nex_same = cmd(&mut c, "SET k NEX same", &[b"SET", b"k", b"v1", b"NEX"]).await;
    assert_payload("SET k NEX same", &nex_same, b"+OK\r\n");
    let v2 = ts_of("SET k NEX same", &nex_same);
    assert_ne!(v2, v1, "a successful SET issues a new version");

    // GET miss: $-1, no __ts.
    let miss = cmd(&mut c, "GET missing", &[b"GET", b"missing"]).await;
    assert_payload("GET missing", &miss, b"$-1\r\n");
    assert_eq!(
        miss.user_property("__ts"),
        None,
        "GET miss must not carry __ts"
    );

    // Empty value: $0\r\n\r\n.
    let set_empty = cmd(&mut c, "SET empty", &[b"SET", b"empty", b""]).await;
    assert_payload("SET empty", &set_empty, b"+OK\r\n");
    ts_of("SET empty", &set_empty);
    let get_empty = cmd(&mut c, "GET empty", &[b"GET", b"empty"]).await;
    assert_payload("GET empty", &get_empty, b"$0\r\n\r\n");
    ts_of("GET empty", &get_empty);

    // Binary-safe value and key, including CRLF.
    let value: &[u8] = b"a\r\nb\x00\xff\r\n";
    let key: &[u8] = b"bin\r\n\x01key";
    let set_bin = cmd(&mut c, "SET binary", &[b"SET", key, value]).await;
    assert_payload("SET binary", &set_bin, b"+OK\r\n");
    let get_bin = cmd(&mut c, "GET binary", &[b"GET", key]).await;
    assert_payload("GET binary", &get_bin, &bulk(value));

    // DEL :1 with __ts, then :0.
    let del = cmd(&mut c, "DEL k", &[b"DEL", b"k"]).await;
    assert_payload("DEL k", &del, b":1\r\n");
    ts_of("DEL k", &del);
    let del0 = cmd(&mut c, "DEL k again", &[b"DEL", b"k"]).await;
    assert_payload("DEL k again", &del0, b":0\r\n");

    // VDEL: mismatch :-1, match :1 with __ts, missing :0.
    cmd(&mut c, "SET vk", &[b"SET", b"vk", b"val"]).await;
    let mismatch = cmd(&mut c, "VDEL mismatch", &[b"VDEL", b"vk", b"nope"]).await;
    assert_payload("VDEL mismatch", &mismatch, b":-1\r\n");
    let vdel = cmd(&mut c, "VDEL match", &[b"VDEL", b"vk", b"val"]).await;
    assert_payload("VDEL match", &vdel, b":1\r\n");
    ts_of("VDEL match", &vdel);
    let vdel0 = cmd(&mut c, "VDEL missing", &[b"VDEL", b"vk", b"val"]).await;
    assert_payload("VDEL missing", &vdel0, b":0\r\n");

    // KEYNOTIFY +OK (twice), STOP on an unobserved key :0.
    for round in 0..2 {
        let kn = cmd(&mut c, "KEYNOTIFY", &[b"KEYNOTIFY", b"watched"]).await;
        assert_payload(&format!("KEYNOTIFY #{round}"), &kn, b"+OK\r\n");
    }
    let stop = cmd(
        &mut c,
        "KEYNOTIFY STOP",
        &[b"KEYNOTIFY", b"unwatched", b"STOP"],
    )
    .await;
    assert_payload("KEYNOTIFY STOP unobserved", &stop, b":0\r\n");

    // An error reply: -ERR with one space, __stat 200 (checked by `cmd`).
    let unknown = cmd(&mut c, "unknown", &[b"FROB", b"k"]).await;
    assert_payload("unknown", &unknown, &err("unknown command"));
}

/// One error case: name, payload, user properties to set (`None` removes), expected message.
type ErrorCase = (
    &'static str,
    Vec<u8>,
    Vec<(&'static str, Option<String>)>,
    &'static str,
);

/// §5.1: each error message that can be provoked over the wire is sent byte-exact as
/// `-ERR <message>\r\n` inside a `__stat`=200 reply.
#[tokio::test]
async fn s5_1_exact_error_messages() {
    let (broker, _node) = start_single(&[]).await;
    let mut c = connect(&broker, "t50-errors").await;
    let now = statestore_tests::now_ms();
    let future = hlc(now + 600_000, 0, "future-client");

    let cases: Vec<ErrorCase> = vec![
        (
            "bad SET option",
            resp(&[b"SET", b"k", b"v", b"BOGUS"]),
            vec![],
            "syntax error",
        ),
        (
            "malformed RESP",
            b"*2\r\n$3\r\nGET\r\n".to_vec(),
            vec![],
            "syntax error",
        ),
        (
            "unknown verb",
            resp(&[b"INCR", b"k"]),
            vec![],
            "unknown command",
        ),
        (
            "GET without key",
            resp(&[b"GET"]),
            vec![],
            "wrong number of arguments",
        ),
        (
            "SET without value",
            resp(&[b"SET", b"k"]),
            vec![],
            "wrong number of arguments",
        ),
        (
            "DEL with two keys",
            resp(&[b"DEL", b"a", b"b"]),
            vec![],
            "wrong number of arguments",
        ),
        (
            "SET without __ts",
            resp(&[b"SET", b"k", b"v"]),
            vec![("__ts", None)],
            "missing timestamp",
        ),
        (
            "SET with __ts not an HLC",
            resp(&[b"SET", b"k", b"v"]),
            vec![("__ts", Some("yesterday".into()))],
            "malformed timestamp",
        ),
        (
            "SET with two-field __ts",
            resp(&[b"SET", b"k", b"v"]),
            vec![("__ts", Some("1696374425000:1".into()))],
            "malformed timestamp",
        ),
        (
            "GET with four-field __ts",
            resp(&[b"GET", b"k"]),
            vec![("__ts", Some("1696374425000:1:a:b".into()))],
            "malformed timestamp",
        ),
        (
            "SET with __ft not an HLC",
            resp(&[b"SET", b"k", b"v"]),
            vec![("__ft", Some("not-a-token".into()))],
            "malformed timestamp",
        ),
        (
            "DEL with non-numeric __ft",
            resp(&[b"DEL", b"k"]),
            vec![("__ft", Some("x:y:z".into()))],
            "malformed timestamp",
        ),
        (
            "GET empty key",
            resp(&[b"GET", b""]),
            vec![],
            "the key length is zero",
        ),
        (
            "SET empty key",
            resp(&[b"SET", b"", b"v"]),
            vec![],
            "the key length is zero",
        ),
        (
            "SET __ts 10 min ahead",
            resp(&[b"SET", b"k", b"v"]),
            vec![("__ts", Some(future.clone()))],
            "the request timestamp is too far in the future; ensure that the client and broker system clocks are synchronized",
        ),
        (
            "SET __ft 10 min ahead",
            resp(&[b"SET", b"k", b"v"]),
            vec![("__ft", Some(future.clone()))],
            "the request fencing token timestamp is too far in the future; ensure that the client and broker system clocks are synchronized",
        ),
    ];
    for (what, payload, users, expected) in cases {
        let mut p = props(&mut c);
        for (name, value) in users {
            match value {
                Some(v) => set_user(&mut p, name, &v),
                None => remove_user(&mut p, name),
            }
        }
        let reply = call(&mut c, what, &payload, p).await;
        assert_payload(what, &reply, &err(expected));
    }
    // None of the refused SETs stored anything.
    let get = cmd(&mut c, "GET k after refusals", &[b"GET", b"k"]).await;
    assert_payload("GET k after refusals", &get, b"$-1\r\n");

    // Fencing (§4): a SET with __ft stores the token.
    let token = hlc(now, 5, "lock-owner");
    let lower = hlc(now, 4, "lock-owner");
    let higher = hlc(now, 6, "lock-owner");
    let mut p = props(&mut c);
    set_user(&mut p, "__ft", &token);
    let fenced = call(&mut c, "fenced SET", &resp(&[b"SET", b"f", b"1"]), p).await;
    assert_payload("fenced SET", &fenced, b"+OK\r\n");
    for (what, payload) in [
        ("SET without __ft", resp(&[b"SET", b"f", b"2"])),
        ("DEL without __ft", resp(&[b"DEL", b"f"])),
        ("VDEL without __ft", resp(&[b"VDEL", b"f", b"1"])),
    ] {
        let p = props(&mut c);
        let reply = call(&mut c, what, &payload, p).await;
        assert_payload(
            what,
            &reply,
            &err("a fencing token is required for this request"),
        );
    }
    for (what, payload) in [
        ("SET with lower __ft", resp(&[b"SET", b"f", b"2"])),
        ("DEL with lower __ft", resp(&[b"DEL", b"f"])),
        ("VDEL with lower __ft", resp(&[b"VDEL", b"f", b"1"])),
    ] {
        let mut p = props(&mut c);
        set_user(&mut p, "__ft", &lower);
        let reply = call(&mut c, what, &payload, p).await;
        assert_payload(
            what,
            &reply,
            &err(
                "the request fencing token is a lower version than the fencing token protecting the resource",
            ),
        );
    }
    // GET needs no token and sees the value unchanged.
    let get = cmd(&mut c, "GET fenced", &[b"GET", b"f"]).await;
    assert_payload("GET fenced", &get, b"$1\r\n1\r\n");
    // Equal token proceeds; a higher one is stored, after which the old one is lower.
    let mut p = props(&mut c);
    set_user(&mut p, "__ft", &token);
    let equal = call(&mut c, "SET equal __ft", &resp(&[b"SET", b"f", b"2"]), p).await;
    assert_payload("SET equal __ft", &equal, b"+OK\r\n");
    let mut p = props(&mut c);
    set_user(&mut p, "__ft", &higher);
    let up = call(&mut c, "SET higher __ft", &resp(&[b"SET", b"f", b"3"]), p).await;
    assert_payload("SET higher __ft", &up, b"+OK\r\n");
    let mut p = props(&mut c);
    set_user(&mut p, "__ft", &token);
    let stale = call(&mut c, "DEL with old __ft", &resp(&[b"DEL", b"f"]), p).await;
    assert_payload(
        "DEL with old __ft",
        &stale,
        &err(
            "the request fencing token is a lower version than the fencing token protecting the resource",
        ),
    );
}

/// §9 / §5.1: with `--max-keys 2`, a SET of a third key is `-ERR the quota has been
/// exceeded`, while overwriting an existing key still works and a DEL frees room.
#[tokio::test]
async fn s9_key_quota_exceeded() {
    let (broker, _node) = start_single(&["--max-keys", "2"]).await;
    let mut c = connect(&broker, "t50-quota").await;
    for key in [&b"a"[..], b"b"] {
        let r = cmd(&mut c, "SET under quota", &[b"SET", key, b"v"]).await;
        assert_payload("SET under quota", &r, b"+OK\r\n");
    }
    let over = cmd(&mut c, "SET c over quota", &[b"SET", b"c", b"v"]).await;
    assert_payload(
        "SET c over quota",
        &over,
        &err("the quota has been exceeded"),
    );
    let get = cmd(&mut c, "GET c", &[b"GET", b"c"]).await;
    assert_payload("GET c", &get, b"$-1\r\n");
    let overwrite = cmd(&mut c, "overwrite a", &[b"SET", b"a", b"v2"]).await;
    assert_payload("overwrite a at quota", &overwrite, b"+OK\r\n");
    let del = cmd(&mut c, "DEL a", &[b"DEL", b"a"]).await;
    assert_payload("DEL a", &del, b":1\r\n");
    let c_ok = cmd(&mut c, "SET c after DEL", &[b"SET", b"c", b"v"]).await;
    assert_payload("SET c after DEL", &c_ok, b"+OK\r\n");
}

/// §2: verbs and options are matched case-insensitively (lower and mixed case work the same
/// as upper case).
#[tokio::test]
async fn s2_lower_case_verbs_and_options_accepted() {
    let (broker, _node) = start_single(&[]).await;
    let mut c = connect(&broker, "t50-lowercase").await;
    let steps: Vec<(&[&[u8]], &[u8])> = vec![
        (&[b"set", b"lk", b"v"], b"+OK\r\n"),
        (&[b"get", b"lk"], b"$1\r\nv\r\n"),
        (&[b"set", b"lk", b"w", b"nx"], b":-1\r\n"),
        (&[b"Set", b"lk", b"v", b"nex", b"px", b"60000"], b"+OK\r\n"),
        (&[b"sEt", b"lk2", b"x", b"Px", b"60000"], b"+OK\r\n"),
        (&[b"keynotify", b"lk"], b"+OK\r\n"),
        (&[b"keynotify", b"lk", b"stop"], b"+OK\r\n"),
        (&[b"vdel", b"lk", b"v"], b":1\r\n"),
        (&[b"del", b"lk2"], b":1\r\n"),
        (&[b"Get", b"lk2"], b"$-1\r\n"),
    ];
    for (parts, expected) in steps {
        let what = format!("{:?}", resp(parts).escape_ascii().to_string());
        let reply = cmd(&mut c, &what, parts).await;
        assert_payload(&what, &reply, expected);
    }
}

/// §5.3: `__protVer` 2.0 is answered with `__stat`=505, `__supProtMajVer`=1,
/// `__requestProtVer`=2.0 and an empty payload, on the request's topic with its correlation;
/// the command is not executed. `__protVer` 1.x and absent are served.
#[tokio::test]
async fn s5_3_protocol_major_2_refused_with_505() {
    let (broker, _node) = start_single(&[]).await;
    let mut c = connect(&broker, "t50-protver").await;
    let mut p = props(&mut c);
    set_user(&mut p, "__protVer", "2.0");
    let sent = p.clone();
    let reply = c
        .request_with(&resp(&[b"SET", b"pk", b"v"]), p, REPLY_WAIT)
        .await
        .expect("a 505 reply");
    assert_eq!(Some(&reply.topic), sent.response_topic.as_ref());
    assert_eq!(reply.properties.correlation_data, sent.correlation_data);
    assert_eq!(reply.user_property("__stat"), Some("505"));
    assert_eq!(reply.user_property("__supProtMajVer"), Some("1"));
    assert_eq!(reply.user_property("__requestProtVer"), Some("2.0"));
    assert!(
        reply.payload.is_empty(),
        "505 payload must be empty: {:?}",
        reply.payload
    );
    let get = cmd(&mut c, "GET pk", &[b"GET", b"pk"]).await;
    assert_payload("SET under 2.0 was not executed", &get, b"$-1\r\n");

    let mut p = props(&mut c);
    set_user(&mut p, "__protVer", "1.7");
    let minor = call(&mut c, "protVer 1.7", &resp(&[b"SET", b"pk", b"v"]), p).await;
    assert_payload("protVer 1.7", &minor, b"+OK\r\n");
    let mut p = props(&mut c);
    remove_user(&mut p, "__protVer");
    let absent = call(&mut c, "protVer absent", &resp(&[b"GET", b"pk"]), p).await;
    assert_payload("protVer absent", &absent, b"$1\r\nv\r\n");
}

/// §7: after KEYNOTIFY, a SET and a DEL of the key each publish one QoS 1 notification on
/// `clients/statestore/v1/<id>/<HEX(client)>/command/notify/<HEX(key)>` (upper-case hex)
/// with the exact payload, `__ts` equal to the reply's version, content type octet-stream
/// and `__protVer` 1.0; changes before KEYNOTIFY and after STOP are not notified.
#[tokio::test]
async fn s7_notifications_upper_hex_topic_exact_payload_and_ts() {
    let (broker, _node) = start_single(&[]).await;
    let id = "t50-notify-abc";
    let mut c = connect(&broker, id).await;
    let key: &[u8] = b"key\xab\x0c-def";
    let topic = notify_topic(id, key);
    assert!(topic.ends_with("/command/notify/6B6579AB0C2D646566"));
    c.subscribe(&format!(
        "{NOTIFY_PREFIX}/{}/command/notify/+",
        hex_upper(id.as_bytes())
    ))
    .await;

    // A change before KEYNOTIFY: no notification.
    let (r, _) = call_and_notifications(
        &mut c,
        "SET before",
        &resp(&[b"SET", key, b"early"]),
        &topic,
        0,
    )
    .await;
    assert_payload("SET before", &r, b"+OK\r\n");
    let stray = drain(&mut c, Duration::from_millis(500)).await;
    assert!(
        stray.iter().all(|m| m.topic != topic),
        "change before KEYNOTIFY was notified: {stray:?}"
    );
    let r = cmd(&mut c, "KEYNOTIFY", &[b"KEYNOTIFY", key]).await;
    assert_payload("KEYNOTIFY", &r, b"+OK\r\n");

    // SET: one notification, exact payload, __ts = reply version.
    let value: &[u8] = b"new\r\nvalue";
    let (r, notes) = call_and_notifications(
        &mut c,
        "SET after KEYNOTIFY",
        &resp(&[b"SET", key, value]),
        &topic,
        1,
    )
    .await;
    assert_payload("SET after KEYNOTIFY", &r, b"+OK\r\n");
    let set_version = ts_of("SET after KEYNOTIFY", &r);
    assert_eq!(notes.len(), 1, "one SET notification: {notes:?}");
    check_notification(&notes[0], &notify_set(value), &set_version);

    // DEL: one DELETE notification with the deletion's version.
    let (r, notes) = call_and_notifications(&mut c, "DEL", &resp(&[b"DEL", key]), &topic, 1).await;
    assert_payload("DEL", &r, b":1\r\n");
    let del_version = ts_of("DEL", &r);
    assert_eq!(notes.len(), 1, "one DELETE notification: {notes:?}");
    check_notification(&notes[0], NOTIFY_DELETE, &del_version);
    let a = parse_hlc(&set_version).expect("hlc");
    let b = parse_hlc(&del_version).expect("hlc");
    assert!(
        (b.0, b.1) > (a.0, a.1),
        "deletion version after SET version"
    );

    // VDEL deletion also notifies DELETE.
    let (r, notes) = call_and_notifications(
        &mut c,
        "SET for VDEL",
        &resp(&[b"SET", key, b"x"]),
        &topic,
        1,
    )
    .await;
    assert_payload("SET for VDEL", &r, b"+OK\r\n");
    assert_eq!(notes.len(), 1, "SET notification before VDEL: {notes:?}");
    let (r, notes) =
        call_and_notifications(&mut c, "VDEL", &resp(&[b"VDEL", key, b"x"]), &topic, 1).await;
    assert_payload("VDEL", &r, b":1\r\n");
    assert_eq!(notes.len(), 1, "one VDEL notification: {notes:?}");
    check_notification(&notes[0], NOTIFY_DELETE, &ts_of("VDEL", &r));

    // STOP: further changes are not notified (positive control above).
    let r = cmd(&mut c, "STOP", &[b"KEYNOTIFY", key, b"STOP"]).await;
    assert_payload("STOP", &r, b"+OK\r\n");
    let (r, _) = call_and_notifications(
        &mut c,
        "SET after STOP",
        &resp(&[b"SET", key, b"late"]),
        &topic,
        0,
    )
    .await;
    assert_payload("SET after STOP", &r, b"+OK\r\n");
    let after = drain(&mut c, NO_REPLY_WAIT).await;
    assert!(
        after.iter().all(|m| m.topic != topic),
        "notified after STOP: {after:?}"
    );
}

fn check_notification(note: &Received, payload: &[u8], version: &str) {
    assert_payload("notification", note, payload);
    assert_eq!(
        note.user_property("__ts"),
        Some(version),
        "notification __ts = the key's version"
    );
    assert_eq!(
        note.properties.content_type.as_deref(),
        Some("application/octet-stream")
    );
    assert_eq!(note.user_property("__protVer"), Some("1.0"));
    assert_eq!(note.qos, QoS::AtLeastOnce, "notification QoS 1");
}

/// §1.1: without `__srcId` the client id comes from a `clients/{id}/...` response topic
/// (hex-decoded for the Go shape): KEYNOTIFY registers it and a SET notifies
/// `.../<HEX(id)>/command/notify/<HEX(key)>`, for each of the three shapes.
#[tokio::test]
async fn s1_1_client_id_from_response_topic_when_srcid_absent() {
    let (broker, _node) = start_single(&[]).await;
    for shape in Shape::ALL {
        let id = format!("t50-nosrc-{shape:?}").to_lowercase();
        let mut c = connect(&broker, &id).await;
        // Catch every notification, whatever client segment it carries.
        c.subscribe(&format!("{NOTIFY_PREFIX}/+/command/notify/+"))
            .await;
        let key = format!("nosrc-key-{shape:?}");
        let mut p = props_on(&mut c, &shape.topic(&id));
        remove_user(&mut p, "__srcId");
        let r = call(
            &mut c,
            &format!("{shape:?} KEYNOTIFY"),
            &resp(&[b"KEYNOTIFY", key.as_bytes()]),
            p,
        )
        .await;
        assert_payload(&format!("{shape:?} KEYNOTIFY"), &r, b"+OK\r\n");
        let expected = notify_topic(&id, key.as_bytes());
        let p = props(&mut c);
        let correlation = p.correlation_data.clone();
        let sent = p.clone();
        send(
            &c,
            QoS::AtLeastOnce,
            &resp(&[b"SET", key.as_bytes(), b"w"]),
            p,
        )
        .await;
        let got = collect_until(&mut c, REPLY_WAIT, |seen| {
            seen.iter()
                .any(|m| m.properties.correlation_data == correlation)
                && seen.iter().any(|m| m.topic.starts_with(NOTIFY_PREFIX))
        })
        .await;
        let r = got
            .iter()
            .find(|m| m.properties.correlation_data == correlation && m.topic != REQUEST_TOPIC)
            .unwrap_or_else(|| panic!("{shape:?} SET: no reply; got {got:?}"));
        assert_envelope(&format!("{shape:?} SET"), r, &sent);
        assert_payload(&format!("{shape:?} SET"), r, b"+OK\r\n");
        let notes: Vec<&Received> = got
            .iter()
            .filter(|m| m.topic.starts_with(NOTIFY_PREFIX))
            .collect();
        assert_eq!(
            notes.iter().map(|m| m.topic.as_str()).collect::<Vec<_>>(),
            vec![expected.as_str()],
            "{shape:?}: expected exactly one notification, on {expected}"
        );
        check_notification(notes[0], &notify_set(b"w"), &ts_of("SET", r));
    }
}

/// §1.1: KEYNOTIFY with neither `__srcId` nor a `clients/{id}/` response topic is
/// `-ERR syntax error`; the same request with `__srcId` is `+OK`, and GET/SET from such a
/// topic are served. (§1: `replies/` is one of this node's reply prefixes.)
#[tokio::test]
async fn s1_1_keynotify_without_any_client_id_is_syntax_error() {
    let (broker, _node) = start_single(&[
        "--reply-topic-prefix",
        "clients/",
        "--reply-topic-prefix",
        "replies/",
    ])
    .await;
    let mut c = connect(&broker, "t50-anon").await;
    let topic = "replies/t50-anon/statestore";
    c.subscribe(topic).await;
    let mut p = props_on(&mut c, topic);
    remove_user(&mut p, "__srcId");
    let r = call(
        &mut c,
        "anonymous KEYNOTIFY",
        &resp(&[b"KEYNOTIFY", b"ak"]),
        p,
    )
    .await;
    assert_payload("anonymous KEYNOTIFY", &r, &err("syntax error"));

    let p = props_on(&mut c, topic);
    let r = call(
        &mut c,
        "KEYNOTIFY with __srcId",
        &resp(&[b"KEYNOTIFY", b"ak"]),
        p,
    )
    .await;
    assert_payload("KEYNOTIFY with __srcId", &r, b"+OK\r\n");

    let mut p = props_on(&mut c, topic);
    remove_user(&mut p, "__srcId");
    let r = call(&mut c, "anonymous SET", &resp(&[b"SET", b"ak", b"v"]), p).await;
    assert_payload("anonymous SET", &r, b"+OK\r\n");
    let mut p = props_on(&mut c, topic);
    remove_user(&mut p, "__srcId");
    let r = call(&mut c, "anonymous GET", &resp(&[b"GET", b"ak"]), p).await;
    assert_payload("anonymous GET", &r, b"$1\r\nv\r\n");
}

/// Issue 12: AIO 1.x clients may mark a SET `aio-persistence: true`; statestore persists
/// everything, so the property is accepted and ignored, as is any other unknown user property.
#[tokio::test]
async fn aio_persistence_and_unknown_user_properties_are_ignored() {
    let (broker, _node) = start_single(&[]).await;
    let mut c = connect(&broker, "t50-persist").await;
    for (what, name, value) in [
        ("aio-persistence", "aio-persistence", "true"),
        ("unknown property", "x-vendor-thing", "\u{1F600}"),
    ] {
        let mut p = props(&mut c);
        p.user_properties.push((name.to_owned(), value.to_owned()));
        let reply = call(&mut c, what, &resp(&[b"SET", what.as_bytes(), b"kept"]), p).await;
        assert_payload(what, &reply, b"+OK\r\n");
        let get = cmd(&mut c, what, &[b"GET", what.as_bytes()]).await;
        assert_payload(what, &get, &bulk(b"kept"));
    }
}

/// The test tooling's own client, after the broker dropped it and its session (a restart; the
/// fault tests pause the broker for longer than the keep-alive, which drops it the same way),
/// subscribes again: before, it went on publishing requests and never saw a reply or a
/// delivery again (100 membership power cuts: the closing QUEUE reads went unanswered while
/// the leader answered every one).
#[tokio::test]
async fn a_raw_client_subscribes_again_after_the_broker_dropped_its_session() {
    let mut broker = statestore_tests::broker::Broker::start();
    let mut listener = RawClient::connect(broker.port, "resubscriber").await;
    listener.subscribe("probe/#").await;
    broker.restart();
    let publisher = RawClient::connect(broker.port, "probe-publisher").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        publisher
            .publish(
                "probe/after-restart",
                QoS::AtLeastOnce,
                bytes::Bytes::from_static(b"seen"),
                Default::default(),
            )
            .await;
        if let Some(message) = listener.next(Duration::from_millis(500)).await {
            assert_eq!(message.topic, "probe/after-restart");
            assert_eq!(&message.payload[..], b"seen");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the listener saw nothing published after the broker's restart within 30 s"
        );
    }
}
