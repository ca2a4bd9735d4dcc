"""Streams read in the JVM and pruned (pipeline/RecordStream.java, StreamPruning.java): the
same stream read by each reader (`reader=python` keeps the Python workers, the reference)
gives the same rows, column for column; a query's stream scan builds only the columns the
query uses; and offsets stay the Python reader's, so a checkpoint written by one reader is
resumed by the other with no row lost or repeated."""

from __future__ import annotations

import glob
import json
import os
import random

import pytest

pytest.importorskip("pyspark")

from mqfs.store import MessageStore  # noqa: E402
from tests.pipeline.helpers import build_store, expected_rows, flip_body_byte, make_messages  # noqa: E402
from tests.store import broker_layouts as layouts  # noqa: E402

pytestmark = pytest.mark.spark

HEADER = ["topic", "queue_id", "queue_offset", "commitlog_offset", "store_timestamp", "msg_id"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Two stores over several CommitLog files each."""
    base = tmp_path_factory.mktemp("streams")
    a, b = str(base / "a"), str(base / "b")
    build_store(a, 2500)
    build_store(b, 900, seed=7)
    return a, b


def stream(spark, path, checkpoint: str, options: dict, select=None, where=None, sink="memory", out=None):
    """Runs a stream of `path` to the end (Trigger.AvailableNow): its rows (memory sink) or
    None, and the last micro-batch's executed plan."""
    df = spark.readStream.format("mqfs").options(**{"startingOffsets": "earliest", **options}).load(path)
    if where:
        df = df.where(where)
    if select:
        df = df.select(*select)
    name = "s" + os.path.basename(checkpoint).replace("-", "_")
    w = df.writeStream.format(sink).option("checkpointLocation", checkpoint).trigger(availableNow=True)
    q = w.queryName(name).start() if sink == "memory" else w.option("path", out).start()
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    execution = q._jsq.streamingQuery().lastExecution()
    plan = execution.executedPlan().toString() if execution is not None else ""
    rows = sorted(spark.table(name).collect(), key=repr) if sink == "memory" else None
    return rows, plan


def same_stream(spark, tmp_path, path, options: dict, select=None, where=None) -> tuple[int, str]:
    """The stream's rows by each reader, compared; (row count, the JVM stream's plan)."""
    got = {}
    for reader in ("jvm", "python"):
        got[reader] = stream(spark, path, str(tmp_path / f"{reader}{len(os.listdir(tmp_path))}"),
                             {**options, "reader": reader}, select, where)
    (jvm, jvm_plan), (python, python_plan) = got["jvm"], got["python"]
    assert "MicroBatchScan" in jvm_plan and "(JVM)" in jvm_plan and "(Python)" in python_plan
    assert len(jvm) == len(python)
    for a, b in zip(jvm, python):
        assert a == b
    return len(jvm), jvm_plan


def scanned(plan: str) -> list[str]:
    """The columns the plan's stream scan reads."""
    line = next(x for x in plan.splitlines() if "MicroBatchScan[" in x)
    return [c.split("#")[0] for c in line.split("MicroBatchScan[")[1].split("]")[0].split(", ")]


@pytest.mark.parametrize("options, select, where", [
    ({}, None, None),
    ({}, HEADER, "queue_id = 1"),
    ({}, ["body", "keys", "tags", "properties"], None),
    ({"topic": "Orders", "maxOffsetsPerTrigger": "700"}, ["queue_offset", "born_host", "store_host"], None),
    ({"shape": "kafka", "includeHeaders": "true"}, None, None),
    ({"shape": "kafka"}, ["key", "partition", "offset"], "partition < 2"),
])
def test_a_stream_reads_the_same_both_ways(spark, stores, tmp_path, options, select, where):
    count, plan = same_stream(spark, tmp_path, stores[0], options, select, where)
    assert count > 500
    if select:  # the scan reads what the query uses, no more
        assert set(scanned(plan)) == set(select)  # (the filters' columns are among them)


def test_a_stream_of_several_stores_reads_the_same_both_ways(spark, stores, tmp_path):
    pattern = os.path.join(os.path.dirname(stores[0]), "*")
    count, plan = same_stream(spark, tmp_path, pattern, {})
    assert count == 3400
    count, plan = same_stream(spark, tmp_path, pattern, {}, ["store", "queue_offset"], "topic = 'Orders'")
    assert 0 < count < 3400 and set(scanned(plan)) == {"store", "queue_offset", "topic"}


def test_a_stream_of_lmq_queues_reads_the_same_both_ways(spark, tmp_path_factory, tmp_path):
    """A row per queue a record is served in, once: each queue's partition gives its own row
    (a record's LMQ queues' units point at it too; before, every one of them gave every row)."""
    root = str(tmp_path_factory.mktemp("lmq") / "s")
    workload = layouts.lmq_store(root)
    count, _ = same_stream(spark, tmp_path, root, {})
    assert count == len(workload.served)
    batch = spark.read.format("mqfs").load(root).select("topic", "queue_id", "queue_offset", "commitlog_offset")
    got = stream(spark, root, str(tmp_path / "rows"), {}, ["topic", "queue_id", "queue_offset", "commitlog_offset"])[0]
    assert got == sorted(batch.collect(), key=repr)


def test_a_damaged_record_fails_a_stream_both_ways_and_is_skipped_the_same_way(spark, tmp_path):
    root = str(tmp_path / "damaged")
    build_store(root, 800, seed=5)
    flip_body_byte(root)
    for reader in ("jvm", "python"):
        with pytest.raises(Exception, match="checksum mismatch"):
            stream(spark, root, str(tmp_path / f"fail-{reader}"), {"reader": reader})
    count, _ = same_stream(spark, tmp_path, root, {"damagedRecords": "skip"}, ["queue_offset", "body"])
    assert count == 799


def test_a_count_of_a_stream_reads_one_int_column(spark, stores, tmp_path):
    df = spark.readStream.format("mqfs").option("startingOffsets", "earliest").load(stores[1]).groupBy().count()
    q = (df.writeStream.format("memory").outputMode("complete").queryName("counted")
         .option("checkpointLocation", str(tmp_path / "c")).trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None
    assert spark.table("counted").collect()[0][0] == 900
    assert scanned(q._jsq.streamingQuery().lastExecution().executedPlan().toString()) == ["queue_id"]
    progress = q.recentProgress
    assert sum(p["sources"][0]["numInputRows"] for p in progress) == 900  # the pruned scan counts as the source


@pytest.mark.parametrize("first, then", [("python", "jvm"), ("jvm", "python")])
def test_a_checkpoint_of_one_reader_is_resumed_by_the_other_without_loss_or_repeats(spark, tmp_path, first, then):
    root, out, ckpt = str(tmp_path / "s"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    build_store(root, 600, seed=3)
    options = {"maxOffsetsPerTrigger": "250", "topic": "Orders,Payments"}
    stream(spark, root, ckpt, {**options, "reader": first}, sink="parquet", out=out)
    before = spark.read.parquet(out).count()
    with MessageStore(root) as s:
        s.put_batch(make_messages(random.Random(4), 500, start=600))
    stream(spark, root, ckpt, {**options, "reader": then}, sink="parquet", out=out)
    got = spark.read.parquet(out).select("commitlog_offset").collect()
    want = {o for o, r in expected_rows(root).items() if r["topic"] != "Audit_Log"}
    assert 0 < before < len(got)
    assert len(got) == len(want) and {r.commitlog_offset for r in got} == want
    offsets = sorted(glob.glob(os.path.join(ckpt, "offsets", "[0-9]*")), key=lambda p: int(os.path.basename(p)))
    last = json.loads(open(offsets[-1]).read().splitlines()[-1])  # the offsets the Python reader wrote
    assert {t for t in last} == {"Orders", "Payments"}
