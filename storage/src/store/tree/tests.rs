//! Unit tests of the keyspace handle: keys fjall cannot store are errors or empty answers,
//! never a panic; long range bounds select exactly the rows the bounds say; an ingested layer is
//! atomic, durable and newer than everything before it.

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
    let in_table = Tree::open(&in_memtable.db, "tables").expect("tree");
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
    let other = Tree::open(&tree.db, "u").expect("tree");
    let too_long = vec![b'k'; MAX_STORED_KEY_BYTES + 1];
    let long = other.load_sorted(|load| load(&too_long, b"v"));
    assert!(matches!(long, Err(StorageError::Corrupt { .. })));
    let empty = Tree::open(&tree.db, "v").expect("tree");
    assert!(matches!(
        empty.load_sorted(|load| load(b"", b"v")),
        Err(StorageError::Corrupt { .. })
    ));
    let duplicate = Tree::open(&tree.db, "x").expect("tree");
    assert!(matches!(
        duplicate.load_sorted(|load| {
            load(b"a", b"1")?;
            load(b"a", b"2")
        }),
        Err(StorageError::Corrupt { .. })
    ));
    let fresh = Tree::open(&tree.db, "w").expect("tree");
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

fn layer(writes: &[(&[u8], Option<&[u8]>)]) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
    writes
        .iter()
        .map(|(key, value)| (key.to_vec(), value.map(<[u8]>::to_vec)))
        .collect()
}

/// A layer overrides what is older, whether that sits in fjall's memtable (a journalled write)
/// or in an earlier table, and its tombstones remove.
#[test]
fn an_ingested_layer_overrides_older_rows_wherever_they_are() {
    let tree = temporary_tree();
    tree.ingest_layer(&layer(&[
        (b"in-table", Some(b"1")),
        (b"removed-from-table", Some(b"1")),
    ]))
    .expect("first layer");
    tree.write([
        (b"in-memtable".as_slice(), Some(b"1".as_slice())),
        (b"removed-from-memtable".as_slice(), Some(b"1".as_slice())),
    ])
    .expect("journalled write");
    tree.ingest_layer(&layer(&[
        (b"in-memtable", Some(b"2")),
        (b"in-table", Some(b"2")),
        (b"new", Some(b"2")),
        (b"never-there", None),
        (b"removed-from-memtable", None),
        (b"removed-from-table", None),
    ]))
    .expect("second layer");
    let rows: Vec<KvPair> = tree
        .range(b"", b"\xff")
        .collect::<Result<_>>()
        .expect("range");
    assert_eq!(
        rows,
        vec![
            (b"in-memtable".to_vec(), b"2".to_vec()),
            (b"in-table".to_vec(), b"2".to_vec()),
            (b"new".to_vec(), b"2".to_vec()),
        ]
    );
    // A write after the layer is newer than it.
    tree.write([(b"new".as_slice(), Some(b"3".as_slice()))])
        .expect("write after");
    assert_eq!(tree.get(b"new").expect("get"), Some(b"3".to_vec()));
}

/// A reader that started before a layer sees none of it; an empty layer changes nothing; a key
/// fjall cannot store fails the whole layer before any of it is written.
#[test]
fn an_ingested_layer_is_seen_whole_or_not_at_all() {
    let tree = temporary_tree();
    tree.ingest_layer(&layer(&[(b"a", Some(b"1")), (b"b", Some(b"1"))]))
        .expect("first layer");
    let before = tree.range(b"", b"\xff");
    tree.ingest_layer(&layer(&[
        (b"a", None),
        (b"b", Some(b"2")),
        (b"c", Some(b"2")),
    ]))
    .expect("second layer");
    assert_eq!(
        before.collect::<Result<Vec<_>>>().expect("range"),
        vec![
            (b"a".to_vec(), b"1".to_vec()),
            (b"b".to_vec(), b"1".to_vec())
        ]
    );
    tree.ingest_layer(&BTreeMap::new()).expect("empty layer");
    let too_long = vec![b'z'; MAX_STORED_KEY_BYTES + 1];
    assert!(matches!(
        tree.ingest_layer(&layer(&[(b"d", Some(b"3")), (&too_long, Some(b"3"))])),
        Err(StorageError::UnstorableKey { .. })
    ));
    assert_eq!(
        keys(tree.range(b"", b"\xff")),
        vec![b"b".to_vec(), b"c".to_vec()]
    );
}

/// An ingested layer bypasses fjall's journal (a journalled batch of the same rows grows it by
/// their size), and it is there after the database is opened again.
#[test]
fn an_ingested_layer_bypasses_the_journal_and_survives_a_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Values that do not compress (fjall compresses large values in its journal).
    let mut noise = 0x9e37_79b9_u32;
    let mut value = || -> Vec<u8> {
        (0..1_000)
            .map(|_| {
                noise ^= noise << 13;
                noise ^= noise >> 17;
                noise ^= noise << 5;
                noise.to_le_bytes()[0]
            })
            .collect()
    };
    let rows: BTreeMap<Vec<u8>, Option<Vec<u8>>> = (0..1_000u32)
        .map(|i| (format!("key-{i:06}").into_bytes(), Some(value())))
        .collect();
    let row_bytes: u64 = 1_000 * 1_000;
    {
        let db = fjall::Database::builder(dir.path()).open().expect("open");
        let tree = Tree::open(&db, "t").expect("tree");
        // Bytes the journal files really occupy: fjall sizes a new one at 64 MiB without
        // writing it (a sparse file).
        let journal = || {
            crate::store::db::sync(&db).expect("sync");
            allocated_bytes(dir.path(), "jnl")
        };
        let before = journal();
        tree.ingest_layer(&rows).expect("layer");
        assert!(
            journal() - before < row_bytes / 100,
            "ingestion wrote the journal"
        );
        let journalled = Tree::open(&db, "journalled").expect("tree");
        journalled
            .write(rows.iter().map(|(k, v)| (k.as_slice(), v.as_deref())))
            .expect("batch");
        let after = journal();
        assert!(
            after - before >= row_bytes,
            "the batch bypassed the journal: {before} -> {after}"
        );
    }
    let db = fjall::Database::builder(dir.path()).open().expect("reopen");
    let tree = Tree::open(&db, "t").expect("tree");
    assert_eq!(tree.range(b"", b"\xff").count(), rows.len());
    assert_eq!(
        tree.get(b"key-000999").expect("get"),
        rows[b"key-000999".as_slice()].clone()
    );
}

/// Blocks are LZ4-compressed at every level, the first included (fjall's default leaves levels
/// 0 and 1 uncompressed, where a store of a million keys keeps most of them): an ingested layer
/// of rows that repeat themselves takes far less than their bytes.
#[test]
fn an_ingested_layer_is_compressed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = fjall::Database::builder(dir.path()).open().expect("open");
    // The state keyspace's options, but compacted only at 200 level-0 tables: a compaction
    // running while the files are counted would count its input and output both.
    let keyspace = db
        .keyspace("t", || {
            super::keyspace_options().compaction_strategy(std::sync::Arc::new(
                fjall::compaction::Leveled::default().with_l0_threshold(200),
            ))
        })
        .expect("keyspace");
    let tree = Tree { db, keyspace };
    let rows: BTreeMap<Vec<u8>, Option<Vec<u8>>> = (0..10_000u32)
        .map(|i| {
            let value =
                format!("{{\"sensor\":\"temperature\",\"unit\":\"celsius\",\"reading\":{i}}}");
            (
                format!("device/{i:08}").into_bytes(),
                Some(value.into_bytes()),
            )
        })
        .collect();
    let row_bytes: u64 = rows
        .iter()
        .map(|(k, v)| (k.len() + v.as_ref().map_or(0, Vec::len)) as u64)
        .sum();
    // lsm-tree writes an ingested table with the policy of its first level (fjall's default:
    // none) and adds it to level 0, from where fjall may move it down unchanged at once.
    tree.ingest_layer(&rows).expect("layer");
    let tables = allocated_bytes(&dir.path().join("keyspaces"), "");
    assert!(
        tables * 3 < row_bytes,
        "{tables} bytes of tables for {row_bytes} bytes of rows"
    );
}

/// Disk space allocated to the files under `dir` whose names end in `.{extension}` (any file
/// for an empty `extension`).
fn allocated_bytes(dir: &std::path::Path, extension: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|entry| entry.expect("entry").path())
        .map(|path| {
            let meta = std::fs::symlink_metadata(&path).expect("metadata");
            if meta.is_dir() {
                allocated_bytes(&path, extension)
            } else if extension.is_empty() || path.extension().is_some_and(|e| e == extension) {
                meta.blocks() * 512
            } else {
                0
            }
        })
        .sum()
}

/// A tree `t` in a temporary fjall database whose own compaction starts only at 200 level-0
/// tables: compacted only when a test asks (a major compaction).
fn tree_compacted_only_when_asked() -> Tree {
    let dir = tempfile::tempdir().expect("tempdir").keep();
    let db = fjall::Database::builder(dir)
        .temporary(true)
        .open()
        .expect("temporary fjall");
    let keyspace = db
        .keyspace("t", || {
            fjall::KeyspaceCreateOptions::default().compaction_strategy(std::sync::Arc::new(
                fjall::compaction::Leveled::default().with_l0_threshold(200),
            ))
        })
        .expect("keyspace");
    Tree { db, keyspace }
}

/// The wait for level 0: none below the limit; at it, until compaction merges level 0 down
/// (here a major compaction: this keyspace's own compaction starts only at 200 tables).
#[test]
fn a_full_level0_is_waited_for_until_compaction_empties_it() {
    let tree = tree_compacted_only_when_asked();
    // Layers whose key ranges overlap, as spread keys do: fjall may move a table that overlaps
    // nothing in the level below (the first one) down without a compaction, but not the others.
    let mut last = 0u32;
    while tree.level0_tables() < 4 {
        assert!(last < 20, "level 0 never filled");
        last += 1;
        let value = last.to_be_bytes();
        tree.ingest_layer(&layer(&[(b"a", Some(&value)), (b"z", Some(&value))]))
            .expect("layer");
    }
    assert_eq!(tree.level0_tables(), 4);
    assert!(!tree.wait_for_level0_below(5), "below the limit: no wait");
    let (done, waited) = std::sync::mpsc::sync_channel(1);
    let waiter = {
        let tree = tree.clone();
        std::thread::spawn(move || done.send(tree.wait_for_level0_below(4)))
    };
    assert!(
        waited
            .recv_timeout(std::time::Duration::from_millis(100))
            .is_err(),
        "at the limit the wait goes on while nothing compacts"
    );
    tree.keyspace.major_compact().expect("compaction");
    assert_eq!(tree.level0_tables(), 0);
    assert_eq!(
        waited.recv_timeout(std::time::Duration::from_secs(30)),
        Ok(true),
        "the wait ends once level 0 is compacted"
    );
    waiter.join().expect("join").expect("sent");
    assert_eq!(
        tree.get(b"z").expect("get"),
        Some(last.to_be_bytes().to_vec())
    );
}

/// Table files in `tree`'s keyspace directory.
fn table_files(tree: &Tree) -> usize {
    std::fs::read_dir(tree.keyspace.path().join("tables"))
        .expect("tables dir")
        .count()
}

/// A compaction's input tables stay on disk after it (fjall forgets the versions naming them
/// only at a later compaction or memtable rotation); [`Tree::release_replaced_tables`], called
/// on another keyspace, deletes them, and the rows read the same.
#[test]
fn tables_a_compaction_replaced_are_deleted_once_released() {
    // Compaction only when asked (major), so that nothing else forgets old versions.
    let tree = tree_compacted_only_when_asked();
    let records = Tree::open(&tree.db, "records").expect("records");
    for round in 1..=3u32 {
        let value = round.to_be_bytes();
        tree.ingest_layer(&layer(&[(b"a", Some(&value)), (b"z", Some(&value))]))
            .expect("layer");
    }
    assert_eq!(table_files(&tree), 3);
    tree.keyspace.major_compact().expect("compaction");
    assert_eq!(tree.keyspace.table_count(), 1);
    assert_eq!(
        table_files(&tree),
        4,
        "the compaction's inputs are still on disk"
    );
    assert_eq!(tree.table_files().expect("count").beyond_set(), 3);

    assert!(records.release_replaced_tables().expect("release"));
    assert_eq!(table_files(&tree), 1, "the replaced tables are deleted");
    assert_eq!(tree.table_files().expect("count").beyond_set(), 0);
    assert_eq!(
        tree.get(b"z").expect("get"),
        Some(3u32.to_be_bytes().to_vec())
    );
    // Again with nothing replaced: nothing changes.
    records.release_replaced_tables().expect("release");
    assert_eq!(table_files(&tree), 1);
}
