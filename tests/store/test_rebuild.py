"""mqfs.store.offline.rebuild without Spark: files written from a store's records open as they were
written, the dispatch state it leaves lets the first open notice a rebuilt file that went
missing before it, and a symbolic link planted in the source is refused, never read through."""

from __future__ import annotations

import os
import random

import pytest

from mqfs.store import MessageStore, StoredMessage, UntrustedStore
from mqfs.store.format.message import PROPERTY_UNIQ_KEY
from mqfs.store.offline import rebuild
from mqfs.store.offline.rebuild import IndexWriter, copy_store, finish, write_queue
from mqfs.store.offline.views import store_layout
from tests.store.helpers import random_messages, small_config

N = 300


def all_messages(root: str) -> dict[tuple[str, int], list[StoredMessage]]:
    with MessageStore(root, small_config(read_only=True), create=False) as s:
        return {(t, q): s.get_range(t, q, 0, N) for t, n in s.topics().items() for q in range(n)}


@pytest.fixture
def rebuilt(tmp_path) -> tuple[str, dict[tuple[str, int], list[StoredMessage]]]:
    """A store, then its ConsumeQueues and IndexFiles written anew into `out` by store.rebuild."""
    root, out = str(tmp_path / "store"), str(tmp_path / "out")
    msgs = random_messages(random.Random(7), N, max_body=300)
    for i, m in enumerate(msgs):
        m.properties[PROPERTY_UNIQ_KEY] = f"uniq-{i}"
    with MessageStore(root, small_config()) as s:
        s.put_batch(msgs)
    queues = all_messages(root)
    layout = store_layout(root)
    copy_store(layout, out)
    for (topic, q), msgs in queues.items():
        units = [(m.queue_offset, m.commitlog_offset, m.total_size, m.tags or None) for m in msgs]
        assert write_queue(layout, out, topic, q, units) == len(msgs)
    writer = IndexWriter(layout, out)
    for m in sorted((m for ms in queues.values() for m in ms), key=lambda m: m.commitlog_offset):
        writer.add(m.topic, m.keys, m.properties.get(PROPERTY_UNIQ_KEY), m.commitlog_offset,
                   m.store_timestamp, m.sys_flag)
    writer.close()
    assert writer.keys == 3 * N  # UNIQ_KEY and two KEYS tokens each
    finish(layout, out, queues, writer.last_store_ts)
    return out, queues


def index_bytes(root: str) -> dict[str, bytes]:
    directory = os.path.join(root, "index")
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            out[name] = f.read()
    return out


def test_the_first_open_keeps_what_rebuild_wrote(rebuilt):
    out, queues = rebuilt
    before = index_bytes(out)
    assert len(before) > 1  # the entries chain through several files
    with MessageStore(out, small_config(), create=False) as s:
        assert not s.recovery.abnormal
        assert s.topics() == {"TopicA": 3, "TopicB": 3} and len(queues) == 6
        for (topic, q), msgs in queues.items():
            assert s.max_offset(topic, q) == len(msgs)
            assert [m.body for m in s.get_range(topic, q, 0, N)] == [bytes(m.body) for m in msgs]
        assert [m.body for m in s.query_key("key-5")] == [
            bytes(m.body) for ms in queues.values() for m in ms if "key-5" in m.keys]
        assert [m.keys for m in s.query_key("uniq-9")] == [["key-9", "shared-2"]]
    assert index_bytes(out) == before


@pytest.mark.allow_logs("IndexFiles went missing")
def test_a_rebuilt_index_file_deleted_before_the_first_open_is_noticed(rebuilt):
    out, queues = rebuilt
    first = sorted(os.listdir(os.path.join(out, "index")))[0]
    os.unlink(os.path.join(out, "index", first))  # it held the oldest messages' keys
    with MessageStore(out, small_config(), create=False) as s:
        for i in (0, N // 2, N - 1):
            hits = s.query_key(f"key-{i}")
            assert len(hits) == 1 and f"key-{i}" in hits[0].keys


SECRET = b"not-the-store's-" * 64


def _plant(root: str, outside: str, where: str) -> None:
    """Replace a file (or a directory) of the store by a symbolic link to a file (or a
    directory) outside it that holds SECRET."""
    if where == "config-dir":
        os.makedirs(os.path.join(outside, "dir"))
        with open(os.path.join(outside, "dir", "topics.json"), "wb") as f:
            f.write(SECRET)
        os.symlink(os.path.join(outside, "dir"), os.path.join(root, "config", "sub"))
        return
    target = os.path.join(outside, "file")
    with open(target, "wb") as f:
        f.write(SECRET)
    path = os.path.join(root, {"manifest": "mqfs.json", "config-file": "config/topics.json"}
                        .get(where, os.path.join("commitlog", "00000000000000000000")))
    os.unlink(path)
    os.symlink(target, path)


@pytest.mark.parametrize("where", ("commitlog", "manifest", "config-file", "config-dir"))
def test_a_link_planted_in_the_source_is_refused_and_nothing_is_read_through_it(
        tmp_path, monkeypatch, where):
    """Planted after the layout was read (`store_layout` refuses the links it sees then):
    copy_store reaches each file through safefs, so the link is refused where it is met,
    with one line, and no byte behind it reaches the new store. A CommitLog file is swapped
    right after the listing that found it a regular file."""
    root, out, outside = (str(tmp_path / d) for d in ("store", "out", "outside"))
    os.makedirs(outside)
    with MessageStore(root, small_config()) as s:
        s.put_batch(random_messages(random.Random(3), 20, max_body=100))
    layout = store_layout(root)
    if where == "commitlog":
        listed = rebuild.commitlog_files

        def listed_then_swapped(r: str) -> list[tuple[int, str]]:
            found = listed(r)
            _plant(root, outside, where)
            return found

        monkeypatch.setattr(rebuild, "commitlog_files", listed_then_swapped)
    else:
        _plant(root, outside, where)
    with pytest.raises(UntrustedStore, match="symbolic link") as refused:
        copy_store(layout, out)
    assert "\n" not in str(refused.value)
    for dirpath, _, names in os.walk(out):
        for n in names:
            with open(os.path.join(dirpath, n), "rb") as f:
                assert SECRET[:32] not in f.read(), os.path.join(dirpath, n)
