"""A job written for Spark's Kafka source, run on a store by changing the format and the
connection (Kafka's bootstrap servers become the store's path and shape=kafka), and the Kafka
options whose concepts exist here: by-timestamp offsets, the streaming default start."""

from __future__ import annotations

import json
import random

import pytest

pytest.importorskip("pyspark")

from pyspark.errors import AnalysisException  # noqa: E402

from mqfs.pipeline import cli  # noqa: E402
from mqfs.store import MessageStore  # noqa: E402
from tests.pipeline.helpers import build_store, expected_rows, make_messages  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("kshape") / "store")
    build_store(root, 1200, seed=31)
    return root


def kafka_job(reader):
    """A Kafka job, unchanged: the caller hands it a reader with format and connection."""
    return (reader.option("subscribe", "Orders,Payments")
            .option("startingOffsets", json.dumps({"Orders": {"0": 3}})).option("endingOffsets", "latest")
            .option("includeHeaders", "true").load()
            .selectExpr("CAST(key AS STRING) AS key", "value", "topic", "partition", "offset",
                        "unix_millis(timestamp) AS ts", "timestampType", "headers"))


def test_a_kafka_job_runs_by_changing_format_and_connection(spark, store):
    # on Kafka: kafka_job(spark.read.format("kafka").option("kafka.bootstrap.servers", "host:9092"))
    got = {(t, p, o): (k, bytes(v), ts, tt, sorted((h.key, bytes(h.value)) for h in hs))
           for k, v, t, p, o, ts, tt, hs in kafka_job(
               spark.read.format("mqfs").option("path", store).option("shape", "kafka")).collect()}
    want = {(r["topic"], r["queue_id"], r["queue_offset"]): (
        " ".join(r["keys"]) or None, r["body"], r["store_timestamp"], 1,
        sorted((k, v.encode()) for k, v in r["properties"].items()))
        for r in expected_rows(store).values()
        if r["topic"] in ("Orders", "Payments") and (r["topic"], r["queue_id"]) != ("Orders", 0)
        or (r["topic"], r["queue_id"]) == ("Orders", 0) and r["queue_offset"] >= 3}
    assert got == want
    df = spark.read.format("mqfs").option("shape", "kafka").load(store)
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


def test_offsets_by_timestamp_per_queue(spark, store):
    rows = expected_rows(store)
    orders1 = sorted((r["store_timestamp"], r["queue_offset"]) for r in rows.values()
                     if (r["topic"], r["queue_id"]) == ("Orders", 1))
    t0, t1 = orders1[len(orders1) // 4][0], orders1[3 * len(orders1) // 4][0]
    df = (spark.read.format("mqfs").option("subscribe", "Orders").option("queue", "1")
          .option("startingOffsetsByTimestamp", json.dumps({"Orders": {"1": t0}}))
          .option("endingOffsetsByTimestamp", json.dumps({"Orders": {"1": t1}})).load(store))
    assert sorted(r.queue_offset for r in df.collect()) == [o for t, o in orders1 if t0 <= t < t1]
    late = {"Orders": {"1": orders1[-1][0] + 1}}
    with pytest.raises(AnalysisException) as err:
        spark.read.format("mqfs").options(subscribe="Orders", queue="1",
                                          startingOffsetsByTimestamp=json.dumps(late)).load(store).count()
    assert "Orders/1 has no message stored at or after" in cli.one_line(err.value)
    assert spark.read.format("mqfs").options(
        subscribe="Orders", queue="1", startingOffsetsByTimestamp=json.dumps(late),
        startingOffsetsByTimestampStrategy="latest").load(store).count() == 0


def test_a_stream_starts_at_the_end_by_default_as_kafka_does(spark, tmp_path):
    root, out, ckpt = str(tmp_path / "s"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    build_store(root, 200, seed=32)

    q = (spark.readStream.format("mqfs").option("shape", "kafka").load(root).writeStream
         .format("parquet").option("path", out).option("checkpointLocation", ckpt).start())
    try:
        q.processAllAvailable()  # started at the end: nothing to read
        with MessageStore(root) as s:
            s.put_batch(make_messages(random.Random(33), 50, start=200))
        q.processAllAvailable()
    finally:
        q.stop()
    assert q.exception() is None
    got = spark.read.parquet(out)
    assert got.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert got.count() == 50
