//! Faults injected into one node process from outside, without hooks in the node: a skewed
//! wall clock (libfaketime), slow fsyncs (strace's syscall delay injection) and a full disk
//! (a file that fills the node's tmpfs). Network faults are in [`crate::netlab`].

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Where Debian's `libfaketime` package puts the preload library.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// Environment that starts a process with its wall clock `skew_s` seconds off (none for 0).
/// Only the real-time clock moves: monotonic time (timers, Raft's election timeouts) stays
/// true, as on a machine whose NTP is off.
pub fn skewed_clock_env(skew_s: i64) -> Vec<(String, String)> {
    if skew_s == 0 {
        return Vec::new();
    }
    assert!(
        Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} missing: install libfaketime (scripts/prereqs.sh does)"
    );
    vec![
        ("LD_PRELOAD".to_owned(), LIBFAKETIME.to_owned()),
        ("FAKETIME".to_owned(), format!("{skew_s:+}s")),
        ("FAKETIME_DONT_FAKE_MONOTONIC".to_owned(), "1".to_owned()),
        ("FAKETIME_DONT_RESET".to_owned(), "1".to_owned()),
    ]
}

/// `strace` attached to a process, delaying the return of every `fsync` and `fdatasync` of
/// all its threads. Attaching also stops every thread at each of its syscalls, so the whole
/// process slows down somewhat: a slow disk on a busy machine. Detaches when dropped.
pub struct SlowFsync {
    strace: Child,
}

impl SlowFsync {
    /// Attaches to `pid`; returns once strace reports the attachment.
    pub fn attach(pid: i32, delay: Duration) -> SlowFsync {
        let mut strace = Command::new("strace")
            .args(["-f", "-p", &pid.to_string(), "-o", "/dev/null"])
            .args(["-e", "trace=fsync,fdatasync"])
            .arg("-e")
            .arg(format!(
                "inject=fsync,fdatasync:delay_exit={}",
                delay.as_micros()
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start strace (scripts/prereqs.sh installs it)");
        let stderr = strace.stderr.take().expect("strace stderr");
        let (first_tx, first_rx) = std::sync::mpsc::channel();
        // Drain strace's messages for its whole life: a closed pipe would kill it mid-trace.
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stderr).lines();
            let _ = first_tx.send(lines.next().and_then(Result::ok).unwrap_or_default());
            lines.for_each(drop);
        });
        let first = first_rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_default();
        assert!(
            first.contains("attached"),
            "strace did not attach to {pid}: {first:?}"
        );
        SlowFsync { strace }
    }
}

impl Drop for SlowFsync {
    fn drop(&mut self) {
        // SIGINT makes strace detach cleanly (the tracee goes on untraced).
        crate::node::send_signal(self.strace.id() as i32, "INT");
        let _ = self.strace.wait();
    }
}

/// A file that fills the file system holding a node's data directory, until dropped.
pub struct DiskFill {
    path: PathBuf,
    /// Bytes written before the file system refused more.
    pub bytes: u64,
}

impl DiskFill {
    /// Writes zeros to `<dir>/FAULT-DISK-FILL` until the file system is full.
    pub fn fill(dir: &Path) -> DiskFill {
        let path = dir.join("FAULT-DISK-FILL");
        let mut file = std::fs::File::create(&path).expect("create the fill file");
        let chunk = vec![0u8; 1 << 20];
        let mut bytes = 0u64;
        loop {
            match file.write(&chunk) {
                Ok(0) => break,
                Ok(n) => bytes += n as u64,
                Err(err) if err.raw_os_error() == Some(28) => break, // ENOSPC
                Err(err) => panic!("filling {}: {err}", path.display()),
            }
        }
        // Also the last partial block: write single bytes until refused.
        while matches!(file.write(&[0]), Ok(1)) {
            bytes += 1;
        }
        DiskFill { path, bytes }
    }
}

impl Drop for DiskFill {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The preload really moves the wall clock of a child process (and 0 adds nothing).
    #[test]
    fn skewed_clock_env_moves_a_child_s_wall_clock() {
        assert!(skewed_clock_env(0).is_empty());
        let now = crate::now_ms() / 1_000;
        let output = Command::new("date")
            .arg("+%s")
            .envs(skewed_clock_env(3_600))
            .output()
            .expect("run date");
        let shown: u64 = String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse()
            .expect("date prints seconds");
        assert!(
            (now + 3_590..now + 3_700).contains(&shown),
            "date under a +1 h skew printed {shown}, real time is {now}"
        );
    }
}
