//! The node crate's one error type (startup and shutdown failures; request-level errors are
//! wire replies, see [`statestore_protocol::ErrorReply`]).

/// Why the node could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A setting is invalid.
    #[error("configuration: {0}")]
    Config(String),
    /// Storage failed to open.
    #[error("storage: {0}")]
    Storage(#[from] statestore_storage::StorageError),
    /// Consensus failed.
    #[error("raft: {0}")]
    Raft(#[from] statestore_raft::Error),
    /// TLS files (CA, client certificate or key) are unreadable or unusable; the message
    /// names the file.
    #[error("tls: {0}")]
    Tls(String),
    /// The policy file (`auth.policy_file`) is unreadable or holds no valid policy.
    #[error("policy file {path}: {reason}")]
    Policy {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        reason: PolicyFileError,
    },
    /// A listener or the session thread could not start.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// Metric registration failed.
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// Tracing or OpenTelemetry setup failed.
    #[error("telemetry: {0}")]
    Telemetry(String),
    /// Raft stopped on a fatal error (a failed disk write, fsync or apply) while running; the
    /// process exits so that its supervisor restarts it on the same data directory.
    #[error("raft stopped on a fatal error, exiting: {0}")]
    RaftFatal(#[source] statestore_raft::StopCause),
    /// One of the node's tasks or threads panicked or ended while the node was running
    /// ([`crate::supervisor`]); the process exits so that its supervisor restarts it.
    #[error("{0}; exiting")]
    TaskFailed(crate::supervisor::Failure),
    /// An admin call to a node failed.
    #[error("admin: {0}")]
    Admin(String),
    /// A request's HLC stamp was refused by the leader's clock.
    #[error("leader clock: {0}")]
    Clock(#[from] statestore_vocab::hlc::ClockSkew),
    /// The SCAN slots' semaphore was closed (never while the service runs).
    #[error("SCAN slots closed")]
    ScanSlotsClosed,
    /// Work handed to Tokio's blocking pool (a SCAN page, a SEND's delivery) panicked or was
    /// cancelled.
    #[error("blocking task: {0}")]
    BlockingTask(#[from] tokio::task::JoinError),
    /// `statestore kv` could not reach the store or got no usable reply.
    #[error("{0}")]
    Client(String),
}

/// Why a policy file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PolicyFileError {
    /// It could not be read.
    #[error("cannot be read: {0}")]
    Read(#[from] std::io::Error),
    /// It is larger than a policy may be.
    #[error("larger than {} bytes", statestore_policy::MAX_POLICY_BYTES)]
    TooLarge,
    /// It is not UTF-8 text.
    #[error("is not UTF-8 text")]
    NotText,
    /// Its rules are invalid.
    #[error("{0}")]
    Invalid(#[from] statestore_policy::PolicyError),
}
