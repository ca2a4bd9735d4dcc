"""format("mqfs") from a plain SparkSession (no mqfs.pipeline.spark.session(), no mqfs import
in the driver, no Spark settings) in a venv that is not activated: the jar setup put in
pyspark's jars is on the session's class path, so reads (a stream's too) are the JVM
reader's, filters are pushed and columns pruned (a stream's by the jar's optimizer rule).
Runs a real driver program in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("pyspark")

from tests.pipeline.helpers import build_store  # noqa: E402

PROGRAM = r"""
import json, sys
from pyspark.sql import SparkSession

a, b, checkpoint = sys.argv[1:4]
spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
out = {}
one = spark.read.format("mqfs").load(a)
out["one"] = one.count()
out["one_plan"] = one._jdf.queryExecution().executedPlan().toString()
two = spark.read.format("mqfs").load([a, b])
out["two"] = two.count()
out["stores"] = sorted(r.store for r in two.select("store").distinct().collect())
pushed = one.where("topic = 'Orders' and queue_id = 1").select("queue_offset")
out["pushed"] = pushed.count()
out["pushed_plan"] = pushed._jdf.queryExecution().executedPlan().toString()
out["by_options"] = spark.read.format("mqfs").option("subscribe", "Orders").option("queue", "1").load(a).count()
q = (spark.readStream.format("mqfs").option("startingOffsets", "earliest").load(a).select("queue_offset")
     .writeStream.format("memory").queryName("rows").option("checkpointLocation", checkpoint)
     .trigger(availableNow=True).start())
q.awaitTermination()
out["stream"] = spark.sql("select count(*) from rows").collect()[0][0]
out["stream_plan"] = q._jsq.streamingQuery().lastExecution().executedPlan().toString()
print("RESULT " + json.dumps(out))
spark.stop()
"""


def test_a_plain_session_in_a_venv_not_activated_reads_with_the_jvm_reader(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    build_store(a, 600)
    build_store(b, 300, seed=3)
    bin_dir = os.path.dirname(sys.executable)
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_CONF_DIR")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != bin_dir)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    done = subprocess.run([sys.executable, "-c", PROGRAM, a, b, str(tmp_path / "cp")], env=env,
                          capture_output=True, text=True, cwd=str(tmp_path))
    lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    out = json.loads(lines[0][len("RESULT "):])
    assert out["one"] == 600 and out["two"] == 900 and out["stores"] == [a, b]
    assert "(JVM)" in out["one_plan"]
    # the filter was taken by the scan (no Filter left in the plan) and pruned to one column
    assert out["pushed"] == out["by_options"] > 0
    assert " Filter " not in out["pushed_plan"]
    assert "[queue_offset" in out["pushed_plan"] and "(JVM)" in out["pushed_plan"]
    assert out["stream"] == 600
    assert "MicroBatchScan[queue_offset" in out["stream_plan"] and "(JVM)" in out["stream_plan"]
    assert "reading through Python workers" not in done.stderr
