//! The HTTP listener: `/metrics` (Prometheus text), `/livez`, `/readyz`, and the admin API
//! (`/admin/status`, `/admin/digest`, `/admin/members`) that `statestore cluster` and the
//! black-box tests use. Plain HTTP, or HTTPS with `[admin.tls]` ([`crate::https`]). The
//! mutating endpoint, `POST /admin/members`, and the costly one, `GET /admin/digest` (it hashes
//! the whole keyspace), require the bearer token of `admin.token_file` when one is set
//! ([`crate::auth`]). The digest is hashed on the blocking pool, one at a time
//! ([`DigestGate`]): a request while another is hashing gets 429 Too Many Requests.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use statestore_raft::{MembershipChange, RaftNode};
use statestore_storage::keyspace::read;
use statestore_storage::machine::read as machine_read;
use tokio::sync::watch;

use crate::admin_token::{self, AdminAuth};
use crate::metrics::NodeMetrics;
use crate::mqtt::SessionState;

/// What the HTTP handlers read.
pub struct HttpState {
    /// Node metrics (and the registry).
    pub metrics: Arc<NodeMetrics>,
    /// Consensus handle.
    pub raft: RaftNode,
    /// Broker connection state.
    pub mqtt: watch::Receiver<SessionState>,
    /// True while leader duties run here.
    pub serving: Arc<AtomicBool>,
    /// Node name.
    pub name: String,
    /// Guards the mutating and costly admin endpoints.
    pub admin_auth: AdminAuth,
    /// Lets one `GET /admin/digest` hash at a time.
    pub digest_gate: DigestGate,
}

/// One keyspace digest at a time (issue 27): hashing reads every record, so a second request
/// while one is hashing is refused (429 with `Retry-After: 1`) rather than queued: callers
/// (`wait_converged` in the tests, monitoring) poll anyway, and a refused request holds nothing.
#[derive(Debug, Clone, Default)]
pub struct DigestGate {
    busy: Arc<AtomicBool>,
}

/// The right to hash, held until dropped (by the blocking task, so a client that disconnects
/// does not free the gate while its hash still runs).
#[derive(Debug)]
pub struct DigestRun {
    busy: Arc<AtomicBool>,
}

impl DigestGate {
    /// The run, unless one is under way.
    pub fn try_start(&self) -> Option<DigestRun> {
        self.busy
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
            .then(|| DigestRun {
                busy: self.busy.clone(),
            })
    }
}

impl Drop for DigestRun {
    fn drop(&mut self) {
        self.busy.store(false, Ordering::Release);
    }
}

impl HttpState {
    /// `Ok` when the node can do its job: connected to the broker, a leader is known, and if
    /// this node is the leader it has taken over and holds the request subscription.
    pub fn readiness(&self) -> Result<(), NotReady> {
        let mqtt = *self.mqtt.borrow();
        if !mqtt.connected {
            return Err(NotReady::BrokerDisconnected);
        }
        let leadership = *self.raft.leadership().borrow();
        let Some(leader) = leadership.leader else {
            return Err(NotReady::NoLeader);
        };
        if leader == self.raft.id()
            && !(self.serving.load(Ordering::SeqCst) && mqtt.request_subscription_active)
        {
            return Err(NotReady::TakingOver);
        }
        Ok(())
    }
}

/// Why `/readyz` answers 503 (its body says it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    /// The MQTT session is down.
    #[error("not connected to the MQTT broker")]
    BrokerDisconnected,
    /// No leader is known to this node.
    #[error("no Raft leader known")]
    NoLeader,
    /// This node leads but does not serve yet.
    #[error("leader still taking over the request subscription")]
    TakingOver,
}

/// The router.
pub fn router(state: Arc<HttpState>) -> Router {
    let guarded = Router::new()
        .route("/admin/members", post(change_members))
        .route("/admin/digest", get(digest))
        .route_layer(middleware::from_fn_with_state(
            state.admin_auth.clone(),
            admin_token::require_token,
        ));
    Router::new()
        .route("/metrics", get(metrics))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/admin/status", get(status))
        .merge(guarded)
        .with_state(state)
}

async fn metrics(State(state): State<Arc<HttpState>>) -> Response {
    let body = state.metrics.render();
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        body,
    )
        .into_response()
}

async fn livez(State(state): State<Arc<HttpState>>) -> Response {
    match read::meta(&state.raft.view()) {
        Ok(_) => (StatusCode::OK, "ok\n").into_response(),
        Err(err) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("storage unreadable: {err}\n"),
        )
            .into_response(),
    }
}

async fn readyz(State(state): State<Arc<HttpState>>) -> Response {
    match state.readiness() {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        )
            .into_response(),
    }
}

/// `GET /admin/status`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Status {
    /// Node id.
    pub id: u64,
    /// Node name.
    pub name: String,
    /// Raft role.
    pub state: String,
    /// Known leader.
    pub leader: Option<u64>,
    /// Term.
    pub term: u64,
    /// Last log index.
    pub last_log_index: Option<u64>,
    /// Last committed index (as this node knows it).
    pub committed_index: Option<u64>,
    /// Last applied index.
    pub applied_index: Option<u64>,
    /// Snapshot index.
    pub snapshot_index: Option<u64>,
    /// Purged index.
    pub purged_index: Option<u64>,
    /// Voters.
    pub voters: Vec<u64>,
    /// Every member (voters and learners) with its Raft address.
    pub members: std::collections::BTreeMap<u64, String>,
    /// Connected to the broker.
    pub mqtt_connected: bool,
    /// Holds the request subscription.
    pub request_subscription_active: bool,
    /// Keys stored.
    pub keys: u64,
    /// Ready (see `/readyz`).
    pub ready: bool,
}

async fn status(State(state): State<Arc<HttpState>>) -> Response {
    let metrics = state.raft.metrics();
    let membership = metrics.membership_config.membership();
    let mqtt = *state.mqtt.borrow();
    let keys = read::meta(&state.raft.view())
        .map(|m| m.keys)
        .unwrap_or_default();
    Json(Status {
        id: metrics.id,
        name: state.name.clone(),
        state: format!("{:?}", metrics.state),
        leader: metrics.current_leader,
        term: metrics.current_term,
        last_log_index: metrics.last_log_index,
        committed_index: state.raft.committed_index().await,
        applied_index: metrics.last_applied.map(|l| l.index),
        snapshot_index: metrics.snapshot.map(|l| l.index),
        purged_index: metrics.purged.map(|l| l.index),
        voters: membership.voter_ids().collect(),
        members: membership
            .nodes()
            .map(|(id, node)| (*id, node.addr.clone()))
            .collect(),
        mqtt_connected: mqtt.connected,
        request_subscription_active: mqtt.request_subscription_active,
        keys,
        ready: state.readiness().is_ok(),
    })
    .into_response()
}

/// `GET /admin/digest`: a hash of the whole replicated keyspace at an applied index.
#[derive(Debug, Serialize, Deserialize)]
pub struct Digest {
    /// Node id.
    pub id: u64,
    /// Applied index the digest was taken at.
    pub applied_index: Option<u64>,
    /// xxh3-64 of every keyspace table, hex.
    pub digest: String,
    /// Keys stored.
    pub keys: u64,
}

/// How often the digest is taken again when entries were applied while hashing.
const DIGEST_ATTEMPTS: usize = 20;

async fn digest(State(state): State<Arc<HttpState>>) -> Response {
    let Some(mut run) = state.digest_gate.try_start() else {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(axum::http::header::RETRY_AFTER, "1")],
            "a digest is being computed; retry\n",
        )
            .into_response();
    };
    // Retry until no entry was applied while hashing, so index and digest belong together.
    for _ in 0..DIGEST_ATTEMPTS {
        let before = state.raft.metrics().last_applied.map(|l| l.index);
        let view = state.raft.view();
        // Off the runtime; the run travels with the hash and comes back with it.
        let hashing = tokio::task::spawn_blocking(move || {
            let hashed =
                machine_read::digest(&view).and_then(|d| read::meta(&view).map(|m| (d, m.keys)));
            (hashed, run)
        });
        let hashed;
        (hashed, run) = match hashing.await {
            Ok(done) => done,
            Err(failed) => {
                return (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("digest task: {failed}\n"),
                )
                    .into_response();
            }
        };
        let after = state.raft.metrics().last_applied.map(|l| l.index);
        match hashed {
            Ok((digest, keys)) if before == after => {
                return Json(Digest {
                    id: state.raft.id(),
                    applied_index: after,
                    digest: format!("{digest:016x}"),
                    keys,
                })
                .into_response();
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(err) => {
                return (StatusCode::INTERNAL_SERVER_ERROR, err.to_string()).into_response();
            }
        }
    }
    drop(run);
    (
        StatusCode::SERVICE_UNAVAILABLE,
        "keyspace kept changing while hashing\n",
    )
        .into_response()
}

/// `POST /admin/members`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum MemberChange {
    /// Add a voter.
    Add {
        /// Node id.
        id: u64,
        /// Its Raft address.
        raft: String,
    },
    /// Remove a node.
    Remove {
        /// Node id.
        id: u64,
    },
}

async fn change_members(
    State(state): State<Arc<HttpState>>,
    Json(change): Json<MemberChange>,
) -> Response {
    let change = match change {
        MemberChange::Add { id, raft } => MembershipChange::AddVoter { id, addr: raft },
        MemberChange::Remove { id } => MembershipChange::Remove { id },
    };
    match state.raft.change_membership(&change).await {
        Ok(()) => {
            tracing::info!(?change, "membership changed");
            (StatusCode::OK, "ok\n").into_response()
        }
        Err(err) => (StatusCode::CONFLICT, format!("{err}\n")).into_response(),
    }
}
