"""The mqfs source at its edges, each case standing for its class: selections of nothing,
messages lost before a read, damage in the middle of a file, refused options and writes."""

from __future__ import annotations

import json
import os
import shutil

import pytest

pytest.importorskip("pyspark")

from pyspark.errors import AnalysisException, PythonException, StreamingQueryException  # noqa: E402

from pipeline import cli  # noqa: E402
from pipeline.jobs import audit  # noqa: E402
from store import MessageStore  # noqa: E402
from store.offline.views import commitlog_files  # noqa: E402
from tests.fs_helpers import mounted, needs_fuse  # noqa: E402
from tests.spark_helpers import build_store, expected_rows, read_rows  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("edges") / "store")
    build_store(root, 2000, seed=21)
    return root


@pytest.mark.parametrize("options", [
    {"subscribePattern": "Nope.*"},
    {"assign": '{"Missing": [0]}'},
    {"endingTimestamp": "1000"},
    {"startingTimestamp": "4000000000000"},
    {"startingOffsets": json.dumps({"Orders": {"0": 10**9}}), "subscribe": "Orders", "queue": "0"},
])
def test_a_selection_of_nothing_is_zero_rows(spark, store, options):
    assert spark.read.format("mqfs").options(**options).load(store).count() == 0


@pytest.mark.allow_logs(r"exception while executing the Python Proxy")
def test_a_start_inside_what_retention_deleted_is_data_loss(spark, store, tmp_path):
    """The first CommitLog file is gone (as retention deletes it) while the ConsumeQueue still
    has units pointing into it: loss is measured from the records, not the units."""
    root = str(tmp_path / "ret")
    shutil.copytree(store, root)
    first_start, first_path = commitlog_files(root)[0]
    os.unlink(first_path)
    kept = {k: r for k, r in expected_rows(store).items() if k >= commitlog_files(root)[0][0]}
    orders0 = sorted(r["queue_offset"] for r in kept.values() if (r["topic"], r["queue_id"]) == ("Orders", 0))
    first = orders0[0]
    assert first > 1  # units 0..first-1 point into the deleted file
    start = json.dumps({"Orders": {"0": first - 1}})
    df = (spark.read.format("mqfs").option("subscribe", "Orders").option("queue", "0")
          .option("startingOffsets", start).load(root))
    with pytest.raises(AnalysisException) as err:
        df.count()
    assert f"Orders/0: offsets {first - 1}..{first - 1} are gone (the queue's first message left is " \
           f"at offset {first})" in cli.one_line(err.value)
    lossy = df.sparkSession.read.format("mqfs").options(
        subscribe="Orders", queue="0", startingOffsets=start, failOnDataLoss="false").load(root)
    assert sorted(r.queue_offset for r in lossy.select("queue_offset").collect()) == orders0
    everything = read_rows(spark.read.format("mqfs").load(root))  # earliest: no loss to report
    assert everything == kept


@pytest.mark.parametrize("byte", [2, 3])
def test_skip_steps_over_a_damaged_size_and_keeps_every_intact_record(spark, tmp_path, byte):
    root = str(tmp_path / "size")
    build_store(root, 300, seed=22)
    want = expected_rows(root)
    tenth = sorted(want)[10]
    start, path = [(s, p) for s, p in commitlog_files(root) if s <= tenth][-1]
    with open(path, "r+b") as f:
        f.seek(tenth - start + byte)  # a byte of TOTALSIZE
        old = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([old[0] ^ 0x10]))
    with pytest.raises(PythonException) as err:
        spark.read.format("mqfs").load(root).count()
    assert f"damaged record at CommitLog offset {tenth} " in cli.one_line(err.value)
    got = read_rows(spark.read.format("mqfs").option("damagedRecords", "skip").load(root))
    del want[tenth]
    assert got == want


@pytest.mark.allow_logs(r"exception while executing the Python Proxy", r"terminated with error")
def test_a_bad_streaming_option_says_what_is_wrong(spark, store, tmp_path):
    q = (spark.readStream.format("mqfs").option("maxOffsetsPerTrigger", "many").load(store)
         .writeStream.format("memory").queryName("refused").start())
    with pytest.raises(StreamingQueryException) as err:
        q.awaitTermination(120)
    assert cli.one_line(err.value) == "maxOffsetsPerTrigger='many' must be an integer >= 1"


def test_overwrite_is_refused_in_one_line(spark, tmp_path):
    root = str(tmp_path / "w")
    build_store(root, 5)
    df = spark.createDataFrame([("T", "b")], "topic string, body string")
    with pytest.raises(AnalysisException) as err:
        df.write.format("mqfs").mode("overwrite").save(root)
    assert "mode('overwrite') would delete the store's messages" in cli.one_line(err.value)
    with MessageStore(root) as s:
        assert "T" not in s.topics()


@needs_fuse
def test_writing_to_a_mounted_store_without_mount_fails_at_once_naming_the_mount(spark, tmp_path):
    root, mnt = str(tmp_path / "m"), str(tmp_path / "mnt")
    build_store(root, 5)
    df = spark.createDataFrame([("T", "b")], "topic string, body string")
    with mounted(root, mnt), pytest.raises(AnalysisException) as err:
        df.write.format("mqfs").mode("append").option("lockTimeout", "600").save(root)
    assert cli.one_line(err.value) == (f"the store {root} is mounted at {mnt}, whose daemon holds it: "
                                       f"write through the mount with .option('mount', '{mnt}')")


@needs_fuse
def test_audit_of_a_mounted_store_reports_no_false_problems(spark, tmp_path):
    root, mnt = str(tmp_path / "live"), str(tmp_path / "mnt")
    build_store(root, 5)
    lines = "".join(json.dumps({"body": f"m{i}", "keys": [f"k{i}"], "tags": "T"}) + "\n" for i in range(200))
    with mounted(root, mnt):
        for q in (0, 1):
            os.makedirs(os.path.join(mnt, "topics", "Live", str(q)), exist_ok=True)
            with open(os.path.join(mnt, "topics", "Live", str(q), "append.jsonl"), "a") as f:
                f.write(lines)
        r = audit.run(spark, root)
        assert r["live"] and r["problems"] == 0, r["shown"]
    r = audit.run(spark, root)
    assert not r["live"] and r["problems"] == 0, r["shown"]
    assert r["cq_units"] == 405
