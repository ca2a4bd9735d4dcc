"""put_batch against put: the same bytes on disk, all-or-nothing, read-your-writes."""

import errno
import gc
import json
import os
import resource
import signal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqfs.store import InvalidMessage, Message, MessageStore, writes
from mqfs.store.files import unit_flush
from mqfs.store.files.consume_queue import TAIL_MAX, ConsumeQueue
from mqfs.store.format.layout import TRANSACTION_PREPARED, TRANSACTION_ROLLBACK
from tests.store.helpers import file_hashes, small_config

STORE_TS = 1_700_000_000_000


def _pinned(root: str, **cfg) -> MessageStore:
    s = MessageStore(root, small_config(**cfg))
    s.clock = lambda: STORE_TS  # both stores stamp the same store time
    return s  # opened by `with`


def _contents(root: str, sub: str) -> list[tuple[str, bytes]]:
    """(path, bytes) of every file under root/sub in path order. IndexFile names are the
    wall-clock time the file was made, so for them only the order counts, not the name."""
    out = []
    for dirpath, _, names in os.walk(os.path.join(root, sub)):
        for n in names:
            path = os.path.join(dirpath, n)
            with open(path, "rb") as f:
                out.append((os.path.relpath(path, root), f.read()))
    out.sort()
    return [("", data) for _, data in out] if sub == "index" else out


# property text: anything but the two separator characters (and lone surrogates)
text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
               min_size=1, max_size=12)
names = text.filter(lambda t: t != "__CRC32#")  # reserved for the checksum: refused by both
message = st.builds(
    lambda topic, q, body, keys, tags, flag, uniq, host, extra, fields: Message.create(
        topic, body, queue_id=q, keys=keys, tags=tags, sys_flag=flag, born_host=host,
        properties={**({"UNIQ_KEY": uniq} if uniq else {}), **extra}, **fields),
    # a v2 record (topic over 127 characters) and an IPv6 host take the per-record encoder
    # and the delay topic's units hold delivery times (DELAY among the extra properties)
    st.sampled_from(["TopicA", "TopicB", "C", "TopicA", "%RETRY%" + "g" * 130, "SCHEDULE_TOPIC_XXXX"]),
    st.integers(0, 2),
    st.binary(max_size=3000),
    st.lists(st.sampled_from(["k1", "k2", "k3", "k4", "ключ", "鍵"]), max_size=3),
    st.sampled_from([None, "red", "blue", "grün"]),
    st.sampled_from([0, 0, 0, TRANSACTION_PREPARED, TRANSACTION_ROLLBACK]),
    st.sampled_from([None, "u1", "u2"]),
    st.sampled_from([("127.0.0.1", 1)] * 5 + [("::1", 2)]),
    st.dictionaries(st.sampled_from(["DELAY"]) | names, st.sampled_from(["1", "3", "99", "0", "x"]) | text,
                    max_size=2),
    st.fixed_dictionaries({"born_timestamp": st.integers(1, 1 << 62)}, optional={
        "flag": st.integers(-(1 << 31), (1 << 31) - 1), "reconsume_times": st.integers(0, 16),
        "prepared_transaction_offset": st.integers(0, 1 << 40)}))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batches=st.lists(st.lists(message, min_size=1, max_size=40), min_size=1, max_size=6),
       record_crc=st.booleans(), transient=st.booleans())
def test_put_batch_writes_the_bytes_single_puts_write(tmp_path_factory, batches, record_crc,
                                                      transient):
    """Three stores of the same messages: put one by one, put_batch as it chooses (a small
    batch as puts under one lock), and put_batch on the columnar path whatever the size."""
    one = str(tmp_path_factory.mktemp("one"))
    many = str(tmp_path_factory.mktemp("many"))
    columnar = str(tmp_path_factory.mktemp("columnar"))
    with _pinned(one, record_crc=record_crc, transient_pool=transient) as s:
        singles = [s.put(m) for batch in batches for m in batch]
    with _pinned(many, record_crc=record_crc, transient_pool=transient) as s:
        batched = [r for batch in batches for r in s.put_batch(batch)]
    small, writes.SMALL_BATCH = writes.SMALL_BATCH, 1
    try:
        with _pinned(columnar, record_crc=record_crc, transient_pool=transient) as s:
            in_columns = [r for batch in batches for r in s.put_batch(batch)]
    finally:
        writes.SMALL_BATCH = small
    assert batched == singles and in_columns == singles
    for other in (many, columnar):
        for sub in ("commitlog", "consumequeue", "index"):
            assert _contents(other, sub) == _contents(one, sub), sub
        topics = os.path.join("config", "topics.json")  # queues of prepared-only messages too
        assert json.load(open(os.path.join(other, topics)))["topicConfigTable"] == \
            json.load(open(os.path.join(one, topics)))["topicConfigTable"]


def test_a_batch_rolls_commitlog_files_and_reads_back_at_once(tmp_path):
    msgs = [Message.create("T", bytes([i % 251]) * 1500, queue_id=i % 3, keys=[f"key-{i}"],
                           tags=f"t{i % 2}") for i in range(200)]  # 300 KB: several files
    with _pinned(str(tmp_path)) as s:
        results = s.put_batch(msgs)
        assert len(s.commitlog.queue.files) > 3
        for m, r in zip(msgs, results):
            got = s.get("T", m.queue_id, r.queue_offset)
            assert bytes(got.body) == m.body and got.commitlog_offset == r.commitlog_offset
            assert [x.commitlog_offset for x in s.query_key(m.keys[0], "T")] == [r.commitlog_offset]


def test_one_invalid_message_writes_nothing(tmp_path):
    root = str(tmp_path)
    with _pinned(root) as s:
        s.put(Message.create("T", b"first", keys=["a"]))
        s.flush()
        before = file_hashes(root, skip=("checkpoint", "abort", "lock"))
        good = [Message.create("T", b"x" * 10, keys=["b"]) for _ in range(5)]
        with pytest.raises(InvalidMessage):
            s.put_batch(good + [Message.create("bad topic!", b"y")] + good)
        with pytest.raises(InvalidMessage):
            s.put_batch(good + [Message.create("T", b"z", queue_id=-1)])
        for bad in ({"p": "a\x01b"}, {"p\x02": "v"}, {"p": "\udc80"}, {"__CRC32#": "1"},
                    {"p": "v" * 40000}):
            with pytest.raises(InvalidMessage):
                s.put_batch(good + [Message.create("T", b"z", properties=bad)])
            with pytest.raises(InvalidMessage):
                s.put(Message.create("T", b"z", properties=bad))
        s.flush()
        assert file_hashes(root, skip=("checkpoint", "abort", "lock")) == before
        assert s.max_offset("T", 0) == 1


@pytest.mark.parametrize("count,size", [(60, 1500), (20, 4000)])  # columnar, and as puts
def test_a_batch_whose_roll_meets_a_full_disk_is_refused_whole(tmp_path, count, size):
    """The CommitLog files a batch rolls into are made before any of its bytes, so a full
    disk refuses it whole (a writer retrying it stores each message once); the made files
    are removed again and the store is byte for byte as before."""
    root = str(tmp_path)
    msgs = [Message.create("T", bytes(size), keys=[f"k{i}"]) for i in range(count)]  # 2 files
    with _pinned(root) as s:
        s.put(Message.create("T", b"first"))
        s.flush()
        before = file_hashes(root, skip=("checkpoint", "abort", "lock"))
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (32 * 1024, hard))  # no new CommitLog file
        try:
            with pytest.raises(OSError):
                s.put_batch(msgs)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            signal.signal(signal.SIGXFSZ, old)
        s.flush()
        assert file_hashes(root, skip=("checkpoint", "abort", "lock")) == before
        assert s.max_offset("T", 0) == 1
        assert s.query_key("k0", "T") == []
        results = s.put_batch(msgs)  # room again: the retry stores each message once
        assert [r.queue_offset for r in results] == list(range(1, count + 1))
    with MessageStore(root, small_config()) as s:
        assert s.max_offset("T", 0) == count + 1
        assert [m.queue_offset for m in s.query_key(f"k{count - 1}", "T")] == [count]


def test_a_batch_whose_second_roll_fails_removes_the_file_made_for_its_first(tmp_path, monkeypatch):
    """Two rolls: the second file cannot be made, so the first, made for this batch, is
    removed again and nothing of the batch is written."""
    from mqfs.store.files import mapped_file
    root = str(tmp_path)
    msgs = [Message.create("T", bytes(1500)) for _ in range(90)]  # 3 files
    with _pinned(root) as s:
        s.put(Message.create("T", b"first"))
        s.flush()
        before = file_hashes(root, skip=("checkpoint", "abort", "lock"))
        real, calls = mapped_file._allocate, []

        def second_fails(fd: int, path: str, size: int) -> None:
            calls.append(path)
            if len(calls) == 2:
                os.close(fd)
                os.unlink(path)
                raise OSError(errno.ENOSPC, "No space left on device", path)
            real(fd, path, size)
        monkeypatch.setattr(mapped_file, "_allocate", second_fails)
        with pytest.raises(OSError):
            s.put_batch(msgs)
        monkeypatch.undo()
        assert len(calls) == 2
        s.flush()
        assert file_hashes(root, skip=("checkpoint", "abort", "lock")) == before
        assert s.max_offset("T", 0) == 1


def test_a_batch_over_recorded_open_and_many_new_queues_gives_each_its_next_offsets(tmp_path):
    """put_batch finds a batch's queues together and makes its new ones together: a queue
    only recorded at the open continues at its end, an open one too, and each of 1,100 new
    queues starts at 0, all read back after a reopen."""
    root = str(tmp_path)
    with _pinned(root) as s:
        s.put_batch([Message.create("Old", b"o", queue_id=q) for q in range(2) for _ in range(3)])
    with _pinned(root) as s:
        assert s.consume_queues.recorded(("Old", 0)) is not None  # not opened by the open
        s.put(Message.create("Old", b"p", queue_id=1))  # opened now
        batch = ([Message.create("Old", b"a", queue_id=0), Message.create("Old", b"b", queue_id=1)]
                 + [Message.create(f"N{i}", f"n{i}-{k}".encode(), queue_id=i % 3)
                    for i in range(1100) for k in range(2)])
        results = s.put_batch(batch)
        assert [r.queue_offset for r in results[:2]] == [3, 4]
        assert [r.queue_offset for r in results[2:]] == [0, 1] * 1100
        assert len(s.consume_queues) == 2 + 1100
    with _pinned(root) as s:
        assert s.get("Old", 0, 3).body == b"a" and s.get("Old", 1, 4).body == b"b"
        assert [s.get("N1099", 1099 % 3, k).body for k in range(2)] == [b"n1099-0", b"n1099-1"]
        assert s.max_offset("N7", 1) == 2 and s.topic_table.queues["N7"] == 2


def _queue_objects() -> int:
    gc.collect()
    return sum(isinstance(o, ConsumeQueue) for o in gc.get_objects())


def test_a_batchs_new_queues_are_units_alone_until_used_and_lose_nothing(tmp_path):
    """A batch's new queues are held as their units, no ConsumeQueue object each (a queue
    given more than a tail's worth is made one): served at once, continued by the next
    batch at the next offset, written out by the flush and read back after a reopen."""
    root = str(tmp_path)
    spread = [Message.create(f"N{i // 4}", b"n%d" % i, queue_id=i % 4) for i in range(2000)]
    big = [Message.create("Big", b"b%d" % k) for k in range(TAIL_MAX // 20 + 1)]
    with _pinned(root, flush_cq_interval_ms=3_600_000) as s:
        before = _queue_objects()
        results = s.put_batch(spread + big)
        assert [r.queue_offset for r in results] == [0] * 2000 + list(range(len(big)))
        assert _queue_objects() == before + 1  # Big alone
        assert len(s.consume_queues) == 2001 and ("N7", 3) in s.consume_queues
        assert bytes(s.get("N499", 3, 0).body) == b"n1999" and s.max_offset("N7", 3) == 1
        assert _queue_objects() == before + 3  # and the two read
        again = s.put_batch([Message.create(f"N{i // 4}", b"m%d" % i, queue_id=i % 4)
                             for i in range(2000)])
        assert [r.queue_offset for r in again] == [1] * 2000  # never reused
        assert not os.path.exists(os.path.join(root, "consumequeue", "N7"))
        s.flush()
        assert os.path.getsize(os.path.join(root, "consumequeue", "N7", "3", "0" * 20)) > 0
    with _pinned(root) as s:
        assert [bytes(m.body) for m in s.get_range("N7", 3, 0, 5)] == [b"n31", b"m31"]
        assert s.max_offset("Big", 0) == len(big) and s.max_offset("N0", 0) == 2


def test_a_new_queue_a_reader_opens_between_the_plan_and_the_units_gets_them(tmp_path):
    """A reader may ask for a new queue while its batch is being written (after the plan
    registered it, before its units came): the object it made takes the units."""
    root = str(tmp_path)
    with _pinned(root) as s:
        seen = []

        def clock() -> int:  # read between the plan and the dispatch of the batch
            seen.append(s.max_offset("A", 1))  # a reader, making A/1's object
            return STORE_TS

        s.clock = clock
        s.put_batch([Message.create("A", b"a%d" % q, queue_id=q) for q in range(3)])
        assert seen == [0]
        assert [bytes(s.get("A", q, 0).body) for q in range(3)] == [b"a0", b"a1", b"a2"]
        assert s.put_batch([Message.create("A", b"x", queue_id=1)])[0].queue_offset == 1
    with _pinned(root) as s:
        assert [bytes(m.body) for m in s.get_range("A", 1, 0, 5)] == [b"a1", b"x"]


def test_new_queues_of_batches_buffer_no_more_than_the_bound_and_a_batch(tmp_path, monkeypatch):
    monkeypatch.setattr(unit_flush, "BUFFERED_MAX", 100 * 20)
    root = str(tmp_path)
    with _pinned(root, flush_cq_interval_ms=3_600_000) as s:
        for b in range(6):
            s.put_batch([Message.create(f"B{b}q{i}", b"v") for i in range(60)])
            s.get("B0q0", 0, 0)  # a reader made one object: it is written out all the same
        assert sum(cq.buffered for cq in s.consume_queues.opened().values()) <= (100 + 60) * 20
        assert os.path.exists(os.path.join(root, "consumequeue", "B0q0"))
        assert all(bytes(s.get(f"B{b}q{i}", 0, 0).body) == b"v" for b in range(6) for i in range(60))
