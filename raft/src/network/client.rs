//! Outbound side: an openraft `RaftNetwork` per peer over a shared HTTP client.
//!
//! Error mapping: a refused or failed connection is `Unreachable` (openraft backs off before
//! retrying); anything else that prevents an answer (timeout, broken body) is `Network`; an
//! error the peer's Raft returned is `RemoteError`.

use std::error::Error as StdError;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use statestore_storage::codec;

use crate::network::{APPEND_PATH, SNAPSHOT_PATH, VOTE_PATH};
use crate::types::{Node, NodeId, TypeConfig};

/// Creates a [`PeerClient`] per target; all share one connection pool.
#[derive(Clone)]
pub struct NetworkFactory {
    http: reqwest::Client,
}

impl NetworkFactory {
    /// A factory whose connections time out after `connect_timeout`.
    pub fn new(connect_timeout: Duration) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true)
            .no_proxy()
            .build()?;
        Ok(NetworkFactory { http })
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> PeerClient {
        PeerClient {
            target,
            base_url: format!("http://{}", node.addr),
            http: self.http.clone(),
        }
    }
}

/// The connection to one peer.
pub struct PeerClient {
    target: NodeId,
    base_url: String,
    http: reqwest::Client,
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, Node, RaftError<NodeId, E>>>;

impl PeerClient {
    async fn call<Req, Resp, E>(
        &self,
        path: &str,
        request: &Req,
        option: &RPCOption,
    ) -> RpcResult<Resp, E>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: StdError + DeserializeOwned,
    {
        let response = self
            .http
            .post(format!("{}{}", self.base_url, path))
            .timeout(option.hard_ttl())
            .body(codec::encode(request))
            .send()
            .await
            .map_err(|e| {
                if e.is_connect() {
                    RPCError::Unreachable(Unreachable::new(&e))
                } else {
                    RPCError::Network(NetworkError::new(&e))
                }
            })?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        if !status.is_success() {
            let message = String::from_utf8_lossy(&body).into_owned();
            return Err(RPCError::Network(NetworkError::new(
                &std::io::Error::other(format!("peer answered {status}: {message}")),
            )));
        }
        let result: Result<Resp, RaftError<NodeId, E>> = codec::decode("peer response", &body)
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, openraft::error::Infallible> {
        self.call(APPEND_PATH, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        self.call(SNAPSHOT_PATH, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, openraft::error::Infallible> {
        self.call(VOTE_PATH, &rpc, &option).await
    }
}
