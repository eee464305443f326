use std::io::Write;
use std::time::{Duration, Instant};

use notify::Event;
use notify::event::{AccessKind, AccessMode, DataChange, EventKind, ModifyKind, RemoveKind};

use super::*;
use crate::write_behind::WRITE_BEHIND_BYTES;

/// How long a test waits for the watcher's thread to see what was written.
const SEEN_WITHIN: Duration = Duration::from_secs(20);

fn write_event(path: &Path) -> Event {
    Event::new(EventKind::Modify(ModifyKind::Data(DataChange::Any))).add_path(path.to_path_buf())
}

fn close_event(path: &Path) -> Event {
    Event::new(EventKind::Access(AccessKind::Close(AccessMode::Write))).add_path(path.to_path_buf())
}

fn remove_event(path: &Path) -> Event {
    Event::new(EventKind::Remove(RemoveKind::File)).add_path(path.to_path_buf())
}

/// Waits until `done` holds, or fails the test after [`SEEN_WITHIN`].
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + SEEN_WITHIN;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "not seen in {SEEN_WITHIN:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_followed_file_has_each_mebibyte_it_grows_by_started_once() -> std::io::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("table");
    let mut out = File::create(&path)?;
    let counters = Arc::new(Counters::default());
    let mut followed = Followed::new(counters.clone());
    let chunk = vec![7u8; 300 * 1024];
    let mut started = Vec::new();
    for _ in 0..10 {
        out.write_all(&chunk)?;
        followed.on_event(&write_event(&path));
        started.push(counters.started_bytes());
    }
    // Due at 1,200 KiB and 2,400 KiB written; the last 600 KiB wait for the writer's fsync.
    let (first, second) = (1_228_800, 2 * 1_228_800);
    assert_eq!(
        started,
        [0, 0, 0, first, first, first, first, second, second, second]
    );
    assert_eq!(counters.followed(), 1);
    assert_eq!(counters.failed(), 0);
    Ok(())
}

#[test]
fn a_file_is_forgotten_when_its_writer_closes_it_or_it_is_removed() -> std::io::Result<()> {
    let dir = tempfile::tempdir()?;
    let (closed, removed) = (dir.path().join("closed"), dir.path().join("removed"));
    std::fs::write(&closed, b"x")?;
    std::fs::write(&removed, b"y")?;
    let counters = Arc::new(Counters::default());
    let mut followed = Followed::new(counters.clone());
    followed.on_event(&write_event(&closed));
    followed.on_event(&write_event(&removed));
    assert_eq!(counters.followed(), 2);
    followed.on_event(&close_event(&closed));
    assert_eq!(counters.followed(), 1);
    std::fs::remove_file(&removed)?;
    followed.on_event(&remove_event(&removed));
    assert_eq!(counters.followed(), 0);
    // A write event for a file already gone opens nothing.
    followed.on_event(&write_event(&removed));
    assert_eq!(counters.followed(), 0);
    Ok(())
}

#[test]
fn at_most_the_cap_of_files_is_followed_and_the_least_recently_written_goes_first()
-> std::io::Result<()> {
    let dir = tempfile::tempdir()?;
    let counters = Arc::new(Counters::default());
    let mut followed = Followed::new(counters.clone());
    let paths: Vec<PathBuf> = (0..MAX_FOLLOWED_FILES + 1)
        .map(|i| dir.path().join(format!("t{i}")))
        .collect();
    for path in &paths {
        std::fs::write(path, b"row")?;
    }
    for path in &paths[..MAX_FOLLOWED_FILES] {
        followed.on_event(&write_event(path));
    }
    // The first file is written again: the second is now the least recent.
    followed.on_event(&write_event(&paths[0]));
    followed.on_event(&write_event(&paths[MAX_FOLLOWED_FILES]));
    assert_eq!(counters.followed(), MAX_FOLLOWED_FILES as u64);
    assert!(followed.files.contains_key(&paths[0]));
    assert!(!followed.files.contains_key(&paths[1]));
    assert!(followed.files.contains_key(&paths[MAX_FOLLOWED_FILES]));
    Ok(())
}

#[test]
fn a_file_replaced_by_a_shorter_one_is_followed_from_its_new_length() -> std::io::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("journal");
    let counters = Arc::new(Counters::default());
    let mut followed = Followed::new(counters.clone());
    let mebibyte = vec![1u8; WRITE_BEHIND_BYTES as usize];
    let mut out = File::create(&path)?;
    out.write_all(&mebibyte)?;
    out.write_all(&mebibyte)?;
    followed.on_event(&write_event(&path));
    assert_eq!(counters.started_bytes(), 2 * WRITE_BEHIND_BYTES);
    out.set_len(0)?;
    followed.on_event(&write_event(&path));
    // Cut to nothing, then a mebibyte: due again from the start.
    std::fs::write(&path, &mebibyte)?;
    followed.on_event(&write_event(&path));
    assert_eq!(counters.started_bytes(), 3 * WRITE_BEHIND_BYTES);
    Ok(())
}

#[test]
fn files_written_in_a_watched_tree_and_its_new_directories_are_started_early() -> std::io::Result<()>
{
    let dir = tempfile::tempdir()?;
    let watch = EarlyWriteback::watch(dir.path());
    assert!(watch.is_watching());
    // A directory made after the watch began (a keyspace installed from a snapshot).
    let tables = dir.path().join("keyspaces").join("7").join("tables");
    std::fs::create_dir_all(&tables)?;
    // The watcher learns of new directories from their events: a write into one made a moment
    // ago may come before the watch on it. Write until a first advice shows it is watched.
    let path = tables.join("1");
    let mut out = File::create(&path)?;
    let block = vec![3u8; 64 * 1024];
    let mut written = 0u64;
    let deadline = Instant::now() + SEEN_WITHIN;
    while watch.counters().started_bytes() == 0 {
        assert!(Instant::now() < deadline, "no writeback started early");
        out.write_all(&block)?;
        written += block.len() as u64;
        std::thread::sleep(Duration::from_millis(1));
    }
    // Four more mebibytes: at least three of them are started before the file is closed.
    let before = watch.counters().started_bytes();
    for _ in 0..64 {
        out.write_all(&block)?;
        written += block.len() as u64;
    }
    wait_until("three more mebibytes started", || {
        watch.counters().started_bytes() >= before + 3 * WRITE_BEHIND_BYTES
    });
    assert!(watch.counters().started_bytes() <= written);
    assert_eq!(watch.counters().followed(), 1);
    out.sync_all()?;
    drop(out);
    wait_until("the closed file forgotten", || {
        watch.counters().followed() == 0
    });
    assert_eq!(watch.counters().failed(), 0);
    Ok(())
}
