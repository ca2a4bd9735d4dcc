"""The single put in one C call (store/format/_records.c `Put`, `StoreWrites.hot_put`) held to
the Python path: the same operations (puts it takes and puts it declines, new queues, rolls of
every file, batches, tails written out, reads between them) give the same results, the same
reads and the same files byte for byte with the C modules and with the Python codec, both
flavors, with and without the record checksum. Python and C keep one set of positions: a put
either path makes continues exactly where the other left off."""

import errno
import os
import random
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqfs.store import Message, MessageStore, writes
from mqfs.store.errors import NotFound, StoreError
from mqfs.store.files.consume_queue import TAIL_MAX, UNIT_SIZE, ConsumeQueue
from mqfs.store.files.index_file import IndexFile
from mqfs.store.format import compiled
from tests.store.helpers import small_config, use_codec

pytestmark = pytest.mark.skipif(compiled.PURE, reason="MQFS_PURE_PYTHON=1: no C path to compare")

PREPARED, COMMIT, ROLLBACK = 0x4, 0x8, 0xC


class Other(Message):
    """A Message subclass: its attribute reads could run Python code, so `put` never hands it
    to the C call (the put lock is held there): it always takes the Python path."""


def _message(rng: random.Random, i: int) -> Message:
    topic = rng.choice(["TopicA", "TopicA", "TopicA", "B-2", "SCHEDULE_TOPIC_XXXX", "%RETRY%G" + "v" * 130])
    props = {}
    if rng.random() < 0.3:
        props["UNIQ_KEY"] = f"U{i}"
    if rng.random() < 0.2:
        props["DELAY"] = rng.choice(["1", "3", "99", "x", "0"])
    if rng.random() < 0.2:
        props["ORIGIN"] = rng.choice(["élan", "x" * rng.randrange(200), "\U0001F600"])
    keys = rng.choice([[], [f"k{i}"], [f"k{i}"], [f"k{i}", "shared"], ["ü\U0001F600", f"k{i}"]])
    cls = Other if rng.random() < 0.1 else Message
    return cls.create(
        topic, rng.randbytes(rng.choice([0, 10, 300, 1000, rng.randrange(6000)])),
        queue_id=rng.randrange(rng.choice([1, 3, 12])), keys=keys,
        tags=rng.choice([None, None, "red", "grün", ""]), properties=props,
        sys_flag=rng.choice([0] * 12 + [PREPARED, COMMIT, ROLLBACK]), flag=rng.randrange(-5, 5),
        born_timestamp=1_690_000_000_000 + i, born_host=("10.1.2.3", 4000 + i % 3))


def _ops(seed: int, n: int = 400) -> list[tuple]:
    rng = random.Random(seed)
    ops: list[tuple] = []
    i = 0
    while len(ops) < n:
        r = rng.random()
        if r < 0.8:
            ops.append(("put", _message(rng, i)))
            i += 1
        elif r < 0.9:
            size = rng.choice([2, 3, 40])
            ops.append(("batch", [_message(rng, i + j) for j in range(size)]))
            i += size
        elif r < 0.95:
            ops.append(("flush",))
        else:
            ops.append(("reopen",))
    return ops


def _files(root: str) -> dict[str, bytes]:
    """CommitLog and ConsumeQueue files by path; IndexFiles (named by the time they were
    made) by their order."""
    out = {}
    for sub in ("commitlog", "consumequeue", "index"):
        found = []
        for top, _, names in os.walk(os.path.join(root, sub)):
            found += [os.path.join(top, name) for name in names]
        for k, path in enumerate(sorted(found)):
            with open(path, "rb") as f:
                out[f"index#{k}" if sub == "index" else os.path.relpath(path, root)] = f.read()
    return out


def _run(root: str, ops: list[tuple], config) -> tuple[list, dict[str, bytes], int]:
    """Outcomes (results and reads after each step), the files, and the puts the C call took."""
    out: list = []
    taken = 0
    clock = iter(range(1_700_000_000_000, 1_800_000_000_000, 7)).__next__
    s = MessageStore(root, config).open()
    s.clock = clock
    try:
        for op in ops:
            if op[0] == "reopen":
                taken += s.hot_put.taken if s.hot_put is not None else 0
                s.close()
                s = MessageStore(root, config).open()
                s.clock = clock
                continue
            if op[0] == "flush":
                s.flush()
                continue
            msgs = [op[1]] if op[0] == "put" else op[1]
            try:
                results = [s.put(op[1])] if op[0] == "put" else s.put_batch(op[1])
            except StoreError as e:  # too large for the files: refused, the same way
                out.append((type(e).__name__, str(e)))
                continue
            out.append([tuple(r) for r in results])
            for m, r in zip(msgs, results):  # read-your-writes, at once
                got = s.get_by_msgid(r.msg_id)
                out.append((got.body == m.body, got.queue_offset, got.store_timestamp))
                if not m.sys_flag & PREPARED and len(m.topic) <= 255:
                    out.append(s.get(m.topic, m.queue_id, r.queue_offset).commitlog_offset == r.commitlog_offset)
                for key in m.keys if m.sys_flag & 0xC != ROLLBACK else ():
                    out.append(r.commitlog_offset in [h.commitlog_offset for h in s.query_key(key, m.topic)])
        taken += s.hot_put.taken if s.hot_put is not None else 0
    finally:
        s.close()
    return out, _files(root), taken


def _compare(tmp: str, monkeypatch, ops: list[tuple], config) -> int:
    runs = {}
    for way in ("python", "c"):
        monkeypatch.undo()
        use_codec(monkeypatch, way)
        runs[way] = _run(os.path.join(tmp, way), ops, config)
    (py_out, py_files, py_taken), (c_out, c_files, c_taken) = runs["python"], runs["c"]
    assert py_taken == 0
    assert c_out == py_out
    assert sorted(c_files) == sorted(py_files)
    for path in py_files:
        assert c_files[path] == py_files[path], path
    return c_taken


@pytest.mark.parametrize("flavor", ["xxhash", "rocketmq"])
@pytest.mark.parametrize("record_crc", [True, False])
def test_c_puts_write_what_python_puts_write(tmp_path, monkeypatch, flavor, record_crc):
    ops = _ops(seed=len(flavor) * 2 + record_crc)
    puts = sum(op[0] == "put" for op in ops)
    taken = _compare(str(tmp_path), monkeypatch, ops, small_config(flavor=flavor, record_crc=record_crc))
    # it took the common puts and declined the others (a queue's first put after its tail
    # was written out, here or by the flush every half second, a transaction, the delay
    # topic, a subclass, a roll of any file)
    assert puts // 10 < taken < puts


def test_the_common_put_is_taken_in_one_call(tmp_path, monkeypatch):
    """Puts into open queues: all but each queue's first (which opens it), the puts whose
    full tail goes to the files first among them (1000 puts to 2 queues fill 4 tails)."""
    use_codec(monkeypatch, "c")
    config = small_config(index_entries=100_000, flush_cq_interval_ms=3_600_000,  # no tail written out by time
                          commitlog_file_size=1 << 20)  # (no roll)
    with MessageStore(str(tmp_path), config) as s:
        for i in range(1000):
            s.put(Message.create("T", b"x" * 20, queue_id=i % 2, keys=[f"k{i}"], tags="t"))
        assert s.hot_put is not None and s.hot_put.taken == 998
        for q in range(2):
            cq = s.consume_queues.if_open(("T", q))
            assert cq is not None and cq._tail[0] == 2 * (TAIL_MAX // UNIT_SIZE) * UNIT_SIZE  # written out twice
            assert [s.get("T", q, i).body for i in (0, 203, 204, 499)] == [b"x" * 20] * 4


def _tail_full(s: MessageStore, topic: str) -> ConsumeQueue:
    """Puts into (topic, 0) until its tail has no room for one more unit."""
    for i in range(TAIL_MAX // UNIT_SIZE):
        s.put(Message.create(topic, b"fill %d" % i, keys=[f"f{i}"]))
    cq = s.consume_queues.if_open((topic, 0))
    assert cq is not None and not cq.takes(UNIT_SIZE)
    return cq


@pytest.mark.parametrize("way", ["c", "python"])
def test_a_full_tail_that_cannot_be_written_out_refuses_the_put_before_any_byte(tmp_path, monkeypatch, way):
    """The C call writes a full tail out with the queue's own ensure_room; when that fails
    (no room on the disk) the put is refused with its error as in Python, nothing of the
    message is written, and the next put, once there is room, goes on where the queue was."""
    use_codec(monkeypatch, way)
    root = str(tmp_path)
    with MessageStore(root, small_config(index_entries=5000, flush_cq_interval_ms=3_600_000)) as s:
        cq = _tail_full(s, "T")
        ensure_room = ConsumeQueue.ensure_room
        calls = []

        def full_disk(self, n=1):
            calls.append(n)
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(ConsumeQueue, "ensure_room", full_disk)
        before, end, tail = _files(root), s.commitlog.max_offset, cq._tail
        taken = s.hot_put.taken if s.hot_put is not None else 0
        with pytest.raises(OSError) as refused:
            s.put(Message.create("T", b"refused", keys=["refused"]))
        assert refused.value.errno == errno.ENOSPC and calls == ([1, 1] if way == "c" else [1])
        assert (s.commitlog.max_offset, cq._tail, s.max_offset("T", 0)) == (end, tail, TAIL_MAX // UNIT_SIZE)
        assert _files(root) == before and s.query_key("refused", "T") == []
        monkeypatch.setattr(ConsumeQueue, "ensure_room", ensure_room)
        r = s.put(Message.create("T", b"taken", keys=["taken"]))
        assert r.queue_offset == TAIL_MAX // UNIT_SIZE and r.commitlog_offset == end
        assert s.get("T", 0, r.queue_offset).body == b"taken"
        assert [h.commitlog_offset for h in s.query_key("taken", "T")] == [end]
        if way == "c":
            assert s.hot_put.taken == taken + 1 and cq._tail[2] == UNIT_SIZE


def test_put_nowait_declines_a_full_tail_without_writing_it_out(tmp_path, monkeypatch):
    """put_nowait never does I/O: a full tail makes its C call decline (the Python check
    after it declines as well), and `put` then writes the tail out and the message."""
    use_codec(monkeypatch, "c")
    with MessageStore(str(tmp_path), small_config(index_entries=5000, flush_cq_interval_ms=3_600_000)) as s:
        cq = _tail_full(s, "T")
        tail, taken = cq._tail, s.hot_put.taken
        msg = Message.create("T", b"later")
        assert s.put_nowait(msg) is None
        assert cq._tail is tail and s.hot_put.taken == taken and s.max_offset("T", 0) == TAIL_MAX // UNIT_SIZE
        assert s.put(msg).queue_offset == TAIL_MAX // UNIT_SIZE and s.hot_put.taken == taken + 1


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 1 << 30), flavor=st.sampled_from(["xxhash", "rocketmq"]), record_crc=st.booleans(),
       cl_size=st.sampled_from([4096, 64 * 1024]), units=st.sampled_from([7, 100]))
def test_c_and_python_puts_interleaved_agree(tmp_path_factory, seed, flavor, record_crc, cl_size, units):
    """Any mix of the operations, and files small enough to roll every few puts."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        _compare(str(tmp_path_factory.mktemp("hot")), monkeypatch, _ops(seed, 120),
                 small_config(flavor=flavor, record_crc=record_crc, commitlog_file_size=cl_size,
                              consume_queue_units=units, index_entries=20))


def test_threads_putting_at_once_leave_every_queue_whole(tmp_path, monkeypatch):
    """C puts from four threads, Python puts (a subclass) and batches from a fifth, reads
    meanwhile: every queue's offsets are given once each, without a gap, and every result
    reads back as the message it was given for."""
    use_codec(monkeypatch, "c")
    got: dict[bytes, tuple] = {}

    def putter(t: int, s: MessageStore) -> None:
        for i in range(400):
            cls = Other if i % 50 == 0 else Message
            m = cls.create("T", b"%d-%d" % (t, i), queue_id=i % 3, keys=[f"k{t}-{i}"])
            got[m.body] = tuple(s.put(m))

    def batcher(s: MessageStore) -> None:
        for i in range(60):
            msgs = [Message.create("T", b"b-%d-%d" % (i, j), queue_id=j % 3) for j in range(4)]
            for m, r in zip(msgs, s.put_batch(msgs)):
                got[m.body] = tuple(r)

    with MessageStore(str(tmp_path), small_config(index_entries=5000)) as s:
        threads = [threading.Thread(target=putter, args=(t, s)) for t in range(4)]
        threads.append(threading.Thread(target=batcher, args=(s,)))
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):  # reads while they put
            for q in range(3):
                try:
                    n = s.max_offset("T", q)
                except NotFound:  # not made yet
                    continue
                if n:
                    assert s.get("T", q, n - 1).topic == "T"
        for t in threads:
            t.join()
        assert s.hot_put.taken > 1000
        assert len(got) == 4 * 400 + 60 * 4
        for q in range(3):
            offsets = sorted(r[1] for body, r in got.items() if s.get_by_msgid(_msg_id(r)).queue_id == q)
            assert offsets == list(range(s.max_offset("T", q)))
        for body, r in got.items():
            stored = s.get_by_msgid(_msg_id(r))
            assert stored.body == body and stored.commitlog_offset == r[0]
            assert s.get("T", stored.queue_id, r[1]).body == body


def _msg_id(r: tuple) -> str:
    return writes.PutResult(*r).msg_id


def test_a_close_amid_c_puts_keeps_what_it_acknowledged(tmp_path, monkeypatch):
    """Threads put until the store closes under them: each put returns (and its message is
    there after a reopen) or says the store is closed; a close waits for the C calls inside."""
    use_codec(monkeypatch, "c")
    root = str(tmp_path)
    acked: list[tuple[bytes, tuple]] = []
    refused: list[str] = []
    started = threading.Barrier(4)

    def putter(t: int, s: MessageStore) -> None:
        started.wait()
        for i in range(10**9):
            body = b"%d-%d" % (t, i)
            try:
                acked.append((body, tuple(s.put(Message.create("T", body, queue_id=t)))))
            except StoreError as e:
                refused.append(str(e))
                return

    s = MessageStore(root, small_config(index_entries=5000)).open()
    threads = [threading.Thread(target=putter, args=(t, s)) for t in range(3)]
    for t in threads:
        t.start()
    started.wait()
    while len(acked) < 300:
        pass
    s.close()
    for t in threads:
        t.join()
    assert refused == ["the store is closed"] * 3
    with MessageStore(root, small_config(index_entries=5000)) as s:
        for body, r in acked:
            assert s.get_by_msgid(_msg_id(r)).body == body


def test_the_store_clock_read_in_c_is_the_wall_clock_never_behind(tmp_path, monkeypatch):
    """The C call reads the store's default clock itself (time.time_ns() // 10**6): a put's
    store time is the wall clock's at the put, never behind the store's last one."""
    use_codec(monkeypatch, "c")
    with MessageStore(str(tmp_path), small_config()) as s:
        s.put(Message.create("T", b"first"))  # the queue opened (Python's path)
        taken = s.hot_put.taken
        before = time.time_ns() // 1_000_000
        r = s.put(Message.create("T", b"now"))
        after = time.time_ns() // 1_000_000
        assert s.hot_put.taken == taken + 1 and before <= r.store_timestamp <= after
        ahead = after + 3_600_000  # a store time an earlier clock left ahead of this one
        s._last_store_ts = ahead
        r = s.put(Message.create("T", b"later"))
        assert s.hot_put.taken == taken + 2 and r.store_timestamp == ahead
        assert s.get("T", 0, r.queue_offset).store_timestamp == ahead


def test_an_index_file_class_changed_since_is_read_through_its_attributes(tmp_path, monkeypatch):
    """The C put reads and writes an IndexFile's counters at their slots only while its
    class is as it was when the store opened: a field made a property since is read and
    written through it (by C and Python alike), and the put still lands whole."""
    use_codec(monkeypatch, "c")
    with MessageStore(str(tmp_path), small_config(index_entries=5000)) as s:
        s.put(Message.create("T", b"first", keys=["k0"]))  # (the queue opened by Python's path)
        s.put(Message.create("T", b"slots", keys=["k1"]))
        assert s.hot_put.taken == 1
        seen = []
        slot = IndexFile.__dict__["_newest_ts"]
        monkeypatch.setattr(IndexFile, "_newest_ts", property(
            lambda f: seen.append("get") or slot.__get__(f), lambda f, v: seen.append("set") or slot.__set__(f, v)))
        r = s.put(Message.create("T", b"attributes", keys=["k2"]))
        assert s.hot_put.taken == 2 and seen == ["get", "set"]
        assert [h.commitlog_offset for h in s.query_key("k2", "T")] == [r.commitlog_offset]
        assert s.index.files[-1]._newest_ts == r.store_timestamp


def test_a_keyboard_interrupt_while_a_full_tail_is_written_out_is_raised(tmp_path, monkeypatch):
    """An interrupt (KeyboardInterrupt, SystemExit) raised while the C call writes a full tail
    out is not taken for a refusal: the put raises it, nothing of the message written."""
    use_codec(monkeypatch, "c")
    with MessageStore(str(tmp_path), small_config(index_entries=5000, flush_cq_interval_ms=3_600_000)) as s:
        _tail_full(s, "T")
        end = s.commitlog.max_offset

        def interrupted(self, n=1):
            raise KeyboardInterrupt

        monkeypatch.setattr(ConsumeQueue, "ensure_room", interrupted)
        with pytest.raises(KeyboardInterrupt):
            s.put(Message.create("T", b"interrupted"))
        assert s.commitlog.max_offset == end and s.max_offset("T", 0) == TAIL_MAX // UNIT_SIZE
