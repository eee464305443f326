//! The transaction trait the keyspace semantics run on, and [`Overlay`], the one
//! implementation: buffered writes over any ordered byte map, read-your-writes included.
//!
//! The semantics never see sled or a BTreeMap; the backends only provide [`OrderedRead`]
//! and take the overlay's writes as one atomic batch.
//!
//! Hot-path reads go through [`OrderedRead::get_ref`], which lends the value instead of
//! copying it when the backend can (the overlay's own writes, a BTreeMap); backends that
//! cannot lend (sled hands out its own buffers) keep the default, which wraps [`OrderedRead::get`].
//!
//! Rows the semantics create (a new sequence number, a message's lock-expiry entry) are
//! written with [`Txn::create`]: the overlay remembers that nothing was there before, so a
//! removal in the same transaction leaves no write at all, and the memtable can do the same
//! across transactions ([`TxnWrite::Create`]). Short-lived rows then never become tombstones.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::collections::btree_map::{self, Entry};
use std::iter::Peekable;
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
    /// older value reappear: debug builds of [`Overlay`] check it.
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
mod tests {
    use super::*;

    fn map(pairs: &[(&[u8], &[u8])]) -> BTreeMap<Vec<u8>, Vec<u8>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect()
    }

    #[test]
    fn overlay_reads_its_own_writes_and_hides_removals() {
        let base = map(&[(b"a", b"1"), (b"b", b"2"), (b"d", b"4")]);
        let mut txn = Overlay::new(&base);
        txn.put(b"c".to_vec(), b"3".to_vec());
        txn.put(b"a".to_vec(), b"one".to_vec());
        txn.remove(b"b".to_vec());
        txn.remove(b"zz".to_vec());
        assert_eq!(txn.get(b"a").expect("read"), Some(b"one".to_vec()));
        assert_eq!(txn.get(b"b").expect("read"), None);
        assert_eq!(txn.get(b"d").expect("read"), Some(b"4".to_vec()));
        for key in [&b"a"[..], b"b", b"c", b"d", b"zz", b"missing"] {
            assert_eq!(
                txn.get_ref(key).expect("read").map(|v| v.into_owned()),
                txn.get(key).expect("read"),
                "get_ref agrees with get on {key:?}"
            );
        }
        assert!(
            matches!(txn.get_ref(b"a").expect("read"), Some(Cow::Borrowed(_))),
            "the overlay lends its own writes"
        );
        let all: Vec<KvPair> = txn.range(b"a", b"z").collect::<Result<_>>().expect("scan");
        assert_eq!(
            all,
            vec![
                (b"a".to_vec(), b"one".to_vec()),
                (b"c".to_vec(), b"3".to_vec()),
                (b"d".to_vec(), b"4".to_vec()),
            ]
        );
        let part: Vec<KvPair> = txn.range(b"b", b"d").collect::<Result<_>>().expect("scan");
        assert_eq!(part, vec![(b"c".to_vec(), b"3".to_vec())]);
        assert_eq!(txn.range(b"d", b"a").count(), 0);
    }

    #[test]
    fn a_created_row_removed_in_the_same_transaction_leaves_no_write() {
        let base = map(&[(b"old", b"1")]);
        let mut txn = Overlay::new(&base);
        txn.create(b"new".to_vec(), b"2".to_vec());
        txn.put(b"new".to_vec(), b"3".to_vec());
        assert_eq!(txn.get(b"new").expect("read"), Some(b"3".to_vec()));
        txn.remove(b"new".to_vec());
        assert_eq!(txn.get(b"new").expect("read"), None);
        // Removed first, created again: the base holds the key, so the write is a plain put
        // and a later removal must stay a removal.
        txn.remove(b"old".to_vec());
        txn.create(b"old".to_vec(), b"4".to_vec());
        txn.create(b"kept".to_vec(), b"5".to_vec());
        assert_eq!(
            txn.into_txn_writes().into_iter().collect::<Vec<_>>(),
            vec![
                (b"kept".to_vec(), TxnWrite::Create(b"5".to_vec())),
                (b"old".to_vec(), TxnWrite::Put(b"4".to_vec())),
            ]
        );
        let mut txn = Overlay::new(&base);
        txn.remove(b"old".to_vec());
        txn.create(b"old".to_vec(), b"4".to_vec());
        txn.remove(b"old".to_vec());
        assert_eq!(
            txn.into_writes().into_iter().collect::<Vec<_>>(),
            vec![(b"old".to_vec(), None)]
        );
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "created a row that exists")]
    fn creating_a_row_that_exists_is_caught_in_debug_builds() {
        let base = map(&[(b"old", b"1")]);
        let mut txn = Overlay::new(&base);
        txn.create(b"old".to_vec(), b"2".to_vec());
    }

    /// A backend that only has the required methods (like sled's view).
    struct Plain(BTreeMap<Vec<u8>, Vec<u8>>);

    impl OrderedRead for Plain {
        fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
            OrderedRead::get(&self.0, key)
        }

        fn range<'a>(&'a self, start: &[u8], end: &[u8]) -> RangeIter<'a> {
            OrderedRead::range(&self.0, start, end)
        }
    }

    #[test]
    fn get_ref_falls_back_to_get_on_plain_backends() {
        let base = Plain(map(&[(b"a", b"1"), (b"b", b"2")]));
        assert!(matches!(
            base.get_ref(b"a").expect("read"),
            Some(Cow::Owned(v)) if v == b"1"
        ));
        let mut txn = Overlay::new(&base);
        txn.remove(b"a".to_vec());
        assert_eq!(txn.get_ref(b"a").expect("read"), None);
        assert_eq!(txn.get_ref(b"b").expect("read").as_deref(), Some(&b"2"[..]));
        assert_eq!(txn.get_ref(b"c").expect("read"), None);
    }
}
