//! The storage crate's one error type.

/// Everything that can go wrong below the state machine's semantics: I/O, fjall, and records on
/// disk that do not decode. Rejections of client requests are not errors; they are
/// [`crate::machine::Outcome`]s.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The state database (fjall) reported a failure (I/O or a corrupt database).
    #[error("state database: {0}")]
    Engine(#[from] fjall::Error),
    /// The state database failed in a way no retry gets past (fjall refuses every write after a
    /// failed journal write or sync): the state machine cannot go on.
    #[error("the state database failed: {0}")]
    Failed(String),
    /// A key the state database cannot store: empty, or longer than it stores (admission keeps
    /// user keys below that; every table's key starts with its prefix byte).
    #[error(
        "a key of {len} bytes cannot be stored: the state database stores keys of 1 to {max} bytes"
    )]
    UnstorableKey {
        /// Its length.
        len: usize,
        /// The longest stored key.
        max: usize,
    },
    /// File-system I/O outside the state database (snapshots, the reply memory's log).
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// A stored record does not decode.
    #[error("corrupt {what}: {reason}")]
    Corrupt {
        /// Which kind of record.
        what: &'static str,
        /// Decoder message.
        reason: String,
    },
    /// The data directory is of another layout than this build's.
    #[error("data directory: {0}")]
    DataDir(String),
    /// A record was written by a newer, unknown format version.
    #[error("{what} has format version {found}, this build reads version {supported}")]
    FormatVersion {
        /// Which kind of record.
        what: &'static str,
        /// Version byte found.
        found: u8,
        /// Version this build understands.
        supported: u8,
    },
}

/// Result alias for this crate.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;
