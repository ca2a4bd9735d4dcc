"""The event loop never waits for the disk: `stat`, `cat` and `ls` of small things stay quick
while another process writes 4 MiB messages (synced, rolling CommitLog files) and a third
lists a key with thousands of hits, a tag and an `at/` time, all through one mount."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from mqfs.store import Message, MessageStore
from tests.fs_helpers import SMALL, mounted, mqfs, needs_fuse
from tests.waits import LIMIT

pytestmark = [pytest.mark.mount, needs_fuse]

HOT = 30000  # messages with the key `hot` (and every other one with tag T): a key listing
# reads them all, which on the loop would hold every other request for ~0.5 s
BIG = 4 << 20
BIG_COUNT = 16  # 4 MiB bodies into 8 MiB CommitLog files: each one rolls a new file
ROUNDS = 60  # probe rounds without the load


def probe(mnt: str, offset: int) -> dict[str, float]:
    """Seconds for: stat of a message not looked up before (a lookup the daemon answers),
    cat of a small message, ls of a small queue."""
    took = {}
    t0 = time.perf_counter()
    os.stat(f"{mnt}/topics/small/0/{offset}")
    t1 = time.perf_counter()
    with open(f"{mnt}/topics/small/1/3", "rb") as f:
        assert f.read() == b"small 3"
    t2 = time.perf_counter()
    assert len(os.listdir(f"{mnt}/topics/small/1")) == 20 + 6
    t3 = time.perf_counter()
    took["stat"], took["cat"], took["ls"] = t1 - t0, t2 - t1, t3 - t2
    return took


def worst(samples: list[dict[str, float]]) -> float:
    return max(max(s.values()) for s in samples)


def test_small_requests_stay_quick_while_big_writes_and_searches_run(tmp_path):
    store, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    mqfs("init", store, *SMALL)
    with MessageStore(store) as s:
        s.create_topic("small", 2)
        s.create_topic("big", 1)
        clock = [time.time_ns() // 1_000_000 - HOT * 10]
        s.clock = lambda: clock[0]
        for lo in range(0, HOT, 100):  # a batch shares one store time: a second apart
            clock[0] += 1000
            s.put_batch([Message.create("small", b"hot %d" % i, queue_id=0,
                                        keys=["hot", f"id{i}"], tags="T" if i % 2 else None)
                         for i in range(lo, lo + 100)])
        s.put_batch([Message.create("small", b"small %d" % i, queue_id=1) for i in range(20)])
        middle = s.get("small", 0, HOT // 2).store_timestamp
    stop = tmp_path / "stop"
    with mounted(store, mnt, "-o", f"flush=sync,keys_max={HOT}", log=str(tmp_path / "mqfs.log")):
        q = f"{mnt}/topics/small/0"
        base = [probe(mnt, i) for i in range(ROUNDS)]
        writer = subprocess.Popen(
            ["bash", "-c", f"for i in $(seq {BIG_COUNT}); do head -c {BIG} /dev/zero "
                           f"> {mnt}/topics/big/0/append || exit 1; done"])
        searcher = subprocess.Popen(
            ["bash", "-c", f"until [ -e {stop} ]; do ls {mnt}/keys/hot | wc -l > /dev/null; "
                           f"ls {q}/tags/T > /dev/null; readlink {q}/at/{middle} > /dev/null; "
                           f"done"])
        loaded = []
        try:
            while writer.poll() is None or len(loaded) < ROUNDS:
                loaded.append(probe(mnt, ROUNDS + len(loaded)))
        finally:
            stop.touch()
            searcher.wait(timeout=LIMIT)
            writer.wait(timeout=LIMIT)
        assert writer.returncode == 0 and searcher.returncode == 0
        assert len(os.listdir(f"{mnt}/topics/big/0")) == 6 + BIG_COUNT
        assert len(os.listdir(f"{mnt}/keys/hot")) == HOT
        assert os.readlink(f"{q}/at/{middle}") == f"../{HOT // 2}"
    assert len(os.listdir(f"{store}/commitlog")) > BIG_COUNT  # every big message rolled
    base_worst, loaded_worst = worst(base), worst(loaded)
    p99 = sorted(max(x.values()) for x in loaded)[len(loaded) * 99 // 100]
    print(f"worst latency: {base_worst * 1000:.1f} ms alone, {loaded_worst * 1000:.1f} ms "
          f"under load (p99 {p99 * 1000:.1f} ms, {len(loaded)} rounds)")
    # Under load the processes and the daemon's threads share two cores and the GIL, and
    # full garbage collections stop the loop (~50 ms), so requests slow down (measured on a
    # loaded 2-core machine: worst 52-137 ms, once 325 ms, p99 10-24 ms); a loop held by
    # the key listing, a 4 MiB copy or a synced put would hold them for that whole time,
    # every time (the handlers of before this test: worst 0.7-1.0 s, p99 0.11-0.47 s). So
    # the test counts the slow rounds: a hiccup of the machine makes one, a blocked loop
    # makes them at every search and big write.
    slow = [r for r in loaded if max(r.values()) > max(20 * base_worst, 0.2)]
    assert len(slow) <= 3, (base_worst, loaded_worst, slow[:5])
