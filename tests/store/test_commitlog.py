"""CommitLog on mapped files: rolling with the BLANK rule, reading back, reopening, the lock,
the manifest, and refusing bad input without writing anything."""

import json
import os
import random
import subprocess
import sys

import pytest

from mqfs.store import InvalidMessage, Message, MessageStore, StoreFormatError, StoreLocked
from mqfs.store.files.commitlog import CommitLog
from mqfs.store.format import codec, layout
from mqfs.store.format.flavor import XXHASH
from tests.store.helpers import files_in, random_messages, small_config, stored_records


def _record_size(body_len: int) -> int:
    return 91 + 1 + body_len  # topic "t", no properties


def test_thousands_of_random_messages_roll_and_read_back(tmp_path):
    rng = random.Random(7)
    msgs = random_messages(rng, 3000)
    with MessageStore(str(tmp_path), small_config()) as s:
        results = s.put_batch(msgs[:1500]) + [s.put(m) for m in msgs[1500:]]
        by_offset = [s.commitlog.read(r.commitlog_offset) for r in results]
        iterated, damages = stored_records(s)
    assert damages == []
    assert len(files_in(str(tmp_path), "commitlog")) > 50
    for m, got in zip(msgs, by_offset):
        assert (got.topic, got.queue_id, bytes(got.body), got.keys) == (m.topic, m.queue_id, m.body, m.keys)
    assert [r.commitlog_offset for r in results] == [m.commitlog_offset for m in iterated]
    # every non-last file ends with a BLANK whose size reaches the end of the file
    cl = CommitLog(str(tmp_path), 64 * 1024, XXHASH, read_only=True)
    cl.load()
    ends = {r.commitlog_offset // 65536: r.commitlog_offset % 65536 + r.size for r in results}
    for mf in cl.queue.files[:-1]:
        pos = ends[mf.file_from_offset // 65536]
        size, magic = codec.peek_header(mf.buffer(), pos)
        assert magic == layout.MAGIC_BLANK and size == 65536 - pos and size >= 8
    cl.close()
    with MessageStore(str(tmp_path), small_config()) as s:
        again = [bytes(m.body) for m in stored_records(s)[0]]
    assert again == [m.body for m in msgs]


@pytest.mark.parametrize("spare, moves", [(7, True), (8, False), (0, True)])
def test_a_message_needs_eight_spare_bytes_after_it(tmp_path, spare, moves):
    size = 4096  # records without the checksum trailer: RocketMQ's 91 + topic + body sizes
    with MessageStore(str(tmp_path), small_config(commitlog_file_size=size, record_crc=False)) as s:
        first = s.put(Message(topic="t", body=b"a" * (size - 100 - 92)))
        assert first.size == size - 100
        second = s.put(Message(topic="t", body=b"b" * (100 - spare - 92)))
        assert second.commitlog_offset == (size if moves else size - 100)
        assert bytes(s.get("t", 0, 1).body) == b"b" * (100 - spare - 92)


def test_record_larger_than_a_file_is_refused_and_nothing_written(tmp_path):
    with MessageStore(str(tmp_path), small_config(commitlog_file_size=4096)) as s:
        with pytest.raises(InvalidMessage, match="does not fit"):
            s.put(Message(topic="t", body=b"x" * 5000))
        assert s.commitlog.max_offset == 0 and s.topics() == {}


@pytest.mark.parametrize("msg, match", [
    (Message(topic="t", body=b"x" * (4 * 1024 * 1024 + 1)), "limit"),
    (Message(topic="bad topic", body=b"x"), "characters"),
    (Message(topic="t", body=b"x", properties={"k": "v" * 33000}), "32767"),
    (Message(topic="t", body=b"x", queue_id=-1), "queue id"),
])
def test_bad_input_is_a_clear_error_and_writes_nothing(tmp_path, msg, match):
    with MessageStore(str(tmp_path), small_config(commitlog_file_size=16 << 20)) as s:
        s.put(Message(topic="t", body=b"before"))
        before = s.commitlog.max_offset
        with pytest.raises(InvalidMessage, match=match):
            s.put_batch([Message(topic="t", body=b"ok"), msg])
        assert s.commitlog.max_offset == before and s.max_offset("t", 0) == 1


def test_second_process_gets_a_clear_error_naming_the_pid(tmp_path):
    with MessageStore(str(tmp_path), small_config()) as s:
        s.put(Message(topic="t", body=b"x"))
        s.flush()  # the flush service would write the checkpoint in its own time, mid-test
        listing = sorted(os.listdir(tmp_path))
        code = ("import sys; from mqfs.store import MessageStore, StoreLocked\n"
                "try:\n MessageStore(sys.argv[1]).open()\n"
                "except StoreLocked as e:\n print(e); sys.exit(3)\n")
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                             text=True, cwd=os.getcwd())
        assert out.returncode == 3, out.stderr
        assert f"pid {os.getpid()}" in out.stdout
        assert sorted(os.listdir(tmp_path)) == listing
        with pytest.raises(StoreLocked):
            MessageStore(str(tmp_path)).open()


def test_manifest_records_flavor_and_sizes_and_reopen_uses_them(tmp_path):
    with MessageStore(str(tmp_path), small_config(flavor="rocketmq")) as s:
        s.put(Message(topic="t", body=b"x"))
    manifest = json.loads((tmp_path / "mqfs.json").read_text())
    assert manifest["flavor"] == "rocketmq" and manifest["commitlog_file_size"] == 64 * 1024
    with MessageStore(str(tmp_path)) as s:  # default config asks for 1 GiB; manifest wins
        assert s.config.commitlog_file_size == 64 * 1024 and s.flavor.name == "rocketmq"
        assert bytes(s.get("t", 0, 0).body) == b"x"


@pytest.mark.allow_logs(r"^queue ends: ", r"^no abort file, but ", r"\(no id\): the queues are listed")
def test_store_without_manifest_opens_as_rocketmq(tmp_path):
    """(Its records carry the id the lost manifest held: they vouch for nothing, and the
    queues' ends are proven from the CommitLog.)"""
    cfg = small_config(flavor="rocketmq", index_slots=50, index_entries=200)
    with MessageStore(str(tmp_path), cfg) as s:
        s.put(Message.create("t", b"x", keys=["k"]))
    os.unlink(tmp_path / "mqfs.json")
    with MessageStore(str(tmp_path)) as s:
        assert s.flavor.name == "rocketmq" and s.config.commitlog_file_size == 64 * 1024
        assert (s.config.consume_queue_units, s.config.index_slots) == (100, 50)
        assert [bytes(m.body) for m in s.query_key("k")] == [b"x"]


def test_load_rules_zero_length_last_file_removed_wrong_size_refused(tmp_path):
    with MessageStore(str(tmp_path), small_config()) as s:
        s.put(Message(topic="t", body=b"x"))
    extra = tmp_path / "commitlog" / f"{65536:020d}"
    extra.write_bytes(b"")
    with MessageStore(str(tmp_path)) as s:
        assert s.commitlog.max_offset > 0
    assert not extra.exists()
    extra.write_bytes(b"\0" * 100)
    with pytest.raises(StoreFormatError, match="100 bytes"):
        MessageStore(str(tmp_path)).open()
    assert extra.stat().st_size == 100


def test_truncate_dirty_zeroes_every_byte_after_the_cut(tmp_path):
    """Bytes a cut leaves behind are zeroed on disk, however far into the file they lie."""
    from mqfs.store.files.mapped_file_queue import MappedFileQueue
    size = 3 << 20  # more than one of _zero_from's 1 MiB chunks
    q = MappedFileQueue(str(tmp_path / "q"), size)
    q.load()
    mf = q.last_file_for_append()
    mf.append(b"\x07" * 1000)
    path = mf.path
    q.close()
    with open(path, "r+b") as f:  # stray bytes past the end, as a torn write leaves them
        for at in (5000, (1 << 20) + 3, size - 1):
            f.seek(at)
            f.write(b"\x09")
    q = MappedFileQueue(str(tmp_path / "q"), size)
    q.load()
    q.truncate_dirty(700)
    q.close()
    with open(path, "rb") as f:
        data = f.read()
    assert data[:700] == b"\x07" * 700 and data[700:] == bytes(size - 700)
