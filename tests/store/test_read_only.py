"""A read-only open reads a cleanly closed store and changes nothing on disk."""

import os
import shutil

import pytest

from mqfs.store import Message, MessageStore, ReadOnlyStore, StoreConfig, StoreError
from tests.store.helpers import file_hashes, small_config
from tests.waits import LIMIT


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
        with pytest.raises(ReadOnlyStore, match="read-only"):
            s.put(Message(topic="t", body=b"no"))
        with pytest.raises(ReadOnlyStore, match="read-only"):
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


def test_read_only_open_of_a_store_without_topics_json_derives_its_topics(tmp_path):
    """A broker's store as copied without config/: no topics.json, no mqfs.json. The queues
    are known from consumequeue/<topic>/<id> alone, read-only as read-write."""
    cfg = small_config(flavor="rocketmq", index_slots=50, index_entries=200)  # broker's 4:1
    with MessageStore(str(tmp_path), cfg) as s:
        for i in range(30):
            s.put(Message.create("Orders", b"o%d" % i, queue_id=i % 3, keys=[f"k{i}"]))
        s.put(Message.create("%RETRY%billing", b"r", queue_id=0))
    shutil.rmtree(tmp_path / "config")
    os.unlink(tmp_path / "mqfs.json")
    before = _snapshot(tmp_path)
    with MessageStore(str(tmp_path), StoreConfig(read_only=True)) as s:
        assert s.config.flavor == "rocketmq"
        assert s.topics() == {"Orders": 3, "%RETRY%billing": 1}
        assert s.max_offset("Orders", 2) == 10 and bytes(s.get("Orders", 2, 9).body) == b"o29"
        assert [bytes(m.body) for m in s.query_key("k4")] == [b"o4"]
    assert _snapshot(tmp_path) == before  # nothing written, topics.json included


def test_read_only_open_refuses_a_queue_directory_it_cannot_serve(tmp_path):
    with MessageStore(str(tmp_path), small_config()) as s:
        s.put(Message(topic="t", body=b"x"))
    shutil.rmtree(tmp_path / "config")
    bad = tmp_path / "consumequeue" / "t" / "99999999"
    bad.mkdir()
    with pytest.raises(StoreError, match=f"^{bad} is not a queue"):
        MessageStore(str(tmp_path), small_config(read_only=True)).open()


@pytest.mark.parametrize("crashed", [False, True], ids=["clean", "crashed"])
@pytest.mark.parametrize("command", ["info", "verify"])
def test_info_and_verify_change_no_byte_and_create_no_file(tmp_path, command, crashed):
    import subprocess
    import sys
    root = tmp_path / "s"
    with MessageStore(str(root), small_config()) as s:
        for i in range(150):
            s.put(Message.create("t", b"m%d" % i, queue_id=i % 3, keys=[f"k{i}"]))
    if crashed:  # a crash: the abort file left, a tail the checkpoint never saw
        s = MessageStore(str(root), small_config()).open()
        s.put(Message.create("t", b"after", keys=["late"]))
        s.flush_services.stop()
        s._lock_file.release()  # the kernel drops a killed owner's locks
        (root / "abort").write_text("99999")
    before = file_hashes(root)
    proc = subprocess.run([sys.executable, "-m", "mqfs.fusefs", command, str(root)],
                          capture_output=True, text=True, timeout=LIMIT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert file_hashes(root) == before
    if crashed:
        assert "not closed cleanly" in proc.stdout or "not clean" in proc.stdout
    if crashed:
        s._release_files()


def test_info_output_reads_as_english(tmp_path):
    import subprocess
    import sys
    root = tmp_path / "s"
    with MessageStore(str(root), small_config()) as s:
        s.create_topic("empty", 1)
        s.put(Message.create("one", b"x"))
    out = subprocess.run([sys.executable, "-m", "mqfs.fusefs", "info", str(root)],
                         capture_output=True, text=True, timeout=LIMIT).stdout
    assert "consumequeue 1 file," in out
    assert "  one/0: offsets 0..0 (1 message)" in out
    assert "  empty/0: no messages" in out
