//! The admin HTTP API on its own (issue 27): a real single-node Raft over a temporary store,
//! the node's router on a loopback port, and the node's own admin client. `GET /admin/digest`
//! needs the bearer token when one is configured (like `POST /admin/members`), stays open
//! without one, and hashes one digest at a time: a request while another holds the gate is
//! answered 429.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use axum::http::{Method, StatusCode};
use statestore_node::admin::AdminClient;
use statestore_node::admin_token::{AdminAuth, AdminToken};
use statestore_node::http::{self, DigestGate, HttpState};
use statestore_node::metrics::NodeMetrics;
use statestore_node::mqtt::SessionState;
use statestore_raft::{DiscardEvents, RaftConfig, RaftNode};
use statestore_storage::store::{Store, StoreConfig};
use tokio::sync::watch;

const TOKEN: &str = "http-admin-test-token-0123456789";

/// A single-node cluster's HTTP listener, guarded by `token` when given.
struct Listener {
    state: Arc<HttpState>,
    endpoint: String,
    dir: tempfile::TempDir,
    _mqtt: watch::Sender<SessionState>,
}

impl Listener {
    async fn start(token: Option<&str>) -> Listener {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&StoreConfig::new(dir.path().join("db"), 16 << 20)).expect("store");
        let metrics = Arc::new(NodeMetrics::new().expect("metrics"));
        let config = RaftConfig {
            id: 1,
            ..RaftConfig::default()
        };
        let raft = RaftNode::start(&config, store, Arc::new(DiscardEvents), &metrics.registry)
            .await
            .expect("raft");
        raft.bootstrap([(1, "127.0.0.1:1".to_owned())].into())
            .await
            .expect("bootstrap");
        // Led and caught up: nothing is applied while the tests compare digests.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while raft.ensure_linearizable().await.is_err() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "single node never led"
            );
            tokio::task::yield_now().await;
        }
        let token = token.map(|t| AdminToken::parse(t).expect("token"));
        let admin_auth = AdminAuth::new(token, &metrics.registry).expect("auth metric");
        let (mqtt, state) = watch::channel(SessionState::default());
        let state = Arc::new(HttpState {
            metrics,
            raft,
            mqtt: state,
            serving: Arc::new(AtomicBool::new(false)),
            name: "http-admin-test".to_owned(),
            admin_auth,
            digest_gate: DigestGate::default(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
        let router = http::router(state.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Listener {
            state,
            endpoint,
            dir,
            _mqtt: mqtt,
        }
    }

    /// A client of this listener, sending `token` when given.
    fn client(&self, token: Option<&str>) -> AdminClient {
        let file = token.map(|token| {
            let path = self.dir.path().join(format!("token-{}", token.len()));
            std::fs::write(&path, format!("{token}\n")).expect("token file");
            path
        });
        AdminClient::new(&self.endpoint, None, file.as_deref()).expect("client")
    }
}

async fn get(client: &AdminClient, path: &str) -> (StatusCode, String) {
    client
        .call(Method::GET, path, None)
        .await
        .expect("answered")
}

#[tokio::test]
async fn the_digest_requires_the_token_when_one_is_configured() {
    let listener = Listener::start(Some(TOKEN)).await;
    let anonymous = listener.client(None);
    let wrong = listener.client(Some("not-the-token-0123456789"));
    let admin = listener.client(Some(TOKEN));

    let (code, body) = get(&anonymous, "/admin/digest").await;
    assert_eq!(code, StatusCode::UNAUTHORIZED, "{body}");
    let (code, _) = get(&wrong, "/admin/digest").await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    assert_eq!(
        listener.state.admin_auth.refused(),
        2,
        "both refusals counted"
    );

    let (code, body) = get(&admin, "/admin/digest").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let digest: http::Digest = serde_json::from_str(&body).expect("digest JSON");
    assert_eq!(digest.id, 1);
    assert_eq!(digest.digest.len(), 16, "{body}");

    // The cheap read-only endpoints stay open.
    let (code, body) = get(&anonymous, "/admin/status").await;
    assert_eq!(code, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn without_a_token_the_digest_stays_open() {
    let listener = Listener::start(None).await;
    let (code, body) = get(&listener.client(None), "/admin/digest").await;
    assert_eq!(code, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn one_digest_at_a_time_the_second_gets_429() {
    let listener = Listener::start(Some(TOKEN)).await;
    let admin = listener.client(Some(TOKEN));
    let first = get(&admin, "/admin/digest").await;
    assert_eq!(first.0, StatusCode::OK, "{}", first.1);

    // Another digest is hashing (the test holds the gate as a running digest would).
    let running = listener
        .state
        .digest_gate
        .try_start()
        .expect("the gate is free between digests");
    assert!(
        listener.state.digest_gate.try_start().is_none(),
        "one run at a time"
    );
    let (code, body) = get(&admin, "/admin/digest").await;
    assert_eq!(code, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body, "a digest is being computed; retry\n");
    // Refused before the token check would be wrong: without the token it is still 401.
    let (code, _) = get(&listener.client(None), "/admin/digest").await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);

    drop(running);
    let (code, body) = get(&admin, "/admin/digest").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body, first.1, "same keyspace, same index: same digest");
    assert!(
        listener.state.digest_gate.try_start().is_some(),
        "a finished digest frees the gate"
    );
}
