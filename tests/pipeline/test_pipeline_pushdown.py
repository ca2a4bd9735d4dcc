"""Filter pushdown is on by default and every query of a DataFrame reads the rows of its own
filters: Spark 4.3 keeps the read planned with pushed filters on the relation and hands it to
later scans of it (pipeline/scoped.py); these queries got another query's rows before."""

from __future__ import annotations

import json
import os
import random
from datetime import UTC, datetime

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, LessThan  # noqa: E402
from pyspark.sql.types import BinaryType, StructField, StructType, TimestampType  # noqa: E402

from mqfs.pipeline.carried import FILTERS  # noqa: E402
from mqfs.pipeline.options import read_options  # noqa: E402
from mqfs.pipeline.scoped import MARKER, scoped_scans_jar  # noqa: E402
from mqfs.pipeline.source import MqfsDataSource, PushdownReader, RangeGroup, RangePartition  # noqa: E402
from mqfs.pipeline.units import UnitRange  # noqa: E402
from mqfs.store import Message, MessageStore  # noqa: E402
from mqfs.store.offline.views import commitlog_files, store_layout  # noqa: E402
from tests.pipeline.helpers import build_store, expected_rows, make_messages, read_rows, small_store_config  # noqa: E402
from tests.store.helpers import stamp_as_broker  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("pushdown") / "store")
    build_store(root, 2500, seed=11)
    return root


@pytest.fixture(scope="module")
def counts(store) -> dict[str, int]:
    rows = expected_rows(store).values()
    return {t: sum(1 for r in rows if r["topic"] == t) for t in ("Orders", "Payments")} | {"all": len(rows)}


def pushed(df) -> bool:
    """Spark handed the filter to mqfs: no Filter is left above the scan."""
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "BatchScan mqfs" in plan
    return "Filter" not in plan.split("BatchScan")[0]


def test_filters_are_pushed_by_default_and_the_option_turns_it_off(spark, store):
    assert scoped_scans_jar() is not None  # the session was started with it (pipeline.spark)
    df = spark.read.format("mqfs").load(store)
    assert pushed(df.where("topic = 'Orders'"))
    off = spark.read.format("mqfs").option("pushFilters", "false").load(store)
    assert not pushed(off.where("topic = 'Orders'"))
    one = df.where("topic = 'Orders' and queue_id = 1 and queue_offset >= 20")  # through its units
    assert pushed(one) and one.rdd.getNumPartitions() == 1
    assert df.rdd.getNumPartitions() == 1  # a small store is one task either way (TASK_BYTES)
    assert one.count() == sum(1 for r in expected_rows(store).values()
                              if r["topic"] == "Orders" and r["queue_id"] == 1 and r["queue_offset"] >= 20)


def test_a_query_without_filters_after_a_filtered_one_reads_every_row(spark, store, counts):
    df = spark.read.format("mqfs").load(store)
    assert pushed(df.where("topic = 'Orders'"))
    assert df.where("topic = 'Orders'").count() == counts["Orders"]
    assert df.count() == counts["all"]  # Spark's own plan cache gave Orders' rows here
    assert df.where("length(body) >= 0").count() == counts["all"]  # a filter mqfs does not take
    assert df.where("topic = 'Orders'").count() == counts["Orders"]


def test_unfiltered_then_filtered_then_another_filter(spark, store, counts):
    df = spark.read.format("mqfs").load(store)
    assert df.count() == counts["all"]
    assert df.where("topic = 'Orders'").count() == counts["Orders"]
    assert df.where("topic = 'Payments'").count() == counts["Payments"]
    assert df.where("topic = 'Orders'").count() == counts["Orders"]


def test_one_dataframe_joined_and_unioned_with_itself_under_two_filters(spark, store, counts):
    df = spark.read.format("mqfs").load(store)
    orders = df.where("topic = 'Orders'").selectExpr("queue_id", "queue_offset", "topic AS a")
    payments = df.where("topic = 'Payments'").selectExpr("queue_id", "queue_offset", "topic AS b")
    assert orders.union(payments).count() == counts["Orders"] + counts["Payments"]
    both = orders.join(payments, ["queue_id", "queue_offset"]).collect()
    rows = expected_rows(store).values()
    keys = {t: {(r["queue_id"], r["queue_offset"]) for r in rows if r["topic"] == t} for t in ("Orders", "Payments")}
    assert len(both) == len(keys["Orders"] & keys["Payments"]) > 0
    assert {(r.a, r.b) for r in both} == {("Orders", "Payments")}  # each side read its own topic


def test_cached_dataframes_keep_their_rows(spark, store, counts):
    df = spark.read.format("mqfs").load(store)
    orders = df.where("topic = 'Orders'").cache()
    try:
        assert orders.count() == counts["Orders"]
        assert df.count() == counts["all"]
        assert orders.count() == counts["Orders"]
    finally:
        orders.unpersist()
    whole = spark.read.format("mqfs").load(store).cache()
    try:
        assert whole.where("topic = 'Payments'").count() == counts["Payments"]
        assert whole.count() == counts["all"]
    finally:
        whole.unpersist()


def test_a_stream_is_unaffected(spark, store, counts, tmp_path):
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    q = (spark.readStream.format("mqfs").option("startingOffsets", "earliest").load(store)
         .where("topic = 'Orders'")
         .writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
         .trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert q.exception() is None
    assert spark.read.parquet(out).count() == counts["Orders"]
    assert spark.read.format("mqfs").load(store).count() == counts["all"]


def test_the_marker_is_no_user_option(store):
    """Only the JVM provider sets it; a user's options never carry it, and it is no option
    anyone is told about."""
    assert read_options({"path": store}, False).push_filters is False  # Spark's own path: opt-in
    assert read_options({"path": store, MARKER: "true"}, False).push_filters is True
    # (TakenFilters: Spark is shown no pushFilters, which it refuses with its pushdown conf off)
    assert isinstance(MqfsDataSource({"path": store, MARKER: "true"}).reader(None).reader, PushdownReader)
    assert not isinstance(MqfsDataSource({"path": store}).reader(None).reader, PushdownReader)
    with pytest.raises(ValueError) as err:
        read_options({"path": store, "bogus": "1"}, False)
    assert MARKER not in str(err.value)
    assert os.path.basename(scoped_scans_jar() or "") == "mqfs-spark.jar"


BASE = 1_700_000_000_000  # store time of the first batch; batch i is stored at BASE + i s


def test_a_pushed_read_carries_its_filters_to_the_reader(spark, store, tmp_path):
    """Spark's own filter pushdown call runs in a Python worker of its own kind, whose first
    start in a session cost a pushed one-queue read five times the same read by options;
    ScopedScans takes the filters itself and hands them to the reader with the read (the read
    schema's metadata), so a pushed read is planned where every read is."""
    q = spark.read.format("mqfs").load(store).where("topic = 'Orders' and queue_offset >= 3")
    assert pushed(q) and q.count() == sum(1 for r in expected_rows(store).values()
                                          if r["topic"] == "Orders" and r["queue_offset"] >= 3)
    scan = q._jdf.queryExecution().executedPlan().collectLeaves().head().scan()
    taken = scan.getMetaData().get("PushedFilters").get()
    assert "EqualTo(topic,Orders)" in taken and "GreaterThanOrEqual(queue_offset,3)" in taken
    assert scan.readSchema().fields()[0].metadata().json() == "{}"  # the rows carry none of it
    out = str(tmp_path / "out")
    q.select("topic", "queue_offset").write.parquet(out)
    assert all(not f.metadata for f in spark.read.parquet(out).schema.fields)


@pytest.mark.parametrize("where", [
    "topic = 'Orders' and queue_id = 1", "topic in ('Orders', 'nope') and queue_offset between 3 and 40",
    "queue_id in (0, 2) and queue_offset < 7", "commitlog_offset >= 100000 and size > 1000",
    "queue_offset = 5 or topic = 'Payments'", "topic like 'Pay%' and queue_id > 0", "queue_id = 1.0",
    "queue_offset is not null and queue_offset > 600", "store_host is not null and queue_offset <= 1",
    "store_timestamp > timestamp'2000-01-01 00:00:00' and queue_offset < 3",
    "cast(store_timestamp as timestamp_ntz) > timestamp_ntz'2000-01-01 00:00:00' and queue_offset < 2"])
def test_what_scopedscans_takes_the_reader_applies(spark, store, where):
    """ScopedScans.java decides which filters Spark leaves to mqfs by the reader's own rules
    (PushdownReader._push): every query gives the rows Spark's own filtering gives."""
    on = spark.read.format("mqfs").load(store).where(where)
    off = spark.read.format("mqfs").option("pushFilters", "false").load(store).where(where)
    assert sorted(on.select("commitlog_offset").collect()) == sorted(off.select("commitlog_offset").collect())


def test_a_carried_filter_the_reader_does_not_apply_fails_the_read(store):
    """Were ScopedScans to take a filter the reader cannot apply, Spark would not filter
    those rows either: the read refuses instead of giving them."""
    meta = {FILTERS: json.dumps([{"op": "EqualTo", "column": "body", "values": ["x"]}])}
    schema = StructType([StructField("body", BinaryType(), metadata=meta)])
    with pytest.raises(RuntimeError, match="does not apply"):
        MqfsDataSource({"path": store, MARKER: "true"}).reader(schema)
    taken = {FILTERS: json.dumps([{"op": "GreaterThan", "column": "store_timestamp", "values": [{"us": 1}]}])}
    reader = MqfsDataSource({"path": store, MARKER: "true"}).reader(
        StructType([StructField("store_timestamp", TimestampType(), metadata=taken)])).reader
    assert isinstance(reader, PushdownReader) and reader.bounds["store_timestamp"][0] == 1
    off = {"path": store, MARKER: "true", "pushFilters": " FALSE"}  # Python's reading of the option
    with pytest.raises(RuntimeError, match="does not apply"):
        MqfsDataSource(off).reader(StructType([StructField("store_timestamp", TimestampType(), metadata=taken)]))


def test_kafka_filters_on_columns_mqfs_does_not_take(spark, store):
    k = spark.read.format("mqfs").option("shape", "kafka").option("includeHeaders", "true").load(store)
    off = (spark.read.format("mqfs").option("shape", "kafka").option("includeHeaders", "true")
           .option("pushFilters", " False ").load(store))
    for where in ("key is not null and partition = 1", "value is not null and offset < 5",
                  "timestampType = 1 and topic = 'Orders'", "size(headers) > 0 and offset < 3"):
        q = k.where(where).select("offset", "partition")
        assert sorted(q.collect()) == sorted(off.where(where).select("offset", "partition").collect()) != []


@pytest.fixture(scope="module")
def timed_store(tmp_path_factory) -> str:
    """2,500 messages in ten batches of 250, batch i stored at BASE + i seconds, over
    several CommitLog files."""
    root = str(tmp_path_factory.mktemp("timed") / "store")
    msgs = make_messages(random.Random(5), 2500)
    with MessageStore(root, small_store_config(commitlog_file_size=1 << 18)) as s:
        for i in range(10):
            s.clock = lambda i=i: BASE + i * 1000
            s.put_batch(msgs[i * 250:(i + 1) * 250])
    assert len(commitlog_files(root)) >= 3
    return root


def plan(root: str, options: dict, filters: list) -> list:
    reader = PushdownReader(store_layout(root), read_options({"path": root, **options}, False), None)
    assert not list(reader.pushFilters(filters))  # every one taken
    # byte ranges come grouped into tasks (RangeGroup): the ranges are what is planned
    return [p for g in reader.partitions() for p in (g.pieces if isinstance(g, RangeGroup) else [g])]


def at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def test_time_filters_read_only_the_commitlog_ranges_that_hold_their_rows(spark, timed_store):
    want = expected_rows(timed_store)
    df = spark.read.format("mqfs").load(timed_store)
    for cond, keep in ((f"store_timestamp >= timestamp_millis({BASE + 5000})", lambda t: t >= BASE + 5000),
                       (f"store_timestamp < timestamp_millis({BASE + 2000})", lambda t: t < BASE + 2000),
                       (f"store_timestamp between timestamp_millis({BASE + 3000}) and "
                        f"timestamp_millis({BASE + 3000})", lambda t: t == BASE + 3000)):
        q = df.where(cond)
        assert pushed(q)
        assert read_rows(q) == {k: r for k, r in want.items() if keep(r["store_timestamp"])}
    full = plan(timed_store, {}, [])
    late = plan(timed_store, {}, [GreaterThanOrEqual(("store_timestamp",), at(BASE + 5000))])
    first_late = min(o for o, r in want.items() if r["store_timestamp"] >= BASE + 5000)
    assert all(isinstance(p, RangePartition) for p in late) and len(late) < len(full)
    assert min(p.file_from + p.end for p in late) > first_late  # the files before are dropped
    early = plan(timed_store, {}, [LessThan(("store_timestamp",), at(BASE + 4000))])
    last_early = max(o for o, r in want.items() if r["store_timestamp"] < BASE + 4000)
    assert all(isinstance(p, RangePartition) for p in early) and len(early) < len(full)
    assert max(p.file_from + p.start for p in early) <= last_early  # the files after are dropped
    one = plan(timed_store, {}, [EqualTo(("store_timestamp",), at(BASE + 7000))])  # 10%: units
    assert all(isinstance(p, UnitRange) for p in one)
    assert sum(p.end - p.start for p in one) == sum(1 for r in want.values() if r["store_timestamp"] == BASE + 7000)
    assert plan(timed_store, {}, [GreaterThan(("store_timestamp",), at(BASE + 9000))]) == []


def test_time_filters_with_topics_and_kafka_names_prune_too(spark, timed_store):
    want = expected_rows(timed_store)
    orders = plan(timed_store, {}, [EqualTo(("topic",), "Orders"), LessThan(("store_timestamp",), at(BASE + 4000))])
    assert sum(p.end - p.start for p in orders) == sum(
        1 for r in want.values() if r["topic"] == "Orders" and r["store_timestamp"] < BASE + 4000)
    kafka = spark.read.format("mqfs").option("shape", "kafka").load(timed_store)
    q = kafka.where(f"timestamp >= timestamp_millis({BASE + 8000}) and partition = 1 and offset >= 5")
    assert pushed(q)
    got = sorted((r.topic, r.partition, r.offset) for r in q.select("topic", "partition", "offset").collect())
    assert got == sorted((r["topic"], r["queue_id"], r["queue_offset"]) for r in want.values()
                         if r["store_timestamp"] >= BASE + 8000 and r["queue_id"] == 1 and r["queue_offset"] >= 5)
    parts = plan(timed_store, {"shape": "kafka"}, [GreaterThanOrEqual(("timestamp",), at(BASE + 8000))])
    assert all(isinstance(p, UnitRange) for p in parts)
    assert sum(p.end - p.start for p in parts) == sum(1 for r in want.values() if r["store_timestamp"] >= BASE + 8000)


def test_a_missing_jar_is_said_once_and_a_jar_javac_refuses_is_not_installed(tmp_path, monkeypatch, capfd):
    """Sessions still start without the jar, with pushdown opt-in and reads through Python
    workers; setup's build says in one line why there is none, and leaves no jar behind."""
    from mqfs.pipeline import scoped

    jar = tmp_path / "jars" / "mqfs-spark.jar"
    jar.parent.mkdir()
    monkeypatch.setattr(scoped, "installed_jar", lambda: str(jar))
    monkeypatch.setattr(scoped, "_said", False)
    assert scoped.scoped_scans_jar() is None and scoped.scoped_scans_jar() is None
    assert capfd.readouterr().err.count(f"{jar} is missing: run scripts/setup") == 1
    bad = tmp_path / "ScopedScans.java"
    bad.write_text("class ScopedScans { not java }\n")
    monkeypatch.setattr(scoped, "_sources", lambda: [str(bad)])
    assert scoped.install() == 1
    err = capfd.readouterr().err
    assert "mqfs: no JVM reader: javac failed" in err and len(err.strip().splitlines()) == 1
    monkeypatch.setenv("PATH", str(tmp_path))  # no javac at all
    assert scoped.install() == 1
    assert "no javac on PATH" in capfd.readouterr().err
    assert os.listdir(jar.parent) == []


HOUR = 3_600_000
# a broker's clock steps back an hour after 10 records, then forward past them
STEPPED = [BASE + 1000 * i for i in range(10)] + [BASE - HOUR + 1000 * i for i in range(10)] \
    + [BASE + 20_000 + 1000 * i for i in range(5)]


def test_time_pruning_keeps_every_row_of_a_queue_whose_times_step_back(tmp_path):
    """The bisection alone lands on a crossing point in such a queue; the plan still holds
    every record stored in the window."""
    root = str(tmp_path / "stepped")
    with MessageStore(root, small_store_config()) as s:
        stamp_as_broker(s, STEPPED)
        for i in range(len(STEPPED)):
            s.put(Message.create("T", b"m%d" % i))
    edges = sorted({t + d for t in STEPPED for d in (-1, 0, 1)} | {BASE + 5000})
    for lo, hi in [(a, b) for a in edges[::3] for b in edges[::4] if a < b] + [(BASE + 5000, None)]:
        filters = [GreaterThanOrEqual(("store_timestamp",), at(lo))]
        if hi is not None:
            filters.append(LessThan(("store_timestamp",), at(hi)))
        reader = PushdownReader(store_layout(root), read_options({"path": root}, False), None)
        assert not list(reader.pushFilters(filters))
        got = sorted(o for p in reader.partitions() for b in reader.read(p)
                     for o in b.column("queue_offset").to_pylist())
        assert got == [i for i, t in enumerate(STEPPED) if lo <= t and (hi is None or t < hi)], (lo, hi)
