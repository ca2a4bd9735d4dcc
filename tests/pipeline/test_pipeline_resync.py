"""The Spark readers' resync after a lost header, attacked (issue 33, item 6).

A record P planted in the body of a record A (well-formed, its own PHYSICALOFFSET and
checksums), A's record magic flipped: no chain says where A ends, so a walk searches for the
next record that checks out, and P is the first. Both readers (Python and JVM) take only a
record one of the store's indexes points at (store/integrity/index_points.py,
pipeline/IndexPoints.java), as verify does. Here on a store of three CommitLog files (the
damage in the first, so its read is not cut short by the end of the log), mqfs's and a
broker's (no mqfs.json, no config/), with the IndexFile headers zeroed, consumequeue/
deleted, or both, and with the read cut into pieces where a piece ends at the damage or a
nominal cut falls inside A or inside P: the same rows both ways, every record but A, never
P; and `pipeline audit` names the one damaged record `verify` names."""

from __future__ import annotations

import os
import shutil
import struct

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import functions as F  # noqa: E402

from mqfs.pipeline.jobs import audit  # noqa: E402
from mqfs.pipeline.source import commitlog_end, plan_partitions  # noqa: E402
from mqfs.store import Message, MessageStore  # noqa: E402
from mqfs.store.format import layout  # noqa: E402
from mqfs.store.integrity.verify import verify_store  # noqa: E402
from mqfs.store.offline.views import store_layout  # noqa: E402
from mqfs.store.repair import apply_repair, plan_repair  # noqa: E402
from tests.store.helpers import flip, small_config  # noqa: E402

pytestmark = pytest.mark.allow_logs(r"^recovery: ")


class Planted:
    """The store: where A, P and B (the record after A) are, and every record put but A."""

    def __init__(self, root: str, a_at: int, p_at: int, p_end: int, b_at: int, kept: set[int]):
        self.root, self.a_at, self.p_at, self.p_end, self.b_at, self.kept = root, a_at, p_at, p_end, b_at, kept


def _config(broker: bool):
    # a broker's IndexFiles hold 4 entries a slot: their size tells a reader their shape
    return small_config(record_crc=False, flavor="rocketmq" if broker else "xxhash", index_slots=64,
                        index_entries=256)


def _planted(tmp_path, broker: bool) -> Planted:
    root, scratch = str(tmp_path / "s"), str(tmp_path / "scratch")
    with MessageStore(scratch, _config(broker)) as s:
        r = s.put(Message.create("T", b"planted", queue_id=0, keys=["victim"]))
        mf = s.commitlog.queue.find(r.commitlog_offset)
        at = r.commitlog_offset - mf.file_from_offset
        planted = bytearray(mf.buffer()[at:at + r.size])
    kept = set()
    with MessageStore(root, _config(broker)) as s:
        for i in range(60):
            kept.add(s.put(Message.create("T", bytes([i]) * 600, queue_id=i % 4, keys=[f"k{i}"])).commitlog_offset)
        a_at = s.commitlog.max_offset
        p_at = a_at + layout.body_pos(8, 8) + 16
        struct.pack_into(">q", planted, layout.PHYSICAL_OFFSET_POS, p_at)
        a = s.put(Message.create("Other", b"x" * 16 + bytes(planted) + b"y" * 16, queue_id=0))
        assert a.commitlog_offset == a_at
        b = s.put(Message.create("T", b"real", queue_id=0, keys=["victim"]))
        kept.add(b.commitlog_offset)
        for i in range(200):
            kept.add(s.put(Message.create("T", bytes([i]) * 600, queue_id=i % 4, keys=[f"m{i}"])).commitlog_offset)
    assert len(os.listdir(os.path.join(root, "commitlog"))) >= 3
    if broker:
        os.unlink(os.path.join(root, "mqfs.json"))
        shutil.rmtree(os.path.join(root, "config"))
    flip(os.path.join(root, "commitlog", "0" * 20), a_at + layout.MAGIC_POS + 3, 0x01)
    return Planted(root, a_at, p_at, p_at + len(planted), b.commitlog_offset, kept)


def _index_headers_zeroed(root: str) -> None:
    for name in os.listdir(os.path.join(root, "index")):
        with open(os.path.join(root, "index", name), "r+b") as f:
            f.write(bytes(40))


INDEXES = {"intact": lambda root: None,
           "index-headers-zeroed": _index_headers_zeroed,
           "consumequeue-deleted": lambda root: shutil.rmtree(os.path.join(root, "consumequeue")),
           "both": lambda root: (_index_headers_zeroed(root), shutil.rmtree(os.path.join(root, "consumequeue")))}


def _rows(spark, root: str, reader: str, options: dict) -> list[tuple]:
    df = spark.read.format("mqfs").options(damagedRecords="skip", reader=reader, **options).load(root)
    return sorted((r.commitlog_offset, r.topic, r.queue_id, bytes(r.body), tuple(r["keys"]))
                  for r in df.select("commitlog_offset", "topic", "queue_id", "body", "keys").collect())


def _same_rows_never_p(spark, p: Planted, options: dict) -> None:
    jvm, python = (_rows(spark, p.root, reader, options) for reader in ("jvm", "python"))
    assert jvm == python
    assert {r[0] for r in python} == p.kept  # every record but A (and never P, inside it)
    assert [(r[0], r[3]) for r in python if "victim" in r[4]] == [(p.b_at, b"real")]


@pytest.mark.parametrize("broker", [False, True], ids=["mqfs", "broker"])
@pytest.mark.parametrize("indexes", sorted(INDEXES))
def test_both_readers_and_audit_pass_over_a_planted_record(spark, tmp_path, broker, indexes):
    p = _planted(tmp_path, broker)
    INDEXES[indexes](p.root)
    _same_rows_never_p(spark, p, {})
    verified = verify_store(p.root)
    assert [line for line in verified.lines if "damaged CommitLog bytes" in line] == \
        [line for line in verified.lines if f"damaged CommitLog bytes {p.a_at}..{p.b_at} " in line]
    audited = audit.run(spark, p.root)
    damaged = [line for line in audited["shown"] if "damaged record" in line]
    assert damaged == [f"commitlog {'0' * 20}: damaged record at CommitLog offset {p.a_at} (byte {p.a_at}): "
                       "broken record header"], audited["shown"]


def _cut(p: Planted, where: str) -> int:
    """A minPartitions whose nominal cuts (multiples of the share: source.plan_partitions)
    put one in [lo, hi) of the first file: inside A before P, or inside P."""
    lo, hi = {"in-A-before-P": (p.a_at + 1, p.p_at), "in-P": (p.p_at, p.p_end)}[where]
    view = store_layout(p.root)
    total = commitlog_end(view)  # the bytes planned: every file's, the last one's to its records' end
    for n in range(2, 4096):
        share = -(-total // n)
        if any(lo <= k * share < hi for k in range(1, hi // share + 1)):
            starts = {part.file_from + part.start for part in plan_partitions(view, n, False)}
            assert p.b_at in starts and p.p_at not in starts  # the cut moves on to B
            return n
    raise AssertionError(f"no minPartitions cuts in {lo}..{hi}")


@pytest.mark.parametrize("broker", [False, True], ids=["mqfs", "broker"])
@pytest.mark.parametrize("where", ["in-A-before-P", "in-P"])
def test_a_cut_inside_the_damaged_record_or_the_planted_one_moves_on_to_the_next_record(spark, tmp_path, broker,
                                                                                        where):
    """The piece before the cut ends at B, so its resync after A has only A's span to search
    (and finds nothing an index points at there); the next piece starts at B. (Cuts need
    units, so the IndexFile headers are what is damaged here; without consumequeue/ a file
    is one piece.)"""
    p = _planted(tmp_path, broker)
    INDEXES["index-headers-zeroed"](p.root)
    _same_rows_never_p(spark, p, {"minPartitions": str(_cut(p, where))})


def test_the_rows_after_repair_are_the_same_both_ways(spark, tmp_path):
    """repair fills A's range (a filler, never a row) and keeps B: both readers, no damage left."""
    p = _planted(tmp_path, False)
    apply_repair(plan_repair(p.root))
    assert verify_store(p.root).ok
    _same_rows_never_p(spark, p, {})
    assert audit.run(spark, p.root)["problems"] == 0
    jvm = spark.read.format("mqfs").option("reader", "jvm").load(p.root).where(F.col("commitlog_offset") == p.p_at)
    assert jvm.count() == 0


@pytest.mark.parametrize("broker", [False, True], ids=["mqfs", "broker"])
def test_damage_in_the_newest_file_with_consumequeue_deleted_does_not_end_the_read(spark, tmp_path, broker):
    """The read's end is where the chain after the last unit stops (source.records_end); with
    no unit past the damage it went on from the file's start and stopped at A: the read
    ended there, silently, even with damagedRecords=fail (5 rows of 20, no warning, and no
    damage for `pipeline audit` to see). Now the chain goes on where the resync puts the
    next record, so A fails the read, or is skipped, and the rest is read."""
    root = str(tmp_path / "s")
    kept = []
    with MessageStore(root, _config(broker)) as s:
        for i in range(20):
            kept.append(s.put(Message.create("T", b"z" * 300, queue_id=i % 2, keys=[f"k{i}"])).commitlog_offset)
    a_at = kept.pop(5)
    shutil.rmtree(os.path.join(root, "consumequeue"))
    if broker:
        os.unlink(os.path.join(root, "mqfs.json"))
        shutil.rmtree(os.path.join(root, "config"))
    flip(os.path.join(root, "commitlog", "0" * 20), a_at + layout.MAGIC_POS + 3, 0x01)
    jvm, python = (_rows(spark, root, reader, {}) for reader in ("jvm", "python"))
    assert jvm == python and [r[0] for r in python] == kept
    for reader in ("jvm", "python"):
        with pytest.raises(Exception, match=f"damaged record at CommitLog offset {a_at} "):
            spark.read.format("mqfs").option("reader", reader).load(root).select("body").collect()


@pytest.mark.parametrize("written", [4, 40])
def test_a_record_still_being_copied_in_still_ends_the_read(tmp_path, written):
    """A live writer's last record, copied in up to `written` bytes (TOTALSIZE alone, or the
    header's start), then zeros: the read ends before it, as before the resync went on past
    damage (what follows is zeros, so the resync finds nothing)."""
    root = str(tmp_path / "s")
    with MessageStore(root, _config(False)) as s:
        last = [s.put(Message.create("T", b"z" * 300, keys=[f"k{i}"])) for i in range(10)][-1]
    path = os.path.join(root, "commitlog", "0" * 20)
    with open(path, "r+b") as f:
        f.seek(last.commitlog_offset + written)
        f.write(bytes(last.size - written))
    shutil.rmtree(os.path.join(root, "consumequeue"))
    assert commitlog_end(store_layout(root)) == last.commitlog_offset


@pytest.mark.parametrize("attack", ["intact", "hole", "tail_mid_record", "tail_past_end", "tail_first_record"])
def test_the_end_holds_whatever_unit_the_queue_end_bisection_finds(tmp_path, attack):
    """A queue's last unit is found by bisection in its newest ConsumeQueue file
    (QueueReader.last_unit: written units, then zeros), not by checking the file whole. A
    hole in the units stops it early (an earlier start: the chain goes on from there);
    units written over the file's zeros (at 50..99 of 100) make it take unit 99, pointing
    inside a record, past the records, or at the first one: records_end takes only a start
    whose record checks out, so the end is the records' end every time."""
    root = str(tmp_path / "s")
    with MessageStore(root, _config(False)) as s:
        last = [s.put(Message.create("T", b"z" * 300, keys=[f"k{i}"])) for i in range(30)][-1]
    end = last.commitlog_offset + last.size
    cq = os.path.join(root, "consumequeue", "T", "0", "0" * 20)
    bogus = {"tail_mid_record": last.commitlog_offset + 7, "tail_past_end": end + 1000,
             "tail_first_record": 0}
    with open(cq, "r+b") as f:
        if attack == "hole":
            f.seek(25 * 20)
            f.write(bytes(20))
        elif attack in bogus:
            f.seek(50 * 20)
            f.write(struct.pack(">qiq", bogus[attack], 300, 0) * 50)
    assert commitlog_end(store_layout(root)) == end


def _jvm_rows(plan: dict, tmp: str) -> list[int]:
    """The commitlog_offset of each row the JVM reader gives for one partition's plan
    (tests/pipeline/ReadPlan.java, compiled with pipeline/*.java as they are now)."""
    import glob
    import json
    import subprocess

    import pyspark

    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars", "*")
    here = os.path.dirname(os.path.abspath(__file__))
    sources = [*sorted(glob.glob(os.path.join(here, "..", "..", "pipeline", "*.java"))),
               os.path.join(here, "ReadPlan.java")]
    subprocess.run(["javac", "-nowarn", "-d", tmp, "-cp", jars, *sources], check=True)
    out = subprocess.run(["java", "-cp", f"{tmp}{os.pathsep}{jars}", "org.mqfs.spark.ReadPlan", json.dumps(plan)],
                         check=True, capture_output=True, text=True).stdout
    return [int(line) for line in out.split()]


@pytest.mark.parametrize("where", ["totalsize", "bodylen"])
def test_a_piece_that_ends_where_the_chain_goes_on_stops_there_both_ways(tmp_path, where):
    """A piece that ends at B (where a cut after A is placed) with A's TOTALSIZE or BODYLEN one
    off and no index at all (consumequeue/ and index/ deleted: nothing refuses P): the chain
    ends are the file's, B checks out at the piece's end, so both readers' walks of the piece
    stop there, as the whole file's walk jumps from A to B. Before, the piece's end clipped
    A's chain ends, they no longer agreed, and both readers searched A's body and gave P."""
    from mqfs.pipeline.jvmplan import _describe
    from mqfs.pipeline.options import read_options
    from mqfs.pipeline.source import MqfsReader, RangeGroup, RangePartition

    p = _planted(tmp_path, False)
    path = os.path.join(p.root, "commitlog", "0" * 20)
    flip(path, p.a_at + layout.MAGIC_POS + 3, 0x01)  # A's magic back
    flip(path, p.a_at + (3 if where == "totalsize" else layout.body_len_pos(8, 8) + 3), 0x01)
    shutil.rmtree(os.path.join(p.root, "consumequeue"))
    shutil.rmtree(os.path.join(p.root, "index"))
    reader = MqfsReader(store_layout(p.root), read_options({"path": p.root, "damagedRecords": "skip"},
                                                           streaming=False), None)
    piece = RangeGroup(0, [RangePartition(0, 0, path, 0, p.b_at)])
    python = [int(x) for batch in reader.read(piece) for x in batch.column("commitlog_offset").to_pylist()]
    assert python == sorted(at for at in p.kept if at < p.a_at)
    jvm = _jvm_rows(_describe(reader, piece, None, {}), str(tmp_path / "classes"))
    assert jvm == python


@pytest.mark.parametrize("damage", ["none", "first_header", "units_past_end"])
def test_the_next_file_a_broker_made_ahead_is_no_part_of_the_log(tmp_path, damage):
    """RocketMQ makes its next CommitLog file ahead (all zeros); a killed broker leaves it
    (tests/store/java_stores `killed`). The end is in the file before it: it was that file's
    start, so the read took the zeros after the last record for a broken header and failed.
    A newest file is still read where a unit vouches for a record in it though its first
    header is lost, and a unit pointing into the zeros does not make them the end."""
    root = str(tmp_path / "s")
    with MessageStore(root, _config(False).replace(commitlog_file_size=4096)) as s:
        last = [s.put(Message.create("T", b"z" * 300, keys=[f"k{i}"])) for i in range(20)][-1]
    end = last.commitlog_offset + last.size
    size = 4096
    ahead = os.path.join(root, "commitlog", f"{(end // size + 1) * size:020d}")
    with open(ahead, "wb") as f:
        f.write(bytes(size))
    if damage == "first_header":
        newest = os.path.join(root, "commitlog", f"{end // size * size:020d}")
        with open(newest, "r+b") as f:
            f.write(bytes(8))
    elif damage == "units_past_end":
        with open(os.path.join(root, "consumequeue", "T", "0", "0" * 20), "ab") as f:
            f.write(struct.pack(">qiq", (end // size + 1) * size, 300, 0))
    assert commitlog_end(store_layout(root)) == end
