#!/usr/bin/env python3
"""Latency benchmark (`scripts/bench latency [--quick]`): how long small requests through one
mount (stat of a message not looked up before, cat of a small message, ls of a small queue)
take while another process writes 4 MiB messages (synced, each rolling a CommitLog file) and
a third lists a key with thousands of hits, a tag and an `at/` time; the baseline is the same
probes on the same mount with nothing else running, in the same run, and each figure is
printed as a ratio to it. A loop held by the key listing, a 4 MiB copy or a synced put would
hold every probe that whole time (worst 0.7-1.0 s before the handlers moved to threads).
tests/fusefs/test_mount_latency.py checks the same load for correctness. A timing report, not a
test: it never fails on speed."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from mqfs.store import Message, MessageStore  # noqa: E402
from tests.fusefs.helpers import SMALL, mounted, mqfs  # noqa: E402

BIG = 4 << 20


def probe(mnt: str, offset: int) -> float:
    """Seconds for the slowest of: stat of a message not looked up before, cat of a small
    message, ls of a small queue."""
    t0 = time.perf_counter()
    os.stat(f"{mnt}/topics/small/0/{offset}")
    t1 = time.perf_counter()
    with open(f"{mnt}/topics/small/1/3", "rb") as f:
        f.read()
    t2 = time.perf_counter()
    os.listdir(f"{mnt}/topics/small/1")
    t3 = time.perf_counter()
    return max(t1 - t0, t2 - t1, t3 - t2)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer hits and big writes")
    a = p.parse_args()
    hot, big_count, rounds = (3000, 4, 30) if a.quick else (30000, 16, 60)
    work = tempfile.mkdtemp(prefix="mqfs-bench-latency-")
    store, mnt, stop = f"{work}/store", f"{work}/mnt", f"{work}/stop"
    mqfs("init", store, *SMALL)
    with MessageStore(store) as s:
        s.create_topic("small", 2)
        s.create_topic("big", 1)
        clock = [time.time_ns() // 1_000_000 - hot * 10]
        s.clock = lambda: clock[0]
        for lo in range(0, hot, 100):  # a batch shares one store time: a second apart
            clock[0] += 1000
            s.put_batch([Message.create("small", b"hot %d" % i, queue_id=0,
                                        keys=["hot", f"id{i}"], tags="T" if i % 2 else None)
                         for i in range(lo, lo + 100)])
        s.put_batch([Message.create("small", b"small %d" % i, queue_id=1) for i in range(20)])
        middle = s.get("small", 0, hot // 2).store_timestamp
    with mounted(store, mnt, "-o", f"flush=sync,keys_max={hot}"):
        q = f"{mnt}/topics/small/0"
        alone = [probe(mnt, i) for i in range(rounds)]
        writer = subprocess.Popen(
            ["bash", "-c", f"for i in $(seq {big_count}); do head -c {BIG} /dev/zero "
                           f"> {mnt}/topics/big/0/append || exit 1; done"])
        searcher = subprocess.Popen(
            ["bash", "-c", f"until [ -e {stop} ]; do ls {mnt}/keys/hot | wc -l > /dev/null; "
                           f"ls {q}/tags/T > /dev/null; readlink {q}/at/{middle} > /dev/null; done"])
        loaded: list[float] = []
        try:
            while writer.poll() is None or len(loaded) < rounds:
                loaded.append(probe(mnt, rounds + len(loaded)))
        finally:
            open(stop, "w").close()
            searcher.wait()
            writer.wait()
    subprocess.run(["rm", "-rf", work])

    def p99(xs: list[float]) -> float:
        return sorted(xs)[len(xs) * 99 // 100]

    print(f"latency of small requests, {len(loaded)} rounds under load, {len(alone)} alone:")
    for name, f in (("worst", max), ("p99", p99)):
        print(f"  {name}: {f(loaded) * 1000:.1f} ms under load, {f(alone) * 1000:.1f} ms alone "
              f"(x{f(loaded) / f(alone):.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
