//! Unit tests of the overlay transaction and of the `OrderedRead` defaults.

use super::*;
use crate::engine::txn::prefix_end;

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

/// A backend that only has the required methods (like the store's `StateView`).
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

#[test]
fn prefix_end_handles_carry() {
    assert_eq!(prefix_end(&[1, 2]), Some(vec![1, 3]));
    assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
    assert_eq!(prefix_end(&[0xff, 0xff]), None);
}
