//! Retried requests (protocol §6), quotas (§9) and durability across restarts: SIGTERM keeps
//! every key, version, fencing token and KEYNOTIFY registration; SIGKILL keeps every
//! acknowledged write.

use std::collections::BTreeMap;
use std::time::Duration;

use azure_iot_operations_protocol::common::hybrid_logical_clock::HybridLogicalClock;
use azure_iot_operations_services::state_store::{Operation, ServiceError, SetOptions};
use statestore_tests::broker::Broker;
use statestore_tests::node::StatestoreNode;
use statestore_tests::raw::{RawClient, Received, resp};
use statestore_tests::raw_helpers::start_single;
use statestore_tests::sdk::{SdkClient, TIMEOUT};
use statestore_tests::sdk_helpers::{
    assert_hlc_gt, assert_service_error, next_notification, version_of, wait_serving,
};
use statestore_tests::sdk_helpers::{ready_client as client, set_applied as set};

async fn setup(extra_args: &[&str]) -> (Broker, StatestoreNode) {
    start_single(extra_args).await
}

fn plain() -> SetOptions {
    SetOptions::default()
}

fn quota(e: &ServiceError) -> bool {
    matches!(e, ServiceError::KeyQuotaExceeded)
}

/// Asserts a raw reply is a 200 state-store reply with exactly `payload` and returns its `__ts`.
fn reply_ts(reply: &Received, payload: &[u8], what: &str) -> Option<String> {
    assert_eq!(
        reply.payload.as_ref(),
        payload,
        "{what}: payload {:?}",
        String::from_utf8_lossy(&reply.payload)
    );
    assert_eq!(reply.user_property("__stat"), Some("200"), "{what}: __stat");
    reply.user_property("__ts").map(str::to_owned)
}

/// A request repeated with the same correlation data is not executed twice: a second
/// `SET key v NX` with the first one's correlation gets the remembered `+OK` with the identical
/// `__ts`, while the same SET with new correlation data runs and gets `:-1` carrying the stored
/// version; likewise a repeated DEL gets the remembered `:1` (§6).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_correlation_gets_the_remembered_reply() {
    let (broker, _node) = setup(&[]).await;
    let mut raw = RawClient::connect(broker.port, "t40-dedup").await;
    let wait = Duration::from_secs(10);

    let set_nx = resp(&[b"SET", b"dedup-key", b"v", b"NX"]);
    let correlation = raw.correlation();
    let properties = raw.request_properties(correlation);
    let first = raw
        .request_with(&set_nx, properties.clone(), wait)
        .await
        .expect("reply to the first SET NX");
    let second = raw
        .request_with(&set_nx, properties, wait)
        .await
        .expect("reply to the repeated SET NX (same correlation)");
    let ts1 = reply_ts(&first, b"+OK\r\n", "first SET NX").expect("SET reply has __ts");
    let ts2 = reply_ts(
        &second,
        b"+OK\r\n",
        "repeated SET NX gets the remembered reply",
    )
    .expect("repeated reply has __ts");
    assert_eq!(ts1, ts2, "the remembered reply carries the same __ts");

    let third = raw
        .request(&set_nx)
        .await
        .expect("reply to SET NX with new correlation");
    let ts3 = reply_ts(&third, b":-1\r\n", "SET NX with new correlation runs");
    assert_eq!(ts3, Some(ts1), ":-1 carries the stored version (§1.2)");

    let del = resp(&[b"DEL", b"dedup-key"]);
    let correlation = raw.correlation();
    let properties = raw.request_properties(correlation);
    let d1 = raw
        .request_with(&del, properties.clone(), wait)
        .await
        .expect("DEL reply");
    let d2 = raw
        .request_with(&del, properties, wait)
        .await
        .expect("repeated DEL reply");
    let dts1 = reply_ts(&d1, b":1\r\n", "first DEL");
    let dts2 = reply_ts(&d2, b":1\r\n", "repeated DEL is not run again");
    assert_eq!(dts1, dts2);
    let d3 = raw.request(&del).await.expect("DEL with new correlation");
    reply_ts(&d3, b":0\r\n", "a new DEL finds no key");
}

/// With `--max-keys 3` a fourth new key is refused with the quota error (SDK KeyQuotaExceeded)
/// and not stored, while overwriting an existing key still works and a delete makes room (§9).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_quota_exceeded() {
    let (broker, _node) = setup(&["--max-keys", "3"]).await;
    let sdk = client(&broker, "t40-quota").await;
    let c = &sdk.client;
    for key in [b"q1", b"q2", b"q3"] {
        set(&sdk, key, b"v").await;
    }
    assert_service_error(
        c.set(b"q4".to_vec(), b"v".to_vec(), TIMEOUT, None, plain())
            .await,
        quota,
        "a 4th key over --max-keys 3",
    );
    assert_eq!(
        c.get(b"q4".to_vec(), TIMEOUT)
            .await
            .expect("GET q4")
            .response,
        None,
        "the refused key was not stored"
    );
    set(&sdk, b"q1", b"overwritten").await;
    assert_eq!(
        c.del(b"q2".to_vec(), None, TIMEOUT)
            .await
            .expect("DEL q2")
            .response,
        1
    );
    set(&sdk, b"q4", b"fits now").await;
    assert_service_error(
        c.set(b"q5".to_vec(), b"v".to_vec(), TIMEOUT, None, plain())
            .await,
        quota,
        "full again",
    );
    sdk.shutdown().await;
}

/// With `--max-registrations-per-client 2` a client's third KEYNOTIFY fails with the quota error;
/// the cap is per client (another client may observe that key), and after a STOP the third key
/// can be observed and really notifies (§7, §9).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_quota_per_client() {
    let (broker, _node) = setup(&["--max-registrations-per-client", "2"]).await;
    let a = client(&broker, "t40-regq-a").await;
    let b = client(&broker, "t40-regq-b").await;

    let _o1 = a
        .client
        .observe(b"r1".to_vec(), TIMEOUT)
        .await
        .expect("observe r1");
    let _o2 = a
        .client
        .observe(b"r2".to_vec(), TIMEOUT)
        .await
        .expect("observe r2");
    assert_service_error(
        a.client.observe(b"r3".to_vec(), TIMEOUT).await,
        quota,
        "third registration of one client",
    );
    let _b3 = b
        .client
        .observe(b"r3".to_vec(), TIMEOUT)
        .await
        .expect("another client has its own quota");

    assert!(
        a.client
            .unobserve(b"r1".to_vec(), TIMEOUT)
            .await
            .expect("STOP r1")
            .response
    );
    let mut o3 = a
        .client
        .observe(b"r3".to_vec(), TIMEOUT)
        .await
        .expect("observe r3 after freeing a slot")
        .response;
    let version = set(&b, b"r3", b"hello").await;
    let n = next_notification(&mut o3, Duration::from_secs(10), "r3 notification").await;
    assert!(matches!(&n.operation, Operation::Set(v) if v == b"hello"));
    assert_eq!(n.version, version);
    a.shutdown().await;
    b.shutdown().await;
}

/// KEYNOTIFY as the client `src_id` says it is (`__srcId` is whatever a request carries);
/// returns the reply payload.
async fn keynotify_as(raw: &mut RawClient, src_id: &str, key: &[u8], stop: bool) -> Vec<u8> {
    let correlation = raw.correlation();
    let mut properties = raw.request_properties(correlation);
    for (name, value) in &mut properties.user_properties {
        if name == "__srcId" {
            *value = src_id.to_owned();
        }
    }
    let request = if stop {
        resp(&[b"KEYNOTIFY", key, b"STOP"])
    } else {
        resp(&[b"KEYNOTIFY", key])
    };
    raw.request_with(&request, properties, Duration::from_secs(10))
        .await
        .expect("KEYNOTIFY is answered")
        .payload
        .to_vec()
}

/// With `--max-observers-per-key 3` one caller registering a key under many client ids gets
/// three registrations and then `-ERR the quota has been exceeded`; registering a pair again
/// still succeeds, the cap is per key, and a STOP frees room (§9).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_cap_per_key() {
    let (broker, _node) = setup(&["--max-observers-per-key", "3"]).await;
    let mut raw = RawClient::connect(broker.port, "t40-fanout").await;
    let ok = b"+OK\r\n".to_vec();
    let refused = b"-ERR the quota has been exceeded\r\n".to_vec();
    for id in ["id-0", "id-1", "id-2"] {
        assert_eq!(keynotify_as(&mut raw, id, b"hot", false).await, ok, "{id}");
    }
    assert_eq!(
        keynotify_as(&mut raw, "id-3", b"hot", false).await,
        refused,
        "a fourth identity on the key"
    );
    assert_eq!(
        keynotify_as(&mut raw, "id-0", b"hot", false).await,
        ok,
        "registering a pair again"
    );
    assert_eq!(
        keynotify_as(&mut raw, "id-3", b"cold", false).await,
        ok,
        "another key has room"
    );
    assert_eq!(
        keynotify_as(&mut raw, "id-1", b"hot", true).await,
        ok,
        "STOP"
    );
    assert_eq!(keynotify_as(&mut raw, "id-3", b"hot", false).await, ok);
    assert_eq!(keynotify_as(&mut raw, "id-4", b"hot", false).await, refused);
}

/// Reads every key in `keys` and returns value and version.
async fn snapshot(
    sdk: &SdkClient,
    keys: &[&[u8]],
) -> BTreeMap<Vec<u8>, (Option<Vec<u8>>, Option<HybridLogicalClock>)> {
    let mut out = BTreeMap::new();
    for key in keys {
        let get = sdk.client.get(key.to_vec(), TIMEOUT).await.expect("GET");
        out.insert(key.to_vec(), (get.response, get.version));
    }
    out
}

/// A SIGTERM restart on the same data directory keeps every key with its value and version
/// (plain, binary, PX not yet expired), keeps deletions, keeps the fencing token (missing token
/// and lower token still refused, the token still accepted) and the KEYNOTIFY registration (the
/// observer is notified without observing again); new versions exceed all old ones (§3, §4, §7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_restart_keeps_keys_versions_tokens_registrations() {
    let (broker, mut node) = setup(&[]).await;
    let writer = client(&broker, "t40-restart-writer").await;
    let observer = client(&broker, "t40-restart-observer").await;
    let c = &writer.client;

    set(&writer, b"plain-1", b"one").await;
    set(&writer, b"plain-2", b"two").await;
    set(&writer, b"plain-2", b"two, overwritten").await;
    set(&writer, b"bin\r\n\x00\xff", b"\x00\r\n\xfe").await;
    assert!(
        c.set(
            b"px-long".to_vec(),
            b"lives a minute".to_vec(),
            TIMEOUT,
            None,
            SetOptions {
                expires: Some(Duration::from_secs(60)),
                ..Default::default()
            },
        )
        .await
        .expect("SET PX 60 s")
        .response
    );
    set(&writer, b"deleted", b"x").await;
    assert_eq!(
        c.del(b"deleted".to_vec(), None, TIMEOUT)
            .await
            .expect("DEL")
            .response,
        1
    );

    let seed = HybridLogicalClock::new();
    let fenced = c
        .set(
            b"fenced".to_vec(),
            b"f1".to_vec(),
            TIMEOUT,
            Some(seed.clone()),
            plain(),
        )
        .await
        .expect("fenced SET");
    assert!(fenced.response);
    let token = version_of(&fenced, "fenced SET");
    assert!(
        c.set(
            b"fenced".to_vec(),
            b"f2".to_vec(),
            TIMEOUT,
            Some(token.clone()),
            plain()
        )
        .await
        .expect("fenced SET with the higher token")
        .response
    );

    let mut obs = observer
        .client
        .observe(b"watched".to_vec(), TIMEOUT)
        .await
        .expect("observe")
        .response;
    let w0 = set(&writer, b"watched", b"w0").await;
    let n = next_notification(&mut obs, Duration::from_secs(10), "before restart").await;
    assert_eq!(n.version, w0);

    let keys: [&[u8]; 7] = [
        b"plain-1",
        b"plain-2",
        b"bin\r\n\x00\xff",
        b"px-long",
        b"deleted",
        b"fenced",
        b"watched",
    ];
    let before = snapshot(&writer, &keys).await;
    assert_eq!(before[&b"deleted".to_vec()].0, None);
    let newest = before
        .values()
        .filter_map(|(_, v)| v.clone())
        .max_by(statestore_tests::sdk_helpers::hlc_cmp)
        .expect("some versions");

    let status = node
        .terminate(Duration::from_secs(20))
        .expect("the node exits within 20 s of SIGTERM");
    assert!(status.success(), "clean exit on SIGTERM, got {status}");
    node.spawn();
    node.wait_ready(Duration::from_secs(30)).await;
    wait_serving(c, Duration::from_secs(30)).await;

    let after = snapshot(&writer, &keys).await;
    assert_eq!(
        after, before,
        "every value and version survives the restart"
    );

    assert_service_error(
        c.set(b"fenced".to_vec(), b"no".to_vec(), TIMEOUT, None, plain())
            .await,
        |e| matches!(e, ServiceError::MissingFencingToken),
        "fenced key after restart, no token",
    );
    assert_service_error(
        c.del(b"fenced".to_vec(), Some(seed), TIMEOUT).await,
        |e| matches!(e, ServiceError::FencingTokenLowerVersion),
        "fenced key after restart, lower token",
    );
    let ok = c
        .set(
            b"fenced".to_vec(),
            b"f3".to_vec(),
            TIMEOUT,
            Some(token),
            plain(),
        )
        .await
        .expect("fenced SET with the stored token after restart");
    assert!(ok.response);
    assert_hlc_gt(
        &version_of(&ok, "post-restart write"),
        &newest,
        "versions after restart",
    );

    let w1 = set(&writer, b"watched", b"w1").await;
    let n = next_notification(&mut obs, Duration::from_secs(10), "after restart").await;
    assert!(matches!(&n.operation, Operation::Set(v) if v == b"w1"));
    assert_eq!(
        n.version, w1,
        "the registration survived without re-observing"
    );
    writer.shutdown().await;
    observer.shutdown().await;
}

/// After SIGKILL (no clean shutdown) every acknowledged write survives: sequential and concurrent
/// SETs keep value and version, an acknowledged DEL stays deleted, a fencing token stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_keeps_acknowledged_writes() {
    let (broker, mut node) = setup(&[]).await;
    let writer = client(&broker, "t40-kill-writer").await;
    let c = writer.client.clone();

    let mut acked: BTreeMap<Vec<u8>, (Vec<u8>, HybridLogicalClock)> = BTreeMap::new();
    for i in 0..10 {
        let key = format!("seq-{i}").into_bytes();
        let value = format!("value-{i}").into_bytes();
        let version = set(&writer, &key, &value).await;
        acked.insert(key, (value, version));
    }
    let mut tasks = Vec::new();
    for i in 0..20 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let key = format!("par-{i}").into_bytes();
            let value = format!("parallel-{i}").into_bytes();
            let reply = c
                .set(key.clone(), value.clone(), TIMEOUT, None, plain())
                .await
                .expect("concurrent SET");
            assert!(reply.response);
            (key, value, version_of(&reply, "concurrent SET"))
        }));
    }
    for task in tasks {
        let (key, value, version) = task.await.expect("SET task");
        acked.insert(key, (value, version));
    }
    assert_eq!(
        c.del(b"seq-0".to_vec(), None, TIMEOUT)
            .await
            .expect("DEL")
            .response,
        1
    );
    acked.remove(b"seq-0".as_slice());
    let fenced = c
        .set(
            b"fenced".to_vec(),
            b"f".to_vec(),
            TIMEOUT,
            Some(HybridLogicalClock::new()),
            plain(),
        )
        .await
        .expect("fenced SET");
    assert!(fenced.response);

    node.kill();
    node.spawn();
    node.wait_ready(Duration::from_secs(30)).await;
    wait_serving(&c, Duration::from_secs(30)).await;

    for (key, (value, version)) in &acked {
        let get = c
            .get(key.clone(), TIMEOUT)
            .await
            .expect("GET after SIGKILL");
        assert_eq!(
            get.response.as_ref(),
            Some(value),
            "acknowledged key {} lost",
            String::from_utf8_lossy(key)
        );
        assert_eq!(get.version.as_ref(), Some(version), "version kept");
    }
    assert_eq!(
        c.get(b"seq-0".to_vec(), TIMEOUT)
            .await
            .expect("GET")
            .response,
        None,
        "an acknowledged DEL stays deleted"
    );
    assert_service_error(
        c.set(b"fenced".to_vec(), b"no".to_vec(), TIMEOUT, None, plain())
            .await,
        |e| matches!(e, ServiceError::MissingFencingToken),
        "the fencing token survives SIGKILL",
    );
    drop(c);
    writer.shutdown().await;
}
