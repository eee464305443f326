//! [`Batch`]: the application payload of one log entry — the proposals the leader packed
//! together — encoded once.
//!
//! A batch is written to the leader's log and sent to every follower; followers write what they
//! received to their own log. Each of those used to re-encode the proposals. A batch now keeps
//! its encoding (made on first use on the leader, or the received bytes on a follower) next to
//! the decoded proposals, behind one `Arc`: serialising a batch copies those bytes, cloning it
//! (log cache, apply, replication) bumps a counter.

use std::fmt;
use std::sync::{Arc, OnceLock};

use opentelemetry::Context;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use statestore_storage::codec;
use statestore_storage::keyspace::{Mutation, Proposal};

use crate::trace::ProposalTraces;

/// A batch of proposals (cheap to clone).
#[derive(Clone)]
pub struct Batch(Arc<Inner>);

struct Inner {
    proposals: Vec<Proposal>,
    encoded: OnceLock<Vec<u8>>,
    /// Trace contexts of sampled proposals (leader memory only; never encoded).
    traces: ProposalTraces,
}

impl Batch {
    /// A batch of `proposals`, in log order.
    pub fn new(proposals: Vec<Proposal>) -> Batch {
        Batch::traced(proposals, Vec::new())
    }

    /// A batch of `proposals` with the trace contexts of the sampled ones (`contexts[i]` is
    /// proposal `i`'s; missing entries are unsampled).
    pub fn traced(proposals: Vec<Proposal>, contexts: Vec<Option<Context>>) -> Batch {
        Batch(Arc::new(Inner {
            proposals,
            encoded: OnceLock::new(),
            traces: ProposalTraces::new(contexts),
        }))
    }

    /// The trace contexts of the batch's sampled proposals (see [`crate::trace`]).
    pub fn traces(&self) -> &ProposalTraces {
        &self.0.traces
    }

    /// The proposals, in log order.
    pub fn proposals(&self) -> &[Proposal] {
        &self.0.proposals
    }

    /// Number of proposals.
    pub fn len(&self) -> usize {
        self.0.proposals.len()
    }

    /// True if the batch holds no proposal.
    pub fn is_empty(&self) -> bool {
        self.0.proposals.is_empty()
    }

    /// The versioned encoding of the proposals (computed once).
    pub fn encoded(&self) -> &[u8] {
        self.0
            .encoded
            .get_or_init(|| codec::encode(&self.0.proposals))
    }

    /// Decodes a batch from its encoding, keeping the bytes as the batch's encoding.
    pub fn decode(bytes: Vec<u8>) -> statestore_storage::Result<Batch> {
        let proposals: Vec<Proposal> = codec::decode("proposal batch", &bytes)?;
        Ok(Batch(Arc::new(Inner {
            proposals,
            encoded: OnceLock::from(bytes),
            traces: ProposalTraces::default(),
        })))
    }
}

/// Key and value bytes a proposal carries (what batches are capped by).
pub fn approximate_bytes(proposal: &Proposal) -> usize {
    match &proposal.mutation {
        Mutation::Set { key, value, .. } | Mutation::VDel { key, value, .. } => {
            key.len() + value.len()
        }
        Mutation::Del { key, .. }
        | Mutation::Observe { key, .. }
        | Mutation::Unobserve { key, .. } => key.len(),
        Mutation::Expire { keys } => keys.iter().map(|k| k.len()).sum(),
        Mutation::ForgetClient { client } => client.len(),
        Mutation::SetLimits(_) => 0,
        Mutation::Device(command) => command.approximate_bytes(),
    }
}

impl PartialEq for Batch {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.proposals == other.0.proposals
    }
}

impl Eq for Batch {}

impl fmt::Debug for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Batch({} proposals)", self.len())
    }
}

impl fmt::Display for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "batch of {}", self.len())
    }
}

impl Serialize for Batch {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.encoded())
    }
}

impl<'de> Deserialize<'de> for Batch {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let bytes = serde_bytes::ByteBuf::deserialize(deserializer)?;
        Batch::decode(bytes.into_vec()).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests;
