"""The pipeline on hostile copies of a store RocketMQ's own Java code wrote
(tests/store/java_stores.py): a flipped bit in a record's body, a CommitLog file cut short in
a record. Through both readers every row is the message Java served at its queue offset
(never another's), `damagedRecords=skip` drops only the damaged, the default read fails
naming the record, `pipeline audit` reports the damage, `export` writes no other message,
and no byte of the store changes."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("pyspark")

from mqfs.pipeline import cli  # noqa: E402
from mqfs.pipeline.jobs import audit  # noqa: E402
from tests.store.java_stores import answers, consumer_view, snapshot, unpack  # noqa: E402

KIND = "killed"


def _java() -> dict:
    """{(topic, queue, offset): (CommitLog offset, body)} as Java's consumers got them."""
    out = {}
    for queue in answers(KIND)["queues"]:
        for answer in queue["messages"]:
            seen = consumer_view(queue, answer)
            out[(seen["topic"], seen["queue"], seen["offset"])] = (seen["commitlog"], seen["body"])
    return out


def _a_plain_message(java: dict) -> tuple[tuple[str, int, int], int, bytes]:
    """An Orders message in the middle of the log: its key, CommitLog offset and body."""
    keys = sorted(k for k in java if k[0] == "Orders" and len(java[k][1]) > 8)
    key = keys[len(keys) // 2]
    return key, *java[key]


def _log(root: str) -> str:
    d = os.path.join(root, "commitlog")
    return os.path.join(d, sorted(os.listdir(d))[0])


def flipped_body(root: str, java: dict) -> tuple[str, int, int]:
    """A bit of one record's body flipped (its BODYCRC no longer holds): that message's key."""
    key, at, body = _a_plain_message(java)
    with open(_log(root), "r+b") as f:
        f.seek(at)
        pos = at + f.read(4096).index(body)
        f.seek(pos)
        f.write(bytes([body[0] ^ 0x01]))
    return key


def _rows(spark, root: str, reader: str, options: dict) -> dict:
    rows = (spark.read.format("mqfs").options(reader=reader, damagedRecords="skip", **options).load(root)
            .select("topic", "queue_id", "queue_offset", "commitlog_offset", "body").collect())
    got = {(r.topic, r.queue_id, r.queue_offset): (r.commitlog_offset, bytes(r.body)) for r in rows}
    assert len(got) == len(rows), reader
    return got


def test_a_flipped_body_bit_costs_that_message_only(spark, tmp_path, capsys):
    """A whole read walks the CommitLog, a one-queue read goes through its units: both ways,
    in both readers, every row is Java's and only the damaged message is missing under
    damagedRecords=skip; the default read fails naming its record."""
    java = _java()
    root = unpack(KIND, str(tmp_path))
    key = flipped_body(root, java)
    before = snapshot(root)
    for reader in ("python", "jvm"):
        one_queue = {"assign": json.dumps({key[0]: [key[1]]})}  # a few queues: read through their units
        for options in ({}, one_queue):
            got = _rows(spark, root, reader, options)
            wrong = {k: v for k, v in got.items() if java.get(k) != v}
            assert not wrong, (reader, options, sorted(wrong)[:5])
            want = {k for k in java if not options or k[:2] == key[:2]}
            missing = want - set(got)
            assert missing == {key}, (reader, options, sorted(missing))
        try:
            spark.read.format("mqfs").options(reader=reader, **one_queue).load(root).select("body").collect()
        except Exception as err:
            assert f"damaged record at CommitLog offset {java[key][0]}" in str(err), reader
        else:
            raise AssertionError(f"{reader}: the read of {key[:2]} did not fail")
    found = audit.run(spark, root)
    assert found["problems"] == 1 and f"damaged record at CommitLog offset {java[key][0]}" in found["shown"][0]
    # export stops at the damage: whatever it wrote is Java's messages, and it says so
    out = str(tmp_path / "export")
    assert cli.main(["export", root, out, "-f", "jsonl"]) == 1
    assert f"damaged record at CommitLog offset {java[key][0]}" in capsys.readouterr().err
    for name in sorted(n for n in os.listdir(out) if not n.startswith(("_", "."))) if os.path.isdir(out) else []:
        with open(os.path.join(out, name), "rb") as f:
            for j in map(json.loads, f.read().splitlines()):
                k = (j["topic"], j["queue_id"], j["queue_offset"])
                assert java.get(k, (None,))[0] == j["commitlog_offset"], k
    assert snapshot(root) == before


def test_a_commitlog_file_cut_short_is_refused_in_one_line(spark, tmp_path, capsys):
    """A CommitLog file shorter than its siblings: the broker's load refuses the store
    (MappedFileQueue.load), and so does every pipeline read, naming the sizes; nothing changes."""
    java = _java()
    root = unpack(KIND, str(tmp_path))
    _, at, _ = _a_plain_message(java)
    os.truncate(_log(root), at + 30)
    before = snapshot(root)
    for reader in ("jvm", "python"):
        with pytest.raises(Exception, match="files of different sizes"):
            spark.read.format("mqfs").options(reader=reader, damagedRecords="skip").load(root).collect()
    assert cli.main(["audit", root]) != 0
    assert cli.main(["export", root, str(tmp_path / "export"), "-f", "jsonl"]) != 0
    assert capsys.readouterr().err.count("files of different sizes") == 2
    assert snapshot(root) == before
