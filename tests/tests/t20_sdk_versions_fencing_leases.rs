//! Versions (protocol §3), fencing tokens (§4) and the lease pattern built on them, through the
//! official SDK `state_store::Client`.
//!
//! [`Lease`] below issues exactly the requests the SDK's `leased_lock::lease::Client` 1.3.0 sends
//! (`src/leased_lock/lease.rs`): acquire/renew = `SET name holder NEX PX ttl` whose reply
//! version is the fencing token, release = `VDEL name holder`, holder = `GET name`; unlike the
//! SDK client it exposes the raw VDEL result (1 / 0 / -1), which these tests check. The SDK's own
//! `lease::Client` is exercised end to end in `t84_cluster_restart_lease_membership.rs`.

use std::sync::Arc;
use std::time::Duration;

use azure_iot_operations_protocol::common::hybrid_logical_clock::HybridLogicalClock;
use azure_iot_operations_services::state_store::{self, ServiceError, SetCondition, SetOptions};
use statestore_tests::broker::Broker;
use statestore_tests::node::StatestoreNode;
use statestore_tests::raw_helpers::start_single;
use statestore_tests::sdk::{SdkClient, TIMEOUT};
use statestore_tests::sdk_helpers::ready_client as client;
use statestore_tests::sdk_helpers::{assert_hlc_gt, assert_service_error, version_of};
use statestore_tests::wait_for;

async fn setup() -> (Broker, StatestoreNode) {
    start_single(&[]).await
}

fn plain() -> SetOptions {
    SetOptions::default()
}

fn nx() -> SetOptions {
    SetOptions {
        set_condition: SetCondition::OnlyIfDoesNotExist,
        ..Default::default()
    }
}

fn missing_token(e: &ServiceError) -> bool {
    matches!(e, ServiceError::MissingFencingToken)
}

fn lower_token(e: &ServiceError) -> bool {
    matches!(e, ServiceError::FencingTokenLowerVersion)
}

/// The requests of the SDK's `leased_lock::lease::Client` (see the module comment).
struct Lease {
    store: Arc<state_store::Client>,
    name: Vec<u8>,
    holder: Vec<u8>,
}

impl Lease {
    fn new(sdk: &SdkClient, name: &[u8]) -> Lease {
        Lease {
            store: sdk.client.clone(),
            name: name.to_vec(),
            holder: sdk.client_id.as_bytes().to_vec(),
        }
    }

    /// Acquires or renews: `Some(fencing token)` when held by us, `None` when another holds it.
    async fn acquire(&self, ttl: Duration) -> Option<HybridLogicalClock> {
        let reply = self
            .store
            .set(
                self.name.clone(),
                self.holder.clone(),
                TIMEOUT,
                None,
                SetOptions {
                    set_condition: SetCondition::OnlyIfEqualOrDoesNotExist,
                    expires: Some(ttl),
                    ..Default::default()
                },
            )
            .await
            .expect("lease SET NEX PX is answered");
        reply
            .response
            .then(|| version_of(&reply, "an acquired lease carries its fencing token"))
    }

    /// Releases: the VDEL result (1 released, 0 no lease, -1 held by someone else).
    async fn release(&self) -> i64 {
        self.store
            .vdel(self.name.clone(), self.holder.clone(), None, TIMEOUT)
            .await
            .expect("lease VDEL is answered")
            .response
    }

    async fn holder(&self) -> Option<Vec<u8>> {
        self.store
            .get(self.name.clone(), TIMEOUT)
            .await
            .expect("lease GET")
            .response
    }
}

/// GET returns exactly the version its SET returned; every later write (same key or another key)
/// gets a strictly greater version, also a DEL; a SET whose NX/NEX condition fails still carries
/// the stored version and changes nothing; versions name the node (`statestore-1`) (§3, §1.2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_match_and_increase() {
    let (broker, _node) = setup().await;
    let sdk = client(&broker, "t20-versions").await;
    let c = &sdk.client;

    let a = c
        .set(b"ver".to_vec(), b"a".to_vec(), TIMEOUT, None, plain())
        .await
        .expect("SET a");
    let va = version_of(&a, "SET a");
    assert_eq!(va.node_id, "statestore-1", "versions carry the node name");
    let get = c.get(b"ver".to_vec(), TIMEOUT).await.expect("GET a");
    assert_eq!(
        get.version.as_ref(),
        Some(&va),
        "GET version == SET version"
    );

    let b = c
        .set(b"ver".to_vec(), b"b".to_vec(), TIMEOUT, None, plain())
        .await
        .expect("SET b");
    let vb = version_of(&b, "SET b");
    assert_hlc_gt(&vb, &va, "a later write on the same key");

    let other = c
        .set(b"ver-other".to_vec(), b"x".to_vec(), TIMEOUT, None, plain())
        .await
        .expect("SET other key");
    let vo = version_of(&other, "SET other");
    assert_hlc_gt(
        &vo,
        &vb,
        "a later write on another key (one store-wide HLC)",
    );

    let refused = c
        .set(b"ver".to_vec(), b"c".to_vec(), TIMEOUT, None, nx())
        .await
        .expect("SET NX on an existing key");
    assert!(!refused.response, "NX on an existing key is :-1");
    assert_eq!(
        refused.version.as_ref(),
        Some(&vb),
        "a not-applied SET carries the stored version (§1.2)"
    );
    let nex_refused = c
        .set(
            b"ver".to_vec(),
            b"c".to_vec(),
            TIMEOUT,
            None,
            SetOptions {
                set_condition: SetCondition::OnlyIfEqualOrDoesNotExist,
                ..Default::default()
            },
        )
        .await
        .expect("SET NEX mismatch");
    assert!(!nex_refused.response);
    assert_eq!(
        nex_refused.version.as_ref(),
        Some(&vb),
        "NEX :-1 carries the stored version"
    );
    let get = c.get(b"ver".to_vec(), TIMEOUT).await.expect("GET b");
    assert_eq!(get.response, Some(b"b".to_vec()));
    assert_eq!(
        get.version.as_ref(),
        Some(&vb),
        "failed conditions kept the version"
    );

    let del = c.del(b"ver".to_vec(), None, TIMEOUT).await.expect("DEL");
    assert_eq!(del.response, 1);
    let vd = version_of(&del, "DEL reply (the deletion's HLC)");
    assert_hlc_gt(&vd, &vo, "the deletion's HLC");

    let again = c
        .set(b"ver".to_vec(), b"d".to_vec(), TIMEOUT, None, plain())
        .await
        .expect("SET after DEL");
    assert_hlc_gt(
        &version_of(&again, "SET d"),
        &vd,
        "a write after the deletion",
    );
    sdk.shutdown().await;
}

/// Like the SDK's `state_store_fencing_token_network_tests`: a SET with a fencing token stores
/// it; afterwards SET, DEL and VDEL without a token fail with MissingFencingToken and change
/// nothing, GET needs no token, and the current token lets SET and DEL through (§4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_token_is_required_once_stored() {
    let (broker, _node) = setup().await;
    let sdk = client(&broker, "t20-fence-required").await;
    let c = &sdk.client;
    let key = b"fenced".to_vec();

    // Any HLC may seed a token (the SDK test uses a fresh client clock).
    let seed = HybridLogicalClock::new();
    let first = c
        .set(key.clone(), b"v1".to_vec(), TIMEOUT, Some(seed), plain())
        .await
        .expect("SET with a seed token");
    assert!(first.response);
    let token1 = version_of(&first, "SET v1");

    let second = c
        .set(key.clone(), b"v2".to_vec(), TIMEOUT, Some(token1), plain())
        .await
        .expect("SET with the returned version as token");
    assert!(second.response, "a higher token is accepted");
    let token2 = version_of(&second, "SET v2");

    assert_service_error(
        c.set(key.clone(), b"v3".to_vec(), TIMEOUT, None, plain())
            .await,
        missing_token,
        "SET without a token on a fenced key",
    );
    assert_service_error(
        c.del(key.clone(), None, TIMEOUT).await,
        missing_token,
        "DEL without a token on a fenced key",
    );
    assert_service_error(
        c.vdel(key.clone(), b"v2".to_vec(), None, TIMEOUT).await,
        missing_token,
        "VDEL without a token on a fenced key",
    );

    let get = c
        .get(key.clone(), TIMEOUT)
        .await
        .expect("GET needs no token");
    assert_eq!(
        get.response,
        Some(b"v2".to_vec()),
        "refused requests changed nothing"
    );
    assert_eq!(get.version.as_ref(), Some(&token2));

    let mismatch = c
        .vdel(
            key.clone(),
            b"other".to_vec(),
            Some(token2.clone()),
            TIMEOUT,
        )
        .await
        .expect("VDEL with token, wrong value");
    assert_eq!(
        mismatch.response, -1,
        "a fenced VDEL still compares the value"
    );
    let del = c
        .del(key.clone(), Some(token2), TIMEOUT)
        .await
        .expect("DEL with the current token");
    assert_eq!(del.response, 1);

    // Deleting a key removes its token.
    let plain_set = c
        .set(key.clone(), b"fresh".to_vec(), TIMEOUT, None, plain())
        .await
        .expect("SET without token after the delete");
    assert!(plain_set.response, "the token went away with the key");
    sdk.shutdown().await;
}

/// A token lower than the stored one is refused with FencingTokenLowerVersion on SET, DEL and
/// VDEL; an equal or higher token proceeds, and a SET with a higher token raises the stored token
/// so the previously valid one becomes "lower" (§4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lower_fencing_token_refused_equal_and_higher_accepted() {
    let (broker, _node) = setup().await;
    let sdk = client(&broker, "t20-fence-lower").await;
    let c = &sdk.client;
    let key = b"fenced-lower".to_vec();

    let low = HybridLogicalClock::new();
    assert!(
        c.set(
            key.clone(),
            b"v1".to_vec(),
            TIMEOUT,
            Some(low.clone()),
            plain()
        )
        .await
        .expect("SET seeding the low token")
        .response
    );
    // Raise the stored token to `mid` (a server version, later than `low`).
    let mid = version_of(
        &c.set(b"clock".to_vec(), b"x".to_vec(), TIMEOUT, None, plain())
            .await
            .expect("SET another key for a fresh version"),
        "SET clock",
    );
    assert!(
        c.set(
            key.clone(),
            b"v2".to_vec(),
            TIMEOUT,
            Some(mid.clone()),
            plain()
        )
        .await
        .expect("SET with the higher token")
        .response
    );

    assert_service_error(
        c.set(
            key.clone(),
            b"bad".to_vec(),
            TIMEOUT,
            Some(low.clone()),
            plain(),
        )
        .await,
        lower_token,
        "SET with a lower token",
    );
    assert_service_error(
        c.del(key.clone(), Some(low.clone()), TIMEOUT).await,
        lower_token,
        "DEL with a lower token",
    );
    assert_service_error(
        c.vdel(key.clone(), b"v2".to_vec(), Some(low), TIMEOUT)
            .await,
        lower_token,
        "VDEL with a lower token",
    );
    assert_eq!(
        c.get(key.clone(), TIMEOUT).await.expect("GET").response,
        Some(b"v2".to_vec()),
        "refused writes changed nothing"
    );

    let equal = c
        .set(
            key.clone(),
            b"v3".to_vec(),
            TIMEOUT,
            Some(mid.clone()),
            plain(),
        )
        .await
        .expect("SET with the equal token");
    assert!(equal.response, "an equal token proceeds");
    let high = version_of(&equal, "SET v3");
    assert_hlc_gt(&high, &mid, "a newer version");
    let higher = c
        .set(
            key.clone(),
            b"v4".to_vec(),
            TIMEOUT,
            Some(high.clone()),
            plain(),
        )
        .await
        .expect("SET with a higher token");
    assert!(higher.response, "a higher token proceeds");

    assert_service_error(
        c.set(key.clone(), b"stale".to_vec(), TIMEOUT, Some(mid), plain())
            .await,
        lower_token,
        "the once-valid token is lower after a higher one was stored",
    );
    let vdel = c
        .vdel(key.clone(), b"v4".to_vec(), Some(high), TIMEOUT)
        .await
        .expect("VDEL with the stored token");
    assert_eq!(vdel.response, 1);
    sdk.shutdown().await;
}

/// Lease acquire/renew/release/contention with two SDK clients: only one holds the lease; the
/// other's acquire fails while it is held; renewal by the holder works and issues a newer token;
/// a non-holder cannot release it; after release the other acquires with a newer token (§4 lease
/// pattern).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_acquire_renew_release_contention() {
    let (broker, _node) = setup().await;
    let a = client(&broker, "t20-lease-a").await;
    let b = client(&broker, "t20-lease-b").await;
    let lease_a = Lease::new(&a, b"the-lease");
    let lease_b = Lease::new(&b, b"the-lease");
    let ttl = Duration::from_secs(20);

    let token_a = lease_a.acquire(ttl).await.expect("A acquires a free lease");
    assert_eq!(
        lease_a.holder().await,
        Some(a.client_id.as_bytes().to_vec())
    );
    assert!(
        lease_b.acquire(ttl).await.is_none(),
        "B cannot take A's lease"
    );
    assert_eq!(
        lease_b.holder().await,
        Some(a.client_id.as_bytes().to_vec()),
        "B's failed attempt changed nothing"
    );

    let renewed = lease_a.acquire(ttl).await.expect("A renews its own lease");
    assert_hlc_gt(&renewed, &token_a, "a renewal issues a newer token");

    assert_eq!(lease_b.release().await, -1, "B cannot release A's lease");
    assert_eq!(
        lease_a.holder().await,
        Some(a.client_id.as_bytes().to_vec())
    );

    assert_eq!(lease_a.release().await, 1, "A releases its lease");
    assert_eq!(lease_a.holder().await, None);
    let token_b = lease_b
        .acquire(ttl)
        .await
        .expect("B acquires after release");
    assert_hlc_gt(&token_b, &renewed, "B's token is newer than any of A's");
    assert!(lease_a.acquire(ttl).await.is_none(), "now A is locked out");
    assert_eq!(lease_a.release().await, -1, "A's release no longer applies");
    assert_eq!(lease_b.release().await, 1);
    assert_eq!(lease_b.release().await, 0, "releasing twice finds no lease");
    a.shutdown().await;
    b.shutdown().await;
}

/// A lease that is not renewed expires: the other client, refused at first, acquires it once the
/// lease's PX has passed (§8 expiry applies to NEX).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_expiry_lets_the_other_client_acquire() {
    let (broker, _node) = setup().await;
    let a = client(&broker, "t20-exp-a").await;
    let b = client(&broker, "t20-exp-b").await;
    let lease_a = Lease::new(&a, b"expiring-lease");
    let lease_b = Lease::new(&b, b"expiring-lease");

    let token_a = lease_a
        .acquire(Duration::from_millis(1000))
        .await
        .expect("A acquires");
    assert!(
        lease_b.acquire(Duration::from_secs(20)).await.is_none(),
        "B is refused while A's lease lives"
    );
    let token_b = wait_for(Duration::from_secs(15), || async {
        lease_b.acquire(Duration::from_secs(20)).await
    })
    .await
    .expect("B acquires after A's lease expired");
    assert_hlc_gt(&token_b, &token_a, "B's token");
    assert_eq!(
        lease_b.holder().await,
        Some(b.client_id.as_bytes().to_vec())
    );
    assert!(
        lease_a.acquire(Duration::from_secs(20)).await.is_none(),
        "A cannot take it back"
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// The token returned by a lease acquire protects a resource key: the holder writes it with its
/// token; after the lease changes hands the new holder writes with its newer token, and the old
/// holder's stale token is refused (FencingTokenLowerVersion) without changing the value; a write
/// without any token is refused too (§4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_token_fences_a_resource_key() {
    let (broker, _node) = setup().await;
    let a = client(&broker, "t20-res-a").await;
    let b = client(&broker, "t20-res-b").await;
    let lease_a = Lease::new(&a, b"resource-lease");
    let lease_b = Lease::new(&b, b"resource-lease");
    let resource = b"resource".to_vec();
    let ttl = Duration::from_secs(20);

    let token_a = lease_a.acquire(ttl).await.expect("A acquires");
    assert!(
        a.client
            .set(
                resource.clone(),
                b"from-a".to_vec(),
                TIMEOUT,
                Some(token_a.clone()),
                plain()
            )
            .await
            .expect("A writes with its token")
            .response
    );

    assert_eq!(lease_a.release().await, 1);
    let token_b = lease_b.acquire(ttl).await.expect("B acquires");
    assert!(
        b.client
            .set(
                resource.clone(),
                b"from-b".to_vec(),
                TIMEOUT,
                Some(token_b.clone()),
                plain()
            )
            .await
            .expect("B writes with its newer token")
            .response
    );

    assert_service_error(
        a.client
            .set(
                resource.clone(),
                b"late-a".to_vec(),
                TIMEOUT,
                Some(token_a.clone()),
                plain(),
            )
            .await,
        lower_token,
        "A's stale token",
    );
    assert_service_error(
        a.client.del(resource.clone(), Some(token_a), TIMEOUT).await,
        lower_token,
        "A's stale token on DEL",
    );
    assert_service_error(
        a.client
            .set(
                resource.clone(),
                b"no-token".to_vec(),
                TIMEOUT,
                None,
                plain(),
            )
            .await,
        missing_token,
        "no token on the protected resource",
    );
    let get = b.client.get(resource.clone(), TIMEOUT).await.expect("GET");
    assert_eq!(
        get.response,
        Some(b"from-b".to_vec()),
        "only B's write landed"
    );
    assert_eq!(
        b.client
            .del(resource, Some(token_b), TIMEOUT)
            .await
            .expect("B deletes with its token")
            .response,
        1
    );
    a.shutdown().await;
    b.shutdown().await;
}
