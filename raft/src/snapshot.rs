//! The snapshot data openraft passes between the state machine and the peer network: a
//! snapshot file (see `statestore_storage::store::SnapshotFile` for its layout) and its path.

use std::path::PathBuf;

/// An open snapshot file.
#[derive(Debug)]
pub struct SnapshotData {
    /// Where the file is (the state machine renames a received one into place). For a
    /// snapshot the store handed out the name may be gone already, replaced by a newer
    /// snapshot: read through `file`.
    pub path: PathBuf,
    /// The open file, positioned at its start.
    pub file: tokio::fs::File,
}

impl SnapshotData {
    /// Opens the snapshot at `path`.
    pub async fn open(path: PathBuf) -> std::io::Result<SnapshotData> {
        let file = tokio::fs::File::open(&path).await?;
        Ok(SnapshotData { path, file })
    }

    /// The snapshot the store opened (see `statestore_storage::store::OpenSnapshot`): its handle
    /// stays readable even if a newer snapshot replaces the file meanwhile.
    pub fn from_open(open: statestore_storage::store::OpenSnapshot) -> SnapshotData {
        SnapshotData {
            path: open.file.path,
            file: tokio::fs::File::from_std(open.handle),
        }
    }
}
