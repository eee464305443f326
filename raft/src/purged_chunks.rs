//! Freeing the blocks of purged Raft log chunks off the WAL's flush thread.
//!
//! Why: raft-log removes the chunk files a purge leaves behind on its flush thread, the thread
//! that also writes and `fdatasync`s every append. On ext4 an unlink of a file's last name
//! frees its blocks in the same call: during a 1M-key load on this project's test machine, 4.7
//! ms per 4 MiB chunk at the median and 21 ms at worst, 9-13 chunks per purge, so each purge
//! held that node's appends for 33-83 ms. Every "slow raft log fdatasync" warning of the run
//! came right after a snapshot build and its purge, while no `fdatasync` call itself took 50 ms
//! (perf tracepoints of `unlinkat` and `fdatasync`; BENCHMARKS.md, issue 30).
//!
//! How: the chunks a purge will remove are opened here before their removal is queued. The
//! flush thread's unlink then only removes a name (the open handle keeps the blocks). Once it
//! has run, each handle goes to the `gradual_remove` reaper, which frees the blocks on its own
//! thread. A handle whose file still has a name (a removal that did not happen) is only closed.
//! Nothing here survives a crash, and nothing needs to: the handles are the only extra state.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};

/// The paths of the closed chunks of `wal`, oldest first.
pub(crate) fn closed_chunk_paths<T: raft_log::Types>(wal: &raft_log::RaftLog<T>) -> Vec<String> {
    wal.stat()
        .closed_chunks
        .iter()
        .map(|chunk| wal.config().wal.chunk_path(chunk.chunk_id))
        .collect()
}

/// The chunks among `before` (closed before a purge) that are no longer closed chunks of the
/// log after it (`after`): the ones the purge queued for removal.
pub(crate) fn removed_by_purge(before: Vec<String>, after: &[String]) -> Vec<String> {
    let kept: HashSet<&str> = after.iter().map(String::as_str).collect();
    before
        .into_iter()
        .filter(|path| !kept.contains(path.as_str()))
        .collect()
}

/// Opens each of `paths` for writing (the reaper cuts through the handle). A chunk that cannot
/// be opened is left to the flush thread's unlink alone, as without this module.
pub(crate) fn hold(paths: &[String]) -> Vec<File> {
    paths
        .iter()
        .filter_map(|path| match OpenOptions::new().write(true).open(path) {
            Ok(file) => Some(file),
            Err(err) => {
                tracing::debug!(path, error = %err, "cannot hold a purged log chunk open; its unlink frees it");
                None
            }
        })
        .collect()
}

/// Hands each held chunk, once the flush thread has removed its name, to the reaper; returns
/// how many had lost their name (the others are only closed).
pub(crate) fn release(held: Vec<File>) -> usize {
    held.into_iter()
        .map(statestore_storage::gradual_remove::free_unlinked)
        .filter(|unnamed| *unnamed)
        .count()
}

#[cfg(test)]
mod tests;
