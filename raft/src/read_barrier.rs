//! The linearizable-read barrier.
//!
//! openraft 0.10 queues ReadIndex reads inside its core and releases every read whose arrival
//! precedes a quorum acknowledgement — of a heartbeat or of ordinary replication — so concurrent
//! reads share one round without help from here. This module only maps its errors and retries
//! a round that found no quorum in time (a busy follower, not necessarily a lost leader).

use openraft::ReadPolicy;
use openraft::error::{LinearizableReadError, RaftError};

use crate::error::{Error, Result};
use crate::types::Raft;

/// Rounds retried when a quorum did not answer in time.
const QUORUM_RETRIES: usize = 3;

/// Returns once this node confirmed with a quorum, after the call, that it leads, and applied
/// everything committed before the call.
pub(crate) async fn wait(raft: &Raft) -> Result<()> {
    let mut attempt = 0;
    loop {
        match raft.ensure_linearizable(ReadPolicy::ReadIndex).await {
            Ok(_) => return Ok(()),
            Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(f))) => {
                return Err(Error::NotLeader {
                    leader: f.leader_id,
                });
            }
            Err(RaftError::APIError(LinearizableReadError::QuorumNotEnough(_)))
                if attempt < QUORUM_RETRIES =>
            {
                attempt += 1;
            }
            Err(RaftError::APIError(LinearizableReadError::QuorumNotEnough(_))) => {
                return Err(Error::QuorumNotReached);
            }
            Err(RaftError::Fatal(f)) => return Err(Error::Stopped(f.to_string())),
        }
    }
}
