//! What Raft replicates: a checked, typed [`Proposal`] stamped by the leader. Never raw
//! request bytes (a malformed request must not reach the log, let alone every replica).

use serde::{Deserialize, Serialize};

use crate::devicebound::{DeviceCommand, TokenSeed};
use crate::hlc::Hlc;
pub use statestore_vocab::keyspace::SetCondition;

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

/// Quotas of protocol §9 that apply decides. They are replicated state, so every replica
/// judges a write against the same numbers whatever its local configuration says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Limits {
    /// Keys stored.
    pub max_keys: u64,
    /// Sum of key and value lengths stored.
    pub max_bytes: u64,
    /// KEYNOTIFY registrations per client.
    pub max_registrations_per_client: u32,
    /// KEYNOTIFY registrations of all clients together (client ids are whatever requests
    /// say, so the per-client cap alone bounds nothing).
    pub max_registrations: u64,
    /// KEYNOTIFY registrations of one key, all clients together: what one change of a key
    /// can fan out to (the same reason: one caller can register under any number of ids).
    pub max_observers_per_key: u32,
    /// Remembered replies (§6). Over it, the replies with the earliest expiry are evicted.
    pub max_remembered_replies: u64,
    /// Bytes of remembered replies, each counted as its reply-table key plus its encoded
    /// value. Over it, the replies with the earliest expiry are evicted.
    pub max_remembered_reply_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_keys: 1_000_000,
            max_bytes: 1 << 30,
            max_registrations_per_client: 1_000,
            max_registrations: 1_000_000,
            max_observers_per_key: 1_000,
            max_remembered_replies: 1_000_000,
            max_remembered_reply_bytes: 256 << 20,
        }
    }
}
