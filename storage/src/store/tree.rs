//! One keyspace of the state database (fjall) and the few operations the store makes on it:
//! point reads, ordered range reads copied out, and atomic batches of writes.
//!
//! A [`Tree`] carries its database: a fjall keyspace alone does not keep the journal and worker
//! threads alive, and a handle that outlived them would fail its writes.

use std::ops::Bound;

use crate::engine::KvPair;
use crate::error::{Result, StorageError};

/// fjall's memtable per keyspace (its default is 64 MiB). The store's own memtable already
/// gathers writes in front of fjall and hands them over in batches of a few MiB: a smaller fjall
/// memtable keeps memory and the journal on disk (which fjall deletes once its memtables reach
/// table files) small.
const MEMTABLE_BYTES: u64 = 16 << 20;

/// A keyspace and the database that owns it (cheap to clone: both are shared handles).
#[derive(Clone)]
pub struct Tree {
    db: fjall::Database,
    keyspace: fjall::Keyspace,
}

impl Tree {
    /// Opens (or creates) the keyspace `name` of `db`.
    pub fn open(db: &fjall::Database, name: &str) -> Result<Tree> {
        let keyspace = db.keyspace(name, || {
            fjall::KeyspaceCreateOptions::default().max_memtable_size(MEMTABLE_BYTES)
        })?;
        Ok(Tree {
            db: db.clone(),
            keyspace,
        })
    }

    /// Removes the keyspace `name` of `db` if it exists (its files go once no handle is left).
    pub fn drop_named(db: &fjall::Database, name: &str) -> Result<()> {
        if db.keyspace_exists(name) {
            let tree = Tree::open(db, name)?;
            db.delete_keyspace(tree.keyspace)?;
        }
        Ok(())
    }

    /// Removes this keyspace (its files go once no handle is left).
    pub fn delete(self) -> Result<()> {
        self.db.delete_keyspace(self.keyspace)?;
        Ok(())
    }

    /// The value of `key`, copied out.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.keyspace.get(key)?.map(|value| value.to_vec()))
    }

    /// Sets `key` to `value` on its own (one batch of one write).
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.keyspace.insert(key, value)?;
        Ok(())
    }

    /// The rows with `start <= key < end`, in key order, copied out (a fjall iterator reads the
    /// keyspace as it was when it was created).
    pub fn range(&self, start: &[u8], end: &[u8]) -> impl Iterator<Item = Result<KvPair>> + use<> {
        let bounds = (
            Bound::Included(start.to_vec()),
            Bound::Excluded(end.to_vec()),
        );
        self.keyspace.range(bounds).map(|guard| {
            let (key, value) = guard.into_inner()?;
            Ok((key.to_vec(), value.to_vec()))
        })
    }

    /// Writes `writes` (`None` removes the key) as one atomic batch: readers see all of them or
    /// none. Not durable until [`crate::store::db::sync`].
    pub fn write<'a>(
        &self,
        writes: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    ) -> Result<()> {
        let mut batch = self.db.batch();
        for (key, value) in writes {
            match value {
                Some(value) => batch.insert(&self.keyspace, key, value),
                None => batch.remove(&self.keyspace, key),
            }
        }
        batch.commit()?;
        Ok(())
    }

    /// Bulk-loads an empty keyspace: `fill` is handed a sink for rows in strictly ascending key
    /// order, which fjall writes straight into sorted table files (no journal, no memtable). A
    /// row out of order is refused (as a corrupt snapshot): fjall would panic on it. If `fill`
    /// fails, the rows loaded so far stay in the keyspace: delete it.
    pub fn load_sorted<T>(
        &self,
        fill: impl FnOnce(&mut dyn FnMut(&[u8], &[u8]) -> Result<()>) -> Result<T>,
    ) -> Result<T> {
        let mut ingestion = self.keyspace.start_ingestion()?;
        let mut last: Option<Vec<u8>> = None;
        let filled = fill(&mut |key, value| {
            if last.as_deref().is_some_and(|last| key <= last) {
                return Err(StorageError::Corrupt {
                    what: "snapshot",
                    reason: "rows are not in ascending key order".to_owned(),
                });
            }
            ingestion.write(key, value)?;
            let last = last.get_or_insert_with(Vec::new);
            last.clear();
            last.extend_from_slice(key);
            Ok(())
        })?;
        ingestion.finish()?;
        Ok(filled)
    }

    /// The database this keyspace belongs to.
    pub fn db(&self) -> &fjall::Database {
        &self.db
    }
}
