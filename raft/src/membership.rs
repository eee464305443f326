//! Membership changes: add a voter (as a learner first, until it has caught up) or remove a
//! node. Any node accepts a change; a follower forwards it to the leader's Raft listener.

use std::collections::BTreeSet;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers};
use serde::{Deserialize, Serialize};
use statestore_storage::codec;

use crate::error::{Error, Result};
use crate::types::{NodeId, Raft};

/// Path on the Raft listener where a leader accepts forwarded changes.
pub const MEMBERSHIP_PATH: &str = "/cluster/membership";

/// A requested membership change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MembershipChange {
    /// Add `id` at Raft address `addr` as a voter.
    AddVoter {
        /// Node id.
        id: NodeId,
        /// Its Raft listener address.
        addr: String,
    },
    /// Remove `id` (voter or learner) from the cluster.
    Remove {
        /// Node id.
        id: NodeId,
    },
}

fn write_error(err: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>) -> Error {
    match err {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => Error::NotLeader {
            leader: f.leader_id,
        },
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            Error::Membership(e.to_string())
        }
        RaftError::Fatal(f) => Error::Stopped(f.to_string()),
    }
}

/// Runs `change` on this node, which must be the leader.
pub async fn apply_locally(raft: &Raft, change: &MembershipChange) -> Result<()> {
    match change {
        MembershipChange::AddVoter { id, addr } => {
            // Blocking: returns once the learner has caught up with the leader's log.
            raft.add_learner(*id, BasicNode::new(addr.clone()), true)
                .await
                .map_err(write_error)?;
            raft.change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([*id])), false)
                .await
                .map_err(write_error)?;
        }
        MembershipChange::Remove { id } => {
            let is_voter = raft
                .metrics()
                .borrow()
                .membership_config
                .membership()
                .voter_ids()
                .any(|v| v == *id);
            let change = if is_voter {
                ChangeMembers::RemoveVoters(BTreeSet::from([*id]))
            } else {
                ChangeMembers::RemoveNodes(BTreeSet::from([*id]))
            };
            raft.change_membership(change, false)
                .await
                .map_err(write_error)?;
        }
    }
    Ok(())
}

/// Runs `change` here if this node leads, otherwise forwards it to the leader.
pub async fn apply_anywhere(raft: &Raft, change: &MembershipChange) -> Result<()> {
    match apply_locally(raft, change).await {
        Err(Error::NotLeader {
            leader: Some(leader),
        }) => {
            let addr = raft
                .metrics()
                .borrow()
                .membership_config
                .membership()
                .get_node(&leader)
                .map(|n| n.addr.clone())
                .ok_or(Error::NotLeader {
                    leader: Some(leader),
                })?;
            forward(&addr, change).await
        }
        other => other,
    }
}

async fn forward(leader_addr: &str, change: &MembershipChange) -> Result<()> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .no_proxy()
        .build()
        .map_err(|e| Error::Membership(e.to_string()))?;
    let response = http
        .post(format!("http://{leader_addr}{MEMBERSHIP_PATH}"))
        .body(codec::encode(change))
        .send()
        .await
        .map_err(|e| {
            Error::Membership(format!("forwarding to the leader at {leader_addr}: {e}"))
        })?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    if status.is_success() {
        Ok(())
    } else {
        Err(Error::Membership(format!(
            "leader at {leader_addr} answered {status}: {}",
            body.trim()
        )))
    }
}
