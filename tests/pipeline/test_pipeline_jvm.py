"""The JVM reader (pipeline/RecordScan.java and its classes) against the Python reader, the
reference: the same DataFrame read both ways (`reader=python` keeps the Python worker path)
gives the same rows, row for row and column for column, on hypothesis-generated CommitLogs
(both flavors, with and without whole-record checksums, v1 and v2 records, IPv6 hosts,
properties, transactions, fillers, flipped bytes), on compressed bodies (good and bad
streams), on stores the store's writer builds
(several files and partitions, pushed filters, few-queue reads through the units, several
stores, Kafka's shape), and on a broker-written layout."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("pyspark")

from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.types import TimestampType  # noqa: E402

from mqfs.store import Message, MessageStore, StoreConfig  # noqa: E402
from mqfs.store.format import codec, layout  # noqa: E402
from mqfs.store.format.codec import Encoder  # noqa: E402
from mqfs.store.format.compression import deflate  # noqa: E402
from mqfs.store.meta.manifest import write_manifest  # noqa: E402
from tests.pipeline.helpers import build_store, flip_body_byte  # noqa: E402
from tests.store import broker_layouts as layouts  # noqa: E402
from tests.store.broker_guard_layouts import layout_compaction  # noqa: E402
from tests.store.broker_layouts import compressed_workload, json_body  # noqa: E402
from tests.store.helpers import unchecked_bodies  # noqa: E402
from tests.store.test_broker_layouts import _set_policy  # noqa: E402
from tests.store.test_broker_stores import _broker_workload, broker_store  # noqa: E402
from tests.store.test_layout import _FLAVORS, _HOSTS, messages  # noqa: E402
from tests.store.test_resync import INDEXES, WHERE, _flip, _planted_store  # noqa: E402

T0 = 1_700_000_000_000
FILE = 1 << 16
HEADER = ["topic", "queue_id", "queue_offset", "commitlog_offset", "size", "store_timestamp",
          "born_timestamp", "born_host", "store_host", "msg_id", "flag", "sys_flag"]
SHAPES = [  # (options, columns selected; None: every column)
    ({}, None),
    ({}, HEADER),
    ({}, ["body"]),
    ({}, ["keys", "tags", "properties", "commitlog_offset"]),
    ({"records": "all"}, None),
    ({"checksums": "always"}, ["topic", "queue_offset"]),
    ({"shape": "kafka", "includeHeaders": "true"}, None),
    ({"shape": "kafka"}, ["key", "partition", "offset", "timestampType"]),
]


def both(spark, paths, options: dict, columns: list[str] | None = None, where: str | None = None):
    """The rows of one read by each reader, in the same order, and the plans' reader names."""
    out = []
    for reader in ("jvm", "python"):
        df = spark.read.format("mqfs").options(**options, reader=reader).load(paths)
        if where:
            df = df.where(where)
        if columns:
            df = df.select(*columns)
        df = df.select(*[F.unix_micros(f.name).alias(f.name) if isinstance(f.dataType, TimestampType)
                         else F.col(f.name) for f in df.schema.fields])  # any time, even one Python cannot hold
        plan = df._jdf.queryExecution().executedPlan().toString()
        out.append((sorted(df.collect(), key=repr), plan))
    (jvm, jvm_plan), (python, python_plan) = out
    assert "(JVM)" in jvm_plan and "(Python)" in python_plan
    return jvm, python


def same_rows(spark, paths, options: dict, columns: list[str] | None = None, where: str | None = None) -> int:
    jvm, python = both(spark, paths, options, columns, where)
    assert len(jvm) == len(python)
    for a, b in zip(jvm, python):
        assert a == b
    return len(jvm)


_QUEUE_NAMES = st.one_of(st.sampled_from(["%LMQ%a", "%LMQ%b", "Other", "", "%LMQ%x/y", " ", "%LMQ%"]),
                         st.from_regex(r"%LMQ%[a-z]{1,3}", fullmatch=True))
_QUEUE_OFFSETS = st.one_of(st.integers(0, 2**40).map(str), st.sampled_from(
    [" 7 ", "+3", "-2", "1_0", "1__0", "_1", "x", "", "\u0663", "9" * 30, "\xa05"]))


@st.composite
def dispatching(draw):
    """A message (tests/store/test_layout.py's) that may be multi-dispatched: INNER_MULTI_DISPATCH
    and INNER_MULTI_QUEUE_OFFSET lists (of equal or different lengths, names and offsets the
    broker would skip among them), on its topic or a topic that is never dispatched."""
    msg = draw(messages())
    if draw(st.booleans()):
        return msg
    names = draw(st.lists(_QUEUE_NAMES, min_size=1, max_size=3))
    offsets = draw(st.lists(_QUEUE_OFFSETS, min_size=len(names), max_size=len(names) + draw(st.integers(0, 1))))
    topic = draw(st.sampled_from([msg.topic, msg.topic, "%RETRY%g", "rmq_sys_x", "SCHEDULE_TOPIC_XXXX"]))
    props = {**msg.properties, "INNER_MULTI_DISPATCH": ",".join(names),
             "INNER_MULTI_QUEUE_OFFSET": ",".join(offsets)}
    return msg.replace(topic=topic, properties={k: v for k, v in props.items() if v})


@st.composite
def commitlogs(draw):
    """(flavor, CommitLog bytes): records (some multi-dispatched) stamped at their own offsets (and sealed where the
    flavor has trailers), filler records among them, up to two flipped bytes, then zeros, a
    BLANK or nothing to the end of the file."""
    flavor = draw(st.sampled_from(_FLAVORS))
    hosts = draw(st.lists(st.sampled_from(_HOSTS), min_size=1, max_size=2))
    encoders = [Encoder(flavor, h, 4 << 20) for h in hosts]
    buf = bytearray()
    for i, msg in enumerate(draw(st.lists(dispatching(), min_size=1, max_size=14))):
        if draw(st.integers(0, 7)) == 0:
            rec = codec.filler_record(draw(st.integers(130, 400)), len(buf), T0 + i,
                                      encoders[0].store_host_raw, flavor)
        else:
            with unchecked_bodies():  # a body flagged compressed may not inflate, as a broker may hold it
                rec, ts_pos = encoders[i % len(encoders)].encode(msg)
            codec.stamp(rec, ts_pos, i, len(buf), T0 + i)
            if flavor.record_crc:
                codec.seal(rec, flavor)
        buf += rec
    for _ in range(draw(st.integers(0, 2))):
        buf[draw(st.integers(0, len(buf) - 1))] ^= draw(st.integers(1, 255))
    tail = draw(st.sampled_from(["zeros", "blank"]))
    if tail == "blank" and FILE - len(buf) >= 8:
        buf += struct.pack(">ii", FILE - len(buf), layout.MAGIC_BLANK)
    return flavor, bytes(buf[:FILE]).ljust(FILE, b"\0")


def commitlog_store(base: str | os.PathLike, flavor, data: bytes) -> str:
    """A store in a new directory under `base` whose one CommitLog file holds `data`."""
    root = tempfile.mkdtemp(prefix="jvm-", dir=base)
    write_manifest(root, StoreConfig(flavor=flavor.name, record_crc=flavor.record_crc, commitlog_file_size=FILE), None)
    os.makedirs(os.path.join(root, "commitlog"))
    with open(os.path.join(root, "commitlog", "0" * 20), "wb") as f:
        f.write(data)
    return root


@contextmanager
def commitlog_stores(factory: pytest.TempPathFactory, logs) -> Iterator[list[str]]:
    """A generated example's CommitLogs as stores, removed after the example: a run makes
    hundreds, and pytest keeps its temporary directories of the last three runs."""
    work = factory.mktemp("jvm")
    try:
        yield [commitlog_store(work, *log) for log in logs]
    finally:
        shutil.rmtree(work)


# up to 10 CommitLogs per example, by design (one Spark query per reader reads them all): draws
# past hypothesis's entropy limit are drawn again, which its data_too_large check failed on
# about one full run in three
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow,
                                                                  HealthCheck.data_too_large])
@given(logs=st.lists(commitlogs(), min_size=1, max_size=10), shape=st.sampled_from(SHAPES))
def test_generated_commitlogs_read_the_same_both_ways(spark, tmp_path_factory, logs, shape):
    """Damaged records are skipped by both at the same places (the walk, the resync), and every
    other record is the same row, whatever the columns (header-only reads check headers only).
    The CommitLogs of an example are read as several stores (each alone, with its own flavor):
    one Spark query per reader for many CommitLogs."""
    options, columns = shape
    with commitlog_stores(tmp_path_factory, logs) as roots:
        same_rows(spark, roots, {"damagedRecords": "skip", **options}, columns)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Two stores of a few thousand varied messages over several CommitLog files."""
    a, b = (str(tmp_path_factory.mktemp("jvm") / n) for n in ("a", "b"))
    build_store(a, 3000)
    build_store(b, 1500, seed=7)
    return a, b


@pytest.mark.parametrize("options, columns", SHAPES)
def test_a_written_store_reads_the_same_both_ways(spark, stores, options, columns):
    assert same_rows(spark, stores[0], {"minPartitions": "3", **options}, columns) > 2000


@pytest.mark.parametrize("where", [
    "topic = 'Orders'", "topic in ('Orders', 'Audit_Log') and queue_id = 1",
    "queue_offset between 100 and 180", "commitlog_offset >= 1500000",
    "store_timestamp >= timestamp_millis(0)",
])
def test_pushed_filters_read_the_same_both_ways(spark, stores, where):
    same_rows(spark, stores[0], {}, None, where)


@pytest.mark.parametrize("options", [
    {"subscribe": "Payments", "queue": "2"},  # a few queues: read through their units
    {"assign": '{"Orders": [0]}', "startingOffsets": '{"Orders": {"0": 10}}'},
    {"subscribe": "Orders", "shape": "kafka", "includeHeaders": "true"},
])
def test_few_queue_reads_read_the_same_both_ways(spark, stores, options):
    assert same_rows(spark, stores[0], options) > 0


def test_bodies_of_many_batches_read_the_same_both_ways(spark, tmp_path):
    """A task reads several batches (each ends at 2 MiB of bodies: Rows.java) whose body
    column is reused and copied out only when a row is read (Bodies.java): every row gets its
    own record's body, whether Spark collects it or reads it inside an expression."""
    root = str(tmp_path / "s")
    bodies = [os.urandom(6000 + i % 7) for i in range(3000)]
    with MessageStore(root, StoreConfig(commitlog_file_size=32 << 20)) as s:
        s.put_batch([Message.create("t", b, queue_id=i % 3) for i, b in enumerate(bodies)])
    df = spark.read.format("mqfs").load(root)
    assert df.rdd.getNumPartitions() < len(bodies) * 6000 / (2 << 20) / 2  # batches per task
    assert same_rows(spark, root, {}, ["commitlog_offset", "body"]) == len(bodies)
    hashed = df.select(F.sha2("body", 256).alias("h"), F.length("body").alias("n")).collect()
    assert sorted((r.h, r.n) for r in hashed) == sorted((hashlib.sha256(b).hexdigest(), len(b)) for b in bodies)


def test_several_stores_read_the_same_both_ways(spark, stores):
    assert same_rows(spark, list(stores), {}) == 4500
    assert same_rows(spark, list(stores), {}, ["store", "topic", "queue_offset"], "queue_id = 1") > 0


def test_a_damaged_record_fails_both_the_same_way_and_is_skipped_the_same_way(spark, tmp_path):
    root = str(tmp_path / "s")
    build_store(root, 400)
    flip_body_byte(root)
    errors = []
    for reader in ("jvm", "python"):
        with pytest.raises(Exception) as err:
            spark.read.format("mqfs").option("reader", reader).load(root).select("body").collect()
        errors.append(re.search(r"damaged record at CommitLog offset \d+ \([^)]*\): checksum mismatch",
                                str(err.value)).group(0))
    assert errors[0] == errors[1]
    assert same_rows(spark, root, {"damagedRecords": "skip"}) == 399


def test_a_broker_store_reads_the_same_both_ways(spark, tmp_path):
    root = str(tmp_path / "broker")
    broker_store(root, _broker_workload)
    assert same_rows(spark, root, {}) > 0
    assert same_rows(spark, root, {"records": "all"}) > same_rows(spark, root, {"subscribe": "TxTopic"})


def _compressed_and_bad(s) -> None:
    compressed_workload(s)
    for flag in (0x101, 0x201, 0x301, 0x501, 0x1):  # cut short, and a type RocketMQ does not know
        good = deflate(json_body(1), {0x101: "lz4", 0x201: "zstd"}.get(flag, "zlib"))
        with unchecked_bodies():  # streams a broker may hold; mqfs's puts refuse them
            s.put(Message.create("Bad", good[:-4], sys_flag=flag))
    s.put(Message.create("Empty", b"", sys_flag=0x101))
    s.put(Message.create("Bad", deflate(b"fine" * 2000, "lz4"), sys_flag=0x101))


def test_compressed_bodies_inflate_the_same_both_ways(spark, tmp_path):
    """Every compression as the Java producers write it inflates to the same body, and its
    row's sys_flag is a consumer's (COMPRESSED cleared, the type kept); an empty body is not
    inflated (RocketMQ's decode skips it: flag kept); a stream that does not inflate is a
    damaged record to both (skipped), and a read without the body does not inflate at all."""
    root = str(tmp_path / "packed")
    layouts.broker_store(root, _compressed_and_bad)
    assert same_rows(spark, root, {"damagedRecords": "skip"}) == 16 + 2
    assert same_rows(spark, root, {"damagedRecords": "skip", "shape": "kafka"}, ["value", "offset"]) == 18
    assert same_rows(spark, root, {}, ["topic", "queue_offset", "size"]) == 16 + 7
    for reader in ("jvm", "python"):
        rows = (spark.read.format("mqfs").options(reader=reader, damagedRecords="skip").load(root)
                .select("topic", "queue_id", "sys_flag", "body").collect())
        flags = {(r.topic, r.queue_id, r.sys_flag) for r in rows if len(r.body) > 100 or r.topic == "Empty"}
        assert flags == {("Packed", 0, 0x100), ("Packed", 1, 0x200), ("Packed", 2, 0x300), ("Packed", 3, 0),
                         ("Bad", 0, 0x100), ("Empty", 0, 0x101)}, reader
    assert same_rows(spark, root, {"damagedRecords": "skip", "subscribe": "Packed", "queue": "1"}) == 4


@pytest.mark.parametrize("where", sorted(WHERE))
def test_a_record_planted_in_a_body_stays_a_body_both_ways(spark, tmp_path, where):
    """The resync goes on where the chain puts the next record (docs/format.md), never at a
    well-formed record inside a damaged one's intact span."""
    root = str(tmp_path / "s")
    a_at, p_at, b_at = _planted_store(root, str(tmp_path / "scratch"))
    _flip(root, WHERE[where](a_at, p_at))
    jvm, python = both(spark, root, {"damagedRecords": "skip"}, ["commitlog_offset", "topic", "body"])
    assert jvm == python and b_at in {r.commitlog_offset for r in jvm}
    assert p_at not in {r.commitlog_offset for r in jvm} and a_at not in {r.commitlog_offset for r in jvm}


@pytest.mark.parametrize("indexes", sorted(INDEXES))
def test_a_planted_record_whose_outer_header_is_gone_is_no_row_either_way(spark, tmp_path, indexes):
    """A's record magic flipped: no chain says where A ends, and the search's first record
    that checks out is P, planted in A's body with its own position and checksums. Both
    readers take only a record the store's indexes point at (as verify does:
    store/integrity/index_points.py, IndexPoints.java), read from the units and entries, so
    P is no row whatever is left of the indexes, and `victim` keys B alone. Before, both
    readers gave P as a row of T."""
    root = str(tmp_path / "s")
    a_at, p_at, b_at = _planted_store(root, str(tmp_path / "scratch"))
    _flip(root, a_at + layout.MAGIC_POS + 3)
    INDEXES[indexes](root)
    jvm, python = both(spark, root, {"damagedRecords": "skip"}, ["commitlog_offset", "topic", "body", "keys"])
    assert jvm == python
    assert [(r.commitlog_offset, bytes(r.body)) for r in jvm if "victim" in r["keys"]] == [(b_at, b"real")]
    assert p_at not in {r.commitlog_offset for r in jvm} and a_at not in {r.commitlog_offset for r in jvm}


ODD_POLICY = "Bogus"  # a cleanup.policy RocketMQ does not know: the broker fails its reads
FALLBACK = r"""
import sys
from pyspark.sql import SparkSession

root = sys.argv[1]
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
def rows(reader=None):
    df = spark.read.format("mqfs").option("subscribe", "Orders")  # Compacted's reads fail
    df = (df.option("reader", reader) if reader else df).load(root)
    return sorted((r.topic, r.queue_offset, bytes(r.body).hex()) for r in df.collect())
print("ROWS", rows() == rows("python") and rows() != [], flush=True)
try:
    spark.read.format("mqfs").option("reader", "jvm").load(root).count()
except Exception as exc:
    print("REFUSED", [x for x in str(exc).splitlines() if x.startswith("ValueError: mqfs:")], flush=True)
spark.stop()
"""


def test_a_store_with_a_feature_the_jvm_reader_lacks_is_read_by_python_and_said_once(tmp_path):
    """A store with a cleanup.policy RocketMQ does not know (jvmplan.JVM_UNREAD): the default
    read falls back to the Python reader (the same rows), says so in one line once per session
    however many reads; reader=jvm refuses in one line naming the feature and the option that
    reads it."""
    root = str(tmp_path / "odd-policy")
    layout_compaction(root)
    _set_policy(root, ODD_POLICY)
    done = subprocess.run([sys.executable, "-c", FALLBACK, root], capture_output=True, text=True,
                          cwd=str(tmp_path), env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ROWS True" in done.stdout, done.stderr[-3000:]
    said = [x for x in done.stderr.splitlines() if "reading it through Python workers" in x]
    assert said == [f"mqfs: {root} uses unknown-cleanup-policy (topics.json: Compacted cleanup.policy='Bogus'), "
                    "which the JVM reader does not read yet; reading it through Python workers (slower)"], \
        done.stderr[-3000:]
    refused = re.search(r"REFUSED \[(.*)\]", done.stdout)
    assert refused and f"{root} uses unknown-cleanup-policy" in refused.group(1)
    assert "option('reader', 'python')" in refused.group(1)


def test_a_store_with_a_feature_the_jvm_reader_lacks_reads_the_same_by_default(spark, tmp_path):
    root = str(tmp_path / "odd-policy")
    layout_compaction(root)
    _set_policy(root, ODD_POLICY)
    for columns in (None, ["topic", "queue_offset"]):
        default, python = (spark.read.format("mqfs").options(subscribe="Orders", **reader).load(root)
                           for reader in ({}, {"reader": "python"}))
        if columns:
            default, python = default.select(*columns), python.select(*columns)
        assert sorted(default.collect(), key=repr) == sorted(python.collect(), key=repr) != []


@pytest.fixture(scope="module")
def lmq(tmp_path_factory):
    """A broker-written LMQ layout (lmq_store of tests/store/broker_layouts.py) and what its consumers get."""
    root = str(tmp_path_factory.mktemp("lmq") / "s")
    return root, layouts.lmq_store(root)


@pytest.mark.parametrize("options, columns", SHAPES)
def test_lmq_queues_read_the_same_both_ways(spark, lmq, options, columns):
    """A row per queue a record is served in (its own and each LMQ queue it is dispatched
    to), whatever the columns: the rows LMQ consumers get, in both readers."""
    root, workload = lmq
    assert same_rows(spark, root, options, columns) == len(workload.served)


@pytest.mark.parametrize("options, where", [
    ({"subscribe": "%LMQ%b"}, None),  # one LMQ queue: read through its units
    ({"subscribe": "%LMQ%a,Parent", "queue": "0"}, None),
    ({"assign": '{"%LMQ%c": [0]}', "startingOffsets": '{"%LMQ%c": {"0": 1}}'}, None),
    ({}, "topic = '%LMQ%a' and queue_offset >= 2"),
    ({}, "queue_id = 1"),
    ({"shape": "kafka"}, "topic in ('%LMQ%b', '%LMQ%c') and offset < 2"),
])
def test_lmq_queues_read_the_same_both_ways_when_selected(spark, lmq, options, where):
    root, workload = lmq
    jvm, _ = both(spark, root, options, None, where)
    assert same_rows(spark, root, options, None, where) == len(jvm) > 0
    if not options.get("shape"):
        assert {(r.topic, r.queue_id, r.queue_offset): bytes(r.body) for r in jvm}.items() <= workload.served.items()
