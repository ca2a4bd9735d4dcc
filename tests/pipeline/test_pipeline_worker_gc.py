"""Spark's reused planning workers freeze what importing the mqfs source made
(pipeline/worker_gc.py), so the daemon's full collection after each request skips it; no
other process freezes anything."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("pyspark")


def test_a_planning_worker_that_imported_the_source_has_its_imports_frozen(spark):
    from pyspark.sql.datasource import DataSource

    class Probe(DataSource):  # defined here, so pickled by value and run in Spark's own worker
        @classmethod
        def name(cls):
            return "mqfs_gc_probe"

        def schema(self):
            import gc

            import mqfs.pipeline.source  # noqa: F401
            return f"frozen_{gc.get_freeze_count()} int"

    spark.dataSource.register(Probe)
    (column,) = spark.read.format("mqfs_gc_probe").load().columns
    assert int(column.removeprefix("frozen_")) > 10_000  # pyspark's, pyarrow's, numpy's and mqfs's


def test_a_process_that_is_no_spark_worker_freezes_nothing():
    code = "import gc, mqfs.pipeline.source; print(gc.get_freeze_count())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "0"
