"""Store time never goes backwards within a store (issue 20 item 7): a clock stepped back
between two opens (pinned through `MessageStore.clock`) stamps new records at the newest store
time the store holds, so `offset_by_time`, key lookups with a time range and verify keep
answering right; and IndexFiles a broker wrote while its own clock stepped back are read,
not called damaged."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from store import Message, MessageStore
from store.files.index_file import IndexFile
from store.integrity.verify import verify_store
from store.repair import plan_repair
from tests.crash_tiers import RECOVERY_LOGS, REPO
from tests.store_helpers import small_config

pytestmark = pytest.mark.allow_logs(*RECOVERY_LOGS)
T1 = 1_700_000_000_000
HOUR = 3_600_000


def _session(root: str, start: int, n: int, first: int) -> list:
    """n puts with the clock pinned to start, start + 1 s, ...; keys k<first>..."""
    ticks = iter(range(start, start + 1000 * n, 1000))
    with MessageStore(root, small_config()) as s:
        s.clock = lambda: next(ticks)
        return [s.put(Message.create("T", b"m%d" % (first + i), keys=[f"k{first + i}"]))
                for i in range(n)]


def test_a_clock_stepped_back_between_opens_does_not_turn_store_time_back(tmp_path):
    root = str(tmp_path / "s")
    first = _session(root, T1, 10, 0)
    newest = first[-1].store_timestamp
    second = _session(root, T1 - HOUR, 10, 10)  # the clock is an hour behind now
    stamps = [r.store_timestamp for r in first + second]
    assert stamps == sorted(stamps) and second[0].store_timestamp == newest
    assert verify_store(root).ok and not plan_repair(root).needed
    with MessageStore(root, small_config(read_only=True), create=False) as s:
        assert s.offset_by_time("T", 0, newest) == 9  # the first record stored at `newest`
        assert s.offset_by_time("T", 0, newest + 1) == 20
        for i in range(20):
            hits = s.query_key(f"k{i}", "T", begin=newest if i >= 9 else T1, end=newest)
            assert [m.queue_offset for m in hits] == [i]


def test_a_clock_stepped_back_after_a_crash_does_not_turn_store_time_back(tmp_path):
    """Killed without a close, its checkpoint lost: recovery finds the newest time in the
    records it dispatches."""
    root = str(tmp_path / "s")
    script = ("import os, sys\nfrom store import Message, MessageStore\n"
              "from tests.store_helpers import small_config\n"
              "s = MessageStore(sys.argv[1], small_config()).open()\n"
              f"s.clock = lambda: {T1}\n"
              "s.put(Message.create('T', b'before the crash'))\ns.flush()\nos._exit(9)\n")
    assert subprocess.run([sys.executable, "-c", script, root], cwd=REPO).returncode == 9
    os.unlink(os.path.join(root, "checkpoint"))
    with MessageStore(root, small_config(), create=False) as s:
        s.clock = lambda: T1 - HOUR
        assert s.put(Message.create("T", b"after")).store_timestamp == T1


@pytest.mark.parametrize("steps", ([0, -5000], [0, 4000, -1, -2000, -90_000]))
def test_an_index_file_whose_times_run_backwards_is_read_not_refused(tmp_path, steps):
    """As a broker with a clock stepping back writes it (its end before its begin): the header
    stays trusted and a key lookup with a time range finds every entry whose time lies in it."""
    f = IndexFile(str(tmp_path / "20231114221320000"), 64, 100)
    for i, step in enumerate(steps):
        assert f.put_key(7, 1000 + 100 * i, T1 + step)
    f.flush()
    assert f.header_ok()
    for i, step in enumerate(steps):
        assert f.is_time_matched(T1 + step, T1 + step)
        assert 1000 + 100 * i in f.select(7, T1 + step, T1 + step, 10)
    f.close()
