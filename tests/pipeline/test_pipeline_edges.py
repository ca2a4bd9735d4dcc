"""The mqfs source at its edges, each case standing for its class: selections of nothing,
messages lost before a read, damage in the middle of a file, refused options and writes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

pytest.importorskip("pyspark")

from pyspark.errors import AnalysisException, StreamingQueryException  # noqa: E402

from mqfs.pipeline import cli  # noqa: E402
from mqfs.pipeline.bounds import kept_bounds  # noqa: E402
from mqfs.pipeline.jobs import audit  # noqa: E402
from mqfs.pipeline.options import read_options  # noqa: E402
from mqfs.pipeline.source import MqfsDataSource, MqfsReader  # noqa: E402
from mqfs.pipeline.units import UnitRange  # noqa: E402
from mqfs.store import Message, MessageStore  # noqa: E402
from mqfs.store.offline.views import commitlog_files, queues, store_layout  # noqa: E402
from tests.fusefs.helpers import mounted, needs_fuse  # noqa: E402
from tests.pipeline.helpers import append, build_store, expected_rows, plain_rows, read_rows  # noqa: E402
from tests.store.helpers import flip  # noqa: E402
from tests.waits import eventually  # noqa: E402

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
    flip(path, tenth - start + byte)  # a byte of TOTALSIZE
    with pytest.raises(Exception) as err:  # a Python worker's or the JVM reader's
        spark.read.format("mqfs").load(root).collect()  # (a count() is the units' answer)
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


def test_a_few_queues_are_read_through_their_consume_queues(spark, store):
    """One queue's offsets are read at the records its units point at, not by walking the
    CommitLog files its records are interleaved in; the rows are the same."""
    options = {"subscribe": "Orders", "queue": "1", "startingOffsets": json.dumps({"Orders": {"1": 5}}),
               "minPartitions": "3"}
    parts = MqfsReader(store_layout(store), read_options(options, streaming=False), None).partitions()
    assert len(parts) >= 3 and all(isinstance(p, UnitRange) for p in parts)
    got = read_rows(spark.read.format("mqfs").options(**options).load(store))
    assert got == {k: r for k, r in expected_rows(store).items()
                   if (r["topic"], r["queue_id"]) == ("Orders", 1) and r["queue_offset"] >= 5}
    everything = MqfsReader(store_layout(store), read_options({}, streaming=False), None).partitions()
    assert not any(isinstance(p, UnitRange) for p in everything)


def test_a_jvm_read_of_one_queue_keeps_every_core_busy(store, monkeypatch):
    """A JVM read's unit selection is cut as its byte ranges are (tasks.even_tasks of the
    selected bytes over the session's cores): past ONE_TASK_BYTES, one queue's offsets are as
    many tasks as cores, of one size, tiling the selection. Below it, and for the Python
    reader (whose tasks cost a tenth of a second each), one task reads them all."""
    from mqfs.pipeline import tasks

    options = read_options({"subscribe": "Orders", "queue": "1"}, streaming=False)

    def plan(jvm: bool, slots: int | None) -> list[tuple[int, int]]:
        reader = MqfsReader(store_layout(store), options, None)
        reader.jvm, reader.slots = jvm, slots
        parts = reader.partitions()
        assert all(isinstance(p, UnitRange) for p in parts)
        return [(p.start, p.end) for p in parts]

    whole = plan(False, None)
    assert len(whole) == 1
    assert plan(True, 2) == whole  # a few KiB
    monkeypatch.setattr(tasks, "ONE_TASK_BYTES", 1)
    halves = plan(True, 2)
    assert [halves[0][0], halves[0][1], halves[1][1]] == [whole[0][0], halves[1][0], whole[0][1]]
    assert abs((halves[0][1] - halves[0][0]) - (halves[1][1] - halves[1][0])) <= 1
    thirds = plan(True, 3)
    assert len(thirds) == 3 and thirds[0][0] == whole[0][0] and thirds[-1][1] == whole[0][1]
    assert plan(False, None) == whole


def test_min_partitions_is_honoured_on_a_small_store(spark, tmp_path):
    root = str(tmp_path / "small")
    build_store(root, 40, seed=23)
    df = spark.read.format("mqfs").option("minPartitions", "4").load(root)
    assert df.rdd.getNumPartitions() >= 4
    assert read_rows(df) == expected_rows(root)


def test_several_stores_read_as_one_with_a_store_column(spark, store, tmp_path):
    brokers = tmp_path / "brokers"
    a, b = str(brokers / "a" / "store"), str(brokers / "b" / "store")
    build_store(a, 300, seed=24)
    build_store(b, 200, seed=25)
    os.makedirs(brokers / "c" / "store")  # not a store: a glob passes over it
    want = {(root, k): r for root in (a, b) for k, r in expected_rows(root).items()}

    def rows(df) -> dict:
        return {(r.pop("store"), r["commitlog_offset"]): r for r in plain_rows(df)}

    listed = spark.read.format("mqfs").load([a, b])
    assert listed.columns[-1] == "store"
    assert rows(listed) == want
    globbed = spark.read.format("mqfs").load(str(brokers / "*" / "store"))
    assert rows(globbed) == want
    one_topic = spark.read.format("mqfs").option("subscribe", "Orders").load([a, b])
    assert rows(one_topic) == {k: r for k, r in want.items() if r["topic"] == "Orders"}
    with pytest.raises(AnalysisException, match="matches no store directory"):
        spark.read.format("mqfs").load(str(tmp_path / "nothing-*")).count()

    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    def stream():
        q = (spark.readStream.format("mqfs").option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "150")
             .load(str(brokers / "*" / "store")).writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
        q.awaitTermination(180)
        assert q.exception() is None

    stream()
    append(b, 100, seed=26, start=200)
    stream()  # one checkpoint: the second run reads only what the first did not
    got = [(r.store, r.topic, r.queue_id, r.queue_offset) for r in spark.read.parquet(out).collect()]
    assert len(got) == len(set(got)) == 600
    assert {(s, t, q) for s, t, q, _ in got} == {(root, r["topic"], r["queue_id"])
                                                for root in (a, b) for r in expected_rows(root).values()}



def _moved(start: dict, end: dict) -> int:
    """Rows between two offsets of a stream over several stores."""
    return sum(o - start[root].get(t, {}).get(q, 0)
               for root, ts in end.items() for t, qs in ts.items() for q, o in qs.items())


def test_a_stream_over_several_stores_shares_its_limits_by_backlog(tmp_path):
    """maxOffsetsPerTrigger is one limit over every store's queues, shared by backlog (a
    store with little waiting does not halve the rate of one with much), and
    minOffsetsPerTrigger counts the rows waiting in all stores, as Kafka's source does."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    build_store(a, 1000, seed=40)
    build_store(b, 10, seed=41)
    options = {"paths": json.dumps([a, b]), "startingOffsets": "earliest", "maxOffsetsPerTrigger": "200",
               "minOffsetsPerTrigger": "50", "maxTriggerDelay": "1h"}
    reader = MqfsDataSource(options).streamReader(None)
    limit = reader.getDefaultReadLimit()
    at, steps = reader.initialOffset(), []
    while (nxt := reader.latestOffset(at, limit)) != at:
        steps.append(_moved(at, nxt))
        at = nxt
    assert steps == [200] * 5  # 1010 waiting: full batches; the last 10 (< 50) are held back
    append(a, 30, seed=42, start=1000)
    append(b, 30, seed=43, start=10)
    nxt = reader.latestOffset(at, limit)  # 10 + 30 + 30 waiting >= 50, though < 50 in each store
    assert _moved(at, nxt) == 70


@pytest.mark.timeout(900)  # two drivers, each a Spark session: 220 s seen alone at load 11
def test_the_streaming_sink_writes_each_batch_once_through_a_driver_kill(tmp_path):
    """Stream a store into another with writeStream.format("mqfs"); kill -9 the whole driver
    (Python and JVM) once rows arrive, start it again on the same checkpoint: every message
    is in the target exactly once."""
    source, target, ckpt = str(tmp_path / "src"), str(tmp_path / "dst"), str(tmp_path / "ckpt")
    # five batches of 300: the first driver is killed after two, the second does the rest
    build_store(source, 1500, seed=27)
    build_store(target, 0)
    driver = [sys.executable, os.path.join(os.path.dirname(__file__), "sink_driver.py"), source, target, ckpt]

    def written() -> int:
        return sum(hi - lo for lo, hi in kept_bounds(store_layout(target), queues(target)).values())

    proc = subprocess.Popen(driver, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # two batches of 300 in: the limit leaves the second driver its 300 s of the test's 900
    eventually(lambda: written() >= 600, "the driver's first two batches in the target",
               limit=540, interval=0.05, alive=lambda: proc.poll() is None)
    assert proc.poll() is None and 0 < written() < 1500, "the driver ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    again = subprocess.run(driver, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    want = sorted((r["topic"], r["queue_id"], r["body"]) for r in expected_rows(source).values())
    got = sorted((r["topic"], r["queue_id"], r["body"]) for r in expected_rows(target).values())
    assert got == want


def test_export_overwrites_and_an_export_of_nothing_is_empty_and_valid(spark, store, tmp_path, capsys):
    out = str(tmp_path / "exp")
    assert cli.main(["export", store, out, "--topic", "Nope"]) == 0
    assert "exported 0 messages: none matched" in capsys.readouterr().out
    assert "_SUCCESS" in os.listdir(out) and not [n for n in os.listdir(out) if not n.startswith(("_", "."))]
    assert cli.main(["export", store, out]) == 2  # OUT exists: refused without --overwrite
    assert cli.main(["export", store, out, "--overwrite", "--topic", "Orders"]) == 0
    orders = sum(1 for r in expected_rows(store).values() if r["topic"] == "Orders")
    assert spark.read.parquet(out).count() == orders


def test_stats_rate_of_a_burst_is_its_count_per_second(spark, tmp_path, capsys):
    root, out = str(tmp_path / "burst"), str(tmp_path / "stats")
    with MessageStore(root) as s:
        s.clock = lambda: 1_700_000_000_000
        s.put_batch([Message.create("Burst", b"x") for _ in range(10)])
    assert cli.main(["stats", root, out]) == 0
    assert "Burst: 10 messages in 1 queue, " in capsys.readouterr().out
    with open(os.path.join(out, "stats.json")) as f:
        assert json.load(f)["topics"][0]["rate_per_s"] == 10.0
