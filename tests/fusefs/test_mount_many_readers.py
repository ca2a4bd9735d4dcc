"""Issue 33, item 4, through a mount: eight threads read files of 400 queues (each its own
ConsumeQueue file, twice what the mapping LRU holds) while the mount's scrub checks every
queue, whose first use rebuilds the damaged ones (swapped in under the readers). Before, 3 in 466,338
reads through a mount got EIO and the scrub stopped; every read must now give its message."""

from __future__ import annotations

import json
import os
import random
import threading

import pytest

from mqfs.store import Message, MessageStore
from mqfs.store.files import lazy_mapped_file
from tests.fusefs.helpers import mounted, needs_fuse
from tests.store.helpers import flip, small_config

pytestmark = [pytest.mark.mount, needs_fuse, pytest.mark.allow_logs(r"^scrub: ", r"^recovery: ")]

QUEUES, PER_QUEUE, THREADS, READS = 400, 3, 8, 600
DAMAGED = (396, 397, 398, 399)  # a unit of each points elsewhere; late in the scrub's order
# (by name), so the first use the scrub gives each rebuilds it while the readers read


def _store(root: str) -> None:
    with MessageStore(root, small_config(commitlog_file_size=1 << 20)) as s:
        s.put_batch([Message.create(f"t{q}", b"%d-%d" % (q, i), queue_id=0)
                     for i in range(PER_QUEUE) for q in range(QUEUES)])
    for q in DAMAGED:  # unit 1's CommitLog offset, one bit off
        flip(os.path.join(root, "consumequeue", f"t{q}", "0", "0" * 20), 20 + 7, 0x08)


def _scrub(mnt: str) -> dict:
    with open(os.path.join(mnt, "status.json")) as f:
        return json.load(f)["scrub"]


def test_eight_threads_read_400_queues_through_a_mount_while_the_scrub_rebuilds(tmp_path):
    root, mnt = str(tmp_path / "s"), str(tmp_path / "mnt")
    _store(root)
    assert QUEUES - len(DAMAGED) > lazy_mapped_file.MAX_MAPPED
    errors: list[str] = []
    done = [0] * THREADS
    go = threading.Event()
    with mounted(root, mnt):
        def read(n: int) -> None:
            rng = random.Random(n)
            go.wait()
            # a fixed number of reads each, and on until the scrub finished a whole pass
            while done[n] < READS or not _scrub(mnt)["passes"]:
                q, i = rng.randrange(QUEUES - len(DAMAGED)), rng.randrange(PER_QUEUE)
                try:
                    with open(os.path.join(mnt, "topics", f"t{q}", "0", str(i)), "rb") as f:
                        body = f.read()
                except OSError as exc:
                    errors.append(f"t{q}/0/{i}: {exc!r}")
                else:
                    if body != b"%d-%d" % (q, i):
                        errors.append(f"t{q}/0/{i} read {body!r}")
                done[n] += 1

        threads = [threading.Thread(target=read, args=(n,)) for n in range(THREADS)]
        for t in threads:
            t.start()
        go.set()
        for t in threads:
            t.join()
        assert _scrub(mnt)["findings"] == []  # nothing it could not mend
        for q in DAMAGED:  # rebuilt meanwhile: every message where it was
            for i in range(PER_QUEUE):
                with open(os.path.join(mnt, "topics", f"t{q}", "0", str(i)), "rb") as f:
                    assert f.read() == b"%d-%d" % (q, i)
    assert errors == [], f"{len(errors)} of {sum(done)} reads failed: {errors[:5]}"
    assert sum(done) >= THREADS * READS
    with open(os.path.join(root, "logs", "mqfs.log")) as f:
        logged = f.read()
    assert all(f"ConsumeQueue t{q}/0 unit 1 does not match its record" in logged
               for q in DAMAGED), logged[-2000:]
