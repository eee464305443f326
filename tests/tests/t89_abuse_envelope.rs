//! Abuse suite (issue 27), the envelope: replies go only where replies belong, a remembered
//! reply answers only a retry of the same request, and the device-bound queues cannot be
//! settled by guessing. Each test runs a 3-node cluster behind a real Mosquitto with a
//! well-behaved SDK client working beside the attacker; the attacker has only what every
//! application on a shared broker has (publish on the request topics, read its own
//! `clients/<id>/#`). Names the fixes agreed on are constants in `statestore_tests::abuse`.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use statestore_tests::abuse::*;
use statestore_tests::cluster::Cluster;
use statestore_tests::devicebound::{
    DEVICEBOUND_TOPIC, FEEDBACK_TOPIC, dcall, dcall_with, device, lock_token, next_delivery, queue,
    settle_as,
};
use statestore_tests::node::statestore_bin;
use statestore_tests::raw::{REQUEST_TOPIC, RawClient, resp};
use statestore_tests::raw_helpers::{
    NOTIFY_PREFIX, REPLY_WAIT, assert_payload, assert_still_serving, call, cmd, connect, props,
};

/// Starts a 3-node cluster and waits for a serving leader.
async fn cluster() -> Cluster {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_ready(Duration::from_secs(60)).await;
    cluster.wait_serving_leader(Duration::from_secs(30)).await;
    cluster
}

/// Response topics an attacker would like the store to publish to: a victim device's
/// delivery, settlement and other topics, the backends' feedback topic, the store's own
/// request and notification topics, a topic outside the reply prefixes, and wildcards.
fn forged_response_topics(victim: &str) -> Vec<String> {
    vec![
        format!("devices/{victim}/messages/devicebound/%24.mid=forged&%24.lt=forged"),
        format!("devices/{victim}/messages/devicebound"),
        format!("devices/{victim}/messages/settle/complete/m0"),
        format!("devices/{victim}/twin/desired"),
        FEEDBACK_TOPIC.to_owned(),
        "messages/servicebound/other".to_owned(),
        REQUEST_TOPIC.to_owned(),
        DEVICEBOUND_TOPIC.to_owned(),
        format!(
            "{NOTIFY_PREFIX}/{}/command/notify/00",
            hex::encode_upper(victim)
        ),
        "factory/line-1/commands".to_owned(),
        "clients/+/reply".to_owned(),
        "clients/t89-attacker/#".to_owned(),
    ]
}

/// Waits until the spy saw the answer carrying `control` (a well-formed request the attacker
/// sent after its forged ones) and the nodes counted `forged` refusals (at most 5 s: on a
/// build that does not refuse them the count never comes).
async fn settle_after(cluster: &mut Cluster, spy: &Spy, control: &Bytes, forged: f64) {
    assert!(
        spy.wait_answer(control, REPLY_WAIT).await,
        "the attacker's well-formed control request was answered (the spy sees it)"
    );
    wait_dropped_on(
        cluster,
        DROP_FORBIDDEN_RESPONSE_TOPIC,
        forged,
        Duration::from_secs(5),
    )
    .await;
}

/// Forged device messages and feedback (issue 27): a state-store request and a device-bound
/// service request whose Response Topic is a victim device's topic, the feedback topic, one of
/// the store's own topics, a topic outside the reply prefixes (`clients/`) or a wildcard get no
/// reply anywhere (a spy on `#` sees no answer carrying the attacker's correlation data except
/// on the attacker's own topic), each is counted as `forbidden_response_topic`, the victim
/// device receives nothing, the well-behaved client is answered within the liveness bound
/// throughout, and the node serves afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_response_topics_are_answered_nowhere() {
    let mut cluster = cluster().await;
    let port = cluster.broker.port;
    let spy = Spy::connect(port, "t89-spy", &["#"]).await;
    let mut victim = device(&cluster.broker, "t89-victim").await;
    let well_behaved = WellBehaved::start(port, "t89-app").await;
    let attacker = Flooder::connect(port, "t89-attacker", &[]).await;
    let dropped_before = dropped_on(&mut cluster, DROP_FORBIDDEN_RESPONSE_TOPIC).await;

    let topics = forged_response_topics("t89-victim");
    let mut forged = 0.0;
    for round in 0..5 {
        for topic in &topics {
            for (request_topic, payload) in [
                (REQUEST_TOPIC, resp(&[b"GET", b"t89-some-key"])),
                (REQUEST_TOPIC, resp(&[b"SET", b"t89-forged", b"x"])),
                (DEVICEBOUND_TOPIC, resp(&[b"QUEUE", b"t89-victim"])),
            ] {
                let mut p = attacker.properties();
                p.response_topic = Some(topic.clone());
                attacker.publish(request_topic, payload, p).await;
                forged += 1.0;
            }
        }
        assert!(
            well_behaved.wait_more(2, ATTACK_CAP).await,
            "round {round}: the well-behaved client made no progress"
        );
    }
    // Well-formed requests after the forged ones: their answers mark the end.
    let control = attacker
        .send(resp(&[b"GET", b"t89-some-key"]), attacker.properties())
        .await;
    let mut p = attacker.properties();
    let device_control = p.correlation_data.clone().expect("correlation");
    p.response_topic = Some(attacker.response_topic());
    attacker
        .publish(DEVICEBOUND_TOPIC, resp(&[b"QUEUE", b"t89-victim"]), p)
        .await;
    settle_after(&mut cluster, &spy, &control, dropped_before + forged).await;
    assert!(spy.wait_answer(&device_control, REPLY_WAIT).await);

    let answered_elsewhere: Vec<Seen> = spy
        .from_attacker()
        .into_iter()
        .filter(|s| s.answer_to_attacker() && s.topic != attacker.response_topic())
        .collect();
    assert!(
        answered_elsewhere.is_empty(),
        "{} answers to forged requests were published, e.g. {:?}",
        answered_elsewhere.len(),
        answered_elsewhere.iter().take(5).collect::<Vec<_>>()
    );
    assert!(
        spy.under("devices/t89-victim/messages/devicebound")
            .is_empty(),
        "the victim device's delivery topic carried messages"
    );
    assert!(
        spy.under(FEEDBACK_TOPIC).is_empty(),
        "the feedback topic carried messages"
    );
    assert!(
        next_delivery(&mut victim, Duration::from_millis(200))
            .await
            .is_none(),
        "the victim device received a delivery"
    );
    let counted = dropped_on(&mut cluster, DROP_FORBIDDEN_RESPONSE_TOPIC).await - dropped_before;
    assert_eq!(
        counted, forged,
        "every forged request is counted as {DROP_FORBIDDEN_RESPONSE_TOPIC}"
    );
    well_behaved
        .finish()
        .await
        .assert_live("forged response topics", 10);
    let mut after = RawClient::connect(port, "t89-after-forged").await;
    assert_still_serving(&mut after, "after forged response topics").await;
}

/// Forged pull replies (issue 27, devicebound.md §3): a device's pull
/// (`devices/{id}/messages/receive`) whose Response Topic is another device's topic, its own
/// delivery or settlement topics, the feedback topic or a topic outside the reply prefixes gets
/// no reply and locks nothing (the message stays Enqueued); a pull answered under the device's
/// own `devices/{id}/` or under `clients/` works, and the well-behaved client is answered
/// within the liveness bound throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_pull_replies_go_nowhere_and_lock_nothing() {
    let mut cluster = cluster().await;
    let port = cluster.broker.port;
    let mallory = "t89-mallory";
    let forged_topics = [
        "devices/t89-victim/messages/devicebound/%24.mid=x&%24.lt=y".to_owned(),
        "devices/t89-victim/inbox".to_owned(),
        format!("devices/{mallory}/messages/devicebound/forged"),
        format!("devices/{mallory}/messages/settle/complete/forged"),
        FEEDBACK_TOPIC.to_owned(),
        "factory/line-1/commands".to_owned(),
    ];
    // The spy covers every forged topic, but not the attacker's own delivery topics: its
    // message must stay queued (nobody online to receive a push) until a pull takes it.
    let mut filters: Vec<&str> = vec![
        "devices/t89-victim/#",
        "messages/#",
        "clients/#",
        "factory/#",
    ];
    filters.extend(forged_topics[2..4].iter().map(String::as_str));
    let spy = Spy::connect(port, "t89-pull-spy", &filters).await;
    let well_behaved = WellBehaved::start(port, "t89-pull-app").await;
    let mut backend = connect(&cluster.broker, "t89-pull-backend").await;
    assert_eq!(
        dcall(
            &mut backend,
            "SEND",
            &[b"SEND", mallory.as_bytes(), b"m1", b"body"]
        )
        .await,
        b"+OK\r\n"
    );
    let attacker = Flooder::connect(port, mallory, &[&format!("devices/{mallory}/inbox")]).await;
    let receive = format!("devices/{mallory}/messages/receive");
    let dropped_before = drops_on(
        &mut cluster,
        Drops::DevicePublishes,
        DROP_FORBIDDEN_RESPONSE_TOPIC,
    )
    .await;
    for topic in &forged_topics {
        let mut p = attacker.properties();
        p.response_topic = Some(topic.clone());
        attacker.publish(&receive, Vec::new(), p).await;
    }
    // The refusals counted mark the end (at most 5 s: a build that answers them counts none).
    wait_drops_on(
        &mut cluster,
        Drops::DevicePublishes,
        DROP_FORBIDDEN_RESPONSE_TOPIC,
        dropped_before + forged_topics.len() as f64,
        Duration::from_secs(5),
    )
    .await;
    let (enqueued, invisible, dead, _) = queue(&mut backend, mallory).await;
    assert_eq!(
        (enqueued, invisible, dead),
        (1, 0, 0),
        "a refused pull locked the message"
    );
    let forged: Vec<Seen> = spy
        .from_attacker()
        .into_iter()
        .filter(|s| s.answer_to_attacker())
        .collect();
    assert!(
        forged.is_empty(),
        "pull replies were published on forged topics: {forged:?}"
    );
    assert_eq!(
        drops_on(
            &mut cluster,
            Drops::DevicePublishes,
            DROP_FORBIDDEN_RESPONSE_TOPIC
        )
        .await
            - dropped_before,
        forged_topics.len() as f64,
        "every forged pull is counted as {DROP_FORBIDDEN_RESPONSE_TOPIC}"
    );

    // Allowed places: under the reply prefix, and under the device's own devices/{id}/.
    let mut p = attacker.properties();
    let correlation = p.correlation_data.clone().expect("correlation");
    p.response_topic = Some(format!("clients/{mallory}/pull"));
    attacker.publish(&receive, Vec::new(), p).await;
    let pulled = attacker
        .reply_to(&correlation, REPLY_WAIT)
        .await
        .expect("a pull answered under clients/ gets the message");
    assert_eq!(&pulled[..], b"body");
    let mut p = attacker.properties();
    p.response_topic = Some(format!("devices/{mallory}/inbox"));
    attacker.publish(&receive, Vec::new(), p).await;
    assert_eq!(
        attacker.wait_others(1, REPLY_WAIT).await,
        1,
        "a pull answered under the device's own devices/{mallory}/ gets its (empty) reply"
    );
    well_behaved
        .finish()
        .await
        .assert_live("forged pull replies", 5);
    let mut after = RawClient::connect(port, "t89-after-pull").await;
    assert_still_serving(&mut after, "after forged pulls").await;
}

/// Reply-memory poisoning (issue 27, protocol §6): an attacker who knows (or guesses) a
/// victim's client id and the correlation data of its next requests sends different SETs under
/// them first; the victim's SETs are executed all the same (each key holds the victim's
/// value), while a true retry of the victim's own request (identical) still gets the
/// remembered reply and takes effect once. The well-behaved client is answered within the
/// liveness bound throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_poisoned_reply_memory_answers_only_the_same_request() {
    let cluster = cluster().await;
    let port = cluster.broker.port;
    let well_behaved = WellBehaved::start(port, "t89-poison-app").await;
    let mut victim = RawClient::connect(port, "t89-victim-app").await;
    let attacker = Flooder::connect(port, "t89-poisoner", &[]).await;
    const REQUESTS: usize = 30;

    // The victim's next correlation data, guessed by the attacker.
    let guesses: Vec<Bytes> = (0..REQUESTS).map(|_| victim.correlation()).collect();
    let poison: Vec<_> = guesses
        .iter()
        .enumerate()
        .map(|(i, correlation)| {
            let mut p = attacker.properties_as(&victim.id);
            p.correlation_data = Some(correlation.clone());
            let key = format!("t89-victim-key-{i}");
            (resp(&[b"SET", key.as_bytes(), b"attacker"]), p)
        })
        .collect();
    let answered = attacker.pipeline(poison, 8, REPLY_WAIT).await;
    assert!(
        answered.iter().all(|r| r.as_deref() == Some(b"+OK\r\n")),
        "the attacker's SETs ran: {answered:?}"
    );

    for (i, correlation) in guesses.iter().enumerate() {
        let key = format!("t89-victim-key-{i}");
        let value = format!("victim-{i}");
        let p = victim.request_properties(correlation.clone());
        let reply = call(
            &mut victim,
            "victim SET",
            &resp(&[b"SET", key.as_bytes(), value.as_bytes()]),
            p,
        )
        .await;
        assert_payload("victim SET", &reply, b"+OK\r\n");
        let got = cmd(&mut victim, "victim GET", &[b"GET", key.as_bytes()]).await;
        assert_payload(
            &format!("key {i} after the victim's SET"),
            &got,
            format!("${}\r\n{value}\r\n", value.len()).as_bytes(),
        );
    }

    // A real retry (the identical request) is answered from memory and not run again: a SET
    // NX retried gets its first `+OK`, with the same version, where a second run would get
    // `:-1`.
    let p = props(&mut victim);
    let payload = resp(&[b"SET", b"t89-victim-nx", b"once", b"NX"]);
    let first = call(&mut victim, "SET NX", &payload, p.clone()).await;
    assert_payload("SET NX", &first, b"+OK\r\n");
    let retry = call(&mut victim, "SET NX retried", &payload, p).await;
    assert_payload("SET NX retried", &retry, b"+OK\r\n");
    assert_eq!(
        retry.user_property("__ts"),
        first.user_property("__ts"),
        "the retry got the remembered reply"
    );
    well_behaved
        .finish()
        .await
        .assert_live("reply-memory poisoning", 5);
}

/// `statestore kv` correlation data is 16 random bytes (issue 27): two invocations share no
/// 4-byte piece at the same place (a counter or the process id would repeat) and neither
/// carries its process id, so one client cannot guess another's next correlation data.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kv_correlation_data_is_random() {
    let cluster = cluster().await;
    let spy = Spy::connect(cluster.broker.port, "t89-kv-spy", &[REQUEST_TOPIC]).await;
    let broker = cluster.broker.address();
    let mut runs = Vec::new();
    for n in 0..2 {
        let broker = broker.clone();
        let output = tokio::task::spawn_blocking(move || {
            let child = Command::new(statestore_bin())
                .args(["kv", "--broker", &broker, "set", "t89-kv", &format!("v{n}")])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("run statestore kv");
            let pid = child.id();
            (pid, child.wait_with_output().expect("kv ends"))
        })
        .await
        .expect("kv task");
        assert!(output.1.status.success(), "kv set: {:?}", output.1);
        runs.push(output.0);
    }
    let correlations: BTreeSet<Bytes> = spy
        .seen()
        .into_iter()
        .filter(|s| {
            s.src_id
                .as_deref()
                .is_some_and(|id| id.starts_with("statestore-kv"))
        })
        .filter_map(|s| s.correlation)
        .collect();
    let correlations: Vec<Bytes> = correlations.into_iter().collect();
    assert_eq!(
        correlations.len(),
        2,
        "one request per kv invocation: {correlations:?}"
    );
    for c in &correlations {
        assert_eq!(c.len(), 16, "16 bytes of correlation data: {c:?}");
        for pid in &runs {
            for bytes in [pid.to_be_bytes(), pid.to_le_bytes()] {
                assert!(
                    !c.windows(4).any(|w| w == bytes),
                    "correlation {c:?} carries a process id {pid}"
                );
            }
        }
    }
    let shared: Vec<usize> = (0..4)
        .filter(|i| correlations[0][i * 4..i * 4 + 4] == correlations[1][i * 4..i * 4 + 4])
        .collect();
    assert!(
        shared.is_empty(),
        "two invocations share 4-byte pieces {shared:?}: {correlations:?}"
    );
}

/// Guessed lock tokens (issue 27, devicebound.md §1): a device's lock token carries at least
/// 128 random bits (tokens of successive deliveries differ in most characters and are long
/// enough); an attacker settling a victim device's message with guesses built from its own
/// tokens, or with the victim's token altered, gets `:0` and settles nothing, and
/// `FEEDBACK COMPLETE` with such guesses gets `:0`; the victim then settles with its real token
/// (`:1`). The well-behaved client is answered within the liveness bound throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn guessed_lock_tokens_settle_nothing() {
    let cluster = cluster().await;
    let port = cluster.broker.port;
    let well_behaved = WellBehaved::start(port, "t89-token-app").await;
    let mut backend = connect(&cluster.broker, "t89-token-backend").await;
    let mut attacker_device = device(&cluster.broker, "t89-thief").await;
    let mut victim = device(&cluster.broker, "t89-owner").await;

    // The attacker's own deliveries: the tokens it can learn from.
    let mut own_tokens = Vec::new();
    for i in 0..8 {
        let id = format!("a{i}");
        assert_eq!(
            dcall(
                &mut backend,
                "SEND",
                &[b"SEND", b"t89-thief", id.as_bytes(), b"x"]
            )
            .await,
            b"+OK\r\n"
        );
        let delivery = next_delivery(&mut attacker_device, REPLY_WAIT)
            .await
            .expect("the attacker's device gets its message");
        let token = lock_token(&delivery);
        assert_eq!(
            settle_as(&mut attacker_device, "t89-thief", "complete", &token).await,
            b":1\r\n"
        );
        own_tokens.push(token);
    }
    // The victim's message, delivered and locked.
    assert_eq!(
        dcall(
            &mut backend,
            "SEND",
            &[b"SEND", b"t89-owner", b"secret", b"x"]
        )
        .await,
        b"+OK\r\n"
    );
    let delivery = next_delivery(&mut victim, REPLY_WAIT)
        .await
        .expect("the victim gets its message");
    let real = lock_token(&delivery);
    let last_own = own_tokens.last().expect("a token");
    let mut guesses = message_guesses(last_own);
    guesses.extend(altered(&real));
    guesses.extend(own_tokens.iter().cloned());
    for guess in &guesses {
        for action in ["complete", "reject", "abandon"] {
            assert_eq!(
                settle_as(&mut attacker_device, "t89-owner", action, guess).await,
                b":0\r\n",
                "{action} with guessed token {guess:?} (real {real:?})"
            );
        }
    }
    let mut feedback_guesses = feedback_guesses(last_own);
    feedback_guesses.extend(altered(&real));
    for guess in &feedback_guesses {
        let payload = dcall(
            &mut backend,
            "FEEDBACK",
            &[b"FEEDBACK", b"COMPLETE", guess.as_bytes()],
        )
        .await;
        assert_eq!(payload, b":0\r\n", "FEEDBACK COMPLETE {guess:?}");
    }
    let (enqueued, invisible, dead, _) = queue(&mut backend, "t89-owner").await;
    assert_eq!(
        (enqueued, invisible, dead),
        (0, 1, 0),
        "the victim's message is still locked for the victim"
    );
    assert_eq!(
        settle_as(&mut victim, "t89-owner", "complete", &real).await,
        b":1\r\n",
        "the victim settles with its real token"
    );
    for token in &own_tokens {
        assert!(
            token.len() >= MIN_TOKEN_CHARS,
            "lock token {token:?} is too short to carry 128 random bits"
        );
    }
    for pair in own_tokens.windows(2) {
        let differing = pair[0]
            .bytes()
            .zip(pair[1].bytes())
            .filter(|(a, b)| a != b)
            .count();
        assert!(
            differing >= 16,
            "successive lock tokens {:?} and {:?} differ in {differing} characters only",
            pair[0],
            pair[1]
        );
    }
    well_behaved
        .finish()
        .await
        .assert_live("guessed lock tokens", 5);
}

/// Message lock tokens guessed from one of the attacker's own, for the counter format of data
/// format 6 (`m`, 16 hex digits of queue place, 16 of tokens issued): the places and counts
/// just around it (every device's queue places start at the same value, so the victim's first
/// message sits at or below the attacker's last). Nothing for other formats.
fn message_guesses(token: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Some((seq, issued)) = counter_token(token) {
        for s in seq.saturating_sub(9)..=seq {
            for i in issued.saturating_sub(2)..=issued.saturating_add(4) {
                out.push(format!("m{s:016x}{i:016x}"));
            }
        }
    }
    out
}

/// Feedback batch tokens guessed from a message token of the attacker's (counter format:
/// `f` and the same store-wide count of tokens issued).
fn feedback_guesses(token: &str) -> Vec<String> {
    counter_token(token)
        .map(|(_, issued)| {
            (issued.saturating_sub(10)..=issued.saturating_add(10))
                .map(|i| format!("f{i:016x}"))
                .collect()
        })
        .unwrap_or_default()
}

/// Queue place and tokens-issued count of a counter-format message token.
fn counter_token(token: &str) -> Option<(u64, u64)> {
    let digits = token.strip_prefix('m').filter(|d| d.len() == 32)?;
    Some((
        u64::from_str_radix(digits.get(..16)?, 16).ok()?,
        u64::from_str_radix(digits.get(16..)?, 16).ok()?,
    ))
}

/// `token` with its last character, and its last two, changed.
fn altered(token: &str) -> Vec<String> {
    let flip = |c: char| if c == '0' { '1' } else { '0' };
    let mut out = Vec::new();
    let mut chars: Vec<char> = token.chars().collect();
    if let Some(last) = chars.last_mut() {
        *last = flip(*last);
        out.push(chars.iter().collect());
    }
    if chars.len() >= 2 {
        let n = chars.len();
        chars[n - 2] = flip(chars[n - 2]);
        out.push(chars.iter().collect());
    }
    out
}

/// `$.` application properties (issue 27, devicebound.md §1): a SEND with a user property
/// named `$.lt`, `$.mid`, `$.exp` or any other `$.` name is refused with
/// `-ERR invalid property name`, queues nothing, and an ordinary application property still
/// travels to the device once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dollar_dot_properties_are_refused() {
    let cluster = cluster().await;
    let mut backend = connect(&cluster.broker, "t89-props-backend").await;
    let mut target = device(&cluster.broker, "t89-props-dev").await;
    for name in ["$.lt", "$.mid", "$.exp", "$.ct", "$.anything"] {
        let reply = dcall_with(
            &mut backend,
            "SEND with $. property",
            &[b"SEND", b"t89-props-dev", b"m-bad", b"x"],
            &[(name, "forged")],
        )
        .await;
        assert_eq!(
            &reply.payload[..],
            INVALID_PROPERTY_NAME,
            "SEND with property {name}"
        );
    }
    let (enqueued, invisible, _, _) = queue(&mut backend, "t89-props-dev").await;
    assert_eq!(enqueued + invisible, 0, "nothing was queued");
    let reply = dcall_with(
        &mut backend,
        "SEND",
        &[b"SEND", b"t89-props-dev", b"m-good", b"x"],
        &[("colour", "blue")],
    )
    .await;
    assert_eq!(&reply.payload[..], b"+OK\r\n");
    let delivery = next_delivery(&mut target, REPLY_WAIT)
        .await
        .expect("delivered");
    let lts: Vec<_> = delivery
        .properties
        .user_properties
        .iter()
        .filter(|(k, _)| k == "$.lt")
        .collect();
    assert_eq!(lts.len(), 1, "one lock token property: {delivery:?}");
    assert_eq!(delivery.user_property("colour"), Some("blue"));
}
