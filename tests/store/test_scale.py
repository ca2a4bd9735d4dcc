"""What keeps an open's cost bounded by what changed: each queue's end and last units checked
at open, the rest by the scrub (which resumes across opens), a missing first ConsumeQueue file
caught at open, and a refused open leaving every file as it found it."""

from __future__ import annotations

import json
import os
import shutil
import threading

import pytest

from mqfs.store import CorruptionError, Message, MessageStore, NotFound
from mqfs.store.files.index_file import ENTRY_SIZE, HEADER_SIZE, SLOT_SIZE
from mqfs.store.integrity.verify import verify_store
from mqfs.store.repair import apply_repair, plan_repair
from tests.fusefs.helpers import mounted, needs_fuse
from tests.store.helpers import file_hashes, flip, small_config
from tests.waits import eventually

pytestmark = pytest.mark.allow_logs(r"^recovery: ", r"^scrub: ")


def _fill(root: str, n: int, cfg=None) -> None:
    with MessageStore(root, cfg or small_config()) as s:
        s.put_batch([Message.create("t", b"m%d" % i, keys=[f"k{i}"]) for i in range(n)])


def test_a_deleted_first_consumequeue_file_is_caught_by_the_open(tmp_path):
    root = str(tmp_path / "s")
    _fill(root, 250)  # 100 units a file: three files
    os.unlink(os.path.join(root, "consumequeue", "t", "0", "0" * 20))
    with MessageStore(root, small_config(read_only=True), create=False) as s:
        assert s.min_offset("t", 0) == 0 and bytes(s.get("t", 0, 5).body) == b"m5"
    with MessageStore(root, small_config(), create=False) as s:
        assert not s.recovery.notes  # the open opened no queue: the first use proves it
        assert [bytes(m.body) for m in s.get_range("t", 0, 0, 3)] == [b"m0", b"m1", b"m2"]
        assert any("lost its first file" in n for n in s.recovery.notes)
        assert s.min_offset("t", 0) == 0 and s.max_offset("t", 0) == 250
        assert s.put(Message.create("t", b"next")).queue_offset == 250


def test_an_old_damaged_unit_is_left_to_the_scrub_which_rebuilds_the_queue(tmp_path):
    root = str(tmp_path / "s")
    _fill(root, 250)
    flip(os.path.join(root, "consumequeue", "t", "0", "0" * 20), 20 * 10 + 3)  # unit 10
    with MessageStore(root, small_config(), create=False) as s:
        assert not s.recovery.notes  # the open read the last units only
        with pytest.raises((CorruptionError, NotFound)):
            s.get("t", 0, 10)  # never another message
        s.scrub()
        status = s.scrub_status()
        assert status["passes"] == 1 and "unit 10 does not match" in status["findings"][0]
        assert bytes(s.get("t", 0, 10).body) == b"m10" and s.max_offset("t", 0) == 250
    assert os.listdir(os.path.join(root, "quarantine"))


def test_the_scrub_resumes_where_the_last_mount_left_it(tmp_path):
    root = str(tmp_path / "s")
    _fill(root, 20_000, small_config(consume_queue_units=30_000))
    with MessageStore(root, small_config(), create=False) as s:
        assert s._scrub is not None
        assert s._scrub.step()  # 2048 units of the one queue, then closed
        assert s.scrub_status()["queue"] == "t/0"
    state = json.load(open(os.path.join(root, "config", "scrub.json")))
    assert state["queue"] == "t/0" and state["unit"] == 2048
    with MessageStore(root, small_config(), create=False) as s:
        s.scrub()
        assert s.scrub_status()["checked_units"] == 20_000 - 2048


def test_damage_in_an_old_record_is_found_by_the_scrub_not_the_open(tmp_path):
    root = str(tmp_path / "s")
    _fill(root, 3000)  # 64 KiB CommitLog files: many
    flip(os.path.join(root, "commitlog", "0" * 20), 1000)
    with MessageStore(root, small_config(), create=False) as s:
        assert not s.recovery.notes  # the open checked the last file only
        s.scrub()
        findings = s.scrub_status()["findings"]
        assert any("damaged record at CommitLog offset 976 (file 00000000000000000000)" in f
                   for f in findings)


@pytest.mark.parametrize("field,byte,mask", [("hash", 3, 0x10), ("phy", 11, 0x10), ("prev", 19, 0x10),
                                             ("phy's sign", 4, 0x80)])  # t5 seed 34071
def test_damage_in_an_old_indexfile_entry_is_found_by_the_scrub_and_never_served(tmp_path, field, byte, mask):
    """A flipped bit in an entry of an old IndexFile: the open does not read it (its header
    and ends hold), key reads never serve another message for it, the scrub reports the
    entry, verify finds it, and repair, or the next open after the scrub's finding (the
    file to quarantine/, indexed again), makes every key found again."""
    root = str(tmp_path / "s")
    _fill(root, 1000)  # 200 entries a file: five files
    oldest = sorted(os.listdir(os.path.join(root, "index")))[0]
    flip(os.path.join(root, "index", oldest), HEADER_SIZE + 64 * SLOT_SIZE + 50 * ENTRY_SIZE + byte, mask)
    with MessageStore(root, small_config(), create=False) as s:
        assert not s.recovery.notes and not s.recovery.quarantined
        for i in range(1000):
            assert all(bytes(m.body) == b"m%d" % i for m in s.query_key(f"k{i}")), i
        s.scrub()
        findings = s.scrub_status()["findings"]
        assert any(f"IndexFile {oldest} entry 50 " in f for f in findings), findings
    assert not verify_store(root).ok
    damaged = str(tmp_path / "damaged")
    shutil.copytree(root, damaged, ignore=shutil.ignore_patterns("lock"))
    apply_repair(plan_repair(root))
    for store in (root, damaged):  # repaired, or rebuilt by the open after the scrub's finding
        with MessageStore(store, small_config(), create=False) as s:
            for i in range(1000):
                assert [bytes(m.body) for m in s.query_key(f"k{i}")] == [b"m%d" % i], i
    assert verify_store(damaged).ok
    assert any(oldest in n for n in os.listdir(os.path.join(damaged, "quarantine")))


def test_an_abnormal_open_reads_the_commitlog_from_the_checkpoint_not_from_its_file(tmp_path):
    """After a crash the open checks and dispatches the records from the checkpoint's on (it
    scanned from the start of the checkpoint's file: up to 1 GiB more with RocketMQ's
    sizes); damage in an older record of that file is the scrub's to find."""
    never = 3_600_000
    cfg = small_config(commitlog_file_size=1 << 20, flush_interval_ms=never, commit_interval_ms=never,
                       flush_thorough_interval_ms=never, flush_cq_interval_ms=never)
    root, crashed = str(tmp_path / "s"), str(tmp_path / "crashed")
    with MessageStore(root, cfg) as s:
        s.put_batch([Message.create("t", b"m%d" % i, keys=[f"k{i}"]) for i in range(200)])
        s.flush()
        s.put_batch([Message.create("t", b"m%d" % i, keys=[f"k{i}"]) for i in range(200, 250)])
        shutil.copytree(root, crashed, ignore=shutil.ignore_patterns("lock"))
    flip(os.path.join(crashed, "commitlog", "0" * 20), 1000)  # in the 10th or so record
    with MessageStore(crashed, cfg, create=False) as s:
        assert s.recovery.abnormal and s.recovery.dispatched <= 51
        assert [bytes(m.body) for m in s.query_key("k230")] == [b"m230"]
        s.scrub()
        assert any("damaged record at CommitLog offset" in f for f in s.scrub_status()["findings"])


def test_a_refused_open_leaves_a_broken_indexfile_where_it_was(tmp_path):
    root = str(tmp_path / "s")
    _fill(root, 3000)
    index_dir = os.path.join(root, "index")
    newest = sorted(os.listdir(index_dir))[-1]
    with open(os.path.join(index_dir, newest), "r+b") as f:
        f.write(b"\xff" * 16)  # an impossible header: load sets it aside for quarantine
    # and damage the last CommitLog file inside flushed data, so recovery refuses
    last = sorted(os.listdir(os.path.join(root, "commitlog")))[-1]
    flip(os.path.join(root, "commitlog", last), 300)
    before = file_hashes(root, skip=("lock",))
    with pytest.raises(CorruptionError, match="nothing was changed"):
        MessageStore(root, small_config(), create=False).open()
    assert file_hashes(root, skip=("lock",)) == before


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_queues_hold_no_descriptor_take_64_kib_and_stay_mapped_within_the_limit(tmp_path, monkeypatch):
    from mqfs.store.files import lazy_mapped_file

    monkeypatch.setattr(lazy_mapped_file, "MAX_MAPPED", 50)
    root = str(tmp_path / "s")
    cfg = small_config(consume_queue_units=300_000)  # 6 MB files, as RocketMQ's
    with MessageStore(root, cfg) as s:
        before = _fds()
        s.put_batch([Message.create(f"t{i}", b"m%d" % i) for i in range(300)])
        assert _fds() - before <= 50 + 5  # the mapped ones, not one (or two) per queue
        assert len(lazy_mapped_file._lru) <= 50
        assert [bytes(s.get(f"t{i}", 0, 0).body) for i in range(300)] == \
            [b"m%d" % i for i in range(300)]  # mapped again after eviction
    cq_file = os.path.join(root, "consumequeue", "t7", "0", "0" * 20)
    st = os.stat(cq_file)
    assert st.st_size == 300_000 * 20 and st.st_blocks * 512 <= 32 << 10  # sparse
    with MessageStore(root, cfg, create=False) as s:  # the ends found again, from the back
        assert all(s.max_offset(f"t{i}", 0) == 1 for i in range(300))
        assert s.put(Message.create("t7", b"again")).queue_offset == 1


def test_new_topics_are_lines_of_topics_log_folded_into_topics_json_at_close(tmp_path):
    root = str(tmp_path / "s")
    config = os.path.join(root, "config")
    with MessageStore(root, small_config()) as s:
        s.create_topic("a", 4)
        s.create_topic("b")
        lines = open(os.path.join(config, "topics.log")).read().splitlines()
        assert [json.loads(x) for x in lines] == [{"topic": "a", "queues": 4},
                                                  {"topic": "b", "queues": 1}]
        # what a crash leaves: the log, a torn last line, and topics.json without them
        log_copy = open(os.path.join(config, "topics.log")).read() + '{"topic": "c", "qu'
    assert not os.path.exists(os.path.join(config, "topics.log"))
    table = json.load(open(os.path.join(config, "topics.json")))["topicConfigTable"]
    assert table["a"]["writeQueueNums"] == 4 and "b" in table
    os.unlink(os.path.join(config, "topics.json"))
    with open(os.path.join(config, "topics.log"), "w") as f:
        f.write(log_copy)
    with MessageStore(root, small_config(read_only=True), create=False) as s:
        assert s.topics() == {"a": 4, "b": 1}  # replayed; the torn line was never acknowledged
    with MessageStore(root, small_config(), create=False) as s:
        assert s.topics() == {"a": 4, "b": 1}
        assert not os.path.exists(os.path.join(config, "topics.log"))  # folded in at open


def test_reads_during_the_scrubs_rebuild_see_the_queue_whole(tmp_path):
    """Reads take no lock: while the scrub replaces a damaged queue's files they must see its
    units (old or rebuilt), never an emptied queue or a closed mapping (a status.json read
    during a rebuild failed with ENOENT), and a read that took the queue before the swap
    goes on reading it after."""
    root = str(tmp_path / "s")
    _fill(root, 250)
    flip(os.path.join(root, "consumequeue", "t", "0", "0" * 20), 20 * 10 + 3)  # unit 10
    errors: list[str] = []
    with MessageStore(root, small_config(), create=False) as s:
        taken = s.consume_queues.open_queue(("t", 0))  # as a read that took the queue just before
        done = threading.Event()

        def read() -> None:
            while not done.is_set():
                try:
                    assert (s.min_offset("t", 0), s.max_offset("t", 0)) == (0, 250)
                    assert bytes(s.get("t", 0, 5).body) == b"m5"
                except Exception as exc:  # noqa: BLE001 - every failure is the finding
                    errors.append(repr(exc))
        readers = [threading.Thread(target=read) for _ in range(2)]
        for t in readers:
            t.start()
        try:
            s.scrub()
        finally:
            done.set()
            for t in readers:
                t.join()
        assert "unit 10 does not match" in s.scrub_status()["findings"][0]
        assert s.consume_queues.open_queue(("t", 0)) is not taken  # a new object took its place
        assert taken.entry(5) == s.consume_queues.open_queue(("t", 0)).entry(5)  # the old one still reads
    assert errors == []


@pytest.mark.mount
@needs_fuse
def test_a_mount_scrubs_in_the_background_and_shows_it_in_status_json(tmp_path):
    root, mnt = str(tmp_path / "s"), str(tmp_path / "mnt")
    _fill(root, 250)
    flip(os.path.join(root, "consumequeue", "t", "0", "0" * 20), 20 * 10 + 3)  # unit 10
    with mounted(root, mnt, log=str(tmp_path / "log")):
        def scrubbed() -> dict | None:
            scrub = json.load(open(f"{mnt}/status.json"))["scrub"]
            return scrub if scrub["passes"] >= 1 else None

        # the scrub is throttled: wait for its first pass to be reported
        scrub = eventually(scrubbed, "the scrub's first pass", interval=0.1)
        assert scrub["running"] and scrub["passes"] == 1, scrub
        assert "unit 10 does not match" in scrub["findings"][0]
        assert open(f"{mnt}/topics/t/0/10", "rb").read() == b"m10"
    assert "scrub: ConsumeQueue t/0 unit 10" in open(tmp_path / "log").read()
    assert json.load(open(os.path.join(root, "config", "scrub.json")))["passes"] == 1


@pytest.mark.allow_logs("scrub: damaged record", "was written for other CommitLog bytes")
def test_a_clean_open_checks_the_tail_of_the_last_file_not_all_of_it(tmp_path, monkeypatch):
    from mqfs.store.integrity import recovery

    monkeypatch.setattr(recovery, "_TAIL", 64 << 10)
    root = str(tmp_path / "s")
    cfg = small_config(commitlog_file_size=1 << 20)
    with MessageStore(root, cfg) as s:  # ~600 KB in one file, over three queues
        s.put_batch([Message.create("t", b"x" * 500, queue_id=i % 3) for i in range(1000)])
        end = s.commitlog.max_offset
    path = os.path.join(root, "commitlog", "0" * 20)
    flip(path, 100_000)  # old: left to the scrub
    with MessageStore(root, cfg, create=False) as s:
        assert not s.recovery.notes
        s.scrub()
        assert any("damaged record" in f for f in s.scrub_status()["findings"])
    flip(path, end - 300)  # in the last record: the open still refuses, changing nothing
    before = file_hashes(root, skip=("lock",))
    with pytest.raises(CorruptionError, match="inside flushed data"):
        MessageStore(root, cfg, create=False).open()
    assert file_hashes(root, skip=("lock",)) == before
