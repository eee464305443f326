//! Unit tests of the keyspace handle: keys fjall cannot store are errors or empty answers,
//! never a panic, and long range bounds select exactly the rows the bounds say.

use super::*;

fn keys(rows: impl Iterator<Item = Result<KvPair>>) -> Vec<Vec<u8>> {
    rows.map(|row| row.expect("row").0).collect()
}

#[test]
fn a_key_longer_than_fjall_stores_is_an_error_and_has_no_value() {
    let tree = temporary_tree();
    let longest = vec![b'k'; MAX_STORED_KEY_BYTES];
    let too_long = vec![b'k'; MAX_STORED_KEY_BYTES + 1];
    tree.write([(longest.as_slice(), Some(b"v".as_slice()))])
        .expect("the longest key is stored");
    assert!(matches!(
        tree.write([(too_long.as_slice(), Some(b"v".as_slice()))]),
        Err(StorageError::UnstorableKey { .. })
    ));
    assert!(matches!(
        tree.write([(too_long.as_slice(), None)]),
        Err(StorageError::UnstorableKey { .. })
    ));
    assert!(matches!(
        tree.insert(&too_long, b"v"),
        Err(StorageError::UnstorableKey { .. })
    ));
    assert!(matches!(
        tree.write([(b"".as_slice(), Some(b"v".as_slice()))]),
        Err(StorageError::UnstorableKey { .. })
    ));
    assert_eq!(tree.get(&longest).expect("get"), Some(b"v".to_vec()));
    assert_eq!(tree.get(&too_long).expect("get"), None);
}

#[test]
fn a_batch_with_one_key_too_long_writes_nothing() {
    let tree = temporary_tree();
    let too_long = vec![b'k'; MAX_STORED_KEY_BYTES + 1];
    assert!(
        tree.write([
            (b"a".as_slice(), Some(b"1".as_slice())),
            (too_long.as_slice(), Some(b"2".as_slice())),
        ])
        .is_err()
    );
    assert_eq!(tree.get(b"a").expect("get"), None);
}

/// Bounds longer than a storable key, against the rows a plain comparison selects.
#[test]
fn long_range_bounds_select_what_the_bounds_say() {
    let in_memtable = temporary_tree();
    let max = MAX_STORED_KEY_BYTES;
    let stored: Vec<Vec<u8>> = vec![
        b"a".to_vec(),
        vec![b'm'; max - 1],
        vec![b'm'; max],
        [vec![b'm'; max - 1], vec![b'n']].concat(),
        b"z".to_vec(),
    ];
    in_memtable
        .write(stored.iter().map(|k| (k.as_slice(), Some(b"v".as_slice()))))
        .expect("write");
    // The same rows in a table file (fjall reads tables by another path).
    let in_table = Tree::open(in_memtable.db(), "tables").expect("tree");
    in_table
        .load_sorted(|load| stored.iter().try_for_each(|k| load(k, b"v")))
        .expect("load");
    let long = |byte: u8, tail: u8| [vec![byte; max], vec![tail; 3]].concat();
    let bounds = [
        (b"a".to_vec(), b"zz".to_vec()),
        (long(b'm', 0), b"zz".to_vec()),
        (b"a".to_vec(), long(b'm', 0)),
        (long(b'm', 0), long(b'm', 0xff)),
        (vec![b'm'; max - 1], long(b'm', 1)),
        (long(b'a', 1), long(b'z', 1)),
    ];
    for (start, end) in bounds {
        let expected: Vec<Vec<u8>> = stored
            .iter()
            .filter(|k| k.as_slice() >= start.as_slice() && k.as_slice() < end.as_slice())
            .cloned()
            .collect();
        for (place, tree) in [("memtable", &in_memtable), ("table", &in_table)] {
            assert_eq!(
                keys(tree.range(&start, &end)),
                expected,
                "{place}: start {} bytes, end {} bytes",
                start.len(),
                end.len()
            );
        }
    }
    assert!(
        keys(in_table.range(b"z", b"a")).is_empty(),
        "an empty range"
    );
}

#[test]
fn a_bulk_load_refuses_rows_out_of_order_and_keys_it_cannot_store() {
    let tree = temporary_tree();
    let out_of_order = tree.load_sorted(|load| {
        load(b"b", b"1")?;
        load(b"a", b"2")
    });
    assert!(matches!(out_of_order, Err(StorageError::Corrupt { .. })));
    let other = Tree::open(tree.db(), "u").expect("tree");
    let too_long = vec![b'k'; MAX_STORED_KEY_BYTES + 1];
    let long = other.load_sorted(|load| load(&too_long, b"v"));
    assert!(matches!(long, Err(StorageError::Corrupt { .. })));
    let empty = Tree::open(tree.db(), "v").expect("tree");
    assert!(matches!(
        empty.load_sorted(|load| load(b"", b"v")),
        Err(StorageError::Corrupt { .. })
    ));
    let duplicate = Tree::open(tree.db(), "x").expect("tree");
    assert!(matches!(
        duplicate.load_sorted(|load| {
            load(b"a", b"1")?;
            load(b"a", b"2")
        }),
        Err(StorageError::Corrupt { .. })
    ));
    let fresh = Tree::open(tree.db(), "w").expect("tree");
    fresh
        .load_sorted(|load| {
            load(b"a", b"1")?;
            load(b"b", b"2")
        })
        .expect("sorted rows load");
    assert_eq!(
        keys(fresh.range(b"a", b"c")),
        vec![b"a".to_vec(), b"b".to_vec()]
    );
}

/// The longest user key the node admits fits in the longest row that holds it (the expiry
/// index: table prefix, instant, key); one byte more would not.
#[test]
fn the_longest_admitted_key_fits_in_every_row_that_holds_it() {
    use crate::keyspace::layout::{expiry_key, record_key};
    let tree = temporary_tree();
    let key = vec![b'k'; crate::store::MAX_USER_KEY_BYTES];
    let rows = [record_key(&key), expiry_key(u64::MAX, &key)];
    tree.write(
        rows.iter()
            .map(|row| (row.as_slice(), Some(b"v".as_slice()))),
    )
    .expect("stored");
    let longer = expiry_key(u64::MAX, &[key, vec![b'k']].concat());
    assert!(
        tree.write([(longer.as_slice(), Some(b"v".as_slice()))])
            .is_err()
    );
}
