"""Damaged or crafted config files (topics.json, consumerOffset.json, dispatchState.json,
queueCuts.json, mqfs.json): each is refused with one line naming the file, through the API and the CLI, and
nothing on disk changes. Good shapes (ours, RocketMQ's fastjson output, a .bak) still open."""

import os
import subprocess
import sys

import pytest

from mqfs.store import InvalidConfig, InvalidMessage, Message, MessageStore, StoreError, StoreFormatError
from tests.store.helpers import small_config, store_state
from tests.waits import LIMIT

DEEP = "[" * 100_000 + "]" * 100_000

DAMAGED = {
    "topics.json": [
        "[1]",
        "null",
        "{not json",
        DEEP,
        '{"topicConfigTable": {"T": {"writeQueueNums": 100000000}}}',
        '{"topicConfigTable": {"T": {"writeQueueNums": -1}}}',
        '{"topicConfigTable": {"T": {"writeQueueNums": "4"}}}',
        '{"topicConfigTable": {"T": {"readQueueNums": true}}}',
        '{"topicConfigTable": {"T": {"topicName": 7}}}',
        '{"topicConfigTable": {"a/../b": {"writeQueueNums": 1}}}',
        '{"topicConfigTable": {"T": [1]}}',
        '{"topicConfigTable": [], "dataVersion": {}}',
        '{"topicConfigTable": {}, "dataVersion": {"counter": -3}}',
    ],
    "consumerOffset.json": [
        "[1]",
        "null",
        DEEP,
        '{"offsetTable": []}',
        '{"offsetTable": {"T@g": {"0": -5}}}',
        '{"offsetTable": {"T@g": {"0": 1.5}}}',
        '{"offsetTable": {"T@g": {"x": 5}}}',
        '{"offsetTable": {"T@g": {"5000": 5}}}',
        '{"offsetTable": {"Tg": {"0": 5}}}',
        '{"offsetTable": {"T@bad group": {"0": 5}}}',
        '{"offsetTable": {"T@g": null}}',
    ],
    "dispatchState.json": [
        "[1]",
        "null",
        DEEP,
        '{"queues": {}}',
        '{"queues": {"T": {"0": true}}, "indexFiles": {}}',
        '{"queues": {"T": {"0": -1}}, "indexFiles": {}}',
        '{"queues": {"T": []}, "indexFiles": {}}',
        '{"queues": {}, "indexFiles": {"../x": 3}}',
    ],
    "queueCuts.json": [
        "[1]",
        DEEP,
        '{"cuts": []}',
        '{"cuts": {"x": {}}}',
        '{"cuts": {"5": {"T": [-1]}}}',
        '{"cuts": {"5": {"a/../b": [0]}}}',
        '{"cuts": {"5": {"T": 0}}}',
    ],
}
# read-only opens pass over these: the close-time state and the cuts a recovery left (a
# queue's first use then checks it against the log), so only read-write opens refuse them
NOT_READ_ONLY = ("dispatchState.json", "queueCuts.json")
CASES = [(name, text) for name, shapes in DAMAGED.items() for text in shapes]
IDS = [f"{name}-{i}" for name, shapes in DAMAGED.items() for i in range(len(shapes))]


def _store(root) -> None:
    """A closed store holding one message, a committed offset and all three config files."""
    with MessageStore(str(root), small_config()) as s:
        s.put(Message.create("T", b"hello", keys=["k"]))
        s.commit_offset("g", "T", 0, 1)


def _damage(root, name: str, text: str) -> str:
    path = os.path.join(root, "config", name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    if os.path.exists(path + ".bak"):
        os.unlink(path + ".bak")  # no good copy to fall back to
    return path


@pytest.mark.parametrize("name,text", CASES, ids=IDS)
def test_damaged_config_refuses_the_open_naming_the_file(tmp_path, name, text):
    _store(tmp_path)
    path = _damage(tmp_path, name, text)
    before = store_state(str(tmp_path))
    with pytest.raises(StoreFormatError) as err:
        MessageStore(str(tmp_path)).open()
    line = str(err.value)
    assert line.startswith(path + " ") and "\n" not in line and "delete it" in line
    assert store_state(str(tmp_path)) == before  # no byte changed, the damaged file included
    if name not in NOT_READ_ONLY:
        with pytest.raises(StoreFormatError, match=f"^{path} "):
            MessageStore(str(tmp_path), small_config(read_only=True)).open()


@pytest.mark.parametrize("name,text", CASES[::3], ids=IDS[::3])
def test_cli_reports_damaged_config_in_one_line(tmp_path, name, text):
    """`info` (a read-only open) refuses in one line; `verify` names the file as a problem
    (info never reads the close-time state, so that one only verify reports)."""
    _store(tmp_path)
    path = _damage(tmp_path, name, text)
    if name not in NOT_READ_ONLY:
        proc = subprocess.run([sys.executable, "-m", "mqfs.fusefs", "info", str(tmp_path)],
                              capture_output=True, text=True, timeout=LIMIT)
        assert proc.returncode != 0
        assert "Traceback" not in proc.stderr
        assert proc.stderr.count("\n") == 1 and path in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "mqfs.fusefs", "verify", str(tmp_path)],
                          capture_output=True, text=True, timeout=LIMIT)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert any(line.startswith(f"PROBLEM {path} ") for line in proc.stdout.splitlines())


def test_deeply_nested_manifest_is_a_format_error(tmp_path):
    _store(tmp_path)
    (tmp_path / "mqfs.json").write_text(DEEP)
    with pytest.raises(StoreFormatError, match="mqfs.json is nested too deeply"):
        MessageStore(str(tmp_path)).open()


@pytest.mark.allow_logs(r"; using .*\.bak$")
def test_damaged_file_falls_back_to_its_bak(tmp_path):
    _store(tmp_path)
    with MessageStore(str(tmp_path)) as s:
        s.commit_offset("g", "T", 0, 1)  # a second write: .bak now holds a good copy
    (tmp_path / "config" / "consumerOffset.json").write_text('{"offsetTable": {"T@g": [1]}}')
    with MessageStore(str(tmp_path), small_config(read_only=True)) as s:
        assert s.committed_offset("g", "T", 0) == 1


def test_rocketmq_fastjson_files_are_read(tmp_path):
    _store(tmp_path)
    (tmp_path / "config" / "consumerOffset.json").write_text(
        '{"offsetTable":{"T@g":{0:7}},"dataVersion":{"counter":2,"timestamp":1}}')
    (tmp_path / "config" / "topics.json").write_text(
        '{"dataVersion":{"counter":3,"stateVersion":0,"timestamp":1},"topicConfigTable":{'
        '"T":{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG",'
        '"topicName":"T","topicSysFlag":0,"writeQueueNums":4},'
        '"%RETRY%g":{"readQueueNums":1,"topicName":"%RETRY%g","writeQueueNums":1}}}')
    with MessageStore(str(tmp_path), small_config(read_only=True)) as s:
        assert s.committed_offset("g", "T", 0) == 7
        assert s.topics() == {"T": 4, "%RETRY%g": 1}


def test_queue_ids_past_the_limit_are_refused_before_anything_is_written(tmp_path):
    _store(tmp_path)
    with MessageStore(str(tmp_path)) as s:
        end = s.commitlog.queue.max_wrote_offset
        for _ in range(2):  # the second try must not find a half-made queue
            with pytest.raises(InvalidMessage, match="queue id 1024"):
                s.put(Message.create("T", b"x", queue_id=1024))
        assert s.commitlog.queue.max_wrote_offset == end
        s.put(Message.create("T", b"y", queue_id=1023))
    with MessageStore(str(tmp_path), small_config(read_only=True)) as s:  # our own file reads
        assert s.topics() == {"T": 1024}


@pytest.mark.parametrize("field, value", [("commitlog_file_size", 100), ("index_entries", 1),
                                          ("flush_mode", "never"), ("retention_bytes", -1)])
def test_a_config_the_store_cannot_use_is_a_store_error(tmp_path, field, value):
    cfg = small_config(**{field: value})
    with pytest.raises(InvalidConfig) as caught:
        cfg.validate()
    assert isinstance(caught.value, StoreError)
    with pytest.raises(InvalidConfig):
        MessageStore(str(tmp_path), cfg).open()
    assert not os.path.exists(tmp_path / "commitlog")
