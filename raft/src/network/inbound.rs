//! What the Raft listener admits, so that a peer (or whoever reaches the port) cannot make this
//! node hold unbounded connections or disk:
//! - at most [`InboundLimits::max_connections`] open connections; beyond it a new one is closed
//!   at once (`statestore_raft_peer_connections_refused_total{reason="limit"}`), and the open
//!   ones are a gauge (`statestore_raft_peer_connections_open`);
//! - one inbound snapshot at a time (Raft sends a follower one); another waits up to
//!   [`SNAPSHOT_PERMIT_WAIT`] for it, then is refused (`busy`);
//! - a snapshot transfer of at most [`InboundLimits::max_snapshot_bytes`]; past it the transfer
//!   is refused (`too_large`) and its partial file removed;
//! - a received snapshot that fails its checks is refused (`corrupt`) and removed before Raft
//!   sees it (the check itself is in [`super::server`]).
//!
//! The hello's frame limit and deadline are in [`super::server`] (they need the connection).

use std::sync::Arc;
use std::time::Duration;

use prometheus::IntGauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::metrics::PeerRpcMetrics;
use crate::network::refusal::{ConnectionRefusal, SnapshotRefusal};

/// How long a snapshot transfer waits for another one to finish before it is refused (a leader
/// that reconnects starts its new transfer while the old connection is being torn down).
pub(crate) const SNAPSHOT_PERMIT_WAIT: Duration = Duration::from_secs(2);

/// Caps of the Raft listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InboundLimits {
    /// Open inbound peer connections at most. A node keeps about four to each peer
    /// (replication, heartbeats, votes, a forwarded membership change), so 64 serves a
    /// cluster of nine with room for reconnects.
    pub max_connections: usize,
    /// Bytes of one inbound snapshot at most.
    pub max_snapshot_bytes: u64,
}

impl Default for InboundLimits {
    fn default() -> Self {
        InboundLimits {
            max_connections: 64,
            max_snapshot_bytes: u64::MAX,
        }
    }
}

/// The listener's shared admission state.
#[derive(Clone)]
pub(crate) struct Inbound {
    connections: Arc<Semaphore>,
    snapshots: Arc<Semaphore>,
    max_snapshot_bytes: u64,
    metrics: PeerRpcMetrics,
}

impl Inbound {
    pub(crate) fn new(limits: InboundLimits, metrics: PeerRpcMetrics) -> Inbound {
        Inbound {
            connections: Arc::new(Semaphore::new(limits.max_connections)),
            snapshots: Arc::new(Semaphore::new(1)),
            max_snapshot_bytes: limits.max_snapshot_bytes,
            metrics,
        }
    }

    /// A slot for a just-accepted connection, held for its life; `None` (counted) at the cap.
    pub(crate) fn admit(&self) -> Option<ConnectionSlot> {
        match self.connections.clone().try_acquire_owned() {
            Ok(permit) => {
                let open = self.metrics.connections_open().clone();
                open.inc();
                Some(ConnectionSlot {
                    _permit: permit,
                    open,
                })
            }
            Err(_) => {
                self.metrics
                    .connections_refused(ConnectionRefusal::Limit.label())
                    .inc();
                None
            }
        }
    }

    /// Counts a connection closed because an answer was overdue.
    pub(crate) fn answer_overdue(&self) {
        self.metrics.answers_overdue().inc();
    }

    /// Counts a connection refused before its hello for `reason`.
    pub(crate) fn refused(&self, reason: ConnectionRefusal) {
        self.metrics.connections_refused(reason.label()).inc();
    }

    /// The right to receive a snapshot, held until it is installed or dropped. Waits up to
    /// [`SNAPSHOT_PERMIT_WAIT`] for a transfer in progress; then refuses (counted).
    pub(crate) async fn snapshot_permit(&self) -> Result<OwnedSemaphorePermit, SnapshotRefusal> {
        match tokio::time::timeout(SNAPSHOT_PERMIT_WAIT, self.snapshots.clone().acquire_owned())
            .await
        {
            Ok(Ok(permit)) => Ok(permit),
            _ => self.refused_snapshot(SnapshotRefusal::Busy),
        }
    }

    /// Counts a received snapshot that failed its checks, and returns the refusal.
    pub(crate) fn corrupt_snapshot(&self) -> SnapshotRefusal {
        self.metrics
            .snapshots_refused(SnapshotRefusal::Corrupt.label())
            .inc();
        SnapshotRefusal::Corrupt
    }

    /// Counts `refusal` and returns it.
    fn refused_snapshot<T>(&self, refusal: SnapshotRefusal) -> Result<T, SnapshotRefusal> {
        self.metrics.snapshots_refused(refusal.label()).inc();
        Err(refusal)
    }

    /// A byte budget for one snapshot transfer.
    pub(crate) fn snapshot_budget(&self) -> SnapshotBudget {
        SnapshotBudget {
            max: self.max_snapshot_bytes,
            received: 0,
            metrics: self.metrics.clone(),
        }
    }
}

/// An admitted connection; releases its slot and lowers the gauge when dropped.
pub(crate) struct ConnectionSlot {
    _permit: OwnedSemaphorePermit,
    open: IntGauge,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.open.dec();
    }
}

/// Bytes of one inbound snapshot so far, against the cap.
pub(crate) struct SnapshotBudget {
    max: u64,
    received: u64,
    metrics: PeerRpcMetrics,
}

impl SnapshotBudget {
    /// Accounts for `bytes` more; an error (counted) once the transfer passes the cap.
    pub(crate) fn take(&mut self, bytes: usize) -> Result<(), SnapshotRefusal> {
        self.received = self
            .received
            .saturating_add(u64::try_from(bytes).unwrap_or(u64::MAX));
        if self.received > self.max {
            let refusal = SnapshotRefusal::TooLarge { max: self.max };
            self.metrics.snapshots_refused(refusal.label()).inc();
            return Err(refusal);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
