"""Store time never goes backwards within a store (issue 20 item 7): a clock stepped back
between two opens (pinned through `MessageStore.clock`) stamps new records at the newest store
time the store holds, so `offset_by_time`, key lookups with a time range and verify keep
answering right; and IndexFiles a broker wrote while its own clock stepped back are read,
not called damaged."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from mqfs.store import Message, MessageStore
from mqfs.store.files.index_file import IndexFile
from mqfs.store.files.time_search import search_time
from mqfs.store.integrity.verify import verify_store
from mqfs.store.offline.views import offset_by_time as offline_offset_by_time
from mqfs.store.offline.views import store_layout
from mqfs.store.repair import plan_repair
from tests.crash.tiers import RECOVERY_LOGS, REPO
from tests.fusefs.helpers import mounted, sh
from tests.store.helpers import small_config, stamp_as_broker

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
    script = ("import os, sys\nfrom mqfs.store import Message, MessageStore\n"
              "from tests.store.helpers import small_config, stamp_as_broker\n"
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


def _broker_session(root: str, stamps: list[int], key=lambda i: f"k{i}") -> None:
    """Puts stamped exactly `stamps`, as a broker whose store time follows a clock that steps
    back (mqfs itself never stamps a record before the last one)."""
    with MessageStore(root, small_config()) as s:
        stamp_as_broker(s, stamps)
        for i in range(len(stamps)):
            s.put(Message.create("T", b"m%d" % i, keys=[key(i)]))


# the clock steps back an hour after 10 records, then forward past them
STEPPED = [T1 + 1000 * i for i in range(10)] + [T1 - HOUR + 1000 * i for i in range(10)] \
    + [T1 + 20_000 + 1000 * i for i in range(5)]
PROBES = sorted({t + d for t in STEPPED for d in (-1, 0, 1)} | {0, T1 + 5000, T1 + 10_000})


def _first_at_or_after(ts: int) -> int:
    return next((i for i, t in enumerate(STEPPED) if t >= ts), len(STEPPED))


def _last_at_or_before(ts: int) -> int:
    return max((i for i, t in enumerate(STEPPED) if t <= ts), default=0)


def test_time_answers_are_right_for_records_out_of_time_order(tmp_path):
    """The bisection alone lands on a crossing point here (T1 + 5 s: offset 20, not 5)."""
    root = str(tmp_path / "s")
    _broker_session(root, STEPPED)
    layout = store_layout(root)
    with MessageStore(root, small_config(read_only=True), create=False) as s:
        for ts in PROBES:
            assert s.offset_by_time("T", 0, ts) == _first_at_or_after(ts), ts
            assert s.offset_by_time("T", 0, ts, upper=True) == _last_at_or_before(ts), ts
            assert offline_offset_by_time(layout, "T", 0, ts) == _first_at_or_after(ts), ts
        for i, t in enumerate(STEPPED):
            assert [m.queue_offset for m in s.query_key(f"k{i}", "T", begin=t, end=t)] == [i]
            assert s.query_key(f"k{i}", "T", begin=t + 1000, end=t + 5000) == []


def test_a_key_time_range_finds_every_hit_when_an_index_file_dips_in_the_middle(tmp_path):
    """One key on every record: its hash chain runs newest first through times that go
    back and forth, so no entry's time may end the walk; the files (200 entries each) roll
    during the dip, so no file's begin may end the search either."""
    root = str(tmp_path / "s")
    stamps = [T1 + 1000 * i for i in range(150)] + [T1 - HOUR + 1000 * i for i in range(150)] \
        + [T1 + 200_000 + 1000 * i for i in range(50)]
    _broker_session(root, stamps, key=lambda i: "same")
    with MessageStore(root, small_config(read_only=True), create=False) as s:
        for begin, end in ((T1 + 10_000, T1 + 12_000), (T1 - HOUR, T1 - HOUR + 3000),
                           (T1 + 140_000, T1 + 210_000)):
            want = sorted(i for i, t in enumerate(stamps) if begin <= t <= end)
            hits = s.query_key("same", "T", begin=begin, end=end, max_n=1000)
            assert sorted(m.queue_offset for m in hits) == want, (begin, end)


def test_a_mount_answers_at_for_records_out_of_time_order(tmp_path):
    root, mnt = str(tmp_path / "s"), str(tmp_path / "mnt")
    _broker_session(root, STEPPED)
    times = [T1 + 5000, T1 - HOUR + 3000, T1 + 10_000, T1 + 24_000]
    with mounted(root, mnt):
        q = f"{mnt}/topics/T/0"
        each = " ".join(map(str, times))
        links = sh(f"cd {q} && for t in {each}; do readlink at/$t; done")
        assert links.stdout.split() == [b"../%d" % _first_at_or_after(t) for t in times]
        assert sh(f"cat {q}/at/{T1 + 5000}").stdout == b"m5"


def test_the_time_search_scans_only_on_evidence_of_disorder():
    """In order: a bisection and a few more reads, never the scan; out of order: the scan."""
    calls: list[tuple[int, int]] = []

    def times_of(stamps):
        def times(i: int, k: int) -> np.ndarray:
            calls.append((i, k))
            return np.array(stamps[i:i + k], dtype=np.int64)
        return times

    ordered = list(range(0, 2_000_000, 2))
    assert search_time(len(ordered), ordered.__getitem__, times_of(ordered), 1001) == 501
    assert search_time(len(ordered), ordered.__getitem__, times_of(ordered), 1001, upper=True) == 500
    assert calls == []
    assert search_time(len(STEPPED), STEPPED.__getitem__, times_of(STEPPED), T1 + 5000) == 5
    assert calls


def test_an_index_file_prunes_by_time_only_when_its_entries_went_in_in_order(tmp_path):
    path = str(tmp_path / "20231114221320000")
    f = IndexFile(path, 64, 100)
    f.put_keys(np.array([7, 8], dtype=np.int64), np.array([100, 200], dtype=np.int64),
               np.array([T1, T1 + 5000], dtype=np.int64))
    assert f.put_key(9, 300, T1 + 9000) and f.times_in_order()
    assert not f.is_time_matched(T1 + 20_000, T1 + 30_000)  # in order: the header answers
    assert f.put_key(9, 400, T1 + 2000) and not f.times_in_order()  # the clock stepped back
    assert f.put_key(9, 500, T1 + 10_000) and f.is_time_matched(T1 + 20_000, T1 + 30_000)
    f.close()
    again = IndexFile(path, 64, 100, read_only=True)  # entries found on disk: not vouched for
    assert not again.times_in_order() and 400 in again.select(9, T1 + 2000, T1 + 2000, 10)
    again.close()
