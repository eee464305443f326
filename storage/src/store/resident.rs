//! Tables that live in memory and reach the disk as entries of their own journal: the reply
//! memory (§6).
//!
//! Every write request adds a remembered reply and an expiry-index entry, and removes both
//! again once the reply expires (seconds later). In sled, the state database before fjall, that
//! was four tree operations per request, the largest share of the state machine's cost under
//! load. These two tables are now kept in an ordered map; every memtable layer carries what
//! changed in the replies as an entry of the [`resident_journal`](crate::store::resident_journal)
//! (the expiry index is rebuilt from them at start: [`is_derived`]),
//! and the layer's table in fjall records the entry's number (so fjall and the reply memory's
//! log together still hold the state after a prefix of the log); a restart loads them back.
//! The state machine sees no difference: reads and writes of these tables go through the same
//! `OrderedRead`/`Txn` calls, served from here.
//!
//! The rows are a persistent ordered map (`imbl`, copy-on-write B-tree nodes holding shared
//! byte slices): a clone costs nothing and shares every node, and a write after it copies only
//! the nodes on its path. A memtable layer takes the tables as they are when it freezes and a
//! snapshot export when it begins, both under the memtable's lock, so neither may cost time in
//! proportion to the rows (a deep copy of 170,000 remembered replies held apply for 100-300 ms
//! per export; encoding a layer's changed rows there, 60-200 ms per layer: issue 30).

use std::ops::Bound;
use std::sync::Arc;

use crate::error::Result;
use crate::layout::Table;
use crate::machine::reply_rows;

/// Bytes an entry is accounted at beyond its key and value.
const ENTRY_OVERHEAD: usize = 48;

/// The first and the last table kept here (they are adjacent in key order).
const FIRST: Table = Table::ReplyExpiry;
const LAST: Table = Table::Replies;

/// `[start, end)` of the resident tables.
pub fn bounds() -> (Vec<u8>, Vec<u8>) {
    (FIRST.bounds().0, LAST.bounds().1)
}

/// True if `key` belongs to a resident table (called for every key read or written: no
/// allocation, one byte compared).
pub fn contains(key: &[u8]) -> bool {
    key.first()
        .is_some_and(|&table| (FIRST.prefix()..=LAST.prefix()).contains(&table))
}

/// True for a row of the reply-expiry index: derived from the remembered replies (each reply
/// row has exactly one, at its expiry, holding its counted size: apply writes and removes the
/// two together), so the journal stores only the replies and a restart rebuilds the index
/// ([`ResidentTables::derive_index`]). It was two fifths of the journal's bytes: at a 1M-key load
/// 12 of 34 MB in a base of 271,000 replies (issue 30).
pub fn is_derived(key: &[u8]) -> bool {
    key.first() == Some(&Table::ReplyExpiry.prefix())
}

/// The resident tables' rows (cheap to clone: see the module's comment).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ResidentTables {
    rows: imbl::OrdMap<Arc<[u8]>, Arc<[u8]>>,
    bytes: usize,
    /// Rows of [`Table::Replies`]: remembered replies.
    replies: usize,
}

fn is_reply(key: &[u8]) -> bool {
    key.first() == Some(&Table::Replies.prefix())
}

impl ResidentTables {
    /// Sets a row.
    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.put_shared(Arc::from(key), Arc::from(value));
    }

    /// [`ResidentTables::put`] of bytes shared with the caller.
    pub fn put_shared(&mut self, key: Arc<[u8]>, value: Arc<[u8]>) {
        let (key_len, value_len, reply) = (key.len(), value.len(), is_reply(&key));
        match self.rows.insert(key, value) {
            Some(old) => self.bytes = self.bytes.saturating_sub(old.len()) + value_len,
            None => {
                self.bytes += key_len + value_len + ENTRY_OVERHEAD;
                self.replies += usize::from(reply);
            }
        }
    }

    /// Adds the reply-expiry index entry of every remembered reply (after the tables were
    /// rebuilt from the journal, which holds none: [`is_derived`]). `Corrupt` if a reply's value
    /// does not decode.
    pub fn derive_index(&mut self) -> Result<()> {
        let (start, end) = Table::Replies.bounds();
        let entries = self
            .rows
            .range::<_, [u8]>((Bound::Included(&start[..]), Bound::Excluded(&end[..])))
            .map(|(key, value)| reply_rows::expiry_entry(key, value))
            .collect::<Result<Vec<_>>>()?;
        for (key, value) in entries {
            self.put(key, value);
        }
        Ok(())
    }

    /// Removes a row.
    pub fn remove(&mut self, key: &[u8]) {
        if let Some(old) = self.rows.remove(key) {
            self.bytes = self
                .bytes
                .saturating_sub(key.len() + old.len() + ENTRY_OVERHEAD);
            self.replies -= usize::from(is_reply(key));
        }
    }

    /// Every row, ascending.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.rows.iter().map(|(k, v)| (&**k, &**v))
    }

    /// A row's value.
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.rows.get(key).map(|v| &**v)
    }

    /// Up to `limit` rows with `start <= key < end`, ascending (copied).
    pub fn range(&self, start: &[u8], end: &[u8], limit: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        if start >= end {
            return Vec::new();
        }
        self.rows
            .range::<_, [u8]>((Bound::Included(start), Bound::Excluded(end)))
            .take(limit)
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect()
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Remembered replies held.
    pub fn replies(&self) -> usize {
        self.replies
    }

    /// Bytes held (keys, values and bookkeeping).
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests;
