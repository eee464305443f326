//! Proposal batching: many client proposals share one Raft log entry.
//!
//! Every log entry costs a WAL record, a log id, an apply responder and replication framing on
//! every node; a batch of a thousand SETs costs that once. The batcher takes every proposal
//! queued while earlier batches are in flight and submits them as one entry (in arrival order,
//! so the log keeps the leader's stamp order). At most [`MAX_BATCHES_IN_FLIGHT`] batches are in
//! flight; under load the next batch fills while the earlier ones are replicated and made
//! durable, and with a single client nothing waits.
//!
//! The batcher reaches Raft through [`LogWriter`], a write in two phases: the entry is accepted
//! (it has a place in the log, or never will), then it is applied (one outcome per proposal, or
//! one error for the whole batch). A batch holds its pipeline slot from before it is written
//! until it is applied. The openraft [`Raft`] is the writer in production; the unit tests below
//! drive the batching logic with a fake one.
//!
//! A leader whose quorum acknowledgements are late (a follower's slow `fdatasync`, a busy
//! machine) lets its lease lapse, and openraft refuses writes until a quorum answers again
//! ([`Error::LeaseExpired`]). Such a batch never reached the log: the batcher waits until a
//! quorum confirms this node still leads and writes it again, without the proposals whose
//! requesters gave up meanwhile. Only when another node leads does the batch fail (the
//! requests get no reply and their clients retry there). Versions stay increasing whatever
//! order batches reach the log in: apply issues each version above every earlier one.

use std::future::Future;
use std::sync::Arc;

use openraft::error::{ClientWriteError, ForwardReason};
use openraft::impls::ProgressResponder;
use opentelemetry::Context;
use statestore_storage::machine::{Outcome, Proposal};
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::batch::{Batch, approximate_bytes};
use crate::error::{Error, Result, StopCause};
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
/// A queued proposal, its waiter and its trace context (when sampled).
type Queued = (Proposal, Waiter, Option<Context>);

/// Where batches go: the Raft log (a fake in the unit tests).
pub(crate) trait LogWriter: Clone + Send + Sync + 'static {
    /// Proposes `batch` as one log entry.
    ///
    /// Resolves once the entry is accepted; an error here means it never will be, and every
    /// proposal of the batch gets it. The future it yields resolves once the entry is applied,
    /// with one outcome per proposal in batch order, or the error every proposal gets.
    fn write(
        &self,
        batch: Batch,
    ) -> impl Future<Output = Result<impl Future<Output = Result<Vec<Outcome>>> + Send + 'static>> + Send;

    /// Resolves once a quorum confirmed, after the call, that this node leads (its lease is
    /// renewed); `NotLeader` when another node leads. Retries on its own while no quorum
    /// answers.
    fn confirm_leadership(&self) -> impl Future<Output = Result<()>> + Send;
}

impl LogWriter for Raft {
    async fn write(
        &self,
        batch: Batch,
    ) -> Result<impl Future<Output = Result<Vec<Outcome>>> + Send + 'static> {
        let (responder, response) = ProgressResponder::complete_only();
        self.client_write_ff(batch, Some(responder))
            .await
            .map_err(StopCause::Fatal)?;
        Ok(async move {
            match response.await {
                Ok(Ok(written)) => Ok(written.data),
                Ok(Err(ClientWriteError::ForwardToLeader(f)))
                    if f.reason == ForwardReason::LeaseExpired =>
                {
                    Err(Error::LeaseExpired)
                }
                Ok(Err(ClientWriteError::ForwardToLeader(f))) => Err(Error::NotLeader {
                    leader: f.leader_id,
                }),
                Ok(Err(ClientWriteError::LogEntryDiscarded(_))) => {
                    Err(StopCause::LeadershipChanged.into())
                }
                Ok(Err(e)) => Err(Error::Membership(e)),
                Err(_) => Err(StopCause::WriteAbandoned.into()),
            }
        })
    }

    async fn confirm_leadership(&self) -> Result<()> {
        crate::read_barrier::confirm_leadership(self).await
    }
}

/// Handle used by [`crate::RaftNode::submit`].
#[derive(Clone)]
pub(crate) struct Batcher {
    queue: mpsc::Sender<Queued>,
}

impl Batcher {
    /// Starts the batching task for `raft`.
    pub(crate) fn start(raft: Raft) -> Batcher {
        Batcher::start_with(raft, MAX_QUEUED_PROPOSALS)
    }

    /// Starts the batching task for `writer`, queueing at most `queue_capacity` proposals (at
    /// least one) for the next batches.
    pub(crate) fn start_with<W: LogWriter>(writer: W, queue_capacity: usize) -> Batcher {
        let (queue, pending) = mpsc::channel(queue_capacity.max(1));
        tokio::spawn(run(writer, pending));
        Batcher { queue }
    }

    /// Queues `proposal`; the receiver yields its outcome once its batch is applied. The
    /// current span's context goes with it when sampled ([`crate::trace`]).
    pub(crate) fn submit(&self, proposal: Proposal) -> Result<oneshot::Receiver<Result<Outcome>>> {
        let (tx, rx) = oneshot::channel();
        self.queue
            .try_send((proposal, tx, crate::trace::current_sampled()))
            .map_err(|err| match err {
                mpsc::error::TrySendError::Full(_) => Error::Overloaded,
                mpsc::error::TrySendError::Closed(_) => StopCause::BatcherStopped.into(),
            })?;
        Ok(rx)
    }
}

/// The batching task: forms batches from `pending` and writes them through `writer`.
async fn run<W: LogWriter>(writer: W, mut pending: mpsc::Receiver<Queued>) {
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
        let mut proposals = Vec::with_capacity(batch.len());
        let mut waiters = Vec::with_capacity(batch.len());
        let mut traces = Vec::new();
        for (i, (proposal, waiter, trace)) in batch.into_iter().enumerate() {
            proposals.push(proposal);
            waiters.push(waiter);
            if trace.is_some() {
                traces.resize(i, None);
                traces.push(trace);
            }
        }
        let batch = Batch::traced(proposals, traces);
        match writer.write(batch.clone()).await {
            Ok(applied) => {
                let writer = writer.clone();
                tokio::spawn(async move {
                    let result = applied.await;
                    let (waiters, result) =
                        rewrite_while_lease_expired(&writer, batch, waiters, result).await;
                    distribute(waiters, result);
                    drop(slot);
                });
            }
            Err(refused) => distribute(waiters, Err(refused)),
        }
    }
}

/// While `result` says the leader's lease had lapsed, waits until a quorum confirms this node
/// still leads and writes `batch` again (without the proposals whose requesters stopped
/// waiting). Returns the waiters left and their result.
async fn rewrite_while_lease_expired<W: LogWriter>(
    writer: &W,
    mut batch: Batch,
    mut waiters: Vec<Waiter>,
    mut result: Result<Vec<Outcome>>,
) -> (Vec<Waiter>, Result<Vec<Outcome>>) {
    while matches!(result, Err(Error::LeaseExpired)) {
        if let Err(err) = writer.confirm_leadership().await {
            return (waiters, Err(err));
        }
        (batch, waiters) = without_abandoned(batch, waiters);
        if waiters.is_empty() {
            return (waiters, Ok(Vec::new()));
        }
        tracing::debug!(
            proposals = waiters.len(),
            "the leader's lease lapsed: writing the batch again"
        );
        result = match writer.write(batch.clone()).await {
            Ok(applied) => applied.await,
            Err(refused) => Err(refused),
        };
    }
    (waiters, result)
}

/// `batch` and `waiters` without the proposals nobody waits for any more.
fn without_abandoned(batch: Batch, waiters: Vec<Waiter>) -> (Batch, Vec<Waiter>) {
    if waiters.iter().all(|w| !w.is_closed()) {
        return (batch, waiters);
    }
    let traces: std::collections::HashMap<usize, Context> =
        batch.traces().positioned().into_iter().collect();
    let mut proposals = Vec::with_capacity(waiters.len());
    let mut kept_traces = Vec::new();
    let mut kept = Vec::with_capacity(waiters.len());
    for (i, (proposal, waiter)) in batch.proposals().iter().zip(waiters).enumerate() {
        if waiter.is_closed() {
            continue;
        }
        if let Some(trace) = traces.get(&i) {
            kept_traces.resize(proposals.len(), None);
            kept_traces.push(Some(trace.clone()));
        }
        proposals.push(proposal.clone());
        kept.push(waiter);
    }
    (Batch::traced(proposals, kept_traces), kept)
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
            let (proposals, outcomes) = (waiters.len(), outcomes.len());
            tracing::error!(
                "{}",
                StopCause::OutcomeCount {
                    proposals,
                    outcomes
                }
            );
            for waiter in waiters {
                let _ = waiter.send(Err(StopCause::OutcomeCount {
                    proposals,
                    outcomes,
                }
                .into()));
            }
        }
        Err(Error::NotLeader { leader }) => {
            for waiter in waiters {
                let _ = waiter.send(Err(Error::NotLeader { leader }));
            }
        }
        Err(err) => {
            let err = Arc::new(err);
            for waiter in waiters {
                let _ = waiter.send(Err(StopCause::Batch(err.clone()).into()));
            }
        }
    }
}

#[cfg(test)]
mod tests;
