//! The thread that lets fjall delete the table files its compactions replaced.
//!
//! fjall forgets the table sets a compaction replaced only at a later compaction (see
//! [`Tree::release_replaced_tables`]): after a load, the last compaction's inputs stayed on disk
//! until a restart, 27-48 MiB per node at 1M keys. Every [`LOOK_PERIOD`] this thread looks
//! whether the state keyspace's directory holds more table files than its current table set
//! (one directory listing), and when it did at two looks in a row (an ingestion's new table is
//! on disk briefly before it joins the set) releases the old sets: one small record and a
//! memtable rotation in the store's records keyspace. An idle store only looks. A release may
//! find a replaced table still read (a snapshot export iterating it): its file goes when the
//! reader ends, so the same count is not released again for [`RETRY_UNCHANGED`] ([`Pacer`]).

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{RwLock, Weak};
use std::time::{Duration, Instant};

use crate::store::tree::Tree;

/// How often the thread looks (a replaced table outlives its compaction by about two of these;
/// a look is one listing of a directory of a few dozen files).
const LOOK_PERIOD: Duration = Duration::from_millis(250);

/// The running thread; dropping it stops the thread and waits for it (it holds the database).
pub(crate) struct TableRelease {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TableRelease {
    /// Starts the thread for the state keyspace `active` (the one in use, which an install
    /// switches), releasing through `records`.
    pub(crate) fn start(
        records: Tree,
        active: Weak<RwLock<(String, Tree)>>,
    ) -> std::io::Result<TableRelease> {
        let (stop, stopped) = mpsc::channel();
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

/// When to release, from the replaced files each look finds (pure, for tests).
#[derive(Debug, Default)]
pub(crate) struct Pacer {
    /// Whether the last look found replaced files.
    seen: bool,
    /// Replaced files at the last release, and when it was.
    last_release: Option<(usize, Instant)>,
}

/// How long files a release did not free (a reader still holds them, and they go when it ends)
/// wait before another release is tried, unless their count changes.
const RETRY_UNCHANGED: Duration = Duration::from_secs(30);

impl Pacer {
    /// A look found `replaced` files at `now`: whether to release. Only once they were there at
    /// two looks in a row, and not again for the same count before [`RETRY_UNCHANGED`] (unless
    /// none was left in between).
    pub(crate) fn look(&mut self, replaced: usize, now: Instant) -> bool {
        if replaced == 0 {
            self.last_release = None;
        }
        let twice = replaced > 0 && self.seen;
        self.seen = replaced > 0;
        let repeated = self.last_release.is_some_and(|(count, at)| {
            count == replaced && now.saturating_duration_since(at) < RETRY_UNCHANGED
        });
        if !twice || repeated {
            return false;
        }
        self.seen = false;
        self.last_release = Some((replaced, now));
        true
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
        let replaced = match state.replaced_table_files() {
            Ok(files) => {
                listing_failed = false;
                files
            }
            Err(err) => {
                if !listing_failed {
                    tracing::warn!(error = %err, "could not list the state database's table files");
                }
                listing_failed = true;
                0
            }
        };
        // Let go of the state keyspace first: a store dropped meanwhile must find it released.
        drop(state);
        if !pacer.look(replaced, Instant::now()) {
            continue;
        }
        tracing::debug!(
            files = replaced,
            "releasing table files compaction replaced"
        );
        if let Err(err) = records.release_replaced_tables() {
            tracing::warn!(error = %err, "could not release the table files compaction replaced; tried again at a later look");
        }
    }
}

#[cfg(test)]
mod tests;
