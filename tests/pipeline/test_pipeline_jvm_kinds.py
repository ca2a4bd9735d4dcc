"""The JVM reader against the Python reader on the record kinds it reads since issue 35's
kinds: BatchCQ topics' inner batches (a row per packed message at its own queue offset, as a
consumer unwraps it: `unwrap` in store/format/batch.py) on a broker-written layout and on
hypothesis-generated batches, damaged ones included (a batch that does not unwrap is a
damaged record to both: the same failure, the same skips); and compaction topics, read as
the broker serves them from compaction/ (pipeline/compacted.py, Compacted.java), with
damaged units and copies failing both the same way and skipped the same way."""

from __future__ import annotations

import os
import re
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("pyspark")

from mqfs.store import Message  # noqa: E402
from mqfs.store.format import codec  # noqa: E402
from mqfs.store.format.batch import INNER_BATCH_FLAG, NEED_UNWRAP_FLAG, encode_inner  # noqa: E402
from mqfs.store.format.codec import Encoder  # noqa: E402
from mqfs.store.format.compression import compression_flags, deflate  # noqa: E402
from tests.pipeline.test_pipeline_jvm import FILE, SHAPES, T0, both, commitlog_store, commitlog_stores, same_rows  # noqa: E402
from tests.store.broker_guard_layouts import layout_batch_cq, layout_compaction  # noqa: E402
from tests.store.helpers import unchecked_bodies  # noqa: E402
from tests.store.test_layout import _FLAVORS, _HOSTS  # noqa: E402

INNER = NEED_UNWRAP_FLAG | INNER_BATCH_FLAG


@pytest.fixture(scope="module")
def batched(tmp_path_factory):
    """A broker-written BatchCQ layout (layout_batch_cq) and what its consumers get."""
    root = str(tmp_path_factory.mktemp("batched") / "s")
    return root, layout_batch_cq(root)


@pytest.mark.parametrize("options, columns", SHAPES)
def test_batch_cq_topics_read_the_same_both_ways(spark, batched, options, columns):
    root, _ = batched
    assert same_rows(spark, root, options, columns) > 0


def test_inner_batches_read_as_their_consumers_get_them(spark, batched):
    """Each message of the JVM's rows is the one a consumer gets: its queue offset, body,
    keys and tags (BatchWorkload.served), SYSFLAG without the compression bits."""
    root, workload = batched
    jvm, _ = both(spark, root, {"subscribe": workload.topic}, ["topic", "queue_id", "queue_offset", "body",
                                                               "keys", "tags", "commitlog_offset"])
    got = {(r.topic, r.queue_id, r.queue_offset): (bytes(r.body), " ".join(r["keys"]), r.tags) for r in jvm}
    assert got == workload.served
    packed = {r.commitlog_offset for r in jvm if r.queue_offset > 0} & {
        off for recs in workload.records.values() for off, *_ , n in recs if n > 1}
    assert packed  # several rows share a record's CommitLog offset


@pytest.mark.parametrize("where", [
    "queue_offset >= 2 AND queue_offset < 6",
    "queue_id = 1 AND queue_offset = 3",
    "topic = 'Batched' AND queue_offset > 4",
    "commitlog_offset > 0 AND queue_offset < 2",
])
def test_pushed_filters_on_inner_batches_read_the_same_both_ways(spark, batched, where):
    """Offsets are the messages': a filter keeps some messages of a batch and not others."""
    root, _ = batched
    assert same_rows(spark, root, {}, None, where) > 0


def _inner_props(draw) -> dict[str, str]:
    props = {"KEYS": draw(st.sampled_from(["k", "a b", "x y z"])), "TAGS": draw(st.sampled_from(["T", "U"]))}
    return {k: v for k, v in props.items() if draw(st.booleans())}


@st.composite
def inner_batch(draw, encoder: Encoder, flavor, at: int, index: int) -> bytes:
    """An inner-batch record at CommitLog offset `at`: good, or with a body that is cut,
    garbled or does not hold INNER_NUM messages, an INNER_NUM Python's int reads oddly or
    not at all, properties that are not UTF-8."""
    n = draw(st.integers(1, 5))
    msgs = [(draw(st.integers(0, 3)), draw(st.binary(max_size=40)), _inner_props(draw)) for _ in range(n)]
    body = bytearray(encode_inner(msgs))
    num = str(n)
    match draw(st.sampled_from(["good"] * 6 + ["cut", "num", "odd_num", "bad_num", "utf8", "tail"])):
        case "cut":
            del body[draw(st.integers(0, len(body) - 1)):]
        case "num":
            num = str(n + draw(st.sampled_from([-1, 1, 5])))
        case "odd_num":
            num = draw(st.sampled_from([f" {n} ", f"+{n}", "\u0663" if n == 3 else str(n), f"0_{n}"]))
        case "bad_num":
            num = draw(st.sampled_from(["", "x", "1__0", "-1", "0"]))
        case "utf8":  # an inner message's properties, not UTF-8 (its length kept)
            end = len(body)
            body[end - 1] = 0xFF if msgs[-1][2] else body[end - 1]
        case "tail":
            body += draw(st.binary(min_size=1, max_size=25))
    props = {"UNIQ_KEY": f"B{index:04d}", "INNER_BASE": str(index)}
    if num:
        props["INNER_NUM"] = num
    msg = Message(draw(st.sampled_from(["Batched", "Other"])), bytes(body), draw(st.integers(0, 1)), props,
                  sys_flag=draw(st.sampled_from([INNER, INNER, NEED_UNWRAP_FLAG])))
    rec, ts_pos = encoder.encode(msg)
    codec.stamp(rec, ts_pos, index * 10, at, T0 + index)
    if flavor.record_crc:
        codec.seal(rec, flavor)
    return bytes(rec)


@st.composite
def batch_commitlogs(draw):
    """(flavor, CommitLog bytes): inner batches and plain records, a flipped byte or none."""
    flavor = draw(st.sampled_from(_FLAVORS))
    encoder = Encoder(flavor, draw(st.sampled_from(_HOSTS)), 4 << 20)
    buf = bytearray()
    for i in range(draw(st.integers(1, 10))):
        if draw(st.integers(0, 3)) == 0:
            rec, ts_pos = encoder.encode(Message.create("Plain", b"plain %d" % i, queue_id=0))
            codec.stamp(rec, ts_pos, i, len(buf), T0 + i)
            if flavor.record_crc:
                codec.seal(rec, flavor)
            buf += rec
        else:
            buf += draw(inner_batch(encoder, flavor, len(buf), i))
    if draw(st.booleans()):
        buf[draw(st.integers(0, len(buf) - 1))] ^= draw(st.integers(1, 255))
    return flavor, bytes(buf[:FILE]).ljust(FILE, b"\0")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow,
                                                                  HealthCheck.data_too_large])
@given(logs=st.lists(batch_commitlogs(), min_size=1, max_size=8), shape=st.sampled_from(SHAPES))
def test_generated_inner_batches_read_the_same_both_ways(spark, tmp_path_factory, logs, shape):
    """Damaged batches are skipped by both (the same ones), and every message of the others
    is the same row, whatever the columns."""
    options, columns = shape
    with commitlog_stores(tmp_path_factory, logs) as roots:
        same_rows(spark, roots, {"damagedRecords": "skip", **options}, columns)


def _one_batch(body: bytes, num: str, stamped: int = T0, sys_flag: int = INNER) -> tuple[object, bytes]:
    flavor = _FLAVORS[0]
    encoder = Encoder(flavor, _HOSTS[0], 4 << 20)
    with unchecked_bodies():  # a batch flagged compressed may not inflate: as a broker may hold it
        rec, ts_pos = encoder.encode(Message("Batched", body, 0, {"INNER_NUM": num, "INNER_BASE": "0"},
                                             sys_flag=sys_flag))
    codec.stamp(rec, ts_pos, 0, 0, stamped)
    if flavor.record_crc:
        codec.seal(rec, flavor)
    good, _ = encoder.encode(Message.create("Plain", b"after", queue_id=0))
    codec.stamp(good, _, 0, len(rec), T0)
    if flavor.record_crc:
        codec.seal(good, flavor)
    return flavor, (bytes(rec) + bytes(good)).ljust(FILE, b"\0")


@pytest.mark.parametrize("body, num, reason", [
    (encode_inner([(0, b"a", {}), (0, b"b", {})]), "3", "holds 2 messages, INNER_NUM says 3"),
    (encode_inner([(0, b"a", {})])[:-1], "1", "does not fit the batch"),
    (encode_inner([(0, b"a", {"K": "v"})])[:-1] + b"\xff", "1", "are not UTF-8"),
    (encode_inner([(0, b"a", {})]), "one", "has INNER_NUM 'one'"),
])
def test_a_batch_that_does_not_unwrap_fails_both_the_same_way_and_is_skipped_the_same_way(
        spark, tmp_path, body, num, reason):
    root = commitlog_store(tmp_path, *_one_batch(body, num))
    errors = []
    for reader in ("jvm", "python"):
        with pytest.raises(Exception) as err:
            spark.read.format("mqfs").option("reader", reader).load(root).select("topic").collect()
        found = re.search(r"damaged record at CommitLog offset \d+ \([^)]*\): [^;]*", str(err.value))
        assert found, str(err.value)[-2000:]
        errors.append(found.group(0))
    assert errors[0] == errors[1] and reason in errors[0]
    assert same_rows(spark, root, {"damagedRecords": "skip"}) == 1  # the plain record after it


@pytest.mark.parametrize("kind", ["zlib", "lz4", "zstd"])
def test_a_compressed_inner_batch_is_inflated_then_unwrapped_both_ways(spark, tmp_path, kind):
    """A consumer inflates a compressed batch before it unwraps it (docs/format.md, "BatchCQ");
    the JVM reader unwrapped the stored bytes instead, so a good one failed the read. Its
    messages show the batch's SYSFLAG as a consumer's decode leaves it: COMPRESSED cleared,
    the compression type kept (MessageDecoder.decodeMessage copies the record's)."""
    msgs = [(1, b"first", {"KEYS": "k"}), (2, b"second" * 50, {})]
    flags = compression_flags(kind)
    root = commitlog_store(tmp_path, *_one_batch(deflate(encode_inner(msgs), kind), "2", sys_flag=INNER | flags))
    assert same_rows(spark, root, {}) == 3  # the batch's two messages and the plain record
    rows = spark.read.format("mqfs").option("reader", "jvm").load(root).select("topic", "body", "sys_flag").collect()
    assert {(bytes(r.body), r.sys_flag) for r in rows if r.topic == "Batched"} == {
        (b"first", INNER | flags & ~1), (b"second" * 50, INNER | flags & ~1)}


def test_a_compressed_inner_batch_that_does_not_inflate_is_damaged_both_ways(spark, tmp_path):
    """A batch flagged zlib whose stored body is a plain batch (as guard's full run generated:
    SYSFLAG 0xC1, INNER_NUM 1) does not inflate: a damaged record to both readers, never the
    row the JVM reader gave by unwrapping the stored bytes."""
    root = commitlog_store(tmp_path, *_one_batch(encode_inner([(0, b"a", {})]), "1",
                                                 sys_flag=INNER | compression_flags("zlib")))
    errors = []
    for reader in ("jvm", "python"):
        with pytest.raises(Exception) as err:
            spark.read.format("mqfs").option("reader", reader).load(root).select("topic").collect()
        # the same record and why, up to the codec's own words (zlib's or java.util.zip's)
        found = re.search(r"damaged record at CommitLog offset \d+ \([^)]*\): [^;]*?does not inflate",
                          str(err.value))
        assert found, str(err.value)[-2000:]
        errors.append(found.group(0))
    assert errors[0] == errors[1] and "the zlib body of the record at CommitLog offset 0" in errors[0]
    assert same_rows(spark, root, {"damagedRecords": "skip"}) == 1  # the plain record after it


def test_an_inner_batch_with_a_time_past_a_long_of_microseconds_reads_the_same_both_ways(spark, tmp_path):
    """A damaged store time (its ms x 1000 past 2**63 microseconds) wraps as the JVM's longs
    and the plain rows' numpy columns do; the Python reader failed the read with pyarrow's
    OverflowError instead (found by the generated batches above)."""
    body = encode_inner([(0, b"a", {}), (0, b"b", {})])
    root = commitlog_store(tmp_path, *_one_batch(body, "2", stamped=1 << 62))
    assert same_rows(spark, root, {}) == 3  # the batch's two messages and the plain record


def test_a_header_only_count_of_inner_batches_is_the_same_both_ways(spark, batched):
    root, workload = batched
    counts = [spark.read.format("mqfs").options(reader=r, subscribe=workload.topic).load(root).count()
              for r in ("jvm", "python")]
    assert counts == [len(workload.served)] * 2


@pytest.fixture(scope="module")
def compacted(tmp_path_factory):
    """A broker-written compaction layout (layout_compaction) and what the broker serves."""
    root = str(tmp_path_factory.mktemp("compacted") / "s")
    return root, layout_compaction(root)


@pytest.mark.parametrize("options, columns", SHAPES)
def test_compaction_topics_read_the_same_both_ways(spark, compacted, options, columns):
    root, _ = compacted
    assert same_rows(spark, root, options, columns) > 0


def test_a_compaction_topic_reads_as_the_broker_serves_it_both_ways(spark, compacted):
    """The JVM's rows are the versions compaction/ serves, at their offsets; `records=all`
    gives every version the CommitLog holds instead; other topics as before."""
    root, served = compacted
    jvm, _ = both(spark, root, {"subscribe": "Compacted"}, ["topic", "queue_id", "queue_offset", "body"])
    assert {(r.topic, r.queue_id, r.queue_offset): bytes(r.body) for r in jvm} == served
    assert same_rows(spark, root, {"records": "all", "subscribe": "Compacted"}, ["queue_offset"]) == 96
    assert same_rows(spark, root, {"subscribe": "Orders"}) == 3


@pytest.mark.parametrize("where", [
    "queue_offset >= 40 AND queue_offset < 70",
    "queue_id = 1",
    "topic = 'Compacted' AND queue_offset > 40",
    "topic = 'Orders' OR queue_offset = 40",
])
def test_pushed_filters_on_compaction_topics_read_the_same_both_ways(spark, compacted, where):
    root, _ = compacted
    assert same_rows(spark, root, {}, None, where) > 0


def _unit_files(root: str, q: int = 0) -> list[str]:
    d = os.path.join(root, "compaction", "compactionCq", "Compacted", str(q))
    return [os.path.join(d, n) for n in sorted(os.listdir(d))]


def _log_files(root: str, q: int = 0) -> list[str]:
    d = os.path.join(root, "compaction", "compactionLog", "Compacted", str(q))
    return [os.path.join(d, n) for n in sorted(os.listdir(d))]


def _patch(path: str, at: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


def _flip_copy_body(root: str) -> None:
    """A byte of the body of the newest compactionLog file's first copy (BODYCRC then fails)."""
    path = _log_files(root)[-1]
    with open(path, "rb") as f:
        head = f.read(200)
    body = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4  # an IPv4 record's BODY
    _patch(path, body, bytes([head[body] ^ 0x20]))


ATTACKS = {
    "past-the-end": lambda root: _patch(_unit_files(root)[-1], 0, struct.pack(">q", 1 << 40)),
    "missing-log-file": lambda root: os.unlink(_log_files(root)[0]),
    "moved-copy": lambda root: _patch(_unit_files(root)[-1], 28, struct.pack(">q", 3)),
    "other-time": lambda root: _patch(_unit_files(root)[-1], 20, struct.pack(">q", 7)),
    "other-size": lambda root: _patch(_unit_files(root)[-1], 8, struct.pack(">i", 92)),
    "body-flipped": _flip_copy_body,
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_damaged_compaction_unit_or_copy_fails_both_the_same_way_and_is_skipped_the_same_way(
        spark, tmp_path, attack):
    """Each copy is checked against its unit before it is a row (CompactedQueue.read): a unit
    past the files, a file gone, a unit naming another copy, time or size, a copy whose body
    fails its checksum. Both readers fail with the same words; with damagedRecords=skip both
    leave the same copies out, and read every other row."""
    root = str(tmp_path / "s")
    served = layout_compaction(root)
    ATTACKS[attack](root)
    errors = []
    for reader in ("jvm", "python"):
        with pytest.raises(Exception) as err:
            spark.read.format("mqfs").options(reader=reader, subscribe="Compacted").load(root).collect()
        found = re.search(r"mqfs: (compactionCq .*?) \(damagedRecords=skip leaves it out\)", str(err.value))
        assert found, str(err.value)[-2000:]
        errors.append(re.sub(r"(damaged copy at \d+): .*", r"\1", found.group(1)))  # then the decoder's words
    assert errors[0] == errors[1]
    n = same_rows(spark, root, {"damagedRecords": "skip", "subscribe": "Compacted"})
    assert 0 < n < len(served)


@pytest.mark.parametrize("options, columns", [({}, None), ({"shape": "kafka"}, ["offset", "value"])])
def test_several_stores_of_both_kinds_read_the_same_both_ways(spark, batched, compacted, options, columns):
    """A BatchCQ store and a compaction store as one read: each store's partitions (inner
    batches, compaction copies) name their store."""
    n = same_rows(spark, [batched[0], compacted[0]], options, columns)
    assert n == same_rows(spark, batched[0], options, columns) + same_rows(spark, compacted[0], options, columns)
