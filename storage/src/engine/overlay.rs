//! [`Overlay`]: a transaction of buffered writes over any [`OrderedRead`], read-your-writes
//! included; its writes are applied by the backend as one atomic batch. Knows nothing of what
//! the bytes mean.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::collections::btree_map::{self, Entry};
use std::iter::Peekable;
use std::ops::Bound;

use crate::engine::txn::{KvPair, OrderedRead, RangeIter, Txn, TxnWrite, TxnWrites};
use crate::error::Result;

/// Buffered writes over a base map.
pub struct Overlay<'b, B: OrderedRead + ?Sized> {
    base: &'b B,
    writes: TxnWrites,
}

impl<'b, B: OrderedRead + ?Sized> Overlay<'b, B> {
    /// An empty transaction over `base`.
    pub fn new(base: &'b B) -> Self {
        Overlay {
            base,
            writes: BTreeMap::new(),
        }
    }

    /// The buffered writes (`None` = removal), to apply atomically.
    pub fn into_writes(self) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
        self.writes
            .into_iter()
            .map(|(key, write)| (key, write.into_value()))
            .collect()
    }

    /// The buffered writes with what each one knows of the key's past, to apply atomically.
    pub fn into_txn_writes(self) -> TxnWrites {
        self.writes
    }

    /// Number of buffered writes.
    pub fn len(&self) -> usize {
        self.writes.len()
    }

    /// True if nothing was written.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }
}

impl<B: OrderedRead + ?Sized> OrderedRead for Overlay<'_, B> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.writes.get(key) {
            Some(write) => Ok(write.value().cloned()),
            None => self.base.get(key),
        }
    }

    fn get_ref(&self, key: &[u8]) -> Result<Option<Cow<'_, [u8]>>> {
        match self.writes.get(key) {
            Some(write) => Ok(write.value().map(|v| Cow::Borrowed(v.as_slice()))),
            None => self.base.get_ref(key),
        }
    }

    fn range<'a>(&'a self, start: &[u8], end: &[u8]) -> RangeIter<'a> {
        if start >= end {
            return Box::new(std::iter::empty());
        }
        let bounds = (Bound::Included(start), Bound::Excluded(end));
        let overlay = self.writes.range::<[u8], _>(bounds).peekable();
        Box::new(Merge {
            base: self.base.range(start, end).peekable(),
            overlay,
        })
    }
}

impl<B: OrderedRead + ?Sized> Overlay<'_, B> {
    /// Writes `value` under `key`; `created`: the row is new (see [`Txn::create`]). One search
    /// of the write map (`entry`), not a lookup followed by an insert.
    fn write(&mut self, key: Vec<u8>, value: Vec<u8>, created: bool) {
        match self.writes.entry(key) {
            Entry::Occupied(mut entry) => match entry.get_mut() {
                // Still a row this transaction created: nothing was there before it.
                TxnWrite::Create(row) => *row = value,
                // Written or removed earlier in this transaction: the base may hold it.
                write => *write = TxnWrite::Put(value),
            },
            Entry::Vacant(entry) => {
                entry.insert(if created {
                    TxnWrite::Create(value)
                } else {
                    TxnWrite::Put(value)
                });
            }
        }
    }
}

impl<B: OrderedRead + ?Sized> Txn for Overlay<'_, B> {
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.write(key, value, false);
    }

    fn create(&mut self, key: Vec<u8>, value: Vec<u8>) {
        debug_assert!(
            matches!(self.get_ref(&key), Ok(None)),
            "created a row that exists: {key:?}"
        );
        self.write(key, value, true);
    }

    fn remove(&mut self, key: Vec<u8>) {
        match self.writes.entry(key) {
            // Created here and gone again: the base never had it.
            Entry::Occupied(entry) if matches!(entry.get(), TxnWrite::Create(_)) => {
                entry.remove();
            }
            Entry::Occupied(mut entry) => *entry.get_mut() = TxnWrite::Remove,
            Entry::Vacant(entry) => {
                entry.insert(TxnWrite::Remove);
            }
        }
    }
}

/// Merges base entries with overlay writes; the overlay wins on equal keys, removals hide.
struct Merge<'a> {
    base: Peekable<RangeIter<'a>>,
    overlay: Peekable<btree_map::Range<'a, Vec<u8>, TxnWrite>>,
}

impl Iterator for Merge<'_> {
    type Item = Result<KvPair>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let take_overlay = match (self.base.peek(), self.overlay.peek()) {
                (None, None) => return None,
                (Some(Err(_)), _) => return self.base.next(),
                (None, Some(_)) => true,
                (Some(_), None) => false,
                (Some(Ok((base_key, _))), Some((overlay_key, _))) => {
                    if base_key == *overlay_key {
                        self.base.next(); // shadowed by the overlay
                        true
                    } else {
                        *overlay_key < base_key
                    }
                }
            };
            if !take_overlay {
                return self.base.next();
            }
            if let Some((key, write)) = self.overlay.next()
                && let Some(value) = write.value()
            {
                return Some(Ok((key.clone(), value.clone())));
            }
        }
    }
}

#[cfg(test)]
mod tests;
