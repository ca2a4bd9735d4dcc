"""A queue no count record vouches for never gives an offset out again, and a ConsumeQueue
file lost in the middle never hides a queue's older messages (issue 33, items 1 and 2).

Without config/dispatchState.json or config/queueEnds.log to vouch for the queues (a broker's
store, "delete consumequeue/ and restart", config/ restored from an older copy), each queue's
last record in the CommitLog decides its end (store/queues/log_proof.py)."""

import os
import shutil
import struct
import threading

import pytest

from mqfs.store import Message, MessageStore
from mqfs.store.errors import QueueNotProven
from mqfs.store.files.consume_queue import PRE_BLANK
from mqfs.store.integrity.verify import verify_store
from mqfs.store.queues import log_proof
from tests.fusefs.helpers import mounted, needs_fuse, sh
from tests.store.helpers import small_config, store_state
from tests.store.test_broker_stores import broker_store
from tests.waits import eventually

BROKER = dict(flavor="rocketmq", record_crc=False, index_slots=64, index_entries=256)
OTHERS = 1500  # records of other queues after T/0's: the newest 4 MiB hold none of T/0's

pytestmark = pytest.mark.allow_logs(r"^queue ends: ", r"^recovery: ", r"^scrub: ",
                                    r"^no abort file, but the checkpoint")


def _workload(s: MessageStore) -> None:
    for i in range(5):
        s.put(Message.create("T", b"old-%d" % i, queue_id=0, keys=[f"k{i}"]))
    for i in range(OTHERS):
        s.put(Message.create("U", b"u" * 300, queue_id=i % 4))


def _broker_store(root: str) -> None:
    """A broker's store (no mqfs.json, no mqfs config files, a RocketMQ checkpoint) whose
    T/0 has 5 messages written long before its newest records."""
    broker_store(root, _workload)
    os.mkdir(os.path.join(root, "config"))  # a broker's holds topics.json and the like
    with open(os.path.join(root, "checkpoint"), "r+b") as f:  # RocketMQ's: no mqfs blocks
        f.seek(40)
        f.write(bytes(48))


def _hand_rebuilt(root: str, what: str) -> None:
    for sub in ("config/dispatchState.json", "config/queueEnds.log"):
        if os.path.exists(os.path.join(root, sub)):
            os.unlink(os.path.join(root, sub))
    shutil.rmtree(os.path.join(root, "consumequeue", *what.split("/")) if what else
                  os.path.join(root, "consumequeue"))


@pytest.mark.parametrize("deleted", ["T/0", "T", ""])
def test_a_queue_whose_consume_queue_was_deleted_keeps_its_messages_and_offsets(tmp_path, deleted):
    root = str(tmp_path / "s")
    _broker_store(root)
    _hand_rebuilt(root, deleted)
    assert not verify_store(root).ok  # the CommitLog holds T/0's records, no queue does
    with MessageStore(root, small_config(**BROKER), create=False) as s:
        assert s.max_offset("T", 0) == 5
        assert [m.body for m in s.get_range("T", 0, 0, 10)] == [b"old-%d" % i for i in range(5)]
        assert s.put(Message.create("T", b"new", queue_id=0, keys=["k0"])).queue_offset == 5
        # the key names two messages now, each its own (the old one not served as the new)
        assert sorted((m.queue_offset, bytes(m.body)) for m in s.query_key("k0", topic="T")) == \
            [(0, b"old-0"), (5, b"new")]
        assert bytes(s.get("T", 0, 0).body) == b"old-0"
    assert verify_store(root).ok


def test_a_queue_its_own_recovery_began_is_rebuilt_without_calling_that_old_files(tmp_path):
    """consumequeue/ and the records vouching for it deleted from an mqfs store: recovery
    (as after a crash) makes T/0 anew with only the records it re-dispatches, and the proof
    rebuilds it from the log. Those units were this open's own: no copy of them goes to
    quarantine/ as "old files", and the offsets are kept."""
    root = str(tmp_path / "s")
    with MessageStore(root, small_config()) as s:
        s.create_topic("T", 1)
        for i in range(5):
            s.put(Message.create("T", b"x%d" % i, queue_id=0, keys=[f"k{i}"]))
    _hand_rebuilt(root, "")
    with MessageStore(root, small_config(), create=False) as s:
        notes = s.recovery.notes
        assert s.max_offset("T", 0) == 5
        assert [bytes(m.body) for m in s.get_range("T", 0, 0, 10)] == [b"x%d" % i for i in range(5)]
        assert s.put(Message.create("T", b"new", queue_id=0)).queue_offset == 5
    assert [n for n in notes if "T/0" in n] == [
        "ConsumeQueue T/0 had no files, and recovery gave it only the records it re-dispatched: "
        "rebuilt from the CommitLog"], notes
    quarantine = os.path.join(root, "quarantine")
    assert not os.path.exists(quarantine) or os.listdir(quarantine) == []
    assert verify_store(root).ok


def test_a_put_waits_for_the_proof_and_never_guesses(tmp_path, monkeypatch):
    """A log the open does not walk whole: a put to a queue whose end the walk has not
    reached is refused (EAGAIN through a mount), never given offset 0; once the background
    walk and rebuild are done it gets the next offset. Closing before that leaves
    config/queueProof.json, so the next open proves again rather than trust the record the
    close wrote."""
    root = str(tmp_path / "s")
    _broker_store(root)
    _hand_rebuilt(root, "T/0")
    monkeypatch.setattr(log_proof, "FOREGROUND", 0)
    monkeypatch.setattr(log_proof.LogProof, "start", lambda self: None)  # no background walk yet
    with MessageStore(root, small_config(**BROKER), create=False) as s:
        with pytest.raises(QueueNotProven, match="not proven yet"):
            s.put(Message.create("T", b"new", queue_id=0))
        with pytest.raises(QueueNotProven):
            s.put_batch([Message.create("T", b"new", queue_id=0)])
    assert log_proof.pending(root)
    assert os.path.exists(os.path.join(root, "config", "dispatchState.json"))
    monkeypatch.undo()
    monkeypatch.setattr(log_proof, "FOREGROUND", 0)  # the background walks it all
    with MessageStore(root, small_config(**BROKER), create=False) as s:
        def put_once():
            try:
                return s.put(Message.create("T", b"new", queue_id=0))
            except QueueNotProven:
                return None  # the proof in the background has not reached the queue yet

        put = eventually(put_once, "a put once the proof reached its queue", interval=0.05)
        assert put.queue_offset == 5
        assert [bytes(m.body) for m in s.get_range("T", 0, 0, 10)] == \
            [b"old-%d" % i for i in range(5)] + [b"new"]
    assert not log_proof.pending(root)
    assert verify_store(root).ok


@needs_fuse
def test_a_mount_after_consumequeue_was_deleted_serves_the_old_messages_and_appends_after(tmp_path):
    """The issue's reproducer: `rm -rf consumequeue config/dispatchState.json
    config/queueEnds.log` on a broker-flavor store, then mount."""
    root, mnt = str(tmp_path / "s"), str(tmp_path / "mnt")
    _broker_store(root)
    _hand_rebuilt(root, "T/0")
    with mounted(root, mnt):
        listed = sh(f"ls {mnt}/topics/T/0").stdout.split()
        assert [n for n in listed if n.isdigit()] == [b"0", b"1", b"2", b"3", b"4"]
        sh(f"printf new > {mnt}/topics/T/0/append")
        assert sh(f"cat {mnt}/topics/T/0/5").stdout == b"new"
        assert sh(f"cat {mnt}/topics/T/0/0").stdout == b"old-0"
        assert sorted(sh(f"ls {mnt}/keys/k0").stdout.split()) == [b"T:0:0"]
        assert sh(f"cat {mnt}/keys/k0/T:0:0").stdout == b"old-0"


@needs_fuse
@pytest.mark.parametrize("deleted", ["T/0", ""])
def test_a_read_only_mount_after_consumequeue_was_deleted_serves_the_log_and_writes_nothing(
        tmp_path, deleted):
    """The same store through `-o ro` (and a read-only open's report): the queue is shown as
    the CommitLog has it, served from the log in memory; not a byte of the broker's store
    changes. Before, the read-only mount showed T/0 empty (no record vouched for its end, and
    only read-write opens proved ends from the log)."""
    root, mnt = str(tmp_path / "s"), str(tmp_path / "mnt")
    _broker_store(root)
    _hand_rebuilt(root, deleted)
    before = store_state(root)
    with MessageStore(root, small_config(read_only=True, **BROKER), create=False) as s:
        assert (s.min_offset("T", 0), s.max_offset("T", 0)) == (0, 5)
        assert any("T/0" in n and "served from the CommitLog" in n for n in s.recovery.notes)
    with mounted(root, mnt, "-o", "ro"):
        listed = sh(f"ls {mnt}/topics/T/0").stdout.split()
        assert [n for n in listed if n.isdigit()] == [b"0", b"1", b"2", b"3", b"4"]
        assert sh(f"cat {mnt}/topics/T/0/3").stdout == b"old-3"
        assert sh(f"cat {mnt}/keys/k0/T:0:0").stdout == b"old-0"
        if not deleted:
            assert sh(f"cat {mnt}/topics/U/1/1").stdout == b"u" * 300
    assert store_state(root) == before


def test_a_read_only_open_of_a_large_log_proves_in_the_background(tmp_path, monkeypatch):
    """A log larger than the open walks itself: the read-only open returns at once (its cost
    bounded), and the background walk then serves the deleted queue from the log."""
    root = str(tmp_path / "s")
    _broker_store(root)
    _hand_rebuilt(root, "T/0")
    monkeypatch.setattr(log_proof, "FOREGROUND", 0)
    with MessageStore(root, small_config(read_only=True, **BROKER), create=False) as s:
        eventually(lambda: s.has_topic("T") and s.max_offset("T", 0) == 5,
                   "T/0 served from the log", interval=0.05)
        assert [bytes(m.body) for m in s.get_range("T", 0, 0, 10)] == [b"old-%d" % i for i in range(5)]


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
def test_a_close_waits_for_the_proofs_background_rebuild(tmp_path, monkeypatch, read_only):
    """The background proof is inside its rebuild of T/0 (files swapped in, or served from
    the log) when close begins, in another thread: close waits for it (or stops its walk of
    the log: the proof is then owed, and the next open does it), and nothing in the store
    changes once close returned (no thread of the proof is left)."""
    root = str(tmp_path / "s")
    _broker_store(root)
    _hand_rebuilt(root, "T/0")
    monkeypatch.setattr(log_proof, "FOREGROUND", 0)
    inside, closing = threading.Event(), threading.Event()
    rebuild = log_proof.LogProof._rebuild

    def held(self, keys):
        inside.set()
        assert closing.wait(180), "close never began"
        rebuild(self, keys)

    monkeypatch.setattr(log_proof.LogProof, "_rebuild", held)
    s = MessageStore(root, small_config(read_only=read_only, **BROKER), create=False).open()
    assert inside.wait(180), "the proof never reached its rebuild"
    thread = proof_thread(s)
    shut = s.users.shut

    def shutting() -> None:
        closing.set()
        shut()

    s.users.shut = shutting  # type: ignore[method-assign]
    s.close()
    at_close = store_state(root)
    assert not thread.is_alive()
    assert store_state(root) == at_close
    if not read_only:  # the rebuild done, or stopped by close and owed (queueProof.json)
        monkeypatch.undo()  # this open proves the small log itself
        with MessageStore(root, small_config(**BROKER), create=False) as s:
            assert [bytes(m.body) for m in s.get_range("T", 0, 0, 10)] == \
                [b"old-%d" % i for i in range(5)]


def _store_with_three_files(root: str) -> None:
    with MessageStore(root, small_config()) as s:
        for i in range(250):
            s.put(Message.create("T", b"m-%d" % i, queue_id=0))


def _drop_middle_file(root: str) -> None:
    os.unlink(os.path.join(root, "consumequeue", "T", "0", f"{2000:020d}"))  # units 100..199


def test_a_middle_consume_queue_file_deleted_is_found_at_first_use_and_rebuilt(tmp_path):
    root = str(tmp_path / "s")
    _store_with_three_files(root)
    _drop_middle_file(root)
    report = verify_store(root)
    assert not report.ok and any("lost a file in the middle" in line for line in report.lines)
    with MessageStore(root, small_config()) as s:
        assert s.min_offset("T", 0) == 0
        assert bytes(s.get("T", 0, 150).body) == b"m-150"
        assert s.put(Message.create("T", b"next", queue_id=0)).queue_offset == 250
        assert any("lost a file in the middle" in n for n in s.recovery.notes)
    assert verify_store(root).ok


def test_a_middle_consume_queue_file_deleted_is_rebuilt_without_a_record_too(tmp_path):
    root = str(tmp_path / "s")
    _store_with_three_files(root)
    _drop_middle_file(root)
    for name in ("dispatchState.json", "queueEnds.log"):
        os.unlink(os.path.join(root, "config", name))
    with MessageStore(root, small_config()) as s:
        assert [bytes(m.body) for m in s.get_range("T", 0, 95, 10)] == [b"m-%d" % i for i in range(95, 105)]
        assert s.put(Message.create("T", b"next", queue_id=0)).queue_offset == 250
    assert verify_store(root).ok


@needs_fuse
def test_a_middle_consume_queue_file_deleted_is_served_from_the_log_read_only(tmp_path):
    """The same store opened read-only (and mounted `-o ro`): the units of the lost file
    were ENOENT (offsets 0..249 shown, 100..199 missing). Now the queue is served from the
    log in memory, the open's report says why, and not a byte of the store changes."""
    root, mnt = str(tmp_path / "s"), str(tmp_path / "mnt")
    _store_with_three_files(root)
    _drop_middle_file(root)
    before = store_state(root)
    with MessageStore(root, small_config(read_only=True), create=False) as s:
        assert (s.min_offset("T", 0), s.max_offset("T", 0)) == (0, 250)
        assert [bytes(m.body) for m in s.get_range("T", 0, 95, 10)] == \
            [b"m-%d" % i for i in range(95, 105)]
        assert any("T/0 lost a file in the middle" in n for n in s.recovery.notes)
    with mounted(root, mnt, "-o", "ro"):
        assert sh(f"cat {mnt}/topics/T/0/150").stdout == b"m-150"
        assert sh(f"ls {mnt}/topics/T/0 | grep -c '^[0-9]'").stdout.strip() == b"250"
    assert store_state(root) == before


def test_the_scrub_finds_a_middle_file_deleted_under_an_open_queue(tmp_path):
    root = str(tmp_path / "s")
    _store_with_three_files(root)
    with MessageStore(root, small_config()) as s:
        s.get("T", 0, 0)  # the queue is open (its first use is past)
        cq = s.consume_queues.open_queue(("T", 0))
        cq.queue.files.pop(1).close()  # as if the file was gone when the queue was loaded
        _drop_middle_file(root)
        s.scrub()
        assert any("lost a file in the middle" in f for f in s.scrub_status()["findings"])
        assert bytes(s.get("T", 0, 150).body) == b"m-150"
    assert verify_store(root).ok


def test_verify_counts_a_queue_directory_without_files_as_damage(tmp_path):
    root = str(tmp_path / "s")
    _store_with_three_files(root)
    qdir = os.path.join(root, "consumequeue", "T", "0")
    shutil.rmtree(qdir)
    os.mkdir(qdir)
    report = verify_store(root)
    assert not report.ok
    assert any("T/0 has no file" in line for line in report.lines)


def proof_thread(s: MessageStore) -> threading.Thread:
    """This store's background proof thread. Whether any "mqfs-log-ends" thread is left in
    the process says nothing of it: a store another test of the same xdist worker left open
    keeps its own (the same flake test_prefault had)."""
    thread = s._log_proof._thread if s._log_proof is not None else None
    assert thread is not None, "the proof runs in the background"
    return thread


def _background_proofs(root: str, monkeypatch) -> list[log_proof.LogProof]:
    """A broker's store whose T/0 was rebuilt by hand, proven in the background at its next
    open; the list gets that open's LogProof."""
    _broker_store(root)
    _hand_rebuilt(root, "T/0")
    monkeypatch.setattr(log_proof, "FOREGROUND", 0)
    proofs: list[log_proof.LogProof] = []
    begin = log_proof.LogProof.begin

    def kept(self):
        proofs.append(self)
        begin(self)

    monkeypatch.setattr(log_proof.LogProof, "begin", kept)
    return proofs


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
def test_a_close_stops_the_proofs_walk_of_the_whole_log(tmp_path, monkeypatch, read_only):
    """Issue 33: the background proof's pass over the whole log for a short queue (served
    from the log, or rebuilt on disk) could not be interrupted, so a close waited for one
    whole walk of a large log. The walk is held after its first run of records until close
    has asked the proof to stop: the walk then ends before the log does (fewer records
    walked than it holds), close returns, and T/0 is not swapped (served as its files are)."""
    from mqfs.store.integrity import salvage
    from mqfs.store.queues import first_use

    root = str(tmp_path / "s")
    proofs = _background_proofs(root, monkeypatch)
    inside, walked = threading.Event(), [0]

    def held(items, per):
        """Items of a walk of the whole log, counted; after the first, wait for close."""
        for item in items:
            walked[0] += per(item)
            if not inside.is_set():
                inside.set()
                assert eventually(lambda: proofs[0]._stop, "close asking the proof to stop",
                                  interval=0.01)
            yield item

    if read_only:
        walk = salvage.walk
        monkeypatch.setattr(salvage, "walk", lambda *a, **k: held(walk(*a, **k), lambda _: 1))
    else:
        end_scan = first_use.end_scan

        def counted(cl, flavor, start, dispatch_from, take, *rest):
            def each(run):
                walked[0] += len(run)
                if not inside.is_set():
                    inside.set()
                    assert eventually(lambda: proofs[0]._stop, "close asking the proof to stop",
                                      interval=0.01)
                take(run)
            return end_scan(cl, flavor, start, dispatch_from, each, *rest)

        monkeypatch.setattr(first_use, "end_scan", counted)
    s = MessageStore(root, small_config(read_only=read_only, **BROKER), create=False).open()
    assert inside.wait(180), "the proof never began its walk of the whole log"
    thread = proof_thread(s)
    s.close()
    assert not thread.is_alive()
    assert 0 < walked[0] < OTHERS, walked[0]
    assert proofs[0].short  # T/0 was neither served from the log nor rebuilt


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
def test_a_close_stops_the_proofs_first_walk_inside_a_file(tmp_path, monkeypatch, read_only):
    """The first walk (each queue's last record, newest file first) stopped only between
    files: a close waited for the walk of a whole CommitLog file (1 GiB by default). It now
    stops at the next run of records: the walk is held after its first run until close has
    asked the proof to stop, and it then walks no further run of that file."""
    from mqfs.store.integrity import salvage

    root = str(tmp_path / "s")
    proofs = _background_proofs(root, monkeypatch)
    monkeypatch.setattr(salvage, "_RUN", 16)  # many runs in a file
    inside, runs = threading.Event(), [0]
    walk_file = salvage.walk_runs_of_file

    def held(*a, **k):
        for item in walk_file(*a, **k):
            runs[0] += 1
            if not inside.is_set():
                inside.set()
                assert eventually(lambda: proofs[0]._stop, "close asking the proof to stop",
                                  interval=0.01)
            yield item

    monkeypatch.setattr(salvage, "walk_runs_of_file", held)
    s = MessageStore(root, small_config(read_only=read_only, **BROKER), create=False).open()
    assert inside.wait(180), "the proof never began its walk"
    thread = proof_thread(s)
    s.close()
    assert not thread.is_alive()
    assert runs[0] == 1 and proofs[0].walked == 0  # the run it was held at: no other
    if not read_only:
        assert log_proof.pending(root)  # owed: the next open proves again


def _a_broker_store_whose_queue_head_is_blank(tmp_path) -> str:
    """A broker's store whose T/0 holds 100 old records in an older CommitLog file and its
    end ("late") in the newest, with units 0..99 blanked (as a broker blanks the units of a
    queue that starts above 0): its first use finds nothing wrong (its first file and last
    units are sound), the proof's walk of the log does."""
    def workload(s: MessageStore) -> None:
        for i in range(100):  # ConsumeQueue file 0 of T/0 whole (100 units a file)
            s.put(Message.create("T", b"old-%d" % i, queue_id=0))
        for i in range(OTHERS):
            s.put(Message.create("U", b"u" * 300, queue_id=i % 4))
        s.put(Message.create("T", b"late", queue_id=0))  # its end, in the newest file

    root = str(tmp_path / "s")
    broker_store(root, workload)
    os.mkdir(os.path.join(root, "config"))
    with open(os.path.join(root, "consumequeue", "T", "0", f"{0:020d}"), "r+b") as f:
        f.write(struct.pack(">qiq", *PRE_BLANK) * 100)
    return root


def test_a_put_between_a_queues_end_and_its_head_being_walked_keeps_both(tmp_path, monkeypatch):
    """The race suspected in session 13: the background walk finds T/0's end in the newest
    CommitLog file, a put lands in T/0 (its end is proven), and only then does the walk reach
    T/0's head in an older file and find that its ConsumeQueue does not hold it.
    (Its first use finds nothing wrong: the units of its head are blank, as a broker leaves
    a queue that starts above 0.) The rebuild must hold the head and the put: had it read the log only up to the open's
    end, T/0's files would hold one unit more than the rebuild and be left as they are, with
    the head still missing. The walk is held after the newest file until the put is done."""
    from mqfs.store.integrity import salvage

    root = _a_broker_store_whose_queue_head_is_blank(tmp_path)
    monkeypatch.setattr(log_proof, "FOREGROUND", 0)
    proofs: list[log_proof.LogProof] = []
    begin = log_proof.LogProof.begin
    monkeypatch.setattr(log_proof.LogProof, "begin", lambda self: (proofs.append(self), begin(self))[1])
    walk_file = salvage.walk_runs_of_file
    held, put_done, files = threading.Event(), threading.Event(), [0]

    def walk_held(*a, **k):
        files[0] += 1
        if files[0] == 2:  # the newest file walked: hold the older ones until the put
            held.set()
            assert put_done.wait(180), "the test never put"
        yield from walk_file(*a, **k)

    monkeypatch.setattr(salvage, "walk_runs_of_file", walk_held)
    with MessageStore(root, small_config(**BROKER), create=False) as s:
        assert held.wait(180), "the proof never walked past the newest file"
        proof = proofs[0]
        assert proof.decided(("T", 0)) == (101, 100) and not proof.done
        assert s.put(Message.create("T", b"new", queue_id=0)).queue_offset == 101
        put_done.set()
        eventually(lambda: proof.settled, "the proof walked the log and rebuilt T/0", interval=0.02)
        assert [bytes(m.body) for m in s.get_range("T", 0, 0, 200)] == \
            [b"old-%d" % i for i in range(100)] + [b"late", b"new"]
        assert any("T/0 did not hold every record" in n for n in s.recovery.notes)
    assert verify_store(root).ok


class _Watched:
    """A lock that says when someone asks for it (the proof's hold of the put lock)."""

    def __init__(self, lock: threading.Lock, asked: threading.Event):
        self.lock, self.asked = lock, asked

    def __enter__(self):
        self.asked.set()
        return self.lock.__enter__()

    def __exit__(self, *exc):
        return self.lock.__exit__(*exc)


def test_a_put_that_passed_its_check_just_before_its_queue_is_found_short_is_rebuilt_with_it(
        tmp_path, monkeypatch):
    """The narrower window left in session 14: a put passes `check_put` (T/0's end is proven
    from the newest file), and before it writes its record the walk reaches T/0's head, finds
    it missing and marks T/0 short; the rebuild's pass over the log then ran while the put
    was stalled, so it did not see the put's record, and the swap (after the put, under the
    put lock) found T/0's files one unit longer than the rebuild and left them as they were,
    head missing. The put is stalled right after its check until either the rebuild's pass
    is done (the window open) or the proof asks for the put lock before that pass (closed):
    the rebuild must hold the head and the put either way."""
    from mqfs.store.integrity import salvage

    root = _a_broker_store_whose_queue_head_is_blank(tmp_path)
    monkeypatch.setattr(log_proof, "FOREGROUND", 0)
    proofs: list[log_proof.LogProof] = []
    go, checked = threading.Event(), threading.Event()
    begin = log_proof.LogProof.begin

    def watched(self):
        proofs.append(self)
        self.put_lock = _Watched(self.put_lock, go)
        begin(self)

    monkeypatch.setattr(log_proof.LogProof, "begin", watched)
    units_of = log_proof.units_of

    def scanned(*a, **k):
        got = units_of(*a, **k)
        go.set()  # the pass is over without the put's record: the put goes on now
        return got

    monkeypatch.setattr(log_proof, "units_of", scanned)
    walk_file = salvage.walk_runs_of_file
    files = [0]

    def walk_held(*a, **k):
        files[0] += 1
        if files[0] == 2:  # the newest file walked: the older ones once the put is checked
            assert checked.wait(180), "the test never put"
        yield from walk_file(*a, **k)

    monkeypatch.setattr(salvage, "walk_runs_of_file", walk_held)
    with MessageStore(root, small_config(**BROKER), create=False) as s:
        proof = eventually(lambda: proofs and proofs[0].decided(("T", 0)) and proofs[0],
                           "the proof walked the newest file")
        reserve = s.dispatcher.reserve

        def stalled(msg):
            got = reserve(msg)  # check_put passed
            checked.set()
            assert go.wait(180), "neither the rebuild's pass nor its wait for the put lock"
            return got

        s.dispatcher.reserve = stalled
        assert s.put(Message.create("T", b"new", queue_id=0)).queue_offset == 101
        del s.dispatcher.reserve
        eventually(lambda: proof.settled, "the proof walked the log and rebuilt T/0", interval=0.02)
        assert [bytes(m.body) for m in s.get_range("T", 0, 0, 200)] == \
            [b"old-%d" % i for i in range(100)] + [b"late", b"new"]
        assert any("T/0 did not hold every record" in n for n in s.recovery.notes)
    assert verify_store(root).ok
