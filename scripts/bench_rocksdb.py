"""A broker's RocksDB ConsumeQueue (`scripts/bench scale --only rocksdb`): the read-only open of
a store whose consumequeue/ is a RocksDB database in RocketMQ's layout (its units copied from
an mqfs store's ConsumeQueue files), against the open of that mqfs store, and against the
CommitLog walk an open makes where rocksdict is missing; then a listing of one queue's
units from each. Each open runs in its own process: CPU seconds and peak RSS."""

from __future__ import annotations

import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import time

import numpy as np

from mqfs.store import Message, MessageStore, StoreConfig

QUEUES = 4
UNIT = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8")])


def fill(root: str, flavor: str, messages: int) -> None:
    with MessageStore(root, StoreConfig(flavor=flavor)) as s:
        s.create_topic("T", QUEUES)
        done = 0
        while done < messages:
            k = min(20_000, messages - done)
            s.put_batch([Message.create("T", b"x" * 100, queue_id=(done + i) % QUEUES) for i in range(k)])
            done += k


def as_rocksdb(src: str, dst: str) -> None:
    """`src` copied to `dst` with consumequeue/ made a RocksDB database as RocketMQ's
    RocksDBConsumeQueueTable and OffsetTable key it (docs/format.md)."""
    from rocksdict import Options, Rdict, WriteBatch

    shutil.copytree(src, dst, symlinks=True)
    cq = os.path.join(dst, "consumequeue")
    units = {}
    for q in range(QUEUES):
        d = os.path.join(cq, "T", str(q))
        data = b"".join(open(os.path.join(d, f), "rb").read() for f in sorted(os.listdir(d)))
        u = np.frombuffer(data, dtype=UNIT)
        units[q] = u[u["size"] > 0]
    shutil.rmtree(cq)
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    db = Rdict(cq, options=opts, column_families={"offset": Options(raw_mode=True)})
    offsets = db.get_column_family("offset")
    end = 0
    for q, u in units.items():
        prefix = struct.pack(">i", 1) + b"\x01T\x01" + struct.pack(">i", q) + b"\x01"
        batch = WriteBatch(raw_mode=True)
        for i, (phy, size, tags) in enumerate(u.tolist()):
            batch.put(prefix + struct.pack(">q", i), struct.pack(">qiqq", phy, size, tags, 0))
            if i % 50_000 == 49_999:
                db.write(batch)
                batch = WriteBatch(raw_mode=True)
        db.write(batch)
        for kind, (phy, at) in ((b"min", (int(u[0]["offset"]), 0)), (b"max", (int(u[-1]["offset"]), len(u) - 1))):
            offsets[struct.pack(">i", 1) + b"\x01T\x01" + kind + b"\x01" + struct.pack(">i", q)] = \
                struct.pack(">qq", phy, at)
        end = max(end, int(u[-1]["offset"]) + int(u[-1]["size"]))
    offsets[struct.pack(">i", 16) + b"\x01CHECKPOINT_TOPIC\x01max\x01" + struct.pack(">i", 0)] = \
        struct.pack(">q", end)
    db.flush()
    del offsets
    db.close()


def measure(root: str, walk: bool) -> dict:
    """In a child process: the open's CPU, a listing of queue 0's units, the peak RSS."""
    out = subprocess.run([sys.executable, __file__, root, "walk" if walk else "read"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def bench_rocksdb(work: str, flavor: str, messages: int) -> list[str]:
    cq, rocks = os.path.join(work, "rocksdb-cq"), os.path.join(work, "rocksdb-db")
    shutil.rmtree(cq, ignore_errors=True)
    shutil.rmtree(rocks, ignore_errors=True)
    fill(cq, flavor, messages)
    as_rocksdb(cq, rocks)
    base, read, walk = measure(cq, False), measure(rocks, False), measure(rocks, True)
    n = f"{messages / 1e6:g} M messages"
    rows = []
    for what, got in (("from RocksDB", read), ("walking the CommitLog (no rocksdict)", walk)):
        rows.append(f"{f'RocksDB CQ open, {what}, {n}, vs ConsumeQueue files':<78} "
                    f"{got['open']:7.2f} s CPU vs {base['open']:6.2f} s ({got['open'] / base['open']:5.2f}x), "
                    f"peak RSS {got['rss']} vs {base['rss']} MiB")
    rows.append(f"{f'listing {messages // QUEUES} units of a queue, from RocksDB vs ConsumeQueue files':<78} "
                f"{read['list']:7.2f} s CPU vs {base['list']:6.2f} s ({read['list'] / base['list']:5.2f}x)")
    shutil.rmtree(cq, ignore_errors=True)
    shutil.rmtree(rocks, ignore_errors=True)
    return rows


def _child(root: str, mode: str) -> None:
    if mode == "walk":
        sys.modules["rocksdict"] = None  # type: ignore[assignment]
    t = time.process_time()
    with MessageStore(root, StoreConfig(read_only=True), create=False) as s:
        opened = time.process_time() - t
        t = time.process_time()
        s.list_entries("T", 0, 0, 1 << 40)
        listed = time.process_time() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(json.dumps({"open": opened, "list": listed, "rss": rss}))


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])
