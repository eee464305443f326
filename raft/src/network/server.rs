//! Inbound side: HTTP handlers that decode a peer's request, hand it to the local Raft and
//! encode the result. Undecodable bodies get 400 and never reach Raft.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::routing::post;
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use statestore_storage::codec;

use crate::membership::{self, MEMBERSHIP_PATH, MembershipChange};
use crate::network::{APPEND_PATH, SNAPSHOT_PATH, VOTE_PATH};
use crate::types::{NodeId, Raft, TypeConfig};

/// Largest peer request accepted: a batch of entries with values at the 4 MiB limit.
const MAX_PEER_BODY_BYTES: usize = 512 << 20;

type Reply = Result<Vec<u8>, (StatusCode, String)>;

fn bad_request(err: statestore_storage::StorageError) -> (StatusCode, String) {
    (StatusCode::BAD_REQUEST, err.to_string())
}

/// Routes for the Raft peer listener.
pub fn peer_router(raft: Raft) -> Router {
    Router::new()
        .route(APPEND_PATH, post(append))
        .route(VOTE_PATH, post(vote))
        .route(SNAPSHOT_PATH, post(snapshot))
        .route(MEMBERSHIP_PATH, post(membership))
        .layer(DefaultBodyLimit::max(MAX_PEER_BODY_BYTES))
        .with_state(raft)
}

async fn append(State(raft): State<Raft>, body: Bytes) -> Reply {
    let request: AppendEntriesRequest<TypeConfig> =
        codec::decode("append entries request", &body).map_err(bad_request)?;
    Ok(codec::encode(&raft.append_entries(request).await))
}

async fn vote(State(raft): State<Raft>, body: Bytes) -> Reply {
    let request: VoteRequest<NodeId> = codec::decode("vote request", &body).map_err(bad_request)?;
    Ok(codec::encode(&raft.vote(request).await))
}

async fn snapshot(State(raft): State<Raft>, body: Bytes) -> Reply {
    let request: InstallSnapshotRequest<TypeConfig> =
        codec::decode("install snapshot request", &body).map_err(bad_request)?;
    Ok(codec::encode(&raft.install_snapshot(request).await))
}

/// A membership change forwarded by a follower; only the leader executes it.
async fn membership(State(raft): State<Raft>, body: Bytes) -> Reply {
    let change: MembershipChange =
        codec::decode("membership change", &body).map_err(bad_request)?;
    match membership::apply_locally(&raft, &change).await {
        Ok(()) => Ok(Vec::new()),
        Err(err) => Err((StatusCode::CONFLICT, err.to_string())),
    }
}
