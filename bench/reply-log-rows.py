#!/usr/bin/env python3
"""What a reply memory log file holds (storage/src/store/resident_log.rs): each frame's entry
number, whether it is a base, its bytes, and its rows and bytes per table (`r` remembered
replies, `q` reply-expiry index, which format 10 no longer writes).

usage: bench/reply-log-rows.py DATA_DIR/replies/replies-*.log
"""
import collections
import struct
import sys

TABLES = {ord("r"): "replies", ord("q"): "expiry index"}


def varint(buf, at):
    value, shift = 0, 0
    while True:
        byte = buf[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def rows(body):
    """Rows of an entry: `[version byte] ++ postcard(Vec<(bytes, Option<bytes>)>)`."""
    count, at = varint(body, 1)
    for _ in range(count):
        length, at = varint(body, at)
        key = body[at:at + length]
        at += length
        present = body[at]
        at += 1
        value = b""
        if present:
            length, at = varint(body, at)
            value = body[at:at + length]
            at += length
        yield key, value, present


def main(path):
    data = open(path, "rb").read()
    if data[:8] != b"SSREPL01":
        sys.exit(f"{path}: not a reply memory log")
    at = 8
    while at + 4 <= len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        if at + 4 + length + 8 > len(data):
            break  # a torn last frame
        body = data[at + 4:at + 4 + length]
        at += 4 + length + 8
        seq, base = struct.unpack(">Q", body[:8])[0], body[8]
        count, size = collections.Counter(), collections.Counter()
        removed = 0
        for key, value, present in rows(body[9:]):
            table = TABLES.get(key[0], f"table {key[0]}")
            count[table] += 1
            size[table] += len(key) + len(value)
            removed += not present
        tables = ", ".join(f"{t} {count[t]} rows {size[t] / 1e6:.1f} MB" for t in sorted(count))
        kind = "base" if base else f"delta ({removed} removals)"
        print(f"entry {seq}: {kind}, {length / 1e6:.1f} MB: {tables}")


if __name__ == "__main__":
    for name in sys.argv[1:] or sys.exit(__doc__):
        main(name)
