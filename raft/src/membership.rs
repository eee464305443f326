//! Membership changes: add a voter (as a learner first, until it has caught up) or remove a
//! node. Any node accepts a change; a follower forwards it to the leader's Raft listener.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::SinkExt;
use openraft::async_runtime::watch::WatchReceiver;
use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers};
use serde::{Deserialize, Serialize};

use crate::error::{Error, PeerError, Result, StopCause};
use crate::network::protocol::{self, Request, Response};
use crate::network::{Transport, connect, read_response};
use crate::types::{LogId, NodeId, Raft, TypeConfig};

/// How long a forwarded change may take (adding a voter waits for it to catch up).
const FORWARD_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a new learner has, once openraft calls it caught up, to acknowledge anything at
/// all. openraft counts a learner within its lag threshold (5,000 entries) as caught up, so on
/// a short log a node the leader cannot reach at all would pass; it must not become a voter (a
/// voter nobody reaches lowers the fault tolerance: 3 of 4 then make a quorum).
const LEARNER_ACK_WAIT: Duration = Duration::from_secs(10);
/// How long a learner that has acknowledged replication has to acknowledge the entry that
/// added it. It may need more than one snapshot first: under heavy writes the leader purges
/// the entries after the snapshot it is sending before the transfer ends, and sends a newer
/// one (seen with a 28 MB snapshot at 2 s snapshot intervals: 17 s, then 12 s more).
const LEARNER_CATCH_UP_WAIT: Duration = Duration::from_secs(90);
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

fn write_error(err: RaftError<TypeConfig, ClientWriteError<TypeConfig>>) -> Error {
    match err {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f))
        | RaftError::APIError(ClientWriteError::LogEntryDiscarded(f)) => Error::NotLeader {
            leader: f.leader_id,
        },
        RaftError::APIError(e) => Error::Membership(e),
        RaftError::Fatal(f) => StopCause::Fatal(f).into(),
    }
}

/// Runs `change` on this node, which must be the leader.
pub async fn apply_locally(raft: &Raft, change: &MembershipChange) -> Result<()> {
    match change {
        MembershipChange::AddVoter { id, addr } => {
            // Blocking: returns once the learner is within openraft's lag threshold.
            let added = raft
                .add_learner(*id, BasicNode::new(addr.clone()), true)
                .await
                .map_err(write_error)?;
            let matched = |m: &openraft::RaftMetrics<TypeConfig>| {
                learner_matched(m.replication.as_ref(), *id)
            };
            let silent = || Error::LearnerSilent {
                id: *id,
                addr: addr.clone(),
                within: LEARNER_ACK_WAIT,
            };
            let behind = || Error::LearnerBehind {
                id: *id,
                addr: addr.clone(),
                within: LEARNER_CATCH_UP_WAIT,
            };
            let reached = match raft
                .wait(Some(LEARNER_ACK_WAIT))
                .metrics(
                    |m| matched(m).is_some(),
                    "the new learner acknowledges replication",
                )
                .await
            {
                Err(_) => Err(silent()),
                Ok(_) => raft
                    .wait(Some(LEARNER_CATCH_UP_WAIT))
                    .metrics(
                        |m| matched(m) >= Some(added.log_id.index),
                        "the new learner acknowledges the entry that added it",
                    )
                    .await
                    .map(drop)
                    .map_err(|_| behind()),
            };
            if let Err(not_added) = reached {
                // Not left behind as a learner either: the leader would keep dialling it.
                let removed = raft
                    .change_membership(ChangeMembers::RemoveNodes(BTreeSet::from([*id])), false)
                    .await
                    .map_err(write_error);
                tracing::warn!(
                    id,
                    addr,
                    ?removed,
                    reason = %not_added,
                    "a node to add did not acknowledge replication in time: not added"
                );
                return Err(not_added);
            }
            raft.change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([*id])), false)
                .await
                .map_err(write_error)?;
        }
        MembershipChange::Remove { id } => {
            let is_voter = raft
                .metrics()
                .borrow_watched()
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

/// The log index `id` has acknowledged, according to the leader's replication metrics.
fn learner_matched(
    replication: Option<&std::collections::BTreeMap<NodeId, Option<LogId>>>,
    id: NodeId,
) -> Option<u64> {
    replication?.get(&id)?.as_ref().map(|log_id| log_id.index)
}

/// Runs `change` here if this node leads, otherwise forwards it to the leader (over
/// `transport`, the peer network's: TLS when the cluster uses it).
pub(crate) async fn apply_anywhere(
    raft: &Raft,
    transport: &Transport,
    change: &MembershipChange,
) -> Result<()> {
    match apply_locally(raft, change).await {
        Err(Error::NotLeader {
            leader: Some(leader),
        }) => {
            let addr = raft
                .metrics()
                .borrow_watched()
                .membership_config
                .membership()
                .get_node(&leader)
                .map(|n| n.addr.clone())
                .ok_or(Error::NotLeader {
                    leader: Some(leader),
                })?;
            forward(transport, &addr, change).await
        }
        other => other,
    }
}

async fn forward(
    transport: &Transport,
    leader_addr: &str,
    change: &MembershipChange,
) -> Result<()> {
    let exchange = async {
        let mut conn = connect(transport, leader_addr, None, Duration::from_secs(5)).await?;
        conn.send(protocol::encode(&Request::ChangeMembership(change.clone())))
            .await
            .map_err(PeerError::Send)?;
        match read_response(&mut conn).await? {
            Response::ChangeMembership(result) => result.map_err(PeerError::Remote),
            Response::Refused(reason) => Err(PeerError::Refused { reason }),
            _ => Err(PeerError::UnexpectedForwardAnswer),
        }
    };
    match tokio::time::timeout(FORWARD_TIMEOUT, exchange).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(source)) => Err(Error::Forward {
            leader_addr: leader_addr.to_owned(),
            source,
        }),
        Err(_) => Err(Error::ForwardTimeout {
            leader_addr: leader_addr.to_owned(),
            within: FORWARD_TIMEOUT,
        }),
    }
}
