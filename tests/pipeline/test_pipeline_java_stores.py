"""The pipeline on stores RocketMQ 5's own Java DefaultMessageStore and RocksDBMessageStore
wrote (tests/store/java_stores.py): `format("mqfs")` through both readers, and `shape=kafka`, gives
every message a consumer of the broker got, row for row and column for column against Java's
getMessage answers (consumer_view), `mqfs pipeline audit` finds nothing wrong and `export`
writes what `mqfs dump` prints; no byte of the broker's files changes. The store RocketMQ's
recovery cut (truncated) ends where the broker served it: the valid records past the cut are
no rows."""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import functions as F  # noqa: E402

from mqfs.pipeline import cli  # noqa: E402
from mqfs.pipeline.jobs import audit  # noqa: E402
from mqfs.store import MessageStore  # noqa: E402
from tests.fusefs.helpers import MQFS  # noqa: E402
from tests.pipeline.helpers import host  # noqa: E402
from tests.store.java_stores import READ, ROCKSDB, answers, consumer_view, snapshot, unpack  # noqa: E402
from tests.store.test_java_stores import expected, read_only  # noqa: E402

KINDS = [*READ, "truncated", "resumed"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """{kind: (root, its snapshot, {(topic, queue, offset): (Java's answer in mqfs's terms,
    the StoredMessage)})}, unpacked once: the pipeline only reads them."""
    out = {}
    for kind in KINDS:
        root = unpack(kind, str(tmp_path_factory.mktemp(kind)))
        before = snapshot(root)
        want = {}
        with MessageStore(root, read_only(), create=False) as s:
            for queue in answers(kind)["queues"]:
                for answer in queue["messages"]:
                    m = s.get(queue["topic"], queue["queue"], answer["at"])
                    seen = consumer_view(queue, answer)
                    key = (seen["topic"], seen["queue"], seen["offset"])
                    java = {k: v for k, v in expected(queue, answer, m).items() if k != "reconsume"}  # no column
                    want[key] = (java, m)
        assert snapshot(root) == before
        out[kind] = (root, before, want)
    return out


def as_java(r) -> dict:
    """A row in the shape of `expected`'s answer (times in ms, keys joined as KEYS holds them)."""
    return dict(offset=r.queue_offset, topic=r.topic, queue=r.queue_id, commitlog=r.commitlog_offset,
                size=r.size, sysflag=r.sys_flag, flag=r.flag, born=round(r.born_timestamp.timestamp() * 1000),
                stored=round(r.store_timestamp.timestamp() * 1000), offsetmsgid=r.msg_id,
                msgid=dict(r.properties).get("UNIQ_KEY", r.msg_id),
                properties=dict(r.properties), body=bytes(r.body), tags=r.tags, keys=" ".join(r["keys"]) or None)


@pytest.mark.parametrize("reader", ["jvm", "python"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_message_is_a_row_as_the_broker_served_it(spark, stores, kind, reader):
    root, before, want = stores[kind]
    df = spark.read.format("mqfs").option("reader", reader).load(root)
    assert f"({reader.upper() if reader == 'jvm' else 'Python'})" in df._jdf.queryExecution().executedPlan().toString()
    rows = df.collect()
    got = {(r.topic, r.queue_id, r.queue_offset): r for r in rows}
    assert len(got) == len(rows)
    assert sorted(got) == sorted(want)
    for key, r in got.items():
        java, m = want[key]
        assert as_java(r) == java, key
        assert (r.born_host, r.store_host) == (host(m.born_host), host(m.store_host)) == ("127.0.0.1:50000",
                                                                                         "127.0.0.1:10911"), key
    assert snapshot(root) == before



SELECTIONS = [  # (options, where): few-queue reads through the units, LMQ, BatchCQ, pushed filters
    ({"subscribe": "%LMQ%room1"}, None),
    ({"assign": '{"Events": [1], "%LMQ%room2": [0]}'}, None),
    ({"subscribe": "Orders", "startingOffsets": '{"Orders": {"0": 5, "1": 7}}',
      "endingOffsets": '{"Orders": {"0": 9}}'}, None),
    ({"subscribe": "Batched"}, "queue_offset >= 3 AND queue_offset < 12"),
    ({}, "topic = '%LMQ%room2' AND queue_offset >= 2 OR topic IN ('Packed', 'Timed')"),
]


@pytest.mark.parametrize("reader", ["jvm", "python"])
def test_selections_give_the_brokers_messages_of_the_queues_selected(spark, stores, reader):
    root, before, want = stores["clean"]
    for options, where in SELECTIONS:
        df = spark.read.format("mqfs").options(**options, reader=reader).load(root)
        got = {(r.topic, r.queue_id, r.queue_offset): r for r in (df.where(where) if where else df).collect()}
        assert got, (options, where)
        for key, r in got.items():
            assert as_java(r) == want[key][0], (options, where, key)
    assert snapshot(root) == before

@pytest.mark.parametrize("reader", ["jvm", "python"])
def test_kafkas_shape_gives_what_the_brokers_consumers_got(spark, stores, reader):
    for root, before, want in stores.values():
        df = (spark.read.format("mqfs").options(shape="kafka", includeHeaders="true", reader=reader).load(root)
              .withColumn("ms", F.unix_millis("timestamp")))
        got = {(r.topic, r.partition, r.offset): r for r in df.collect()}
        assert sorted(got) == sorted(want)
        for key, r in got.items():
            java, _ = want[key]
            assert (r.key, r.value, r.ms, r.timestampType) == (
                None if java["keys"] is None else java["keys"].encode(), java["body"], java["stored"], 1), key
            assert {h.key: h.value.decode() for h in r.headers} == java["properties"], key
            assert len(r.headers) == len(java["properties"])
        assert snapshot(root) == before


def test_audit_finds_nothing_and_export_writes_what_dump_prints(spark, stores, tmp_path):
    for kind, (root, before, want) in stores.items():
        found = audit.run(spark, root)
        assert found["problems"] == 0, (kind, found["shown"])
        # a RocksDB ConsumeQueue has no unit files: said once, not 16 queues "short of units"
        assert [n if kind in ("truncated", "resumed") else n.split(",")[0] for n in found["notes"]] == (
            ["consumequeue/ is the broker's RocksDB ConsumeQueue"] if kind in ROCKSDB else
            # Orders/0's unit 40 and Timed/0's 1 and 2 (the broker indexed none of their keys)
            ["3 ConsumeQueue units past where the broker's recovery cut the log (CommitLog offset 65873; "
             "it serves it to 65873): it no longer serves their records (`mqfs repair` offers to cut there)"]
            if kind == "truncated" else
            # Timed/0's units 1 (dropped: the broker wrote over its record) and 2
            ["2 ConsumeQueue units past where the broker's recovery cut the log (CommitLog offset 65873; "
             "it serves it to 66070): it no longer serves their records (`mqfs repair` offers to cut there)"]
            if kind == "resumed" else []), kind
        out = str(tmp_path / kind)
        assert cli.main(["export", root, out, "-f", "jsonl"]) == 0
        lines = []
        for name in sorted(n for n in os.listdir(out) if not n.startswith(("_", "."))):
            with open(os.path.join(out, name), "rb") as f:
                lines += f.read().splitlines()
        dumped = subprocess.run([*MQFS, "dump", root, "-f", "json"], capture_output=True, timeout=300)
        assert dumped.returncode == 0, dumped.stderr
        assert sorted(lines) == sorted(dumped.stdout.splitlines())
        bodies = [base64.b64decode(j["body_b64"]) if "body_b64" in j else j["body"].encode()
                  for j in map(json.loads, lines)]
        assert sorted(bodies) == sorted(java["body"] for java, _ in want.values())
        assert snapshot(root) == before


def test_audit_finds_an_lmq_unit_pointing_at_a_record_not_dispatched_there(spark, tmp_path):
    """LMQ units are checked against the records' dispatch (INNER_MULTI_DISPATCH and its
    offsets), not passed: %LMQ%room1's unit 1 pointed at a Chat record dispatched to room2 alone."""
    root = unpack("clean", str(tmp_path))
    java = {(q["topic"], a["at"]): a for q in answers("clean")["queues"] if q["topic"].startswith("%LMQ%")
            for a in q["messages"]}
    other = java[("%LMQ%room2", 1)]
    assert other["commitlog"] not in {a["commitlog"] for (t, _), a in java.items() if t == "%LMQ%room1"}
    with open(os.path.join(root, "consumequeue", "%LMQ%room1", "0", "0" * 20), "r+b") as f:
        f.seek(20)
        f.write(struct.pack(">qi", other["commitlog"], other["size"]))
    found = audit.run(spark, root)
    assert found["shown"][0] == (f"consumequeue %LMQ%room1/0: unit 1 points at offset {other['commitlog']}, "
                                 "a record of Chat/0 at queue offset 1"), found


def test_rebuild_refuses_a_store_with_a_batch_cq_topic_in_one_line_writing_nothing(spark, stores, tmp_path, capsys):
    """Rebuild writes consumequeue/ units only: on the Java store it failed partway ('queue
    Batched/0: no record carries queue offset 2 ... run `mqfs verify`', which finds nothing),
    leaving OUT half made."""
    root, before, _ = stores["clean"]
    out = str(tmp_path / "out")
    assert cli.main(["rebuild", root, out]) == 1
    err = capsys.readouterr().err.strip()
    assert err == ("mqfs pipeline rebuild: BatchCQ topic Batched (its queues live in batchconsumequeue/) "
                   "cannot be rebuilt yet; nothing was written"), err
    assert not os.path.exists(out)
    assert snapshot(root) == before
