"""A broker-like writer for live-follow tests: appends records to a RocketMQ store the way a
broker's CommitLog does and dispatches their units at once (ReputMessageService), with its
next CommitLog file always created ahead (AllocateMappedFileService: a file of zeros).

    python -m tests.store.live_writer ROOT COUNT RATE FILE_SIZE [START]

Writes COUNT messages to topic Live queue 0 at RATE a second, after reading one line from
stdin when START is "wait" (so a reader can open the empty store first), or after message 50
when it is "pause50" (a reader opens in the middle of a file, its next one made ahead). Prints "ready" once
the files exist and "acked N END" after message N's record (ending at CommitLog offset END)
and unit are in the files. Records
use the codec (rocketmq flavor, no whole-record checksum: a broker's defaults); a store
without mqfs.json, as a broker leaves it.
"""

from __future__ import annotations

import os
import struct
import sys
import time

from mqfs.store import Message
from mqfs.store.format.codec import Encoder, seal, stamp
from mqfs.store.format.flavor import flavor_named
from mqfs.store.format.layout import MAGIC_BLANK

UNITS = 300_000  # ConsumeQueue units a file (the broker default: a sparse file)


def _make(path: str, size: int) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
    os.ftruncate(fd, size)
    os.close(fd)


def main(root: str, count: int, rate: float, file_size: int, start: str = "") -> None:
    flavor = flavor_named("rocketmq")
    encoder = Encoder(flavor, ("127.0.0.1", 10911), 4 << 20)
    log_dir = os.path.join(root, "commitlog")
    cq_dir = os.path.join(root, "consumequeue", "Live", "0")
    os.makedirs(log_dir, 0o700)
    os.makedirs(cq_dir, 0o700)
    os.chmod(root, 0o700)
    for base in (0, file_size):  # the first file, and the next one made ahead
        _make(os.path.join(log_dir, f"{base:020d}"), file_size)
    _make(os.path.join(root, "checkpoint"), 4096)  # StoreCheckpoint: made at the broker's start
    print("ready", flush=True)
    if start == "wait":
        sys.stdin.readline()
    base, pos = 0, 0
    log = os.open(os.path.join(log_dir, f"{base:020d}"), os.O_WRONLY)
    for i in range(count):
        rec, ts_pos = encoder.encode(Message.create("Live", b"live message %d" % i, keys=[f"k{i}"]))
        if pos + len(rec) + 8 > file_size:  # a BLANK ends the file; the next one was made ahead
            os.pwrite(log, struct.pack(">ii", file_size - pos, MAGIC_BLANK), pos)
            os.close(log)
            base, pos = base + file_size, 0
            log = os.open(os.path.join(log_dir, f"{base:020d}"), os.O_WRONLY)
            _make(os.path.join(log_dir, f"{base + file_size:020d}"), file_size)
        stamp(rec, ts_pos, i, base + pos, time.time_ns() // 1_000_000)
        if flavor.record_crc:
            seal(rec, flavor)
        os.pwrite(log, bytes(rec), pos)
        name = os.path.join(cq_dir, f"{i // UNITS * UNITS * 20:020d}")
        if i % UNITS == 0:
            _make(name, UNITS * 20)
        with open(name, "r+b") as cq:
            cq.seek(i % UNITS * 20)
            cq.write(struct.pack(">qiq", base + pos, len(rec), 0))
        pos += len(rec)
        if i % 100 == 0:  # the flush services move the checkpoint's times now and then
            with open(os.path.join(root, "checkpoint"), "r+b") as f:
                now = time.time_ns() // 1_000_000
                f.write(struct.pack(">qqqqq", now, now, now, 0, base + pos))
        print(f"acked {i} {base + pos}", flush=True)
        if start == "pause50" and i == 50:
            sys.stdin.readline()
        time.sleep(1 / rate)
    os.close(log)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), *sys.argv[5:])
