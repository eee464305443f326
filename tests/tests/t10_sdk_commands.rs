//! Every command and option of protocol §2 through the official SDK `state_store::Client`:
//! SET (plain, NX, NEX, PX, NX+PX), GET, DEL, VDEL, KEYNOTIFY/STOP, binary-safe keys and
//! values, an empty value, a 1 MiB value, and PX expiry (§8).

use std::time::{Duration, Instant};

use azure_iot_operations_services::state_store::{SetCondition, SetOptions};
use statestore_tests::broker::Broker;
use statestore_tests::node::{NodeSpec, StatestoreNode};
use statestore_tests::sdk::{SdkClient, TIMEOUT};
use statestore_tests::sdk_helpers::{version_of, wait_serving};
use statestore_tests::wait_for;

/// A broker, one node (ready and answering) and one SDK client named `client_id`.
async fn setup(client_id: &str) -> (Broker, StatestoreNode, SdkClient) {
    let broker = Broker::start();
    let node = StatestoreNode::start(&broker, NodeSpec::default());
    node.wait_ready(Duration::from_secs(30)).await;
    let sdk = SdkClient::connect(broker.port, client_id).await;
    wait_serving(&sdk.client, Duration::from_secs(30)).await;
    (broker, node, sdk)
}

fn opts(set_condition: SetCondition, expires: Option<Duration>) -> SetOptions {
    SetOptions {
        set_condition,
        expires,
        ..Default::default()
    }
}

/// SET plain answers `+OK` (true) with a version; GET returns the value and that same version;
/// a second plain SET overwrites; GET of a missing key is `None` and carries no version
/// (§2 SET/GET, §1.2 `__ts` never on a GET miss).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_plain_and_get_hit_and_miss() {
    let (_broker, _node, sdk) = setup("t10-plain").await;
    let c = &sdk.client;

    let set = c
        .set(
            b"k".to_vec(),
            b"v1".to_vec(),
            TIMEOUT,
            None,
            SetOptions::default(),
        )
        .await
        .expect("plain SET is answered");
    assert!(set.response, "plain SET applies");
    let v1 = version_of(&set, "SET reply");

    let get = c.get(b"k".to_vec(), TIMEOUT).await.expect("GET hit");
    assert_eq!(get.response, Some(b"v1".to_vec()));
    assert_eq!(get.version, Some(v1), "GET returns the SET's version (§3)");

    let set2 = c
        .set(
            b"k".to_vec(),
            b"v2".to_vec(),
            TIMEOUT,
            None,
            SetOptions::default(),
        )
        .await
        .expect("second plain SET");
    assert!(set2.response, "plain SET overwrites unconditionally");
    let get2 = c
        .get(b"k".to_vec(), TIMEOUT)
        .await
        .expect("GET after overwrite");
    assert_eq!(get2.response, Some(b"v2".to_vec()));
    assert_eq!(get2.version, set2.version);

    let miss = c.get(b"absent".to_vec(), TIMEOUT).await.expect("GET miss");
    assert_eq!(miss.response, None, "GET of a missing key is $-1");
    assert!(
        miss.version.is_none(),
        "a GET miss carries no __ts (§1.2), got {:?}",
        miss.version
    );
    sdk.shutdown().await;
}

/// SET NX applies only when the key does not exist; when it exists the reply is `:-1` (false)
/// and the stored value is unchanged (§2 NX).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_nx_only_if_absent() {
    let (_broker, _node, sdk) = setup("t10-nx").await;
    let c = &sdk.client;
    let nx = || opts(SetCondition::OnlyIfDoesNotExist, None);

    let first = c
        .set(b"nx".to_vec(), b"first".to_vec(), TIMEOUT, None, nx())
        .await
        .expect("SET NX on a missing key");
    assert!(first.response, "NX on a missing key applies");

    let second = c
        .set(b"nx".to_vec(), b"second".to_vec(), TIMEOUT, None, nx())
        .await
        .expect("SET NX on an existing key is answered, not an error");
    assert!(!second.response, "NX on an existing key is not applied");

    let get = c.get(b"nx".to_vec(), TIMEOUT).await.expect("GET");
    assert_eq!(
        get.response,
        Some(b"first".to_vec()),
        "failed NX changed nothing"
    );
    assert_eq!(
        get.version, first.version,
        "failed NX left the version alone"
    );
    sdk.shutdown().await;
}

/// SET NEX (`OnlyIfEqualOrDoesNotExist`) applies on a missing key and on a key holding the same
/// value (renewal, new version), and is refused (false, unchanged) when the value differs (§2 NEX).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_nex_only_if_equal_or_absent() {
    let (_broker, _node, sdk) = setup("t10-nex").await;
    let c = &sdk.client;
    let nex = || opts(SetCondition::OnlyIfEqualOrDoesNotExist, None);

    let absent = c
        .set(b"nex".to_vec(), b"holder-a".to_vec(), TIMEOUT, None, nex())
        .await
        .expect("NEX on a missing key");
    assert!(absent.response, "NEX on a missing key applies");

    let equal = c
        .set(b"nex".to_vec(), b"holder-a".to_vec(), TIMEOUT, None, nex())
        .await
        .expect("NEX with an equal value");
    assert!(equal.response, "NEX with the same value applies (renewal)");
    assert_ne!(
        equal.version, absent.version,
        "a renewal is a write and gets a new version"
    );

    let differs = c
        .set(b"nex".to_vec(), b"holder-b".to_vec(), TIMEOUT, None, nex())
        .await
        .expect("NEX with a different value is answered");
    assert!(!differs.response, "NEX with a different value is refused");

    let get = c.get(b"nex".to_vec(), TIMEOUT).await.expect("GET");
    assert_eq!(get.response, Some(b"holder-a".to_vec()));
    assert_eq!(get.version, equal.version);
    sdk.shutdown().await;
}

/// A key SET with PX 1000 is readable at once, becomes a GET miss after its time (§8), and not
/// before its 1000 ms have passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_px_key_is_gone_after_its_time() {
    let (_broker, _node, sdk) = setup("t10-px").await;
    let c = &sdk.client;

    let started = Instant::now();
    let set = c
        .set(
            b"px".to_vec(),
            b"short-lived".to_vec(),
            TIMEOUT,
            None,
            opts(
                SetCondition::Unconditional,
                Some(Duration::from_millis(1000)),
            ),
        )
        .await
        .expect("SET PX");
    assert!(set.response);

    let get = c
        .get(b"px".to_vec(), TIMEOUT)
        .await
        .expect("GET right away");
    if started.elapsed() < Duration::from_millis(900) {
        assert_eq!(
            get.response,
            Some(b"short-lived".to_vec()),
            "a PX key is readable before it expires"
        );
    }

    let gone = wait_for(Duration::from_secs(15), || async {
        let get = c.get(b"px".to_vec(), TIMEOUT).await.ok()?;
        get.response
            .is_none()
            .then(|| (started.elapsed(), get.version))
    })
    .await
    .expect("the PX 1000 key disappears within 15 s");
    assert!(
        gone.0 >= Duration::from_millis(950),
        "the key vanished after {:?}, before its 1000 ms",
        gone.0
    );
    assert!(
        gone.1.is_none(),
        "the expired key's GET miss carries no __ts"
    );
    sdk.shutdown().await;
}

/// SET NX PX creates a key that expires; while it lives NX is refused; once expired the key is
/// invisible to NX, which applies again (§2 NX + PX, §8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_nx_px_expires_then_nx_applies_again() {
    let (_broker, _node, sdk) = setup("t10-nxpx").await;
    let c = &sdk.client;
    let nx_px = || {
        opts(
            SetCondition::OnlyIfDoesNotExist,
            Some(Duration::from_millis(1000)),
        )
    };

    let first = c
        .set(b"nxpx".to_vec(), b"one".to_vec(), TIMEOUT, None, nx_px())
        .await
        .expect("SET NX PX");
    assert!(first.response, "NX PX on a missing key applies");
    let refused = c
        .set(b"nxpx".to_vec(), b"two".to_vec(), TIMEOUT, None, nx_px())
        .await
        .expect("second SET NX PX");
    assert!(!refused.response, "NX refused while the key lives");

    let reapplied = wait_for(Duration::from_secs(15), || async {
        let r = c
            .set(b"nxpx".to_vec(), b"three".to_vec(), TIMEOUT, None, nx_px())
            .await
            .ok()?;
        r.response.then_some(())
    })
    .await;
    assert!(
        reapplied.is_some(),
        "NX applies again after the key expired"
    );
    let get = c.get(b"nxpx".to_vec(), TIMEOUT).await.expect("GET");
    assert_eq!(get.response, Some(b"three".to_vec()));
    sdk.shutdown().await;
}

/// A plain SET (no PX) on a key that had a PX clears the expiry: once a sentinel key written
/// later with the same PX has expired, the re-set key is still there (§2 "A plain SET clears
/// any earlier expiry").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_set_clears_earlier_expiry() {
    let (_broker, _node, sdk) = setup("t10-clearpx").await;
    let c = &sdk.client;
    let px = || {
        opts(
            SetCondition::Unconditional,
            Some(Duration::from_millis(1000)),
        )
    };

    assert!(
        c.set(b"kept".to_vec(), b"a".to_vec(), TIMEOUT, None, px())
            .await
            .expect("SET PX")
            .response
    );
    assert!(
        c.set(
            b"kept".to_vec(),
            b"b".to_vec(),
            TIMEOUT,
            None,
            SetOptions::default()
        )
        .await
        .expect("plain SET over the PX key")
        .response
    );
    // Written after `kept`'s original expiry was fixed, so it expires later.
    assert!(
        c.set(b"sentinel".to_vec(), b"s".to_vec(), TIMEOUT, None, px())
            .await
            .expect("SET sentinel PX")
            .response
    );
    let sentinel_gone = wait_for(Duration::from_secs(15), || async {
        c.get(b"sentinel".to_vec(), TIMEOUT)
            .await
            .ok()?
            .response
            .is_none()
            .then_some(())
    })
    .await;
    assert!(sentinel_gone.is_some(), "the sentinel PX key expires");
    let kept = c.get(b"kept".to_vec(), TIMEOUT).await.expect("GET kept");
    assert_eq!(
        kept.response,
        Some(b"b".to_vec()),
        "the plain SET removed the earlier PX"
    );
    sdk.shutdown().await;
}

/// DEL of an existing key answers 1 and removes it; DEL of a missing key answers 0 (§2 DEL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn del_hit_and_miss() {
    let (_broker, _node, sdk) = setup("t10-del").await;
    let c = &sdk.client;
    assert!(
        c.set(
            b"d".to_vec(),
            b"x".to_vec(),
            TIMEOUT,
            None,
            SetOptions::default()
        )
        .await
        .expect("SET")
        .response
    );
    let hit = c.del(b"d".to_vec(), None, TIMEOUT).await.expect("DEL hit");
    assert_eq!(hit.response, 1, "DEL of an existing key deletes one key");
    let get = c.get(b"d".to_vec(), TIMEOUT).await.expect("GET after DEL");
    assert_eq!(get.response, None, "the deleted key is gone");
    let miss = c.del(b"d".to_vec(), None, TIMEOUT).await.expect("DEL miss");
    assert_eq!(miss.response, 0, "DEL of a missing key answers :0");
    sdk.shutdown().await;
}

/// VDEL deletes only on a value match (1); a missing key answers 0; a different value answers
/// -1 and leaves the key intact (§2 VDEL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vdel_match_missing_mismatch() {
    let (_broker, _node, sdk) = setup("t10-vdel").await;
    let c = &sdk.client;
    let set = c
        .set(
            b"vd".to_vec(),
            b"right".to_vec(),
            TIMEOUT,
            None,
            SetOptions::default(),
        )
        .await
        .expect("SET");
    assert!(set.response);

    let mismatch = c
        .vdel(b"vd".to_vec(), b"wrong".to_vec(), None, TIMEOUT)
        .await
        .expect("VDEL mismatch is answered");
    assert_eq!(mismatch.response, -1, "VDEL with a different value is :-1");
    let still = c.get(b"vd".to_vec(), TIMEOUT).await.expect("GET");
    assert_eq!(
        still.response,
        Some(b"right".to_vec()),
        "mismatch kept the key"
    );
    assert_eq!(still.version, set.version);

    let matched = c
        .vdel(b"vd".to_vec(), b"right".to_vec(), None, TIMEOUT)
        .await
        .expect("VDEL match");
    assert_eq!(matched.response, 1, "VDEL with the stored value deletes");
    assert_eq!(
        c.get(b"vd".to_vec(), TIMEOUT).await.expect("GET").response,
        None
    );

    let missing = c
        .vdel(b"vd".to_vec(), b"right".to_vec(), None, TIMEOUT)
        .await
        .expect("VDEL missing");
    assert_eq!(missing.response, 0, "VDEL of a missing key is :0");
    sdk.shutdown().await;
}

/// KEYNOTIFY registers (also on a missing key), KEYNOTIFY STOP of an observed key answers true,
/// and STOP of a key this client does not observe answers false (`:0`, §2 KEYNOTIFY).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keynotify_observe_and_unobserve() {
    let (_broker, _node, sdk) = setup("t10-keynotify").await;
    let c = &sdk.client;

    let observation = c
        .observe(b"watched".to_vec(), TIMEOUT)
        .await
        .expect("KEYNOTIFY on a missing key is +OK");
    drop(observation);
    let stop = c
        .unobserve(b"watched".to_vec(), TIMEOUT)
        .await
        .expect("KEYNOTIFY STOP");
    assert!(stop.response, "STOP of an observed key answers +OK (true)");

    let stop_again = c
        .unobserve(b"watched".to_vec(), TIMEOUT)
        .await
        .expect("second KEYNOTIFY STOP is answered");
    assert!(
        !stop_again.response,
        "STOP of a key no longer observed answers :0 (false)"
    );
    let never = c
        .unobserve(b"never-observed".to_vec(), TIMEOUT)
        .await
        .expect("STOP of a never observed key is answered");
    assert!(!never.response, "STOP of a never observed key answers :0");

    // Observing again after STOP works.
    let again = c
        .observe(b"watched".to_vec(), TIMEOUT)
        .await
        .expect("KEYNOTIFY after STOP");
    drop(again);
    assert!(
        c.unobserve(b"watched".to_vec(), TIMEOUT)
            .await
            .expect("STOP")
            .response
    );
    sdk.shutdown().await;
}

/// Keys and values are binary safe (§2): a key made of every byte 0..=255 plus CRLF and a value
/// with every byte and CRLF inside round trip exactly, VDEL matches them, and an empty value is
/// stored and read back as empty (`$0`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_keys_values_and_empty_value() {
    let (_broker, _node, sdk) = setup("t10-binary").await;
    let c = &sdk.client;

    let mut key: Vec<u8> = (0..=255u8).collect();
    key.extend_from_slice(b"\r\n");
    let mut value: Vec<u8> = Vec::new();
    for _ in 0..4 {
        value.extend(0..=255u8);
        value.extend_from_slice(b"\r\n$3\r\n*1\r\n");
    }

    let set = c
        .set(
            key.clone(),
            value.clone(),
            TIMEOUT,
            None,
            SetOptions::default(),
        )
        .await
        .expect("SET binary");
    assert!(set.response);
    let get = c.get(key.clone(), TIMEOUT).await.expect("GET binary");
    assert_eq!(get.response.as_deref(), Some(value.as_slice()));
    assert_eq!(get.version, set.version);

    // A key that is only CRLF is distinct from the one above.
    let crlf = b"\r\n".to_vec();
    assert_eq!(
        c.get(crlf.clone(), TIMEOUT)
            .await
            .expect("GET crlf")
            .response,
        None
    );
    assert!(
        c.set(
            crlf.clone(),
            b"\r\n".to_vec(),
            TIMEOUT,
            None,
            SetOptions::default()
        )
        .await
        .expect("SET crlf")
        .response
    );
    assert_eq!(
        c.get(crlf, TIMEOUT).await.expect("GET crlf").response,
        Some(b"\r\n".to_vec())
    );

    let vdel = c
        .vdel(key.clone(), value.clone(), None, TIMEOUT)
        .await
        .expect("VDEL binary");
    assert_eq!(vdel.response, 1, "VDEL compares binary values exactly");

    let empty = c
        .set(
            b"empty".to_vec(),
            Vec::new(),
            TIMEOUT,
            None,
            SetOptions::default(),
        )
        .await
        .expect("SET empty value");
    assert!(empty.response, "an empty value is accepted");
    let get = c.get(b"empty".to_vec(), TIMEOUT).await.expect("GET empty");
    assert_eq!(
        get.response,
        Some(Vec::new()),
        "empty value reads back as $0"
    );
    assert_eq!(get.version, empty.version);
    let vdel = c
        .vdel(b"empty".to_vec(), Vec::new(), None, TIMEOUT)
        .await
        .expect("VDEL empty");
    assert_eq!(vdel.response, 1, "VDEL with an empty value matches");
    sdk.shutdown().await;
}

/// A 1 MiB value (below the 4 MiB limit of §9) round trips byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_mib_value_round_trips() {
    let (_broker, _node, sdk) = setup("t10-big").await;
    let c = &sdk.client;
    let mut state: u32 = 0x1234_5678;
    let value: Vec<u8> = (0..(1 << 20))
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state >> 24) as u8
        })
        .collect();

    let set = c
        .set(
            b"big".to_vec(),
            value.clone(),
            TIMEOUT,
            None,
            SetOptions::default(),
        )
        .await
        .expect("SET 1 MiB");
    assert!(set.response);
    let get = c.get(b"big".to_vec(), TIMEOUT).await.expect("GET 1 MiB");
    let got = get.response.expect("the 1 MiB key exists");
    assert_eq!(got.len(), value.len());
    assert!(got == value, "the 1 MiB value came back altered");
    assert_eq!(get.version, set.version);
    sdk.shutdown().await;
}
