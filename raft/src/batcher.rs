//! Proposal batching: many client proposals share one Raft log entry.
//!
//! Every log entry costs a WAL record, a log id, an apply responder and replication framing on
//! every node; a batch of a thousand SETs costs that once. The batcher takes every proposal
//! queued while earlier batches are in flight and submits them as one entry (in arrival order,
//! so the log keeps the leader's stamp order). At most [`MAX_BATCHES_IN_FLIGHT`] batches are in
//! flight; under load the next batch fills while the earlier ones are replicated and made
//! durable, and with a single client nothing waits.

use std::sync::Arc;

use openraft::error::ClientWriteError;
use openraft::impls::ProgressResponder;
use statestore_storage::keyspace::{Outcome, Proposal};
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::batch::{Batch, approximate_bytes};
use crate::error::{Error, Result};
use crate::types::Raft;

/// Batches in flight at once (replicating and being made durable while the next one fills).
const MAX_BATCHES_IN_FLIGHT: usize = 4;
/// Proposals per batch.
const MAX_BATCH_PROPOSALS: usize = 1_024;
/// Approximate key+value bytes per batch (one large value still goes alone).
const MAX_BATCH_BYTES: usize = 4 << 20;
/// Proposals queued for the next batches; beyond this, submissions are refused with
/// [`Error::Overloaded`]. The node's request budget admits far fewer, so only a runaway
/// internal producer can reach it.
pub(crate) const MAX_QUEUED_PROPOSALS: usize = 65_536;

type Waiter = oneshot::Sender<Result<Outcome>>;

/// Handle used by [`crate::RaftNode::submit`].
#[derive(Clone)]
pub(crate) struct Batcher {
    queue: mpsc::Sender<(Proposal, Waiter)>,
}

impl Batcher {
    /// Starts the batching task for `raft`.
    pub(crate) fn start(raft: Raft) -> Batcher {
        let (queue, pending) = mpsc::channel(MAX_QUEUED_PROPOSALS);
        tokio::spawn(run(raft, pending));
        Batcher { queue }
    }

    /// Queues `proposal`; the receiver yields its outcome once its batch is applied.
    pub(crate) fn submit(&self, proposal: Proposal) -> Result<oneshot::Receiver<Result<Outcome>>> {
        let (tx, rx) = oneshot::channel();
        self.queue
            .try_send((proposal, tx))
            .map_err(|err| match err {
                mpsc::error::TrySendError::Full(_) => Error::Overloaded,
                mpsc::error::TrySendError::Closed(_) => {
                    Error::Stopped("proposal batcher stopped".into())
                }
            })?;
        Ok(rx)
    }
}

async fn run(raft: Raft, mut pending: mpsc::Receiver<(Proposal, Waiter)>) {
    let slots = Arc::new(Semaphore::new(MAX_BATCHES_IN_FLIGHT));
    while let Some(first) = pending.recv().await {
        // Wait for pipeline room; proposals arriving meanwhile join this batch.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut bytes = approximate_bytes(&first.0);
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH_PROPOSALS && bytes < MAX_BATCH_BYTES {
            match pending.try_recv() {
                Ok(next) => {
                    bytes += approximate_bytes(&next.0);
                    batch.push(next);
                }
                Err(_) => break,
            }
        }
        let (proposals, waiters): (Vec<Proposal>, Vec<Waiter>) = batch.into_iter().unzip();
        let (responder, response) = ProgressResponder::complete_only();
        match raft
            .client_write_ff(Batch::new(proposals), Some(responder))
            .await
        {
            Ok(()) => {
                tokio::spawn(async move {
                    let result = match response.await {
                        Ok(Ok(written)) => Ok(written.data),
                        Ok(Err(ClientWriteError::ForwardToLeader(f))) => Err(Error::NotLeader {
                            leader: f.leader_id,
                        }),
                        Ok(Err(ClientWriteError::LogEntryDiscarded(_))) => Err(Error::Stopped(
                            "leadership changed before the write committed; outcome unknown".into(),
                        )),
                        Ok(Err(e)) => Err(Error::Membership(e.to_string())),
                        Err(_) => Err(Error::Stopped(
                            "raft dropped the write (shutting down or leadership lost)".into(),
                        )),
                    };
                    distribute(waiters, result);
                    drop(slot);
                });
            }
            Err(fatal) => distribute(waiters, Err(Error::Stopped(fatal.to_string()))),
        }
    }
}

/// Hands each waiter its own outcome (or the batch's error).
fn distribute(waiters: Vec<Waiter>, result: Result<Vec<Outcome>>) {
    match result {
        Ok(outcomes) if outcomes.len() == waiters.len() => {
            for (waiter, outcome) in waiters.into_iter().zip(outcomes) {
                let _ = waiter.send(Ok(outcome));
            }
        }
        Ok(outcomes) => {
            let message = format!(
                "batch of {} proposals got {} outcomes",
                waiters.len(),
                outcomes.len()
            );
            tracing::error!("{message}");
            for waiter in waiters {
                let _ = waiter.send(Err(Error::Stopped(message.clone())));
            }
        }
        Err(err) => {
            let message = err.to_string();
            for waiter in waiters {
                let _ = waiter.send(Err(match &err {
                    Error::NotLeader { leader } => Error::NotLeader { leader: *leader },
                    _ => Error::Stopped(message.clone()),
                }));
            }
        }
    }
}
