"""Column pruning: a batch query asks the reader only for the columns it needs
(pipeline/ScopedScans.java, pipeline/pruning.py), and gets exactly the rows and values of
those columns that the unpruned read gives, whatever else the query does with the same
DataFrame, with filters on other columns, Kafka's shape, several stores and streams."""

from __future__ import annotations

import os
import re

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.types import StructField, StructType  # noqa: E402

from mqfs.pipeline.schema import MESSAGE_SCHEMA  # noqa: E402
from mqfs.pipeline.scoped import MARKER  # noqa: E402
from mqfs.pipeline.source import MqfsDataSource, MqfsReader, PushdownReader  # noqa: E402
from tests.pipeline.helpers import build_store, expected_rows, flip_body_byte  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("pruning") / "store")
    build_store(root, 2500, seed=11)
    return root


@pytest.fixture(scope="module")
def want(store) -> dict[int, dict]:
    return expected_rows(store)


def scanned(df) -> list[str]:
    """The columns the plan's mqfs scan reads (Spark's BatchScan line)."""
    plan = df._jdf.queryExecution().executedPlan().toString()
    found = re.search(r"BatchScan mqfs\[([^\]]*)\]", plan)
    assert found, plan
    return [re.sub(r"#\d+L?$", "", c) for c in found.group(1).split(", ")]


def rows(df, *columns: str) -> list[tuple]:
    """The DataFrame's values of these columns (bodies as bytes, times in ms), sorted."""
    out = []
    for r in df.select(*columns).collect():
        out.append(tuple(round(v.timestamp() * 1000) if hasattr(v, "timestamp") else
                         bytes(v) if isinstance(v, bytearray) else
                         sorted(v.items()) if isinstance(v, dict) else v for v in r))
    return sorted(out, key=repr)


def expected(want: dict[int, dict], *columns: str, keep=lambda r: True) -> list[tuple]:
    return sorted((tuple(sorted(r[c].items()) if isinstance(r[c], dict) else r[c] for c in columns)
                   for r in want.values() if keep(r)), key=repr)


def test_a_query_reads_only_the_columns_it_needs(spark, store, want):
    df = spark.read.format("mqfs").load(store)
    assert scanned(df.select("topic", "queue_offset")) == ["topic", "queue_offset"]
    assert scanned(df.select(F.sha2("body", 256))) == ["body"]
    assert scanned(df.select(F.sum(F.length("body")))) == ["body"]
    assert scanned(df.groupBy().count()) == ["queue_id"]  # count() needs none: one int column
    assert len(scanned(df)) == len(MESSAGE_SCHEMA.fields)
    assert df.count() == len(want)
    assert rows(df, "topic", "queue_offset") == expected(want, "topic", "queue_offset")
    assert rows(df, "body") == expected(want, "body")
    assert rows(df, "keys", "tags", "store_timestamp") == expected(want, "keys", "tags", "store_timestamp")


@pytest.mark.parametrize("columns", [("topic", "queue_offset"), ("body",), ("size", "store_host", "msg_id"),
                                     ("born_host", "properties", "sys_flag"), ("commitlog_offset",)])
def test_pruned_rows_are_the_unpruned_reads_columns(spark, store, columns):
    df = spark.read.format("mqfs").load(store)
    full = [r.asDict() for r in df.collect()]  # every column: nothing pruned
    assert scanned(df.select(*columns)) == [f.name for f in MESSAGE_SCHEMA.fields if f.name in columns]
    got = sorted((tuple(r) for r in df.select(*columns).collect()), key=repr)
    assert got == sorted((tuple(r[c] for c in columns) for r in full), key=repr)


def test_pruned_and_full_queries_of_one_dataframe_keep_their_own_columns(spark, store, want):
    """Spark keeps a Python read's plan on the relation (pipeline/README.md); a pruned read
    planned there would serve the next query of the DataFrame with its columns only."""
    df = spark.read.format("mqfs").load(store)
    assert df.select("topic", "queue_offset").count() == len(want)
    assert rows(df.select("topic", "queue_offset"), "topic", "queue_offset") == expected(want, "topic", "queue_offset")
    full = df.collect()
    assert len(full) == len(want) and len(full[0]) == len(MESSAGE_SCHEMA.fields)
    assert rows(df, "body") == expected(want, "body")
    assert sorted(r.size for r in full) == sorted(r["size"] for r in want.values())
    short = df.select("commitlog_offset", "queue_offset")
    both = short.join(df.select("commitlog_offset", "body"), "commitlog_offset")  # one relation, two reads
    assert sorted((r.commitlog_offset, r.queue_offset, bytes(r.body)) for r in both.collect()) == sorted(
        (o, r["queue_offset"], r["body"]) for o, r in want.items())
    cached = df.select("topic", "body").cache()
    try:
        assert cached.count() == len(want)
        assert df.where("queue_id = 1").count() == sum(1 for r in want.values() if r["queue_id"] == 1)
        assert rows(cached, "topic", "body") == expected(want, "topic", "body")
    finally:
        cached.unpersist()


def test_filters_on_columns_the_query_does_not_select(spark, store, want):
    df = spark.read.format("mqfs").load(store)
    for cond, keep in (("topic = 'Orders'", lambda r: r["topic"] == "Orders"),
                       ("topic = 'Orders' and queue_id = 1 and queue_offset >= 20",  # through units
                        lambda r: r["topic"] == "Orders" and r["queue_id"] == 1 and r["queue_offset"] >= 20),
                       ("queue_offset < 30 and length(body) > 10",  # one pushed, one Spark's
                        lambda r: r["queue_offset"] < 30 and len(r["body"]) > 10)):
        q = df.where(cond).select("body")
        assert "body" in scanned(q) and "msg_id" not in scanned(q)
        assert "topic" not in scanned(q) or "topic" not in cond  # a taken filter needs no column
        assert rows(q, "body") == expected(want, "body", keep=keep), cond
        assert df.where(cond).count() == sum(1 for r in want.values() if keep(r)), cond


def test_kafka_shape_is_pruned_too(spark, store, want):
    k = spark.read.format("mqfs").option("shape", "kafka").option("includeHeaders", "true").load(store)
    assert scanned(k.select("value")) == ["value"]
    assert scanned(k.select("offset", "key")) == ["key", "offset"]
    assert scanned(k.select("timestampType")) == ["timestampType"]
    assert k.count() == len(want)
    assert rows(k, "value") == expected(want, "body")
    assert rows(k, "partition", "offset") == expected(want, "queue_id", "queue_offset")
    assert [r.timestampType for r in k.select("timestampType").distinct().collect()] == [1]
    keyed = rows(k, "offset", "key")
    assert keyed == sorted(((r["queue_offset"], " ".join(r["keys"]).encode() if r["keys"] else None)
                            for r in want.values()), key=repr)
    one = k.where("partition = 1 and topic = 'Orders'").select("value", "headers")
    assert scanned(one) == ["value", "headers"]  # the taken filters need no column of the read
    got = sorted((bytes(r.value), sorted((h.key, bytes(h.value).decode()) for h in r.headers))
                 for r in one.collect())
    assert got == sorted((r["body"], sorted(r["properties"].items())) for r in want.values()
                         if r["queue_id"] == 1 and r["topic"] == "Orders")


def test_several_stores_are_pruned_with_or_without_the_store_column(spark, store, want, tmp_path):
    other = str(tmp_path / "other")
    build_store(other, 300, seed=3)
    more = expected_rows(other)
    df = spark.read.format("mqfs").load([store, other])
    assert scanned(df.select("body")) == ["body"]
    assert scanned(df.select("store", "queue_offset")) == ["queue_offset", "store"]
    assert df.count() == len(want) + len(more)
    by_store = {r.store: r["count"] for r in df.groupBy("store").count().collect()}
    assert by_store == {os.path.abspath(store): len(want), os.path.abspath(other): len(more)}
    assert rows(df, "body") == sorted([(r["body"],) for r in [*want.values(), *more.values()]], key=repr)


def test_header_only_queries_do_not_read_a_damaged_body(spark, tmp_path):
    """What a header-only read checks (pipeline/README.md): a body checksum failure fails
    the queries that read the body and none that do not."""
    root = str(tmp_path / "damaged")
    build_store(root, 400, seed=4)
    flip_body_byte(root)
    df = spark.read.format("mqfs").load(root)
    assert df.count() == 400
    assert df.select("topic", "queue_id", "queue_offset").distinct().count() == 400
    with pytest.raises(Exception, match="checksum mismatch"):
        df.select("body").collect()
    skipping = spark.read.format("mqfs").option("damagedRecords", "skip").load(root)
    assert len(skipping.select("body").collect()) == 399
    assert skipping.count() == 400  # Spark asks a count for no column: no body is read
    checked = spark.read.format("mqfs").option("checksums", "always")
    with pytest.raises(Exception, match="checksum mismatch"):
        checked.load(root).count()
    assert checked.option("damagedRecords", "skip").load(root).count() == 399


@pytest.mark.parametrize("reader", ["jvm", "python"])
def test_a_stream_reads_only_the_columns_it_uses(spark, store, want, tmp_path, reader):
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    q = (spark.readStream.format("mqfs").option("startingOffsets", "earliest").option("reader", reader).load(store)
         .where("queue_id = 2").select("topic", "queue_offset", "body")
         .writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
         .trigger(availableNow=True).start())
    q.awaitTermination(180)
    assert q.exception() is None
    plan = q._jsq.streamingQuery().lastExecution().executedPlan().toString()
    found = re.search(r"MicroBatchScan\[([^\]]*)\]", plan)  # StreamPruning.java narrowed it
    assert found and [re.sub(r"#\d+L?$", "", c) for c in found.group(1).split(", ")] == [
        "topic", "queue_id", "queue_offset", "body"], plan
    assert rows(spark.read.parquet(out), "topic", "queue_offset", "body") == expected(
        want, "topic", "queue_offset", "body", keep=lambda r: r["queue_id"] == 2)


def test_without_the_jar_every_column_is_read_as_before(spark, store, want):
    class PlainMqfs(MqfsDataSource):  # local: Spark's workers take it by value
        """The same source as Spark's own Python data source provider runs it (no jar)."""

        @classmethod
        def name(cls) -> str:
            return "mqfs_plain"

    spark.dataSource.register(PlainMqfs)
    df = spark.read.format("mqfs_plain").load(store)
    assert len(scanned_plain(df.select("body"))) == len(MESSAGE_SCHEMA.fields)
    assert rows(df, "body") == expected(want, "body")
    assert df.count() == len(want)
    assert df.where("topic = 'Orders'").select("queue_offset").count() == sum(
        1 for r in want.values() if r["topic"] == "Orders")


def scanned_plain(df) -> list[str]:
    plan = df._jdf.queryExecution().executedPlan().toString()
    found = re.search(r"BatchScan mqfs_plain\[([^\]]*)\]", plan)
    assert found, plan
    return found.group(1).split(", ")


def test_the_reader_builds_what_the_schema_names(store):
    def schema(*names: str) -> StructType:
        return StructType([StructField(f.name, f.dataType, f.nullable)
                           for f in MESSAGE_SCHEMA.fields if f.name in names])

    source = MqfsDataSource({"path": store, MARKER: "true"})
    reader = source.reader(schema("topic", "queue_offset")).reader
    assert isinstance(reader, PushdownReader) and reader.opts.columns == {"topic", "queue_offset"}
    batch = next(b for p in reader.partitions() for b in reader.read(p))
    assert batch.schema.names == ["topic", "queue_offset"]
    count = source.reader(schema("queue_id")).reader
    assert count.opts.columns == {"queue_id"}
    plain = MqfsDataSource({"path": store}).reader(schema("body")).reader
    assert isinstance(plain, MqfsReader) and plain.opts.columns == {"body"}
