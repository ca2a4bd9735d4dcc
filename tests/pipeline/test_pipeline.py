"""The mqfs Spark data source, streaming reader, writer and jobs against real stores."""

from __future__ import annotations

import os
import random
import shutil
import subprocess

import pytest

pytest.importorskip("pyspark")

from mqfs.pipeline import cli  # noqa: E402
from mqfs.pipeline.jobs import audit, rebuild  # noqa: E402
from mqfs.pipeline.writer import MqfsWriter  # noqa: E402
from mqfs.store import Message, MessageStore  # noqa: E402
from mqfs.store.offline.views import commitlog_files, index_files, read_index_file, store_layout  # noqa: E402
from tests.fusefs.helpers import MQFS  # noqa: E402
from tests.pipeline.helpers import build_store, expected_rows, make_messages, read_rows  # noqa: E402
from tests.store.broker_layouts import lmq_store  # noqa: E402
from tests.store.helpers import small_config  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("pipeline") / "store")
    build_store(root, 3000)
    return root


def test_round_trip_every_field(spark, store):
    df = spark.read.format("mqfs").load(store)
    files = commitlog_files(store)
    assert len(files) > 1
    assert df.rdd.getNumPartitions() == 1  # a few MiB of files: one task reads them all
    got, want = read_rows(df), expected_rows(store)
    assert len(want) == 3000
    assert got.keys() == want.keys()
    for off in want:
        assert got[off] == want[off], off


def test_filters_match_filtering_afterwards(spark, store):
    from pyspark.sql import functions as F
    all_rows = spark.read.format("mqfs").load(store)
    times = sorted(r[0] for r in all_rows.select(F.unix_millis("store_timestamp")).collect())
    start, end = times[len(times) // 4], times[3 * len(times) // 4]
    filtered = (spark.read.format("mqfs").option("topic", "Orders,Audit_Log").option("queue", "0,2")
                .option("startTime", str(start)).option("endTime", str(end)).load(store))
    after = all_rows.filter(F.col("topic").isin("Orders", "Audit_Log") & F.col("queue_id").isin(0, 2)
                            & (F.unix_millis("store_timestamp") >= start)
                            & (F.unix_millis("store_timestamp") < end))
    a, b = read_rows(filtered), read_rows(after)
    assert 0 < len(a) < 3000
    assert a == b


# its records carry the id the deleted mqfs.json held: they vouch for nothing
@pytest.mark.allow_logs(r"^queue ends: ", r"^no abort file, but ", r"listed from consumequeue/ instead$")
def test_rocketmq_flavor_store_reads_the_same(spark, tmp_path):
    root = str(tmp_path / "broker")
    build_store(root, 800, seed=7, flavor="rocketmq")
    os.unlink(os.path.join(root, "mqfs.json"))  # as a RocketMQ broker leaves its store
    assert read_rows(spark.read.format("mqfs").load(root)) == expected_rows(root)


def test_streaming_available_now_delivers_appended_messages_once(spark, tmp_path):
    root, out, ckpt = str(tmp_path / "s"), str(tmp_path / "out"), str(tmp_path / "ckpt")
    build_store(root, 500, seed=3)

    def run() -> None:
        q = (spark.readStream.format("mqfs").options(startingOffsets="earliest", topic="Orders,Payments").load(root)
             .writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
             .trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert q.exception() is None

    run()
    first = spark.read.parquet(out).count()
    with MessageStore(root) as s:
        s.put_batch(make_messages(random.Random(4), 400, start=500))
    run()
    got = spark.read.parquet(out).select("msg_id", "topic").collect()
    want = {m for m, r in ((k, v) for k, v in expected_rows(root).items()) if r["topic"] != "Audit_Log"}
    assert 0 < first < len(got)
    assert len(got) == len({r.msg_id for r in got}) == len(want)


def test_writer_appends_once_in_order(spark, tmp_path):
    root = str(tmp_path / "w")
    build_store(root, 10)
    rows = [("Writes", i % 2, f"body-{i}".encode(), [f"w{i}"], "T" if i % 2 else None, {"n": str(i)})
            for i in range(300)]
    df = spark.createDataFrame(rows, "topic string, queue_id int, body binary, keys array<string>, "
                                     "tags string, properties map<string,string>").coalesce(1)
    df.write.format("mqfs").mode("append").save(root)
    with MessageStore(root) as s:
        for q in (0, 1):
            got = s.get_range("Writes", q, 0, 1000)
            assert [bytes(m.body) for m in got] == [r[2] for r in rows if r[1] == q]
            assert all(m.keys == [f"w{m.properties['n']}"] for m in got)


def test_writer_task_retry_skips_what_an_earlier_attempt_wrote(tmp_path):
    from pyspark.sql import Row
    from pyspark.sql.types import StructType
    root = str(tmp_path / "retry")
    build_store(root, 5)
    schema = StructType.fromDDL("topic string, body string")
    writer = MqfsWriter(root, schema, {})
    rows = [Row(topic="Retry", body=f"r{i}") for i in range(50)]
    first = writer.write(iter(rows[:20]))  # an attempt that died after 20 rows
    second = writer.write(iter(rows))  # the retry of the same task
    assert (first.written, second.written, second.skipped) == (20, 30, 20)
    with MessageStore(root) as s:
        assert [bytes(m.body).decode() for m in s.get_range("Retry", 0, 0, 100)] == [r.body for r in rows]


def answers(root: str) -> dict:
    """Everything the store API answers about its messages."""
    out = {}
    with MessageStore(root) as s:
        for topic, nq in sorted(s.topics().items()):
            for q in range(nq):
                lo, hi = s.min_offset(topic, q), s.max_offset(topic, q)
                msgs = s.get_range(topic, q, lo, 1 << 30)
                out[(topic, q)] = (lo, hi, [m.commitlog_offset for m in msgs])
                for m in msgs[::37]:
                    out[("time", topic, q, m.store_timestamp)] = s.offset_by_time(topic, q, m.store_timestamp)
                    out[("id", m.msg_id)] = s.get_by_msgid(m.msg_id).commitlog_offset
                    for k in m.keys:
                        out[("key", topic, k)] = sorted(x.commitlog_offset for x in s.query_key(k, topic))
    return out


def file_bytes(directory: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            out[name] = f.read()
    return out


def test_rebuild_restores_every_answer(spark, store, tmp_path):
    before = answers(store)
    damaged = str(tmp_path / "damaged")
    shutil.copytree(store, damaged)
    shutil.rmtree(os.path.join(damaged, "consumequeue"))
    shutil.rmtree(os.path.join(damaged, "index"))
    out = str(tmp_path / "rebuilt")
    r = rebuild.run(spark, damaged, out)
    assert r["cq_units"] == 3000
    rebuilt_index = file_bytes(os.path.join(out, "index"))
    assert rebuilt_index
    assert answers(out) == before
    # the first open must trust the rebuilt IndexFiles, not delete and re-index them
    assert file_bytes(os.path.join(out, "index")) == rebuilt_index
    assert audit.run(spark, out)["problems"] == 0


def test_rebuild_indexes_a_multi_dispatched_record_once_under_its_own_topic(spark, tmp_path):
    """A record dispatched to LMQ queues is also a row of each: rebuild fed its keys to the
    IndexFiles once per row (19 keys counted for 7 entries written), and whichever row came
    first in the sort (an LMQ queue's, as likely) named the topic its entries were hashed with."""
    root, out = str(tmp_path / "s"), str(tmp_path / "out")
    lmq_store(root)
    layout = store_layout(root)
    entries = sum(len(read_index_file(p, layout.index_slots).entries) for p in index_files(root))
    assert entries
    assert rebuild.run(spark, root, out)["index_keys"] == entries
    assert audit.run(spark, out)["problems"] == 0  # each entry hashes a key under its record's topic


def test_audit_catches_a_corrupted_consume_queue_entry(spark, store, tmp_path):
    assert audit.run(spark, store)["problems"] == 0
    bad = str(tmp_path / "bad")
    shutil.copytree(store, bad)
    cq = os.path.join(bad, "consumequeue", "Orders", "1")
    first = sorted(os.listdir(cq))[0]
    with open(os.path.join(cq, first), "r+b") as f:
        f.seek(20 * 5 + 8)  # size field of unit 5
        f.write((999).to_bytes(4, "big"))
    r = audit.run(spark, bad)
    assert r["problems"] >= 1
    assert any("Orders/1" in p and "999" in p for p in r["shown"])
    assert cli.main(["audit", bad]) == 1
    assert cli.main(["audit", store]) == 0


@pytest.mark.allow_logs(r"^retention: deleted CommitLog file")
def test_audit_passes_what_retention_deleted_and_names_an_oldest_file_it_did_not(spark, tmp_path):
    """Units and IndexFile entries pointing below the CommitLog's first file are what
    retention (or a broker's file deletion) leaves: no problem. An oldest file gone without
    retention is one, as verify says (before, each entry pointing there was a problem, and the
    missing file none)."""
    root, copy = str(tmp_path / "s"), str(tmp_path / "copy")
    with MessageStore(root, small_config()) as s:
        for i in range(200):
            s.put(Message.create("t", os.urandom(500), keys=[f"k{i}"]))
    shutil.copytree(root, copy)
    with MessageStore(root, small_config(retention_bytes=1)) as s:
        s.flush_services.stop()
        assert s.retention.run_once() >= 1
    first = sorted(os.listdir(os.path.join(root, "commitlog")))[0]
    assert int(first) > 0
    r = audit.run(spark, root)
    assert (r["problems"], r["shown"]) == (0, [])
    os.remove(os.path.join(copy, "commitlog", "0" * 20))
    r = audit.run(spark, copy)
    assert r["shown"] == [f"commitlog: CommitLog bytes 0..{int(first)} are missing: the oldest file(s) went, "
                          "but retention never deleted them"], r["shown"]
    verified = subprocess.run([*MQFS, "verify", copy], capture_output=True, text=True, timeout=300)
    assert f"CommitLog bytes 0..{int(first)} are missing" in verified.stdout


def test_export_and_stats_jobs_write_what_they_report(spark, store, tmp_path):
    expected = expected_rows(store)
    out = str(tmp_path / "export")
    assert cli.main(["export", store, out]) == 0
    parts = sorted(d for d in os.listdir(out) if d.startswith("topic="))
    assert parts == sorted(f"topic={t}" for t in {r["topic"] for r in expected.values()})
    exported = spark.read.parquet(out)
    assert exported.count() == len(expected)
    assert sorted(r.commitlog_offset for r in exported.select("commitlog_offset").collect()) == sorted(expected)

    stats_dir = str(tmp_path / "stats")
    assert cli.main(["stats", store, stats_dir]) == 0
    import json
    with open(os.path.join(stats_dir, "stats.json")) as f:
        stats = json.load(f)
    per_topic = {t["topic"]: t["messages"] for t in stats["topics"]}
    for topic in per_topic:
        assert per_topic[topic] == sum(1 for r in expected.values() if r["topic"] == topic)
    assert sum(q["messages"] for q in stats["queues"]) == len(expected)
    with open(os.path.join(stats_dir, "rate.png"), "rb") as f:
        png = f.read(24)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    height = int.from_bytes(png[20:24], "big")
    assert height == round((1.2 + 2 * len(per_topic)) * 100)  # one panel per topic
    span = max(t["last_ms"] for t in stats["topics"]) - min(t["first_ms"] for t in stats["topics"])
    if span >= 100:
        assert 100 <= span // stats["bucket_ms"] <= 250
