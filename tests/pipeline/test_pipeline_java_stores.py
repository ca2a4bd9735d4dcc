"""The pipeline on stores RocketMQ 5's own Java DefaultMessageStore wrote
(tests/store/java_stores.py): `format("mqfs")` through both readers, and `shape=kafka`, gives
every message a consumer of the broker got, row for row and column for column against Java's
getMessage answers (consumer_view); no byte of the broker's files changes."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import functions as F  # noqa: E402

from mqfs.store import MessageStore  # noqa: E402
from tests.pipeline.helpers import host  # noqa: E402
from tests.store.java_stores import KINDS, answers, consumer_view, snapshot, unpack  # noqa: E402
from tests.store.test_java_stores import expected, read_only  # noqa: E402


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
                    want[key] = ({**expected(queue, answer, m), "tags": seen["tags"], "keys": seen["keys"]}, m)
        assert snapshot(root) == before
        out[kind] = (root, before, want)
    return out


def as_java(r) -> dict:
    """A row in the shape of `expected`'s answer (times in ms, keys joined as KEYS holds them)."""
    return dict(offset=r.queue_offset, topic=r.topic, queue=r.queue_id, commitlog=r.commitlog_offset,
                size=r.size, sysflag=r.sys_flag, flag=r.flag, born=round(r.born_timestamp.timestamp() * 1000),
                stored=round(r.store_timestamp.timestamp() * 1000), offsetmsgid=r.msg_id,
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

