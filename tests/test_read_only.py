"""A read-only open reads a cleanly closed store and changes nothing on disk."""

import os

import pytest

from store import Message, MessageStore, StoreError
from tests.store_helpers import small_config


def _snapshot(root) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            st = os.stat(os.path.join(dirpath, n))
            out[os.path.relpath(os.path.join(dirpath, n), root)] = (st.st_size, st.st_mtime_ns)
    return out


def test_read_only_open_reads_everything_and_writes_nothing(tmp_path):
    with MessageStore(str(tmp_path), small_config()) as s:
        for i in range(200):
            s.put(Message.create("t", b"m%d" % i, queue_id=i % 2, keys=[f"k{i}"]))
    before = _snapshot(tmp_path)
    with MessageStore(str(tmp_path), small_config(read_only=True)) as s:
        assert not (tmp_path / "abort").exists()
        assert bytes(s.get("t", 1, 99).body) == b"m199"
        assert [bytes(m.body) for m in s.query_key("k7")] == [b"m7"]
        assert s.max_offset("t", 0) == 100
        with pytest.raises(StoreError, match="read-only"):
            s.put(Message(topic="t", body=b"no"))
        with pytest.raises(StoreError, match="read-only"):
            s.commit_offset("g", "t", 0, 1)
    assert _snapshot(tmp_path) == before


def test_read_only_open_of_a_crashed_store_reads_and_changes_nothing(tmp_path):
    with pytest.raises(StoreError, match="holds no store"):
        MessageStore(str(tmp_path / "none"), small_config(read_only=True)).open()
    assert not (tmp_path / "none").exists()
    with MessageStore(str(tmp_path), small_config()) as s:
        s.put(Message(topic="t", body=b"x"))
    (tmp_path / "abort").write_text("1")
    before = _snapshot(tmp_path)
    with MessageStore(str(tmp_path), small_config(read_only=True)) as s:
        assert s.recovery.abnormal and bytes(s.get("t", 0, 0).body) == b"x"
    assert _snapshot(tmp_path) == before
    with MessageStore(str(tmp_path)) as s:  # a read-write open recovers it
        assert bytes(s.get("t", 0, 0).body) == b"x"
