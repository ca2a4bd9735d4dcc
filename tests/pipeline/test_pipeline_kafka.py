"""The mqfs source against what a user of Spark's Kafka source expects: snapshots, offsets and
timestamps, checked reads, pushdown, split files, option checking, streams that notice data
loss and honour rate limits, and writer reruns that do not duplicate."""

from __future__ import annotations

import json
import os
import random
import shutil

import pytest

pytest.importorskip("pyspark")

from pyspark.errors import AnalysisException  # noqa: E402
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In  # noqa: E402

from mqfs.pipeline import cli  # noqa: E402
from mqfs.pipeline.jobs import audit  # noqa: E402
from mqfs.pipeline.options import read_options  # noqa: E402
from mqfs.pipeline.source import MqfsDataSource, PushdownReader  # noqa: E402
from mqfs.pipeline.units import UnitRange  # noqa: E402
from mqfs.store import MessageStore  # noqa: E402
from mqfs.store.offline.views import commitlog_files, store_layout  # noqa: E402
from tests.fusefs.helpers import mounted, needs_fuse  # noqa: E402
from tests.pipeline.helpers import (  # noqa: E402
    append,
    build_store,
    expected_rows,
    flip_body_byte,
    make_messages,
    read_rows,
    small_store_config,
)
from tests.store.helpers import flip  # noqa: E402
from tests.waits import eventually  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("kafka") / "store")
    build_store(root, 2500, seed=11)
    return root


def test_a_dataframe_is_a_snapshot(spark, tmp_path):
    root = str(tmp_path / "live")
    build_store(root, 1000, seed=2)
    df = spark.read.format("mqfs").load(root)
    orders = df.where("topic = 'Orders'")
    first, first_orders = read_rows(df), orders.count()
    append(root, 2000, seed=5, start=1000)  # grows the last file and adds files
    assert df.count() == 1000
    assert orders.count() == first_orders
    assert read_rows(df) == first
    assert spark.read.format("mqfs").load(root).count() == 3000  # a new DataFrame sees them


def test_starting_and_ending_offsets_per_queue(spark, store):
    want = expected_rows(store)
    starting = {"Orders": {"0": 10, "1": -2}, "Payments": {"2": 40}}
    ending = {"Orders": {"0": 60, "1": -1}, "Payments": {"2": 45}}
    df = (spark.read.format("mqfs").option("subscribe", "Orders,Payments")
          .option("startingOffsets", json.dumps(starting)).option("endingOffsets", json.dumps(ending))
          .load(store))
    got = read_rows(df)

    def expected(r: dict) -> bool:
        q = (r["topic"], r["queue_id"])
        lo = {("Orders", 0): 10, ("Payments", 2): 40}.get(q, 0)
        hi = {("Orders", 0): 60, ("Payments", 2): 45}.get(q, 1 << 60)
        return r["topic"] in ("Orders", "Payments") and lo <= r["queue_offset"] < hi

    assert got == {k: r for k, r in want.items() if expected(r)}
    assert {(r["topic"], r["queue_id"], r["queue_offset"]) for r in got.values()} >= {
        ("Orders", 0, 10), ("Payments", 2, 44)}


def test_starting_and_ending_timestamps(spark, store):
    want = expected_rows(store)
    times = sorted(r["store_timestamp"] for r in want.values())
    t0, t1 = times[len(times) // 3], times[2 * len(times) // 3]
    df = (spark.read.format("mqfs").option("startingTimestamp", str(t0))
          .option("endingTimestamp", str(t1)).load(store))
    got = read_rows(df)
    assert 0 < len(got) < len(want)
    assert got == {k: r for k, r in want.items() if t0 <= r["store_timestamp"] < t1}


def test_subscribe_pattern_and_assign_select_queues(spark, store):
    want = expected_rows(store)
    by_pattern = read_rows(spark.read.format("mqfs").option("subscribePattern", "Or.*|Audit_.*").load(store))
    assert by_pattern == {k: r for k, r in want.items() if r["topic"] in ("Orders", "Audit_Log")}
    assigned = read_rows(spark.read.format("mqfs").option("assign", '{"Payments": [1, 2]}').load(store))
    assert assigned == {k: r for k, r in want.items() if r["topic"] == "Payments" and r["queue_id"] in (1, 2)}


@pytest.mark.parametrize("options, message", [
    ({"startingOffset": "earliest"}, "unknown mqfs option 'startingoffset'"),
    ({"maxOffsetsPerTrigger": "10"}, "it applies to a streaming read"),
    ({"startingOffsets": "bogus"}, "startingOffsets='bogus': give earliest or JSON"),
    ({"startingOffsets": "latest"}, "startingOffsets='latest': give earliest or JSON"),
    ({"startingOffsets": '{"Orders": {"0": -1}}'}, "offset -1 is not allowed here (codes allowed: -2 earliest)"),
    ({"endingOffsets": '{"Orders": {"0": -2}}'}, "offset -2 is not allowed here (codes allowed: -1 latest)"),
    ({"startingOffsets": '{"Nope": {"0": 1}}'}, "names Nope/0, which is not a selected queue"),
    ({"subscribe": "Orders", "topic": "Payments"}, "give one of"),
    ({"minPartitions": "0"}, "minPartitions='0' must be an integer >= 1"),
    ({"damagedRecords": "ignore"}, "damagedRecords='ignore' must be one of fail, skip"),
])
def test_bad_options_are_refused_with_one_line(spark, store, options, message):
    with pytest.raises(AnalysisException) as err:
        spark.read.format("mqfs").options(**options).load(store).count()
    assert message in str(err.value)
    assert message in cli.one_line(err.value)
    assert "\n" not in cli.one_line(err.value)


def test_cli_errors_are_one_line(store, tmp_path, capsys):
    assert cli.main(["export", store, str(tmp_path / "x"), "--start", "yesterday"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("mqfs pipeline export: startTime='yesterday' is not epoch")
    assert "Traceback" not in "\n".join(err)


def test_a_damaged_body_fails_the_read_or_is_skipped(spark, store, tmp_path):
    bad = str(tmp_path / "bad")
    shutil.copytree(store, bad)
    path, pos, commitlog_offset = flip_body_byte(bad)
    with pytest.raises(Exception) as err:  # a Python worker's or the JVM reader's
        spark.read.format("mqfs").load(bad).collect()  # a count() reads no body: header-only
    line = cli.one_line(err.value)
    assert f"damaged record at CommitLog offset {commitlog_offset} ({path} at byte {pos}): checksum" in line
    skipped = spark.read.format("mqfs").option("damagedRecords", "skip").load(bad)
    assert len(skipped.select("body").collect()) == 2499
    assert skipped.where(f"commitlog_offset = {commitlog_offset}").select("body").collect() == []
    r = audit.run(spark, bad)
    assert r["problems"] == 1
    assert any(f"CommitLog offset {commitlog_offset}" in p and os.path.basename(path) in p for p in r["shown"])
    assert audit.run(spark, store)["problems"] == 0


def test_a_flipped_header_field_fails_the_read(spark, store, tmp_path):
    """The whole-record checksum covers the header: a queue offset with one bit flipped is
    never served as a row."""
    bad = str(tmp_path / "qoff")
    shutil.copytree(store, bad)
    start, path = commitlog_files(bad)[0]
    commitlog_offset = sorted(o for o in expected_rows(bad) if o < start + (1 << 19))[-1]
    flip(path, commitlog_offset - start + 27, 0x01)  # the low byte of QUEUEOFFSET
    with pytest.raises(Exception) as err:  # read with its body: a header-only read cannot tell
        spark.read.format("mqfs").load(bad).collect()
    assert f"damaged record at CommitLog offset {commitlog_offset}" in cli.one_line(err.value)
    got = read_rows(spark.read.format("mqfs").option("damagedRecords", "skip").load(bad))
    want = expected_rows(store)
    del want[commitlog_offset]
    assert got == want


def test_a_broken_header_fails_the_read_or_is_stepped_over(spark, store, tmp_path):
    bad = str(tmp_path / "hdr")
    shutil.copytree(store, bad)
    start, path = commitlog_files(bad)[0]
    commitlog_offset = sorted(o for o in expected_rows(bad) if o < start + (1 << 19))[-1]  # mid first file
    with open(path, "r+b") as f:
        f.seek(commitlog_offset - start + 4)
        f.write(b"\0\0\0\0")  # MAGICCODE
    with pytest.raises(Exception) as err:  # a Python worker's or the JVM reader's
        spark.read.format("mqfs").load(bad).selectExpr("sum(length(body))").collect()  # reads records
    at = f"CommitLog offset {commitlog_offset} ({path} at byte {commitlog_offset - start})"
    assert f"{at}: broken record header" in cli.one_line(err.value)
    got = read_rows(spark.read.format("mqfs").option("damagedRecords", "skip").load(bad))
    want = expected_rows(store)
    del want[commitlog_offset]
    assert got == want


def test_audit_names_a_missing_consume_queue_file(spark, tmp_path):
    root = str(tmp_path / "cq")
    build_store(root, 1500, seed=4, consume_queue_units=100)
    qdir = os.path.join(root, "consumequeue", "Orders", "0")
    names = sorted(os.listdir(qdir))
    assert len(names) >= 3
    os.unlink(os.path.join(qdir, names[1]))
    r = audit.run(spark, root)
    assert r["problems"] >= 1
    assert any(f"file {names[1]} is missing (queue offsets 100..199)" in p for p in r["shown"])
    assert any("Orders/0" in p and "100..199" in p and "no units" in p for p in r["shown"])


def test_filters_are_pushed_down_and_do_less_work(spark, store):
    want = expected_rows(store)
    mid = commitlog_files(store)[-1][0] + 1  # inside the last file: the others are not read
    t = sorted(r["store_timestamp"] for r in want.values())[len(want) // 4]
    df = (spark.read.format("mqfs").option("pushFilters", "true").load(store)
          .where(f"topic in ('Orders', 'Payments') and queue_id = 1 and queue_offset >= 20 "
                 f"and commitlog_offset >= {mid} and store_timestamp >= timestamp_millis({t})"))
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "Filter" not in plan.split("BatchScan")[0]  # Spark has nothing left to evaluate
    got = read_rows(df)
    assert got == {k: r for k, r in want.items() if r["topic"] in ("Orders", "Payments")
                   and r["queue_id"] == 1 and r["queue_offset"] >= 20 and k >= mid
                   and r["store_timestamp"] >= t}
    reader = PushdownReader(store_layout(store), read_options({"pushFilters": "true"}, False), None)
    assert not list(reader.pushFilters([In(("topic",), ("Orders", "Payments")), EqualTo(("queue_id",), 1),
                                        GreaterThanOrEqual(("commitlog_offset",), mid)]))
    parts = reader.partitions()  # the ConsumeQueues say where: only those records are read
    assert all(isinstance(p, UnitRange) for p in parts)
    assert sum(p.end - p.start for p in parts) == sum(
        1 for k, r in want.items() if r["topic"] in ("Orders", "Payments") and r["queue_id"] == 1 and k >= mid)
    unpushed = spark.read.format("mqfs").option("pushFilters", "true").load(store).where("length(body) > 100")
    assert "Filter" in unpushed._jdf.queryExecution().executedPlan().toString()


def test_a_dataframe_reused_with_and_without_filters_keeps_every_row(spark, store):
    """Without pushFilters, Spark's per-relation plan cache cannot hand one query's filtered
    read to another (the Spark 4.3.0 behaviour that makes pushdown opt-in)."""
    df = spark.read.format("mqfs").load(store)
    orders = df.where("topic = 'Orders'").count()
    assert 0 < orders < df.count() == 2500
    assert df.where("topic = 'Orders'").count() == orders


def test_columns_option_builds_only_those_columns(spark, store):
    df = spark.read.format("mqfs").option("columns", "topic,queue_offset").load(store)
    assert df.columns == ["topic", "queue_offset"]
    want = sorted((r["topic"], r["queue_offset"]) for r in expected_rows(store).values())
    assert sorted(tuple(r) for r in df.collect()) == want


def test_min_partitions_splits_files_at_record_starts(spark, store):
    files = commitlog_files(store)
    df = spark.read.format("mqfs").option("minPartitions", "10").load(store)
    assert df.rdd.getNumPartitions() >= 10 > len(files)
    assert read_rows(df) == expected_rows(store)


def stream_to(spark, root: str, out: str, ckpt: str, **options):
    options.setdefault("startingOffsets", "earliest")  # a stream's default, as Kafka's, is latest
    q = (spark.readStream.format("mqfs").options(**options).load(root)
         .writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
         .trigger(availableNow=True).start())
    try:
        q.awaitTermination(180)
    except Exception:  # a failed query raises here; q.exception() holds the cause
        pass
    return q


def test_available_now_honours_max_offsets_per_trigger(spark, store, tmp_path):
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    q = stream_to(spark, store, out, ckpt, subscribe="Orders", maxOffsetsPerTrigger="150")
    assert q.exception() is None
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    orders = sum(1 for r in expected_rows(store).values() if r["topic"] == "Orders")
    assert sum(sizes) == orders and max(sizes) <= 150 and len(sizes) >= orders // 150
    assert spark.read.parquet(out).select("topic").distinct().collect()[0].topic == "Orders"


@pytest.mark.allow_logs(r"exception while executing the Python Proxy")
def test_available_now_finishes_after_a_crash(spark, store, tmp_path):
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    seen = []

    def sink(batch, batch_id: int) -> None:
        if crash and batch_id == 2:
            raise RuntimeError("sink died")
        batch.write.mode("append").parquet(out)
        seen.append(batch_id)

    def run():
        q = (spark.readStream.format("mqfs").options(startingOffsets="earliest", maxOffsetsPerTrigger="500").load(store)
             .writeStream.foreachBatch(sink).option("checkpointLocation", ckpt)
             .trigger(availableNow=True).start())
        try:
            q.awaitTermination(180)
        except Exception:
            pass
        return q

    crash = True
    assert run().exception() is not None and seen == [0, 1]
    crash = False
    assert run().exception() is None
    ids = [r.msg_id for r in spark.read.parquet(out).select("msg_id").collect()]
    assert len(ids) == len(set(ids)) == 2500


@pytest.mark.allow_logs(r"exception while executing the Python Proxy",
                        r"^retention: deleted CommitLog file")
def test_fail_on_data_loss(spark, tmp_path):
    root = str(tmp_path / "ret")
    cfg = dict(consume_queue_units=50, retention_bytes=1)
    build_store(root, 300, seed=8, **cfg)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    assert stream_to(spark, root, out, ckpt).exception() is None  # delivers 300
    with MessageStore(root, small_store_config(**cfg)) as s:
        s.put_batch(make_messages(random.Random(9), 4000, start=300))
        assert s.retention.run_once() >= 1  # retention: undelivered messages go
        left = sum(s.max_offset(t, q) - s.min_offset(t, q) for t, n in s.topics().items() for q in range(n))
    q = stream_to(spark, root, out, ckpt)
    assert q.exception() is not None
    assert "were deleted before this stream read them" in cli.one_line(q.exception())
    q = stream_to(spark, root, out, ckpt, failOnDataLoss="false")
    assert q.exception() is None
    assert spark.read.parquet(out).count() == 300 + left


def test_writer_rerun_with_a_job_id_does_not_duplicate(spark, tmp_path):
    root = str(tmp_path / "w")
    build_store(root, 5)
    df = spark.createDataFrame([("Rerun", f"b{i}") for i in range(200)], "topic string, body string").repartition(3)
    for _ in range(2):
        df.write.format("mqfs").mode("append").option("jobId", "nightly-2026-11-22").save(root)
    with MessageStore(root) as s:
        bodies = sorted(bytes(m.body).decode() for m in s.get_range("Rerun", 0, 0, 1000))
        assert bodies == sorted(f"b{i}" for i in range(200))
    with pytest.raises(Exception, match="unknown mqfs option 'jobid_'"):
        df.write.format("mqfs").mode("append").option("jobId_", "x").save(root)


@needs_fuse
def test_writer_through_the_mount_creates_a_new_topic(spark, tmp_path):
    root, mnt = str(tmp_path / "m"), str(tmp_path / "mnt")
    build_store(root, 5)
    df = spark.createDataFrame([("Fresh", i % 2, f"m{i}") for i in range(40)],
                               "topic string, queue_id int, body string").coalesce(1)
    with mounted(root, mnt):
        assert not os.path.exists(os.path.join(mnt, "topics", "Fresh"))
        for _ in range(2):  # the rerun finds every row under /keys and writes nothing
            df.write.format("mqfs").mode("append").option("mount", mnt).option("jobId", "j1").save(root)
    with MessageStore(root) as s:
        got = [bytes(m.body).decode() for q in (0, 1) for m in s.get_range("Fresh", q, 0, 100)]
    assert sorted(got) == sorted(f"m{i}" for i in range(40))


def test_a_stream_starting_past_the_end_starts_at_the_end(spark, tmp_path):
    root, out, ckpt = str(tmp_path / "past"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    build_store(root, 300, seed=12)
    with MessageStore(root) as s:
        end = s.max_offset("Orders", 0)
    q = stream_to(spark, root, out, ckpt, subscribe="Orders", startingOffsets='{"Orders": {"0": 1000000}}')
    assert q.exception() is None
    append(root, 300, seed=13, start=300)
    q = stream_to(spark, root, out, ckpt, subscribe="Orders", startingOffsets='{"Orders": {"0": 1000000}}')
    assert q.exception() is None
    got = {(r.queue_id, r.queue_offset) for r in spark.read.parquet(out).collect()}
    want = {(r["queue_id"], r["queue_offset"]) for r in expected_rows(root).values()
            if r["topic"] == "Orders" and (r["queue_id"] != 0 or r["queue_offset"] >= end)}
    assert got == want and any(qid == 0 for qid, _ in got)


def _trigger_times(q) -> list[tuple[float, int]]:
    """(trigger start in seconds since the epoch, rows) of every batch that read rows."""
    from datetime import datetime
    return [(datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp(),
             p["numInputRows"]) for p in q.recentProgress if p["numInputRows"]]


def test_min_offsets_per_trigger_holds_a_small_backlog_for_max_trigger_delay(tmp_path):
    """The stream reader alone, as Spark calls it each trigger: a backlog under
    minOffsetsPerTrigger is held back until maxTriggerDelay has passed since the last batch."""
    import time
    root = str(tmp_path / "store")
    build_store(root, 300, seed=5)
    reader = MqfsDataSource({"path": root, "startingOffsets": "earliest", "minOffsetsPerTrigger": "100",
                             "maxTriggerDelay": "2s"}).streamReader(None)
    limit = reader.getDefaultReadLimit()
    start = reader.initialOffset()
    first = reader.latestOffset(start, limit)
    batch_at = time.monotonic()
    assert first != start  # 300 waiting >= 100: no wait
    append(root, 20, seed=6, start=300)
    second = eventually(lambda: (got := reader.latestOffset(first, limit)) != first and got,
                        "the held rows", interval=0.05)  # polls as Spark's trigger does
    assert time.monotonic() - batch_at >= 2.0
    moved = sum(o - first[t][q] for t, qs in second.items() for q, o in qs.items())
    assert moved == 20


def test_a_stream_with_min_offsets_per_trigger_runs_the_held_batch_after_the_delay(spark, tmp_path):
    import time
    root = str(tmp_path / "store")
    build_store(root, 300, seed=5)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    started = time.time()  # the reader counts its delay from when the query made it
    q = (spark.readStream.format("mqfs")
         .options(startingOffsets="latest", minOffsetsPerTrigger="100", maxTriggerDelay="12s")
         .load(root).writeStream.format("parquet").option("path", out)
         .option("checkpointLocation", ckpt).trigger(processingTime="100 milliseconds").start())
    try:
        q.processAllAvailable()
        append(root, 20, seed=6, start=300)  # 20 < 100: held back, at most maxTriggerDelay
        eventually(lambda: _trigger_times(q), "the held batch", interval=0.2,
                   alive=lambda: q.exception() is None and q.isActive)
    finally:
        q.stop()
    [(at, rows)] = _trigger_times(q)
    assert rows == 20 and at - started >= 11.5
    assert spark.read.parquet(out).count() == 20


def test_available_now_ignores_min_offsets_per_trigger(spark, store, tmp_path):
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    q = stream_to(spark, store, out, ckpt, minOffsetsPerTrigger="1000000", maxTriggerDelay="1h")
    assert q.exception() is None
    assert spark.read.parquet(out).count() == len(expected_rows(store))
