use std::time::{Duration, Instant};

use super::*;

fn paths(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| name.to_string()).collect()
}

#[test]
fn the_chunks_a_purge_removes_are_those_no_longer_closed_after_it() {
    // (closed before, closed after, removed)
    let cases: [(&[&str], &[&str], &[&str]); 4] = [
        (&["a", "b", "c"], &["c"], &["a", "b"]),
        (&["a", "b"], &["a", "b"], &[]),
        (&["a", "b"], &["a", "b", "c"], &[]),
        (&[], &[], &[]),
    ];
    for (before, after, removed) in cases {
        assert_eq!(
            removed_by_purge(paths(before), &paths(after)),
            paths(removed),
            "{before:?} -> {after:?}"
        );
    }
}

#[test]
fn a_held_chunk_is_cut_once_its_name_is_gone_and_one_still_named_is_left_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (gone, named) = (dir.path().join("gone.wal"), dir.path().join("named.wal"));
    for path in [&gone, &named] {
        std::fs::write(path, vec![9u8; 1 << 20]).expect("write");
    }
    let held = hold(&[
        gone.display().to_string(),
        named.display().to_string(),
        dir.path().join("missing.wal").display().to_string(),
    ]);
    assert_eq!(held.len(), 2, "a missing chunk is not held");
    let observer = held[0].try_clone().expect("dup");
    // What the flush thread does: it unlinks the name, which frees nothing while held.
    std::fs::remove_file(&gone).expect("unlink");
    assert_eq!(release(held), 1, "one had lost its name");
    let deadline = Instant::now() + Duration::from_secs(20);
    while observer.metadata().expect("stat").len() != 0 {
        assert!(
            Instant::now() < deadline,
            "the unlinked chunk was never cut"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        std::fs::metadata(&named).expect("stat").len(),
        1 << 20,
        "a chunk whose removal did not happen stays whole"
    );
}
