"""Filter pushdown is on by default and every query of a DataFrame reads the rows of its own
filters: Spark 4.3 keeps the read planned with pushed filters on the relation and hands it to
later scans of it (pipeline/scoped.py); these queries got another query's rows before."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("pyspark")

from pipeline.scoped import MARKER, scoped_scans_jar  # noqa: E402
from tests.spark_helpers import build_store, expected_rows  # noqa: E402

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
    from pipeline.options import read_options

    assert read_options({"path": store}, False).push_filters is False  # Spark's own path: opt-in
    assert read_options({"path": store, MARKER: "true"}, False).push_filters is True
    with pytest.raises(ValueError) as err:
        read_options({"path": store, "bogus": "1"}, False)
    assert MARKER not in str(err.value)
    assert os.path.basename(scoped_scans_jar() or "").startswith("mqfs-scoped-scans-")
