#!/usr/bin/env python3
"""How long a WAL-like append + fdatasync takes on this disk while other writers fill it.

Measures N appends of 221 bytes, each followed by fdatasync (what the Raft log's flush thread
does per group commit), while a background process writes buffered data at RATE MiB/s into
another file of the same file system and makes it durable every SYNC_MS (what sled's flusher
and the memtable's flush thread do). Prints p50 / p99 / p99.9 / max in ms.

usage: fsync_under_writes.py DIR RATE_MIB_S [--n 3000] [--sync-ms 1000] [--idle] [--trickle]
  --idle     runs the background writer in the idle I/O class (ionice -c3)
  --trickle  starts the writeback of each MiB as soon as it is written
             (sync_file_range(SYNC_FILE_RANGE_WRITE), RocksDB's bytes_per_sync), so the
             periodic fdatasync finds little left to write
  --trickle-fadvise  the same with posix_fadvise(POSIX_FADV_DONTNEED), which on Linux also
             starts the writeback of the range's dirty pages (and drops its clean ones)
"""
import argparse, ctypes, os, subprocess, sys, time

SYNC_FILE_RANGE_WRITE = 2
libc = ctypes.CDLL("libc.so.6", use_errno=True)
libc.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]

def background(path, rate, sync_ms, trickle, fadvise):
    chunk = os.urandom(1 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start = time.monotonic(); written = 0; last_sync = start
    while True:
        now = time.monotonic()
        due = (now - start) * rate
        if written < due:
            offset = os.lseek(fd, 0, os.SEEK_CUR)
            os.write(fd, chunk); written += 1
            if trickle and libc.sync_file_range(fd, offset, len(chunk), SYNC_FILE_RANGE_WRITE) != 0:
                raise OSError(ctypes.get_errno(), "sync_file_range")
            if fadvise:
                os.posix_fadvise(fd, offset, len(chunk), os.POSIX_FADV_DONTNEED)
            if written % 1024 == 0:  # keep the file at most 1 GiB
                os.lseek(fd, 0, 0)
        else:
            time.sleep(0.005)
        if now - last_sync >= sync_ms / 1000:
            os.fdatasync(fd); last_sync = now

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir"); ap.add_argument("rate", type=float)
    ap.add_argument("--n", type=int, default=3000); ap.add_argument("--sync-ms", type=int, default=1000)
    ap.add_argument("--idle", action="store_true"); ap.add_argument("--trickle", action="store_true")
    ap.add_argument("--trickle-fadvise", action="store_true")
    ap.add_argument("--bg", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    bg_path = os.path.join(a.dir, "bg.data")
    if a.bg:
        background(bg_path, a.rate, a.sync_ms, a.trickle, a.trickle_fadvise); return
    proc = None
    if a.rate > 0:
        cmd = [sys.executable, __file__, a.dir, str(a.rate), "--sync-ms", str(a.sync_ms), "--bg"]
        if a.trickle:
            cmd.append("--trickle")
        if a.trickle_fadvise:
            cmd.append("--trickle-fadvise")
        if a.idle:
            cmd = ["ionice", "-c3"] + cmd
        proc = subprocess.Popen(cmd); time.sleep(3)
    path = os.path.join(a.dir, "wal.data")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    record = b"x" * 221; lat = []
    try:
        for _ in range(a.n):
            t = time.perf_counter(); os.write(fd, record); os.fdatasync(fd)
            lat.append((time.perf_counter() - t) * 1e3)
    finally:
        os.close(fd); os.unlink(path)
        if proc: proc.kill(); proc.wait()
        if os.path.exists(bg_path): os.unlink(bg_path)
    lat.sort(); q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]
    print(f"background {a.rate:g} MiB/s sync {a.sync_ms} ms{' idle' if a.idle else ''}{' trickle' if a.trickle else ''}{' trickle-fadvise' if a.trickle_fadvise else ''}: "
          f"p50 {q(.5):.3f} p99 {q(.99):.3f} p99.9 {q(.999):.3f} max {lat[-1]:.3f} ms")

if __name__ == "__main__":
    main()
