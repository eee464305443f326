//! Unit tests of the resident tables.

use super::*;

#[test]
fn only_the_reply_tables_are_resident() {
    for table in Table::ALL {
        let resident = matches!(table, Table::Replies | Table::ReplyExpiry);
        assert_eq!(contains(&[table.prefix(), 0, 1]), resident, "{table:?}");
        assert_eq!(contains(&[table.prefix()]), resident, "{table:?}");
    }
    assert!(!contains(&layout::meta_key(b"keyspace")));
    assert!(!contains(&legacy_record_key()));
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
fn encoding_round_trips_and_bytes_follow_the_rows() {
    let mut tables = ResidentTables::default();
    tables.put(b"r1".to_vec(), b"one".to_vec());
    tables.put(b"q1".to_vec(), Vec::new());
    assert_eq!(tables.replies(), 1, "only the r row is a reply");
    let two_rows = tables.bytes();
    tables.put(b"r1".to_vec(), b"uno".to_vec()); // same size: same bytes
    assert_eq!(tables.bytes(), two_rows);
    let back = ResidentTables::decode(&tables.encode()).expect("decodes");
    assert_eq!(back, tables);
    assert_eq!(
        back.range(b"r", b"s", 10),
        vec![(b"r1".to_vec(), b"uno".to_vec())]
    );
    assert_eq!(back.range(b"a", b"z", 1).len(), 1, "the limit holds");
    tables.remove(b"r1");
    tables.remove(b"q1");
    assert_eq!((tables.len(), tables.bytes(), tables.replies()), (0, 0, 0));
}
