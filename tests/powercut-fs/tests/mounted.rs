//! Mounted tests: the real binary on temporary directories, checked through real syscalls
//! (they need FUSE, i.e. root and `fusermount3`; CI runs as root). Each mount is a guard that
//! unmounts with `fusermount3 -u` when dropped, also when the test fails.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

const PAGE: usize = 4096;

struct Mounted {
    child: Option<Child>,
    mount: PathBuf,
    backing: PathBuf,
    dir: Option<tempfile::TempDir>,
}

impl Mounted {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        Self::start_in(dir)
    }

    /// Starts on `dir/backing` and `dir/mount` and waits for the `ready` line.
    fn start_in(dir: tempfile::TempDir) -> Self {
        let backing = dir.path().join("backing");
        let mount = dir.path().join("mount");
        fs::create_dir_all(&backing).expect("backing dir");
        fs::create_dir_all(&mount).expect("mount dir");
        let mut child = Command::new(env!("CARGO_BIN_EXE_powercut-fs"))
            .arg("--backing")
            .arg(&backing)
            .arg("--mount")
            .arg(&mount)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start powercut-fs");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read stdout");
        let mounted = Self {
            child: Some(child),
            mount,
            backing,
            dir: Some(dir),
        };
        assert_eq!(line, "ready\n", "powercut-fs did not get ready");
        mounted
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.mount.join(rel)
    }

    fn cut(&self, command: &str) {
        fs::write(self.path(".powercut"), command).expect("write .powercut");
    }

    fn status(&self) -> HashMap<String, u64> {
        let text = fs::read_to_string(self.path(".powercut")).expect("read .powercut");
        text.lines()
            .map(|l| {
                let (k, v) = l.split_once(' ').expect("key value");
                (k.to_string(), v.parse().expect("number"))
            })
            .collect()
    }

    fn sync_dir(&self, rel: &str) {
        File::open(self.path(rel))
            .expect("open dir")
            .sync_all()
            .expect("fsync dir");
    }

    /// Unmounts and waits for the process; returns the directory for a restart.
    fn stop(mut self) -> tempfile::TempDir {
        self.unmount();
        self.dir.take().expect("dir")
    }

    fn unmount(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let ok = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.mount)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("fusermount3")
                .arg("-uz")
                .arg(&self.mount)
                .status();
        }
        let status = child.wait().expect("wait for powercut-fs");
        assert!(
            status.success() || std::thread::panicking(),
            "powercut-fs exited with {status}"
        );
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        self.unmount();
    }
}

fn write_synced(path: &Path, data: &[u8]) {
    let mut f = File::create(path).expect("create");
    f.write_all(data).expect("write");
    f.sync_all().expect("fsync");
}

fn mounted_here(mount: &Path) -> bool {
    let mounts = fs::read_to_string("/proc/self/mounts").expect("/proc/self/mounts");
    let mount = fs::canonicalize(mount).unwrap_or_else(|_| mount.to_path_buf());
    mounts
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(mount.to_str().expect("utf-8 path")))
}

#[test]
fn fsynced_write_survives_a_cut() {
    let m = Mounted::start();
    write_synced(&m.path("f"), b"hello");
    m.sync_dir("");
    m.cut("cut");
    assert_eq!(fs::read(m.path("f")).expect("read"), b"hello");
    assert_eq!(m.status()["cuts"], 1);
}

#[test]
fn unsynced_writes_are_lost() {
    let m = Mounted::start();
    let data = vec![b'a'; 3 * PAGE];
    write_synced(&m.path("f"), &data);
    m.sync_dir("");
    let f = OpenOptions::new()
        .write(true)
        .open(m.path("f"))
        .expect("open");
    f.write_all_at(b"bbbb", 10).expect("overwrite");
    f.write_all_at(b"tail", 3 * PAGE as u64).expect("append");
    f.set_len(5 * PAGE as u64).expect("extend");
    let mut seen = data.clone();
    seen[10..14].copy_from_slice(b"bbbb");
    seen.extend_from_slice(b"tail");
    seen.resize(5 * PAGE, 0);
    assert_eq!(fs::read(m.path("f")).expect("read before the cut"), seen);
    let s = m.status();
    assert_eq!((s["pending_pages"], s["pending_files"]), (2, 1));
    m.cut("cut\n");
    assert_eq!(fs::read(m.path("f")).expect("read after the cut"), data);
    assert_eq!(
        fs::metadata(m.path("f")).expect("stat").len(),
        3 * PAGE as u64
    );
    assert_eq!(m.status()["pending_pages"], 0);
    // The fd from before the cut is gone.
    let err = f.write_all_at(b"x", 0).expect_err("write on a pre-cut fd");
    assert_eq!(err.raw_os_error(), Some(5), "EIO: {err}");
}

#[test]
fn fdatasync_persists_data_and_size() {
    let m = Mounted::start();
    write_synced(&m.path("f"), b"");
    m.sync_dir("");
    let mut f = OpenOptions::new()
        .append(true)
        .open(m.path("f"))
        .expect("open append");
    f.write_all(b"one,").expect("append");
    f.write_all(b"two").expect("append");
    f.sync_data().expect("fdatasync");
    f.write_all(b",three").expect("append unsynced");
    m.cut("cut");
    assert_eq!(fs::read(m.path("f")).expect("read"), b"one,two");
}

#[test]
fn created_and_fsynced_without_dir_sync_is_gone() {
    let m = Mounted::start();
    fs::create_dir(m.path("d")).expect("mkdir");
    m.sync_dir("");
    write_synced(&m.path("d/new"), b"data");
    assert!(m.path("d/new").exists());
    m.cut("cut");
    assert!(m.path("d").is_dir(), "the synced directory stays");
    assert!(!m.path("d/new").exists(), "its unsynced entry is gone");
}

#[test]
fn unlink_without_dir_sync_comes_back() {
    let m = Mounted::start();
    write_synced(&m.path("f"), b"durable");
    m.sync_dir("");
    fs::remove_file(m.path("f")).expect("unlink");
    m.cut("cut");
    assert_eq!(fs::read(m.path("f")).expect("read"), b"durable");
    fs::remove_file(m.path("f")).expect("unlink");
    m.sync_dir("");
    m.cut("cut");
    assert!(!m.path("f").exists());
}

#[test]
fn rename_without_dir_sync_reverts() {
    let m = Mounted::start();
    // The snapshot pattern: write a temporary name, fsync, rename into place.
    write_synced(&m.path("snap.tmp"), b"v1");
    m.sync_dir("");
    fs::rename(m.path("snap.tmp"), m.path("snap")).expect("rename");
    m.cut("cut");
    assert!(!m.path("snap").exists());
    assert_eq!(fs::read(m.path("snap.tmp")).expect("read"), b"v1");
    fs::rename(m.path("snap.tmp"), m.path("snap")).expect("rename");
    m.sync_dir("");
    m.cut("cut");
    assert!(!m.path("snap.tmp").exists());
    assert_eq!(fs::read(m.path("snap")).expect("read"), b"v1");
}

#[test]
fn cross_directory_rename_keeps_the_file() {
    let m = Mounted::start();
    fs::create_dir(m.path("a")).expect("mkdir");
    fs::create_dir(m.path("b")).expect("mkdir");
    m.sync_dir("");
    write_synced(&m.path("a/x"), b"x");
    m.sync_dir("a");
    fs::rename(m.path("a/x"), m.path("b/x")).expect("rename");
    m.sync_dir("a");
    assert_eq!(m.status()["deferred"], 1);
    m.cut("cut");
    assert_eq!(fs::read(m.path("a/x")).expect("old name kept"), b"x");
    assert!(!m.path("b/x").exists());
    fs::rename(m.path("a/x"), m.path("b/x")).expect("rename");
    m.sync_dir("a");
    m.sync_dir("b");
    m.cut("cut");
    assert!(!m.path("a/x").exists());
    assert_eq!(fs::read(m.path("b/x")).expect("new name"), b"x");
}

/// What a torn cut with `seed` keeps of one file's `pages` dirty pages (the only pending file).
fn torn_pattern(seed: u64, pages: usize) -> Vec<bool> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..pages).map(|_| rng.next_u32() & 1 == 1).collect()
}

#[test]
fn torn_cut_keeps_a_seeded_page_subset() {
    let m = Mounted::start();
    let pages = 16;
    write_synced(&m.path("f"), &vec![b'a'; pages * PAGE]);
    m.sync_dir("");
    for (round, (seed, byte)) in [(42u64, b'b'), (7, b'c')].into_iter().enumerate() {
        let before = fs::read(m.path("f")).expect("read");
        let f = OpenOptions::new()
            .write(true)
            .open(m.path("f"))
            .expect("open");
        // Unaligned: every page gets dirty, the first and last partly.
        f.write_all_at(&vec![byte; pages * PAGE - 200], 100)
            .expect("overwrite");
        let current = fs::read(m.path("f")).expect("read");
        m.cut(&format!("cut torn {seed}"));
        let after = fs::read(m.path("f")).expect("read after the torn cut");
        assert_eq!(after.len(), pages * PAGE);
        let keep = torn_pattern(seed, pages);
        assert!(
            keep.contains(&true) && keep.contains(&false),
            "seed {seed} tears nothing"
        );
        for (i, &kept) in keep.iter().enumerate() {
            let page = i * PAGE..(i + 1) * PAGE;
            let want = if kept {
                &current[page.clone()]
            } else {
                &before[page.clone()]
            };
            assert!(
                after[page] == *want,
                "round {round}: page {i} (kept: {kept})"
            );
        }
    }
}

#[test]
fn torn_append_grows_the_file_to_a_surviving_page() {
    let m = Mounted::start();
    write_synced(&m.path("wal"), &vec![b'a'; PAGE]);
    m.sync_dir("");
    let f = OpenOptions::new()
        .write(true)
        .open(m.path("wal"))
        .expect("open");
    f.write_all_at(&vec![b'b'; 4 * PAGE], PAGE as u64)
        .expect("append");
    let seed = 42;
    m.cut(&format!("cut torn {seed}"));
    let keep = torn_pattern(seed, 4);
    let last = keep.iter().rposition(|&k| k).map_or(0, |i| i + 1);
    let after = fs::read(m.path("wal")).expect("read");
    assert_eq!(after.len(), (1 + last) * PAGE);
    for (i, &kept) in keep.iter().take(last).enumerate() {
        let page = &after[(1 + i) * PAGE..(2 + i) * PAGE];
        let byte = if kept { b'b' } else { 0 };
        assert!(page.iter().all(|&x| x == byte), "page {i}");
    }
}

#[test]
fn keeps_working_after_a_cut() {
    let m = Mounted::start();
    write_synced(&m.path("lost"), b"x");
    m.cut("cut");
    assert!(!m.path("lost").exists());
    fs::create_dir_all(m.path("x/y")).expect("create_dir_all");
    write_synced(&m.path("x/y/f"), b"after");
    m.sync_dir("x/y");
    m.sync_dir("x");
    m.sync_dir("");
    m.cut("cut");
    assert_eq!(fs::read(m.path("x/y/f")).expect("read"), b"after");
    let s = m.status();
    assert_eq!(
        (s["cuts"], s["pending_pages"], s["pending_dirs"]),
        (2, 0, 0)
    );
}

#[test]
fn std_fs_usage() {
    let m = Mounted::start();
    fs::create_dir_all(m.path("db/blobs")).expect("create_dir_all");
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.path("db/conf"))
        .expect("open");
    f.write_all(b"0123456789").expect("write");
    f.seek(SeekFrom::Start(2)).expect("seek");
    let mut buf = [0u8; 3];
    f.read_exact(&mut buf).expect("read");
    assert_eq!(&buf, b"234");
    f.set_len(4).expect("set_len");
    assert_eq!(fs::metadata(m.path("db/conf")).expect("metadata").len(), 4);
    assert_eq!(fs::read(m.path("db/conf")).expect("read"), b"0123");
    fs::hard_link(m.path("db/conf"), m.path("db/conf.link")).expect("link");
    assert_eq!(
        fs::metadata(m.path("db/conf")).expect("metadata").nlink(),
        2
    );
    std::os::unix::fs::symlink("conf", m.path("db/conf.sym")).expect("symlink");
    assert_eq!(
        fs::read(m.path("db/conf.sym")).expect("through the symlink"),
        b"0123"
    );
    let mut names: Vec<String> = fs::read_dir(m.path("db"))
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    names.sort();
    assert_eq!(names, ["blobs", "conf", "conf.link", "conf.sym"]);
    let root: Vec<_> = fs::read_dir(&m.mount)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(root, ["db"], "the control file is hidden");
    fs::remove_file(m.path("db/conf.link")).expect("remove_file");
    fs::remove_dir(m.path("db/blobs")).expect("remove_dir");
    assert!(fs::remove_dir(m.path("db")).is_err(), "not empty");
    // flock (sled locks its db file this way): exclusive between two open file descriptions.
    let a = File::open(m.path("db/conf")).expect("open");
    let b = File::open(m.path("db/conf")).expect("open");
    a.try_lock().expect("first lock");
    assert!(b.try_lock().is_err(), "second lock must be refused");
    a.unlock().expect("unlock");
    b.try_lock().expect("lock after unlock");
    drop(f);
    let s = m.status();
    assert!(s["pending_dirs"] >= 2, "{s:?}");
}

#[test]
fn restart_finds_the_durable_state() {
    let m = Mounted::start();
    fs::create_dir(m.path("d")).expect("mkdir");
    write_synced(&m.path("d/kept"), b"kept");
    write_synced(&m.path("d/unnamed"), b"unnamed");
    m.sync_dir("d");
    // d itself is not synced in the root yet: sync it, then add an unsynced file.
    m.sync_dir("");
    write_synced(&m.path("d/later"), b"later");
    let f = OpenOptions::new()
        .write(true)
        .open(m.path("d/kept"))
        .expect("open");
    f.write_all_at(b"KEPT!", 0).expect("unsynced overwrite");
    drop(f);
    let backing = m.backing.clone();
    let dir = m.stop();
    assert!(backing.join("dirs/1").exists());
    let m = Mounted::start_in(dir);
    assert_eq!(fs::read(m.path("d/kept")).expect("read"), b"kept");
    assert_eq!(fs::read(m.path("d/unnamed")).expect("read"), b"unnamed");
    assert!(!m.path("d/later").exists());
    assert_eq!(m.status()["cuts"], 0);
}

#[test]
fn sigterm_unmounts_and_exits() {
    let mut m = Mounted::start();
    assert!(mounted_here(&m.mount));
    let mut child = m.child.take().expect("child");
    let kill = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .expect("kill");
    assert!(kill.success());
    let status = child.wait().expect("wait");
    assert!(status.success(), "exit status {status}");
    assert!(!mounted_here(&m.mount), "still mounted after SIGTERM");
}

#[test]
fn bad_commands_are_refused() {
    let m = Mounted::start();
    let err = fs::write(m.path(".powercut"), "explode").expect_err("bad command");
    assert_eq!(err.raw_os_error(), Some(22), "EINVAL: {err}");
    assert_eq!(m.status()["cuts"], 0);
}

#[test]
fn o_dsync_writes_are_durable() {
    use std::os::unix::fs::OpenOptionsExt;
    const O_DSYNC: i32 = 0o10_000;
    let m = Mounted::start();
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(O_DSYNC)
        .open(m.path("f"))
        .expect("open O_DSYNC");
    m.sync_dir("");
    f.write_all(b"dsync").expect("write");
    assert_eq!(m.status()["pending_pages"], 0);
    let mut plain = OpenOptions::new()
        .append(true)
        .open(m.path("f"))
        .expect("open");
    plain.write_all(b"+plain").expect("write");
    m.cut("cut");
    assert_eq!(fs::read(m.path("f")).expect("read"), b"dsync");
}
