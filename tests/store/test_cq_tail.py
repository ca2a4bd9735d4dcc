"""A ConsumeQueue's tail (its units not yet in its files) is written in place: a put adds
its 20 bytes past the used ones. What a reader took from the tail (an entry, a numpy view of
entries) never changes under it as puts go on and the tail is written out, the view cannot
be written through, and the units are those the Python packing gives, in memory and files."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from mqfs.store.files.consume_queue import TAIL_MAX, UNIT_SIZE, ConsumeQueue

UNIT = struct.Struct(">qiq")


def _unit(i: int) -> tuple[int, int, int]:
    return (1000 + 100 * i, 100, i * 7 - 3)


def test_views_of_the_tail_keep_their_units_as_puts_and_write_outs_go_on(tmp_path):
    cq = ConsumeQueue(str(tmp_path), "t", 0, 64)  # 1280-byte files: the tail rolls them
    taken: list[tuple[int, np.ndarray]] = []
    for i in range(3 * TAIL_MAX // UNIT_SIZE):
        if not cq.takes(UNIT_SIZE):
            cq.ensure_room()
        assert cq.put_buffered(*_unit(i), i)
        assert cq.entry(i) == _unit(i) and cq.max_offset == i + 1
        if i % 37 == 0:
            taken.append((i, cq.entries(max(0, i - 30), 31)))
        if i % 101 == 0:
            cq.write_out()
    for i, view in taken:
        first = max(0, i - 30)
        assert [tuple(u) for u in view.tolist()] == [_unit(j) for j in range(first, i + 1)]
        try:  # a view of the tail alone is read-only; a concatenation is the caller's copy
            view["size"][0] = 1
        except ValueError:
            pass
        assert cq.entry(first) == _unit(first)
    cq.write_out()
    assert cq.buffered == 0
    assert [tuple(u) for u in cq.entries(0, 10_000).tolist()] == \
        [_unit(j) for j in range(3 * TAIL_MAX // UNIT_SIZE)]
    raw = b"".join(bytes(mf.buffer()[:mf.read_position]) for mf in cq.queue.files)
    assert raw == b"".join(UNIT.pack(*_unit(j)) for j in range(3 * TAIL_MAX // UNIT_SIZE))
    cq.close()


def test_a_batchs_units_then_single_puts_continue_one_tail(tmp_path):
    cq = ConsumeQueue(str(tmp_path), "t", 0, 64)
    cq.start_with(b"".join(UNIT.pack(*_unit(j)) for j in range(5)))
    assert cq.buffered == 5 * UNIT_SIZE and cq.next_offset == 5
    with pytest.raises(ValueError):  # a view of the tail alone cannot write into it
        cq.entries(0, 5)["size"][0] = 1
    for i in range(5, 40):
        assert cq.put_buffered(*_unit(i), i)
    assert cq.append_units(b"".join(UNIT.pack(*_unit(j)) for j in range(40, 60)), 40,
                           _unit(59)[0] + 100)
    assert not cq.append_units(UNIT.pack(*_unit(61)), 61, 0)  # a gap: refused, nothing added
    assert [tuple(u) for u in cq.entries(0, 100).tolist()] == [_unit(j) for j in range(60)]
    cq.write_out()
    assert cq.buffered == 0 and cq.max_offset == 60 and cq.entry(59) == _unit(59)
    cq.close()
