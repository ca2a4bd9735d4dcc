"""A CommitLog file larger than a task is cut at record starts found near each cut in the file
(pipeline/splits.py), not from every ConsumeQueue unit: every record is read by exactly one
piece whatever the cut size, runs of records without units are stepped over, and a record
forged inside a body (checksums whole, PHYSICALOFFSET naming its place: the store's resync
takes it for a record) is never a cut, because no unit points at it."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

pytest.importorskip("pyspark")

from mqfs.pipeline.options import read_options  # noqa: E402
from mqfs.pipeline.scan import RowFilter  # noqa: E402
from mqfs.pipeline.source import MqfsReader, RangeGroup, group_ranges, plan_partitions  # noqa: E402
from mqfs.pipeline.splits import Vouch, split_points  # noqa: E402
from mqfs.store import Message, MessageStore  # noqa: E402
from mqfs.store.format import layout  # noqa: E402
from mqfs.store.integrity.salvage import next_record_in  # noqa: E402
from mqfs.store.offline.views import commitlog_files, map_readonly, store_layout  # noqa: E402
from tests.pipeline.helpers import expected_rows, make_messages, small_store_config  # noqa: E402

FILE = 1 << 20
BODY_AT = int(layout.body_pos(8, 8))  # a record's body, with IPv4 hosts


def _forge(s: MessageStore, root: str, model: int, size: int) -> int | None:
    """Put a message whose body holds a copy of the record at `model`, its PHYSICALOFFSET set
    to where the copy lands; the copy's CommitLog offset (None if the put went elsewhere)."""
    start, path = [(a, p) for a, p in commitlog_files(root) if a <= model][-1]
    with open(path, "rb") as f:
        f.seek(model - start)
        raw = bytearray(f.read(size))
    last = s.put(Message.create("Orders", b"marker"))
    at = last.commitlog_offset + last.size + BODY_AT  # the next record's body
    raw[layout.PHYSICAL_OFFSET_POS:layout.PHYSICAL_OFFSET_POS + 8] = struct.pack(">q", at)
    put = s.put(Message.create("Audit_Log", bytes(raw) + b"tail", queue_id=1))
    return at if put.commitlog_offset + BODY_AT == at else None


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> tuple[str, list[int]]:
    """Two 1 MiB CommitLog files and more of varied records, a run of 100 prepared transactions (no
    units), and records forged inside bodies."""
    root = str(tmp_path_factory.mktemp("splits") / "store")
    rng = random.Random(5)
    forged = []
    with MessageStore(root, small_store_config(commitlog_file_size=FILE, flavor="rocketmq", record_crc=False)) as s:
        msgs = make_messages(rng, 2600)
        for i in range(0, len(msgs), 100):
            s.put_batch(msgs[i:i + 100])
            if i == 800:
                s.put_batch([Message.create("Tx", rng.randbytes(rng.randint(0, 900)),
                                            sys_flag=layout.TRANSACTION_PREPARED) for _ in range(100)])
            if i % 300 == 0:
                model = s.put(Message.create("Payments", rng.randbytes(700), queue_id=2))
                at = _forge(s, root, model.commitlog_offset, model.size)
                if at is not None:
                    forged.append(at)
    assert len(forged) >= 5 and len(commitlog_files(root)) >= 2
    return root, forged


def _read(root: str, target: int, all_records: bool) -> list[int]:
    """CommitLog offsets of the rows of every piece planned with cuts every `target` bytes."""
    lay = store_layout(root)
    opts = read_options({"path": root, **({"records": "all"} if all_records else {})}, streaming=False)
    reader = MqfsReader(lay, opts, None)
    pieces = plan_partitions(lay, None, True, RowFilter(all_records=all_records), split_bytes=target)
    if target < FILE:
        assert len(pieces) > len(commitlog_files(root))  # files were cut
    out: list[int] = []
    for piece in pieces:
        for batch in reader.read(RangeGroup(0, [piece])):
            out += batch.column("commitlog_offset").to_pylist()
    return out


@pytest.mark.parametrize("target", [2_000, 9_999, 65_536, 333_333])
def test_every_record_is_read_by_exactly_one_piece(big, target):
    root, _ = big
    queued = sorted(expected_rows(root))
    assert sorted(_read(root, target, False)) == queued
    every = sorted(_read(root, 1 << 40, True))  # whole files: the walk of every record
    assert len(every) == len(queued) + 100  # the prepared ones too
    assert sorted(_read(root, target, True)) == every


def test_a_record_forged_in_a_body_is_never_a_cut(big):
    root, forged = big
    lay = store_layout(root)
    starts = set(_read(root, 1 << 40, True))
    queued = sorted(expected_rows(root))
    vouch = Vouch(lay)
    for at in forged:
        base, path = [(a, p) for a, p in commitlog_files(root) if a <= at][-1]
        buf = map_readonly(path)
        pos = at - base
        assert at not in starts
        assert next_record_in(buf, base, pos, pos + 8, lay.checked_flavor) == pos  # looks whole
        assert not vouch(np.frombuffer(buf, np.uint8), pos, base)
        cuts = split_points(buf, base, len(buf), pos, lay.checked_flavor, vouch)
        assert cuts and cuts[0] > pos and all(base + c in starts for c in cuts)
        if base == 0:  # a cut nominally at the forgery: its copy would be a second row
            assert sorted(_read(root, pos, False)) == queued


@pytest.mark.parametrize("slots", [2, 3, 5])
def test_tasks_for_every_core_are_of_one_size(big, slots):
    """With the session's cores known (the JVM reader's plans), the bytes are cut into a multiple
    of the cores' count of equal shares wherever those fall in the files, so no task is left to
    run alone at the end; every record is still read once."""
    root, _ = big
    lay = store_layout(root)
    opts = read_options({"path": root}, streaming=False)
    reader = MqfsReader(lay, opts, None)
    reader.jvm, reader.slots = True, slots
    target = 250_000  # a task's nominal bytes: the store is several of them
    pieces = plan_partitions(lay, None, True, RowFilter(), split_bytes=target, slots=slots)
    groups = group_ranges(pieces, None, target, slots)
    sizes = [sum(p.end - p.start for p in g.pieces) for g in groups]
    assert len(groups) % slots == 0 and len(groups) >= 2 * slots
    # each task ends at the first record a unit vouches for from its share's end: within a
    # record, or past the run of 100 prepared records (no units) that the store holds
    total, ends = sum(sizes), np.cumsum(sizes)[:-1]
    late = [int(e) - total * (i + 1) // len(sizes) for i, e in enumerate(ends)]
    assert all(0 <= d < 100_000 for d in late), late
    assert sum(d >= 8_000 for d in late) <= 1, late  # records here are up to a few KiB
    out: list[int] = []
    for g in groups:
        for batch in reader.read(g):
            out += batch.column("commitlog_offset").to_pylist()
    assert sorted(out) == sorted(expected_rows(root))


@pytest.mark.parametrize("slots", [2, 3])
def test_a_jvm_read_of_up_to_its_task_size_per_core_is_one_task_per_core(big, slots, monkeypatch):
    """A JVM task costs its core time beyond its CPU, so the same bytes in more, smaller tasks
    finish later (issue 35: 18 tasks where 2 would do took longer on 2 idle cores): a store of
    up to JVM_TASK_BYTES per core is one task per core; a larger one is cut in tasks of about
    JVM_TASK_BYTES, still a multiple of the cores."""
    from mqfs.pipeline import source, tasks

    root, _ = big
    monkeypatch.setattr(tasks, "ONE_TASK_BYTES", 1)  # the store is a few MiB: more than one task

    def planned() -> list:
        reader = MqfsReader(store_layout(root), read_options({"path": root}, streaming=False), None)
        reader.jvm, reader.slots = True, slots
        return reader.partitions()

    assert len(planned()) == slots
    total = sum(p.end - p.start for g in planned() for p in g.pieces)
    monkeypatch.setattr(source, "JVM_TASK_BYTES", total // (3 * slots) + 1)
    parts = planned()
    assert len(parts) == 3 * slots
    assert sum(p.end - p.start for g in parts for p in g.pieces) == total
