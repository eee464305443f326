//! A snapshot of this node's own that a peer refused as corrupt.
//!
//! openraft retries a refused transfer with the current snapshot, and a damaged file does not
//! heal: without a check the leader would send the same file forever and the follower would
//! never catch up. So a peer client reports every `corrupt` refusal ([`RefusedSnapshots`],
//! naming the file it sent: a rebuild may cover the same log id),
//! and [`watch_refusals`] checks this node's copy once per refused snapshot, on a blocking
//! thread ([`verify_snapshot`]): a copy that fails is counted
//! (`statestore_disk_snapshot_own_corrupt_total`), logged, and replaced by a new snapshot
//! ([`RebuildRequest`], taken by the state machine's next build decision); a copy that passes
//! means the damage happened in transit or at the peer, and the transfer is only retried.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use std::path::Path;

use statestore_storage::error::StorageError;
use statestore_storage::store::{OpenSnapshot, StateTree, verify_snapshot};
use tokio::sync::watch;

use crate::metrics::RaftStorageMetrics;
use crate::types::Raft;

/// Where peer clients report the snapshots peers refused as corrupt (the file name of the last
/// one).
#[derive(Clone)]
pub struct RefusedSnapshots {
    tx: Arc<watch::Sender<Option<String>>>,
}

impl Default for RefusedSnapshots {
    fn default() -> Self {
        RefusedSnapshots {
            tx: Arc::new(watch::channel(None).0),
        }
    }
}

impl RefusedSnapshots {
    /// A peer refused the snapshot sent from `path` as corrupt.
    pub fn report(&self, path: &Path) {
        self.tx.send_replace(Some(file_name(path)));
    }

    fn subscribe(&self) -> watch::Receiver<Option<String>> {
        self.tx.subscribe()
    }
}

/// A rebuild of the current snapshot asked for, whatever the state machine's trigger says.
#[derive(Clone, Default, Debug)]
pub struct RebuildRequest(Arc<AtomicBool>);

impl RebuildRequest {
    /// Asks for it.
    pub fn request(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// True if it was asked for, and no longer (the state machine builds now).
    pub(crate) fn take(&self) -> bool {
        self.0.swap(false, Ordering::SeqCst)
    }

    /// True while asked for and not yet taken.
    pub fn pending(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// What the check of this node's copy of a refused snapshot found.
#[derive(Debug)]
pub enum Verdict {
    /// The copy passes: the damage was elsewhere.
    Intact,
    /// The copy fails its checks.
    Corrupt(StorageError),
    /// Another snapshot is current by now (it replaced the refused one), or none is.
    NotCurrent,
    /// The copy could not be read (an I/O error): nothing is concluded.
    Unreadable(StorageError),
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The current snapshot's file name, if there is one.
fn current_name(state: &StateTree) -> Result<Option<String>, StorageError> {
    let open: Option<OpenSnapshot> = state.current_snapshot()?;
    Ok(open.map(|open| file_name(&open.file.path)))
}

/// Checks this node's current snapshot if it is the file `name` (blocking: reads the whole
/// file).
pub fn check_current(state: &StateTree, name: &str) -> Verdict {
    let open = match state.current_snapshot() {
        Ok(Some(open)) if file_name(&open.file.path) == name => open,
        Ok(_) => return Verdict::NotCurrent,
        // The header does not read, or the file is gone (`get_current_snapshot` replaces such a
        // file before it is sent, so it is not the refused one, but it is damaged all the same;
        // should both happen at once, each counts it and builds a snapshot).
        Err(err @ StorageError::Corrupt { .. }) => return Verdict::Corrupt(err),
        Err(err) => return Verdict::Unreadable(err),
    };
    // `open` holds the file's shared lock: a replacement meanwhile only unlinks it.
    let verdict = match verify_snapshot(&open.file.path) {
        Ok(_) => Verdict::Intact,
        Err(err @ StorageError::Corrupt { .. }) => Verdict::Corrupt(err),
        Err(err) => Verdict::Unreadable(err),
    };
    // Replaced while it was read: the path may have named the new file.
    match current_name(state) {
        Ok(current) if current.as_deref() != Some(name) => Verdict::NotCurrent,
        _ => verdict,
    }
}

/// How often a rebuild is asked of openraft again while a build already running keeps it from
/// starting one (that build's snapshot replaces the damaged one too).
const REBUILD_RETRY: Duration = Duration::from_secs(1);

/// How long refusals of a file found damaged are not checked again once its rebuild started
/// (the transfer is retried with it until the new snapshot is current). After that a refusal
/// of the same file is checked again: the rebuild failed, or its result did not replace it.
const REBUILD_GRACE: Duration = Duration::from_secs(300);

/// Checks this node's copy of each snapshot a peer refused as corrupt, and rebuilds a damaged
/// one. A copy found intact is not checked again; one found damaged is checked again only after
/// [`REBUILD_GRACE`]; one that could not be read, at its next refusal (each refusal follows a
/// whole transfer, so the checks cost at most what the transfers do). Ends when every peer
/// client is gone (Raft shut down).
pub(crate) async fn watch_refusals(
    raft: Raft,
    state: StateTree,
    refused: RefusedSnapshots,
    rebuild: RebuildRequest,
    metrics: Arc<RaftStorageMetrics>,
) {
    let mut reports = refused.subscribe();
    drop(refused);
    let mut intact: Option<String> = None;
    let mut rebuilt: Option<(String, tokio::time::Instant)> = None;
    while reports.changed().await.is_ok() {
        let Some(name) = reports.borrow_and_update().clone() else {
            continue;
        };
        let rebuilding = rebuilt
            .as_ref()
            .is_some_and(|(file, at)| *file == name && at.elapsed() < REBUILD_GRACE);
        if intact.as_ref() == Some(&name) || rebuilding {
            continue;
        }
        let check = {
            let (state, name) = (state.clone(), name.clone());
            tokio::task::spawn_blocking(move || check_current(&state, &name))
        };
        match check.await {
            Ok(Verdict::Corrupt(err)) => {
                metrics.own_snapshot_corrupt_total.inc();
                tracing::error!(snapshot = %name, error = %err, "a peer refused this node's snapshot as corrupt, and this node's copy fails its checks too (a damaged disk?): building a new snapshot to send instead");
                rebuild.request();
                while rebuild.pending() {
                    if raft.trigger().snapshot().await.is_err() {
                        return;
                    }
                    tokio::time::sleep(REBUILD_RETRY).await;
                }
                rebuilt = Some((name, tokio::time::Instant::now()));
            }
            Ok(Verdict::Intact) => {
                tracing::warn!(snapshot = %name, "a peer refused this node's snapshot as corrupt, but this node's copy passes its checks: damaged in transit or at the peer; the transfer is retried");
                intact = Some(name);
            }
            Ok(Verdict::NotCurrent) => {
                tracing::info!(snapshot = %name, "a peer refused a snapshot of this node's as corrupt that is no longer current; the next transfer sends the current one");
            }
            Ok(Verdict::Unreadable(err)) => {
                tracing::warn!(snapshot = %name, error = %err, "a peer refused this node's snapshot as corrupt, and reading this node's copy to check it failed; checked again at the next refusal");
            }
            Err(err) => {
                tracing::warn!(snapshot = %name, error = %err, "checking this node's snapshot failed; checked again at the next refusal")
            }
        }
    }
}

#[cfg(test)]
mod tests;
