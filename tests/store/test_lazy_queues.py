"""Queues opened on first use: after a clean close an open touches no ConsumeQueue file, and
a queue's end is proven when it is first used (damage found then, offsets never reused);
after a crash only the queues recovery dispatches to are opened (tests/store/test_lazy_recovery.py);
opened queues beyond the cache are dropped once flushed."""

from __future__ import annotations

import os
import threading

import pytest

from mqfs.store import CorruptionError, Message, MessageStore, NotFound, StoreFormatError
from mqfs.store.queues import first_use
from tests.store.helpers import small_config
from tests.waits import eventually

pytestmark = pytest.mark.allow_logs(r"^recovery: ")

TOPICS = 30  # x 4 queues


def _fill(root: str, per_queue: int = 3) -> None:
    with MessageStore(root, small_config()) as s:
        s.put_batch([Message.create(f"t{t}", b"%d/%d/%d" % (t, q, i), queue_id=q)
                     for i in range(per_queue) for t in range(TOPICS) for q in range(4)])


def _queue_file(root: str, topic: str, qid: int) -> str:
    return os.path.join(root, "consumequeue", topic, str(qid), "0" * 20)


def test_a_clean_open_touches_no_queue_file_and_the_first_use_does(tmp_path):
    root = str(tmp_path / "s")
    _fill(root)
    for t in range(TOPICS):  # every queue file made unusable: a wrong size is refused on open
        for q in range(4):
            os.truncate(_queue_file(root, f"t{t}", q), 7)
    with MessageStore(root, small_config(), create=False) as s:
        assert len(s.consume_queues) == TOPICS * 4 and not s.consume_queues.opened()
        assert s.max_offset("t3", 2) == 3 and s.min_offset("t3", 2) == 0  # as recorded
        with pytest.raises(StoreFormatError, match="is 7 bytes"):
            s.get("t3", 2, 0)
        assert not s.consume_queues.opened()


def test_use_queue_makes_the_first_use_a_read_would_and_raises_what_it_would(tmp_path):
    """`use_queue` (the mount's append proves its queue before it takes a write): the
    queue's first use now, nothing when it is made already; a queue file the first use
    refuses raises as a read would, an unknown queue is NotFound, a declared one is none."""
    root = str(tmp_path / "s")
    _fill(root)
    os.truncate(_queue_file(root, "t3", 2), 7)
    with MessageStore(root, small_config(), create=False) as s:
        assert s.needs_first_use("t1", 0)
        s.use_queue("t1", 0)
        assert not s.needs_first_use("t1", 0) and list(s.consume_queues.opened()) == [("t1", 0)]
        s.use_queue("t1", 0)
        with pytest.raises(StoreFormatError, match="is 7 bytes"):
            s.use_queue("t3", 2)
        with pytest.raises(NotFound):
            s.use_queue("nosuch", 0)
        s.add_queue("t0", 9)
        s.use_queue("t0", 9)
        assert s.max_offset("t0", 9) == 0


def test_a_damaged_queue_tail_is_found_at_its_first_use_and_rebuilt(tmp_path):
    root = str(tmp_path / "s")
    _fill(root)
    path = _queue_file(root, "t5", 1)
    with open(path, "r+b") as f:  # the last unit's CommitLog offset points elsewhere
        f.seek(2 * 20 + 6)
        f.write(b"\x01\x00")
    with MessageStore(root, small_config(), create=False) as s:
        assert not s.recovery.notes and not s.consume_queues.opened()
        assert bytes(s.get("t5", 1, 2).body) == b"5/1/2"  # never another message
        assert any("t5/1 unit 2 does not match" in n for n in s.recovery.notes)
        assert list(s.consume_queues.opened()) == [("t5", 1)]
        assert s.put(Message.create("t5", b"next", queue_id=1)).queue_offset == 3
    assert os.listdir(os.path.join(root, "quarantine"))


def test_offsets_are_not_reused_when_a_queue_lost_units_while_closed(tmp_path):
    root = str(tmp_path / "s")
    _fill(root, per_queue=10)
    path = _queue_file(root, "t0", 0)
    with open(path, "r+b") as f:  # its last 4 units zeroed: the queue looks 6 long
        f.seek(6 * 20)
        f.write(bytes(4 * 20))
    with MessageStore(root, small_config(), create=False) as s:
        assert s.max_offset("t0", 0) == 10  # as the clean close recorded
        assert s.put(Message.create("t0", b"new", queue_id=0)).queue_offset == 10
        assert [bytes(m.body) for m in s.get_range("t0", 0, 6, 5)] == \
            [b"0/0/6", b"0/0/7", b"0/0/8", b"0/0/9", b"new"]
        assert any("holds 6 entries, 10 at the last clean close" in n for n in s.recovery.notes)


def test_a_queue_that_cannot_be_proven_or_rebuilt_is_refused_changing_nothing(tmp_path):
    root = str(tmp_path / "s")
    _fill(root, per_queue=10)
    path = _queue_file(root, "t0", 0)
    with open(path, "r+b") as f:
        f.seek(6 * 20)
        f.write(bytes(4 * 20))
    log = os.path.join(root, "commitlog", "0" * 20)
    with open(log, "r+b") as f:  # and the log damaged: the lost offsets cannot come back
        f.seek(os.path.getsize(log) // 4)
        f.write(b"\xff" * 64)
    before = open(path, "rb").read()
    with MessageStore(root, small_config(), create=False) as s:
        with pytest.raises(CorruptionError, match="t0/0 holds 6 entries.*nothing was changed"):
            s.put(Message.create("t0", b"new", queue_id=0))
        assert bytes(s.get("t1", 0, 9).body) == b"1/0/9"  # other queues serve
    assert open(path, "rb").read() == before


def test_an_abnormal_open_opens_only_what_it_dispatches_and_recovers_every_message(tmp_path):
    root = str(tmp_path / "s")
    _fill(root)
    with open(os.path.join(root, "abort"), "w") as f:  # as a crash leaves it
        f.write("1")
    with MessageStore(root, small_config(), create=False) as s:
        assert s.recovery.abnormal and not s.consume_queues.opened()  # nothing to dispatch
        for t in range(TOPICS):
            for q in range(4):
                assert [bytes(m.body) for m in s.get_range(f"t{t}", q, 0, 9)] == \
                    [b"%d/%d/%d" % (t, q, i) for i in range(3)]


def test_opened_queues_beyond_the_cache_are_dropped_once_flushed(tmp_path):
    root = str(tmp_path / "s")
    _fill(root)
    with MessageStore(root, small_config(), create=False) as s:
        s.consume_queues.cache = 8
        for t in range(TOPICS):
            assert s.max_offset(f"t{t}", 0) == 3 and s.get(f"t{t}", 0, 1)
        s.put_batch([Message.create(f"t{t}", b"more", queue_id=0) for t in range(TOPICS)])
        assert len(s.consume_queues.opened()) == TOPICS
        s.flush()
        assert len(s.consume_queues.opened()) == 8 and len(s.consume_queues) == TOPICS * 4
        assert s.put(Message.create("t0", b"after", queue_id=0)).queue_offset == 4  # dropped
        assert [bytes(m.body) for m in s.get_range("t1", 0, 2, 5)] == [b"1/0/2", b"more"]
    with MessageStore(root, small_config(), create=False) as s:
        assert s.max_offset("t0", 0) == 5 and s.max_offset("t1", 0) == 4
        assert bytes(s.get("t0", 0, 4).body) == b"after"


def test_a_queue_this_process_dropped_takes_up_its_end_without_searching(tmp_path, monkeypatch):
    """Its end is the one it was dropped at (every unit on disk then): reopening it reads no
    data region (~2 ms a queue; a second put_batch over 6,000 dropped queues took 5.8 s)."""
    from mqfs.store.files import consume_queue
    root = str(tmp_path / "s")
    _fill(root)
    with MessageStore(root, small_config(), create=False) as s:
        s.consume_queues.cache = 2
        s.put_batch([Message.create(f"t{t}", b"more", queue_id=0) for t in range(TOPICS)])
        s.flush()
        searched = []
        monkeypatch.setattr(consume_queue, "last_written",
                            lambda mf: searched.append(mf) or pytest.fail("searched for the end"))
        s.put_batch([Message.create(f"t{t}", b"again", queue_id=0) for t in range(TOPICS)])
        assert searched == []
        assert [bytes(m.body) for m in s.get_range("t3", 0, 3, 9)] == [b"more", b"again"]


def test_first_uses_by_readers_and_puts_at_once_need_no_store_lock(tmp_path):
    root = str(tmp_path / "s")
    _fill(root)
    with MessageStore(root, small_config(), create=False) as s:
        errors: list[BaseException] = []

        def read(lo: int) -> None:
            try:
                for t in range(lo, TOPICS, 2):
                    for q in range(4):
                        assert bytes(s.get(f"t{t}", q, 2).body) == b"%d/%d/2" % (t, q)
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread
                errors.append(exc)

        readers = [threading.Thread(target=read, args=(lo,)) for lo in (0, 1)]
        for r in readers:
            r.start()
        results = [s.put(Message.create(f"t{t}", b"new", queue_id=3)) for t in range(TOPICS)]
        for r in readers:
            r.join()
        assert not errors and {r.queue_offset for r in results} == {3}
        assert len(s.consume_queues.opened()) == TOPICS * 4
        assert all(cq.max_offset == (4 if q == 3 else 3)
                   for (_, q), cq in s.consume_queues.opened().items())


def test_a_queue_not_opened_tells_its_newest_message_time_from_the_record(tmp_path):
    root = str(tmp_path / "s")
    _fill(root)
    with MessageStore(root, small_config(), create=False) as s:
        s.consume_queues.cache = 4  # most are dropped at the flush: their times noted then
        want = {(f"t{t}", q): s.get(f"t{t}", q, 2).store_timestamp for t in range(TOPICS) for q in range(4)}
        s.flush()
        assert len(s.consume_queues.opened()) == 4
    with MessageStore(root, small_config(), create=False) as s:
        assert {k: s.newest_store_time(*k) for k in want} == want
        assert not s.consume_queues.opened()
        s.add_queue("t0", 9)
        assert s.newest_store_time("t0", 9) is None


@pytest.mark.parametrize("by", ["read", "put"])
def test_a_slow_first_use_stops_no_put_or_read_of_another_queue(tmp_path, monkeypatch, by):
    """The proof of a queue at its first use holds no lock others need: while one is held
    inside it (an event, not a sleep), puts, batches and reads of other queues, their own
    first uses included, go on, and the adapter's question answers without waiting."""
    root = str(tmp_path / "s")
    _fill(root)
    entered, release = threading.Event(), threading.Event()
    prove = first_use.prove

    def slow_prove(parts, tags, cq, *args, **kwargs):
        if (cq.topic, cq.queue_id) == ("t0", 0):
            entered.set()
            release.wait()
        return prove(parts, tags, cq, *args, **kwargs)

    monkeypatch.setattr(first_use, "prove", slow_prove)
    with MessageStore(root, small_config(), create=False) as s:
        got: list[object] = []
        if by == "read":
            first = threading.Thread(target=lambda: got.append(bytes(s.get("t0", 0, 2).body)))
        else:
            first = threading.Thread(target=lambda: got.append(
                s.put(Message.create("t0", b"new", queue_id=0)).queue_offset))
        others_done = threading.Event()
        errors: list[BaseException] = []

        def others() -> None:
            try:
                assert s.needs_first_use("t0", 0)  # answered while the proof goes on
                assert s.put(Message.create("t1", b"new", queue_id=1)).queue_offset == 3
                assert [r.queue_offset for r in s.put_batch(
                    [Message.create(f"t{t}", b"new", queue_id=2) for t in (2, 3, 2)])] == [3, 3, 4]
                assert bytes(s.get("t4", 3, 1).body) == b"4/3/1"
                assert bytes(s.get("t1", 1, 3).body) == b"new"
                assert not s.needs_first_use("t4", 3)
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread
                errors.append(exc)
            finally:
                others_done.set()

        first.start()
        try:
            eventually(entered.is_set, "the first use of t0/0 began")
            threading.Thread(target=others).start()
            eventually(others_done.is_set, "puts and reads of other queues during a slow first use")
            assert not errors, errors
            assert not got and s.needs_first_use("t0", 0)
        finally:
            release.set()
            first.join()
        assert got == ([b"0/0/2"] if by == "read" else [3])
        assert not s.needs_first_use("t0", 0)
