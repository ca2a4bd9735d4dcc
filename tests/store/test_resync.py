"""The resync never takes a record inside an intact record's span (issue 33, item 6).

A message whose body holds a well-formed record, with its own PHYSICALOFFSET and checksum,
is planted; one bit of the outer record is flipped. Every walker (verify and repair, the
scrub, the Spark source's Python reader) must go on where the chain of records puts the next
record, never at the planted one: before, repair kept it as a message and key lookups served
it for another message's key."""

import os
import shutil
import struct

import numpy as np
import pytest

from mqfs.pipeline.scan import Checks, checked_runs
from mqfs.store import Message, MessageStore
from mqfs.store.format import layout
from mqfs.store.integrity.index_points import IndexPoints
from mqfs.store.integrity.verify import verify_store
from mqfs.store.offline.views import map_readonly, store_layout
from mqfs.store.repair import apply_repair, plan_repair
from tests.store.helpers import flip, small_config

CFG = dict(record_crc=False)  # the BODYCRC alone: a planted record needs no trailer recomputed
pytestmark = pytest.mark.allow_logs(r"^scrub: ", r"^recovery: ")


def _planted_store(root: str, tmp: str) -> tuple[int, int, int]:
    """A store of: m0, A (its body holding record P, a message of T/0 keyed 'victim' that
    names its own position), B (the real T/0 message keyed 'victim'). (A's offset, P's
    offset, B's offset)."""
    with MessageStore(tmp, small_config(**CFG)) as scratch:
        r = scratch.put(Message.create("T", b"planted", queue_id=0, keys=["victim"]))
        mf = scratch.commitlog.queue.find(r.commitlog_offset)
        at = r.commitlog_offset - mf.file_from_offset
        planted = bytearray(mf.buffer()[at:at + r.size])
    with MessageStore(root, small_config(**CFG)) as s:
        s.put(Message.create("Other", b"first", queue_id=0))
        a_at = s.commitlog.max_offset
        p_at = a_at + layout.body_pos(8, 8) + 16
        struct.pack_into(">q", planted, layout.PHYSICAL_OFFSET_POS, p_at)
        body = b"x" * 16 + bytes(planted) + b"y" * 16
        a = s.put(Message.create("Other", body, queue_id=0))
        assert a.commitlog_offset == a_at
        b = s.put(Message.create("T", b"real", queue_id=0, keys=["victim"]))
    return a_at, p_at, b.commitlog_offset


def _flip(root: str, at: int) -> None:
    flip(os.path.join(root, "commitlog", "0" * 20), at, 0x01)


WHERE = {"body": lambda a, p: p - 8,  # in A's body, before P: only BODYCRC fails
         "totalsize": lambda a, p: a + 3,  # A's TOTALSIZE one off: its parts still give its end
         "bodylen": lambda a, p: a + layout.body_len_pos(8, 8) + 3}  # A's BODYLEN one off


@pytest.mark.parametrize("where", sorted(WHERE))
def test_a_record_planted_in_a_body_never_becomes_a_message(tmp_path, where):
    root = str(tmp_path / "s")
    a_at, p_at, b_at = _planted_store(root, str(tmp_path / "scratch"))
    _flip(root, WHERE[where](a_at, p_at))
    report = verify_store(root)
    assert not report.ok
    damaged = [line for line in report.lines if "damaged CommitLog bytes" in line]
    assert damaged == [line for line in damaged if f"bytes {a_at}..{b_at} " in line] and len(damaged) == 1, \
        report.lines
    plan = plan_repair(root)
    apply_repair(plan)
    assert verify_store(root).ok
    with MessageStore(root, small_config(**CFG)) as s:
        assert [bytes(m.body) for m in s.get_range("T", 0, 0, 10)] == [b"real"]
        assert [(m.commitlog_offset, bytes(m.body)) for m in s.query_key("victim", topic="T")] == \
            [(b_at, b"real")]


@pytest.mark.parametrize("where", sorted(WHERE))
def test_the_scrub_and_the_spark_reader_resync_past_the_planted_record(tmp_path, where):
    root = str(tmp_path / "s")
    a_at, p_at, b_at = _planted_store(root, str(tmp_path / "scratch"))
    with MessageStore(root, small_config(**CFG)) as s:  # (an open would refuse the damage)
        _flip(root, WHERE[where](a_at, p_at))  # the mapping sees it: one page cache
        s.scrub()
        findings = [f for f in s.scrub_status()["findings"] if "damaged record" in f]
        assert len(findings) == 1 and f"offset {a_at} " in findings[0], findings
        mf = s.commitlog.queue.files[0]
        checks = Checks(s.flavor, skip=True)
        starts = [int(x) for run in checked_runs(mf.buffer(), 0, 0, s.commitlog.max_offset, checks,
                                                 1 << 10, 1 << 20)
                  for x in np.asarray(run.starts)]
        assert p_at not in starts and b_at in starts
        assert [at for at, _ in checks.skipped] == [a_at]


def _index_header_zeroed(root: str) -> None:
    """The IndexFile's header gone (zeros): its count and ranges tell nothing."""
    (name,) = os.listdir(os.path.join(root, "index"))
    with open(os.path.join(root, "index", name), "r+b") as f:
        f.write(bytes(40))


def _queue_gone(root: str) -> None:
    """T's ConsumeQueue deleted: only the IndexFile's entries point at B."""
    shutil.rmtree(os.path.join(root, "consumequeue", "T"))


INDEXES = {"intact": lambda root: None, "index-header": _index_header_zeroed,
           "index-header-and-queue": lambda root: (_index_header_zeroed(root), _queue_gone(root))}


@pytest.mark.parametrize("indexes", sorted(INDEXES))
def test_a_planted_record_whose_outer_header_is_gone_never_serves_another_key(tmp_path, indexes):
    """A's record magic flipped: no chain says where A ends, so the walk searches for the next
    record that checks out, and the first is P, planted in A's body with its own position
    and checksums. A ConsumeQueue unit or IndexFile entry must point at a record the search
    takes (store/integrity/index_points.py), read from the entries, not the IndexFile's
    header: P is passed over, B (pointed at) taken. Before, verify and repair took P, and
    after repair `victim` served P's body for B's key."""
    root = str(tmp_path / "s")
    a_at, p_at, b_at = _planted_store(root, str(tmp_path / "scratch"))
    _flip(root, a_at + layout.MAGIC_POS + 3)
    INDEXES[indexes](root)
    report = verify_store(root)
    damaged = [line for line in report.lines if "damaged CommitLog bytes" in line]
    assert len(damaged) == 1 and f"bytes {a_at}..{b_at} " in damaged[0], report.lines
    apply_repair(plan_repair(root))
    assert verify_store(root).ok
    with MessageStore(root, small_config(**CFG)) as s:
        assert [bytes(m.body) for m in s.get_range("T", 0, 0, 10)] == [b"real"]
        assert [(m.commitlog_offset, bytes(m.body)) for m in s.query_key("victim", topic="T")] == \
            [(b_at, b"real")]


def test_the_scrub_passes_over_a_planted_record_whose_outer_header_is_gone(tmp_path):
    """The scrub's resync after A's lost magic takes only a record an index points at (read
    outside the put lock, at its next step): one finding, at A. Before, it took P and then
    found P's end inside A's body damaged too."""
    root = str(tmp_path / "s")
    a_at, p_at, b_at = _planted_store(root, str(tmp_path / "scratch"))
    with MessageStore(root, small_config(**CFG)) as s:  # (an open would refuse the damage)
        _flip(root, a_at + layout.MAGIC_POS + 3)
        s.scrub()
        findings = [f for f in s.scrub_status()["findings"] if "damaged record" in f]
        assert len(findings) == 1 and f"offset {a_at} " in findings[0], findings


@pytest.mark.parametrize("indexes", sorted(INDEXES))
def test_the_spark_readers_walk_passes_over_a_planted_record_whose_outer_header_is_gone(tmp_path, indexes):
    """The Python reader's walk (`checked_runs`) with the store's IndexPoints, as the source
    hands them to each task: after A's lost magic it goes on at B, never at P; without
    them (before) it took P."""
    root = str(tmp_path / "s")
    a_at, p_at, b_at = _planted_store(root, str(tmp_path / "scratch"))
    _flip(root, a_at + layout.MAGIC_POS + 3)
    INDEXES[indexes](root)
    view = store_layout(root)
    buf = map_readonly(os.path.join(root, "commitlog", "0" * 20))
    checks = Checks(view.checked_flavor, skip=True, points=IndexPoints(root, view.index_slots))
    end = b_at + struct.unpack_from(">i", buf, b_at)[0]
    starts = [int(x) for run in checked_runs(buf, 0, 0, end, checks, 1 << 10, 1 << 20)
              for x in np.asarray(run.starts)]
    assert p_at not in starts and b_at in starts
    assert [at for at, _ in checks.skipped] == [a_at]


def _no_indexes(root: str) -> None:
    """consumequeue/ and index/ deleted: no index reaches A or P, so rule (4) refuses nothing."""
    shutil.rmtree(os.path.join(root, "consumequeue"))
    shutil.rmtree(os.path.join(root, "index"))


@pytest.mark.parametrize("where", sorted(WHERE))
def test_a_walk_of_a_part_that_ends_where_the_chain_goes_on_stops_there(tmp_path, where):
    """A Spark task's byte range that ends at B (a cut after A, as a cut is placed) walks A's
    damage as the whole file's walk does: A's chain ends are the file's, and the one that
    checks out (B) is at the part's end, so the part's walk stops there and nothing inside
    A's span is taken, even with no index to refuse P. Before, the part's end clipped the
    chain ends: with A's TOTALSIZE or BODYLEN one off they no longer agreed inside the part,
    and the search from A + 1 took P."""
    from mqfs.store.integrity.salvage import resync_in

    root = str(tmp_path / "s")
    a_at, p_at, b_at = _planted_store(root, str(tmp_path / "scratch"))
    _flip(root, WHERE[where](a_at, p_at))
    _no_indexes(root)
    view = store_layout(root)
    buf = map_readonly(os.path.join(root, "commitlog", "0" * 20))
    assert resync_in(buf, 0, a_at, len(buf), view.checked_flavor) == b_at  # the whole file's walk
    assert resync_in(buf, 0, a_at, b_at, view.checked_flavor) is None
    checks = Checks(view.checked_flavor, skip=True, points=IndexPoints(root, view.index_slots))
    starts = [int(x) for run in checked_runs(buf, 0, 0, b_at, checks, 1 << 10, 1 << 20)
              for x in np.asarray(run.starts)]
    assert starts == [0] and [at for at, _ in checks.skipped] == [a_at]
