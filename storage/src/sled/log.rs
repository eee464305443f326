//! The Raft log tree (index -> encoded entry) and a small tree of named store records.
//!
//! Appends are atomic batches; [`LogTree::flush`] is the durability point the consensus layer
//! waits for before reporting entries persisted. Purge and truncate work in bounded chunks so a
//! large log never becomes one huge batch.

use std::ops::Bound;

use crate::error::Result;

/// Entries removed per batch when purging or truncating.
const REMOVE_CHUNK: usize = 1024;

/// Handle to the log and the store-records trees (cheap to clone).
#[derive(Clone)]
pub struct LogTree {
    db: ::sled::Db,
    log: ::sled::Tree,
    records: ::sled::Tree,
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn key_index(key: &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    let n = key.len().min(8);
    bytes[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(bytes)
}

impl LogTree {
    pub(crate) fn open(db: &::sled::Db) -> Result<LogTree> {
        Ok(LogTree {
            db: db.clone(),
            log: db.open_tree("raft_log")?,
            records: db.open_tree("store_records")?,
        })
    }

    /// Stores entries (index, encoded entry) as one atomic batch; not yet durable.
    pub fn append(&self, entries: impl IntoIterator<Item = (u64, Vec<u8>)>) -> Result<usize> {
        let mut batch = ::sled::Batch::default();
        let mut bytes = 0;
        for (index, entry) in entries {
            bytes += entry.len();
            batch.insert(&index_key(index), entry);
        }
        self.log.apply_batch(batch)?;
        Ok(bytes)
    }

    /// Makes everything written so far durable (fsync).
    pub async fn flush(&self) -> Result<()> {
        self.db.flush_async().await?;
        Ok(())
    }

    /// Entries with `start <= index < end`, ascending, at most `limit` of them.
    pub fn range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>> {
        let start = start.map(index_key);
        let end = end.map(index_key);
        self.log
            .range::<[u8; 8], _>((start, end))
            .take(limit)
            .map(|entry| {
                let (k, v) = entry?;
                Ok((key_index(&k), v.to_vec()))
            })
            .collect()
    }

    /// The last entry, if any.
    pub fn last(&self) -> Result<Option<(u64, Vec<u8>)>> {
        Ok(self.log.last()?.map(|(k, v)| (key_index(&k), v.to_vec())))
    }

    /// Removes every entry with index `>= from`.
    pub fn truncate_from(&self, from: u64) -> Result<()> {
        self.remove_range(Bound::Included(from), Bound::Unbounded)
    }

    /// Removes every entry with index `<= upto`.
    pub fn purge_upto(&self, upto: u64) -> Result<()> {
        self.remove_range(Bound::Unbounded, Bound::Included(upto))
    }

    fn remove_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<()> {
        let start = start.map(index_key);
        let end = end.map(index_key);
        loop {
            let keys: Vec<::sled::IVec> = self
                .log
                .range::<[u8; 8], _>((start, end))
                .keys()
                .take(REMOVE_CHUNK)
                .collect::<Result<_, _>>()?;
            if keys.is_empty() {
                return Ok(());
            }
            let mut batch = ::sled::Batch::default();
            for key in keys {
                batch.remove(key);
            }
            self.log.apply_batch(batch)?;
        }
    }

    /// A named store record (vote, purge point, ...).
    pub fn record(&self, name: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.records.get(name)?.map(|v| v.to_vec()))
    }

    /// Writes a named store record (not yet durable).
    pub fn set_record(&self, name: &str, value: Vec<u8>) -> Result<()> {
        self.records.insert(name, value)?;
        Ok(())
    }
}
