//! The transaction traits the state machine's semantics run on: [`OrderedRead`] (what a
//! backend provides), [`Txn`] (what the semantics write through) and the [`TxnWrite`]s a
//! transaction leaves for its backend to apply as one atomic batch. [`crate::engine::Overlay`]
//! is the one [`Txn`]; a `BTreeMap` is an [`OrderedRead`] (tests, tools).
//!
//! Knows nothing of what the bytes mean (keys, records, devices) nor of fjall.
//!
//! Hot-path reads go through [`OrderedRead::get_ref`], which lends the value instead of
//! copying it when the backend can (the overlay's own writes, a BTreeMap); backends that
//! cannot lend (the store copies each value out of its memtable or out of fjall) keep the
//! default, which wraps [`OrderedRead::get`].
//!
//! Rows the semantics create (a new sequence number, a message's lock-expiry entry) are
//! written with [`Txn::create`]: the overlay remembers that nothing was there before, so a
//! removal in the same transaction leaves no write at all, and the memtable can do the same
//! across transactions ([`TxnWrite::Create`]). Short-lived rows then never become tombstones.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Bound;

use crate::error::Result;

/// A key and its value.
pub type KvPair = (Vec<u8>, Vec<u8>);

/// Boxed ascending iterator over a key range.
pub type RangeIter<'a> = Box<dyn Iterator<Item = Result<KvPair>> + 'a>;

/// Read access to an ordered byte map.
pub trait OrderedRead {
    /// The value stored at `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// The value stored at `key`, borrowed when the backend can lend it (same answer as
    /// [`OrderedRead::get`], without the copy). The default copies through `get`.
    fn get_ref(&self, key: &[u8]) -> Result<Option<Cow<'_, [u8]>>> {
        Ok(self.get(key)?.map(Cow::Owned))
    }
    /// Entries with `start <= key < end`, ascending.
    fn range<'a>(&'a self, start: &[u8], end: &[u8]) -> RangeIter<'a>;
}

/// A writable transaction: reads see earlier writes of the same transaction.
pub trait Txn: OrderedRead {
    /// Sets `key` to `value`.
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>);
    /// Sets `key`, which the caller knows is absent now (a row it creates). A later removal
    /// may then leave nothing behind instead of a tombstone. A wrong promise would let an
    /// older value reappear: debug builds of [`crate::engine::Overlay`] check it.
    fn create(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.put(key, value);
    }
    /// Removes `key` (no-op if absent).
    fn remove(&mut self, key: Vec<u8>);
}

/// One buffered write of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnWrite {
    /// Set the key to this value.
    Put(Vec<u8>),
    /// Set the key, which was absent before the transaction, to this value.
    Create(Vec<u8>),
    /// Remove the key.
    Remove,
}

impl TxnWrite {
    /// The value the key has after the write (`None`: removed).
    pub fn value(&self) -> Option<&Vec<u8>> {
        match self {
            TxnWrite::Put(value) | TxnWrite::Create(value) => Some(value),
            TxnWrite::Remove => None,
        }
    }

    /// The write as a plain value (`None`: removed).
    pub fn into_value(self) -> Option<Vec<u8>> {
        match self {
            TxnWrite::Put(value) | TxnWrite::Create(value) => Some(value),
            TxnWrite::Remove => None,
        }
    }
}

/// A transaction's writes, by key.
pub type TxnWrites = BTreeMap<Vec<u8>, TxnWrite>;

impl OrderedRead for BTreeMap<Vec<u8>, Vec<u8>> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(BTreeMap::get(self, key).cloned())
    }

    fn get_ref(&self, key: &[u8]) -> Result<Option<Cow<'_, [u8]>>> {
        Ok(BTreeMap::get(self, key).map(|v| Cow::Borrowed(v.as_slice())))
    }

    fn range<'a>(&'a self, start: &[u8], end: &[u8]) -> RangeIter<'a> {
        if start >= end {
            return Box::new(std::iter::empty());
        }
        let bounds = (Bound::Included(start), Bound::Excluded(end));
        Box::new(BTreeMap::range::<[u8], _>(self, bounds).map(|(k, v)| Ok((k.clone(), v.clone()))))
    }
}

/// Smallest byte string greater than every string starting with `prefix`, or `None` if there
/// is none (all 0xff): the exclusive end of a prefix scan.
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}
