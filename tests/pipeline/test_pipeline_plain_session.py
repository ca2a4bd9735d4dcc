"""format("mqfs") from a plain SparkSession (no mqfs.pipeline.spark.session(), no mqfs import
in the driver, no Spark settings) in a venv that is not activated: the jar setup put in
pyspark's jars is on the session's class path, so reads (a stream's too) are the JVM
reader's, filters are pushed and columns pruned (a stream's by the jar's optimizer rule,
whatever the plan above the stream: a select, a withColumn, a join, a
foreachBatch sink).
Runs a real driver program in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("pyspark")

from tests.pipeline.helpers import build_store  # noqa: E402

pytestmark = pytest.mark.spark

PROGRAM = r"""
import json, re, sys
from pyspark.sql import SparkSession, functions as F

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


def scanned(name, df, each=None):
    # runs a stream to its end; the columns its micro-batch scan read (StreamPruning.java)
    w = df.writeStream.option("checkpointLocation", checkpoint + "-" + name).trigger(availableNow=True)
    q = (w.foreachBatch(each) if each else w.format("memory").queryName(name)).start()
    q.awaitTermination()
    plan = q._jsq.streamingQuery().lastExecution().executedPlan().toString()
    return sorted(c.split("#")[0] for c in re.search(r"MicroBatchScan\[([^\]]*)\]", plan).group(1).split(", "))


def s():
    return spark.readStream.format("mqfs").option("startingOffsets", "earliest").load(a)


sizes = s().withColumn("n", F.length("body")).select("topic", "n")
out["with_column"] = scanned("sizes", sizes)
out["with_column_rows"] = sorted(tuple(r) for r in spark.table("sizes").collect())
out["with_column_batch"] = sorted(tuple(r) for r in spark.read.format("mqfs").load(a)
                                  .select("topic", F.length("body")).collect())
labels = spark.createDataFrame([("Orders", "o"), ("Payments", "p")], "topic string, label string")
out["joined"] = scanned("joined", s().join(labels, "topic").select("queue_offset", "label"))
out["joined_rows"] = spark.sql("select count(*) from joined").collect()[0][0]
seen = []
out["each_batch"] = scanned("each", s().select("topic", "store_timestamp"), each=lambda df, i: seen.append(df.count()))
out["each_batch_rows"] = sum(seen)
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
    # plans other than a select over the stream: each scan read only the columns its query uses
    assert out["with_column"] == ["body", "topic"]
    assert out["with_column_rows"] == out["with_column_batch"] and len(out["with_column_rows"]) == 600
    assert out["joined"] == ["queue_offset", "topic"] and 0 < out["joined_rows"] < 600
    assert out["each_batch"] == ["store_timestamp", "topic"] and out["each_batch_rows"] == 600
    assert "reading through Python workers" not in done.stderr
