//! Inbound side: accepts peer connections and answers their requests in order.
//!
//! A connection is admitted only under the listener's cap ([`Inbound`]); it must then finish
//! its TLS handshake (with TLS) and send its hello within the connect deadline, in a frame of
//! at most [`protocol::HELLO_FRAME_BYTES`]: a silent connection, an oversized length header or
//! a first frame that is no hello of this protocol closes it before anything is reserved for
//! it. Only then is the frame limit raised to [`protocol::MAX_FRAME_BYTES`].
//!
//! Per connection, a reader decodes frames and starts the work of each request — AppendEntries
//! go into one openraft `stream_append` pipeline, votes and membership changes run as tasks,
//! snapshot chunks go into a file (one snapshot at a time per node, at most
//! `max_snapshot_bytes`, its writeback started every MiB) — and queues a handle to its answer;
//! a writer sends the answers in request order. At most [`MAX_PENDING`] answers are
//! outstanding per connection, which bounds what one peer can make this node hold. An answer
//! not ready within [`ANSWER_DEADLINE`] (a snapshot install's excepted) closes the connection
//! (`statestore_raft_peer_answers_overdue_total`), and so does the peer closing its side,
//! wherever the reader or writer waits: a connection never outlives its use. A frame that does
//! not decode gets `Refused` and the connection is closed; it never reaches Raft. With TLS, a
//! connection whose handshake fails (no client certificate of the cluster CA naming a peer) is
//! closed before its first frame.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;

use futures::stream::BoxStream;
use futures::{Sink, SinkExt, StreamExt};
use openraft::error::Fatal;
use openraft::raft::StreamAppendResult;
use statestore_storage::StorageError;
use statestore_storage::store::StateTree;
use statestore_storage::write_behind::{self, Due, WriteBehind};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use crate::error::PeerError;
use crate::membership;
use crate::network::inbound::{Inbound, InboundLimits, SnapshotBudget};
use crate::network::protocol::{
    self, PROTOCOL_VERSION, RemoteError, RemoteErrorKind, Request, Response,
};
use crate::network::refusal::HelloRefusal;
use crate::network::tls::{PeerStream, Transport};
use crate::snapshot::SnapshotData;
use crate::types::{Raft, Snapshot, SnapshotMeta, TypeConfig, Vote};

/// Answers outstanding per connection (pipelined AppendEntries included).
const MAX_PENDING: usize = 256;

/// How long an answer (other than a snapshot install's) may take before the connection is
/// closed: ten times the default replication timeout, by when the peer has long given up on
/// it and reconnected. Without it a connection whose answer never comes (an append openraft
/// never acknowledges) holds its slot forever: a wiped learner filled all 64 with them.
const ANSWER_DEADLINE: Duration = Duration::from_secs(30);

/// How long queued answers (a refusal, a pipeline's last answer) may still take to go out
/// once the reader stopped.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// Serves peers on `listener` until `stop` turns true, over `transport` (plain or TLS), within
/// `limits`.
pub(crate) async fn serve(
    listener: TcpListener,
    transport: Transport,
    limits: InboundLimits,
    raft: Raft,
    state: StateTree,
    mut stop: watch::Receiver<bool>,
) {
    let inbound = Inbound::new(limits, transport.metrics().clone());
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|stopped| *stopped) => return,
        };
        match accepted {
            Ok((tcp, peer)) => {
                let Some(slot) = inbound.admit() else {
                    tracing::debug!(%peer, "refused a peer connection: at the connection cap");
                    continue;
                };
                let connection = Connection {
                    raft: raft.clone(),
                    state: state.clone(),
                    inbound: inbound.clone(),
                };
                let transport = transport.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    // The handshake and the hello share one deadline from the accept: a
                    // silent client holds its slot no longer than that.
                    let hello_by = Instant::now() + transport.handshake_timeout();
                    // The handshake runs here, not in the accept loop: a slow or silent client
                    // holds up only its own connection.
                    let Some(stream) = transport.accept(tcp, peer).await else {
                        return;
                    };
                    if let Err(reason) = connection.run(stream, hello_by).await {
                        tracing::debug!(%peer, %reason, "peer connection closed");
                    }
                });
            }
            Err(err) => {
                tracing::warn!(error = %err, "accepting a peer connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// The answer to one request, as the writer awaits it.
enum Pending {
    /// A new AppendEntries pipeline: later `Append`s take their answers from it.
    Pipeline(BoxStream<'static, Result<StreamAppendResult<TypeConfig>, Fatal<TypeConfig>>>),
    /// The next answer of the current pipeline.
    Append,
    /// An answer computed by a task (a vote, a leader transfer, a membership change).
    Task(JoinHandle<Response>),
    /// The answer of a snapshot install: no deadline (a large state takes as long as it
    /// takes; the install goes on even if the peer leaves).
    Install(JoinHandle<Response>),
    /// An answer known now; `close` ends the connection after it.
    Now { response: Response, close: bool },
}

/// A snapshot being received.
struct Incoming {
    vote: Vote,
    meta: SnapshotMeta,
    path: PathBuf,
    file: tokio::fs::File,
    /// When the writeback of the bytes written so far is due.
    behind: WriteBehind,
    /// Bytes received against the cap.
    budget: SnapshotBudget,
    /// The node's one inbound snapshot, held until installed or dropped.
    permit: OwnedSemaphorePermit,
}

/// Removes a partially received snapshot file unless it was handed to Raft.
struct PartialFile(Option<PathBuf>);

impl Drop for PartialFile {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

struct Connection {
    raft: Raft,
    state: StateTree,
    inbound: Inbound,
}

impl Connection {
    /// Reads the hello (by `hello_by`, in a small frame) and answers it; then serves requests.
    async fn run(self, stream: PeerStream, hello_by: Instant) -> Result<(), PeerError> {
        let mut conn = Framed::new(stream, protocol::framing_before_hello());
        if let Err(refused) = hello(&mut conn, hello_by).await {
            if let Some(reason) = refused.counted_as() {
                self.inbound.refused(reason);
            }
            if let Some(answer) = refused.answer() {
                tracing::warn!(reason = %answer, "refusing a peer connection");
                let refusal = protocol::encode(&Response::Refused(answer));
                let _ = tokio::time::timeout(Duration::from_secs(1), conn.send(refusal)).await;
            }
            return Err(refused.into());
        }
        protocol::accept_after_hello(conn.codec_mut());
        let (sink, mut frames) = conn.split();
        let (pending_tx, pending_rx) = mpsc::channel::<Pending>(MAX_PENDING);

        // The writer ending (the peer gone, a closing answer sent, an answer overdue) ends the
        // reader too, wherever it waits: on a full queue, a snapshot permit, the next frame.
        let mut writer = tokio::spawn(write_answers(pending_rx, sink, ANSWER_DEADLINE));
        let read = {
            let reader = self.read_requests(&mut frames, &pending_tx);
            tokio::pin!(reader);
            tokio::select! {
                read = &mut reader => Some(read),
                ended = &mut writer => {
                    if let Ok(WriterEnd::Overdue) = ended {
                        self.inbound.answer_overdue();
                    }
                    None
                }
            }
        };
        drop(pending_tx);
        let Some(read) = read else {
            return Ok(());
        };
        // Let the writer send what is queued (a refusal, a pipeline's last answer), within a
        // grace; once the peer closed its side nothing sent is read, so it stops at once.
        match tokio::time::timeout(writer_grace(&read), &mut writer).await {
            Ok(Ok(WriterEnd::Overdue)) => self.inbound.answer_overdue(),
            Ok(_) => {}
            Err(_) => writer.abort(),
        }
        read.map(|_| ())
    }

    async fn read_requests(
        &self,
        frames: &mut futures::stream::SplitStream<
            Framed<PeerStream, tokio_util::codec::LengthDelimitedCodec>,
        >,
        pending: &mpsc::Sender<Pending>,
    ) -> Result<ReadEnd, PeerError> {
        let mut appends: Option<mpsc::Sender<_>> = None;
        let mut incoming: Option<(Incoming, PartialFile)> = None;
        while let Some(frame) = frames.next().await {
            let frame = frame.map_err(PeerError::ReadRequest)?;
            let request: Request = match protocol::decode("peer request", &frame) {
                Ok(request) => request,
                Err(err) => {
                    let err = PeerError::UndecodableRequest(err);
                    refuse(pending, &err.to_string()).await;
                    return Err(err);
                }
            };
            let work = match request {
                Request::Hello { .. } => {
                    refuse(pending, "hello sent twice").await;
                    return Err(PeerError::SecondHello);
                }
                Request::Append(rpc) => {
                    let input = match &appends {
                        Some(input) if !input.is_closed() => input.clone(),
                        _ => {
                            let (input, requests) = mpsc::channel(MAX_PENDING);
                            let requests = futures::stream::unfold(requests, |mut rx| async move {
                                rx.recv().await.map(|request| (request, rx))
                            });
                            let answers = self.raft.stream_append(requests);
                            send(pending, Pending::Pipeline(answers.boxed())).await?;
                            appends = Some(input.clone());
                            input
                        }
                    };
                    send(pending, Pending::Append).await?;
                    if input.send(rpc).await.is_err() {
                        // The pipeline ended (an error answer is on its way); the writer
                        // closes the connection after it.
                        return Ok(ReadEnd::PipelineEnded);
                    }
                    continue;
                }
                Request::Vote(rpc) => {
                    let raft = self.raft.clone();
                    Pending::Task(tokio::spawn(async move {
                        Response::Vote(raft.vote(rpc).await.map_err(RemoteError::stopped))
                    }))
                }
                Request::PreVote(rpc) => {
                    let raft = self.raft.clone();
                    Pending::Task(tokio::spawn(async move {
                        Response::Vote(raft.pre_vote(rpc).await.map_err(RemoteError::stopped))
                    }))
                }
                Request::TransferLeader(rpc) => {
                    let raft = self.raft.clone();
                    Pending::Task(tokio::spawn(async move {
                        Response::TransferLeader(
                            raft.handle_transfer_leader(rpc)
                                .await
                                .map_err(RemoteError::stopped),
                        )
                    }))
                }
                Request::ChangeMembership(change) => {
                    let raft = self.raft.clone();
                    Pending::Task(tokio::spawn(async move {
                        Response::ChangeMembership(
                            membership::apply_locally(&raft, &change)
                                .await
                                .map_err(|e| RemoteError::from_error(&e)),
                        )
                    }))
                }
                Request::SnapshotBegin { vote, meta } => {
                    // A new transfer replaces one this connection had not finished (its
                    // partial file is removed, its permit returned).
                    drop(incoming.take());
                    let permit = match self.inbound.snapshot_permit().await {
                        Ok(permit) => permit,
                        Err(refusal) => {
                            refuse(pending, &refusal.to_string()).await;
                            return Err(refusal.into());
                        }
                    };
                    let path = self.state.incoming_snapshot_path();
                    let file = match tokio::fs::File::create(&path).await {
                        Ok(file) => file,
                        Err(source) => return Err(PeerError::CreateSnapshot { path, source }),
                    };
                    let partial = PartialFile(Some(path.clone()));
                    incoming = Some((
                        Incoming {
                            vote,
                            meta,
                            path,
                            file,
                            behind: WriteBehind::new(),
                            budget: self.inbound.snapshot_budget(),
                            permit,
                        },
                        partial,
                    ));
                    continue;
                }
                Request::SnapshotChunk(bytes) => {
                    let Some((receiving, _)) = incoming.as_mut() else {
                        refuse(pending, "snapshot chunk without a snapshot").await;
                        return Err(PeerError::StraySnapshotChunk);
                    };
                    if let Err(refusal) = receiving.budget.take(bytes.len()) {
                        // Dropping `incoming` on return removes the partial file.
                        refuse(pending, &refusal.to_string()).await;
                        return Err(refusal.into());
                    }
                    receiving
                        .file
                        .write_all(&bytes)
                        .await
                        .map_err(PeerError::WriteSnapshot)?;
                    if let Some(due) = receiving.behind.wrote(bytes.len()) {
                        // The written bytes reach the file first (Tokio writes behind too).
                        receiving
                            .file
                            .flush()
                            .await
                            .map_err(PeerError::WriteSnapshot)?;
                        start_writeback(&receiving.file, due).await;
                    }
                    continue;
                }
                Request::SnapshotEnd => {
                    let Some((receiving, mut partial)) = incoming.take() else {
                        refuse(pending, "snapshot end without a snapshot").await;
                        return Err(PeerError::StraySnapshotEnd);
                    };
                    partial.0 = None; // from here the state machine owns the file
                    let raft = self.raft.clone();
                    let inbound = self.inbound.clone();
                    Pending::Install(tokio::spawn(install(raft, receiving, inbound)))
                }
            };
            send(pending, work).await?;
        }
        Ok(ReadEnd::PeerClosed)
    }
}

/// Why a connection's reader stopped without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadEnd {
    /// The peer closed its side.
    PeerClosed,
    /// The AppendEntries pipeline ended; its last answer is queued.
    PipelineEnded,
}

/// Why a connection's writer stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriterEnd {
    /// The reader stopped and everything queued was sent.
    Drained,
    /// An answer that ends the connection was sent (a refusal, a pipeline's final answer).
    Closing,
    /// Sending failed: the peer is gone.
    PeerGone,
    /// An answer was not ready within the deadline.
    Overdue,
}

/// How long the writer may still send after the reader stopped for `read`: nothing once the
/// peer closed or broke its side (what is sent then is not read), else [`DRAIN_GRACE`].
fn writer_grace(read: &Result<ReadEnd, PeerError>) -> Duration {
    match read {
        Ok(ReadEnd::PeerClosed) | Err(PeerError::ReadRequest(_)) => Duration::ZERO,
        _ => DRAIN_GRACE,
    }
}

/// Sends the answers queued in `pending` in order into `sink`, each within `deadline` of the
/// writer starting to wait for it.
async fn write_answers<S>(
    mut pending: mpsc::Receiver<Pending>,
    mut sink: S,
    deadline: Duration,
) -> WriterEnd
where
    S: Sink<Bytes> + Unpin,
{
    let mut pipeline = None;
    while let Some(next) = pending.recv().await {
        let answer = match next {
            Pending::Pipeline(stream) => {
                pipeline = Some(stream);
                continue;
            }
            Pending::Append => tokio::time::timeout(deadline, next_append(&mut pipeline)).await,
            Pending::Task(task) => tokio::time::timeout(deadline, joined(task)).await,
            Pending::Install(task) => Ok(joined(task).await),
            Pending::Now { response, close } => Ok((response, close)),
        };
        let Ok((response, close)) = answer else {
            tracing::warn!(
                deadline_secs = deadline.as_secs(),
                "closing a peer connection: an answer was not ready in time (the peer gave up on it long ago)"
            );
            return WriterEnd::Overdue;
        };
        if sink.send(protocol::encode(&response)).await.is_err() {
            return WriterEnd::PeerGone;
        }
        if close {
            return WriterEnd::Closing;
        }
    }
    WriterEnd::Drained
}

/// Reads the first frame by `hello_by` and answers it when it is a hello of this protocol.
async fn hello(
    conn: &mut Framed<PeerStream, LengthDelimitedCodec>,
    hello_by: Instant,
) -> Result<(), HelloRefusal> {
    let frame = match tokio::time::timeout_at(hello_by, conn.next()).await {
        Err(_) => return Err(HelloRefusal::Timeout),
        Ok(None) => return Err(HelloRefusal::Closed),
        Ok(Some(Err(err))) if protocol::is_oversized(&err) => {
            return Err(HelloRefusal::Oversized);
        }
        Ok(Some(Err(err))) => return Err(HelloRefusal::Unreadable(err)),
        Ok(Some(Ok(frame))) => frame,
    };
    let answer = match protocol::decode::<Request>("peer request", &frame) {
        Ok(Request::Hello { protocol, .. }) if protocol == PROTOCOL_VERSION => Response::Hello {
            protocol: PROTOCOL_VERSION,
        },
        Ok(Request::Hello { protocol, from }) => {
            return Err(HelloRefusal::OtherProtocol { protocol, from });
        }
        Ok(_) => return Err(HelloRefusal::NotAHello),
        Err(err) => return Err(HelloRefusal::Undecodable(err)),
    };
    match tokio::time::timeout_at(hello_by, conn.send(protocol::encode(&answer))).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) => Err(HelloRefusal::AnswerFailed(err)),
        Err(_) => Err(HelloRefusal::AnswerTimeout),
    }
}

async fn send(pending: &mpsc::Sender<Pending>, work: Pending) -> Result<(), PeerError> {
    pending
        .send(work)
        .await
        .map_err(|_| PeerError::WriterStopped)
}

async fn refuse(pending: &mpsc::Sender<Pending>, reason: &str) {
    tracing::warn!(%reason, "refusing a peer request");
    let _ = pending
        .send(Pending::Now {
            response: Response::Refused(reason.to_owned()),
            close: true,
        })
        .await;
}

/// A task's answer; a refusal that closes the connection if the task failed.
async fn joined(task: JoinHandle<Response>) -> (Response, bool) {
    match task.await {
        Ok(response) => (response, false),
        Err(e) => (Response::Refused(format!("request failed: {e}")), true),
    }
}

/// The next answer of the AppendEntries pipeline; closes the connection after a final one.
async fn next_append(
    pipeline: &mut Option<
        BoxStream<'static, Result<StreamAppendResult<TypeConfig>, Fatal<TypeConfig>>>,
    >,
) -> (Response, bool) {
    let Some(stream) = pipeline.as_mut() else {
        return (Response::Refused("no AppendEntries pipeline".into()), true);
    };
    match stream.next().await {
        Some(Ok(Ok(appended))) => (Response::Append(Ok(Ok(appended))), false),
        Some(Ok(Err(rejected))) => (Response::Append(Ok(Err(rejected))), true),
        Some(Err(fatal)) => (Response::Append(Err(RemoteError::stopped(fatal))), true),
        None => (
            Response::Append(Err(RemoteError::stopped("raft stopped"))),
            true,
        ),
    }
}

/// Starts the writeback of `due` of a snapshot being received, on a blocking thread (the advice
/// may wait for the disk's queue), so the final `fsync` does not write the whole file at once.
/// A failure only loses the early start.
async fn start_writeback(file: &tokio::fs::File, due: Due) {
    use std::os::fd::AsFd;
    let started = async {
        let fd = file.as_fd().try_clone_to_owned()?;
        tokio::task::spawn_blocking(move || write_behind::start_writeback(&fd, due))
            .await
            .map_err(std::io::Error::other)?
    }
    .await;
    if let Err(err) = started {
        tracing::debug!(error = %err, "cannot start the writeback of a received snapshot early");
    }
}

/// Makes a received snapshot durable, checks it whole, and hands it to Raft. A file that fails
/// the check is refused (counted as `corrupt`) and removed: the state machine would refuse it
/// too, but openraft stops this node's Raft on any state-machine error, and the leader sends
/// a refused snapshot again.
async fn install(raft: Raft, incoming: Incoming, inbound: Inbound) -> Response {
    let Incoming {
        vote,
        meta,
        path,
        mut file,
        behind: _,
        budget: _,
        permit: _permit,
    } = incoming;
    let stored = async {
        file.flush().await?;
        file.sync_all().await?;
        drop(file);
        Ok(())
    }
    .await
    .map_err(|e: std::io::Error| Unusable::Storage(e.into()));
    let opened = match stored {
        Ok(()) => match check_received(&path).await {
            Ok(()) => Ok(SnapshotData::Received { path: path.clone() }),
            Err(unusable) => Err(unusable),
        },
        Err(unusable) => Err(unusable),
    };
    let data = match opened {
        Ok(data) => data,
        Err(Unusable::Corrupt(err)) => {
            remove_received(&path).await;
            tracing::warn!(error = %err, last_log_id = ?meta.last_log_id, "refusing a received snapshot that failed its checks; the leader sends it again");
            return Response::Refused(inbound.corrupt_snapshot().to_string());
        }
        Err(Unusable::Storage(e)) => {
            remove_received(&path).await;
            return Response::Snapshot(Err(RemoteError::new(
                RemoteErrorKind::Storage,
                format_args!("storing the snapshot: {e}"),
            )));
        }
    };
    let result = raft
        .install_full_snapshot(
            vote,
            Snapshot {
                meta,
                snapshot: data,
            },
        )
        .await
        .map_err(RemoteError::stopped);
    // Installed or not, the file is of no more use (this node keeps no snapshot file).
    remove_received(&path).await;
    Response::Snapshot(result)
}

/// Removes a received snapshot file on a blocking thread, its blocks freed gradually
/// (`gradual_remove`: one unlink of 640 MiB held a Raft log `fdatasync` for 22-73 ms). A
/// failure leaves only disk space in use (an open removes `*.tmp` files), so it is logged.
async fn remove_received(path: &std::path::Path) {
    let path = path.to_owned();
    let removed =
        tokio::task::spawn_blocking(move || statestore_storage::gradual_remove::remove(&path))
            .await;
    match removed {
        Ok(Ok(())) => {}
        Ok(Err(err)) => tracing::warn!(error = %err, "could not remove a received snapshot file"),
        Err(err) => tracing::warn!(error = %err, "could not remove a received snapshot file"),
    }
}

/// Why a received snapshot is not handed to Raft.
enum Unusable {
    /// It failed its checks.
    Corrupt(StorageError),
    /// Storing or reading it failed.
    Storage(StorageError),
}

/// Checks a received snapshot file whole (framing, checksum, row order: what an install would
/// refuse), on a blocking thread: it reads and hashes every byte.
async fn check_received(path: &std::path::Path) -> Result<(), Unusable> {
    let path = path.to_owned();
    let started = Instant::now();
    let checked =
        tokio::task::spawn_blocking(move || statestore_storage::store::verify_snapshot(&path))
            .await;
    match checked {
        Ok(Ok(file)) => {
            tracing::debug!(
                entries = file.entries,
                bytes = file.size,
                took_ms = started.elapsed().as_millis() as u64,
                "received snapshot checked"
            );
            Ok(())
        }
        Ok(Err(err @ StorageError::Corrupt { .. })) => Err(Unusable::Corrupt(err)),
        Ok(Err(err)) => Err(Unusable::Storage(err)),
        Err(join) => Err(Unusable::Storage(std::io::Error::other(join).into())),
    }
}

#[cfg(test)]
mod tests;
