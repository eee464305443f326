//! What Raft replicates: a checked, typed [`Proposal`] stamped by the leader, carrying one
//! [`Mutation`] (a keyspace command, a device-bound command, or new limits). Never raw request
//! bytes (a malformed request must not reach the log, let alone every replica).

use serde::{Deserialize, Serialize};

use crate::devicebound::{DeviceCommand, TokenSeed};
use crate::keyspace::Limits;
use statestore_vocab::hlc::Hlc;
use statestore_vocab::keyspace::SetCondition;

/// One log entry's payload.
///
/// Everything apply needs to decide the outcome is in here: the leader's HLC stamp (the
/// version hint), the leader's wall time (expiry decisions), the limits, and for device-bound
/// commands the randomness of their lock tokens; apply never reads a clock, a random source or
/// the local configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    /// The leader's HLC after merging the request `__ts`; the write's version is at least this.
    pub stamp: Hlc,
    /// The leader's wall clock when it stamped the entry, in ms since the epoch.
    pub wall_ms: u64,
    /// Identity of the client request, for the reply memory (protocol §6); `None` for
    /// leader-internal proposals such as expiry sweeps.
    pub request: Option<RequestId>,
    /// The change itself.
    pub mutation: Mutation,
    /// For a [`Mutation::Device`]: 32 bytes the leader drew from the operating system's CSPRNG,
    /// from which apply derives the secret of every lock token the command issues
    /// ([`crate::devicebound::token`]). `None` for every other mutation (a SET entry stays
    /// small).
    pub token_seed: Option<TokenSeed>,
}

/// (client, correlation data) of a request, a digest of what it asks, and how long its reply
/// must be remembered.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RequestId {
    /// The requester's id (`__srcId`, or what its response topic names).
    #[serde(with = "serde_bytes")]
    pub client: Vec<u8>,
    /// The request's MQTT correlation data.
    #[serde(with = "serde_bytes")]
    pub correlation: Vec<u8>,
    /// How long a retry may still arrive: the request's message expiry.
    pub remember_for_ms: u64,
    /// Digest of the request (its topic, payload and the properties that change its effect,
    /// computed at the door). A remembered reply answers only a request with the same digest:
    /// another request that claims the same client and correlation data is executed as new.
    pub digest: u128,
}

/// A typed change to the replicated state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mutation {
    /// SET key value [NX|NEX] [PX ms], optionally fenced.
    Set {
        /// Key bytes (non-empty, checked at the door).
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        /// New value.
        #[serde(with = "serde_bytes")]
        value: Vec<u8>,
        /// NX / NEX / none.
        condition: SetCondition,
        /// PX: expire this many ms after the entry's time.
        expire_after_ms: Option<u64>,
        /// `__ft` of the request.
        fencing_token: Option<Hlc>,
    },
    /// DEL key.
    Del {
        /// Key bytes.
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        /// `__ft` of the request.
        fencing_token: Option<Hlc>,
    },
    /// VDEL key value: delete only if the value matches.
    VDel {
        /// Key bytes.
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        /// Expected value.
        #[serde(with = "serde_bytes")]
        value: Vec<u8>,
        /// `__ft` of the request.
        fencing_token: Option<Hlc>,
    },
    /// KEYNOTIFY key: register `client` for notifications on `key`.
    Observe {
        /// Client id the notifications are addressed to.
        client: String,
        /// Observed key.
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
    },
    /// KEYNOTIFY key STOP.
    Unobserve {
        /// Client id.
        client: String,
        /// Key no longer observed.
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
    },
    /// Leader sweep: remove these keys if they are still due at the entry's time.
    Expire {
        /// Candidate keys found through the expiry index.
        keys: Vec<serde_bytes::ByteBuf>,
    },
    /// Drop every registration of a client that is gone (PUBACK 0x10 on a notification).
    ForgetClient {
        /// Client id.
        client: String,
    },
    /// Replace the replicated quota limits (proposed by a leader whose configuration differs).
    SetLimits(Limits),
    /// A device-bound queue command (`shared/spec/devicebound.md`), applied by
    /// [`crate::devicebound::apply_to`] under the same reply memory as the keyspace commands.
    Device(DeviceCommand),
}

impl Mutation {
    /// Short name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Mutation::Set { .. } => "set",
            Mutation::Del { .. } => "del",
            Mutation::VDel { .. } => "vdel",
            Mutation::Observe { .. } => "observe",
            Mutation::Unobserve { .. } => "unobserve",
            Mutation::Expire { .. } => "expire",
            Mutation::ForgetClient { .. } => "forget_client",
            Mutation::SetLimits(_) => "set_limits",
            Mutation::Device(command) => command.kind(),
        }
    }
}
