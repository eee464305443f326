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
fn held_chunks_are_released_to_the_reaper_only_once_their_name_is_gone() {
    // (The reaper's cut itself: `statestore_storage::gradual_remove`'s tests.)
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
    // What the flush thread does: it unlinks the name, which frees nothing while held.
    std::fs::remove_file(&gone).expect("unlink");
    assert_eq!(release(held), 1, "one had lost its name");
    assert_eq!(
        std::fs::metadata(&named).expect("stat").len(),
        1 << 20,
        "a chunk whose removal did not happen stays whole"
    );
}
