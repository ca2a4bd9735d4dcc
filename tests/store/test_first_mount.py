"""The first read-write open of a store with no mqfs record of its queues after a clean exit
(a RocketMQ broker's store: no config/dispatchState.json, a checkpoint without mqfs's
extension): the queues are registered from the listing and proven at their first use. The
open itself opens only the queue of the newest record (where the queues end is proven there);
damage at a queue's end is found at its first use and ends as the open that checked every
queue left it; the clean close writes the record the next open uses."""

from __future__ import annotations

import os
import shutil
import struct

import pytest

from mqfs.store import Message, MessageStore
from mqfs.store.files.checkpoint import Checkpoint
from mqfs.store.format.layout import MAGIC_V1
from mqfs.store.integrity.verify import verify_store
from mqfs.store.offline import store_files
from mqfs.store.offline.store_files import commitlog_files, newest_begun, newest_begun_file
from mqfs.store.queues import clean_open
from tests.fusefs.helpers import mounted, needs_fuse, sh
from tests.store.helpers import small_config

pytestmark = pytest.mark.allow_logs(r"^recovery: ")

TOPICS, QUEUES, PER = 12, 4, 5
CFG = dict(flavor="rocketmq", record_crc=False, index_slots=64, index_entries=256)


def _body(t: int, q: int, i: int) -> bytes:
    return b"%d/%d/%d" % (t, q, i) * 20


def broker_store(root: str) -> tuple[str, int]:
    """TOPICS x QUEUES queues of PER messages, as a broker leaves them after a clean shutdown:
    no mqfs.json, no config/, a checkpoint of RocketMQ's five fields only, and the next
    CommitLog file made ahead, empty. The newest record's queue."""
    with MessageStore(root, small_config(**CFG)) as s:
        for i in range(PER):
            s.put_batch([Message.create(f"t{t}", _body(t, q, i), queue_id=q, keys=[f"k{t}-{q}-{i}"])
                         for t in range(TOPICS) for q in range(QUEUES)])
        last = s.put(Message.create("t0", _body(0, 1, PER), queue_id=1, keys=["k0-1-last"]))
        size = s.config.commitlog_file_size
    assert last.queue_offset == PER
    os.unlink(os.path.join(root, "mqfs.json"))
    shutil.rmtree(os.path.join(root, "config"))
    path = os.path.join(root, "checkpoint")
    raw = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(raw[:40] + bytes(len(raw) - 40))
    names = sorted(os.listdir(os.path.join(root, "commitlog")))
    with open(os.path.join(root, "commitlog", f"{int(names[-1]) + size:020d}"), "wb") as f:
        f.truncate(size)
    return root, size


def _bodies(s: MessageStore, t: int, q: int) -> list[bytes]:
    return [m.body for m in s.get_range(f"t{t}", q, 0, 100)]


def _expected(t: int, q: int) -> list[bytes]:
    return [_body(t, q, i) for i in range(PER + (t == 0 and q == 1))]


def test_the_first_mount_opens_one_queue_reads_all_and_puts_at_each_end(tmp_path):
    root, _ = broker_store(str(tmp_path))
    assert Checkpoint.load(os.path.join(root, "checkpoint")).commitlog_flushed_offset == 0
    with MessageStore(root, small_config(**CFG), create=False) as s:
        assert s.parts.vouched is None and not s.recovery.abnormal
        # the open proved where the queues end at the newest record's queue alone
        assert list(s.consume_queues.opened()) == [("t0", 1)]
        assert len(s.consume_queues.waiting()) == TOPICS * QUEUES - 1
        assert s.recovery.dispatched == 0
        for t in range(TOPICS):
            for q in range(QUEUES):
                assert _bodies(s, t, q) == _expected(t, q), (t, q)
        assert [m.body for m in s.query_key("k5-2-3")] == [_body(5, 2, 3)]
        for t in range(TOPICS):
            for q in range(QUEUES):
                r = s.put(Message.create(f"t{t}", b"next", queue_id=q))
                assert r.queue_offset == len(_expected(t, q)), (t, q)
    assert verify_store(root, config=small_config(**CFG)).ok
    with MessageStore(root, small_config(**CFG), create=False) as s:
        assert s.parts.vouched is not None and not s.consume_queues.opened()  # the record, used
        assert s.consume_queues.recorded(("t3", 2)).entries == PER + 1
        assert _bodies(s, 3, 2) == [*_expected(3, 2), b"next"]


def test_records_after_the_newest_held_one_are_dispatched(tmp_path):
    """A broker that stopped before dispatching its newest record: the open opens its queue,
    then the queue of the record before, which holds it, and dispatches the newest."""
    root, _ = broker_store(str(tmp_path))
    path = os.path.join(root, "consumequeue", "t0", "1", "0" * 20)
    with open(path, "r+b") as f:  # the newest record's unit, never written
        f.seek(PER * 20)
        f.write(bytes(20))
    with MessageStore(root, small_config(**CFG), create=False) as s:
        assert sorted(s.consume_queues.opened()) == [("t0", 1), (f"t{TOPICS - 1}", QUEUES - 1)]
        assert s.recovery.dispatched == 1
        assert _bodies(s, 0, 1) == _expected(0, 1)
        assert s.put(Message.create("t0", b"next", queue_id=1)).queue_offset == PER + 1


def _damage(root: str, key: tuple[str, int], how: str) -> None:
    """Damage the end of a queue's file as a bit flip, a torn write or a lost page would."""
    path = os.path.join(root, "consumequeue", key[0], str(key[1]), "0" * 20)
    with open(path, "r+b") as f:
        f.seek((PER - 1) * 20)
        offset, size, tags = struct.unpack(">qiq", f.read(20))
        f.seek((PER - 1) * 20)
        if how == "offset":  # its last unit points at another queue's record
            f.write(struct.pack(">qiq", offset ^ 0x200, size, tags))
        elif how == "size":
            f.write(struct.pack(">qiq", offset, size ^ 0x10, tags))
        elif how == "tags":  # a tag filter would skip the message
            f.write(struct.pack(">qiq", offset, size, tags ^ 1))
        elif how == "zeroed":  # its last unit lost (the record stays in the log)
            f.write(bytes(20))
        else:  # garbage after its last unit
            f.seek(PER * 20)
            f.write(bytes(range(1, 61)))


def _outcome(root: str, key: tuple[str, int]) -> tuple[list[tuple[int, bytes]], int, int, bool]:
    """What the damaged queue serves, where a put continues it, and verify's word."""
    with MessageStore(root, small_config(**CFG), create=False) as s:
        served = [(m.queue_offset, m.body) for m in s.get_range(key[0], key[1], 0, 100)]
        end = s.max_offset(*key)
        put = s.put(Message.create(key[0], b"after", queue_id=key[1])).queue_offset
    return served, end, put, verify_store(root, config=small_config(**CFG)).ok


@pytest.mark.allow_logs("queue ends: ConsumeQueue t4/2 ")
@pytest.mark.parametrize("how", ["offset", "size", "tags", "zeroed", "garbage-tail"])
def test_damage_at_a_queue_end_is_found_at_first_use_as_the_eager_open_found_it(
        tmp_path, monkeypatch, how):
    key = ("t4", 2)
    lazy_root, _ = broker_store(str(tmp_path / "lazy"))
    _damage(lazy_root, key, how)
    eager_root = str(tmp_path / "eager")
    shutil.copytree(lazy_root, eager_root)
    with MessageStore(lazy_root, small_config(**CFG), create=False) as s:
        # found at its first use, below; a lost unit below the queue's newest record is found
        # at open by the proof of the queue ends from the log (no record vouches for them)
        assert (key in s.consume_queues.opened()) == (how == "zeroed")
    lazy = _outcome(lazy_root, key)
    # the open as it was: every queue opened and checked up front (what the walk falls back to)
    monkeypatch.setattr(clean_open, "open_newest", lambda *a: False)
    with MessageStore(eager_root, small_config(**CFG), create=False) as s:
        assert len(s.consume_queues.opened()) == TOPICS * QUEUES
    eager = _outcome(eager_root, key)
    assert lazy == eager
    served, end, put, ok = lazy
    # "zeroed": below the newest record its queue holds, so neither open's check of the
    # queues can tell; the log's last record of the queue does, and it is rebuilt from the log
    assert served == [(i, _body(4, 2, i)) for i in range(PER)] and end == put == PER and ok


@needs_fuse
def test_a_read_write_mount_of_a_broker_store_serves_and_appends_then_records_it(tmp_path):
    root, _ = broker_store(str(tmp_path / "store"))
    mnt = str(tmp_path / "mnt")
    with mounted(root, mnt):
        assert sh(f"cat {mnt}/topics/t9/3/4").stdout == _body(9, 3, 4)
        sh(f"printf appended > {mnt}/topics/t9/3/append")
        assert sh(f"cat {mnt}/topics/t9/3/{PER}").stdout == b"appended"
        assert sh(f"cat {mnt}/topics/t0/1/{PER}").stdout == _body(0, 1, PER)
    assert os.path.exists(os.path.join(root, "config", "dispatchState.json"))
    with MessageStore(root, small_config(**CFG), create=False) as s:
        assert s.parts.vouched is not None and not s.consume_queues.opened()
        assert _bodies(s, 9, 3) == [*_expected(9, 3), b"appended"]


def test_a_damaged_newest_queue_makes_the_open_check_every_queue_as_before(tmp_path):
    """The queue of the newest record has a unit that does not describe its record: where the
    queues end cannot be shown from it, so every queue is opened and checked at open."""
    root, _ = broker_store(str(tmp_path))
    path = os.path.join(root, "consumequeue", "t0", "1", "0" * 20)
    with open(path, "r+b") as f:
        f.seek(PER * 20)
        offset, size, tags = struct.unpack(">qiq", f.read(20))
        f.seek(PER * 20)
        f.write(struct.pack(">qiq", offset, size, tags ^ 1))
    with MessageStore(root, small_config(**CFG), create=False) as s:
        assert len(s.consume_queues.opened()) == TOPICS * QUEUES
        assert _bodies(s, 0, 1) == _expected(0, 1)
        assert s.consume_queues.open_queue(("t0", 1)).entry(PER)[2] == tags


def test_verify_takes_the_file_a_broker_made_ahead_for_no_damage(tmp_path):
    """A broker makes the next CommitLog file before the current one is full: the current
    file then ends in zeros, not a BLANK. Zeros only in the file made ahead are no damage;
    a byte of data there is (the file before it must then have ended in a BLANK)."""
    root, size = broker_store(str(tmp_path / "s"))
    report = verify_store(root)
    assert report.ok, report.lines
    ahead = os.path.join(root, "commitlog", sorted(os.listdir(os.path.join(root, "commitlog")))[-1])
    with open(ahead, "r+b") as f:
        f.seek(size // 2)
        f.write(b"\x01")
    report = verify_store(root)
    assert not report.ok
    assert any("without a BLANK" in line for line in report.lines), report.lines


def test_the_log_ends_in_the_newest_file_begun_for_every_reader_that_asks(tmp_path, monkeypatch):
    """One rule (store_files.newest_begun) for where the CommitLog ends by its files: the
    newest file whose first 8 bytes are not all zero. A broker's made-ahead file of zeros is
    not it, whichever reader asks (the read-only open, the pipeline's locality); once a
    record is begun in it, it is."""
    assert newest_begun([], bytes) is None
    assert newest_begun([b"\0" * 8, b"\0" * 8], bytes) == b"\0" * 8  # none begun: the oldest
    assert newest_begun([b"a", b"\0\0\0\1", b"", b"\0" * 8], lambda f: f) == b"\0\0\0\1"
    root, size = broker_store(str(tmp_path / "s"))
    (before, _), (ahead_start, ahead) = commitlog_files(root)[-2:]
    assert newest_begun_file(root) == (before, os.path.join(root, "commitlog", f"{before:020d}"))
    with MessageStore(root, small_config(**CFG, read_only=True), create=False) as s:
        end = s.recovery.end_offset
    assert before < end < ahead_start
    with open(ahead, "r+b") as f:  # a record begun in it: its TOTALSIZE and MAGIC
        f.write(struct.pack(">ii", 200, MAGIC_V1))
    assert newest_begun_file(root) == (ahead_start, ahead)
    listed = commitlog_files(root)
    os.unlink(ahead)  # deleted between the listing and the look (a broker's restart)
    monkeypatch.setattr(store_files, "commitlog_files", lambda _: listed)
    assert newest_begun_file(root) == (before, os.path.join(root, "commitlog", f"{before:020d}"))
