"""Queues registered without being opened after a crash and in read-only opens: a read-only
open (clean or not) opens no queue and shows what it showed before, each queue checked in
memory at its first use; an abnormal open opens only the queues its re-dispatch touches, and
leaves every other queue a cut, kept in config/queueCuts.json across another crash, that
drops at its first use the units a lost tail left. The crashes are real kill -9s."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from mqfs.fusefs.inodes import TOPICS_INO
from mqfs.fusefs.model import Model
from mqfs.store import Message, MessageStore
from mqfs.store.files.checkpoint import Checkpoint
from mqfs.store.integrity.verify import verify_store
from tests import REPO
from tests.store.helpers import file_hashes, killed_writer, small_config

pytestmark = pytest.mark.allow_logs(r"^recovery: ", r"no abort file")

TOPICS = 30  # x 4 queues
HOUR_MS = 3_600_000

# fills TOPICS x 4 queues with `per` messages each and closes cleanly, or (`crash`) flushes
# them, puts `more` messages into queue 0 of the first `hot` topics and is killed
_WRITER = """
import os, sys
from mqfs.fusefs.inodes import TOPICS_INO
from mqfs.fusefs.model import Model
from mqfs.store import Message, MessageStore
from mqfs.store.files.checkpoint import Checkpoint
from mqfs.store.integrity.verify import verify_store
from tests.store.helpers import small_config
root, per, crash, more, hot = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4]), int(sys.argv[5])
s = MessageStore(root, small_config(flush_cq_interval_ms=3_600_000)).open()
s.put_batch([Message.create(f"t{t}", b"%d/%d/%d" % (t, q, i), queue_id=q)
             for i in range(per) for t in range(30) for q in range(4)])
if not crash:
    s.close()
    sys.exit(0)
s.flush()
s.put_batch([Message.create(f"t{t}", b"%d/0/more%d" % (t, i)) for i in range(more) for t in range(hot)])
print("acknowledged", flush=True)
os.kill(os.getpid(), 9)
"""


def _write(root: str, per: int = 3, crash: bool = False, more: int = 0, hot: int = 0) -> None:
    proc = subprocess.run([sys.executable, "-c", _WRITER, root, str(per), "1" if crash else "0",
                           str(more), str(hot)], cwd=REPO, capture_output=True, text=True,
                          timeout=180)
    if crash:
        assert proc.returncode == -signal.SIGKILL and proc.stdout == "acknowledged\n", proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr


def _shown(s: MessageStore) -> dict[tuple[str, int], list[bytes]]:
    return {(f"t{t}", q): [bytes(m.body) for m in s.get_range(f"t{t}", q, 0, 100)]
            for t in range(TOPICS) for q in range(4)}


@pytest.mark.parametrize("crash", [False, True], ids=["clean", "kill9"])
def test_a_read_only_open_opens_no_queue_and_shows_what_it_showed_before(tmp_path, crash):
    root = str(tmp_path / "s")
    _write(root, crash=crash, more=2, hot=3)
    before = file_hashes(root)
    with MessageStore(root, small_config(read_only=True), create=False) as s:
        assert s.recovery.abnormal == crash
        assert len(s.consume_queues) == TOPICS * 4 and not s.consume_queues.opened()
        assert bytes(s.get("t7", 2, 1).body) == b"7/2/1"
        assert list(s.consume_queues.opened()) == [("t7", 2)]
        shown = _shown(s)
        assert s.max_offset("t0", 0) == len(shown[("t0", 0)])
    for (t, q), bodies in shown.items():  # every flushed message; after the crash, those
        n = int(t[1:])  # past the checkpoint only once their units are in their file
        assert bodies[:3] == [b"%d/%d/%d" % (n, q, i) for i in range(3)]
        assert all(b.startswith(b"%d/0/more" % n) for b in bodies[3:])
    assert file_hashes(root) == before  # read-only changes no byte
    with MessageStore(root, small_config(), create=False) as s:  # as a read-write open shows
        full = _shown(s)
    assert all(full[key][:len(bodies)] == bodies for key, bodies in shown.items())
    if crash:
        assert full[("t1", 0)][3:] == [b"1/0/more0", b"1/0/more1"]


def test_damage_in_a_queue_is_found_at_its_first_use_by_a_read_only_open(tmp_path):
    root = str(tmp_path / "s")
    _write(root)
    path = os.path.join(root, "consumequeue", "t5", "1", "0" * 20)
    with open(path, "r+b") as f:  # the last unit's CommitLog offset points elsewhere
        f.seek(2 * 20 + 6)
        f.write(b"\x01\x00")
    before = file_hashes(root)
    with MessageStore(root, small_config(read_only=True), create=False) as s:
        assert not s.recovery.notes
        assert bytes(s.get("t5", 1, 2).body) == b"5/1/2"  # served from the log, never another
        assert any("t5/1 is damaged: served from the CommitLog" in n for n in s.recovery.notes)
    assert file_hashes(root) == before


# after the flushed fill, two messages go to t9/3 and their units are written into its file
# (the checkpoint does not move); the test then zeroes the CommitLog past the checkpoint, as
# a power cut that lost those pages but not the queue's leaves it
_LOST_TAIL = """
import os, sys
from mqfs.fusefs.inodes import TOPICS_INO
from mqfs.fusefs.model import Model
from mqfs.store import Message, MessageStore
from mqfs.store.files.checkpoint import Checkpoint
from mqfs.store.integrity.verify import verify_store
from tests.store.helpers import small_config
s = MessageStore(sys.argv[1], small_config(flush_cq_interval_ms=3_600_000)).open()
s.put_batch([Message.create(f"t{t}", b"%d/%d/%d" % (t, q, i), queue_id=q)
             for i in range(3) for t in range(30) for q in range(4)])
s.flush()
s.put_batch([Message.create("t9", b"9/3/lost%d" % i, queue_id=3) for i in range(2)])
s.unit_flush.flush()
print("acknowledged", flush=True)
os.kill(os.getpid(), 9)
"""

# a session after that crash: puts into t0/0 (over the offsets t9/3's lost units name),
# flushes (the checkpoint moves past the cut t9/3 owes) and is killed, t9/3 never used
_SECOND = """
import os, sys
from mqfs.fusefs.inodes import TOPICS_INO
from mqfs.fusefs.model import Model
from mqfs.store import Message, MessageStore
from mqfs.store.files.checkpoint import Checkpoint
from mqfs.store.integrity.verify import verify_store
from tests.store.helpers import small_config
s = MessageStore(sys.argv[1], small_config(flush_cq_interval_ms=3_600_000)).open()
assert s.recovery.abnormal and not s.consume_queues.opened(), s.consume_queues.opened()
s.put_batch([Message.create("t0", b"0/0/after%d" % i) for i in range(6)])
s.flush()
print("acknowledged", flush=True)
os.kill(os.getpid(), 9)
"""


def _killed(script: str, root: str) -> None:
    killed_writer(script, root)


def _lose_tail(root: str) -> int:
    """Zero the CommitLog past the checkpoint's flushed offset (what the crash lost)."""
    flushed = Checkpoint.load(os.path.join(root, "checkpoint")).commitlog_flushed_offset
    with open(os.path.join(root, "commitlog", "0" * 20), "r+b") as f:
        f.seek(flushed)
        assert f.read(4) != bytes(4)  # the two lost records were there
        f.seek(flushed)
        f.write(bytes(4096))
    return flushed


def _cuts(root: str) -> dict:
    with open(os.path.join(root, "config", "queueCuts.json")) as f:
        return json.load(f)["cuts"]


def test_an_abnormal_open_opens_only_the_queues_its_redispatch_touches(tmp_path):
    root = str(tmp_path / "s")
    _write(root, crash=True, more=2, hot=3)
    with MessageStore(root, small_config(), create=False) as s:
        assert s.recovery.abnormal and s.recovery.dispatched == 6
        assert set(s.consume_queues.opened()) == {("t0", 0), ("t1", 0), ("t2", 0)}
        assert len(s.consume_queues) == TOPICS * 4
        owed = _cuts(root)
        assert len(owed) == 1 and sum(map(len, next(iter(owed.values())).values())) == TOPICS * 4 - 3
        shown = _shown(s)
        s.flush()  # the queues used made their cuts: none is owed any more
        assert _cuts(root) == {}
    assert shown[("t2", 0)] == [b"2/0/0", b"2/0/1", b"2/0/2", b"2/0/more0", b"2/0/more1"]
    assert all(bodies == [b"%d/%d/%d" % (int(t[1:]), q, i) for i in range(3)]
               for (t, q), bodies in shown.items() if (t, q) not in {("t0", 0), ("t1", 0), ("t2", 0)})


def test_units_past_a_lost_tail_are_dropped_at_first_use_even_after_a_second_crash(tmp_path):
    root = str(tmp_path / "s")
    _killed(_LOST_TAIL, root)
    cut = _lose_tail(root)
    _killed(_SECOND, root)  # recovery owed t9/3 the cut; its second crash must not lose it
    assert 3 in _cuts(root)[str(cut)]["t9"]
    with MessageStore(root, small_config(), create=False) as s:
        assert s.recovery.abnormal and ("t9", 3) not in s.consume_queues.opened()
        # its count, from config/queueEnds.log, is known without opening it
        assert s.max_offset("t9", 3) == 3 and ("t9", 3) not in s.consume_queues.opened()
        assert s.put(Message.create("t9", b"9/3/next", queue_id=3)).queue_offset == 3
        # its first use dropped the two lost units
        assert any("t9/3: dropped 2 unit(s) from offset 3" in n for n in s.recovery.notes)
        assert not any("rebuilt" in n for n in s.recovery.notes)
        assert [bytes(m.body) for m in s.get_range("t9", 3, 0, 9)] == \
            [b"9/3/0", b"9/3/1", b"9/3/2", b"9/3/next"]
        assert [bytes(m.body) for m in s.get_range("t0", 0, 3, 9)] == \
            [b"0/0/after%d" % i for i in range(6)]
    assert not os.path.exists(os.path.join(root, "quarantine")) or \
        not os.listdir(os.path.join(root, "quarantine"))


def test_a_clean_close_keeps_the_cut_of_a_queue_never_used(tmp_path):
    root = str(tmp_path / "s")
    _killed(_LOST_TAIL, root)
    _lose_tail(root)
    with MessageStore(root, small_config(), create=False) as s:
        assert s.recovery.abnormal and not s.consume_queues.opened()
        assert s.max_offset("t3", 1) == 3
    report = verify_store(root)  # the units t9/3 drops at its first use are no damage
    assert report.ok and any("t9/3 entry 3" in line and "owes" in line for line in report.lines)
    with MessageStore(root, small_config(), create=False) as s:  # clean: t9/3 still owes it
        assert not s.recovery.abnormal and not s.consume_queues.opened()
        assert s.consume_queues.recorded(("t3", 1)).entries == 3
        # its count came from config/queueEnds.log after the crash, so the close knew it
        assert s.consume_queues.recorded(("t9", 3)).entries == 3
        assert len(s.get_range("t9", 3, 0, 9)) == 3  # its first use makes the cut it owes
        assert any("t9/3: dropped 2 unit(s)" in n for n in s.recovery.notes)
    owed = next(iter(_cuts(root).values()))
    # t3/1's count was known (not opened): it still owes its cut, as t4's queues do
    assert 3 not in owed["t9"] and owed["t3"] == owed["t4"] == [0, 1, 2, 3]
    with MessageStore(root, small_config(), create=False) as s:
        assert s.consume_queues.recorded(("t9", 3)).entries == 3


def test_damage_in_a_queue_recovery_left_untouched_is_found_at_its_first_use(tmp_path):
    root = str(tmp_path / "s")
    _write(root, crash=True, more=1, hot=1)
    path = os.path.join(root, "consumequeue", "t5", "1", "0" * 20)
    with open(path, "r+b") as f:  # a flushed unit's CommitLog offset points elsewhere
        f.seek(2 * 20 + 6)
        f.write(b"\x01\x00")
    with MessageStore(root, small_config(), create=False) as s:
        assert set(s.consume_queues.opened()) == {("t0", 0)}
        assert bytes(s.get("t5", 1, 2).body) == b"5/1/2"  # never another message
        assert any("t5/1 unit 2 does not match" in n for n in s.recovery.notes)
        assert s.put(Message.create("t5", b"next", queue_id=1)).queue_offset == 3


def test_a_first_file_lost_by_a_queue_recovery_left_untouched_is_found_at_its_first_use(tmp_path):
    root = str(tmp_path / "s")
    _write(root, per=120, crash=True, more=1, hot=1)  # 120 units: two files of 100 a queue
    os.unlink(os.path.join(root, "consumequeue", "t4", "2", "0" * 20))
    with MessageStore(root, small_config(), create=False) as s:
        assert set(s.consume_queues.opened()) == {("t0", 0)}
        assert bytes(s.get("t4", 2, 0).body) == b"4/2/0"
        assert any("t4/2 lost its first file" in n for n in s.recovery.notes)
        assert s.put(Message.create("t4", b"next", queue_id=2)).queue_offset == 120


@pytest.mark.parametrize("read_only", [False, True], ids=["rw", "ro"])
def test_the_time_of_topics_after_a_crash_opens_no_queue(tmp_path, read_only):
    """topics/'s time is the newest message's: the first path walk of a mount after a crash
    took every queue's newest, opening each (52 s for 8,000 queues)."""
    root = str(tmp_path / "s")
    _write(root, crash=True, more=2, hot=3)
    with MessageStore(root, small_config(read_only=read_only), create=False) as s:
        opened = set(s.consume_queues.opened())
        model = Model(s)
        mtime = model.getattr(TOPICS_INO).mtime_ns
        assert set(s.consume_queues.opened()) == opened
        newest = max(m.store_timestamp for m in s.get_range("t2", 0, 0, 9))
        assert mtime == newest * 1_000_000


def test_a_cut_drops_only_units_that_describe_no_record_of_their_queue(tmp_path):
    """A stale or forged cut (config/queueCuts.json) costs a check, never a message: the
    units past it that describe their records stay, and a name no queue has is passed over."""
    root = str(tmp_path / "s")
    _write(root)
    os.makedirs(os.path.join(root, "consumequeue", "t1", "\u00b2"))  # not a queue id
    with open(os.path.join(root, "config", "queueCuts.json"), "w") as f:
        json.dump({"cuts": {"0": {"t3": [1], "gone": [7]}}}, f)
    with MessageStore(root, small_config(), create=False) as s:
        assert s.consume_queues.recorded(("t3", 1)).cut == 0
        assert [bytes(m.body) for m in s.get_range("t3", 1, 0, 9)] == [b"3/1/%d" % i for i in range(3)]
        assert not s.recovery.notes and len(s.consume_queues) == TOPICS * 4
    assert _cuts(root) == {}
