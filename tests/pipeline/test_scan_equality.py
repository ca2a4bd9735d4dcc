"""The reader's Arrow batches hold exactly the rows the store's per-message API serves, on
varied stores (batches, properties, unicode keys, IPv6 hosts, broker stores without
mqfs.json or whole-record checksums, flipped bytes), for every column and for header-only
column sets. The reader is called as Spark's Python worker calls it (partitions, then read
per partition), without a SparkSession: the equality is about the rows, not about Spark."""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

pytest.importorskip("pyspark")

from pyspark.sql.types import StructType  # noqa: E402

from mqfs.pipeline.options import read_options  # noqa: E402
from mqfs.pipeline.scan import DamagedRecord  # noqa: E402
from mqfs.pipeline.schema import MESSAGE_SCHEMA  # noqa: E402
from mqfs.pipeline.source import TASK_BYTES, MqfsDataSource, MqfsReader, RangePartition, group_ranges  # noqa: E402
from mqfs.store import Message, MessageStore, StoreConfig  # noqa: E402
from mqfs.store.errors import StoreError  # noqa: E402
from mqfs.store.offline.views import commitlog_files, store_layout  # noqa: E402
from tests.pipeline.helpers import message_row, small_store_config  # noqa: E402
from tests.store.helpers import flip  # noqa: E402

HEADER_COLUMNS = ("topic,queue_id,queue_offset,commitlog_offset,size",
                  "topic,queue_offset", "store_timestamp,born_timestamp,born_host,store_host,msg_id,flag,sys_flag")

TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00\x01\x02 "), min_size=1, max_size=8)
MESSAGE = st.fixed_dictionaries({
    "topic": st.sampled_from(["A", "Orders", "Audit_Log"]),
    "queue": st.integers(0, 2),
    "body": st.one_of(st.binary(max_size=40), st.binary(min_size=200, max_size=3000)),
    "keys": st.lists(TEXT, max_size=3),
    "tags": st.one_of(st.none(), TEXT),
    "props": st.dictionaries(st.sampled_from(["p", "ключ", "x1"]), TEXT, max_size=2),
    "v6": st.booleans(),
})


def config(broker: bool, **more) -> StoreConfig:
    return small_store_config(commitlog_file_size=1 << 16, **({"flavor": "rocketmq"} if broker else {}), **more)


def build(root: str, messages: list[dict], batch: int, broker: bool) -> None:
    cfg = config(broker)
    msgs = [Message.create(m["topic"], m["body"], queue_id=m["queue"], keys=m["keys"], tags=m["tags"],
                           properties=m["props"], born_host=("::1", 7) if m["v6"] else ("10.1.2.3", 9))
            for m in messages]
    with MessageStore(root, cfg) as s:
        for i in range(0, len(msgs), batch):
            s.put_batch(msgs[i:i + batch])
    if broker:
        for name in ("mqfs.json", "config/dispatchState.json", "config/queueEnds.log"):
            if os.path.exists(os.path.join(root, name)):  # as a RocketMQ broker leaves its store
                os.unlink(os.path.join(root, name))


def served(root: str, broker: bool) -> tuple[dict[int, dict], set[int]]:
    """Every row the store's API serves, by CommitLog offset, and the offsets of the queued
    records it refuses as damaged."""
    rows: dict[int, dict] = {}
    damaged: set[int] = set()
    with MessageStore(root, config(broker, read_only=True)) as s:
        for topic in s.topics():
            for q in s.queue_ids(topic):
                for offset in range(s.min_offset(topic, q), s.max_offset(topic, q)):
                    try:
                        m = s.get(topic, q, offset)
                    except StoreError:  # damaged, or a unit recovery could not trust
                        damaged.add(offset)
                        continue
                    rows[m.commitlog_offset] = message_row(m)
    return rows, damaged


def scanned(root: str, pruned: list[str] | None = None, **options: str) -> dict[int, dict]:
    """The reader's rows by CommitLog offset, times in ms and properties as a dict; with
    `pruned`, of a reader given the schema of those columns (as a pruned Spark query's)."""
    if pruned is None:
        reader = MqfsReader(store_layout(root), read_options({"path": root, **options}, streaming=False), None)
    else:
        schema = StructType([f for f in MESSAGE_SCHEMA.fields if f.name in pruned])
        reader = MqfsDataSource({"path": root, **options}).reader(schema)
    rows: dict[int, dict] = {}
    for part in reader.partitions():
        for batch in reader.read(part):
            for row in batch.to_pylist():
                for name in ("store_timestamp", "born_timestamp"):
                    if name in row:
                        row[name] = round(row[name].timestamp() * 1000)
                if "properties" in row:
                    row["properties"] = dict(row["properties"])
                rows[row["commitlog_offset"] if "commitlog_offset" in row else len(rows)] = row
    return rows


def damage_a_record(root: str, rng: random.Random, rows: dict[int, dict], in_body: bool) -> int:
    """Flip one byte of one record (inside its body, or anywhere in it) before the last one (a
    last record that fails its checks is taken for one a writer is still copying in: the
    snapshot ends before it); its CommitLog offset."""
    offset = rng.choice(sorted(o for o, r in rows.items() if not in_body or r["body"])[:-1])
    start, path = [(s, p) for s, p in commitlog_files(root) if s <= offset][-1]
    row = rows[offset]
    with open(path, "rb") as f:
        f.seek(offset - start)
        record = f.read(row["size"])
    at = record.index(row["body"]) + rng.randrange(len(row["body"])) if in_body else rng.randrange(len(record))
    flip(path, offset - start + at, 1 << rng.randrange(8))
    return offset


def project(rows: dict[int, dict], columns: str) -> dict[int, dict]:
    names = columns.split(",")
    return {o: {k: r[k] for k in names} for o, r in rows.items()}


SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(messages=st.lists(MESSAGE, min_size=1, max_size=120), batch=st.sampled_from([1, 7, 50]),
       broker=st.booleans(), pruned=st.sets(st.sampled_from(MESSAGE_SCHEMA.fieldNames()), min_size=1))
def test_the_scan_gives_the_stores_rows(tmp_path_factory, messages, batch, broker, pruned):
    root = str(tmp_path_factory.mktemp("eq") / "store")
    build(root, messages, batch, broker)
    want, damaged = served(root, broker)
    assert not damaged and len(want) == len(messages)
    assert scanned(root) == want
    in_order = ",".join(n for n in MESSAGE_SCHEMA.fieldNames() if n in pruned)
    for columns, got in [(c, scanned(root, columns=c)) for c in HEADER_COLUMNS] + [
            (in_order, scanned(root, pruned=sorted(pruned)))]:  # any columns a query may need
        if "commitlog_offset" in columns.split(","):
            assert got == project(want, columns)
        else:
            assert sorted(map(str, got.values())) == sorted(map(str, project(want, columns).values()))


# a byte flipped in the CommitLog's last 4 KiB: the count records' fingerprint no longer matches
@pytest.mark.allow_logs(r"^queue ends: config/dispatchState.json was written for other CommitLog",
                        r"queueEnds.log was written for other CommitLog bytes")
@SETTINGS
@given(messages=st.lists(MESSAGE, min_size=5, max_size=80), seed=st.integers(0, 1 << 30),
       in_body=st.booleans(), broker=st.booleans())
def test_after_a_flipped_byte_skip_gives_the_rows_the_store_serves(tmp_path_factory, messages, seed,
                                                                   in_body, broker):
    root = str(tmp_path_factory.mktemp("flip") / "store")
    build(root, messages, 10, broker)
    before, _ = served(root, broker)
    assume(sum(1 for r in before.values() if r["body"] or not in_body) > 1)
    rng = random.Random(seed)
    hit = damage_a_record(root, rng, before, in_body)
    want, damaged = served(root, broker)
    got = scanned(root, damagedRecords="skip")
    assert got == want  # every intact record, and none the store refuses
    if hit not in want:  # the flip broke the record: a default read fails naming it
        with pytest.raises(DamagedRecord, match=f"damaged record at CommitLog offset {hit}"):
            scanned(root)
    columns = "topic,queue_id,queue_offset,commitlog_offset,size"
    header = scanned(root, columns=columns, damagedRecords="skip")
    # a header-only read checks headers, not checksums: it serves every record the store
    # serves, with the same values, and a record whose flipped byte left its header whole
    assert {o: header[o] for o in want} == project(want, columns)
    assert set(header) - set(want) <= {hit}
    if in_body:
        assert header[hit] == project(before, columns)[hit]


@given(sizes=st.lists(st.integers(1, 300), min_size=1, max_size=40), min_partitions=st.none() | st.integers(1, 50))
def test_tasks_read_every_piece_once_in_order(sizes, min_partitions):
    pieces = [RangePartition(i, 0, "f", 0, size << 20) for i, size in enumerate(sizes)]
    groups = group_ranges(pieces, min_partitions)
    assert [p for g in groups for p in g.pieces] == pieces
    assert [g.value for g in groups] == list(range(len(groups)))
    assert len(groups) >= min(min_partitions or 1, len(pieces))
    assert all(sum(p.end - p.start for p in g.pieces) <= 2 * TASK_BYTES for g in groups if len(g.pieces) > 1)


def test_a_trailer_too_damaged_to_be_one_is_no_property(tmp_path):
    """A RocketMQ record whose `__CRC32#` trailer lost a digit has no whole-record checksum
    (its body checksum holds); the store's properties leave the trailer out, so do the rows."""
    root = str(tmp_path / "store")
    build(root, [{"topic": "A", "queue": 0, "body": b"x", "keys": ["k"], "tags": "t", "props": {"p": "v"},
                  "v6": False}] * 3, 3, broker=True)
    rows, _ = served(root, True)
    first = min(rows)
    start, path = commitlog_files(root)[0]
    with open(path, "r+b") as f:
        f.seek(first - start + rows[first]["size"] - 2)  # the trailer's last digit
        f.write(b"\n")
    want, damaged = served(root, True)
    assert not damaged and "__CRC32#" not in want[first]["properties"]
    assert scanned(root) == want
    assert scanned(root, pruned=["commitlog_offset", "properties"]) == project(want, "commitlog_offset,properties")
