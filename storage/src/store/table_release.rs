//! The thread that lets fjall delete the table files its compactions replaced.
//!
//! fjall forgets the table sets a compaction replaced only at a later compaction (see
//! [`Tree::release_replaced_tables`]): after a load, the last compaction's inputs stayed on disk
//! until a restart, 27-48 MiB per node at 1M keys. Every [`LOOK_PERIOD`] this thread counts the
//! state keyspace's table files, in its directory (one listing) and in its current set. Files
//! beyond the set are replaced tables, or tables being written (a compaction's output, an
//! ingestion's table): so it releases only once the same counts were seen at two looks in a
//! row, and then asks fjall to forget the old sets (one small record and a memtable rotation in
//! the store's records keyspace). A release that freed nothing (a reader, such as a snapshot
//! export, still holds the files, which go when it ends; or a file no table set names, left by
//! a failed write and removed at the next open) is not repeated for the same counts before
//! [`RETRY_UNCHANGED`], then at doubling intervals up to [`RETRY_UNCHANGED_MAX`] ([`Pacer`]).
//! An idle store only looks. The thread stops before a clean stop's last sync, and when the
//! state tree is dropped.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{RwLock, Weak};
use std::time::{Duration, Instant};

use crate::store::tree::{TableFiles, Tree};

/// How often the thread looks (a replaced table outlives its compaction by about two of these).
const LOOK_PERIOD: Duration = Duration::from_millis(250);

/// How long the same counts wait before another release after one that freed nothing...
const RETRY_UNCHANGED: Duration = Duration::from_secs(30);
/// ... doubling each time, up to this.
const RETRY_UNCHANGED_MAX: Duration = Duration::from_secs(600);

/// The running thread; dropping it stops the thread and waits for it (it holds the database).
/// The stop channel carries nothing: dropping its sender is the signal (capacity 1, never sent
/// to).
pub(crate) struct TableRelease {
    stop: Option<mpsc::SyncSender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TableRelease {
    /// Starts the thread for the state keyspace `active` (the one in use, which an install
    /// switches), releasing through `records`.
    pub(crate) fn start(
        records: Tree,
        active: Weak<RwLock<(String, Tree)>>,
    ) -> std::io::Result<TableRelease> {
        let (stop, stopped) = mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("table-release".to_owned())
            .spawn(move || run(&records, &active, &stopped))?;
        Ok(TableRelease {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for TableRelease {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the table-release thread panicked");
        }
    }
}

/// When to release, from the table files each look counts (pure, for tests).
#[derive(Debug, Default)]
pub(crate) struct Pacer {
    /// The counts of the last look.
    last_look: Option<TableFiles>,
    /// The counts at the last release, when it was, and how long the same counts wait.
    last_release: Option<(TableFiles, Instant, Duration)>,
}

impl Pacer {
    /// A look counted `files` at `now`: whether a release is due. Only with files beyond the
    /// set, counted the same at the look before, and not for the counts of the last release
    /// before its wait is over.
    pub(crate) fn due(&mut self, files: TableFiles, now: Instant) -> bool {
        let stable = self.last_look == Some(files);
        self.last_look = Some(files);
        if files.beyond_set() == 0 {
            self.last_release = None;
            return false;
        }
        let waiting = self.last_release.is_some_and(|(counts, at, wait)| {
            counts == files && now.saturating_duration_since(at) < wait
        });
        stable && !waiting
    }

    /// A release was made for `files` at `now`.
    pub(crate) fn released(&mut self, files: TableFiles, now: Instant) {
        let wait = match self.last_release {
            Some((counts, _, wait)) if counts == files => (wait * 2).min(RETRY_UNCHANGED_MAX),
            _ => RETRY_UNCHANGED,
        };
        self.last_release = Some((files, now, wait));
        // Two more looks before the next one.
        self.last_look = None;
    }
}

fn run(records: &Tree, active: &Weak<RwLock<(String, Tree)>>, stopped: &mpsc::Receiver<()>) {
    let mut pacer = Pacer::default();
    let mut listing_failed = false;
    loop {
        match stopped.recv_timeout(LOOK_PERIOD) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        let Some(state) = active.upgrade().map(|active| match active.read() {
            Ok(guard) => guard.1.clone(),
            Err(poisoned) => poisoned.into_inner().1.clone(),
        }) else {
            return;
        };
        let counted = state.table_files();
        // Let go of the state keyspace first: a store dropped meanwhile must find it released.
        drop(state);
        let files = match counted {
            Ok(files) => {
                listing_failed = false;
                files
            }
            Err(err) => {
                if !listing_failed {
                    tracing::warn!(error = %err, "could not list the state database's table files");
                }
                listing_failed = true;
                continue;
            }
        };
        let now = Instant::now();
        if !pacer.due(files, now) {
            continue;
        }
        match records.release_replaced_tables() {
            Ok(true) => {
                tracing::debug!(
                    beyond_set = files.beyond_set(),
                    "released the table files compaction replaced"
                );
                pacer.released(files, now);
            }
            // fjall has not flushed the last release's memtable yet: at a later look.
            Ok(false) => {}
            Err(err) => {
                tracing::warn!(error = %err, "could not release the table files compaction replaced; tried again at a later look");
                pacer.released(files, now);
            }
        }
    }
}

#[cfg(test)]
mod tests;
