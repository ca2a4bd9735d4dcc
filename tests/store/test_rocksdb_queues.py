"""A broker's RocksDB ConsumeQueue read from RocksDB (store/queues/rocksdb_queues.py): Java's
answers from it, the CommitLog's records for what RocksDB had not flushed, nothing in the
broker's directory changed, and the CommitLog walk, said in one line, where it cannot be read."""

from __future__ import annotations

import glob
import os
import stat
import struct
import sys

import pytest

from mqfs.store import MessageStore, StoreConfig
from mqfs.store.errors import CorruptionError, UntrustedStore
from mqfs.store.queues import rocksdb_queues
from tests.store.java_stores import DELAY_LEVELS, answers, consumer_view, unpack
from tests.store.test_java_stores import expected, read_only, seen_by_mqfs

rocksdict = pytest.importorskip("rocksdict")  # scripts/setup installs it


def every_file(root: str) -> dict[str, tuple]:
    """Names, modes, sizes, mtimes, link counts and bytes of everything under root."""
    out: dict[str, tuple] = {}
    for top, dirs, names in os.walk(root):
        for name in [".", *dirs, *names]:
            path = os.path.normpath(os.path.join(top, name))
            st = os.lstat(path)
            data = open(path, "rb").read() if stat.S_ISREG(st.st_mode) else os.readlink(path) \
                if stat.S_ISLNK(st.st_mode) else sorted(os.listdir(path)) if stat.S_ISDIR(st.st_mode) else None
            out[path] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_nlink, data)
    return out


def check_answers(s: MessageStore, kind: str, lost: set[tuple[str, int]] = frozenset()) -> None:
    """Every offset, min, max and time search as Java answered them."""
    for queue in answers(kind)["queues"]:
        topic, q = queue["topic"], queue["queue"]
        assert (s.min_offset(topic, q), s.max_offset(topic, q)) == (queue["min"], queue["max"]), (topic, q)
        for answer in queue["messages"]:
            m = s.get(topic, q, answer["at"])
            assert seen_by_mqfs(m) == expected(queue, answer, m), (topic, q, answer["at"])
        for ts, lower, upper in queue["bytime"]:
            assert s.offset_by_time(topic, q, ts) == lower, (topic, q, ts)
            if upper or queue["min"] == 0:
                assert s.offset_by_time(topic, q, ts, upper=True) == upper, (topic, q, ts)


def notes(s: MessageStore) -> list[str]:
    return s.recovery.notes if s.recovery is not None else []


def test_queues_come_from_rocksdb_and_no_file_of_the_broker_changes(tmp_path):
    root = unpack("rocksdb", str(tmp_path))
    before = every_file(root)
    with MessageStore(root, read_only(), create=False) as s:
        assert not [n for n in notes(s) if "RocksDB ConsumeQueue" in n]
        assert isinstance(s.consume_queues.if_open(("Orders", 0)), rocksdb_queues.RocksQueue)
        check_answers(s, "rocksdb")
        shadow = s._rocksdb.shadow.path
        assert "rocksdict-config.json" in os.listdir(shadow)  # rocksdict wrote it here
    assert every_file(root) == before  # no rocksdict-config.json, LOG, OPTIONS or mtime
    assert not os.path.lexists(shadow)  # the private directory went with the store


def lag(db_dir: str, cut: int) -> None:
    """The broker's database as if RocksDB had flushed only the units of records below
    CommitLog offset `cut` (the broker writes units without a WAL: a kill loses the rest)."""
    db = rocksdict.Rdict(db_dir, options=rocksdict.Options(raw_mode=True),
                         column_families={"offset": rocksdict.Options(raw_mode=True)})
    offsets = db.get_column_family("offset")
    kept: dict[tuple[bytes, int], int] = {}
    for key, value in list(db.items()):
        (n,) = struct.unpack_from(">i", key)
        name, qid, at = key[5:5 + n], struct.unpack_from(">i", key, 6 + n)[0], struct.unpack_from(">q", key, 11 + n)[0]
        if struct.unpack_from(">q", value)[0] >= cut:
            del db[key]
        else:
            kept[(name, qid)] = max(kept.get((name, qid), -1), at)
    for key in list(offsets.keys()):
        (n,) = struct.unpack_from(">i", key)
        name, qid = key[5:5 + n], struct.unpack_from(">i", key, 10 + n)[0]
        if name == b"CHECKPOINT_TOPIC":
            offsets[key] = struct.pack(">q", cut)
        elif (name, qid) not in kept:
            del offsets[key]
        elif key[6 + n:9 + n] == b"max":
            offsets[key] = struct.pack(">qq", 0, kept[(name, qid)])
    del offsets
    db.close()


def test_units_rocksdb_had_not_flushed_come_from_the_commitlog(tmp_path):
    root = unpack("rocksdb", str(tmp_path))
    lag(os.path.join(root, "consumequeue"), 58931)  # Packed 0's first record: a record start
    with MessageStore(root, read_only(), create=False) as s:
        assert not [n for n in notes(s) if "RocksDB ConsumeQueue" in n]
        assert s.consume_queues.if_open(("Orders", 0)).rocks_max == 40  # its 41st is in the tail
        check_answers(s, "rocksdb")


def test_a_unit_rocksdb_holds_wrongly_is_never_served(tmp_path):
    root = unpack("rocksdb", str(tmp_path))
    db = rocksdict.Rdict(os.path.join(root, "consumequeue"), options=rocksdict.Options(raw_mode=True),
                         column_families={"offset": rocksdict.Options(raw_mode=True)})
    first, second = (rocksdb_queues.unit_key(b"Orders", 0, at) for at in (0, 1))
    db[first] = db[second]  # Orders/0/0 names Orders/0/1's record
    db.close()
    with MessageStore(root, read_only(), create=False) as s:
        with pytest.raises(CorruptionError):
            s.get("Orders", 0, 0)
        assert s.get("Orders", 0, 1).queue_offset == 1


def test_a_link_planted_in_consumequeue_is_refused_in_one_line(tmp_path):
    """A link is refused by the open itself (every store directory is listed link-free); a
    FIFO, no regular file, by the RocksDB reader, which then walks the CommitLog."""
    root = unpack("rocksdb", str(tmp_path))
    sst = sorted(glob.glob(os.path.join(root, "consumequeue", "*.sst")))[-1]
    os.rename(sst, str(tmp_path / "elsewhere.sst"))
    os.symlink(str(tmp_path / "elsewhere.sst"), sst)
    before = every_file(root)
    with pytest.raises(UntrustedStore) as refused:
        MessageStore(root, read_only(), create=False).open()
    assert "symbolic link" in str(refused.value) and "\n" not in str(refused.value)
    assert every_file(root) == before
    os.unlink(sst)
    os.mkfifo(sst)
    before = every_file(root)
    with MessageStore(root, read_only(), create=False) as s:
        said = [n for n in notes(s) if "RocksDB ConsumeQueue" in n]
        assert len(said) == 1 and "000009.sst" in said[0] and "\n" not in said[0], said
        check_answers(s, "rocksdb")  # from the CommitLog walk
    assert every_file(root) == before


def test_without_rocksdict_the_commitlog_walk_serves_the_queues(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "rocksdict", None)  # import fails
    root = unpack("rocksdb", str(tmp_path))
    with MessageStore(root, read_only(), create=False) as s:
        said = [n for n in notes(s) if "RocksDB ConsumeQueue" in n]
        assert len(said) == 1 and "rocksdict is not installed" in said[0], said
        check_answers(s, "rocksdb")


def test_a_database_killed_before_its_first_flush_is_walked(tmp_path):
    """The broker writes units without a WAL: killed before RocksDB's first flush, its
    database holds nothing, and the CommitLog is every queue's only index (the broker's own
    recovery dispatches it all again)."""
    root = unpack("rocksdb-killed", str(tmp_path))
    with MessageStore(root, read_only(), create=False) as s:
        said = [n for n in notes(s) if "RocksDB ConsumeQueue" in n]
        assert len(said) == 1 and "holds no dispatched CommitLog offset" in said[0], said


def test_a_max_no_unit_bears_out_is_refused_in_one_line(tmp_path):
    """A queue's max from the offset family must name a unit: a hostile 2^60 would have every
    listing of the queue allocate for offsets no record has."""
    root = unpack("rocksdb", str(tmp_path))
    db = rocksdict.Rdict(os.path.join(root, "consumequeue"), options=rocksdict.Options(raw_mode=True),
                         column_families={"offset": rocksdict.Options(raw_mode=True)})
    offsets = db.get_column_family("offset")
    key = struct.pack(">i", 6) + b"\x01Orders\x01max\x01" + struct.pack(">i", 0)
    offsets[key] = struct.pack(">qq", 0, 1 << 60)
    del offsets
    db.close()
    with MessageStore(root, read_only(), create=False) as s:
        said = [n for n in notes(s) if "RocksDB ConsumeQueue" in n]
        assert len(said) == 1 and "max of Orders/0" in said[0], said
        check_answers(s, "rocksdb")  # from the CommitLog walk


def test_a_queue_only_rocksdb_remembers_is_served_empty_at_its_last_offset(tmp_path):
    """The clean fixture with its oldest CommitLog file deleted, as the broker deleted it in
    `rocksdb-killed` (same writes, same offsets): each min moves past the deleted records
    (RocksDB's min lags: RocketMQ's correctMinOffset), and Orders/1 and Orders/2, whose every
    record went, are empty at 40, as the broker answered; the rest read as it served them."""
    root = unpack("rocksdb", str(tmp_path))
    os.unlink(os.path.join(root, "commitlog", "00000000000000000000"))
    with MessageStore(root, read_only(), create=False) as s:
        assert not [n for n in notes(s) if "RocksDB ConsumeQueue" in n]
        for queue in answers("rocksdb-killed")["queues"]:
            topic, q = queue["topic"], queue["queue"]
            assert (s.min_offset(topic, q), s.max_offset(topic, q)) == (queue["min"], queue["max"]), (topic, q)
            got = s.get_range(topic, q, queue["min"], queue["max"] - queue["min"])
            assert [(m.queue_offset, bytes(m.body)) for m in got] == [
                (a["offset"], consumer_view(queue, a)["body"]) for a in queue["messages"]], (topic, q)
        assert s.max_offset("Orders", 1) == s.min_offset("Orders", 1) == 40


def test_a_live_read_only_store_adds_what_the_broker_writes_after_rocksdbs_units(tmp_path):
    """A live -o ro store: RocksDB as it was at open, then the records the broker appends, read
    from the CommitLog by the follower (RocksQueue.extend), as its queues' units."""
    root = unpack("rocksdb", str(tmp_path))
    cut = 58931  # Packed 0's first record: RocksDB flushed what was dispatched before it
    lag(os.path.join(root, "consumequeue"), cut)
    written = {}
    for name in sorted(os.listdir(os.path.join(root, "commitlog"))):
        path, start = os.path.join(root, "commitlog", name), int(name)
        with open(path, "r+b") as f:
            data = f.read()
            if start + len(data) > cut:  # the broker had not written these bytes yet
                written[path] = data
                f.seek(max(cut - start, 0))
                f.write(bytes(len(data) - max(cut - start, 0)))
    with MessageStore(root, StoreConfig(read_only=True, live_refresh_ms=3_600_000,
                                        message_delay_level=DELAY_LEVELS), create=False) as s:
        assert not [n for n in notes(s) if "RocksDB ConsumeQueue" in n]
        assert s.max_offset("Orders", 0) == 40 and not s.has_topic("Bulk")
        for path, data in written.items():
            with open(path, "r+b") as f:
                f.write(data)  # what the broker appended
        s.live.refresh()
        check_answers(s, "rocksdb")


def test_a_double_writing_brokers_queue_directories_beside_the_database_are_no_obstacle(tmp_path):
    """rocksdbCQDoubleWriteEnable: RocketMQ's CombineConsumeQueueStore keeps ConsumeQueue files
    in consumequeue/<topic>/<queue>/ beside the database in consumequeue/."""
    root = unpack("rocksdb", str(tmp_path))
    os.makedirs(os.path.join(root, "consumequeue", "Orders", "0"))
    with MessageStore(root, read_only(), create=False) as s:
        assert not [n for n in notes(s) if "RocksDB ConsumeQueue" in n]
        check_answers(s, "rocksdb")
