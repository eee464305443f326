//! Why the Raft log is a `raft-log` WAL and not a sled tree: durable appends, one after the
//! other, of entries the size statestore writes (a 1 KiB entry: one small SET; 64 KiB: a busy
//! batch), through
//!
//! - **sled-flush**: a sled tree, `Db::flush` after each append (what the log did before:
//!   `sync_file_range` only, no device-cache flush, blobs never synced: *not* durable);
//! - **sled-durable**: the same plus `fdatasync` of sled's data file and of every blob file
//!   (what it would take to make sled's log durable);
//! - **raft-log**: the WAL statestore uses, `flush(sync)` after each append (`fdatasync`).
//!
//! Prints wall µs per append (median, p99) and CPU µs per append of the whole process.
//! Run: `cargo bench -p statestore-raft --bench log_append` (takes about a minute).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{SyncSender, sync_channel};
use std::time::{Duration, Instant};

use raft_log::api::raft_log_writer::RaftLogWriter;

const APPENDS: usize = 1_000;

/// CPU time (user + system) of this process so far.
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // fields after the command: state is 0, utime is 11, stime is 12
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

struct Figures {
    median_us: f64,
    p99_us: f64,
    cpu_us: f64,
    extra_files: usize,
}

fn measure(mut append: impl FnMut(u64), files: impl Fn() -> usize) -> Figures {
    let mut latencies = Vec::with_capacity(APPENDS);
    let cpu_before = process_cpu();
    for index in 1..=APPENDS as u64 {
        let started = Instant::now();
        append(index);
        latencies.push(started.elapsed().as_secs_f64() * 1e6);
    }
    let cpu = process_cpu().saturating_sub(cpu_before);
    latencies.sort_by(|a, b| a.total_cmp(b));
    Figures {
        median_us: latencies[APPENDS / 2],
        p99_us: latencies[APPENDS * 99 / 100],
        cpu_us: cpu.as_secs_f64() * 1e6 / APPENDS as f64,
        extra_files: files(),
    }
}

fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| entries.count())
}

fn sled_log(dir: &Path, size: usize, durable: bool) -> Figures {
    let db = sled::Config::new()
        .path(dir)
        .cache_capacity(64 << 20)
        .flush_every_ms(None)
        .open()
        .expect("sled");
    let tree = db.open_tree("raft_log").expect("tree");
    let value = vec![7u8; size];
    measure(
        |index| {
            tree.insert(index.to_be_bytes(), value.as_slice())
                .expect("insert");
            db.flush().expect("flush");
            if durable {
                File::open(dir.join("db"))
                    .and_then(|f| f.sync_data())
                    .expect("fdatasync db");
                if let Ok(blobs) = std::fs::read_dir(dir.join("blobs")) {
                    for blob in blobs.flatten() {
                        if let Ok(f) = File::open(blob.path()) {
                            let _ = f.sync_data();
                        }
                    }
                }
            }
        },
        || count_files(&dir.join("blobs")),
    )
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Types;

impl raft_log::Types for Types {
    type LogId = (u64, u64);
    type LogPayload = Vec<u8>;
    type Vote = (u64, u64);
    type Callback = SyncSender<std::io::Result<()>>;
    type UserData = ();

    fn log_index(log_id: &(u64, u64)) -> u64 {
        log_id.1
    }

    fn payload_size(payload: &Vec<u8>) -> u64 {
        payload.len() as u64
    }
}

fn wal_log(dir: &Path, size: usize) -> Figures {
    let mut config = raft_log::Config::new(dir.to_string_lossy());
    config.wal.flush_batch_wait = Some(Duration::ZERO);
    let mut wal = raft_log::RaftLog::<Types>::open(Arc::new(config)).expect("wal");
    let value = vec![7u8; size];
    measure(
        |index| {
            wal.append([((1, index), value.clone())]).expect("append");
            let (tx, rx) = sync_channel(1);
            wal.flush(true, Some(tx)).expect("flush");
            rx.recv().expect("flushed").expect("fdatasync");
        },
        || count_files(dir),
    )
}

fn main() {
    println!(
        "| log | entry | appends | median µs | p99 µs | CPU µs/append | files beside the log |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|");
    for size in [1 << 10, 64 << 10] {
        let rows: [(&str, Figures); 3] = [
            ("sled-flush", {
                let dir = tempfile::tempdir().expect("tempdir");
                sled_log(dir.path(), size, false)
            }),
            ("sled-durable", {
                let dir = tempfile::tempdir().expect("tempdir");
                sled_log(dir.path(), size, true)
            }),
            ("raft-log", {
                let dir = tempfile::tempdir().expect("tempdir");
                wal_log(dir.path(), size)
            }),
        ];
        for (name, f) in rows {
            println!(
                "| {name} | {} KiB | {APPENDS} | {:.0} | {:.0} | {:.0} | {} |",
                size >> 10,
                f.median_us,
                f.p99_us,
                f.cpu_us,
                f.extra_files
            );
        }
    }
}
