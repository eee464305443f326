//! Early writeback of the files fjall writes (`state/`): a watcher that starts the writeback of
//! every [`WRITE_BEHIND_BYTES`](crate::write_behind::WRITE_BEHIND_BYTES) a table file grows by,
//! instead of leaving it all to the table's final `fsync`.
//!
//! Why: fjall (lsm-tree) writes a table through a buffer and `fsync`s it whole at the end, and
//! has no setting like RocksDB's `bytes_per_sync`. Each memtable layer and each compaction output
//! (up to 16 MiB) then reaches the disk in one burst, and the Raft log's `fdatasync` issued
//! meanwhile waits behind it: on ext4 the log's append changes its size, so its `fdatasync`
//! commits the journal, which first writes the data of every file allocated in the same
//! transaction. In a 1M-key load on this project's test machine the nodes logged 51 slow log
//! `fdatasync`s (worst 274 ms) with the kernel's default writeback thresholds, and 10 (worst
//! 113 ms) with its background writeback starting at 2 MiB dirty (`vm.dirty_background_bytes`,
//! a setting for the whole machine: BENCHMARKS.md, issue 30). This does the same for the
//! node's own tables only, without touching the machine.
//!
//! How: an inotify watch of `state/` and every directory under it (the `notify` crate; new
//! directories, such as a freshly installed keyspace's, are watched as they appear). Each write
//! to a file there wakes the watcher's thread, which opens the file read-only once, and when its
//! length has grown by a mebibyte or more since the last start, advises the kernel to write the
//! new range (`write_behind::start_writeback`, which does not wait for the disk). A file is
//! forgotten (its descriptor closed) when its writer closes it, or it is removed or renamed.
//! This is advice only: fjall's `fsync` is still what makes a table durable, and if the watch
//! cannot be set up (inotify's per-user limits), the store runs without it, with a warning.
//!
//! Bounded: at most [`MAX_FOLLOWED_FILES`] files are followed at once (fjall writes a few at a
//! time: a layer's table, a compaction's outputs); past it the one written to least recently is
//! dropped. The watcher's thread is the `notify` crate's; nothing queues between it and the
//! advice.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind};
use notify::{RecommendedWatcher, RecursiveMode, Watcher};

use crate::write_behind::{self, WriteBehind};

/// Most files followed at once.
pub const MAX_FOLLOWED_FILES: usize = 32;

/// What the watcher did, for metrics and tests.
#[derive(Debug, Default)]
pub struct Counters {
    /// Bytes whose writeback was started early.
    started_bytes: AtomicU64,
    /// Advice the kernel refused (each also logged at debug).
    failed: AtomicU64,
    /// Files followed now.
    followed: AtomicU64,
}

impl Counters {
    /// Bytes whose writeback was started early, since the watch began.
    pub fn started_bytes(&self) -> u64 {
        self.started_bytes.load(Ordering::Relaxed)
    }

    /// Advice the kernel refused, since the watch began.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// Files followed now.
    pub fn followed(&self) -> u64 {
        self.followed.load(Ordering::Relaxed)
    }
}

/// The watch of one directory tree; dropping it stops the watch and closes every file it held.
pub struct EarlyWriteback {
    /// `None` when the watch could not be set up.
    watcher: Option<RecommendedWatcher>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for EarlyWriteback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EarlyWriteback")
            .field("watching", &self.watcher.is_some())
            .field("counters", &self.counters)
            .finish()
    }
}

impl EarlyWriteback {
    /// Watches `dir` and every directory under it. Never fails: without inotify (or past its
    /// limits) the files are written as before, and a warning says so.
    pub fn watch(dir: &Path) -> EarlyWriteback {
        let counters = Arc::new(Counters::default());
        let mut followed = Followed::new(counters.clone());
        let handler = move |event: notify::Result<notify::Event>| {
            // An error is the watch's own (a queue overflow drops events): the files it missed
            // are written as before.
            if let Ok(event) = event {
                followed.on_event(&event);
            }
        };
        let watcher = notify::recommended_watcher(handler).and_then(|mut watcher| {
            watcher.watch(dir, RecursiveMode::Recursive)?;
            Ok(watcher)
        });
        let watcher = match watcher {
            Ok(watcher) => Some(watcher),
            Err(err) => {
                tracing::warn!(
                    dir = %dir.display(),
                    error = %err,
                    "cannot watch the state database's files to start their writeback early; \
                     they are written as before (each table reaches the disk at its fsync, and \
                     Raft log fdatasyncs may wait behind it); raise fs.inotify.max_user_watches \
                     or max_user_instances if they are the limit"
                );
                None
            }
        };
        EarlyWriteback { watcher, counters }
    }

    /// Whether the watch is set up.
    pub fn is_watching(&self) -> bool {
        self.watcher.is_some()
    }

    /// What the watcher did so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
}

/// A file being written, opened read-only to advise on its pages.
struct FollowedFile {
    file: File,
    behind: WriteBehind,
    /// When it was last written to (the order of events seen).
    last_written: u64,
}

/// The files followed now.
struct Followed {
    files: HashMap<PathBuf, FollowedFile>,
    /// Events seen, the clock of `last_written`.
    events: u64,
    counters: Arc<Counters>,
}

impl Followed {
    fn new(counters: Arc<Counters>) -> Followed {
        Followed {
            files: HashMap::new(),
            events: 0,
            counters,
        }
    }

    fn on_event(&mut self, event: &notify::Event) {
        match event.kind {
            EventKind::Modify(ModifyKind::Data(_)) => {
                for path in &event.paths {
                    self.written(path);
                }
            }
            EventKind::Access(AccessKind::Close(AccessMode::Write))
            | EventKind::Remove(_)
            | EventKind::Modify(ModifyKind::Name(_)) => {
                for path in &event.paths {
                    self.forget(path);
                }
            }
            _ => {}
        }
    }

    fn written(&mut self, path: &Path) {
        self.events += 1;
        if !self.files.contains_key(path) {
            let Ok(file) = File::open(path) else {
                // Removed since (a short-lived file), or not a regular file: nothing to do.
                return;
            };
            if self.files.len() >= MAX_FOLLOWED_FILES {
                self.drop_least_recent();
            }
            self.files.insert(
                path.to_path_buf(),
                FollowedFile {
                    file,
                    behind: WriteBehind::new(),
                    last_written: 0,
                },
            );
        }
        let Some(followed) = self.files.get_mut(path) else {
            return;
        };
        followed.last_written = self.events;
        let Ok(meta) = followed.file.metadata() else {
            return;
        };
        if !meta.is_file() {
            self.forget(path);
            return;
        }
        if let Some(due) = followed.behind.grew_to(meta.len()) {
            match write_behind::start_writeback(&followed.file, due) {
                Ok(()) => {
                    self.counters
                        .started_bytes
                        .fetch_add(due.len.get(), Ordering::Relaxed);
                }
                Err(err) => {
                    self.counters.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(
                        path = %path.display(),
                        error = %err,
                        "cannot start the writeback of a state database file early"
                    );
                }
            }
        }
        self.count_followed();
    }

    fn forget(&mut self, path: &Path) {
        if self.files.remove(path).is_some() {
            self.count_followed();
        }
    }

    fn drop_least_recent(&mut self) {
        let oldest = self
            .files
            .iter()
            .min_by_key(|(_, followed)| followed.last_written)
            .map(|(path, _)| path.clone());
        if let Some(path) = oldest {
            self.files.remove(&path);
        }
    }

    fn count_followed(&self) {
        self.counters
            .followed
            .store(self.files.len() as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
