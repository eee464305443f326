//! Watching a node's durability syscalls from the outside: `strace` attached to a running
//! `statestore` process records every `fsync`, `fdatasync` and `sync_file_range` with its file,
//! start time and duration; [`parse_line`] turns strace's output into [`SyncCall`]s.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// One traced durability syscall.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncCall {
    /// Thread that made it.
    pub tid: u32,
    /// `fsync`, `fdatasync` or `sync_file_range`.
    pub syscall: String,
    /// The file, as strace's `-y` decodes the descriptor.
    pub path: String,
    /// Wall-clock start, µs since the epoch.
    pub start_us: u64,
    /// Time inside the syscall, µs.
    pub duration_us: u64,
    /// Return value (0: success).
    pub result: i64,
}

impl SyncCall {
    /// When the syscall returned, µs since the epoch.
    pub fn end_us(&self) -> u64 {
        self.start_us + self.duration_us
    }
}

/// A started call waiting for its `resumed` line.
#[derive(Debug, Clone)]
struct Unfinished {
    syscall: String,
    path: String,
    start_us: u64,
}

/// Parses the lines strace (`-f -ttt -T -y`) wrote into calls, pairing `<unfinished ...>` with
/// `<... resumed>` lines of the same thread.
pub fn parse(text: &str) -> Vec<SyncCall> {
    let mut open: std::collections::HashMap<u32, Unfinished> = Default::default();
    let mut calls = Vec::new();
    for line in text.lines() {
        if let Some(call) = parse_line(line, &mut open) {
            calls.push(call);
        }
    }
    calls
}

fn seconds_to_us(text: &str) -> Option<u64> {
    let (secs, frac) = text.split_once('.')?;
    let micros: String = frac.chars().chain("000000".chars()).take(6).collect();
    Some(secs.parse::<u64>().ok()? * 1_000_000 + micros.parse::<u64>().ok()?)
}

fn duration_us(rest: &str) -> Option<u64> {
    let inner = rest.rsplit_once('<')?.1.strip_suffix('>')?;
    seconds_to_us(inner)
}

fn result(rest: &str) -> Option<i64> {
    let after = rest.rsplit_once(") = ")?.1;
    after.split_whitespace().next()?.parse().ok()
}

/// One line: a complete call, or the second half of an interrupted one (the first half is
/// kept in `open`).
fn parse_line(
    line: &str,
    open: &mut std::collections::HashMap<u32, Unfinished>,
) -> Option<SyncCall> {
    // strace pads the thread id to the width of the widest one: fields are split by runs of
    // spaces.
    let line = line.trim_start();
    let (tid, line) = line.split_once(' ')?;
    let tid: u32 = tid.parse().ok()?;
    let (time, rest) = line.trim_start().split_once(' ')?;
    let start_us = seconds_to_us(time)?;
    let rest = rest.trim();
    if let Some(resumed) = rest.strip_prefix("<... ") {
        let started = open.remove(&tid)?;
        let syscall = resumed.split_whitespace().next()?;
        if syscall != started.syscall {
            return None;
        }
        return Some(SyncCall {
            tid,
            syscall: started.syscall,
            path: started.path,
            start_us: started.start_us,
            duration_us: duration_us(rest)?,
            result: result(rest)?,
        });
    }
    let (syscall, args) = rest.split_once('(')?;
    let path = args.split_once('<')?.1.split_once('>')?.0.to_owned();
    if rest.ends_with("<unfinished ...>") {
        open.insert(
            tid,
            Unfinished {
                syscall: syscall.to_owned(),
                path,
                start_us,
            },
        );
        return None;
    }
    Some(SyncCall {
        tid,
        syscall: syscall.to_owned(),
        path,
        start_us,
        duration_us: duration_us(rest)?,
        result: result(rest)?,
    })
}

/// `strace` attached to a running process.
pub struct SyscallTrace {
    strace: Child,
    output: PathBuf,
    _dir: tempfile::TempDir,
}

impl SyscallTrace {
    /// Attaches to every thread of `pid` (and threads it starts later); returns once strace
    /// reports the process attached.
    pub fn attach(pid: u32) -> SyscallTrace {
        let dir = tempfile::tempdir().expect("temp dir");
        let output = dir.path().join("strace.txt");
        let mut strace = Command::new("strace")
            .args([
                "-f",
                "-ttt",
                "-T",
                "-y",
                "-e",
                "trace=fsync,fdatasync,sync_file_range",
                "-o",
            ])
            .arg(&output)
            .arg("-p")
            .arg(pid.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("strace is installed (scripts/prereqs.sh installs it)");
        let stderr = strace.stderr.take().expect("strace stderr");
        // strace reports "Process <pid> attached with <n> threads" once all are traced.
        let mut lines = BufReader::new(stderr).lines();
        loop {
            match lines.next() {
                Some(Ok(line)) if line.contains(&format!("Process {pid} attached")) => break,
                Some(Ok(_)) => {}
                _ => panic!("strace stopped before attaching to {pid}"),
            }
        }
        // Keep draining strace's stderr so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        SyscallTrace {
            strace,
            output,
            _dir: dir,
        }
    }

    /// Detaches (the traced process keeps running) and returns what was recorded.
    pub fn stop(mut self) -> Vec<SyncCall> {
        let pid = self.strace.id() as i32;
        assert!(crate::node::send_signal(pid, "INT"), "signalling strace");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while matches!(self.strace.try_wait(), Ok(None)) {
            assert!(
                std::time::Instant::now() < deadline,
                "strace did not detach"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let text = std::fs::read_to_string(&self.output).expect("strace output");
        parse(&text)
    }
}

impl Drop for SyscallTrace {
    fn drop(&mut self) {
        let _ = self.strace.kill();
        let _ = self.strace.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = include_str!("../testdata/strace_sample.txt");

    #[test]
    fn complete_and_interrupted_calls_are_parsed_with_their_files() {
        let calls = parse(TRACE);
        let expected = [
            (
                "fdatasync",
                "/d/raft-log/r-00_000.wal",
                1_700_000_000_100_000,
                345,
                0,
            ),
            (
                "sync_file_range",
                "/d/state/db",
                1_700_000_000_200_000,
                12,
                0,
            ),
            (
                "fdatasync",
                "/d/raft-log/r-00_000.wal",
                1_700_000_000_300_000,
                1_500,
                0,
            ),
            ("fsync", "/d/snapshots", 1_700_000_000_400_000, 20, -1),
        ];
        assert_eq!(calls.len(), expected.len(), "{calls:?}");
        for (call, (syscall, path, start, duration, result)) in calls.iter().zip(expected) {
            assert_eq!(call.syscall, syscall);
            assert_eq!(call.path, path);
            assert_eq!(call.start_us, start);
            assert_eq!(call.duration_us, duration);
            assert_eq!(call.result, result);
        }
        assert_eq!(calls[2].end_us(), 1_700_000_000_301_500);
    }
}
