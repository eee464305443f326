//! Unit tests of gradual file removal.

use std::io::{Read, Write};

use super::*;

/// (file length, step) → the lengths it is cut to, in order.
const CUTS: &[(u64, u64, &[u64])] = &[
    (0, 16, &[]),
    (10, 16, &[0]),
    (16, 16, &[0]),
    (32, 16, &[16, 0]),
    (40, 16, &[24, 8, 0]),
    (3, 0, &[2, 1, 0]),
];

#[test]
fn a_file_is_cut_down_by_steps_to_nothing() {
    for &(len, step, expected) in CUTS {
        assert_eq!(
            cut_lengths(len, step).collect::<Vec<_>>(),
            expected,
            "len {len}, step {step}"
        );
    }
}

fn file_of(path: &Path, len: usize) {
    let mut file = File::create(path).expect("create");
    file.write_all(&vec![7u8; len]).expect("write");
}

#[test]
fn a_file_nobody_reads_loses_its_name_then_its_blocks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("old");
    file_of(&path, 100_000);
    let unlinked = unlink(&path).expect("unlink").expect("nobody reads it");
    assert!(!path.exists(), "the name is gone at once");
    let same = unlinked.file.try_clone().expect("dup");
    assert_eq!(same.metadata().expect("stat").len(), 100_000);
    unlinked
        .free_in_steps(30_000, Duration::ZERO)
        .expect("cut down");
    assert_eq!(same.metadata().expect("stat").len(), 0, "every block freed");
}

#[test]
fn a_file_being_read_is_only_unlinked_and_stays_whole_for_its_reader() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("sent");
    file_of(&path, 50_000);
    let mut reader = File::open(&path).expect("open");
    lock_for_reading(&reader);
    let other = File::open(&path).expect("open again");
    assert!(
        rustix::fs::flock(&other, FlockOperation::NonBlockingLockExclusive).is_err(),
        "the reader's shared lock took"
    );
    drop(other);
    assert!(
        unlink(&path).expect("unlink").is_none(),
        "a read file is not cut"
    );
    assert!(!path.exists());
    let mut read = Vec::new();
    reader.read_to_end(&mut read).expect("read");
    assert_eq!(read, vec![7u8; 50_000]);
}

#[test]
fn a_reader_that_closed_no_longer_keeps_the_file_from_being_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("was-sent");
    file_of(&path, 1_000);
    let reader = File::open(&path).expect("open");
    lock_for_reading(&reader);
    drop(reader);
    assert!(unlink(&path).expect("unlink").is_some());
}

#[test]
fn removing_a_missing_file_is_no_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("never");
    assert!(unlink(&path).expect("unlink").is_none());
    remove(&path).expect("remove");
    file_of(&path, 10);
    remove(&path).expect("remove");
    assert!(!path.exists());
}

#[test]
fn the_reaper_frees_what_it_was_handed_before_it_finishes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let reaper = Reaper::start().expect("reaper");
    let mut handles = Vec::new();
    for name in ["one", "two"] {
        let path = dir.path().join(name);
        file_of(&path, 3 * 1024 * 1024);
        let unlinked = unlink(&path).expect("unlink").expect("nobody reads it");
        handles.push(unlinked.file.try_clone().expect("dup"));
        assert!(reaper.free_later(unlinked), "queued");
    }
    let reaper_pending = reaper.pending.clone();
    reaper.finish();
    // Every file queued is counted off once freed, by the bytes it was counted with.
    assert_eq!(reaper_pending.files.load(Ordering::Relaxed), 0);
    assert_eq!(reaper_pending.bytes.load(Ordering::Relaxed), 0);
    for handle in handles {
        assert_eq!(handle.metadata().expect("stat").len(), 0, "freed");
    }
}

#[test]
fn a_handle_is_cut_only_once_its_file_has_no_name_left() {
    let dir = tempfile::tempdir().expect("tempdir");
    let reaper = Reaper::start().expect("reaper");
    let (named, unnamed) = (dir.path().join("still-named"), dir.path().join("unlinked"));
    file_of(&named, 100_000);
    file_of(&unnamed, 2 * 1024 * 1024);
    let open = |path: &Path| OpenOptions::new().write(true).open(path).expect("open");
    let (named_handle, unnamed_handle) = (open(&named), open(&unnamed));
    let watcher = unnamed_handle.try_clone().expect("dup");
    // What another remover (the WAL's flush thread) does while the handle is held.
    std::fs::remove_file(&unnamed).expect("unlink");
    assert!(
        !free_unlinked_by(Some(&reaper), named_handle),
        "still named"
    );
    assert!(
        free_unlinked_by(Some(&reaper), unnamed_handle),
        "no name left"
    );
    reaper.finish();
    assert_eq!(
        std::fs::metadata(&named).expect("stat").len(),
        100_000,
        "never cut"
    );
    assert_eq!(
        watcher.metadata().expect("stat").len(),
        0,
        "cut by the reaper"
    );
}
