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
fn a_handle_whose_file_still_has_a_name_is_only_closed_never_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("still-named");
    file_of(&path, 100_000);
    let handle = OpenOptions::new().write(true).open(&path).expect("open");
    free_unlinked(handle);
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), 100_000);
}

#[test]
fn a_handle_whose_name_is_gone_is_cut_by_the_process_reaper() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("unlinked-by-another");
    file_of(&path, 2 * 1024 * 1024);
    let handle = OpenOptions::new().write(true).open(&path).expect("open");
    let watcher = handle.try_clone().expect("dup");
    std::fs::remove_file(&path).expect("unlink");
    free_unlinked(handle);
    // The process's reaper runs on its own thread: wait (bounded) for its cut.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while watcher.metadata().expect("stat").len() != 0 {
        assert!(std::time::Instant::now() < deadline, "never cut");
        std::thread::sleep(Duration::from_millis(5));
    }
}
