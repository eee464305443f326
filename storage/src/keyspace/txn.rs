//! The transaction trait the keyspace semantics run on, and [`Overlay`], the one
//! implementation: buffered writes over any ordered byte map, read-your-writes included.
//!
//! The semantics never see sled or a BTreeMap; the backends only provide [`OrderedRead`]
//! and take the overlay's writes as one atomic batch.
//!
//! Hot-path reads go through [`OrderedRead::get_ref`], which lends the value instead of
//! copying it when the backend can (the overlay's own writes, a BTreeMap); backends that
//! cannot lend (sled hands out its own buffers) keep the default, which wraps [`OrderedRead::get`].

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::collections::btree_map;
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
    /// Removes `key` (no-op if absent).
    fn remove(&mut self, key: Vec<u8>);
}

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
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
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
            Some(write) => Ok(write.clone()),
            None => self.base.get(key),
        }
    }

    fn get_ref(&self, key: &[u8]) -> Result<Option<Cow<'_, [u8]>>> {
        match self.writes.get(key) {
            Some(write) => Ok(write.as_deref().map(Cow::Borrowed)),
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

impl<B: OrderedRead + ?Sized> Txn for Overlay<'_, B> {
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.writes.insert(key, Some(value));
    }

    fn remove(&mut self, key: Vec<u8>) {
        self.writes.insert(key, None);
    }
}

/// Merges base entries with overlay writes; the overlay wins on equal keys, removals hide.
struct Merge<'a> {
    base: Peekable<RangeIter<'a>>,
    overlay: Peekable<btree_map::Range<'a, Vec<u8>, Option<Vec<u8>>>>,
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
                && let Some(value) = write
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
