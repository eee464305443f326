//! The snapshot data openraft passes between the state machine and the peer network.
//!
//! This node keeps no snapshot file: the state database is the snapshot (a build only waits
//! until what it covers is durable there). A snapshot is written to a file only to be sent: the
//! state machine hands out an [`Outgoing`] snapshot, a point-in-time export of the state begun
//! when it was asked for (O(1)), written to a temporary file when a sender first reads it, on
//! a thread of its own (not the state machine's worker), shared by every sender while it
//! lives, and removed once the last holder drops it. A received snapshot is a file too, the
//! server's, handed to the install.
//!
//! The export thread runs at the serving threads' priority, not niced: a follower that needs a
//! snapshot is a replica the cluster lacks, and a busy leader is exactly when it must catch up.
//! Niced (about nice 10), an export on a saturated two-core leader got 2.4 % of a core (perf:
//! 180 samples in 15 s at 499 Hz) and took 60-72 s for 8,700-12,400 rows, long enough for the
//! leader to purge the log past it again, so the follower never caught up (t93).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use statestore_storage::StorageError;
use statestore_storage::store::SnapshotExport;
use tokio::sync::watch;

use crate::types::SnapshotMeta;

/// How long a written outgoing snapshot stays after its file is finished, held for nobody: a
/// transfer retried within it (openraft asks for the snapshot again on every attempt) sends
/// the same file instead of exporting the state again.
pub const OUTGOING_GRACE: Duration = Duration::from_secs(30);

/// What a snapshot handed to or from openraft holds.
#[derive(Debug)]
pub enum SnapshotData {
    /// A snapshot received from a peer, checked, to be installed.
    Received {
        /// The file (the receiving server removes it after the install).
        path: PathBuf,
    },
    /// This node's state, to be sent to a peer.
    Outgoing(Arc<Outgoing>),
    /// A build's result: the state database itself, nothing to read (openraft keeps only the
    /// meta of a build).
    InDatabase,
}

/// [`Outgoing::refused`]: no peer refused it.
const NOT_REFUSED: u8 = 0;
/// [`Outgoing::refused`]: a peer refused it; not counted yet.
const REFUSED: u8 = 1;
/// [`Outgoing::refused`]: a peer refused it, counted.
const REFUSAL_COUNTED: u8 = 2;

/// Where an outgoing snapshot's file is, once written (or why it is not: shared by every
/// reader, each of which gets it as the source of its own `io::Error`).
type Written = Option<Result<PathBuf, Arc<StorageError>>>;

/// A snapshot of this node's state for peers (see the module documentation).
pub struct Outgoing {
    /// What the export covers (read from the export's own view, so data and meta match).
    pub meta: SnapshotMeta,
    /// The export, until the first reader starts writing it.
    export: Mutex<Option<(SnapshotExport, Vec<u8>)>>,
    /// The file, once written.
    written: watch::Sender<Written>,
    /// Whether a peer refused it as corrupt (not handed out again), and whether that was
    /// counted: [`NOT_REFUSED`], [`REFUSED`] or [`REFUSAL_COUNTED`].
    refused: AtomicU8,
}

impl std::fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outgoing")
            .field("meta", &self.meta)
            .field("written", &*self.written.borrow())
            .finish_non_exhaustive()
    }
}

impl Outgoing {
    /// An outgoing snapshot of `export`, whose view `meta` describes; the file gets `header`.
    pub fn new(meta: SnapshotMeta, export: SnapshotExport, header: Vec<u8>) -> Arc<Outgoing> {
        Arc::new(Outgoing {
            meta,
            export: Mutex::new(Some((export, header))),
            written: watch::channel(None).0,
            refused: AtomicU8::new(NOT_REFUSED),
        })
    }

    /// Opens the written file for reading, starting the write if nobody did yet and waiting for
    /// it. The handle stays readable whatever happens to the name.
    pub async fn open(self: &Arc<Self>) -> std::io::Result<tokio::fs::File> {
        tokio::fs::File::open(self.written_path().await?).await
    }

    /// The written file's path (valid while this snapshot is held), starting the write if
    /// nobody did yet and waiting for it.
    pub async fn written_path(self: &Arc<Self>) -> std::io::Result<PathBuf> {
        self.start_writing()?;
        let mut written = self.written.subscribe();
        let done = written
            .wait_for(Option::is_some)
            .await
            .map_err(|_| std::io::Error::other("the snapshot export ended unwritten"))?;
        match done.as_ref() {
            Some(Ok(path)) => Ok(path.clone()),
            Some(Err(err)) => Err(std::io::Error::other(err.clone())),
            None => Err(std::io::Error::other("the snapshot export is unwritten")),
        }
    }

    /// Starts the export's write on its own thread, unless it was started before. The
    /// thread holds this snapshot until the file is written, then a task for
    /// [`OUTGOING_GRACE`]; the write stops early once the thread is its only holder.
    fn start_writing(self: &Arc<Self>) -> std::io::Result<()> {
        let taken = self
            .export
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        let Some((export, header)) = taken else {
            return Ok(());
        };
        let id = outgoing_id(&self.meta);
        let this = self.clone();
        let runtime = tokio::runtime::Handle::try_current().ok();
        let spawned = std::thread::Builder::new()
            .name("snapshot-export".to_owned())
            .spawn(move || write_and_publish(this, export, &id, &header, runtime));
        if let Err(err) = spawned {
            // Every reader (this one included) learns of it rather than waiting for ever.
            self.written
                .send_replace(Some(Err(Arc::new(StorageError::Failed(format!(
                    "starting the snapshot export thread: {err}"
                ))))));
            return Err(err);
        }
        Ok(())
    }

    /// A peer refused this snapshot as corrupt: the state machine exports a new one for the
    /// next attempt instead of handing this one out again.
    pub fn refuse(&self) {
        let _ =
            self.refused
                .compare_exchange(NOT_REFUSED, REFUSED, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// True once a peer refused it as corrupt.
    pub fn is_refused(&self) -> bool {
        self.refused.load(Ordering::SeqCst) != NOT_REFUSED
    }

    /// True the first time it is asked after a peer refused it (to count the refusal once).
    pub fn take_refusal(&self) -> bool {
        self.refused
            .compare_exchange(REFUSED, REFUSAL_COUNTED, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// True if its file failed to be written.
    pub fn failed(&self) -> bool {
        matches!(&*self.written.borrow(), Some(Err(_)))
    }

    /// True once its file is written (or failed to be).
    pub fn is_written(&self) -> bool {
        self.written.borrow().is_some()
    }
}

/// The export thread's work: writes `export`'s file, then publishes the result to every
/// reader of `this`; a written file is held for [`OUTGOING_GRACE`] (on `runtime`) for retries.
fn write_and_publish(
    this: Arc<Outgoing>,
    export: SnapshotExport,
    id: &str,
    header: &[u8],
    runtime: Option<tokio::runtime::Handle>,
) {
    let started = std::time::Instant::now();
    // Nobody but this thread holds it: every transfer that wanted it is gone.
    let wanted = || Arc::strong_count(&this) > 1;
    // A panic is published as a failure: readers must not wait for ever.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        export.write_outgoing(id, header, &wanted)
    }))
    .unwrap_or_else(|_| {
        Err(StorageError::Failed(
            "the snapshot export panicked".to_owned(),
        ))
    });
    match &result {
        Ok(file) => tracing::info!(
            entries = file.entries,
            bytes = file.size,
            took_ms = started.elapsed().as_millis() as u64,
            last_log_id = ?this.meta.last_log_id,
            "snapshot written for sending"
        ),
        Err(err) => {
            tracing::warn!(error = %err, last_log_id = ?this.meta.last_log_id, "writing a snapshot for sending failed")
        }
    }
    // Held for retries from before it is published, so its grace is never cut short.
    if result.is_ok()
        && let Some(runtime) = runtime
    {
        let held = this.clone();
        runtime.spawn(async move {
            tokio::time::sleep(OUTGOING_GRACE).await;
            drop(held);
        });
    }
    this.written
        .send_replace(Some(result.map(|file| file.path).map_err(Arc::new)));
}

impl Drop for Outgoing {
    fn drop(&mut self) {
        if let Some(Ok(path)) = self.written.borrow().as_ref()
            && let Err(err) = statestore_storage::gradual_remove::remove(path)
        {
            tracing::warn!(path = %path.display(), error = %err, "could not remove a sent snapshot file");
        }
    }
}

/// The file name part of an outgoing snapshot: its log position, and the time (two exports of
/// one position never share a name).
fn outgoing_id(meta: &SnapshotMeta) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    match &meta.last_log_id {
        Some(id) => format!("{}-{}-{}", id.leader_id.term, id.index, nanos),
        None => format!("empty-{nanos}"),
    }
}
