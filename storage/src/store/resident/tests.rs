//! Unit tests of the resident tables.

use super::*;

#[test]
fn only_the_reply_tables_are_resident() {
    for table in Table::ALL {
        let resident = matches!(table, Table::Replies | Table::ReplyExpiry);
        assert_eq!(contains(&[table.prefix(), 0, 1]), resident, "{table:?}");
        assert_eq!(contains(&[table.prefix()]), resident, "{table:?}");
    }
    assert!(!contains(&crate::layout::meta_key(b"keyspace")));
}

#[test]
fn contains_agrees_with_the_bounds_for_every_leading_byte() {
    let (start, end) = bounds();
    for first in 0..=u8::MAX {
        for key in [vec![first], vec![first, 0], vec![first, 0xff, 7]] {
            let in_bounds = key.as_slice() >= start.as_slice() && key < end;
            assert_eq!(contains(&key), in_bounds, "key {key:?}");
        }
    }
    assert!(!contains(b""));
}

#[test]
fn bytes_follow_the_rows() {
    let mut tables = ResidentTables::default();
    tables.put(b"r1".to_vec(), b"one".to_vec());
    tables.put(b"q1".to_vec(), Vec::new());
    assert_eq!(tables.replies(), 1, "only the r row is a reply");
    let two_rows = tables.bytes();
    tables.put(b"r1".to_vec(), b"uno".to_vec()); // same size: same bytes
    assert_eq!(tables.bytes(), two_rows);
    let back = tables.clone();
    assert_eq!(
        back.range(b"r", b"s", 10),
        vec![(b"r1".to_vec(), b"uno".to_vec())]
    );
    assert_eq!(back.range(b"a", b"z", 1).len(), 1, "the limit holds");
    tables.remove(b"r1");
    tables.remove(b"q1");
    assert_eq!((tables.len(), tables.bytes(), tables.replies()), (0, 0, 0));
}

/// A layer and an export keep the tables as they were when they took them, whatever is
/// written afterwards (the persistent map copies on write).
#[test]
fn a_clone_keeps_the_rows_it_was_taken_with() {
    let mut tables = ResidentTables::default();
    for i in 0..1_000u32 {
        tables.put(i.to_be_bytes().to_vec(), b"old".to_vec());
    }
    let taken = tables.clone();
    for i in 0..1_000u32 {
        if i % 2 == 0 {
            tables.put(i.to_be_bytes().to_vec(), b"new".to_vec());
        } else {
            tables.remove(&i.to_be_bytes());
        }
    }
    assert_eq!(taken.len(), 1_000);
    assert!(taken.iter().all(|(_, value)| value == b"old"));
    assert_eq!(tables.len(), 500);
    assert_eq!(tables.get(&0u32.to_be_bytes()), Some(&b"new"[..]));
}

/// `derive_index` adds to the replies the index entries apply wrote beside them, and nothing
/// else. (That [`reply_rows::expiry_entry`] gives apply's entry after eviction, pruning and
/// replacement too is checked by the machine tests' `recount`, after each of their scenarios.)
#[test]
fn the_derived_expiry_index_is_the_one_apply_wrote() {
    use crate::machine::tests::{replicas_with_replies, table_rows};

    let (replica, _) = replicas_with_replies(20, 1_000);
    let tables_of = |tables: &[Table]| {
        let mut out = ResidentTables::default();
        for &table in tables {
            for (key, value) in table_rows(&replica.map, table) {
                out.put(key.to_vec(), value.to_vec());
            }
        }
        out
    };
    let mut derived = tables_of(&[Table::Replies]);
    derived.derive_index().expect("every reply decodes");
    assert_eq!(derived, tables_of(&[Table::Replies, Table::ReplyExpiry]));
    assert_eq!(derived.len(), 40, "20 replies and their index entries");
}

/// A reply row whose value is not a remembered reply cannot be indexed: the load fails as
/// corrupt rather than keep a reply that would never expire.
#[test]
fn a_reply_that_does_not_decode_is_corrupt() {
    let mut tables = ResidentTables::default();
    tables.put(vec![Table::Replies.prefix(), 1], b"not a reply".to_vec());
    assert!(matches!(
        tables.derive_index(),
        Err(crate::error::StorageError::Corrupt { .. }
            | crate::error::StorageError::FormatVersion { .. })
    ));
}
