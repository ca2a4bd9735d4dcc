"""A broker-like writer for live-follow tests: appends records to a RocketMQ store the way a
broker's CommitLog does and dispatches their units at once (ReputMessageService), with its
next CommitLog file always created ahead (AllocateMappedFileService: a file of zeros).

    python -m tests.store.live_writer ROOT COUNT RATE FILE_SIZE [START]

Writes COUNT messages to topic Live queue 0 at RATE a second, after reading one line from
stdin when START is "wait" (so a reader can open the empty store first), or after message 50
when it is "pause50" (a reader opens in the middle of a file, its next one made ahead). START
"restart" opens the store another writer left (a broker restarting after a clean stop or a
kill -9): it finds the log's end from its records, writes the units any record lacks
(recovery's re-dispatch), deletes the files past the end (truncateDirtyFiles: the made-ahead
one), and goes on with the next message number. Prints "ready" once
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

from mqfs.store import CodecError, Message
from mqfs.store.format.codec import Encoder, decode, seal, stamp
from mqfs.store.format.flavor import flavor_named
from mqfs.store.format.layout import MAGIC_BLANK

UNITS = 300_000  # ConsumeQueue units a file (the broker default: a sparse file)


def _make(path: str, size: int) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
    os.ftruncate(fd, size)
    os.close(fd)


def _unit(cq_dir: str, i: int, offset: int, size: int) -> None:
    name = os.path.join(cq_dir, f"{i // UNITS * UNITS * 20:020d}")
    if not os.path.exists(name):
        _make(name, UNITS * 20)
    with open(name, "r+b") as cq:
        cq.seek(i % UNITS * 20)
        cq.write(struct.pack(">qiq", offset, size, 0))


def _recover(log_dir: str, cq_dir: str, file_size: int) -> tuple[int, int, int]:
    """(next message number, file start, position) where the records another writer left
    end, their units written; the files past the end deleted (the broker's recovery)."""
    names = sorted(int(n) for n in os.listdir(log_dir))
    count, base, pos = 0, 0, 0
    for start in names:
        with open(os.path.join(log_dir, f"{start:020d}"), "rb") as f:
            data = f.read()
        at = 0
        while at + 8 <= file_size:
            try:
                msg = decode(data, at, flavor_named("rocketmq"))
            except CodecError:
                break
            _unit(cq_dir, count, start + at, msg.total_size)
            count, at = count + 1, at + msg.total_size
        if at == 0 and start > 0:
            break  # zeros: a made-ahead file, or one never reached
        base, pos = start, at
    for start in names:
        if start > base:
            os.unlink(os.path.join(log_dir, f"{start:020d}"))
    return count, base, pos


def main(root: str, count: int, rate: float, file_size: int, start: str = "") -> None:
    flavor = flavor_named("rocketmq")
    encoder = Encoder(flavor, ("127.0.0.1", 10911), 4 << 20)
    log_dir = os.path.join(root, "commitlog")
    cq_dir = os.path.join(root, "consumequeue", "Live", "0")
    if start == "restart":
        first, base, pos = _recover(log_dir, cq_dir, file_size)
    else:
        os.makedirs(log_dir, 0o700)
        os.makedirs(cq_dir, 0o700)
        os.chmod(root, 0o700)
        for made in (0, file_size):  # the first file, and the next one made ahead
            _make(os.path.join(log_dir, f"{made:020d}"), file_size)
        _make(os.path.join(root, "checkpoint"), 4096)  # StoreCheckpoint: made at the broker's start
        first, base, pos = 0, 0, 0
    print("ready", flush=True)
    if start == "wait":
        sys.stdin.readline()
    log = os.open(os.path.join(log_dir, f"{base:020d}"), os.O_WRONLY)
    for i in range(first, first + count):
        rec, ts_pos = encoder.encode(Message.create("Live", b"live message %d" % i, keys=[f"k{i}"]))
        if pos + len(rec) + 8 > file_size:  # a BLANK ends the file; the next one is made ahead
            os.pwrite(log, struct.pack(">ii", file_size - pos, MAGIC_BLANK), pos)
            os.close(log)
            base, pos = base + file_size, 0
            for made in (base, base + file_size):  # after a restart, none was made ahead
                if not os.path.exists(os.path.join(log_dir, f"{made:020d}")):
                    _make(os.path.join(log_dir, f"{made:020d}"), file_size)
            log = os.open(os.path.join(log_dir, f"{base:020d}"), os.O_WRONLY)
        stamp(rec, ts_pos, i, base + pos, time.time_ns() // 1_000_000)
        if flavor.record_crc:
            seal(rec, flavor)
        os.pwrite(log, bytes(rec), pos)
        _unit(cq_dir, i, base + pos, len(rec))
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
