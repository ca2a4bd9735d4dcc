"""Small requests answered correctly through one mount while another process writes 4 MiB
messages (synced, rolling CommitLog files) and a third lists a key with thousands of hits, a
tag and an `at/` time. How long they take under that load is `scripts/bench latency`'s
figure (a ratio to the same probes alone): speed is measured there, not asserted here."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from mqfs.store import Message, MessageStore
from tests.fusefs.helpers import SMALL, mounted, mqfs, needs_fuse
from tests.waits import LIMIT

pytestmark = [pytest.mark.mount, needs_fuse]

HOT = 30000  # messages with the key `hot` (and every other one with tag T): a key listing
# reads them all, which on the loop would hold every other request for ~0.5 s
BIG = 4 << 20
BIG_COUNT = 16  # 4 MiB bodies into 8 MiB CommitLog files: each one rolls a new file
ROUNDS = 60  # probe rounds without the load


def probe(mnt: str, offset: int) -> None:
    """stat of a message not looked up before (a lookup the daemon answers), cat of a small
    message, ls of a small queue: each answered whole."""
    assert os.stat(f"{mnt}/topics/small/0/{offset}").st_size == len(b"hot %d" % offset)
    with open(f"{mnt}/topics/small/1/3", "rb") as f:
        assert f.read() == b"small 3"
    assert len(os.listdir(f"{mnt}/topics/small/1")) == 20 + 6


def test_small_requests_are_answered_whole_while_big_writes_and_searches_run(tmp_path):
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
        for i in range(ROUNDS):
            probe(mnt, i)
        writer = subprocess.Popen(
            ["bash", "-c", f"for i in $(seq {BIG_COUNT}); do head -c {BIG} /dev/zero "
                           f"> {mnt}/topics/big/0/append || exit 1; done"])
        searcher = subprocess.Popen(
            ["bash", "-c", f"until [ -e {stop} ]; do ls {mnt}/keys/hot | wc -l > /dev/null; "
                           f"ls {q}/tags/T > /dev/null; readlink {q}/at/{middle} > /dev/null; "
                           f"done"])
        rounds = 0
        try:
            while writer.poll() is None or rounds < ROUNDS:
                probe(mnt, ROUNDS + rounds)
                rounds += 1
        finally:
            stop.touch()
            searcher.wait(timeout=LIMIT)
            writer.wait(timeout=LIMIT)
        assert writer.returncode == 0 and searcher.returncode == 0
        assert len(os.listdir(f"{mnt}/topics/big/0")) == 6 + BIG_COUNT
        assert len(os.listdir(f"{mnt}/keys/hot")) == HOT
        assert os.readlink(f"{q}/at/{middle}") == f"../{HOT // 2}"
    assert len(os.listdir(f"{store}/commitlog")) > BIG_COUNT  # every big message rolled
