"""ConsumeQueue units held in memory until the ConsumeQueue flush (store/files/unit_flush.py):
readable the moment a put returns, written (a new queue's directory and file made only
then) by the flush, bounded in memory, and rebuilt from the CommitLog after a kill -9."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys

import pytest

from mqfs.store import Message, MessageStore
from mqfs.store.files import unit_flush
from mqfs.store.files.consume_queue import TAIL_MAX
from tests import REPO
from tests.crash.ext4 import Ext4Image, unavailable
from tests.fusefs.helpers import mounted, mqfs, needs_fuse, sh
from tests.store.helpers import killed_writer, small_config

HOUR_MS = 3_600_000  # no background ConsumeQueue flush during a test


def _cq_dir(root: str, topic: str, qid: int = 0) -> str:
    return os.path.join(root, "consumequeue", topic, str(qid))


def test_a_new_queues_unit_is_read_before_its_file_exists_and_written_by_flush(tmp_path):
    root = str(tmp_path / "s")
    with MessageStore(root, small_config(flush_cq_interval_ms=HOUR_MS)) as s:
        batch = s.put_batch([Message.create(f"t{i // 3}", b"m%d" % i, queue_id=i % 3)
                             for i in range(90)])
        one = s.put(Message.create("solo", b"one", tags="T"))
        assert not os.path.exists(os.path.join(root, "consumequeue", "t5"))
        assert not os.path.exists(_cq_dir(root, "solo"))
        assert bytes(s.get("t5", 2, 0).body) == b"m17"
        assert s.max_offset("t5", 2) == 1 and s.min_offset("t5", 2) == 0
        assert [bytes(m.body) for m in s.get_range("solo", 0, 0, 5, tags=["T"])] == [b"one"]
        assert s.offset_by_time("solo", 0, one.store_timestamp) == 0
        s.flush()
        with open(os.path.join(_cq_dir(root, "t5", 2), "0" * 20), "rb") as f:
            unit = struct.unpack(">qiq", f.read(20))
        assert unit[:2] == (batch[17].commitlog_offset, batch[17].size)
        assert bytes(s.get("t5", 2, 0).body) == b"m17"  # now from the file


def test_reads_cross_from_the_files_into_the_buffered_units(tmp_path):
    root = str(tmp_path / "s")
    with MessageStore(root, small_config(flush_cq_interval_ms=HOUR_MS)) as s:
        for i in range(150):  # 100 units a file: the flush fills one and starts the next
            s.put(Message.create("q", b"a%d" % i))
        s.flush()
        for i in range(150, 180):
            s.put(Message.create("q", b"a%d" % i))
        assert s.consume_queues.open_queue(("q", 0)).buffered == 30 * 20
        assert [bytes(m.body) for m in s.get_range("q", 0, 90, 200)] == \
            [b"a%d" % i for i in range(90, 180)]
        offsets, _, _ = s.list_entries("q", 0, 140, 20)
        assert offsets.tolist() == list(range(140, 160))
    with MessageStore(root, small_config(), create=False) as s:  # close wrote them out
        assert s.max_offset("q", 0) == 180 and bytes(s.get("q", 0, 179).body) == b"a179"


def test_a_queue_and_all_queues_together_buffer_no_more_than_their_bounds(tmp_path, monkeypatch):
    monkeypatch.setattr(unit_flush, "BUFFERED_MAX", 50 * 20)
    root = str(tmp_path / "s")
    with MessageStore(root, small_config(flush_cq_interval_ms=HOUR_MS,
                                         consume_queue_units=1000)) as s:
        for _ in range(300):
            s.put(Message.create("hot", b"h"))
            assert s.consume_queues.open_queue(("hot", 0)).buffered <= TAIL_MAX
        assert os.path.exists(_cq_dir(root, "hot"))  # written out before it passed the bound
        for i in range(200):
            s.put(Message.create(f"n{i}", b"n"))
            assert sum(cq.buffered for cq in s.consume_queues.opened().values()) <= 50 * 20
        assert os.path.exists(_cq_dir(root, "n0"))
        assert all(bytes(s.get(f"n{i}", 0, 0).body) == b"n" for i in range(200))


_WRITER = """
import os, sys
from mqfs.store import Message, MessageStore
from tests.store.helpers import small_config
s = MessageStore(sys.argv[1], small_config(flush_cq_interval_ms=3_600_000)).open()
s.put_batch([Message.create("early", b"e%d" % i) for i in range(10)])
s.flush()  # the checkpoint vouches for these units, not for what follows
s.put_batch([Message.create(f"t{i // 4}", b"m%d" % i, queue_id=i % 4) for i in range(2000)])
s.put(Message.create("early", b"late"))
print("acknowledged", flush=True)
os.kill(os.getpid(), 9)
"""


def test_a_kill_right_after_a_put_batch_into_many_queues_loses_no_unit(tmp_path):
    root = str(tmp_path / "s")
    killed_writer(_WRITER, root, timeout=120)
    assert not os.path.exists(_cq_dir(root, "t0"))  # the units were in memory only
    with MessageStore(root, small_config(), create=False) as s:
        assert s.recovery is not None and s.recovery.abnormal
        assert all(bytes(s.get(f"t{i // 4}", i % 4, 0).body) == b"m%d" % i for i in range(2000))
        assert [bytes(m.body) for m in s.get_range("early", 0, 9, 5)] == [b"e9", b"late"]


@needs_fuse
def test_a_message_written_through_the_mount_is_read_at_once_and_durable_after_fsync(tmp_path):
    store, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    mqfs("init", store)
    with mounted(store, mnt) as pid:
        os.makedirs(f"{mnt}/topics/fresh/0")
        sh(f"printf first > {mnt}/topics/fresh/0/append")
        assert sh(f"cat {mnt}/topics/fresh/0/0").stdout == b"first"
        fd = os.open(f"{mnt}/topics/fresh/0/append", os.O_WRONLY)
        try:
            os.write(fd, b"second")
            os.fsync(fd)  # a message, and the store flushed: its unit is in its file
        finally:
            os.close(fd)
        with open(os.path.join(_cq_dir(store, "fresh"), "0" * 20), "rb") as f:
            units = f.read(60)
        assert units[20:40] != bytes(20) and units[40:] == bytes(20)
        os.kill(pid, signal.SIGKILL)
    with MessageStore(store, create=False) as s:
        assert [bytes(m.body) for m in s.get_range("fresh", 0, 0, 5)] == [b"first", b"second"]


_FULL_DISK_WRITER = """
import errno, json, os, sys
from mqfs.store import Message, MessageStore
from tests.store.helpers import small_config
root, ballast = sys.argv[1], sys.argv[2]
cfg = small_config(commitlog_file_size=1 << 20, consume_queue_units=1000, flush_cq_interval_ms=3_600_000)
s = MessageStore(root, cfg).open()
for q in range(100):
    s.create_topic(f"q{q}")  # declared: topics.log is not written again
s.put(Message.create("first", b"f"))  # the CommitLog's first file made
s.flush()
with open(ballast, "wb") as f:  # the disk full: no new queue can get a directory
    try:
        while True:
            f.write(b"b" * 65536)
            f.flush()
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
acked, flush_failed = [], 0
while True:
    try:
        r = s.put(Message.create(f"q{len(acked) % 100}", b"x" * 200))
    except OSError as exc:  # the CommitLog cannot roll: refused before anything is written
        assert exc.errno == errno.ENOSPC, exc
        break
    acked.append(r.commitlog_offset)
    if len(acked) % 500 == 0:
        try:
            s.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
            flush_failed += 1
assert flush_failed and all(s.get(f"q{i % 100}", 0, i // 100).commitlog_offset == off
                            for i, off in enumerate(acked))
print(json.dumps(acked), flush=True)
os.kill(os.getpid(), 9)
"""


def test_a_full_disk_keeps_units_in_memory_and_a_kill_then_loses_no_acknowledged_message(tmp_path):
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    with Ext4Image(str(tmp_path), size_mib=64) as img:
        root, ballast = os.path.join(img.mnt, "s"), os.path.join(img.mnt, "ballast")
        proc = subprocess.run([sys.executable, "-c", _FULL_DISK_WRITER, root, ballast], cwd=REPO,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        acked = json.loads(proc.stdout)
        assert len(acked) > 1000
        os.unlink(ballast)
        with MessageStore(root, small_config(commitlog_file_size=1 << 20,
                                             consume_queue_units=1000), create=False) as s:
            assert [s.get(f"q{i % 100}", 0, i // 100).commitlog_offset
                    for i in range(len(acked))] == acked
            assert all(s.max_offset(f"q{q}", 0) == len(acked[q::100]) for q in range(100))
