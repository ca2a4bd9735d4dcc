"""Flush policies, checkpoint, abort file and retention (crash tiers live in test_crash_*)."""

import errno
import os
import struct
import threading
import time

import pytest

from mqfs.store import FlushTimeout, Message, MessageStore, NotFound
from mqfs.store.files.checkpoint import Checkpoint
from mqfs.store.services.flush import GroupCommit, WaitableProgress
from tests.store.helpers import files_in, small_config
from tests.waits import LIMIT, eventually


def test_sync_put_returns_only_when_its_bytes_are_flushed(tmp_path):
    with MessageStore(str(tmp_path), small_config(flush_mode="sync")) as s:
        results = [s.put(Message(topic="t", body=b"x" * 100)) for _ in range(20)]
        queue = s.commitlog.queue
        assert queue.flushed_where >= results[-1].commitlog_offset + results[-1].size


def test_sync_group_commit_covers_concurrent_puts(tmp_path):
    with MessageStore(str(tmp_path), small_config(flush_mode="sync",
                                                  commitlog_file_size=4 << 20)) as s:
        syncs = []
        orig = s.commitlog.queue.flush

        def counted() -> int:
            syncs.append(1)
            return orig()
        s.commitlog.queue.flush = counted
        s.flush_services.group_commit.flush = s.flush_services._commit_and_flush

        def producer(i: int) -> None:
            for j in range(50):
                s.put(Message(topic="t", body=b"%d-%d" % (i, j), queue_id=i % 2))
        threads = [threading.Thread(target=producer, args=(i,)) for i in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert s.max_offset("t", 0) + s.max_offset("t", 1) == 400
        assert len(syncs) < 400  # fewer disk syncs than puts: commits were shared


def test_group_commit_leader_waits_for_announced_puts_and_syncs_once():
    written = [10]
    syncs: list[int] = []

    def flush() -> int:
        syncs.append(written[0])
        return written[0]

    group = GroupCommit(WaitableProgress(0), flush, gather_s=30)
    group.arrive()  # a second put is still appending
    leader = threading.Thread(target=group.wait, args=(10, 30))
    leader.start()
    eventually(lambda: group.leader, "the first waiter leads and is gathering", interval=0.001)
    written[0] = 20  # the second put's bytes are in
    group.wait(20, 30, arrived=True)
    leader.join()
    assert syncs == [20]  # one sync covered both puts


def test_a_failed_announced_put_does_not_hold_the_leader_back():
    group = GroupCommit(WaitableProgress(0), lambda: 10, gather_s=30)
    group.arrive()
    group.depart()
    group.wait(10, 30)  # nobody is arriving: syncs at once
    assert group.arriving == 0 and group.progress.value == 10


def test_a_sync_put_failing_under_the_lock_withdraws_its_announcement(tmp_path, monkeypatch):
    """A sync put announces itself to the group commit before it takes the put lock; one
    that fails there must withdraw, or every later leader would wait for its bytes."""
    with MessageStore(str(tmp_path), small_config(flush_mode="sync")) as s:
        s.put(Message(topic="t", body=b"first"))

        def full_disk(*_args: object) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(s.commitlog, "append", full_disk)
        with pytest.raises(OSError):
            s.put(Message(topic="t", body=b"refused"))
        assert s.flush_services.group_commit.arriving == 0
        monkeypatch.undo()
        after = s.put(Message(topic="t", body=b"after"))
        assert s.commitlog.queue.flushed_where >= after.commitlog_offset + after.size
        assert after.queue_offset == 1 and bytes(s.get("t", 0, 1).body) == b"after"


class GatedDisk:
    """A flush whose syncs block until the test opens the gate; each reports the end
    written when it started, as a real sync covers only the bytes in before it."""

    def __init__(self) -> None:
        self.written = 0
        self.syncs: list[int] = []
        self.gate = threading.Event()
        self.started = threading.Event()

    def flush(self) -> int:
        reached = self.written
        self.started.set()
        self.gate.wait(30)
        self.syncs.append(reached)
        return reached


def test_puts_arriving_during_a_sync_share_the_next_one():
    disk = GatedDisk()
    group = GroupCommit(WaitableProgress(0), disk.flush, gather_s=30)
    disk.written = 10
    first = threading.Thread(target=group.wait, args=(10, 30))
    first.start()
    disk.started.wait(30)  # the first put's sync runs; five more puts append meanwhile
    later = []
    for i in range(5):
        disk.written = 20 + 10 * i
        later.append(threading.Thread(target=group.wait, args=(disk.written, 30)))
        later[-1].start()
    eventually(lambda: len(group.waiting) == 5, "five puts wait", interval=0.001)
    disk.gate.set()
    for th in [first, *later]:
        th.join(30)
    assert disk.syncs == [10, 60]  # one sync for the first, one shared by the five
    assert not group.leader and not group.waiting and group.progress.value == 60


def test_a_failed_sync_raises_in_its_leader_and_the_next_put_syncs_again():
    calls = []

    def flush() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise OSError(5, "Input/output error")
        return 10

    group = GroupCommit(WaitableProgress(0), flush)
    with pytest.raises(OSError):
        group.wait(10, 30)
    assert not group.leader
    group.wait(10, 30)
    assert group.progress.value == 10 and len(calls) == 2


def test_a_queued_put_takes_the_lead_when_the_sync_before_it_fails():
    disk = GatedDisk()
    failed = []

    def flush() -> int:
        if not disk.syncs and not failed:
            disk.started.set()
            disk.gate.wait(30)
            failed.append(1)
            raise OSError(5, "Input/output error")
        return disk.flush()

    group = GroupCommit(WaitableProgress(0), flush)
    errors = []

    def leader() -> None:
        try:
            group.wait(10, 30)
        except OSError as exc:
            errors.append(exc)
    first = threading.Thread(target=leader)
    disk.written = 10
    first.start()
    disk.started.wait(30)
    disk.written = 20
    second = threading.Thread(target=group.wait, args=(20, 30))
    second.start()
    eventually(lambda: len(group.waiting) == 1, "one put waits", interval=0.001)
    disk.gate.set()
    first.join(30)
    second.join(30)
    assert len(errors) == 1 and disk.syncs == [20] and group.progress.value == 20


def test_sync_flush_timeout_is_reported_not_hung(tmp_path):
    with MessageStore(str(tmp_path), small_config(flush_mode="sync",
                                                  sync_flush_timeout_ms=200)) as s:
        gate = threading.Event()
        orig = s.flush_services.group_commit.flush

        def stuck() -> int:
            gate.wait(LIMIT)  # until the test has seen the second put give up
            return orig()
        s.flush_services.group_commit.flush = stuck
        errors = []

        def put() -> None:
            try:
                s.put(Message(topic="t", body=b"late"))
            except FlushTimeout as exc:
                errors.append(exc)
        leader = threading.Thread(target=put)
        leader.start()
        eventually(lambda: s.flush_services.group_commit.leader, "a put leads the sync", interval=0.001)
        put()  # a second put waits behind the stuck sync and must give up at its deadline
        assert len(errors) == 1 and leader.is_alive()  # it gave up while the sync was still stuck
        gate.set()
        leader.join()


def test_async_flush_service_flushes_in_the_background(tmp_path):
    with MessageStore(str(tmp_path), small_config(flush_interval_ms=20, flush_least_pages=0)) as s:
        r = s.put(Message(topic="t", body=b"y" * 5000))
        eventually(lambda: s.commitlog.queue.flushed_where >= r.commitlog_offset + r.size,
                   "the async flush")


def test_transient_pool_readers_see_committed_bytes_and_puts_wait_for_commit(tmp_path):
    with MessageStore(str(tmp_path), small_config(transient_pool=True)) as s:
        r = s.put(Message(topic="t", body=b"buffered"))
        mf = s.commitlog.queue.last_file()
        assert mf.write_buffer is not None
        assert mf.committed_position >= r.commitlog_offset % s.config.commitlog_file_size + r.size
        assert bytes(s.get("t", 0, 0).body) == b"buffered"
        with open(mf.path, "rb") as f:  # the bytes are in the file, not only in the buffer
            f.seek(r.commitlog_offset - mf.file_from_offset)
            assert b"buffered" in f.read(r.size)
    with MessageStore(str(tmp_path), small_config(transient_pool=True)) as s:
        assert bytes(s.get("t", 0, 0).body) == b"buffered"


def test_flush_barrier_writes_checkpoint_with_flushed_offsets(tmp_path):
    with MessageStore(str(tmp_path), small_config()) as s:
        r = s.put(Message(topic="t", body=b"z" * 300))
        s.flush()
        end = r.commitlog_offset + r.size
        cp = Checkpoint.load(str(tmp_path / "checkpoint"))
        assert cp.commitlog_flushed_offset == end == cp.cq_flushed_offset
        assert cp.physic_msg_timestamp == r.store_timestamp
        assert os.path.getsize(tmp_path / "checkpoint") == 4096
        raw = (tmp_path / "checkpoint").read_bytes()
        assert struct.unpack(">q", raw[32:40])[0] == end  # confirmPhyOffset, as RocketMQ reads it


def test_torn_checkpoint_extension_reads_as_zero(tmp_path):
    with MessageStore(str(tmp_path), small_config()) as s:
        s.put(Message(topic="t", body=b"a"))
    path = tmp_path / "checkpoint"
    raw = bytearray(path.read_bytes())
    raw[44] ^= 0xFF
    path.write_bytes(raw)
    cp = Checkpoint.load(str(path))
    assert cp.commitlog_flushed_offset == 0 and cp.cq_flushed_offset == 0


def test_abort_file_holds_the_pid_while_open_and_is_removed_on_close(tmp_path):
    s = MessageStore(str(tmp_path), small_config()).open()
    assert (tmp_path / "abort").read_text() == str(os.getpid())
    s.close()
    assert not (tmp_path / "abort").exists()
    (tmp_path / "abort").write_text("12345")  # as a crash leaves it
    with MessageStore(str(tmp_path)) as s:
        assert s.recovery.abnormal


def test_retention_is_off_unless_configured(tmp_path):
    """Nothing is deleted by default: not for age, not when the disk is full of other files."""
    with MessageStore(str(tmp_path), small_config()) as s:
        s.flush_services.stop()
        for i in range(300):
            s.put(Message.create("t", os.urandom(1000), keys=[f"k{i}"]))
        files = list(files_in(str(tmp_path), "commitlog"))
        assert s.retention.run_once(now_ms=s.clock() + 365 * 86_400_000) == 0  # a year on
        assert files_in(str(tmp_path), "commitlog") == files and s.min_offset("t", 0) == 0


@pytest.mark.allow_logs(r"^retention: deleted CommitLog file")
def test_retention_by_age_deletes_only_files_older_than_configured(tmp_path):
    """Age in store time: a file goes once its newest message is older than retention_hours
    (file times, which anyone can set, do not count)."""
    with MessageStore(str(tmp_path), small_config(retention_hours=1.0)) as s:
        s.flush_services.stop()
        start = s.clock()
        s.clock = lambda: start  # the first file's messages
        s.put(Message.create("t", os.urandom(1000)))
        while len(s.commitlog.queue.files) < 2:
            s.put(Message.create("t", os.urandom(1000)))
        s.clock = lambda: start + 1_800_000  # half an hour later, the rest
        for i in range(200):
            s.put(Message.create("t", os.urandom(1000), keys=[f"k{i}"]))
        names = files_in(str(tmp_path), "commitlog")
        for name in names:
            os.utime(tmp_path / "commitlog" / name, (0, 0))  # file times say "ancient"
        first_newest = s.commitlog.read(s.commitlog.queue.files[1].file_from_offset).store_timestamp
        assert s.retention.run_once(now_ms=first_newest + 3_600_000 - 1) == 0
        assert s.retention.run_once(now_ms=first_newest + 3_600_000) == 1
        assert files_in(str(tmp_path), "commitlog") == names[1:]


@pytest.mark.allow_logs(r"^retention: deleted CommitLog file")
def test_a_forward_clock_step_makes_retention_delete_nothing_at_once(tmp_path, monkeypatch):
    """Issue 33, item 9: retention_hours=1 and the clock stepped forward 2 h while running
    deleted 9 of 10 files at once. Now retention's time moves at most as far as real time
    went, so the files go as the time really passes."""
    with MessageStore(str(tmp_path), small_config(retention_hours=1.0)) as s:
        s.flush_services.stop()
        while len(s.commitlog.queue.files) < 10:
            s.put(Message.create("t", os.urandom(1000)))
        names = files_in(str(tmp_path), "commitlog")
        assert s.retention.run_once() == 0
        wall, wall_ns, mono = time.time, time.time_ns, time.monotonic
        monkeypatch.setattr(time, "time", lambda: wall() + 7200)  # the clock steps 2 h on
        monkeypatch.setattr(time, "time_ns", lambda: wall_ns() + 7200 * 10**9)
        assert s.retention.run_once() == 0
        assert files_in(str(tmp_path), "commitlog") == names
        monkeypatch.setattr(time, "monotonic", lambda: mono() + 3601)  # an hour really passes
        assert s.retention.run_once() == 9
        assert files_in(str(tmp_path), "commitlog") == names[-1:]


@pytest.mark.allow_logs(r"^retention: deleted CommitLog file")
def test_retention_deletes_old_files_never_the_newest_and_fixes_minimums(tmp_path):
    cfg = small_config(retention_bytes=1)
    with MessageStore(str(tmp_path), cfg) as s:
        s.flush_services.stop()
        for i in range(300):
            s.put(Message.create("t", os.urandom(1000), keys=[f"k{i}"]))
        files_before = len(s.commitlog.queue.files)
        assert files_before > 3
        deleted = sum(s.retention.run_once() for _ in range(files_before))
        assert deleted == files_before - 1 and len(s.commitlog.queue.files) == 1
        low = s.min_offset("t", 0)
        assert low > 0 and low <= s.max_offset("t", 0) - 1
        assert s.get("t", 0, s.max_offset("t", 0) - 1)
        with pytest.raises(NotFound):
            s.get("t", 0, 0)
        assert s.query_key("k0") == [] and len(s.query_key("k299")) == 1
    with MessageStore(str(tmp_path)) as s:  # the deleted head is not taken for a missing file
        assert s.min_offset("t", 0) == low


@pytest.mark.parametrize("transient", [False, True], ids=["mmap", "transient"])
def test_flushed_offset_never_skips_an_older_files_unflushed_tail(tmp_path, monkeypatch, transient):
    """A roll lands while a flush is syncing the old file (T3 lost acked messages this way):
    the bytes appended to / committed into the old file after its flush sampled its position
    are not on disk, so the flushed offset must stop there even if the new file was synced."""
    from mqfs.store.files.mapped_file_queue import MappedFileQueue
    q = MappedFileQueue(str(tmp_path), 4096, transient=transient)
    old = q.last_file_for_append()
    old.append(b"a" * 100)
    q.commit()
    assert q.flush() == 100
    old.append(b"b" * 200)
    q.commit()  # in the file, not on disk yet
    if transient:
        old.append(bytes(old.remaining()))  # the BLANK, still in the write buffer
    new = q.ensure_next_file()  # mmap: the roll is under way, its BLANK comes next
    real = os.fdatasync
    synced = []

    def sync_while_others_run(fd: int) -> None:
        real(fd)
        if fd == old.fd and not synced:  # meanwhile the put (or the commit service) goes on
            synced.append(fd)
            if not transient:
                old.append(bytes(old.remaining()))
            new.append(b"c" * 50)
            q.commit()
    monkeypatch.setattr(os, "fdatasync", sync_while_others_run)
    reached = q.flush()
    assert synced
    durable = old.file_from_offset + old.flushed_position
    assert old.flushed_position == 300 and reached <= durable
    assert q.flushed_where == reached
    monkeypatch.setattr(os, "fdatasync", real)
    assert q.flush() == new.file_from_offset + 50  # the next flush covers both files
    q.close()


def test_a_flush_reads_no_file_below_the_flushed_offset(tmp_path):
    """A sync put flushes the CommitLog at every put: a store of a thousand files must not
    look at each of them each time. The files wholly below the flushed offset are synced to
    their ends; a flush starts at the one holding that offset."""
    from mqfs.store.files.mapped_file_queue import MappedFileQueue

    class Done:  # a synced file that fails the test if a flush looks at more than its start
        def __init__(self, mf):
            self.file_from_offset = mf.file_from_offset

        def __getattr__(self, name):
            raise AssertionError(f"the flush read {name} of a file below the flushed offset")

    q = MappedFileQueue(str(tmp_path), 4096)
    for _ in range(20):
        q.last_file_for_append().append(bytes(4096))
    last = q.last_file_for_append()
    last.append(b"a" * 100)
    assert q.flush() == 20 * 4096 + 100
    real = list(q.files)
    q.files[:-2] = [Done(mf) for mf in q.files[:-2]]  # the one before the last ends at the offset
    q.files[-1].append(b"b" * 100)
    assert q.flush() == 20 * 4096 + 200
    q.files = real
    q.close()


@pytest.mark.parametrize("transient", [False, True], ids=["mmap", "transient"])
def test_a_commit_reads_only_the_files_with_buffers(tmp_path, transient):
    """As the flush: a sync put commits at every put, and only the newest files can hold
    bytes not yet copied (none without the transient pool)."""
    from mqfs.store.files.mapped_file_queue import MappedFileQueue

    probed = []

    class Done:  # a file that gave its buffer back: a commit may see that of the newest one
        @property
        def write_buffer(self):
            probed.append(self)
            return None

        def __getattr__(self, name):
            raise AssertionError(f"the commit read {name} of a file with no buffer")

    q = MappedFileQueue(str(tmp_path), 4096, transient=transient)
    for _ in range(5):
        q.last_file_for_append().append(bytes(4096))
    q.commit()
    last = q.last_file_for_append()
    last.append(b"a" * 100)
    real = list(q.files)
    q.files[:-1] = [Done() for _ in q.files[:-1]]
    assert q.commit() is transient
    assert probed == q.files[-2:-1] if transient else probed == []
    q.files = real
    assert q.flush() == 5 * 4096 + 100 and os.pread(last.fd, 100, 0) == b"a" * 100
    q.close()
