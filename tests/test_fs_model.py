"""The filesystem model without a kernel: names, inodes, attributes, listings, xattrs, writers."""

import errno
import inspect
import json
import stat

import pytest

from fusefs.errors import FsError
from fusefs.model import (GROUPS_INO, KEYS_INO, MSG_BIT, QUEUE_FIXED, ROOT_INO, TOPICS_INO,
                          Model, canonical_int, message_ino, split_ino)
from fusefs.writers import AppendWriter, JsonlWriter, OffsetWriter
from store import Message, MessageStore, StoreConfig


def small() -> StoreConfig:
    return StoreConfig(commitlog_file_size=1 << 20, consume_queue_units=1000, index_slots=1000,
                       index_entries=4000)


@pytest.fixture
def store(tmp_path):
    with MessageStore(str(tmp_path / "store"), small()) as s:
        s.create_topic("orders", 2)
        for i in range(6):
            s.put(Message.create("orders", b"body %d" % i, queue_id=i % 2, keys=[f"k{i}", "all"],
                                 tags="TagA" if i % 2 else None, properties={"p": str(i)}))
        yield s


@pytest.fixture
def model(store):
    return Model(store)


def errno_of(fn, *args) -> int:
    with pytest.raises(FsError) as info:
        fn(*args)
    return info.value.errno


def walk(model: Model, *names: str) -> int:
    ino = ROOT_INO
    for name in names:
        ino = model.lookup(ino, name.encode()).ino
    return ino


def test_fixed_inodes_and_dot_entries(model):
    assert walk(model, "topics") == TOPICS_INO
    assert walk(model, "keys") == KEYS_INO
    assert walk(model, "groups") == GROUPS_INO
    q = walk(model, "topics", "orders", "0")
    assert model.lookup(q, b".").ino == q
    assert model.lookup(q, b"..").ino == walk(model, "topics", "orders")
    assert model.lookup(ROOT_INO, b"..").ino == ROOT_INO
    assert errno_of(model.lookup, ROOT_INO, b"nothing") == errno.ENOENT


def test_message_inode_is_computed_from_queue_and_offset(model, store):
    a = model.lookup(walk(model, "topics", "orders", "1"), b"2")
    is_link, qidx, offset = split_ino(a.ino)
    assert a.ino & MSG_BIT and not is_link and offset == 2
    assert a.ino == message_ino(qidx, 2)
    msg = store.get("orders", 1, 2)
    assert a.size == len(msg.body) == len(b"body 5")
    assert a.mtime_ns == msg.store_timestamp * 1_000_000
    assert stat.S_ISREG(a.mode) and a.mode & 0o777 == 0o444
    assert model.getattr(a.ino).size == a.size
    assert bytes(model.message(a.ino).body) == b"body 5"


@pytest.mark.parametrize("name", [b"007", b"-1", b"3", b"99999", b"1e3", b" 1", b"0x1"])
def test_offsets_outside_the_queue_or_not_canonical_are_enoent(model, name):
    q = walk(model, "topics", "orders", "0")
    assert errno_of(model.lookup, q, name) == errno.ENOENT


def test_canonical_int():
    assert [canonical_int(n) for n in (b"0", b"17", b"017", b"", b"-3", b"1" * 19)] == \
        [0, 17, None, None, None, None]


def test_over_long_names_are_enametoolong(model):
    assert errno_of(model.lookup, TOPICS_INO, b"a" * 256) == errno.ENAMETOOLONG
    assert errno_of(model.mkdir, TOPICS_INO, b"a" * 128) == errno.ENAMETOOLONG


@pytest.mark.parametrize("name,err", [
    (b"bad.name", errno.EINVAL), (b"..", errno.EINVAL), (b"a/b", errno.EINVAL),
    (b"sp ace", errno.EINVAL), (b"orders", errno.EEXIST), (b"\xff", errno.ENOENT),
])
def test_mkdir_topic_refusals_change_nothing(model, store, name, err):
    before = store.topics()
    assert errno_of(model.mkdir, TOPICS_INO, name) == err
    assert store.topics() == before


def test_mkdir_creates_topics_and_queues(model, store):
    t = model.mkdir(TOPICS_INO, b"fresh").ino
    assert store.topics()["fresh"] == 1
    assert model.mkdir(t, b"2").ino == walk(model, "topics", "fresh", "2")
    assert store.topics()["fresh"] == 3
    assert errno_of(model.mkdir, t, b"x") == errno.EINVAL
    assert errno_of(model.mkdir, t, b"1") == errno.EEXIST
    q = walk(model, "topics", "fresh", "0")
    for parent in (ROOT_INO, KEYS_INO, GROUPS_INO, q):
        assert errno_of(model.mkdir, parent, b"9") == errno.EPERM


def consume(listing, per_call: int) -> list[bytes]:
    """Read a listing the way the kernel does: a few entries per call, resuming by cookie."""
    names, cookie = [], 0
    while True:
        batch = []
        for name, attr, nxt in listing.entries(cookie):
            batch.append((name, nxt))
            if len(batch) == per_call:
                break
        if not batch:
            return names
        names += [n for n, _ in batch]
        cookie = batch[-1][1]


def test_queue_listing_streams_and_resumes(model, store):
    store.put_batch([Message.create("orders", b"x", queue_id=0) for _ in range(500)])
    q = walk(model, "topics", "orders", "0")
    listing = model.listing(q)
    assert inspect.isgenerator(listing.entries(0))
    names = consume(listing, 7)
    assert names[:QUEUE_FIXED] == [b".", b"..", b"append", b"append.jsonl"]
    assert names[QUEUE_FIXED:] == [b"%d" % i for i in range(503)]


def test_listing_sees_messages_added_while_it_runs(model, store):
    q = walk(model, "topics", "orders", "0")
    listing = model.listing(q)
    first = list(listing.entries(0))
    store.put(Message.create("orders", b"late", queue_id=0))
    resumed = [name for name, _, _ in listing.entries(first[-1][2])]
    assert resumed == [b"3"]


def test_keys_are_symlinks_to_true_hits(model, store):
    kd = walk(model, "keys", "all")
    names = [n for n, _, _ in model.listing(kd).entries(2)]
    assert names == [b"orders:0:0", b"orders:0:1", b"orders:0:2",
                     b"orders:1:0", b"orders:1:1", b"orders:1:2"]
    link = model.lookup(walk(model, "keys", "k3"), b"orders:1:1")
    assert stat.S_ISLNK(link.mode)
    assert model.readlink(link.ino) == b"../../topics/orders/1/1"
    assert errno_of(model.lookup, walk(model, "keys", "k3"), b"orders:1:0") == errno.ENOENT
    assert errno_of(model.lookup, KEYS_INO, b"no-such-key") == errno.ENOENT


def test_message_xattrs(model, store):
    ino = model.lookup(walk(model, "topics", "orders", "1"), b"0").ino
    msg = store.get("orders", 1, 0)
    x = model.xattrs(ino)
    assert x[b"user.keys"] == b"k1 all"
    assert x[b"user.tags"] == b"TagA"
    assert x[b"user.msgid"] == msg.msg_id.encode()
    assert x[b"user.queue_offset"] == b"0"
    assert x[b"user.commitlog_offset"] == str(msg.commitlog_offset).encode()
    assert x[b"user.store_timestamp"] == str(msg.store_timestamp).encode()
    assert x[b"user.born_timestamp"] == str(msg.born_timestamp).encode()
    assert json.loads(x[b"user.properties"])["p"] == "1"
    untagged = model.lookup(walk(model, "topics", "orders", "0"), b"0").ino
    assert errno_of(model.xattr, untagged, b"user.tags") == errno.ENODATA
    assert errno_of(model.xattr, ino, b"security.capability") == errno.ENODATA
    assert int(model.xattr(ROOT_INO, b"user.mqfs.pid")) > 0


def test_group_offsets(model, store):
    f = walk(model, "groups", "g1", "orders", "1")
    assert model.getattr(f).size == 0
    store.commit_offset("g1", "orders", 1, 2)
    assert model.offset_text(model.nodes.get(f)) == b"2\n"
    assert [n for n, _, _ in model.listing(GROUPS_INO).entries(2)] == [b"g1"]
    assert errno_of(model.lookup, GROUPS_INO, b"bad group") == errno.ENOENT


def test_append_writer_refuses_too_large_and_stays_failed():
    w = AppendWriter("t", 0, limit=10)
    assert w.write(b"12345") == 5
    with pytest.raises(FsError) as info:
        w.write(b"678901")
    assert info.value.errno == errno.EFBIG
    with pytest.raises(FsError):
        w.take()  # nothing half-written becomes a message


def test_append_writer_one_message_per_take():
    w = AppendWriter("t", 3, limit=100)
    w.write(b"ab")
    w.write(b"cd")
    [m] = w.take()
    assert (m.body, m.topic, m.queue_id) == (b"abcd", "t", 3)
    assert w.take() == []


def test_jsonl_writer_takes_each_line_when_its_newline_arrives():
    w = JsonlWriter("t", 1, limit=100)
    [m] = w.write(b'{"body": "a", "keys": ["k1", "k2"], "tags": "T"}\n{"body_b64": "aGk=",')
    assert (m.body, m.keys, m.tags, m.queue_id) == (b"a", ["k1", "k2"], "T", 1)
    assert w.write(b' "keys": "x y"}') == []
    [m2] = w.take()  # the last line needs no newline
    assert (m2.body, m2.keys) == (b"hi", ["x", "y"])
    assert w.take() == []


def test_jsonl_writer_fails_the_whole_write_and_stays_failed():
    w = JsonlWriter("t", 0, limit=100)
    with pytest.raises(FsError) as info:
        w.write(b'{"body": "ok"}\n{"body": 5}\n')
    assert info.value.errno == errno.EINVAL
    with pytest.raises(FsError):
        w.write(b'{"body": "later"}\n')


@pytest.mark.parametrize("line,err", [
    (b'not json', errno.EINVAL), (b'[1]', errno.EINVAL), (b'{"body": "a", "x": 1}', errno.EINVAL),
    (b'{"body": "a", "body_b64": "YQ=="}', errno.EINVAL), (b'{"body_b64": "!!"}', errno.EINVAL),
    (b'{"body": "' + b"x" * 101 + b'"}', errno.EFBIG), (b'{"body": "a", "keys": [1]}', errno.EINVAL),
])
def test_jsonl_bad_lines(line, err):
    w = JsonlWriter("t", 0, limit=100)
    with pytest.raises(FsError) as info:
        w.write(line + b"\n")
    assert info.value.errno == err


def test_jsonl_body_b64_and_properties():
    w = JsonlWriter("t", 0, limit=100)
    [m] = w.write(b'{"body_b64": "AAEC", "properties": {"a": "b"}}\n')
    assert m.body == b"\x00\x01\x02" and m.properties["a"] == "b"


def test_offset_writer():
    w = OffsetWriter()
    w.write(0, b"12\n")
    assert w.take() == 12
    assert w.take() is None
    with pytest.raises(FsError) as info:
        OffsetWriter().write(0, b"abc")
    assert info.value.errno == errno.EINVAL


def test_errno_mapping_of_store_and_os_errors():
    from fusefs.errors import errno_for
    from store.errors import CorruptionError, InvalidMessage, NotFound

    assert errno_for(NotFound("x")) == errno.ENOENT
    assert errno_for(InvalidMessage("bad topic")) == errno.EINVAL
    assert errno_for(CorruptionError("crc")) == errno.EIO
    assert errno_for(OSError(errno.ENOSPC, "full")) == errno.ENOSPC
    assert errno_for(FsError(errno.EFBIG)) == errno.EFBIG
    assert errno_for(KeyError("bug")) is None


def test_guard_turns_a_bug_into_eio_and_logs_it(caplog):
    import pyfuse3
    import trio

    from fusefs.ops import guarded

    @guarded
    async def handler():
        raise KeyError("a bug")

    @guarded
    async def refusing():
        raise FsError(errno.EPERM)

    with pytest.raises(pyfuse3.FUSEError) as info:
        trio.run(handler)
    assert info.value.errno == errno.EIO
    assert "handler failed unexpectedly" in caplog.text and "KeyError" in caplog.text
    with pytest.raises(pyfuse3.FUSEError) as info:
        trio.run(refusing)
    assert info.value.errno == errno.EPERM
