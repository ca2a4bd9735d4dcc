"""Counts and queue-place columns answered from the ConsumeQueue units (pipeline/unit_rows.py):
where the units are known good, `count()` and `select topic, queue_id, queue_offset` give the
rows a walk of the records gives, in both readers, reading no record; where they are not
(LMQ, a repaired store, units that overlap) the records are walked as before; stretches of the
CommitLog no unit covers (prepared transactions, undispatched records) are walked; and what a
count from units does not see (damage inside a record) is what the README says."""

from __future__ import annotations

import os
import re
import struct

import pytest

pytest.importorskip("pyspark")

from mqfs.pipeline.options import read_options  # noqa: E402
from mqfs.pipeline.source import MqfsReader  # noqa: E402
from mqfs.pipeline.unit_rows import UnitRows  # noqa: E402
from mqfs.store.offline.views import UNIT_SIZE, QueueReader, commitlog_files, store_layout  # noqa: E402
from tests.pipeline.helpers import build_store  # noqa: E402
from tests.pipeline.test_pipeline_jvm import both  # noqa: E402
from tests.store import broker_layouts as layouts  # noqa: E402
from tests.store.helpers import flip  # noqa: E402
from tests.store.test_broker_stores import _broker_workload, broker_store  # noqa: E402

PLACES = ["topic", "queue_id", "queue_offset"]
QUERIES = [  # (options, where, columns): columns None is count()
    ({}, None, None),
    ({}, None, PLACES),
    ({}, "topic in ('Orders', 'Audit_Log') and queue_offset >= 100", ["queue_offset"]),
    ({"subscribe": "Orders,Payments", "queue": "0,2"}, None, ["topic", "queue_id"]),
    ({"shape": "kafka"}, "offset < 400", ["topic", "partition", "offset", "timestampType"]),
]


def from_units(root: str, columns: str = "queue_id", **options: str) -> bool:
    """Whether the planner answers a read of these columns from the units."""
    opts = read_options({"path": root, "columns": columns, **options}, streaming=False)
    return any(isinstance(p, UnitRows) for p in MqfsReader(store_layout(root), opts, None).partitions())


def walked_and_counted(spark, root: str, options: dict, where: str | None, columns: list[str] | None):
    """The rows (or count) each reader gives, and those of a read of every record
    (checksums=always: no count from units, every record checked) by the Python reader."""
    if columns is None:
        counts = [_df(spark, root, {**options, "reader": r}, where).count() for r in ("jvm", "python")]
        walked = _df(spark, root, {**options, "reader": "python", "checksums": "always"}, where).count()
        return counts, walked
    jvm, python = both(spark, root, options, columns, where)
    walked = _df(spark, root, {**options, "reader": "python", "checksums": "always"}, where).select(*columns)
    return [jvm, python], sorted(walked.collect(), key=repr)


def _df(spark, root: str, options: dict, where: str | None):
    df = spark.read.format("mqfs").options(**options).load(root)
    return df.where(where) if where else df


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("units") / "s")
    build_store(root, 3000)
    return root


@pytest.mark.parametrize("options, where, columns", QUERIES)
def test_a_count_from_units_gives_the_rows_of_the_walk(spark, store, options, where, columns):
    assert from_units(store)
    answers, walked = walked_and_counted(spark, store, options, where, columns)
    assert answers[0] == answers[1] == walked
    assert walked not in (0, [])


def test_reads_that_need_a_record_are_not_answered_from_units(store):
    assert from_units(store, "topic,queue_id,queue_offset")
    assert not from_units(store, "topic,queue_offset,commitlog_offset")  # in the unit, not its place
    assert not from_units(store, "queue_id", checksums="always")
    assert not from_units(store, "queue_id", damagedRecords="skip")  # skipping is decided per record
    assert not from_units(store, "queue_id", records="all")
    assert not from_units(store, "queue_id", startTime="0")


def test_min_partitions_splits_the_unit_rows(store):
    opts = read_options({"path": store, "columns": "queue_id", "minPartitions": "5"}, streaming=False)
    parts = MqfsReader(store_layout(store), opts, None).partitions()
    rows = [r for p in parts if isinstance(p, UnitRows) for r in p.ranges]
    assert len([p for p in parts if isinstance(p, UnitRows)]) == 5
    assert sum(hi - lo for _, _, lo, hi in rows) == 3000
    assert len({(t, q, o) for t, q, lo, hi in rows for o in range(lo, hi)}) == 3000  # each row once


def test_the_unit_rows_take_the_cores_the_walk_leaves(store):
    """Planned for a session's cores (the JVM scan's slots, no minPartitions): the unit rows
    and the walk of the stretches without units are as many tasks as cores, all run at once."""
    opts = read_options({"path": store, "columns": "queue_id"}, streaming=False)
    reader = MqfsReader(store_layout(store), opts, None)
    reader.slots = 3
    parts = reader.partitions()
    units = [p for p in parts if isinstance(p, UnitRows)]
    walked = len(parts) - len(units)
    assert walked and len(units) == 3 - walked  # this store's files end in blanks: walked
    assert sum(hi - lo for p in units for _, _, lo, hi in p.ranges) == 3000


def _units(root: str, topic: str, queue_id: int) -> str:
    d = os.path.join(root, "consumequeue", topic, str(queue_id))
    return os.path.join(d, sorted(os.listdir(d))[0])


def _set_unit(path: str, index: int, offset: int, size: int) -> None:
    with open(path, "r+b") as f:
        f.seek(index * UNIT_SIZE)
        f.write(struct.pack(">qi", offset, size))


def test_records_no_unit_covers_are_walked(spark, tmp_path):
    """A broker's transactions (prepared records have no unit), a topic too long for a queue
    directory, and records whose units a live store has not written yet (a queue's last
    units zeroed): the stretches no unit covers are walked, so their rows are there."""
    root = str(tmp_path / "broker")
    broker_store(root, _broker_workload)
    assert from_units(root)
    (counts, walked) = walked_and_counted(spark, root, {}, None, None)
    assert counts == [walked, walked] and walked > 0
    lagging = str(tmp_path / "lagging")
    build_store(lagging, 600)
    path = _units(lagging, "Orders", 1)
    n = QueueReader(lagging, "Orders", 1, 1000).bounds()[1]
    for i in (n - 2, n - 1):
        _set_unit(path, i, 0, 0)  # not written yet: the unit ends its file's written units
    assert from_units(lagging)
    for options, where, columns in QUERIES[:2]:
        answers, walked = walked_and_counted(spark, lagging, options, where, columns)
        assert answers[0] == answers[1] == walked
    assert walked_and_counted(spark, lagging, {}, None, None)[0] == [600, 600]


def test_units_not_known_good_leave_the_records_to_the_walk(spark, tmp_path, store):
    lmq = str(tmp_path / "lmq")
    layouts.lmq_store(lmq)
    assert not from_units(lmq)  # an LMQ unit names a record another queue's unit names too
    repaired = str(tmp_path / "repaired")
    build_store(repaired, 300)
    os.mkdir(os.path.join(repaired, "quarantine"))  # a repair's filler records keep units
    assert not from_units(repaired)
    overlapping = str(tmp_path / "overlapping")
    build_store(overlapping, 300)
    _, units = QueueReader(overlapping, "Orders", 0, 1000).read(0, 2)
    _set_unit(_units(overlapping, "Orders", 0), 0, int(units["offset"][0]), int(units["size"][0]) + 1)
    assert not from_units(overlapping)
    for root in (lmq, overlapping):
        counts, walked = walked_and_counted(spark, root, {}, None, None)
        assert counts == [walked, walked] and walked > 0


def test_a_count_from_units_does_not_see_damage_inside_a_record(spark, tmp_path):
    """README, "Counts from the ConsumeQueues": the record's magic flipped (a header-only walk
    fails on it) is still counted from its unit; a read that checks records fails, and
    damagedRecords=skip walks the records and leaves it out."""
    root = str(tmp_path / "s")
    build_store(root, 400)
    _, units = QueueReader(root, "Payments", 1, 1000).read(5, 6)
    offset = int(units["offset"][0])
    start, path = [(s, p) for s, p in commitlog_files(root) if s <= offset][-1]
    flip(path, offset - start + 4, 0x01)
    for reader in ("jvm", "python"):
        df = spark.read.format("mqfs").option("reader", reader).load(root)
        assert df.count() == 400
        with pytest.raises(Exception) as err:
            spark.read.format("mqfs").options(reader=reader, checksums="always").load(root).count()
        assert re.search(rf"damaged record at CommitLog offset {offset} ", str(err.value))
        assert spark.read.format("mqfs").options(reader=reader, damagedRecords="skip").load(root).count() == 399
