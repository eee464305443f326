//! Outbound side: one [`PeerClient`] per (peer, purpose) — openraft keeps separate clients for
//! replication, heartbeats, snapshots and votes — each over its own persistent TCP connection.
//!
//! Replication streams pipeline AppendEntries: a writer task sends requests as openraft produces
//! them while the stream reads the answers in order, so a follower's fsync and the next batch's
//! transfer overlap. Heartbeat clients get one-request streams (openraft's heartbeat worker):
//! those are answered as plain calls on the kept connection, without a writer task. A
//! replication answer may take [`PeerTimeouts::replication`] (a loaded follower, not the
//! heartbeat interval); heartbeats and votes use openraft's own deadline.
//!
//! Connections are plain TCP, or mutual TLS with [`PeerTls`] (see [`super::tls`]); the TLS
//! handshake is part of connecting and shares its deadline ([`PeerTimeouts::connect`]).
//!
//! Error mapping: a refused or failed connection is `Unreachable` (openraft backs off longer);
//! a broken connection or undecodable answer is `Network`; no answer in time is `Timeout`.
//! After any error the connection is dropped and the next call opens a new one.
//!
//! Every request written to a connection is counted in `statestore_raft_rpcs_sent_total{kind}`
//! ([`PeerRpcMetrics`]): a heartbeat client's AppendEntries as `heartbeat`, a replication
//! stream's as `append`.

use std::future::Future;
use std::time::Duration;

use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, Stream, StreamExt};
use openraft::OptionalSend;
use openraft::base::{BoxFuture, BoxStream};
use openraft::error::{
    NetworkError, RPCError, ReplicationClosed, StreamingError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RPCTypes, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, StreamAppendResult,
    TransferLeaderRequest, TransferLeaderResponse, VoteRequest, VoteResponse,
};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use crate::error::PeerError;
use crate::metrics::{PeerRpcMetrics, RpcKind};
use crate::network::protocol::{self, PROTOCOL_VERSION, Request, Response, SNAPSHOT_CHUNK_BYTES};
use crate::network::refusal::SnapshotRefusal;
use crate::network::tls::{PeerStream, PeerTls, Transport};
use crate::snapshot::SnapshotData;
use crate::types::{Node, NodeId, Snapshot, TypeConfig, Vote};

type Conn = Framed<PeerStream, LengthDelimitedCodec>;
type RpcError = RPCError<TypeConfig>;

/// AppendEntries a replication stream keeps unanswered at most.
const PIPELINE_DEPTH: usize = 64;

/// Deadlines of peer calls.
#[derive(Debug, Clone, Copy)]
pub struct PeerTimeouts {
    /// Establishing a connection (TCP, the TLS handshake if any, and hello).
    pub connect: Duration,
    /// An answer to one replicated AppendEntries.
    pub replication: Duration,
}

impl Default for PeerTimeouts {
    fn default() -> Self {
        PeerTimeouts {
            connect: Duration::from_millis(500),
            replication: Duration::from_secs(3),
        }
    }
}

/// Creates a [`PeerClient`] per target and purpose.
#[derive(Clone)]
pub struct NetworkFactory {
    id: NodeId,
    timeouts: PeerTimeouts,
    rpcs: PeerRpcMetrics,
    transport: Transport,
}

impl NetworkFactory {
    /// Clients of node `id` with these deadlines, counting what they send in `rpcs`, over
    /// plain TCP (see [`NetworkFactory::with_tls`]).
    pub fn new(id: NodeId, timeouts: PeerTimeouts, rpcs: PeerRpcMetrics) -> Self {
        let transport = Transport::new(None, rpcs.clone(), timeouts.connect);
        NetworkFactory {
            id,
            timeouts,
            rpcs,
            transport,
        }
    }

    /// The same clients over mutual TLS (`Some`) or plain TCP (`None`).
    pub fn with_tls(mut self, tls: Option<PeerTls>) -> Self {
        self.transport = Transport::new(tls, self.rpcs.clone(), self.timeouts.connect);
        self
    }

    fn client(&self, target: NodeId, node: &Node, purpose: Purpose) -> PeerClient {
        let appends = self.rpcs.sent(match purpose {
            Purpose::Replication => RpcKind::Append,
            Purpose::Heartbeat => RpcKind::Heartbeat,
        });
        PeerClient {
            from: self.id,
            target,
            addr: node.addr.clone(),
            transport: self.transport.clone(),
            timeouts: self.timeouts,
            purpose,
            conn: None,
            rpcs: self.rpcs.clone(),
            appends,
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> PeerClient {
        self.client(target, node, Purpose::Replication)
    }

    async fn new_heartbeat_client(&mut self, target: NodeId, node: &Node) -> PeerClient {
        self.client(target, node, Purpose::Heartbeat)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Replication,
    Heartbeat,
}

/// One connection to one peer.
pub struct PeerClient {
    from: NodeId,
    target: NodeId,
    addr: String,
    transport: Transport,
    timeouts: PeerTimeouts,
    purpose: Purpose,
    conn: Option<Conn>,
    rpcs: PeerRpcMetrics,
    /// Counts this client's AppendEntries (`append` or `heartbeat`, by purpose).
    appends: prometheus::IntCounter,
}

/// `err` as openraft's `Network` error (retried at once). Built from the message, so that
/// openraft logs the same text as ours.
fn network(err: PeerError) -> RpcError {
    RPCError::Network(NetworkError::from_string(err))
}

/// `err` as openraft's `Unreachable` error (retried after a backoff).
fn unreachable(err: PeerError) -> RpcError {
    RPCError::Unreachable(Unreachable::from_string(err))
}

/// Opens a connection to `addr` (TCP, then TLS if configured) and exchanges hellos, all
/// within `within`.
pub(crate) async fn connect(
    transport: &Transport,
    addr: &str,
    from: Option<NodeId>,
    within: Duration,
) -> Result<Conn, PeerError> {
    let open = async {
        let stream = transport.connect(addr).await?;
        let mut conn = Framed::new(stream, protocol::framing());
        let hello = Request::Hello {
            protocol: PROTOCOL_VERSION,
            from,
        };
        conn.send(protocol::encode(&hello))
            .await
            .map_err(|source| PeerError::SendHello {
                addr: addr.to_owned(),
                source,
            })?;
        let addr = addr.to_owned();
        match read_response(&mut conn).await? {
            Response::Hello { protocol } if protocol == PROTOCOL_VERSION => Ok(conn),
            Response::Hello { protocol } => Err(PeerError::OtherProtocol { addr, protocol }),
            Response::Refused(reason) => Err(PeerError::HelloRefused { addr, reason }),
            _ => Err(PeerError::NoHelloAnswer { addr }),
        }
    };
    tokio::time::timeout(within, open)
        .await
        .unwrap_or_else(|_| {
            Err(PeerError::ConnectTimeout {
                addr: addr.to_owned(),
                within,
            })
        })
}

/// Reads the next response frame.
pub(crate) async fn read_response<S>(conn: &mut S) -> Result<Response, PeerError>
where
    S: Stream<Item = std::io::Result<bytes::BytesMut>> + Unpin,
{
    match conn.next().await {
        Some(Ok(frame)) => {
            protocol::decode("peer response", &frame).map_err(PeerError::UndecodableAnswer)
        }
        Some(Err(e)) => Err(PeerError::ReadAnswer(e)),
        None => Err(PeerError::Closed),
    }
}

impl PeerClient {
    async fn connection(&mut self) -> Result<Conn, RpcError> {
        match self.conn.take() {
            Some(conn) => Ok(conn),
            None => connect(
                &self.transport,
                &self.addr,
                Some(self.from),
                self.timeouts.connect,
            )
            .await
            .map_err(unreachable),
        }
    }

    fn timeout_error(&self, action: RPCTypes, after: Duration) -> RpcError {
        RPCError::Timeout(Timeout {
            action,
            id: self.from,
            target: self.target,
            timeout: after,
        })
    }

    /// The counter of requests of `kind` this client writes (an AppendEntries counts as this
    /// client's purpose says: `heartbeat` on a heartbeat client, `append` otherwise).
    fn counter(&self, kind: RpcKind) -> prometheus::IntCounter {
        match kind {
            RpcKind::Append | RpcKind::Heartbeat => self.appends.clone(),
            other => self.rpcs.sent(other),
        }
    }

    /// Sends one request of `kind` and reads its answer; keeps the connection only on success.
    async fn call(
        &mut self,
        request: &Request,
        kind: RpcKind,
        action: RPCTypes,
        within: Duration,
    ) -> Result<Response, RpcError> {
        let mut conn = self.connection().await?;
        let sent = self.counter(kind);
        let exchange = async {
            conn.send(protocol::encode(request))
                .await
                .map_err(|e| network(PeerError::Send(e)))?;
            sent.inc();
            read_response(&mut conn).await.map_err(network)
        };
        let response = tokio::time::timeout(within, exchange)
            .await
            .map_err(|_| self.timeout_error(action, within))??;
        self.conn = Some(conn);
        Ok(response)
    }

    fn answer_timeout(&self, option: &RPCOption) -> Duration {
        match self.purpose {
            Purpose::Replication => self.timeouts.replication.max(option.hard_ttl()),
            Purpose::Heartbeat => option.hard_ttl(),
        }
    }
}

/// Sends requests from openraft's stream as they come, counting each in `counted`; returns the
/// sink when the stream ends.
async fn write_requests<S>(
    mut sink: SplitSink<Conn, bytes::Bytes>,
    mut input: S,
    sent: mpsc::Sender<Instant>,
    counted: prometheus::IntCounter,
) -> Option<SplitSink<Conn, bytes::Bytes>>
where
    S: Stream<Item = AppendEntriesRequest<TypeConfig>> + Unpin,
{
    while let Some(request) = input.next().await {
        // Reserve the in-flight slot first: this is where pipelining is bounded.
        let Ok(slot) = sent.reserve().await else {
            return None;
        };
        if sink
            .send(protocol::encode(&Request::Append(request)))
            .await
            .is_err()
        {
            return None;
        }
        counted.inc();
        slot.send(Instant::now());
    }
    Some(sink)
}

/// Aborts the writer task if the stream is dropped before it finished.
struct AbortOnDrop(Option<tokio::task::JoinHandle<Option<SplitSink<Conn, bytes::Bytes>>>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            handle.abort();
        }
    }
}

/// State of one replication stream session.
struct Session<'s> {
    client: &'s mut PeerClient,
    answers: Option<SplitStream<Conn>>,
    sent: mpsc::Receiver<Instant>,
    writer: AbortOnDrop,
    timeout: Duration,
}

impl Session<'_> {
    /// The next answer, `None` once every request of the session is answered.
    async fn next(&mut self) -> Option<Result<StreamAppendResult<TypeConfig>, RpcError>> {
        let Some(sent_at) = self.sent.recv().await else {
            return self.finish().await.err().map(Err);
        };
        let deadline = sent_at + self.timeout;
        let answers = self.answers.as_mut()?;
        let answer = match tokio::time::timeout_at(deadline, read_response(answers)).await {
            Err(_) => Err(self
                .client
                .timeout_error(RPCTypes::AppendEntries, self.timeout)),
            Ok(Err(e)) => Err(network(e)),
            Ok(Ok(response)) => stream_answer(self.client.target, response),
        };
        Some(answer)
    }

    /// Every request was sent and answered: hands the connection back to the client for the
    /// next session, or reports that sending failed.
    async fn finish(&mut self) -> Result<(), RpcError> {
        let (Some(handle), Some(answers)) = (self.writer.0.take(), self.answers.take()) else {
            return Ok(());
        };
        match handle.await {
            Ok(Some(sink)) => {
                if let Ok(conn) = sink.reunite(answers) {
                    self.client.conn = Some(conn);
                }
                Ok(())
            }
            Ok(None) => Err(network(PeerError::AppendNotSent)),
            Err(e) => Err(network(PeerError::AppendWriter(e))),
        }
    }
}

/// What an answer to an AppendEntries means.
fn stream_answer(
    target: NodeId,
    response: Response,
) -> Result<StreamAppendResult<TypeConfig>, RpcError> {
    match response {
        Response::Append(Ok(result)) => Ok(result),
        Response::Append(Err(fatal)) => Err(unreachable(PeerError::RemoteStopped {
            target,
            source: fatal,
        })),
        Response::Refused(reason) => Err(network(PeerError::Refused { reason })),
        _ => Err(network(PeerError::UnexpectedAnswer {
            to: "AppendEntries",
        })),
    }
}

impl PeerClient {
    /// One AppendEntries as a plain call on the kept connection: `append_entries`, and the
    /// streams of heartbeat clients, which carry a single request (openraft's heartbeat
    /// worker), so that a heartbeat costs no writer task, channel or connection split.
    async fn exchange_append(
        &mut self,
        request: AppendEntriesRequest<TypeConfig>,
        within: Duration,
    ) -> Result<StreamAppendResult<TypeConfig>, RpcError> {
        let response = self
            .call(
                &Request::Append(request),
                RpcKind::Append,
                RPCTypes::AppendEntries,
                within,
            )
            .await?;
        let answer = stream_answer(self.target, response);
        // The server ends its stream after an error answer: do not reuse the connection.
        if !matches!(answer, Ok(Ok(_))) {
            self.conn = None;
        }
        answer
    }
}

impl RaftNetworkV2<TypeConfig> for PeerClient {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RpcError> {
        let within = self.answer_timeout(&option);
        self.exchange_append(rpc, within)
            .await
            .map(AppendEntriesResponse::from)
    }

    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> BoxFuture<
        's,
        Result<BoxStream<'s, Result<StreamAppendResult<TypeConfig>, RpcError>>, RpcError>,
    >
    where
        S: Stream<Item = AppendEntriesRequest<TypeConfig>> + OptionalSend + Unpin + 'static,
    {
        Box::pin(async move {
            let timeout = self.answer_timeout(&option);
            if self.purpose == Purpose::Heartbeat {
                let answers =
                    futures::stream::unfold(Some((self, input)), move |state| async move {
                        let (client, mut input) = state?;
                        let request = input.next().await?;
                        let answer = client.exchange_append(request, timeout).await;
                        let keep_going = matches!(answer, Ok(Ok(_)));
                        Some((answer, keep_going.then_some((client, input))))
                    });
                return Ok(Box::pin(answers) as BoxStream<'s, _>);
            }
            let conn = self.connection().await?;
            let (sink, answers) = conn.split();
            let (sent_tx, sent) = mpsc::channel(PIPELINE_DEPTH);
            let writer = tokio::spawn(write_requests(sink, input, sent_tx, self.appends.clone()));
            let session = Session {
                client: self,
                answers: Some(answers),
                sent,
                writer: AbortOnDrop(Some(writer)),
                timeout,
            };
            let answers = futures::stream::unfold(Some(session), |state| async move {
                let mut session = state?;
                let answer = session.next().await?;
                // An error (transport or Raft) ends the session and the connection with it.
                let keep_going = matches!(answer, Ok(Ok(_)));
                Some((answer, keep_going.then_some(session)))
            });
            Ok(Box::pin(answers) as BoxStream<'s, _>)
        })
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RpcError> {
        self.vote_call(Request::Vote(rpc), RpcKind::Vote, option)
            .await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RpcError> {
        self.vote_call(Request::PreVote(rpc), RpcKind::PreVote, option)
            .await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let send = self.send_snapshot(vote, snapshot, option.hard_ttl());
        tokio::select! {
            closed = cancel => {
                self.conn = None;
                Err(StreamingError::Closed(closed))
            }
            result = send => result.map_err(StreamingError::from),
        }
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RpcError> {
        match self
            .call(
                &Request::TransferLeader(req),
                RpcKind::TransferLeader,
                RPCTypes::TransferLeader,
                option.hard_ttl(),
            )
            .await?
        {
            Response::TransferLeader(Ok(response)) => Ok(response),
            Response::TransferLeader(Err(fatal)) => Err(unreachable(PeerError::Remote(fatal))),
            _ => {
                self.conn = None;
                Err(network(PeerError::UnexpectedAnswer {
                    to: "TransferLeader",
                }))
            }
        }
    }
}

impl PeerClient {
    async fn vote_call(
        &mut self,
        request: Request,
        kind: RpcKind,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RpcError> {
        match self
            .call(&request, kind, RPCTypes::Vote, option.hard_ttl())
            .await?
        {
            Response::Vote(Ok(response)) => Ok(response),
            Response::Vote(Err(fatal)) => Err(unreachable(PeerError::Remote(fatal))),
            _ => {
                self.conn = None;
                Err(network(PeerError::UnexpectedAnswer { to: "a vote" }))
            }
        }
    }

    /// Streams the snapshot file in chunks; the answer comes once the peer installed it. A
    /// peer's `corrupt` refusal marks the snapshot so that it is not sent again.
    async fn send_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        within: Duration,
    ) -> Result<SnapshotResponse<TypeConfig>, RpcError> {
        let Snapshot { meta, snapshot } = snapshot;
        let SnapshotData::Outgoing(outgoing) = snapshot else {
            return Err(network(PeerError::NotSendable));
        };
        // Written on first read (an export of the state as it was when openraft asked for
        // it), before a connection is taken: it may take seconds.
        let mut file = outgoing
            .open()
            .await
            // Unreachable, not Network: openraft backs off before it asks for a new export
            // (a full disk would otherwise make it export again and again at once).
            .map_err(|e| unreachable(PeerError::SnapshotNotWritten(e)))?;
        let mut conn = self.connection().await?;
        let sent = self.rpcs.sent(RpcKind::Snapshot);
        let transfer = async {
            conn.send(protocol::encode(&Request::SnapshotBegin { vote, meta }))
                .await
                .map_err(PeerError::Send)?;
            let mut chunk = vec![0u8; SNAPSHOT_CHUNK_BYTES];
            loop {
                let n = file.read(&mut chunk).await.map_err(PeerError::Send)?;
                if n == 0 {
                    break;
                }
                let frame = protocol::encode(&Request::SnapshotChunk(chunk[..n].to_vec()));
                tokio::time::timeout(within, conn.send(frame))
                    .await
                    .map_err(|_| PeerError::SnapshotChunkTimeout)?
                    .map_err(PeerError::Send)?;
            }
            conn.send(protocol::encode(&Request::SnapshotEnd))
                .await
                .map_err(PeerError::Send)?;
            sent.inc();
            tokio::time::timeout(within, read_response(&mut conn))
                .await
                .map_err(|_| PeerError::SnapshotInstallTimeout)?
        };
        match transfer.await.map_err(network)? {
            Response::Snapshot(Ok(response)) => {
                self.conn = Some(conn);
                Ok(response)
            }
            Response::Snapshot(Err(err)) => Err(network(PeerError::SnapshotNotInstalled(err))),
            Response::Refused(reason) => {
                // The refusal travels as its text (a peer of another version that words it
                // differently is only not reported: the transfer is retried as before).
                if reason == SnapshotRefusal::Corrupt.to_string() {
                    outgoing.refuse();
                }
                Err(network(PeerError::SnapshotRefusedByPeer { reason }))
            }
            _ => Err(network(PeerError::UnexpectedAnswer { to: "a snapshot" })),
        }
    }
}
