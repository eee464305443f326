//! Inbound side: accepts peer connections and answers their requests in order.
//!
//! Per connection, a reader decodes frames and starts the work of each request — AppendEntries
//! go into one openraft `stream_append` pipeline, votes and membership changes run as tasks,
//! snapshot chunks go into a file — and queues a handle to its answer; a writer sends the
//! answers in request order. At most [`MAX_PENDING`] answers are outstanding per connection,
//! which bounds what one peer can make this node hold. A frame that does not decode gets
//! `Refused` and the connection is closed; it never reaches Raft. With TLS, a connection whose
//! handshake fails (no client certificate of the cluster CA) is closed before its first frame.

use std::path::PathBuf;

use futures::stream::BoxStream;
use futures::{SinkExt, StreamExt};
use openraft::error::Fatal;
use openraft::raft::StreamAppendResult;
use statestore_storage::sled::StateTree;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::codec::Framed;

use crate::membership;
use crate::network::protocol::{self, PROTOCOL_VERSION, Request, Response};
use crate::network::tls::{PeerStream, Transport};
use crate::snapshot::SnapshotData;
use crate::types::{Raft, Snapshot, SnapshotMeta, TypeConfig, Vote};

/// Answers outstanding per connection (pipelined AppendEntries included).
const MAX_PENDING: usize = 256;

/// Serves peers on `listener` until `stop` turns true, over `transport` (plain or TLS).
pub(crate) async fn serve(
    listener: TcpListener,
    transport: Transport,
    raft: Raft,
    state: StateTree,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|stopped| *stopped) => return,
        };
        match accepted {
            Ok((tcp, peer)) => {
                let connection = Connection {
                    raft: raft.clone(),
                    state: state.clone(),
                };
                let transport = transport.clone();
                tokio::spawn(async move {
                    // The handshake runs here, not in the accept loop: a slow or silent client
                    // holds up only its own connection.
                    let Some(stream) = transport.accept(tcp, peer).await else {
                        return;
                    };
                    if let Err(reason) = connection.run(stream).await {
                        tracing::debug!(%peer, %reason, "peer connection closed");
                    }
                });
            }
            Err(err) => {
                tracing::warn!(error = %err, "accepting a peer connection failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
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
    /// An answer computed by a task.
    Task(JoinHandle<Response>),
    /// An answer known now; `close` ends the connection after it.
    Now { response: Response, close: bool },
}

/// A snapshot being received.
struct Incoming {
    vote: Vote,
    meta: SnapshotMeta,
    path: PathBuf,
    file: tokio::fs::File,
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
}

impl Connection {
    async fn run(self, stream: PeerStream) -> Result<(), String> {
        let conn = Framed::new(stream, protocol::framing());
        let (mut sink, mut frames) = conn.split();
        let (pending_tx, mut pending_rx) = mpsc::channel::<Pending>(MAX_PENDING);

        let writer = tokio::spawn(async move {
            let mut pipeline = None;
            while let Some(pending) = pending_rx.recv().await {
                let (response, close) = match pending {
                    Pending::Pipeline(stream) => {
                        pipeline = Some(stream);
                        continue;
                    }
                    Pending::Append => next_append(&mut pipeline).await,
                    Pending::Task(task) => match task.await {
                        Ok(response) => (response, false),
                        Err(e) => (Response::Refused(format!("request failed: {e}")), true),
                    },
                    Pending::Now { response, close } => (response, close),
                };
                if sink.send(protocol::encode(&response)).await.is_err() || close {
                    return;
                }
            }
        });

        let result = self.read_requests(&mut frames, &pending_tx).await;
        drop(pending_tx);
        // Let the writer send what is queued (a refusal included), then close.
        let _ = writer.await;
        result
    }

    async fn read_requests(
        &self,
        frames: &mut futures::stream::SplitStream<
            Framed<PeerStream, tokio_util::codec::LengthDelimitedCodec>,
        >,
        pending: &mpsc::Sender<Pending>,
    ) -> Result<(), String> {
        let mut appends: Option<mpsc::Sender<_>> = None;
        let mut incoming: Option<(Incoming, PartialFile)> = None;
        let mut greeted = false;
        while let Some(frame) = frames.next().await {
            let frame = frame.map_err(|e| format!("reading: {e}"))?;
            let request: Request = match protocol::decode("peer request", &frame) {
                Ok(request) => request,
                Err(err) => {
                    let reason = format!("undecodable request: {err}");
                    refuse(pending, &reason).await;
                    return Err(reason);
                }
            };
            let work = match request {
                Request::Hello { protocol, from } if !greeted => {
                    greeted = true;
                    if protocol != PROTOCOL_VERSION {
                        let reason = format!(
                            "peer protocol {protocol} from node {from:?}, this node speaks {PROTOCOL_VERSION}"
                        );
                        refuse(pending, &reason).await;
                        return Err(reason);
                    }
                    Pending::Now {
                        response: Response::Hello {
                            protocol: PROTOCOL_VERSION,
                        },
                        close: false,
                    }
                }
                _ if !greeted => {
                    refuse(pending, "the first frame must be a hello").await;
                    return Err("no hello".into());
                }
                Request::Hello { .. } => {
                    refuse(pending, "hello sent twice").await;
                    return Err("second hello".into());
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
                        return Ok(());
                    }
                    continue;
                }
                Request::Vote(rpc) => {
                    let raft = self.raft.clone();
                    Pending::Task(tokio::spawn(async move {
                        Response::Vote(raft.vote(rpc).await.map_err(|e| e.to_string()))
                    }))
                }
                Request::PreVote(rpc) => {
                    let raft = self.raft.clone();
                    Pending::Task(tokio::spawn(async move {
                        Response::Vote(raft.pre_vote(rpc).await.map_err(|e| e.to_string()))
                    }))
                }
                Request::TransferLeader(rpc) => {
                    let raft = self.raft.clone();
                    Pending::Task(tokio::spawn(async move {
                        Response::TransferLeader(
                            raft.handle_transfer_leader(rpc)
                                .await
                                .map_err(|e| e.to_string()),
                        )
                    }))
                }
                Request::ChangeMembership(change) => {
                    let raft = self.raft.clone();
                    Pending::Task(tokio::spawn(async move {
                        Response::ChangeMembership(
                            membership::apply_locally(&raft, &change)
                                .await
                                .map_err(|e| e.to_string()),
                        )
                    }))
                }
                Request::SnapshotBegin { vote, meta } => {
                    let path = self.state.incoming_snapshot_path();
                    let file = tokio::fs::File::create(&path)
                        .await
                        .map_err(|e| format!("creating {}: {e}", path.display()))?;
                    let partial = PartialFile(Some(path.clone()));
                    incoming = Some((
                        Incoming {
                            vote,
                            meta,
                            path,
                            file,
                        },
                        partial,
                    ));
                    continue;
                }
                Request::SnapshotChunk(bytes) => {
                    let Some((receiving, _)) = incoming.as_mut() else {
                        refuse(pending, "snapshot chunk without a snapshot").await;
                        return Err("stray snapshot chunk".into());
                    };
                    receiving
                        .file
                        .write_all(&bytes)
                        .await
                        .map_err(|e| format!("writing snapshot: {e}"))?;
                    continue;
                }
                Request::SnapshotEnd => {
                    let Some((receiving, mut partial)) = incoming.take() else {
                        refuse(pending, "snapshot end without a snapshot").await;
                        return Err("stray snapshot end".into());
                    };
                    partial.0 = None; // from here the state machine owns the file
                    let raft = self.raft.clone();
                    Pending::Task(tokio::spawn(install(raft, receiving)))
                }
            };
            send(pending, work).await?;
        }
        Ok(())
    }
}

async fn send(pending: &mpsc::Sender<Pending>, work: Pending) -> Result<(), String> {
    pending
        .send(work)
        .await
        .map_err(|_| "connection writer stopped".to_owned())
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
        Some(Err(fatal)) => (Response::Append(Err(fatal.to_string())), true),
        None => (Response::Append(Err("raft stopped".into())), true),
    }
}

/// Makes a received snapshot durable and hands it to Raft.
async fn install(raft: Raft, incoming: Incoming) -> Response {
    let Incoming {
        vote,
        meta,
        path,
        mut file,
    } = incoming;
    let prepared = async {
        file.flush().await?;
        file.sync_all().await?;
        drop(file);
        SnapshotData::open(path.clone()).await
    }
    .await;
    let data = match prepared {
        Ok(data) => data,
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            return Response::Snapshot(Err(format!("storing the snapshot: {e}")));
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
        .map_err(|e| e.to_string());
    // The state machine renames an installed snapshot; a refused one is left behind.
    if path.exists() {
        let _ = std::fs::remove_file(&path);
    }
    Response::Snapshot(result)
}
