"""config/queueEnds.log: after a crash, an open registers every queue with its count, as a
clean open does, so the first listing of every queue's offsets (status.json) opens none of
them; a torn or garbled file falls back to the listing of consumequeue/; queues made after
the last checkpoint are found; nothing is lost across two crashes. The crashes are real
kill -9s of a writer process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mqfs.fusefs.model import Model
from mqfs.store import Message, MessageStore
from mqfs.store.integrity.verify import verify_store
from tests import REPO
from tests.store.helpers import killed_writer, small_config

pytestmark = pytest.mark.allow_logs(r"^recovery: ", r"queueEnds\.log", r"has a directory the record")

TOPICS = 30  # x 4 queues, 3 messages each, flushed

# argv: root, then steps run in order after the flushed fill:
#   hot:N      N more messages to queue 0 of t0..t2 (re-dispatch touches those)
#   new:T      3 messages to each of 2 queues of a new topic T, units written, no checkpoint
#   flush      a checkpoint
_WRITER = """
import os, sys
from mqfs.store import Message, MessageStore
from tests.store.helpers import small_config
root, steps = sys.argv[1], sys.argv[2:]
s = MessageStore(root, small_config(flush_cq_interval_ms=3_600_000)).open()
if not s.recovery.abnormal:
    s.put_batch([Message.create(f"t{t}", b"%d/%d/%d" % (t, q, i), queue_id=q)
                 for i in range(3) for t in range(30) for q in range(4)])
    s.flush()
for step in steps:
    what, _, arg = step.partition(":")
    if what == "hot":
        s.put_batch([Message.create(f"t{t}", b"%d/0/more%d" % (t, i)) for i in range(int(arg)) for t in range(3)])
    elif what == "new":
        s.put_batch([Message.create(arg, b"%s/%d/%d" % (arg.encode(), q, i), queue_id=q)
                     for i in range(3) for q in range(2)])
        s.unit_flush.flush()
    elif what == "flush":
        s.flush()
print("acknowledged", flush=True)
os.kill(os.getpid(), 9)
"""


def _killed(root: str, *steps: str) -> None:
    killed_writer(_WRITER, root, *steps)


def _journal(root: str) -> str:
    return os.path.join(root, "config", "queueEnds.log")


def _bodies(s: MessageStore, topic: str, q: int) -> list[bytes]:
    return [bytes(m.body) for m in s.get_range(topic, q, 0, 100)]


def test_after_a_crash_status_json_lists_every_queue_without_opening_one(tmp_path):
    root = str(tmp_path / "s")
    _killed(root, "hot:2")
    with MessageStore(root, small_config(read_only=True), create=False) as s:  # mqfs info's
        counts = {(f"t{t}", q): s.max_offset(f"t{t}", q) for t in range(TOPICS) for q in range(4)}
        # only the queues with records past the checkpoint are opened (their units in the
        # files count: a read-write open indexes the two records each lost with the crash)
        assert set(s.consume_queues.opened()) == {("t0", 0), ("t1", 0), ("t2", 0)}
        assert counts == {(f"t{t}", q): 3 for t in range(TOPICS) for q in range(4)}
    with MessageStore(root, small_config(), create=False) as s:
        assert s.recovery.abnormal
        touched = {("t0", 0), ("t1", 0), ("t2", 0)}
        assert set(s.consume_queues.opened()) == touched
        shown = Model(s).status()["queues"]
        assert set(s.consume_queues.opened()) == touched  # the listing opened none
        assert len(shown) == TOPICS * 4
        for name, row in shown.items():
            t, q = name.split("/")
            assert (row["min_offset"], row["max_offset"]) == (0, 5 if (t, int(q)) in touched else 3)
            assert row["newest_store_time_ms"] > 0
        # each untouched queue still proves its end at its first use: the counts hold
        assert _bodies(s, "t7", 2) == [b"7/2/%d" % i for i in range(3)]
        assert s.put(Message.create("t7", b"next", queue_id=2)).queue_offset == 3
    assert verify_store(root).ok


@pytest.mark.parametrize("damage", ["torn-tail", "garbled-last-block", "garbage-file"])
def test_a_torn_or_garbled_journal_is_passed_over_safely(tmp_path, damage, caplog):
    root = str(tmp_path / "s")
    _killed(root, "hot:1", "flush", "hot:1")  # two blocks: the base and one delta
    size = os.path.getsize(_journal(root))
    with open(_journal(root), "r+b") as f:
        if damage == "torn-tail":  # half a block after the last one
            f.seek(size)
            f.write(b"MQQE\x01\x00\x00\x00" + bytes(20))
        elif damage == "garbled-last-block":
            f.seek(size - 3)
            f.write(b"\xff\xfe\xfd")
        else:
            f.write(os.urandom(size))
    with MessageStore(root, small_config(), create=False) as s:
        opened = set(s.consume_queues.opened())
        listed = {f"t{t}/{q}": s.max_offset(f"t{t}", q) for t in range(TOPICS) for q in range(4)}
        if damage == "torn-tail":  # the chain up to the checkpoint is whole: used as it is
            assert set(s.consume_queues.opened()) == opened
        else:  # its last block (the checkpoint's) is gone: listed, each queue opened to count
            assert any("the queues are listed from consumequeue/" in r.getMessage()
                       for r in caplog.records)
            assert len(s.consume_queues.opened()) == TOPICS * 4
        assert listed == {f"t{t}/{q}": 5 if q == 0 and t < 3 else 3
                          for t in range(TOPICS) for q in range(4)}
        s.put(Message.create("t0", b"after"))
        s.flush()
    assert verify_store(root).ok
    with MessageStore(root, small_config(), create=False) as s:  # a clean open after that
        assert s.max_offset("t0", 0) == 6 and not s.consume_queues.opened()


def test_queues_made_after_the_last_checkpoint_are_found(tmp_path):
    root = str(tmp_path / "s")
    _killed(root, "new:fresh")  # its records survive: re-dispatch finds them
    with MessageStore(root, small_config(), create=False) as s:
        assert {("fresh", 0), ("fresh", 1)} <= set(s.consume_queues.opened())
        assert _bodies(s, "fresh", 1) == [b"fresh/1/%d" % i for i in range(3)]
        assert s.put(Message.create("fresh", b"fresh/1/3", queue_id=1)).queue_offset == 3
    assert verify_store(root).ok


def test_a_queue_directory_the_record_does_not_name_is_found_before_a_put(tmp_path):
    """A forged or stale record that leaves a queue out must not make a put start it again
    at offset 0 over its units."""
    root = str(tmp_path / "s")
    _killed(root, "flush")
    # drop t5/1 from the record: rewrite the file with a base that does not name it
    from mqfs.store.queues import ends_log
    found, _ = ends_log.replay(root, 1 << 62)
    assert found is not None and ("t5", 1) in found.ends
    del found.ends[("t5", 1)]
    block, _ = ends_log._block(ends_log._BASE, found.at, found.ends, 0, found.owner,
                               found.fingerprint)
    with open(_journal(root), "wb") as f:
        f.write(block)
    with MessageStore(root, small_config(), create=False) as s:
        assert ("t5", 1) not in s.consume_queues
        assert s.put(Message.create("t5", b"5/1/3", queue_id=1)).queue_offset == 3
        assert _bodies(s, "t5", 1) == [b"5/1/%d" % i for i in range(4)]
        s.flush()
    with MessageStore(root, small_config(), create=False) as s:  # clean: the record names it
        assert s.consume_queues.recorded(("t5", 1)).entries == 4
    # the same after a clean close whose record leaves a queue out
    state = os.path.join(root, "config", "dispatchState.json")
    with open(state) as f:
        data = json.load(f)
    del data["queues"]["t6"]["2"], data["heads"]["t6"]["2"]
    with open(state, "w") as f:
        json.dump(data, f)
    with MessageStore(root, small_config(), create=False) as s:
        assert ("t6", 2) not in s.consume_queues and not s.recovery.abnormal
        results = s.put_batch([Message.create("t6", b"6/2/3", queue_id=2)])
        assert results[0].queue_offset == 3
        assert _bodies(s, "t6", 2) == [b"6/2/%d" % i for i in range(4)]
    assert verify_store(root).ok


def test_two_crashes_in_a_row_keep_every_count(tmp_path):
    root = str(tmp_path / "s")
    _killed(root, "hot:2")
    _killed(root, "hot:1", "flush", "new:late", "hot:1")  # the second session, killed too
    with MessageStore(root, small_config(), create=False) as s:
        assert s.recovery.abnormal
        assert not {("t5", 1), ("t9", 3)} & set(s.consume_queues.opened())
        counts = {(f"t{t}", q): s.max_offset(f"t{t}", q) for t in range(TOPICS) for q in range(4)}
        assert not {("t5", 1), ("t9", 3)} & set(s.consume_queues.opened())
        assert counts == {(f"t{t}", q): 7 if q == 0 and t < 3 else 3
                          for t in range(TOPICS) for q in range(4)}
        assert _bodies(s, "t1", 0)[3:] == [b"1/0/more0", b"1/0/more1", b"1/0/more0", b"1/0/more0"]
        assert _bodies(s, "late", 0) == [b"late/0/%d" % i for i in range(3)]
    assert verify_store(root).ok


@pytest.mark.parametrize("site", ["checkpoint.before:2", "ends.append:2", "ends.append:1"])
def test_a_crash_between_the_journal_and_the_checkpoint_keeps_the_chain_usable(tmp_path, site):
    """Killed after its block went in but before the checkpoint moved (checkpoint.before),
    halfway through a delta (ends.append:2), or before the first base was renamed into
    place (ends.append:1): the next open uses the chain up to the checkpoint, or lists."""
    root = str(tmp_path / "s")
    proc = subprocess.run([sys.executable, "-c", _WRITER, root, "hot:1", "flush"], cwd=REPO,
                          capture_output=True, text=True, timeout=180,
                          env={**os.environ, "MQFS_CRASH_AT": site})
    assert proc.returncode == 137, proc.stderr
    with MessageStore(root, small_config(), create=False) as s:
        assert s.recovery.abnormal
        counts = {(f"t{t}", q): s.max_offset(f"t{t}", q) for t in range(TOPICS) for q in range(4)}
        hot = 3 if site == "ends.append:1" else 4  # killed in the fill's own checkpoint
        assert counts == {(f"t{t}", q): hot if q == 0 and t < 3 else 3
                          for t in range(TOPICS) for q in range(4)}
        if site != "ends.append:1":  # the first checkpoint's base is there: nothing opened
            assert set(s.consume_queues.opened()) == {("t0", 0), ("t1", 0), ("t2", 0)}
        s.put(Message.create("t0", b"after"))
    assert verify_store(root).ok


def test_the_journal_stays_bounded_and_names_every_count(tmp_path):
    """Each checkpoint appends the queues that changed; past max(1 MiB, its base) of deltas
    the file is rewritten as one base, so it stays bounded whatever the number of
    checkpoints, and its chain names every queue's count as of the last one."""
    from mqfs.store.queues import ends_log
    root = str(tmp_path / "s")
    sizes = []
    with MessageStore(root, small_config(flush_cq_interval_ms=3_600_000,
                                         commitlog_file_size=1 << 20)) as s:
        for _ in range(40):  # ~40 KiB of deltas a checkpoint
            s.put_batch([Message.create(f"b{q}", b"x") for q in range(1000)])
            s.flush()
            sizes.append(os.path.getsize(_journal(root)))
        counts = {(f"b{q}", 0): s.max_offset(f"b{q}", 0) for q in range(1000)}
        found, _ = ends_log.replay(root, s.checkpoint.commitlog_flushed_offset)
    assert max(sizes) < (1 << 20) + (64 << 10)  # the deltas' bound, plus the base and a block
    assert any(b < a for a, b in zip(sizes, sizes[1:]))  # rewritten as a base at least once
    assert found is not None and {k: v[0] for k, v in found.ends.items()} == counts
    assert all(v[3] for v in found.ends.values())


_ENOSPC = """
import os, sys
from mqfs.store import Message, MessageStore
from tests.store.helpers import small_config
s = MessageStore(sys.argv[1], small_config(flush_cq_interval_ms=3_600_000)).open()
s.put_batch([Message.create(f"t{t}", b"%d/%d/%d" % (t, q, i), queue_id=q)
             for i in range(3) for t in range(30) for q in range(4)])
s.flush()
hot = lambda lo: s.put_batch([Message.create(f"t{t}", b"hot") for t in range(lo, lo + 3)])
hot(0)
try:
    s.flush()  # the disk fills halfway through the journal's delta
    sys.exit("the full disk went unnoticed")
except OSError:
    pass
hot(3)
s.flush()  # written again, whole: t0..t2's change too, though they did not change since
hot(6)
print("acknowledged", flush=True)
os.kill(os.getpid(), 9)
"""


def test_a_full_disk_in_the_journal_stops_the_checkpoint_and_the_next_one_mends_it(tmp_path):
    root = str(tmp_path / "s")
    killed_writer(_ENOSPC, root, env={**os.environ, "MQFS_CRASH_AT": "ends.append:2:enospc"})
    with MessageStore(root, small_config(), create=False) as s:
        assert set(s.consume_queues.opened()) == {("t6", 0), ("t7", 0), ("t8", 0)}
        counts = {(f"t{t}", q): s.max_offset(f"t{t}", q) for t in range(TOPICS) for q in range(4)}
        assert set(s.consume_queues.opened()) == {("t6", 0), ("t7", 0), ("t8", 0)}
        assert counts == {(f"t{t}", q): 4 if q == 0 and t < 9 else 3
                          for t in range(TOPICS) for q in range(4)}
    assert verify_store(root).ok
