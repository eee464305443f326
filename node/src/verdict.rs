//! What became of one request, in one place: it was [`Verdict::Answered`] (an [`Answer`] to
//! publish) or it gets no reply ([`NoReply`]: refused at the door, not served here, or too
//! late). Each variant knows its wire effect and its metric labels; the label sets the request
//! metrics create up front ([`result_labels`], [`NoReply::labels`]) come from iterating them,
//! so a new variant cannot miss its series.
//!
//! Below the service and the metrics (both use it); knows nothing about MQTT or Raft beyond the
//! errors it classifies.

use statestore_protocol::{ErrorReply, Reply};
use statestore_vocab::hlc::Hlc;

use crate::error::NodeError;

/// A reply to publish (errors of the protocol's table included) and the `__ts` version that
/// goes with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A reply of the state store protocol's shapes (§2, §5.1), encoded when published.
    Reply {
        /// The payload.
        reply: Reply,
        /// `__ts`, when the protocol requires one.
        version: Option<Hlc>,
    },
    /// A read's reply already encoded by its codec (device-bound QUEUE and DEADLETTERS): a
    /// success (`ok`), without `__ts`.
    Encoded(Vec<u8>),
}

impl Answer {
    /// An `-ERR` reply (no `__ts`).
    pub fn error(error: ErrorReply) -> Self {
        Answer::Reply {
            reply: Reply::Error(error),
            version: None,
        }
    }

    /// The `result` label of `statestore_*_requests_total`.
    pub fn result_label(&self) -> &'static str {
        match self {
            Answer::Reply { reply, .. } => reply.result_label(),
            Answer::Encoded(_) => Reply::Ok.result_label(),
        }
    }

    /// The `__ts` version to send with the reply.
    pub fn version(&self) -> Option<&Hlc> {
        match self {
            Answer::Reply { version, .. } => version.as_ref(),
            Answer::Encoded(_) => None,
        }
    }

    /// The byte-exact payload.
    pub fn into_payload(self) -> Vec<u8> {
        match self {
            Answer::Reply { reply, .. } => reply.encode(),
            Answer::Encoded(payload) => payload,
        }
    }
}

impl From<Reply> for Answer {
    fn from(reply: Reply) -> Self {
        Answer::Reply {
            reply,
            version: None,
        }
    }
}

/// Why a request could not be served here: it gets no reply and the client retries (or its
/// retry finds the remembered reply).
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    /// Not the serving leader (or no longer).
    #[error("not the leader")]
    NotLeader,
    /// The proposal queue is full.
    #[error("overloaded")]
    Overloaded,
    /// The request's deadline passed before its outcome was known.
    #[error("timed out")]
    TimedOut,
    /// A fault inside the node (logged at WARN).
    #[error(transparent)]
    Internal(NodeError),
}

impl Unavailable {
    /// One of each kind, for label sets.
    const KINDS: [fn() -> Unavailable; 4] = [
        || Unavailable::NotLeader,
        || Unavailable::Overloaded,
        || Unavailable::TimedOut,
        || Unavailable::Internal(NodeError::ScanSlotsClosed),
    ];

    /// Label for `requests_total{result}` and `requests_dropped_total{reason}`.
    pub fn label(&self) -> &'static str {
        match self {
            Unavailable::NotLeader => "not_leader",
            Unavailable::Overloaded => "overloaded",
            Unavailable::TimedOut => "timed_out",
            Unavailable::Internal(_) => "internal",
        }
    }

    /// Every label of [`Unavailable::label`].
    pub fn labels() -> impl Iterator<Item = &'static str> {
        Self::KINDS.into_iter().map(|kind| kind().label())
    }
}

impl From<statestore_raft::Error> for Unavailable {
    fn from(err: statestore_raft::Error) -> Self {
        match err {
            // The batcher writes a lease-refused batch again for as long as this node leads:
            // the error reaches here only from a node that no longer does.
            statestore_raft::Error::NotLeader { .. } | statestore_raft::Error::LeaseExpired => {
                Unavailable::NotLeader
            }
            statestore_raft::Error::Overloaded => Unavailable::Overloaded,
            other => Unavailable::Internal(NodeError::Raft(other)),
        }
    }
}

impl From<statestore_storage::StorageError> for Unavailable {
    fn from(err: statestore_storage::StorageError) -> Self {
        Unavailable::Internal(NodeError::Storage(err))
    }
}

/// Why a request gets no reply (§5.2); the label of `statestore_server_requests_dropped_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Sent at QoS 0.
    Qos0,
    /// No Response Topic.
    NoResponseTopic,
    /// No Correlation Data.
    NoCorrelationData,
    /// Response Topic outside the reply prefixes, or on a topic the store publishes or serves
    /// (see `crate::service::reply_topic::ReplyTopics`).
    ForbiddenResponseTopic,
    /// Message Expiry already elapsed.
    Expired,
    /// With `auth.identity = "broker"`: no broker-vouched identity (the broker does not run
    /// the statestore plugin, or not on the path this request took).
    NoVouchedIdentity,
}

impl Refusal {
    /// Every refusal.
    pub const ALL: [Refusal; 6] = [
        Refusal::Qos0,
        Refusal::NoResponseTopic,
        Refusal::NoCorrelationData,
        Refusal::ForbiddenResponseTopic,
        Refusal::Expired,
        Refusal::NoVouchedIdentity,
    ];

    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Qos0 => "qos0",
            Refusal::NoResponseTopic => "no_response_topic",
            Refusal::NoCorrelationData => "no_correlation_data",
            Refusal::ForbiddenResponseTopic => "forbidden_response_topic",
            Refusal::Expired => "expired",
            Refusal::NoVouchedIdentity => "no_vouched_identity",
        }
    }
}

/// Why a request gets no reply: the label of `statestore_server_requests_dropped_total{reason}`.
#[derive(Debug)]
pub enum NoReply {
    /// Refused at the door for its envelope (§1, §5.2); counted before it is parsed, so it is
    /// no request of any command.
    Refused(Refusal),
    /// Refused at intake for its user properties (PUBACK 0x97, before the service sees it).
    TooManyProperties,
    /// Not served here (also a `result` of the request metrics).
    Unavailable(Unavailable),
    /// Its reply was ready after the requester's Message Expiry: nobody waits for it (a retry
    /// finds the remembered reply).
    ExpiredBeforeReply,
}

impl NoReply {
    /// The `reason` label.
    pub fn label(&self) -> &'static str {
        match self {
            NoReply::Refused(refusal) => refusal.label(),
            NoReply::TooManyProperties => "too_many_properties",
            NoReply::Unavailable(unavailable) => unavailable.label(),
            NoReply::ExpiredBeforeReply => Refusal::Expired.label(),
        }
    }

    /// Every `reason` label, once each.
    pub fn labels() -> Vec<&'static str> {
        let mut labels: Vec<&'static str> = Refusal::ALL
            .iter()
            .map(|r| r.label())
            .chain([
                NoReply::TooManyProperties.label(),
                NoReply::ExpiredBeforeReply.label(),
            ])
            .chain(Unavailable::labels())
            .collect();
        let mut seen = std::collections::HashSet::new();
        labels.retain(|label| seen.insert(*label));
        labels
    }
}

/// What became of a request that was parsed (or failed to parse) for a command.
#[derive(Debug)]
pub enum Verdict {
    /// Answered (an error reply included).
    Answered(Answer),
    /// Not served here: no reply.
    Unavailable(Unavailable),
}

impl Verdict {
    /// The `result` label of the request metrics.
    pub fn result_label(&self) -> &'static str {
        match self {
            Verdict::Answered(answer) => answer.result_label(),
            Verdict::Unavailable(unavailable) => unavailable.label(),
        }
    }
}

impl From<Result<Answer, Unavailable>> for Verdict {
    fn from(result: Result<Answer, Unavailable>) -> Self {
        match result {
            Ok(answer) => Verdict::Answered(answer),
            Err(unavailable) => Verdict::Unavailable(unavailable),
        }
    }
}

/// Every `result` label of an endpoint whose error replies are `errors`: the success shapes of
/// [`Reply`], the errors' labels and [`Unavailable`]'s.
pub fn result_labels(errors: &[ErrorReply]) -> Vec<&'static str> {
    let mut labels: Vec<&'static str> = Reply::SUCCESS_LABELS
        .iter()
        .copied()
        .chain(errors.iter().map(|e| e.result_label()))
        .chain(Unavailable::labels())
        .collect();
    let mut seen = std::collections::HashSet::new();
    labels.retain(|label| seen.insert(*label));
    labels
}

#[cfg(test)]
mod tests;
