"""Queues the registry dropped (more in use than its cache) and put to again: each takes up
the end this process left, with no file touched until a read or the flush needs them; every
message reads back at its offset, after a kill -9 too; files changed under the store are
refused, never overwritten; retention since the drop still moves the minimum."""

from __future__ import annotations

import os
import shutil

import pytest

from mqfs.store import Message, MessageStore, NotFound, StoreFormatError
from mqfs.store.files.mapped_file_queue import MappedFileQueue
from tests.store.helpers import killed_writer, small_config

TOPICS = 40  # x 4 queues, against a cache of 8
FIRST = (1, 99, 100, 101, 200)  # messages a queue gets first: files are 100 units


def _first(t: int, q: int) -> int:
    return FIRST[(t * 4 + q) % len(FIRST)]


def _keys() -> list[tuple[str, int]]:
    return [(f"t{t}", q) for t in range(TOPICS) for q in range(4)]


def _round(n: int) -> list[Message]:
    """Message n of every queue that gets one (the first round fills each to `_first`)."""
    return [Message.create(f"t{t}", b"%d/%d/%d" % (t, q, n), queue_id=q)
            for t in range(TOPICS) for q in range(4) if n < _first(t, q)]


def _fill_first(s: MessageStore) -> None:
    for n in range(200):
        s.put_batch(_round(n))


def _later(s: MessageStore, k: int) -> list[int]:
    """Round k (0, 1, ...) of one message to every queue; their queue offsets."""
    return [r.queue_offset for r in s.put_batch(
        [Message.create(t, b"%s/%d/later%d" % (t.encode(), q, k), queue_id=q) for t, q in _keys()])]


def _expected(t: str, q: int, rounds: int) -> list[bytes]:
    i = int(t[1:])
    return [b"%d/%d/%d" % (i, q, n) for n in range(_first(i, q))] + \
        [b"%s/%d/later%d" % (t.encode(), q, k) for k in range(rounds)]


def _spy_loads(monkeypatch) -> list[str]:
    """The directories whose ConsumeQueue files get listed and mapped from now on."""
    loaded: list[str] = []
    real = MappedFileQueue.load

    def load(self: MappedFileQueue) -> None:
        loaded.append(self.directory)
        real(self)

    monkeypatch.setattr(MappedFileQueue, "load", load)
    return loaded


def test_a_second_put_over_dropped_queues_touches_no_file_and_every_message_reads_back(
        tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    with MessageStore(root, small_config(flush_cq_interval_ms=3_600_000)) as s:
        s.consume_queues.cache = 8
        _fill_first(s)
        s.flush()
        assert len(s.consume_queues.opened()) == 8
        loaded = _spy_loads(monkeypatch)
        assert _later(s, 0) == [_first(int(t[1:]), q) for t, q in _keys()]
        assert loaded == []  # each continued from its recorded end: no listing, no mapping
        assert all(s.max_offset(t, q) == _first(int(t[1:]), q) + 1 for t, q in _keys())
        # a read inside the buffered tail needs no file; one before it loads them
        assert bytes(s.get("t2", 0, 101).body) == b"t2/0/later0" and loaded == []
        assert bytes(s.get("t2", 0, 100).body) == b"2/0/100" and len(loaded) == 1
        s.flush()  # the units are written out: the files loaded, checked, written
        assert len(set(loaded)) == len(loaded) == TOPICS * 4 - 8  # (8 were never dropped)
        assert len(s.consume_queues.opened()) == 8
        del loaded[:]
        assert _later(s, 1) == [_first(int(t[1:]), q) + 1 for t, q in _keys()]
        assert loaded == []  # a queue taken up, written and dropped again: the same
        s.flush()
        for t, q in _keys():
            assert [bytes(m.body) for m in s.get_range(t, q, 0, 300)] == _expected(t, q, 2)
    with MessageStore(root, small_config(), create=False) as s:
        for t, q in _keys():
            assert [bytes(m.body) for m in s.get_range(t, q, 0, 300)] == _expected(t, q, 2)
            assert s.min_offset(t, q) == 0


_WRITER = """
import os, sys
from mqfs.store import MessageStore
from tests.store.helpers import small_config
from tests.store.test_dropped_queues import _fill_first, _later
s = MessageStore(sys.argv[1], small_config(flush_cq_interval_ms=3_600_000)).open()
s.consume_queues.cache = 8
_fill_first(s)
s.flush()
_later(s, 0)
s.flush()
_later(s, 1)  # acknowledged too: in the CommitLog, its units in memory only
print("acknowledged", flush=True)
os.kill(os.getpid(), 9)
"""


def test_every_acknowledged_message_of_dropped_queues_survives_a_kill_9(tmp_path):
    root = str(tmp_path / "s")
    killed_writer(_WRITER, root, timeout=300)
    with MessageStore(root, small_config(), create=False) as s:
        assert s.recovery.abnormal
        for t, q in _keys():
            assert [bytes(m.body) for m in s.get_range(t, q, 0, 300)] == _expected(t, q, 2)
        assert _later(s, 2) == [_first(int(t[1:]), q) + 2 for t, q in _keys()]


def _dropped(root: str, s: MessageStore) -> str:
    """A queue the registry dropped, put to again (nothing loaded); its directory."""
    _fill_first(s)
    s.flush()
    assert s.consume_queues.if_open(("t3", 1)) is None
    assert s.put(Message.create("t3", b"new", queue_id=1)).queue_offset == 101
    return os.path.join(root, "consumequeue", "t3", "1")


@pytest.mark.parametrize("change", ["removed", "grown", "replaced"])
def test_files_changed_under_a_dropped_queue_are_refused_not_overwritten(tmp_path, change):
    """Its directory removed, a unit written past its end, or its last file swapped for
    another one: the flush refuses to write its units, leaves the files as they are, and
    keeps serving the message from memory."""
    root = str(tmp_path / "s")
    with MessageStore(root, small_config(flush_cq_interval_ms=3_600_000)) as s:
        s.consume_queues.cache = 8
        directory = _dropped(root, s)
        aside = str(tmp_path / "aside")
        shutil.copytree(directory, aside)
        last = os.path.join(directory, f"{100 * 20:020d}")
        if change == "removed":
            shutil.rmtree(directory)
        elif change == "grown":
            with open(last, "r+b") as f:
                f.seek(20)
                f.write(b"\x01" * 20)
        else:
            with open(last, "r+b") as f:
                f.write(bytes(20))
        before = {n: open(os.path.join(directory, n), "rb").read() for n in os.listdir(directory)} \
            if os.path.isdir(directory) else {}
        with pytest.raises(StoreFormatError, match=r"ConsumeQueue t3/1 changed on disk .*nothing "
                           r"was written"):
            s.flush()
        after = {n: open(os.path.join(directory, n), "rb").read() for n in os.listdir(directory)} \
            if os.path.isdir(directory) else {}
        assert after == before
        assert bytes(s.get("t3", 1, 101).body) == b"new"
        shutil.rmtree(directory, ignore_errors=True)  # put back as the store left it
        shutil.copytree(aside, directory)
        s.flush()
        assert [bytes(m.body) for m in s.get_range("t3", 1, 99, 5)] == [b"3/1/99", b"3/1/100", b"new"]
    with MessageStore(root, small_config(), create=False) as s:
        assert bytes(s.get("t3", 1, 101).body) == b"new" and s.max_offset("t3", 1) == 102


@pytest.mark.allow_logs(r"^retention: deleted CommitLog file")
def test_retention_since_a_queue_was_dropped_moves_its_minimum_at_its_next_use(tmp_path, monkeypatch):
    cfg = small_config(retention_bytes=1, flush_cq_interval_ms=3_600_000)
    with MessageStore(str(tmp_path), cfg) as s:
        s.flush_services.stop()
        s.consume_queues.cache = 2
        for _ in range(60):
            s.put_batch([Message.create("r", os.urandom(1000), queue_id=q) for q in range(4)])
        s.flush()
        assert len(s.consume_queues.opened()) == 2
        files = len(s.commitlog.queue.files)
        assert sum(s.retention.run_once() for _ in range(files)) == files - 1
        lowest = s.commitlog.min_offset
        loaded = _spy_loads(monkeypatch)
        for q in range(4):
            s.put(Message.create("r", b"after", queue_id=q))
            low = s.min_offset("r", q)
            assert 0 < low < 60 and s.get("r", q, low).commitlog_offset >= lowest
            with pytest.raises(NotFound):
                s.get("r", q, low - 1)
        assert len(loaded) == 2  # the two dropped before retention ran, to move their minimum
        s.flush()  # dropped again, retention done: taken up unread, their minimum as it was
        lows = {q: s.min_offset("r", q) for q in range(4)}
        del loaded[:]
        assert [s.put(Message.create("r", b"again", queue_id=q)).queue_offset for q in range(4)] == \
            [61] * 4
        assert loaded == [] and {q: s.min_offset("r", q) for q in range(4)} == lows
