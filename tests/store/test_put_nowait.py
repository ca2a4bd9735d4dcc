"""put_nowait: the put the mount's event loop makes. It writes put's bytes when nothing can make
it wait, and otherwise writes nothing and says so (None), so the caller puts from a thread."""

import threading

import pytest

from mqfs.store import Message, MessageStore, StoreConfig
from mqfs.store.errors import ReadOnlyStore
from tests.store.helpers import data_files

STORE_TS = 1_700_000_000_123
CL_SIZE = 64 * 1024


def _config(**kw) -> StoreConfig:
    return StoreConfig(commitlog_file_size=CL_SIZE, consume_queue_units=1000, index_slots=64,
                       index_entries=1000, **kw)


def _messages(n: int) -> list[Message]:
    return [Message.create("T", b"x" * (i * 97 % 700), queue_id=i % 2, keys=[f"k{i}"],
                           tags="red" if i % 3 else None,
                           properties={"UNIQ_KEY": f"U{i}"} if i % 4 == 0 else {},
                           born_timestamp=STORE_TS - i)
            for i in range(n)]



def test_it_writes_the_bytes_put_writes(tmp_path):
    """Across file rolls (which it leaves to put) the store is byte for byte put's, and each
    message it stored is readable and findable when it returns."""
    msgs = _messages(300)  # about 100 KiB: the CommitLog rolls once
    taken = 0
    for way in ("put", "nowait"):
        with MessageStore(str(tmp_path / way), _config()) as s:
            s.create_topic("T", 2)
            s.clock = lambda: STORE_TS
            for m in msgs:
                if way == "put":
                    s.put(m)
                    continue
                r = s.put_nowait(m)
                if r is None:
                    s.put(m)
                    continue
                taken += 1
                assert s.get("T", m.queue_id, r.queue_offset).body == m.body
                assert r.commitlog_offset in [h.commitlog_offset for h in s.query_key(m.keys[0], "T")]
    assert taken > 250  # only the first puts (queues not open yet) and the roll go to put
    assert data_files(str(tmp_path / "put")) == data_files(str(tmp_path / "nowait"))


@pytest.fixture
def store(tmp_path):
    with MessageStore(str(tmp_path / "s"), _config()) as s:
        s.create_topic("T", 2)
        s.put(Message.create("T", b"first", queue_id=0))
        yield s


def _unchanged(s: MessageStore, call) -> None:
    before = s.max_offset("T", 0), s.commitlog.max_offset
    assert call() is None
    assert (s.max_offset("T", 0), s.commitlog.max_offset) == before


def test_a_held_put_lock_is_not_waited_for(store):
    msg = Message.create("T", b"b", queue_id=0)
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with store.put_lock:
            held.set()
            done.wait()

    t = threading.Thread(target=hold)
    t.start()
    held.wait()
    try:
        _unchanged(store, lambda: store.put_nowait(msg))
    finally:
        done.set()
        t.join()
    assert store.put_nowait(msg) is not None


def test_a_roll_is_left_to_put(store):
    body = b"y" * 2000
    while True:  # fill the first file until the next record would not fit
        if store.put_nowait(Message.create("T", body, queue_id=0)) is None:
            break
    _unchanged(store, lambda: store.put_nowait(Message.create("T", body, queue_id=0)))
    r = store.put(Message.create("T", body, queue_id=0))
    assert r.commitlog_offset == CL_SIZE  # put rolled
    assert store.put_nowait(Message.create("T", body, queue_id=0)) is not None


def test_a_queue_not_open_is_left_to_put(store):
    _unchanged(store, lambda: store.put_nowait(Message.create("T", b"q1", queue_id=1)))
    store.put(Message.create("T", b"q1", queue_id=1))
    assert store.put_nowait(Message.create("T", b"q1 again", queue_id=1)) is not None


@pytest.mark.parametrize("option", [{"flush_mode": "sync"}, {"transient_pool": True}])
def test_puts_that_wait_for_a_flush_are_left_to_put(tmp_path, option):
    with MessageStore(str(tmp_path / "s"), _config(**option)) as s:
        s.create_topic("T", 1)
        s.put(Message.create("T", b"first", queue_id=0))
        before = s.commitlog.max_offset
        assert s.put_nowait(Message.create("T", b"b", queue_id=0)) is None
        assert s.commitlog.max_offset == before


def test_a_read_only_store_refuses_as_put_does(tmp_path, store):
    root = store.root
    store.close()
    with MessageStore(root, _config(read_only=True)) as s, pytest.raises(ReadOnlyStore):
        s.put_nowait(Message.create("T", b"b", queue_id=0))
