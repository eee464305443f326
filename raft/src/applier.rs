//! The apply thread: runs committed entries through the state machine ([`Machine`]) and commits
//! them to the state tree, on a thread of its own.
//!
//! Applying blocks: a read of the state tree that misses the memtable goes to fjall, which may
//! read its table files from disk, and a commit waits while the memtable is full until the flush
//! thread has written a layer. (With sled, the state database before fjall, a read also waited
//! for every memtable flush: sled's atomic batches held a process-wide lock.) On a Tokio worker
//! such a wait would stall whatever else that worker runs — Raft heartbeats and replication
//! among them — and a stalled leader gets deposed. Here it only delays apply.

use std::io;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use openraft::EntryPayload;
use openraft::storage::ApplyResponder;
use statestore_storage::codec;
use statestore_storage::engine::Overlay;
use statestore_storage::machine::{Carry, DeviceIndex, Machine, Outcome};
use statestore_storage::store::StateTree;
use tokio::sync::oneshot;

use crate::error::Error;
use crate::metrics::RaftStorageMetrics;
use crate::state_machine::{EventSink, LAST_APPLIED, MEMBERSHIP, TracedEvent};
use crate::trace;
use crate::types::{Entry, StoredMembership, TypeConfig};

/// Entries to apply, each with the responder of its client (leader only).
pub(crate) type Chunk = Vec<(Entry, Option<ApplyResponder<TypeConfig>>)>;

enum Job {
    Apply {
        chunk: Chunk,
        done: oneshot::Sender<io::Result<()>>,
    },
    /// A snapshot replaced the state: forget what was learnt about the old one.
    Reset,
}

/// What a committed chunk hands out: each client's outcomes, and the key events.
type Applied = (
    Vec<(ApplyResponder<TypeConfig>, Vec<Outcome>)>,
    Vec<TracedEvent>,
);

/// Handle to the apply thread (the thread ends when the handle is dropped).
pub(crate) struct Applier {
    jobs: mpsc::Sender<Job>,
}

/// `err` as the `io::Error` openraft's storage traits take (its message and source kept).
fn io_err(err: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> io::Error {
    io::Error::other(err)
}

impl Applier {
    /// Starts the thread.
    pub(crate) fn start(
        state: StateTree,
        sink: Arc<dyn EventSink>,
        metrics: Arc<RaftStorageMetrics>,
    ) -> io::Result<Applier> {
        let (jobs, queue) = mpsc::channel();
        let mut worker = Worker {
            state,
            sink,
            metrics,
            carry: Carry::default(),
        };
        std::thread::Builder::new()
            .name("apply".into())
            .spawn(move || {
                while let Ok(job) = queue.recv() {
                    match job {
                        Job::Apply { chunk, done } => {
                            let _ = done.send(worker.apply(chunk));
                        }
                        Job::Reset => worker.carry = Carry::default(),
                    }
                }
            })?;
        Ok(Applier { jobs })
    }

    /// Applies `chunk` and waits until it is committed to the state tree.
    pub(crate) async fn apply(&self, chunk: Chunk) -> io::Result<()> {
        let (done, applied) = oneshot::channel();
        self.jobs
            .send(Job::Apply { chunk, done })
            .map_err(|_| io::Error::other("apply thread stopped"))?;
        applied
            .await
            .unwrap_or_else(|_| Err(io::Error::other("apply thread stopped")))
    }

    /// Drops what apply learnt about the state (after a snapshot install).
    pub(crate) fn reset(&self) {
        let _ = self.jobs.send(Job::Reset);
    }
}

struct Worker {
    state: StateTree,
    sink: Arc<dyn EventSink>,
    metrics: Arc<RaftStorageMetrics>,
    /// What the last transaction learnt about the state.
    carry: Carry,
}

/// A wait at least this long, with work to do, counts as a stall of apply.
pub(crate) const STALL: Duration = Duration::from_millis(50);

/// What the apply thread is doing between two steps of progress (the label of a stall).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Waiting until the memtable has room (the flush thread writes it to fjall behind).
    MemtableRoom,
    /// Waiting for the device queues' index (readers or a snapshot install hold it).
    DeviceIndex,
    /// Applying one proposal (its reads of the state may wait for the disk).
    Apply,
    /// Handing the transaction's writes to the memtable.
    Commit,
}

impl Phase {
    /// Every phase.
    pub(crate) const ALL: [Phase; 4] = [
        Phase::MemtableRoom,
        Phase::DeviceIndex,
        Phase::Apply,
        Phase::Commit,
    ];

    /// The `waiting_on` label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Phase::MemtableRoom => "memtable_room",
            Phase::DeviceIndex => "device_index",
            Phase::Apply => "apply",
            Phase::Commit => "commit",
        }
    }
}

/// Marks the apply thread's progress through a job: each step that took [`STALL`] or more is
/// counted as a stall of the phase it was in.
struct Progress<'m> {
    metrics: &'m RaftStorageMetrics,
    phase: Phase,
    since: Instant,
}

impl<'m> Progress<'m> {
    fn start(metrics: &'m RaftStorageMetrics, phase: Phase) -> Progress<'m> {
        Progress {
            metrics,
            phase,
            since: Instant::now(),
        }
    }

    /// The current phase is over: count it if it stalled, and enter `next`.
    fn step(&mut self, next: Phase) {
        let now = Instant::now();
        let took = now.saturating_duration_since(self.since);
        if took >= STALL {
            tracing::debug!(
                waiting_on = self.phase.label(),
                ms = took.as_millis() as u64,
                "apply stalled"
            );
            self.metrics
                .apply_stall_seconds
                .with_label_values(&[self.phase.label()])
                .observe(took.as_secs_f64());
        }
        self.phase = next;
        self.since = now;
    }
}

impl Worker {
    /// Applies `chunk` in one transaction, commits it, then answers and notifies. The device
    /// queues' index is held from the first proposal to the commit, so readers never see it
    /// ahead of the committed rows; if the transaction fails it is rebuilt from them.
    fn apply(&mut self, chunk: Chunk) -> io::Result<()> {
        let metrics = self.metrics.clone();
        let mut progress = Progress::start(&metrics, Phase::MemtableRoom);
        // A full memtable makes the commit wait for the disk: wait now, before the index is
        // locked, so its readers never wait for the disk.
        self.state.wait_for_room();
        progress.step(Phase::DeviceIndex);
        let devices = self.state.device_index();
        let mut index = devices.lock().unwrap_or_else(|p| p.into_inner());
        progress.step(Phase::Apply);
        let applied = self.apply_with(chunk, &mut index, &mut progress);
        if applied.is_err()
            && let Err(err) = self.state.reload_device_index(&mut index)
        {
            tracing::error!(error = %err, "rebuilding the device queues' index after a failed apply");
        }
        drop(index);
        let (answers, events) = applied?;
        for (responder, outcomes) in answers {
            responder.send(outcomes);
        }
        if !events.is_empty() {
            self.sink.deliver(events);
        }
        Ok(())
    }

    /// Applies and commits `chunk`; returns the answers and the events to hand out.
    fn apply_with(
        &mut self,
        chunk: Chunk,
        index: &mut DeviceIndex,
        progress: &mut Progress<'_>,
    ) -> io::Result<Applied> {
        let started = Instant::now();
        let view = self.state.view();
        let mut txn = Overlay::new(&view);
        let mut answers = Vec::with_capacity(chunk.len());
        let mut events = Vec::new();
        let mut last_applied = None;
        let mut membership = None;
        // One span for the chunk, opened at its first traced batch (leader only).
        let mut apply_span: Option<tracing::Span> = None;
        let chunk_len = chunk.len();
        let carry;
        {
            let mut machine =
                Machine::open_with_index(&mut txn, &self.carry, index).map_err(io_err)?;
            for (entry, responder) in chunk {
                let log_id = entry.log_id;
                last_applied = Some(log_id);
                let outcomes = match entry.payload {
                    EntryPayload::Blank => Vec::new(),
                    EntryPayload::Normal(batch) => {
                        // Taken, not copied: the batch may stay in the log cache.
                        let mut traces = batch.traces().take().into_iter().peekable();
                        if traces.peek().is_some() && apply_span.is_none() {
                            let span = tracing::debug_span!(target: trace::TARGET, "raft.apply", entries = chunk_len);
                            let contexts: Vec<_> = traces.clone().map(|(_, c)| c).collect();
                            trace::attach(&span, &contexts);
                            apply_span = Some(span);
                        }
                        let mut outcomes = Vec::with_capacity(batch.len());
                        for (i, proposal) in batch.proposals().iter().enumerate() {
                            let applied = machine
                                .apply(proposal)
                                .map_err(|source| io_err(Error::Apply { log_id, source }))?;
                            let trace = traces.next_if(|(at, _)| *at == i).map(|(_, c)| c);
                            events.extend(applied.events.into_iter().map(|event| TracedEvent {
                                event,
                                trace: trace.clone(),
                            }));
                            outcomes.push(applied.outcome);
                            progress.step(Phase::Apply);
                        }
                        outcomes
                    }
                    EntryPayload::Membership(m) => {
                        membership = Some(StoredMembership::new(Some(log_id), m));
                        Vec::new()
                    }
                };
                if let Some(responder) = responder {
                    answers.push((responder, outcomes));
                }
            }
            if let Some(last) = &last_applied {
                machine.put_consensus_record(LAST_APPLIED, codec::encode(last));
            }
            if let Some(m) = &membership {
                machine.put_consensus_record(MEMBERSHIP, codec::encode(m));
            }
            carry = machine.carry();
            machine.finish();
        }
        progress.step(Phase::Commit);
        self.state.commit(txn.into_txn_writes()).map_err(|e| {
            self.metrics.disk_errors_total.inc();
            io_err(e)
        })?;
        progress.step(Phase::Apply);
        self.carry = carry;
        drop(apply_span);
        self.metrics
            .apply_commit_seconds
            .observe(started.elapsed().as_secs_f64());
        Ok((answers, events))
    }
}

#[cfg(test)]
mod tests;
