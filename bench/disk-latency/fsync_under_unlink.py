#!/usr/bin/env python3
"""How long a WAL-like append + fdatasync takes while a large file is removed beside it.

Writes and syncs a SIZE_MIB file in DIR, then appends 221 bytes + fdatasync in a loop for 4 s
(what the Raft log's flush thread does per group commit); 1 s in, a second thread removes the
large file: at once (`unlink`), or unlinked and then cut down CHUNK_MIB at a time through its
open handle with a 5 ms pause between cuts (`cut`, what `statestore_storage::gradual_remove`
does). Prints the
removal's time and the appends' p50 / p99 / max in ms.

usage: fsync_under_unlink.py DIR SIZE_MIB {unlink,cut} [--chunk-mib 16]
"""
import argparse, os, threading, time

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir"); ap.add_argument("size_mib", type=int)
    ap.add_argument("mode", choices=["unlink", "cut"])
    ap.add_argument("--chunk-mib", type=int, default=16)
    a = ap.parse_args()
    big = os.path.join(a.dir, "big"); wal = os.path.join(a.dir, "wal")
    buf = os.urandom(1 << 20)
    fd = os.open(big, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for i in range(a.size_mib):
        os.write(fd, buf)
        if i % 64 == 63:
            os.fdatasync(fd)
    os.fsync(fd); os.close(fd)
    os.sync()
    removal = {}

    def remover():
        time.sleep(1.0)
        t0 = time.monotonic()
        if a.mode == "cut":
            fd = os.open(big, os.O_WRONLY)
            os.unlink(big)
            left = a.size_mib
            while left > 0:
                left = max(0, left - a.chunk_mib)
                os.ftruncate(fd, left << 20)
                time.sleep(0.005)
            os.close(fd)
        else:
            os.unlink(big)
        removal["ms"] = (time.monotonic() - t0) * 1000

    w = os.open(wal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    record = b"x" * 221
    th = threading.Thread(target=remover); th.start()
    lat = []; start = time.monotonic()
    while time.monotonic() - start < 4.0:
        t = time.monotonic(); os.write(w, record); os.fdatasync(w)
        lat.append((time.monotonic() - t) * 1000)
    th.join(); os.close(w); os.unlink(wal)
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]
    chunk = f" by {a.chunk_mib} MiB" if a.mode == "cut" else ""
    print(f"{a.mode}{chunk} of {a.size_mib} MiB: removal {removal['ms']:.0f} ms; "
          f"{len(lat)} appends p50 {q(.5):.2f} p99 {q(.99):.2f} max {lat[-1]:.2f} ms")

main()
