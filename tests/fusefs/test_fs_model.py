"""The filesystem model without a kernel: names, inodes, attributes, listings, xattrs, writers."""

import errno
import functools
import inspect
import json
import os
import stat
from datetime import UTC, datetime

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from mqfs.fusefs.errors import FsError
from mqfs.fusefs.handles import Behind, Opening
from mqfs.fusefs.inodes import (
    GROUPS_INO,
    KEYS_INO,
    MSG_BIT,
    ROOT_INO,
    STATUS_INO,
    TOPICS_INO,
    canonical_int,
    message_ino,
    split_ino,
)
from mqfs.fusefs.keynames import key_name, name_key
from mqfs.fusefs.kinds import KINDS
from mqfs.fusefs.kinds.groups import position
from mqfs.fusefs.listings import QUEUE_FIXED
from mqfs.fusefs.model import Model
from mqfs.fusefs.spool import SPILL_AT, Budget, Spool
from mqfs.fusefs.writers import AppendWriter, JsonlWriter, LinesWriter, OffsetWriter
from mqfs.store import Message, MessageStore, StoreConfig
from mqfs.store.files.staging import Staging
from mqfs.store.format import compiled
from mqfs.store.format.jsonl import decode_line


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


# what needs the C line decoder (MQFS_PURE_PYTHON=1 runs without it: writes go as before)
needs_c_lines = pytest.mark.skipif(compiled.PURE, reason="MQFS_PURE_PYTHON=1: no C decoder")


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
    assert bytes(model.messages.message(a.ino).body) == b"body 5"


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
    assert store.topics()["fresh"] == 0  # an empty directory
    assert errno_of(model.lookup, t, b"0") == errno.ENOENT
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
        for name, _attr, nxt in listing.entries(cookie):
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
    assert names[:QUEUE_FIXED] == [b".", b"..", b"append", b"append.jsonl", b"append.lines", b"tmp", b"at", b"tags"]
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
    props = json.loads(x[b"user.properties"])
    assert props["p"] == "1"
    # the checksum trailer shows, as RocketMQ's own read shows it: ten digits, as stored
    raw = open(os.path.join(store.root, "commitlog", "0" * 20), "rb").read()
    end = msg.commitlog_offset + msg.total_size
    assert props["__CRC32#"] == raw[end - 11:end - 1].decode() and "__CRC32#" not in msg.properties
    assert len(x) == 16 and all(model.xattr(ino, name) == value for name, value in x.items())
    untagged = model.lookup(walk(model, "topics", "orders", "0"), b"0").ino
    assert errno_of(model.xattr, untagged, b"user.tags") == errno.ENODATA
    assert b"user.tags" not in model.xattrs(untagged)
    assert errno_of(model.xattr, ino, b"user.nothing") == errno.ENODATA
    assert errno_of(model.xattr, ino, b"security.capability") == errno.ENODATA
    assert int(model.xattr(ROOT_INO, b"user.mqfs.pid")) > 0


def test_group_offsets(model, store):
    f = walk(model, "groups", "g1", "orders", "1")
    assert model.group_files.offset_text(model.nodes.get(f)) == b"0\n"  # never committed: the queue's min
    before = model.getattr(f).mtime_ns
    assert model.group_files.commit(model.nodes.get(f), {1: 2}) == b"2\n"
    assert model.group_files.offset_text(model.nodes.get(f)) == b"2\n"
    assert model.getattr(f).mtime_ns > before

    def resolve(text: str) -> int:
        return position(store, "orders", 1, text)

    with pytest.raises(FsError) as info:
        resolve("4")  # queue 1 holds offsets 0..2
    assert info.value.errno == errno.ERANGE and "past the end" in str(info.value)
    # positions and times, resolved by the store (one write resets the queue)
    assert resolve("3") == 3 == resolve("latest")
    assert resolve("earliest") == store.min_offset("orders", 1) == 0
    assert resolve("@0") == 0  # the first stored at or after 1970
    assert resolve("@now") == 3  # nothing stored after now: latest
    assert resolve("@-1000w") == 0
    for text in ("@soon", "first", "-1", "@", "\u0663"):  # an Arabic-Indic 3 is no offset
        with pytest.raises(FsError) as info:
            resolve(text)
        assert info.value.errno == errno.EINVAL, text
    assert [n for n, _, _ in model.listing(GROUPS_INO).entries(2)] == [b"g1"]
    assert errno_of(model.lookup, GROUPS_INO, b"bad group") == errno.ENOENT


def test_a_topics_all_file_moves_every_queue_or_none(model, store):
    topic = walk(model, "groups", "g1", "orders")
    assert [n for n, _, _ in model.listing(topic).entries(2)] == [b"0", b"1"]  # `all` unlisted
    every = model.nodes.get(model.lookup(topic, b"all").ino)
    kind = model.kinds[every.kind]
    assert kind.offset_text(every) == b"0 0\n1 0\n"
    assert model.path(every.ino) == "/groups/g1/orders/all"
    assert kind.resolve(every, "latest") == {0: 3, 1: 3}
    assert kind.commit(every, kind.resolve(every, "@-1000w")) == b"0 0\n1 0\n"
    store.put(Message.create("orders", b"one more", queue_id=0))
    assert kind.commit(every, kind.resolve(every, "latest")) == b"0 4\n1 3\n"
    assert kind.resolve(every, "2") == {0: 2, 1: 2}
    assert errno_of(kind.resolve, every, "4") == errno.ERANGE  # past queue 1's end: neither
    assert errno_of(kind.resolve, every, "soon") == errno.EINVAL
    # lines `<q> <position>`, as it reads: a saved text moves each queue back
    assert kind.resolve(every, "0 1\n1 @-1000w") == {0: 1, 1: 0}
    assert kind.resolve(every, "1 latest") == {1: 3}
    for bad, err in (("0 1\n1 4", errno.ERANGE), ("2 0", errno.EINVAL), ("0 1 2", errno.EINVAL),
                     ("01 1", errno.EINVAL), ("", errno.EINVAL), ("0 soon", errno.EINVAL)):
        assert errno_of(kind.resolve, every, bad) == err, bad
    assert model.group_files.offset_text(model.nodes.get(walk(model, "groups", "g1", "orders", "0"))) == b"4\n"
    assert store.committed_offset("g1", "orders", 1) == 3


def spool(tmp_path=None, limit: int = 1 << 30) -> Spool:
    return Spool(Staging(str(tmp_path)) if tmp_path else None, Budget(limit))


def test_append_writer_refuses_too_large_and_stays_failed():
    w = AppendWriter("t", 0, limit=10, spool=spool())
    assert w.write(b"12345") == 5
    with pytest.raises(FsError) as info:
        w.write(b"678901")
    assert info.value.errno == errno.EFBIG
    with pytest.raises(FsError):
        w.take()  # nothing half-written becomes a message


def test_append_writer_one_message_per_take():
    w = AppendWriter("t", 3, limit=100, spool=spool())
    w.write(b"ab")
    w.write(b"cd")
    [m] = w.take()
    assert (m.body, m.topic, m.queue_id) == (b"abcd", "t", 3)
    assert w.take() == []


def test_jsonl_writer_takes_each_line_when_its_newline_arrives():
    w = JsonlWriter("t", 1, limit=100, budget=Budget())
    [m] = w.write(b'{"body": "a", "keys": ["k1", "k2"], "tags": "T"}\n{"body_b64": "aGk=",')
    assert (m.body, m.keys, m.tags, m.queue_id) == (b"a", ["k1", "k2"], "T", 1)
    assert w.write(b' "keys": "x y"}') == []
    [m2] = w.take()  # the last line needs no newline
    assert (m2.body, m2.keys) == (b"hi", ["x", "y"])
    assert w.take() == []


_writer_lines = st.sampled_from([
    b'{"body": "plain"}', b'{"body": "k\\u00e9y\\"s", "keys": ["a", "b\\u00e9"]}',  # C reads these
    b'{"body": "' + b"x" * 90 + b'", "keys": ["k"]}', b'  {"keys":["z"],"body":""}\r',
    b'{"body": "a", "keys": "x y"}', b'{"body_b64": "aGk=", "tags": "T"}',  # the Python decoder
    b'{"body": "a", "properties": {"p": "v"}}', b'', b' ',
])


@settings(max_examples=300, deadline=None)
@given(st.lists(_writer_lines, min_size=1, max_size=12), st.data())
def test_jsonl_writes_cut_anywhere_store_what_each_line_says(lines, data):
    """However the text is cut into writes, the lines read (in C in place, the line begun by
    an earlier write put together) are decode_line's, in order, each when its newline comes."""
    text = b"\n".join(lines)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    w = JsonlWriter("t", 2, limit=100, budget=Budget())
    got = []
    for a, b in zip([0, *cuts], [*cuts, len(text)]):
        new = w.write(text[a:b])
        assert len(new) == len([x for x in text[:b].split(b"\n")[:-1] if x.strip()]) - len(got)
        got += new
    got += w.take()
    want = [decode_line(x, "t", 2, 100) for x in lines if x.strip()]
    assert [(m.topic, m.queue_id, m.body, m.properties) for m in got] == \
        [(m.topic, m.queue_id, m.body, m.properties) for m in want]
    assert w.budget.used == 0


@pytest.mark.parametrize("odd,err", [
    (b'{"body": "a", "keys": ["' + b"k" * 22 + b'"]}', None),  # KEYS past what surely fits
    (b'{"body": "a", "keys": ["\\u00e9' + b"k" * 21 + b'"]}', None),  # counted in characters
    (b'{"body": "a", "keys": ["' + b"/" * 86 + b'"]}', errno.EINVAL),  # a 258-byte /keys name
    (b'{"body": "' + b"x" * 51 + b'", "keys": ["k"]}', errno.EFBIG),  # over what fits says
    (b'{"body": "a", "tags": "T"}', None),  # a line C does not read
])
@pytest.mark.parametrize("where", ["head", "rest"])
@needs_c_lines
def test_write_now_leaves_every_line_needing_a_closer_look_to_write(odd, err, where):
    """write_now takes a write only when C reads every line and each surely fits (measured
    as C makes them); else it changes nothing and write gives the messages or the refusal."""
    short = b"".join(b'{"body": "b%d", "keys": ["k%d"]}\n' % (i, i) for i in range(50))
    w = JsonlWriter("t", 0, limit=100, budget=Budget(), fits=lambda m: 50)
    if where == "head":  # the odd line begun by an earlier write, ended by this one
        assert w.write(odd[:5]) == []
        data, count = odd[5:] + b"\n" + short, 51
    else:
        assert len(w.write_now(short)) == 50
        data, count = short + odd + b"\n" + short, 101
    held, lines = bytes(w.buf), w.lines
    assert w.write_now(data) is None and (bytes(w.buf), w.lines) == (held, lines)
    if err is None:
        assert len(w.write(data)) == count
    else:
        with pytest.raises(FsError) as info:
            w.write(data)
        assert info.value.errno == err


def test_jsonl_writer_fails_the_whole_write_and_stays_failed():
    w = JsonlWriter("t", 0, limit=100, budget=Budget())
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
    w = JsonlWriter("t", 0, limit=100, budget=Budget())
    with pytest.raises(FsError) as info:
        w.write(line + b"\n")
    assert info.value.errno == err


def test_jsonl_body_with_a_lone_surrogate_is_einval_and_the_writer_stays_failed():
    w = JsonlWriter("t", 0, limit=100, budget=Budget())
    for line in (b'{"body": "\\ud800"}\n', b'{"body": "ok"}\n'):
        with pytest.raises(FsError) as info:
            w.write(line)
        assert info.value.errno == errno.EINVAL


def test_jsonl_body_b64_and_properties():
    w = JsonlWriter("t", 0, limit=100, budget=Budget())
    [m] = w.write(b'{"body_b64": "AAEC", "properties": {"a": "b"}}\n')
    assert m.body == b"\x00\x01\x02" and m.properties["a"] == "b"


def test_offset_writer_commits_when_the_line_is_complete():
    def at_most_20(text: str) -> int:
        if not text.isdigit() or int(text) > 20:
            raise FsError(errno.EINVAL, "past the end")
        return int(text)

    w = OffsetWriter(at_most_20)
    assert w.write(0, b"1") is None  # no newline yet
    assert w.write(1, b"2\n") == 12
    assert w.take() is None
    assert w.write(0, b"7") is None
    assert w.take() == 7  # at close, without a newline
    with pytest.raises(FsError) as info:
        OffsetWriter(at_most_20).write(0, b"abc\n")
    assert info.value.errno == errno.EINVAL
    with pytest.raises(FsError) as info:
        OffsetWriter(at_most_20).write(0, "é".encode())  # not even a word
    assert info.value.errno == errno.EINVAL
    bad = OffsetWriter(at_most_20)
    with pytest.raises(FsError) as info:
        bad.write(0, b"1000\n")  # refused at the write, where `echo 1000 >` sees it
    assert info.value.errno == errno.EINVAL
    with pytest.raises(FsError):
        bad.take()


def test_spool_spills_to_staging_and_respects_the_budget(tmp_path):
    budget = Budget(100)
    staging = Staging(str(tmp_path))
    small, big = Spool(staging, budget), Spool(staging, budget)
    small.append(b"a" * 60)
    assert small.file is None and budget.used == 60
    big.append(b"b" * 60)  # the budget is spent: this one goes to disk
    assert big.file is not None and budget.used == 60
    big.write(100, b"c")
    assert big.getvalue() == b"b" * 60 + bytes(40) + b"c" and big.size == 101
    small.append(b"x" * SPILL_AT)  # too large for memory whatever the budget
    assert small.file is not None and budget.used == 0
    assert small.read(58, 4) == b"aaxx"
    small.truncate(2)
    assert small.getvalue() == b"aa"
    small.clear(), big.clear()
    assert os.listdir(staging.dir) == []  # staged files never have a name
    with pytest.raises(FsError) as info:  # a read-only mount has no staging: ENOMEM
        Spool(None, Budget(10)).append(b"y" * 11)
    assert info.value.errno == errno.ENOMEM


def test_staging_is_emptied_when_opened(tmp_path):
    os.makedirs(tmp_path / "staging")
    (tmp_path / "staging" / "body-left-by-a-crash").write_bytes(b"x")
    assert os.listdir(Staging(str(tmp_path)).dir) == []


def test_entries_in_staging_the_daemon_did_not_make_are_left_alone(tmp_path):
    """A directory (or any other name) put in staging/ by someone else is not fatal and not
    deleted: only the daemon's own `body-` leftovers go (issue 33, item 9)."""
    os.makedirs(tmp_path / "staging" / "someones-dir" / "inside")
    os.makedirs(tmp_path / "staging" / "body-a-directory")
    (tmp_path / "staging" / "notes.txt").write_bytes(b"x")
    (tmp_path / "staging" / "body-left-by-a-crash").write_bytes(b"x")
    staging = Staging(str(tmp_path))
    assert sorted(os.listdir(staging.dir)) == ["body-a-directory", "notes.txt", "someones-dir"]
    f = staging.create()
    f.pwrite(0, b"body")
    assert f.pread(0, 4) == b"body"
    f.close()


def test_jsonl_partial_lines_count_against_the_budget():
    budget = Budget(10)
    w = JsonlWriter("t", 0, limit=100, budget=budget)
    w.write(b'{"body":')
    assert budget.used == 8
    with pytest.raises(FsError) as info:
        w.write(b' "long"')
    assert info.value.errno == errno.ENOMEM and budget.used == 0


@pytest.mark.parametrize("key,name", [
    ("plain", b"plain"), ("a/b", b"a%2Fb"), ("50%", b"50%25"), (".", b"%2E"), ("..", b"%2E%2E"),
    ("a.b", b"a.b"), ("x\0y", b"x%00y"),
])
def test_key_names_round_trip(key, name):
    assert key_name(key) == name and name_key(name) == key


def test_keys_that_cannot_be_names_are_refused_at_append():
    w = JsonlWriter("t", 0, limit=100, budget=Budget())
    with pytest.raises(FsError) as info:
        w.write(b'{"body": "a", "keys": ["' + b"k" * 256 + b'"]}\n')
    assert info.value.errno == errno.EINVAL and "255" in str(info.value)
    with pytest.raises(FsError) as info:  # short keys, then one whose name would be 258 bytes
        JsonlWriter("t", 0, limit=100, budget=Budget()).write(
            b'{"body": "a", "keys": "a b ' + b"/" * 86 + b'"}\n')
    assert info.value.errno == errno.EINVAL
    [m] = JsonlWriter("t", 0, limit=100, budget=Budget()).write(
        b'{"body": "a", "keys": ["a/b", ".."]}\n')
    assert m.keys == ["a/b", ".."]


@pytest.mark.parametrize("odd,err", [
    (b'{"body": "a", "keys": ["' + b"/" * 86 + b'"]}', errno.EINVAL),  # a 258-byte /keys name
    (b'{"body": "' + b"x" * 60 + b'", "keys": ["k"]}', errno.EFBIG),  # over what fits says
])
def test_one_odd_line_among_many_short_ones_fails_the_write(odd, err):
    """A write of short lines is checked in bulk; one line among them whose key or body
    needs the closer look still gets it, and fails the whole write."""
    short = b"".join(b'{"body": "b%d", "keys": ["k%d"]}\n' % (i, i) for i in range(50))
    w = JsonlWriter("t", 0, limit=100, budget=Budget(), fits=lambda m: 50)
    assert len(w.write(short)) == 50
    with pytest.raises(FsError) as info:
        w.write(short + odd + b"\n" + short)
    assert info.value.errno == err and "line 101" in str(info.value)
    assert w.failed == err


@pytest.mark.parametrize("odd", [b"x" * 60, b"x" * 101])  # over what fits says; over the limit
def test_append_lines_among_many_short_ones_one_too_long_fails_the_write(odd):
    """append.lines makes a write's messages at once when no line is long enough to need
    a check, and line by line otherwise: the same messages, and the first long line fails
    the whole write with EFBIG and its number."""
    short = b"".join(b"line %d\r\n\n" % i for i in range(50))
    w = LinesWriter("t", 3, limit=100, budget=Budget(), fits=lambda m: 50)
    got = w.write(short)
    assert [(m.topic, m.queue_id, m.body, m.properties) for m in got] == \
        [("t", 3, b"line %d\r" % i, {}) for i in range(50)]
    assert got[0].properties is not got[1].properties  # each message its own
    with pytest.raises(FsError) as info:
        w.write(short + odd + b"\n" + short)
    assert info.value.errno == errno.EFBIG and "line 101" in str(info.value)
    assert w.failed == errno.EFBIG


def test_key_with_slash_is_found_by_its_encoded_name(model, store):
    model.put([Message.create("orders", b"slashed", keys=["a/b"])])
    kd = walk(model, "keys", "a%2Fb")
    [(name, attr, _)] = list(model.listing(kd).entries(2))
    assert name == b"orders:0:3"


def test_key_listing_cap_is_reported(store):
    model = Model(store, keys_max=2)
    kd = walk(model, "keys", "all")
    assert len(list(model.listing(kd).entries(2))) == 2
    assert model.xattr(kd, b"user.truncated") == b"1"
    assert model.status()["keys_truncated"][0]["key"] == "all"


def test_staged_files_publish_once_and_abandon(model, store):
    tmp = walk(model, "topics", "orders", "1", "tmp")
    a = model.tmp.create(tmp, b"x")
    entry = model.tmp.staged[a.ino]
    model.tmp.write(entry, 0, b"hello ")
    model.tmp.write(entry, 6, b"world")
    model.tmp.set_xattr(entry, b"user.keys", b"s1 s2")
    assert [n for n, _, _ in model.listing(tmp).entries(2)] == [b"x"]
    msg = model.tmp.message(entry, "orders", 1)
    assert (msg.body, msg.keys) == (b"hello world", ["s1", "s2"])
    model.put([msg])
    model.tmp.unlink(tmp, b"x")
    assert errno_of(model.lookup, tmp, b"x") == errno.ENOENT
    assert errno_of(model.tmp.write, entry, 0, b"late") == errno.ENOENT
    assert bytes(store.get("orders", 1, 3).body) == b"hello world"
    b = model.tmp.staged[model.tmp.create(tmp, b"y").ino]
    assert errno_of(model.tmp.create, tmp, b"y") == errno.EEXIST
    limit = model.body_limit("orders", 1)
    assert errno_of(model.tmp.write, b, limit, b"!") == errno.EFBIG
    assert errno_of(model.tmp.create, walk(model, "topics", "orders", "1"), b"z") == errno.EPERM


def test_queue_and_topic_mtimes_follow_the_newest_message(model, store):
    q = walk(model, "topics", "orders", "0")
    t = walk(model, "topics", "orders")
    before = model.getattr(q).mtime_ns
    [res] = model.put([Message.create("orders", b"new", queue_id=0)])
    assert model.getattr(q).mtime_ns == res.store_timestamp * 1_000_000 >= before
    assert model.getattr(t).mtime_ns == model.getattr(TOPICS_INO).mtime_ns == \
        model.getattr(q).mtime_ns


@pytest.mark.parametrize("umask,queue,message,append", [
    (0o022, 0o755, 0o444, 0o644), (0o002, 0o775, 0o444, 0o664), (0o077, 0o700, 0o400, 0o600),
])
def test_umask_sets_modes(store, umask, queue, message, append):
    model = Model(store, umask=umask)
    q = walk(model, "topics", "orders", "0")
    assert model.getattr(q).mode & 0o777 == queue
    assert model.lookup(q, b"0").mode & 0o777 == message
    assert model.lookup(q, b"append").mode & 0o777 == append


def test_status_is_json_with_queues_and_errors(model, store):
    store.commit_offset("g", "orders", 0, 1)
    model.note_error("write", "/topics/orders/0/append.jsonl", errno.EINVAL, "line 1: not JSON")
    status = json.loads(json.dumps(model.status()))
    assert status["queues"]["orders/0"] == {"min_offset": 0, "max_offset": 3,
                                            "newest_store_time_ms": model.times.queue_mtime("orders", 0)
                                            // 1_000_000}
    assert status["groups"]["g@orders/0"] == {"committed": 1, "lag": 2}
    assert status["recent_errors"][0]["reason"] == "line 1: not JSON"
    assert model.lookup(ROOT_INO, b"status.json").ino == STATUS_INO


def test_errno_mapping_of_store_and_os_errors():
    from mqfs.fusefs.errors import errno_for
    from mqfs.store.errors import CorruptionError, InvalidMessage, NotFound

    assert errno_for(NotFound("x")) == errno.ENOENT
    assert errno_for(InvalidMessage("bad topic")) == errno.EINVAL
    assert errno_for(CorruptionError("crc")) == errno.EIO
    assert errno_for(OSError(errno.ENOSPC, "full")) == errno.ENOSPC
    assert errno_for(FsError(errno.EFBIG)) == errno.EFBIG
    assert errno_for(KeyError("bug")) is None


@pytest.mark.allow_logs(r"handler failed unexpectedly")
def test_guard_turns_a_bug_into_eio_and_logs_it(caplog):
    import pyfuse3
    import trio

    from mqfs.fusefs.ops import guarded

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


def test_at_links_to_the_first_message_at_or_after_a_time(model, store):
    q = walk(model, "topics", "orders", "0")
    at = model.lookup(q, b"at").ino
    stamps = [store.get("orders", 0, i).store_timestamp for i in range(3)]
    for when in (0, stamps[0], stamps[1] - 1, stamps[1], stamps[2]):
        attr = model.lookup(at, b"%d" % when)
        want = store.offset_by_time("orders", 0, when)
        assert model.readlink(attr.ino) == b"../%d" % want
        assert attr.entry_timeout == 0  # a later time's answer changes as messages arrive
    iso = datetime.fromtimestamp(stamps[1] / 1000, UTC).isoformat(timespec="milliseconds")
    # two puts can share a millisecond: the ISO name answers what the number does
    want = store.offset_by_time("orders", 0, stamps[1])
    assert want <= 1 and model.readlink(model.lookup(at, iso.encode()).ino) == b"../%d" % want
    assert errno_of(model.lookup, at, b"%d" % (stamps[2] + 1)) == errno.ENOENT
    # relative names (issue 34) resolve like the absolute ones; a name no form reads is EINVAL
    assert model.readlink(model.lookup(at, b"-100000d").ino) == b"../0"
    assert errno_of(model.lookup, at, b"yesteryear") == errno.EINVAL
    assert list(model.listing(at).entries(2)) == []


def test_tags_list_the_offsets_whose_record_has_the_tag(model, store):
    store.put_batch([Message.create("orders", b"t", queue_id=1, tags="TagA" if i % 3 else "a/b")
                     for i in range(400)])
    q = walk(model, "topics", "orders", "1")
    tags = model.lookup(q, b"tags").ino
    tag_a = model.lookup(tags, b"TagA").ino
    want = [m.queue_offset for m in store.get_range("orders", 1, 0, 1000) if m.tags == "TagA"]
    names = consume(model.listing(tag_a), 7)
    assert names[:2] == [b".", b".."]
    assert names[2:] == [b"%d" % o for o in want] and len(want) > 256  # past two batches
    link = model.lookup(tag_a, b"%d" % want[-1])
    assert model.readlink(link.ino) == b"../../%d" % want[-1]
    assert model.getattr(link.ino).ino == link.ino
    slash = model.lookup(tags, key_name("a/b")).ino
    slashed = [m.queue_offset for m in store.get_range("orders", 1, 0, 1000) if m.tags == "a/b"]
    assert consume(model.listing(slash), 50)[2:] == [b"%d" % o for o in slashed]
    assert errno_of(model.lookup, tag_a, b"%d" % slashed[0]) == errno.ENOENT
    assert errno_of(model.lookup, tags, b"TagB") == errno.ENOENT


def test_slow_listings_are_read_in_batches_and_entries_read_ahead_are_not_lost(model, store):
    """The adapter builds tags/ and keys/ listings in a worker thread, a batch per trip, and
    the kernel's buffer takes only some: the rest come first at the next call, and a call
    from another cookie (a seek back) starts over there."""
    store.put_batch([Message.create("orders", b"t", queue_id=1, tags="TagA") for _ in range(300)])
    q = walk(model, "topics", "orders", "1")
    tag_a = model.lookup(model.lookup(q, b"tags").ino, b"TagA").ino
    listing = model.listing(tag_a)
    assert listing.slow and not model.listing(q).slow
    want = [b".", b".."] + [b"%d" % m.queue_offset for m in store.get_range("orders", 1, 0, 1000)
                            if m.tags == "TagA"]
    names, cookie = [], 0
    for accept in range(1, 10_000):  # the buffer takes 1, 2, 3, ... entries of each batch
        batch = listing.batch(cookie, 64)
        if not batch:
            break
        took = batch[:accept]
        listing.taken(batch, len(took))
        names += [name for name, _, _ in took]
        cookie = took[-1][2]
    assert names == want
    again = listing.batch(3, 2)  # seek back to the second message
    assert [name for name, _, _ in again] == want[3:5]
    keydir = model.lookup(KEYS_INO, b"all").ino
    assert model.listing_slow(keydir) and model.listing(keydir).slow


def test_what_may_wait_for_the_disk_is_told_apart_from_cached_answers(model, store):
    """The adapter keeps cached attributes and small bodies on its event loop and sends
    searches, record decoding and large body copies to worker threads."""
    store.put(Message.create("orders", b"x" * (SPILL_AT + 1), queue_id=0))
    q = walk(model, "topics", "orders", "0")
    for name in (b"at", b"tags"):
        assert model.lookup_slow(model.lookup(q, name).ino, b"1")
    assert model.lookup_slow(KEYS_INO, b"k1") and not model.lookup_slow(TOPICS_INO, b"orders")
    assert not model.lookup_slow(q, b"append") and not model.lookup_slow(q, b"99")
    assert not model.lookup_slow(q, b"0")  # small: decoded and cached right away
    small_ino = model.lookup(q, b"0").ino
    assert not model.getattr_slow(small_ino)
    assert not model.messages.body_slow(small_ino) and model.messages.body(small_ino) == b"body 0"
    assert not model.messages.body_slow(small_ino)  # attributes cached, body small: copied on the loop
    assert model.lookup_slow(q, b"3") and model.lookup_slow(q, b"3")  # a 64 KiB+ body
    big_ino = model.lookup(q, b"3").ino
    assert not model.getattr_slow(big_ino)
    model.messages.body(big_ino)  # the copy kept from the lookup is used once
    assert model.messages.body_slow(big_ino) and model.xattrs_slow(big_ino)
    link = model.lookup(model.lookup(KEYS_INO, b"k0").ino, b"orders:0:0").ino
    assert model.getattr_slow(link) and not model.xattrs_slow(q)


def test_every_kind_of_node_has_one_class_that_names_its_path(model):
    """Each kind is answered by the one class registered for it (kinds/__init__.py), and
    log lines name every inode by its mount path."""
    assert sorted(cls.kind for cls in KINDS) == sorted(set(cls.kind for cls in KINDS))
    queue = ("topics", "orders", "1")
    paths = {(): "/", ("status.json",): "/status.json", ("topics",): "/topics",
             ("keys",): "/keys", ("groups",): "/groups", queue[:2]: "/topics/orders",
             queue: "/topics/orders/1", (*queue, "2"): "/topics/orders/1/2",
             (*queue, "append"): "/topics/orders/1/append",
             (*queue, "append.jsonl"): "/topics/orders/1/append.jsonl",
             (*queue, "append.lines"): "/topics/orders/1/append.lines",
             (*queue, "follow"): "/topics/orders/1/follow", (*queue, "tmp"): "/topics/orders/1/tmp",
             (*queue, "replay"): "/topics/orders/1/replay",
             (*queue, "at"): "/topics/orders/1/at", (*queue, "tags"): "/topics/orders/1/tags",
             (*queue, "tags", "TagA"): "/topics/orders/1/tags/TagA",
             (*queue, "tags", "TagA", "2"): "/topics/orders/1/2 (link)",
             (*queue, "at", "0..now"): "/topics/orders/1/at/0..now",
             (*queue[:2], "at"): "/topics/orders/at", (*queue[:2], "at", "0"): "/topics/orders/at/0",
             (*queue[:2], "at", "-1w.."): "/topics/orders/at/-1w..",
             ("keys", "k1"): "/keys/k1", ("keys", "k1", "orders:1:0"): "/topics/orders/1/0 (link)",
             ("groups", "g"): "/groups/g", ("groups", "g", "orders"): "/groups/g/orders",
             ("groups", "g", "orders", "1"): "/groups/g/orders/1",
             ("groups", "g", "orders", "all"): "/groups/g/orders/all"}
    seen = set()
    for names, path in paths.items():
        ino = walk(model, *names)
        assert model.path(ino) == path
        seen.add(model.kind(ino))
    assert set(model.kinds) <= seen
    tmp = walk(model, *queue, "tmp")
    staged = model.tmp.create(tmp, b"draft").ino
    assert model.path(staged) == "/topics/orders/1/tmp/draft"
    model.tmp.unlink(tmp, b"draft")
    assert model.path(staged) == "(staged file 1, gone)"
    assert model.path(999) == "(inode 999)"


def test_the_times_and_status_of_a_reopened_store_open_no_queue(tmp_path):
    root = str(tmp_path / "store")
    with MessageStore(root, small()) as s:
        s.put_batch([Message.create(f"t{t}", b"x", queue_id=q) for t in range(20) for q in range(4)])
        newest = s.get("t19", 3, 0).store_timestamp
    with MessageStore(root, small(), create=False) as s:
        model = Model(s)
        assert model.getattr(TOPICS_INO).mtime_ns == newest * 1_000_000  # every queue's newest
        status = model.status()
        assert status["queues"]["t7/2"] == {"min_offset": 0, "max_offset": 1,
                                            "newest_store_time_ms": newest}
        assert not s.consume_queues.opened()


class InlineRunner:
    """Every step of a handle in the caller: a model test has no event loop to keep free."""

    def __init__(self) -> None:
        self.stores = 0

    async def thread(self, fn, *args):
        return fn(*args)

    async def spool(self, on_disk, fn, *args):
        return fn(*args)

    def stored(self) -> None:
        self.stores += 1

    def arrival(self):
        return trio.Event()

    async def wait(self, arrival, seconds) -> None:
        pass

    def behind(self, fn, held=None, after=None) -> Behind:
        """At once, in the caller (not after a failed one); the handle finds it ended."""
        job = Behind(held)
        try:
            if after is not None and after.error is not None:
                raise after.error
            fn()
        except Exception as exc:  # noqa: BLE001 - raised where the handle waits
            job.error = exc
        else:
            self.stored()
        job.done.set()
        return job


async def refused(call) -> int:
    with pytest.raises(FsError) as info:
        await call
    return info.value.errno


def test_open_and_the_rules_of_each_kind_need_no_kernel(model, store):
    """The Model opens every kind of file into a handle that does that kind's work, and
    keeps its rules (EFBIG, the names a publish may not take, what can be truncated)."""
    run = InlineRunner()
    q = walk(model, "topics", "orders", "1")
    tmp, append = model.lookup(q, b"tmp").ino, model.lookup(q, b"append").ino
    limit = model.body_limit("orders", 1)

    async def scenario() -> None:
        h = await model.open(run, append, Opening(writing=True))
        assert (h.direct_io, h.keep_cache, h.nonseekable) == (True, False, True)
        assert await h.write(run, 0, b"one") == 3 and run.stores == 0
        await h.commit(run)
        assert bytes(store.get("orders", 1, 3).body) == b"one" and run.stores == 1
        assert await refused(h.write(run, 0, b"x" * (limit + 1))) == errno.EFBIG
        assert await refused(h.commit(run)) == errno.EFBIG  # the handle stays refused
        msg = await model.open(run, model.lookup(q, b"3").ino, Opening(writing=False))
        assert (msg.direct_io, msg.keep_cache) == (False, True)
        assert bytes(await msg.read(run, 0, 100)) == b"one"
        assert await refused(model.open(run, msg.ino, Opening(writing=True))) == errno.EACCES
        assert await refused(model.open(run, q, Opening(writing=False))) == errno.EISDIR

        staged, _ = model.create(tmp, b"x", stat.S_IFREG | 0o644)
        assert await staged.write(run, 0, b"staged") == 6
        for name in (b"tmp", b"follow", b"append.jsonl", b"append.lines", b"at", b"tags"):
            assert await refused(model.rename(run, tmp, b"x", q, name, exchange=False,
                                              noreplace=False)) == errno.EINVAL, name
        assert await refused(model.rename(run, tmp, b"x", q, b"0", exchange=False,
                                          noreplace=True)) == errno.EEXIST
        await model.rename(run, tmp, b"x", q, b"anything", exchange=False, noreplace=False)
        assert bytes(store.get("orders", 1, 4).body) == b"staged"
        assert errno_of(model.lookup, tmp, b"x") == errno.ENOENT

        assert (await model.setattr(run, append, 0, owner=False)).ino == append  # O_TRUNC
        assert await refused(model.setattr(run, append, 5, owner=False)) == errno.EPERM
        assert await refused(model.setattr(run, msg.ino, 0, owner=False)) == errno.EPERM
        assert await refused(model.unlink(run, q, b"3")) == errno.EPERM

        status = await model.open(run, STATUS_INO, Opening(writing=False))
        text = await status.read(run, 0, 1 << 20)
        assert json.loads(text)["queues"]["orders/1"]["max_offset"] == 5
        assert model.getattr(STATUS_INO).size == len(text)

    trio.run(scenario)
    too_big = Message.create("orders", b"x" * (limit + 1), queue_id=1)
    assert errno_of(model.put, [too_big]) == errno.EFBIG


class CountingRunner(InlineRunner):
    """An InlineRunner that counts the steps sent to a worker thread."""

    def __init__(self) -> None:
        super().__init__()
        self.trips = 0

    async def thread(self, fn, *args):
        self.trips += 1
        return fn(*args)


def test_an_append_is_put_on_the_loop_unless_the_store_would_make_it_wait(model, store):
    """The close of `append` puts a small body without a worker-thread trip; a body over
    64 KiB, or a put the store cannot take at once (the put lock taken: put_nowait says
    None), takes the trip; each message is stored once, in order."""
    run = CountingRunner()
    append = model.lookup(walk(model, "topics", "orders", "0"), b"append").ino

    async def close_after(body: bytes) -> None:
        h = await model.open(run, append, Opening(writing=True))
        await h.write(run, 0, body)
        await h.commit(run)
        await h.release(run)

    async def scenario() -> None:
        await close_after(b"small")
        assert run.trips == 0 and run.stores == 1
        await close_after(b"L" * (64 * 1024 + 1))
        assert run.trips == 1
        with store.put_lock:  # held: put_nowait never waits for it, so it says None...
            assert store.put_nowait(Message.create("orders", b"x", queue_id=0)) is None
        # ...and a close that meets the lock held by a put elsewhere goes to the thread
        real = store.put_nowait
        store.put_nowait = lambda msg: None
        try:
            await close_after(b"waited")
        finally:
            store.put_nowait = real
        assert run.trips == 2 and run.stores == 3

    trio.run(scenario)
    bodies = [bytes(store.get("orders", 0, o).body) for o in range(3, 6)]
    assert bodies == [b"small", b"L" * (64 * 1024 + 1), b"waited"]
    assert store.max_offset("orders", 0) == 6


def test_a_small_write_of_json_lines_is_put_on_the_loop(model, store):
    """`echo '{...}' >> append.jsonl`: its line decoded and put without a worker-thread trip;
    two lines in one write are one batch (a trip), a megabyte of lines C reads is decoded on
    the loop and put behind it (no trip), and a bad line refuses its write (EINVAL) and the
    handle's later ones."""
    run = CountingRunner()
    q = walk(model, "topics", "orders", "1")
    jsonl = model.lookup(q, b"append.jsonl").ino

    async def scenario() -> None:
        h = await model.open(run, jsonl, Opening(writing=True))
        assert await h.write(run, 0, b'{"body": "one", "keys": "k-one"}\n') > 0
        assert run.trips == 0 and run.stores == 1
        await h.write(run, 0, b'{"body": "two"}\n{"body": "three"}\n')
        assert run.trips == 1
        big = b"".join(b'{"body": "n%d"}\n' % i for i in range(400))
        assert len(big) > 4096
        await h.write(run, 0, big)
        if compiled.PURE:  # no C decoder: decoded and stored in one trip
            assert run.trips == 2 and run.stores == 3 and h.behind is None
        else:
            assert run.trips == 1 and run.stores == 3 and h.behind is not None
            # the put's messages stay held until the handle lets them go on the loop
            held = h.behind.held
            assert [bytes(m.body) for m in held] == [b"n%d" % i for i in range(400)]
        assert await refused(h.write(run, 0, b'{"body": 1}\n')) == errno.EINVAL
        assert h.behind is None
        assert await refused(h.write(run, 0, b'{"body": "after"}\n')) == errno.EINVAL
        await h.release(run)

    trio.run(scenario)
    assert [bytes(store.get("orders", 1, o).body) for o in range(3, 6)] == [b"one", b"two", b"three"]
    assert [h.commitlog_offset for h in store.query_key("k-one", "orders")] == \
        [store.get("orders", 1, 3).commitlog_offset]
    assert store.max_offset("orders", 1) == 6 + 400  # nothing of the refused writes
    assert bytes(store.get("orders", 1, 405).body) == b"n399"


@needs_c_lines
def test_a_write_put_behind_reports_a_store_failure_at_the_next_write_or_the_close(model, store):
    """A large write whose lines C reads is answered before its put ends; a failure of the
    store there (no room: ENOSPC) fails the next write, or the commit, with its errno, and
    the handle refuses everything after it. A write with a line only Python reads is stored
    before it is answered (one trip), so its refusal is its own. Sync flush puts no write
    behind."""
    run = CountingRunner()
    jsonl = model.lookup(walk(model, "topics", "orders", "1"), b"append.jsonl").ino
    big = b"".join(b'{"body": "n%d", "keys": ["k%d"]}\n' % (i, i) for i in range(400))
    real_put = store.put_batch
    before = store.max_offset("orders", 1)

    def no_room(messages):
        raise OSError(errno.ENOSPC, "No space left on device")

    async def scenario() -> None:
        for last in ("write", "commit"):
            h = await model.open(run, jsonl, Opening(writing=True))
            store.put_batch = no_room
            try:
                assert await h.write(run, 0, big) == len(big)  # answered; its put failed
            finally:
                store.put_batch = real_put
            if last == "write":
                assert await refused(h.write(run, 0, big)) == errno.ENOSPC
            assert await refused(h.commit(run)) == errno.ENOSPC  # and stays refused
            await h.release(run)
        h = await model.open(run, jsonl, Opening(writing=True))
        await h.write(run, 0, big[:-1] + b'\n{"body": "p", "tags": "T"}\n')  # Python's line
        assert run.trips == 1 and h.behind is None and run.stores == 1
        await h.write(run, 0, big)
        await h.commit(run)
        assert run.trips == 1 and h.behind is None and run.stores == 2
        await h.release(run)
        store.config.flush_mode = "sync"
        try:
            h = await model.open(run, jsonl, Opening(writing=True))
            await h.write(run, 0, big)
            assert run.trips == 2 and h.behind is None and run.stores == 3
            await h.release(run)
        finally:
            store.config.flush_mode = "async"

    trio.run(scenario)
    assert store.max_offset("orders", 1) == before + 3 * 400 + 1


def test_fsync_of_any_file_waits_for_the_puts_left_behind_by_answered_writes(model):
    """fsync or fsyncdir of anything flushes the whole store: the lines of a write already
    answered whose put still runs behind it are waited for before the flush."""
    from mqfs.fusefs.handles import LinesHandle
    from mqfs.fusefs.ops import Operations

    ops = Operations(model)
    flushes: list[str] = []
    model.flush = lambda: flushes.append("flushed")  # type: ignore[method-assign]
    handle = LinesHandle(1, None, model.put)
    handle.behind = Behind()
    ops.files.add(handle)

    async def scenario() -> None:
        behind = handle.behind
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ops.fsyncdir, 0, False)
            while not (flushes or behind.done.statistics().tasks_waiting):  # one or the other
                await trio.sleep(0.001)
            assert flushes == []  # waiting for the put behind, not flushing
            behind.done.set()
        assert flushes == ["flushed"]

    trio.run(scenario)


def test_a_lane_is_taken_in_arrival_order_and_handed_over():
    """Writes and commits of one handle that wait take its Lane in the order they came, each
    after the one before left it (a cancelled waiter is skipped); free, it is taken at once."""
    from mqfs.fusefs.handles import Lane

    lane, order = Lane(), []

    async def step(name: str, hold: trio.Event | None = None) -> None:
        async with lane:
            order.append(name)
            if hold is not None:
                await hold.wait()

    async def scenario() -> None:
        held = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(step, "first", held)
            await trio.testing.wait_all_tasks_blocked()
            assert lane.busy
            cancelled = trio.CancelScope()

            async def given_up() -> None:
                with cancelled:
                    await step("never")

            for start in (functools.partial(step, "second"), given_up,
                          functools.partial(step, "third")):
                nursery.start_soon(start)  # each waiting before the next comes
                await trio.testing.wait_all_tasks_blocked()
            cancelled.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert order == ["first"]
            held.set()
        assert order == ["first", "second", "third"] and not lane.busy
        await step("alone")
        assert order[-1] == "alone" and not lane.busy

    trio.run(scenario)


def test_follow_of_a_compaction_topic_goes_over_the_offsets_compaction_took(tmp_path):
    """follow's bytes are the served messages in order: an offset compaction took (queue 0's
    tombstone at 29) is measured and read as nothing, never as another message's body."""
    from mqfs.fusefs.following import FollowFile, Follows
    from tests.store.broker_guard_layouts import layout_compaction

    root = str(tmp_path)
    served = layout_compaction(root)
    assert ("Compacted", 0, 29) not in served and ("Compacted", 0, 28) in served
    with MessageStore(root, StoreConfig(read_only=True), create=False) as s:
        follows = Follows(s)
        file = FollowFile("Compacted", 0, 25)
        size = file.grow(follows.sizes, s.max_offset("Compacted", 0))
        expected = b"".join(served[("Compacted", 0, o)] + b"\n" for o in range(25, 48) if o != 29)
        assert size == len(expected)
        assert file.read(follows.bodies, 0, size) == expected
        assert file.read(follows.bodies, 100, 300) == expected[100:400]


def test_the_slow_question_opens_no_queue_and_sends_its_first_use_to_a_worker(tmp_path):
    """A message of a queue not opened since the mount: the adapter's question on the event
    loop answers "slow" from memory, leaving the queue's first use (file reads, maybe a
    rebuild) to the worker thread the lookup then runs in."""
    root = str(tmp_path / "store")
    with MessageStore(root, small()) as s:
        s.put_batch([Message.create("orders", b"body %d" % i, queue_id=i % 2) for i in range(4)])
    with MessageStore(root, small(), create=False) as s:
        model = Model(s)
        queue = walk(model, "topics", "orders", "1")
        assert s.needs_first_use("orders", 1) and model.lookup_slow(queue, b"1")
        assert model.listing(queue).slow  # its readdir too goes to a worker thread
        topic, topics = walk(model, "topics", "orders"), walk(model, "topics")
        # its xattrs (the bounds) need its first use; its attributes, its topic's and their
        # lookups (mtime: the newest time, read by the walk without opening a queue) are
        # kept from then on, answered on the loop
        assert model.xattrs_slow(queue) and not model.xattrs_slow(topic)
        assert not model.getattr_slow(queue) and not model.getattr_slow(topic)
        assert not model.lookup_slow(topic, b"1") and not model.lookup_slow(topics, b"orders")
        assert not model.lookup_slow(topics, b"none") and not model.getattr_slow(topics)
        assert not s.consume_queues.opened()  # the questions opened nothing
        assert model.lookup(queue, b"1").size == len(b"body 3")  # (in a worker thread)
        assert not s.needs_first_use("orders", 1) and not model.lookup_slow(queue, b"0")
        assert not model.xattrs_slow(queue)
        other = walk(model, "topics", "orders", "0")
        assert s.needs_first_use("orders", 0) and model.xattrs_slow(other)
        assert not model.xattrs_slow(model.lookup(other, b"append").ino)  # no bounds: none
        assert set(s.consume_queues.opened()) == {("orders", 1)}  # kept times opened nothing


T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


@pytest.fixture
def timed(tmp_path):
    """Topic T: queue 0 one message a second from T0 (0..9), queue 1 one a second from
    T0 + 500 (0..4), queue 2 none."""
    with MessageStore(str(tmp_path / "timed"), small()) as s:
        s.create_topic("T", 3)
        for at in range(0, 10_000, 500):  # store times never go back: in time order
            q, i = at % 1000 // 500, at // 1000
            if q == 0 or i < 5:
                s.clock = lambda at=at: T0 + at
                s.put(Message.create("T", b"%d-%d" % (q, i), queue_id=q))
        yield Model(s)


def links(model: Model, ino: int, per_call: int = 2) -> dict[bytes, bytes]:
    """name -> target of a listing of links, read a few entries per call."""
    names = consume(model.listing(ino), per_call)
    assert names[:2] == [b".", b".."]
    return {name: model.readlink(model.lookup(ino, name).ino) for name in names[2:]}


def test_a_topic_at_a_time_links_each_queue_to_its_first_message_at_or_after_it(timed):
    model = timed
    topic = walk(model, "topics", "T")
    assert [n for n, _ in model.kinds[model.kind(topic)].children(model.nodes.get(topic))] == \
        [b"0", b"1", b"2"]  # at/ is not listed: a topic's entries are its queues
    at = model.lookup(topic, b"at").ino
    assert list(model.listing(at).entries(2)) == []
    assert links(model, model.lookup(at, b"%d" % (T0 + 3000)).ino) == \
        {b"0": b"../../0/3", b"1": b"../../1/3"}
    later = model.lookup(at, b"%d" % (T0 + 5000)).ino
    assert links(model, later) == {b"0": b"../../0/5"}  # queue 1 has nothing that late
    assert errno_of(model.lookup, later, b"1") == errno.ENOENT
    assert errno_of(model.lookup, later, b"2") == errno.ENOENT
    assert errno_of(model.lookup, at, b"%d" % (T0 + 9001)) == errno.ENOENT
    assert errno_of(model.lookup, at, b"soon") == errno.EINVAL
    assert links(model, model.lookup(at, b"-100000d").ino) == {b"0": b"../../0/0", b"1": b"../../1/0"}
    attr = model.lookup(later, b"0")
    assert attr.entry_timeout == 0 and model.lookup(at, b"-100000d").entry_timeout == 0
    assert all(a.entry_timeout == 0 for _, a, _ in model.listing(later).entries(2))
    # the answer moves with the store: a message arriving now shows under the same name
    model.store.clock = lambda: T0 + 9500
    model.put([Message.create("T", b"late", queue_id=2)])
    assert links(model, later) == {b"0": b"../../0/5", b"2": b"../../2/0"}


def test_a_time_range_lists_the_messages_stored_in_it(timed):
    model = timed
    q0 = walk(model, "topics", "T", "0", "at")

    def rng(at: int, since: int | str, until: int | str) -> dict[bytes, bytes]:
        name = f"{since if since == '' else T0 + since}..{until if until == '' else T0 + until}"
        return links(model, model.lookup(at, name.encode()).ino)

    assert rng(q0, 2000, 4000) == {b"2": b"../../2", b"3": b"../../3", b"4": b"../../4"}
    assert rng(q0, "", 1000) == {b"0": b"../../0", b"1": b"../../1"}  # both ends inclusive
    assert rng(q0, 8000, "") == {b"8": b"../../8", b"9": b"../../9"}
    assert rng(q0, 20_000, "") == {} and rng(q0, 2001, 2999) == {}
    d = model.lookup(q0, b"%d..%d" % (T0 + 2000, T0 + 4000)).ino
    assert errno_of(model.lookup, d, b"5") == errno.ENOENT  # stored, but not in the range
    assert errno_of(model.lookup, d, b"03") == errno.ENOENT
    assert errno_of(model.lookup, q0, b"%d..%d" % (T0 + 4000, T0 + 2000)) == errno.EINVAL
    assert errno_of(model.lookup, q0, b"-1h..soon") == errno.EINVAL
    assert errno_of(model.lookup, q0, b"...") == errno.EINVAL
    assert model.path(d) == f"/topics/T/0/at/{T0 + 2000}..{T0 + 4000}"
    topic_at = walk(model, "topics", "T", "at")
    assert rng(topic_at, 3000, 4000) == {b"0:3": b"../../0/3", b"0:4": b"../../0/4",
                                         b"1:3": b"../../1/3"}
    whole = rng(topic_at, -T0, "")  # `0..` (`..` alone is the parent directory)
    assert len(whole) == 15 and whole[b"1:4"] == b"../../1/4"
    r = model.lookup(topic_at, b"%d.." % (T0 + 4000)).ino
    for bad in (b"1:3", b"0:3", b"3", b"x:4", b"7:4"):
        assert errno_of(model.lookup, r, bad) == errno.ENOENT, bad
    assert model.readlink(model.lookup(r, b"1:4").ino) == b"../../1/4"
