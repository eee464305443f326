//! The crate's one error type.

use std::io;
use std::path::PathBuf;

/// What can go wrong outside the FUSE operations (which answer with an errno).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file of the backing directory could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The backing directory holds something this program did not write.
    #[error("{}: {what}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// Mounting, serving or unmounting failed.
    #[error("{what}: {source}")]
    Fuse {
        /// The step.
        what: &'static str,
        /// Why.
        source: io::Error,
    },
}

impl Error {
    /// An IO error on `path`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Self {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}
