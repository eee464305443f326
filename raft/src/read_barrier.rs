//! The linearizable-read barrier.
//!
//! openraft 0.10 queues ReadIndex reads inside its core and releases every read whose arrival
//! precedes a quorum acknowledgement — of a heartbeat or of ordinary replication — so concurrent
//! reads share one round without help from here. This module only maps its errors and retries
//! a round that found no quorum in time (a busy follower, not necessarily a lost leader) for as
//! long as this node leads.
//! [`confirm_leadership`] is the same round without the wait for apply: whether a quorum still
//! follows, which a busy state machine must not make look like a lost quorum.

use std::time::Duration;

use openraft::ReadPolicy;
use openraft::error::{LinearizableReadError, RaftError};

use crate::error::{Error, Result, StopCause};
use crate::types::Raft;

/// Pause between rounds that found no quorum in time.
const ROUND_PAUSE: Duration = Duration::from_millis(10);

/// Returns once this node confirmed with a quorum, after the call, that it leads, and applied
/// everything committed before the call. While no quorum answers it keeps trying: a leader
/// with slow followers still leads, and its callers bound the wait by their deadlines.
pub(crate) async fn wait(raft: &Raft) -> Result<()> {
    confirm(raft, true).await
}

/// Returns once this node confirmed with a quorum, after the call, that it leads (however far
/// its state machine is behind); retries like [`wait`].
pub(crate) async fn confirm_leadership(raft: &Raft) -> Result<()> {
    confirm(raft, false).await
}

async fn confirm(raft: &Raft, wait_for_apply: bool) -> Result<()> {
    loop {
        let round = if wait_for_apply {
            raft.ensure_linearizable(ReadPolicy::ReadIndex)
                .await
                .map(drop)
        } else {
            raft.get_read_linearizer(ReadPolicy::ReadIndex)
                .await
                .map(drop)
        };
        match round {
            Ok(()) => return Ok(()),
            Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(f))) => {
                return Err(Error::NotLeader {
                    leader: f.leader_id,
                });
            }
            Err(RaftError::APIError(LinearizableReadError::QuorumNotEnough(_))) => {
                tokio::time::sleep(ROUND_PAUSE).await;
            }
            Err(RaftError::Fatal(f)) => return Err(StopCause::Fatal(f).into()),
        }
    }
}
