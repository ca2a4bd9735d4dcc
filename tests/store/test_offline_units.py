"""store.offline.units (a ConsumeQueue read without numpy) against views.QueueReader, whose
meaning it keeps: written units, pre-blank units, bounds, units by offset, tag picks and time
searches, over files of any bytes (hypothesis) and a store whose units point anywhere."""

from __future__ import annotations

import os
import struct

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mqfs.store import Message, MessageStore
from mqfs.store.files import consume_queue
from mqfs.store.files.time_search import search_time
from mqfs.store.offline import units as u
from mqfs.store.offline.store_files import commitlog_files, map_readonly, store_layout
from mqfs.store.offline.views import QueueReader, _valid_units, offset_by_time
from tests.store.helpers import small_config

T0 = 1_790_000_000_000
PER_FILE = 8  # units of a file in the hypothesis queues
TAGS = [11, 11 + 256, -3, 2**40 + 7, 2**40 + 11]  # low bytes shared: a tag is found by its low byte first

UNIT_KINDS = st.one_of(
    st.tuples(st.integers(0, 5000), st.integers(1, 300), st.sampled_from(TAGS)),  # written
    st.just((0, 0, 0)),  # unwritten
    st.just((0, 0x7FFFFFFF, 0)),  # pre-blank
    st.tuples(st.integers(-(2**63), -1), st.integers(1, 300), st.sampled_from(TAGS)),  # negative offset
    st.tuples(st.integers(0, 5000), st.integers(-(2**31), 0), st.sampled_from(TAGS)),  # size <= 0
    st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**31), 2**31 - 1),
              st.integers(-(2**63), 2**63 - 1)),  # any bytes
)


def test_the_unit_layout_is_the_consume_queues():
    assert u.UNIT.size == u.UNIT_SIZE == consume_queue.UNIT_SIZE
    assert (0, u.PRE_BLANK_SIZE, 0) == consume_queue.PRE_BLANK


def _write(directory: str, files: list[tuple[int, list[tuple[int, int, int]], bytes]]) -> None:
    os.makedirs(directory, exist_ok=True)
    for base, units, tail in files:
        with open(os.path.join(directory, f"{base * 20:020d}"), "wb") as f:
            f.write(b"".join(u.UNIT.pack(*x) for x in units) + tail or bytes(20))  # (never empty:
            # an empty file is refused by both alike, as a mapping of it is)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(UNIT_KINDS, max_size=PER_FILE), st.binary(max_size=30)),
                min_size=0, max_size=4),
       st.integers(0, 3 * PER_FILE), st.integers(0, 3 * PER_FILE), st.lists(st.sampled_from(TAGS), max_size=2),
       st.sampled_from([0, 4096]))
def test_units_read_as_the_queue_reader_reads_them(tmp_path_factory, files, start, length, codes, many):
    """Including a queue whose newest file has no written unit (a roll a moment ago): its
    bounds are the older files' (QueueReader said (0, 0) when only the first had units)."""
    root = str(tmp_path_factory.mktemp("q"))
    directory = os.path.join(root, "consumequeue", "T", "0")
    _write(directory, [(i * PER_FILE, units, tail) for i, (units, tail) in enumerate(files)])
    if not files:
        os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        mm = map_readonly(os.path.join(directory, name))
        valid = _valid_units(mm)
        assert u.written(mm) == len(valid)
        real = [i for i, x in enumerate(valid["size"].tolist()) if x != u.PRE_BLANK_SIZE]
        assert u.first_real(mm, len(valid)) == (real[0] if real else len(valid))
    mine, theirs = u.Units(root, "T", 0, PER_FILE), QueueReader(root, "T", 0, PER_FILE)
    assert mine.bounds() == theirs.bounds()
    for offset in range(-1, 4 * PER_FILE + 2):
        unit = theirs.unit_at(offset, {})
        assert mine.unit_at(offset) == (None if unit is None else tuple(int(x) for x in unit.tolist()))
    offs, units = theirs.read(start, start + length)
    assert mine.read(start, start + length) == list(zip(offs.tolist(), units["offset"].tolist()))
    keep = [i for i, t in enumerate(units["tags"].tolist()) if t in codes]
    saved, u._MANY = u._MANY, many  # 0: every tag matched whole, as for a common low byte
    try:
        _tagged_as_filtered(mine, start, length, codes, [(offs.tolist()[i], units["offset"].tolist()[i]) for i in keep])
    finally:
        u._MANY = saved


def _tagged_as_filtered(mine: u.Units, start: int, length: int, codes: list[int], want: list) -> None:
    assert mine.tagged(start, start + length, codes, 10**6) == want
    assert mine.tagged(start, start + length, codes, len(want)) == want
    if want:
        assert mine.tagged(start, start + length, codes, len(want) - 1) is None


def _reference_time_offset(layout, q: int, ts: int, upper: bool) -> int:
    """The search as views.offset_by_time made it over QueueReader (numpy) before it used
    `units`: the reference the numpy-free search is held to."""
    reader = QueueReader(layout.root, "T", q, layout.consume_queue_units)
    lo, hi = reader.bounds()
    times = u.StoreTimes(commitlog_files(layout.root))
    mapped: dict = {}

    def time_at(i: int) -> int:
        unit = reader.unit_at(lo + i, mapped)
        t = None if unit is None else times.at(int(unit["offset"]))
        return -1 if t is None else t

    return lo + search_time(hi - lo, time_at, lambda i, k: np.array([time_at(j) for j in range(i, i + k)]),
                            ts, upper)


def test_time_searches_are_the_views_over_in_order_out_of_order_and_damaged_units(tmp_path):
    root = str(tmp_path / "s")
    with MessageStore(root, small_config()) as s:
        clock = [T0]
        s.clock = lambda: clock[0]
        for i in range(400):
            s.put(Message.create("T", b"m%d" % i, queue_id=i % 2))
            clock[0] += 1000 if i != 250 else -90_000  # a clock that stepped back once
    cq = os.path.join(root, "consumequeue", "T", "1")
    first = os.path.join(cq, sorted(os.listdir(cq))[0])
    with open(first, "r+b") as f:  # a unit pointing mid-record, one past the log
        f.seek(20 * 7)
        f.write(struct.pack(">q", 13))
        f.seek(20 * 40)
        f.write(struct.pack(">q", 10**12))
    layout = store_layout(root)
    times = u.StoreTimes(commitlog_files(root))
    for q in (0, 1):
        units = u.Units(root, "T", q, layout.consume_queue_units)
        for ts in range(T0 - 2000, T0 + 420_000, 7_919):
            for upper in (False, True):
                want = _reference_time_offset(layout, q, ts, upper)
                assert u.time_offset(units, times, ts, upper) == want == offset_by_time(layout, "T", q, ts, upper)


def test_a_queue_whose_newest_file_has_no_unit_yet_ends_in_the_file_before(tmp_path):
    root = str(tmp_path)
    _write(os.path.join(root, "consumequeue", "T", "0"), [(0, [(0, 1, 11), (1, 1, 11)], b""),
                                                         (PER_FILE, [(0, 0, 0)], b"")])
    assert QueueReader(root, "T", 0, PER_FILE).bounds() == (0, 2) == u.Units(root, "T", 0, PER_FILE).bounds()
