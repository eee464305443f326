//! An in-memory copy of the newest log entries.
//!
//! Every entry the leader appends is read back soon after, once per follower for replication
//! and once more for apply. Serving those reads from memory avoids decoding the same batch
//! from sled again and again; entries hold their proposals behind an `Arc`, so a cached read
//! is a cheap clone. The cache always holds a contiguous tail of the log (or nothing), so a
//! range starting inside it is complete.

use std::collections::BTreeMap;
use std::sync::Mutex;

use openraft::RaftLogId;

use crate::types::Entry;

/// Entries kept in memory.
const CAPACITY: usize = 4_096;

#[derive(Default)]
pub(crate) struct LogCache {
    entries: Mutex<BTreeMap<u64, Entry>>,
}

impl LogCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Entry>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records entries just appended to the log (contiguous, ascending).
    pub(crate) fn append(&self, appended: &[Entry]) {
        let Some(first) = appended.first() else {
            return;
        };
        let mut entries = self.lock();
        let continues = entries
            .last_key_value()
            .is_none_or(|(last, _)| last + 1 == first.get_log_id().index);
        if !continues {
            entries.clear(); // keep the cache a contiguous tail
        }
        for entry in appended {
            entries.insert(entry.get_log_id().index, entry.clone());
        }
        while entries.len() > CAPACITY {
            entries.pop_first();
        }
    }

    /// Mirrors a truncation (removes `index >= from`).
    pub(crate) fn truncate_from(&self, from: u64) {
        self.lock().split_off(&from);
    }

    /// Mirrors a purge (removes `index <= upto`).
    pub(crate) fn purge_upto(&self, upto: u64) {
        let mut entries = self.lock();
        let kept = entries.split_off(&upto.saturating_add(1));
        *entries = kept;
    }

    /// Entries `start..end` (at most `limit`) if the cache covers `start`; `None` otherwise.
    pub(crate) fn range(&self, start: u64, end: u64, limit: usize) -> Option<Vec<Entry>> {
        let entries = self.lock();
        let (first, _) = entries.first_key_value()?;
        if start < *first {
            return None;
        }
        Some(
            entries
                .range(start..end)
                .take(limit)
                .map(|(_, e)| e.clone())
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use openraft::{CommittedLeaderId, EntryPayload, LogId};

    use super::*;

    fn entry(index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Arc::new(Vec::new())),
        }
    }

    fn indexes(entries: Option<Vec<Entry>>) -> Option<Vec<u64>> {
        entries.map(|e| e.iter().map(|e| e.log_id.index).collect())
    }

    #[test]
    fn serves_only_ranges_that_start_inside_the_contiguous_tail() {
        let cache = LogCache::default();
        assert_eq!(indexes(cache.range(1, 10, 100)), None);
        cache.append(&[entry(5), entry(6), entry(7)]);
        assert_eq!(indexes(cache.range(5, 7, 100)), Some(vec![5, 6]));
        assert_eq!(indexes(cache.range(6, u64::MAX, 100)), Some(vec![6, 7]));
        assert_eq!(indexes(cache.range(4, 7, 100)), None, "4 is only in sled");
        cache.truncate_from(7);
        cache.append(&[entry(7)]);
        assert_eq!(indexes(cache.range(5, u64::MAX, 2)), Some(vec![5, 6]));
        cache.purge_upto(5);
        assert_eq!(indexes(cache.range(5, u64::MAX, 10)), None);
        assert_eq!(indexes(cache.range(6, u64::MAX, 10)), Some(vec![6, 7]));
        cache.append(&[entry(20)]); // not contiguous: start over
        assert_eq!(indexes(cache.range(6, u64::MAX, 10)), None);
        assert_eq!(indexes(cache.range(20, u64::MAX, 10)), Some(vec![20]));
    }
}
