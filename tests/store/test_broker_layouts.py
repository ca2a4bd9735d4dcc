"""RocketMQ 5 layouts (tests/store/broker_layouts.py builds them as a broker writes them) shown as
their consumers see them: in the store API, verify, repair, the mounts and the Spark source."""

import errno
import json
import os
import shutil
import struct
import subprocess
import time
import zlib

import pytest

from mqfs.store import Message, MessageStore
from mqfs.store.errors import CorruptionError, NotFound
from mqfs.store.format import batch
from mqfs.store.format.compression import COMPRESSION_TYPE_MASK, deflate
from mqfs.store.format.jsonl import decode_line
from mqfs.store.integrity.verify import verify_store
from mqfs.store.repair import plan_repair
from tests.fusefs.helpers import mounted, mqfs, needs_fuse, sh
from tests.store.broker_layouts import (
    BATCH_PLAN,
    BATCH_T0,
    COMPRESSIONS,
    LmqWorkload,
    broker_store,
    compressed_workload,
    ext_store,
    json_body,
    lmq_store,
    store_hashes,
)
from tests.store.helpers import flip, small_config, unchecked_bodies

# a broker leaves no dispatchState.json: a read-write open cannot tell its clean close
pytestmark = pytest.mark.allow_logs("not the one the last clean close left")


def _compressed(root: str) -> dict:
    served: dict = {}
    broker_store(root, lambda s: served.update(compressed_workload(s)))
    return served


def _unchanged_by_verify_and_repair(root: str) -> None:
    """verify finds nothing, and `repair --yes` changes no byte of the store."""
    before = store_hashes(root)
    report = verify_store(root)
    assert report.ok, report.lines
    assert not plan_repair(root).needed
    out = mqfs("repair", "--yes", root).stdout
    assert "nothing to repair" in out
    assert store_hashes(root) == before


@pytest.mark.parametrize("read_only", [True, False])
def test_the_store_api_gives_inflated_bodies_and_keeps_the_stored_ones(tmp_path, read_only):
    root = str(tmp_path)
    served = _compressed(root)
    with MessageStore(root, small_config(read_only=read_only), create=False) as s:
        got = {(m.topic, m.queue_id, m.queue_offset): bytes(m.body)
               for q in range(len(COMPRESSIONS)) for m in s.get_range("Packed", q, 0, 10)}
        assert got == served
        lz4 = s.get("Packed", 0, 0)
        assert lz4.stored_sys_flag == 0x101 and bytes(lz4.stored_body) == deflate(json_body(0), "lz4")
        assert lz4.sys_flag == 0x100  # as a consumer's decode shows it: COMPRESSED cleared
        zlib4 = s.get("Packed", 3, 0)  # a 4.x producer: zlib, no type bits
        assert (zlib4.stored_sys_flag, zlib4.sys_flag) == (0x1, 0)
        assert s.get("Packed", 1, 1).stored_body == s.get("Packed", 1, 1).body == b"small 1"
        # keys find the compressed messages; a listing gives the size a consumer gets
        assert [bytes(m.body) for m in s.query_key("zstd-2", "Packed")] == [json_body(2)]
        lengths = s.list_entries("Packed", 2, 0, 10)[1].tolist()
        assert lengths == [len(served[("Packed", 2, i)]) for i in range(4)]
    _unchanged_by_verify_and_repair(root)


def test_a_replayed_compressed_message_is_its_inflated_body_with_the_flag_a_consumer_saw(tmp_path):
    """`dump -f replay` lines, put as a mount's append.jsonl puts them, into a store of
    mqfs's: each new record holds the inflated body with no compression bits, so its
    consumer sees the same body and the flag `dump -f json` showed for the first one, bar
    the compression type a new record has no reason to carry."""
    root, copy = str(tmp_path / "broker"), str(tmp_path / "copy")
    served = _compressed(root)
    shown = [json.loads(line) for line in mqfs("dump", "-f", "json", "-t", "Packed", root).stdout.splitlines()]
    lines = mqfs("dump", "-f", "replay", "-t", "Packed", root).stdout.splitlines()
    assert len(lines) == len(shown) == len(served)
    with MessageStore(copy, small_config()) as s:
        for line, first in zip(lines, shown):
            r = s.put(decode_line(line.encode(), "Copy", 0, 1 << 20))
            m = s.get("Copy", 0, r.queue_offset)
            assert bytes(m.body) == bytes(m.stored_body) == served[("Packed", first["queue_id"], first["queue_offset"])]
            assert m.sys_flag == m.stored_sys_flag == first["sys_flag"] & ~COMPRESSION_TYPE_MASK == 0
            assert m.keys == first["keys"] and m.tags == first["tags"]


def test_a_body_that_does_not_inflate_is_an_error_never_garbage(tmp_path):
    """A producer's bad stream (its checksums hold): CorruptionError naming the record, for
    every compression; the record next to it reads."""
    root = str(tmp_path)
    with MessageStore(root, small_config()) as s, unchecked_bodies():  # records a broker may hold
        for kind, flag in (("lz4", 0x101), ("zstd", 0x201), ("zlib", 0x301), ("type 5", 0x501)):
            good = deflate(json_body(1), "zlib" if kind.startswith("type") else kind)
            cut = s.put(Message.create("Bad", good[:-4], sys_flag=flag))
            with pytest.raises(CorruptionError, match=f"{kind} body of the record at CommitLog "
                                                      f"offset {cut.commitlog_offset}"):
                len(s.get("Bad", 0, cut.queue_offset).body)
        flipped = bytearray(deflate(json_body(1), "zstd"))
        flipped[1] ^= 0xFF  # the frame's magic (a flipped literal inflates to other bytes:
        # the record checksums over the stored bytes catch flips after the producer)
        r = s.put(Message.create("Bad", bytes(flipped), sys_flag=0x201))
        with pytest.raises(CorruptionError, match="zstd"):
            len(s.get("Bad", 0, r.queue_offset).body)
        ok = s.put(Message.create("Bad", deflate(b"fine" * 2000, "lz4"), sys_flag=0x101))
        assert s.get("Bad", 0, ok.queue_offset).body == b"fine" * 2000


# the flipped bit is in the CommitLog's last 4 KiB: the count records' fingerprint fails
@pytest.mark.allow_logs(r"was written for other CommitLog bytes")
def test_a_flipped_bit_in_a_compressed_body_is_caught_by_the_stored_bytes_checksum(tmp_path):
    root = str(tmp_path)
    with MessageStore(root, small_config()) as s:
        r = s.put(Message.create("T", deflate(json_body(3), "lz4"), sys_flag=0x101))
        body_at = r.commitlog_offset + r.size - len(deflate(json_body(3), "lz4")) // 2 - 40
    name = os.path.join(root, "commitlog", os.listdir(os.path.join(root, "commitlog"))[0])
    flip(name, body_at)
    with MessageStore(root, small_config(read_only=True), create=False) as s, \
            pytest.raises(CorruptionError, match="checksum"):
        s.get("T", 0, 0)
    assert not verify_store(root).ok


@needs_fuse
def test_mounts_show_inflated_bodies_with_honest_sizes_and_the_stored_bytes_in_an_xattr(tmp_path):
    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    served = _compressed(root)
    for options in (("-o", "ro"), ()):
        with mounted(root, mnt, *options):
            q = f"{mnt}/topics/Packed"
            for (_, queue, offset), body in served.items():
                assert sh(f"cat {q}/{queue}/{offset}").stdout == body
                assert os.stat(f"{q}/{queue}/{offset}").st_size == len(body)
            # ls -l takes its sizes from the listing
            sizes = sh(f"ls -l {q}/0 | awk 'NR>1 && $9 ~ /^[0-9]+$/ {{print $9, $5}}'").stdout.decode().split()
            assert dict(zip(sizes[::2], map(int, sizes[1::2]))) == \
                {str(o): len(b) for (_, qq, o), b in served.items() if qq == 0}
            hits = sh(f"grep -rl needle-2 {q}").stdout.decode().split()
            assert sorted(hits) == sorted(f"{q}/{n}/2" for n in range(len(COMPRESSIONS)))
            attrs = sh(f"getfattr -d {q}/1/0").stdout.decode()
            assert 'user.compression="zstd"' in attrs and "user.stored_body" not in attrs
            assert f'user.stored_size="{len(deflate(json_body(0), "zstd"))}"' in attrs
            raw = sh(f"getfattr --only-values -n user.stored_body {q}/1/0").stdout
            assert raw == deflate(json_body(0), "zstd")
            plain = sh(f"getfattr -d {q}/1/1").stdout.decode()
            assert "user.compression" not in plain
            assert sh(f"ls {mnt}/keys/lz4-2").stdout.split() == [b"Packed:0:2"]
            assert sh(f"cat {mnt}/keys/zlib-0/*").stdout == json_body(0)
            assert sorted(sh(f"ls {q}/2/tags/T0").stdout.split()) == [b"0", b"2"]
    _unchanged_by_verify_and_repair(root)


@needs_fuse
def test_a_mount_answers_eio_for_a_body_that_does_not_inflate(tmp_path):
    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")

    def writes(s: MessageStore) -> None:
        with unchecked_bodies():  # a stream a broker may hold; mqfs's puts refuse it
            s.put(Message.create("Bad", deflate(json_body(1), "lz4")[:-8], sys_flag=0x101))
        s.put(Message.create("Bad", deflate(json_body(2), "lz4"), sys_flag=0x101))

    broker_store(root, writes)
    with mounted(root, mnt, "-o", "ro"):
        proc = subprocess.run(["cat", f"{mnt}/topics/Bad/0/0"], capture_output=True)
        assert proc.returncode != 0 and os.strerror(errno.EIO).encode() in proc.stderr
        assert sh(f"cat {mnt}/topics/Bad/0/1").stdout == json_body(2)


@pytest.mark.spark
def test_the_spark_source_gives_inflated_bodies(tmp_path, spark):
    root = str(tmp_path)
    served = _compressed(root)
    df = spark.read.format("mqfs").load(root)
    rows = {(r.topic, r.queue_id, r.queue_offset): bytes(r.body)
            for r in df.select("topic", "queue_id", "queue_offset", "body").collect()}
    assert rows == served
    planned = spark.read.format("mqfs").option("subscribe", "Packed").load(root)
    assert {(r.queue_id, r.queue_offset): bytes(r.body) for r in planned.collect()} == \
        {(q, o): b for (_, q, o), b in served.items()}


@pytest.mark.spark
def test_the_spark_source_fails_or_skips_a_body_that_does_not_inflate(tmp_path, spark):
    root = str(tmp_path)
    with MessageStore(root, small_config()) as s:
        with unchecked_bodies():  # a stream a broker may hold; mqfs's puts refuse it
            s.put(Message.create("Bad", deflate(json_body(1), "zstd")[:-8], sys_flag=0x201))
        s.put(Message.create("Bad", b"plain"))
    with pytest.raises(Exception, match="does not inflate|cut short"):
        spark.read.format("mqfs").load(root).collect()
    rows = spark.read.format("mqfs").option("damagedRecords", "skip").load(root).collect()
    assert [bytes(r.body) for r in rows] == [b"plain"]


def test_lmq_queues_verify_and_read_with_their_messages(tmp_path):
    root = str(tmp_path)
    workload = lmq_store(root)
    _unchanged_by_verify_and_repair(root)
    with MessageStore(root, small_config(read_only=True), create=False) as s:
        assert sorted(s.topics()) == ["%LMQ%a", "%LMQ%b", "%LMQ%c", "Parent"]
        got = {(m.topic, m.queue_id, m.queue_offset): bytes(m.body)
               for t in s.topics() for q in s.queue_ids(t) for m in s.get_range(t, q, 0, 100)}
        assert got == workload.served
        m = s.get("%LMQ%c", 0, 3)  # read there with that queue's offset; the record names its parent's
        assert (m.topic, m.queue_offset, bytes(m.body)) == ("%LMQ%c", 3, b"lmq message 5")
        assert m.properties["INNER_MULTI_DISPATCH"] == "%LMQ%a,%LMQ%b,%LMQ%c"
        assert [x.queue_offset for x in s.get_range("%LMQ%b", 0, 0, 10, tags=["TagL"])] == [0, 1, 2, 3]
        assert s.max_offset("%LMQ%a", 0) == 4


def test_verify_reports_a_queue_a_record_names_that_has_no_unit(tmp_path):
    root = str(tmp_path)
    lmq_store(root, LmqWorkload(unit_less="%LMQ%gone"))
    report = verify_store(root)
    assert not report.ok
    assert any("%LMQ%gone/0" in line for line in report.lines), report.lines


def test_verify_reports_an_lmq_unit_at_an_offset_its_record_does_not_name(tmp_path):
    root = str(tmp_path)
    workload = LmqWorkload()
    broker_store(root, workload)
    a = workload.units["%LMQ%a"]
    a[0], a[1] = a[1], a[0]  # two units swapped: each points at a record naming another offset
    workload.write_units(root)
    report = verify_store(root)
    assert not report.ok
    assert any("%LMQ%a/0 entry 0 does not match" in line for line in report.lines), report.lines
    with MessageStore(root, small_config(read_only=True), create=False) as s:
        # the queue's first use finds its units wrong and serves it rebuilt from the log
        got = {(m.topic, m.queue_id, m.queue_offset): bytes(m.body)
               for t in s.topics() for q in s.queue_ids(t) for m in s.get_range(t, q, 0, 100)}
        assert got == workload.served


@needs_fuse
def test_a_read_only_mount_shows_lmq_queues_with_their_messages(tmp_path):
    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    workload = lmq_store(root)
    with mounted(root, mnt, "-o", "ro"):
        assert sorted(os.listdir(f"{mnt}/topics")) == ["%LMQ%a", "%LMQ%b", "%LMQ%c", "Parent"]
        for (topic, queue, offset), body in workload.served.items():
            assert sh(f"cat '{mnt}/topics/{topic}/{queue}/{offset}'").stdout == body
        lmq = f"{mnt}/topics/%LMQ%b/0"
        assert sorted(int(n) for n in os.listdir(lmq) if n.isdigit()) == [0, 1, 2, 3]
        assert sorted(os.listdir(f"{lmq}/tags/TagL")) == ["0", "1", "2", "3"]
        assert sh(f"cat '{lmq}/tags/TagL/2'").stdout == workload.served[("%LMQ%b", 0, 2)]
        assert sh(f"getfattr --only-values -n user.queue_offset '{lmq}/3'").stdout == b"3"
        first = sorted(int(n) for n in os.listdir(lmq) if n.isdigit())[0]
        assert os.readlink(f"{lmq}/at/0") == f"../{first}"
        assert sh(f"ls {mnt}/keys/lmq-5").stdout.split() == [b"Parent:1:2"]
    _unchanged_by_verify_and_repair(root)


@pytest.mark.spark
def test_the_spark_source_shows_lmq_queues_with_their_messages(tmp_path, spark):
    """One row per message each queue's consumer gets: the parent's rows and a row per LMQ
    queue a record is dispatched to, with that queue's topic, id and offset, however planned."""
    root = str(tmp_path)
    workload = lmq_store(root)
    for reader in ({}, {"reader": "python"}):  # the default: the JVM reader where it is installed
        def reads(reader=reader):
            return spark.read.format("mqfs").options(**reader)

        df = reads().load(root)
        rows = {(r.topic, r.queue_id, r.queue_offset): bytes(r.body)
                for r in df.select("topic", "queue_id", "queue_offset", "body").collect()}
        assert rows == workload.served
        assert df.count() == len(workload.served)
        for topic in ("%LMQ%b", "Parent"):
            planned = reads().option("subscribe", topic).load(root)
            assert {(r.topic, r.queue_id, r.queue_offset): bytes(r.body) for r in planned.collect()} == \
                {k: v for k, v in workload.served.items() if k[0] == topic}
        one = reads().option("subscribe", "%LMQ%c").load(root).where("queue_offset >= 2")
        assert sorted(r.queue_offset for r in one.collect()) == [2, 3]


@pytest.mark.allow_logs("recover|checkpoint|ConsumeQueue|queue")
def test_a_rebuild_from_the_commitlog_writes_the_lmq_units_as_the_broker(tmp_path, monkeypatch):
    """Recovery's re-dispatch (what a read-write open or repair rebuilds queues with) gives the
    LMQ queues the broker's units, byte for byte. A read-write open of an LMQ store is refused
    today (store/meta/features.py); the refusal is lifted here to drive the rebuild."""
    from mqfs.store.meta.features import Features

    root = str(tmp_path)
    workload = lmq_store(root)
    cq = os.path.join(root, "consumequeue")
    broker_units = {name: open(os.path.join(cq, name, "0", "0" * 20), "rb").read() for name in workload.units}
    for name in workload.units:
        shutil.rmtree(os.path.join(cq, name))
    shutil.rmtree(os.path.join(cq, "Parent"))
    os.unlink(os.path.join(root, "checkpoint"))
    monkeypatch.setattr(Features, "refusal", lambda self: None)
    with MessageStore(root, small_config(flavor="rocketmq", record_crc=False), create=False) as s:
        got = {(m.topic, m.queue_id, m.queue_offset): bytes(m.body)
               for t in s.topics() for q in s.queue_ids(t) for m in s.get_range(t, q, 0, 100)}
        assert got == workload.served
    for name, raw in broker_units.items():
        rebuilt = open(os.path.join(cq, name, "0", "0" * 20), "rb").read()
        assert rebuilt[:len(workload.units[name]) * 20] == raw[:len(workload.units[name]) * 20]
    assert verify_store(root).ok


def test_ext_units_are_accepted_and_checked_against_the_ext_file(tmp_path):
    root = str(tmp_path)
    served = ext_store(root)
    _unchanged_by_verify_and_repair(root)
    with MessageStore(root, small_config(read_only=True), create=False) as s:
        got = {(m.topic, m.queue_id, m.queue_offset): bytes(m.body)
               for q in (0, 1) for m in s.get_range("Filtered", q, 0, 100)}
        assert got == served
        assert [m.queue_offset for m in s.get_range("Filtered", 0, 0, 100, tags=["Tag0"])] == [0, 3]
    # an ext unit whose tagsCode is not its record's: verify says which unit
    ext = os.path.join(root, "consumequeue_ext", "Filtered", "1", "0" * 20)
    with open(ext, "r+b") as f:
        f.seek(23)  # the second unit's tagsCode (units are 21 bytes: a one-byte bit map)
        f.write(b"\x7f")
    report = verify_store(root)
    assert not report.ok
    assert any("Filtered/1 entry 1 does not match" in line for line in report.lines), report.lines


@needs_fuse
def test_a_read_only_mount_shows_an_ext_stores_messages_and_tags(tmp_path):
    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    served = ext_store(root)
    before = store_hashes(root)
    with mounted(root, mnt, "-o", "ro"):
        for (_, q, o), body in served.items():
            assert sh(f"cat {mnt}/topics/Filtered/{q}/{o}").stdout == body
        assert sorted(os.listdir(f"{mnt}/topics/Filtered/1/tags/Tag2")) == ["2"]
        assert sh(f"ls {mnt}/keys/f-5").stdout.split() == [b"Filtered:1:2"]
    assert store_hashes(root) == before


def test_batch_cq_units_and_inner_batches_decode_as_the_broker_wrote_them(tmp_path):
    """The BatchCQ reader finds each queue's units as BatchWorkload wrote them, and every inner
    batch unwraps into its messages at base + i with their own body, keys and tags."""
    from mqfs.store.files.batch_consume_queue import BatchQueue
    from mqfs.store.format import batch
    from mqfs.store.format.codec import decode
    from tests.store.broker_guard_layouts import layout_batch_cq

    root = str(tmp_path)
    w = layout_batch_cq(root)
    log = open(os.path.join(root, "commitlog", "0" * 20), "rb").read()
    got = {}
    for q, records in w.records.items():
        bq = BatchQueue(root, w.topic, q)
        assert bq.bounds() == (0, sum(BATCH_PLAN[q]))
        units = bq.units()
        assert [tuple(int(u[f]) for f in ("offset", "size", "tags", "base", "batch")) for u in units] == records
        assert bq.damage is None
        for offset, *_ in records:
            rec = decode(log, offset)
            msgs = batch.unwrap(rec) if batch.is_inner_batch(rec.sys_flag) else [rec]
            for m in msgs:
                got[(m.topic, m.queue_id, m.queue_offset)] = (bytes(m.body), m.properties["KEYS"], m.tags)
    assert got == w.served


def _batch_store(root: str):
    from tests.store.broker_guard_layouts import layout_batch_cq

    return layout_batch_cq(root)


def test_a_batch_cq_topic_reads_as_its_consumers_get_it(tmp_path):
    """Every message of every inner batch at its own offset, with its own body, keys and tags;
    tag filters, key queries (the inner messages' keys, which the broker's IndexFile lacks)
    and time searches; the batch record's own UNIQ_KEY (the producer's SendResult msgId) finds
    the batch's messages, as the broker's queryMessage finds the record."""
    root = str(tmp_path)
    w = _batch_store(root)
    with MessageStore(root, small_config(read_only=True), create=False) as s:
        assert s.queue_ids(w.topic) == [0, 1]
        got = {}
        for q, sizes in BATCH_PLAN.items():
            assert (s.min_offset(w.topic, q), s.max_offset(w.topic, q)) == (0, sum(sizes))
            msgs = s.get_range(w.topic, q, 0, 100)
            assert [m.queue_offset for m in msgs] == list(range(sum(sizes)))
            got.update({(m.topic, m.queue_id, m.queue_offset): (bytes(m.body), m.keys[0], m.tags) for m in msgs})
            offsets, lengths, stamps = s.list_entries(w.topic, q, 0, 100)
            assert offsets.tolist() == list(range(sum(sizes)))
            assert lengths.tolist() == [len(w.served[(w.topic, q, o)][0]) for o in range(sum(sizes))]
            assert s.offset_by_time(w.topic, q, 0) == 0 and s.newest_store_time(w.topic, q) is not None
        assert got == w.served
        one = s.get(w.topic, 0, 7)  # the third of the inner batch at 5..8
        assert (bytes(one.body), one.keys, one.tags) == (b"inner 7 of queue 0", ["bk-0-7"], "Tag1")
        assert one.properties["UNIQ_KEY"] == "U00000007" and "INNER_NUM" not in one.properties
        assert [m.queue_offset for m in s.get_range(w.topic, 0, 0, 100, tags=["Tag1"])] == [1, 2, 3, 5, 6, 7, 8]
        for key, where in (("bk-1-3", (1, 3)), ("bk-0-0", (0, 0)), ("U00000010", (0, 10))):
            hits = s.query_key(key, queued=True)
            assert [(m.queue_id, m.queue_offset) for m in hits] == [where], key
        hits = s.query_key("B00000001", queued=True)  # the batch's own key: its three messages
        assert [(m.queue_id, m.queue_offset, m.keys) for m in hits] == [(0, o, [f"bk-0-{o}"]) for o in (3, 2, 1)]
        with pytest.raises(NotFound):
            s.get(w.topic, 0, 11)


def test_verify_checks_batch_cq_queues_and_repair_changes_no_byte(tmp_path):
    root = str(tmp_path)
    _batch_store(root)
    before = store_hashes(root)
    report = verify_store(root)
    assert report.ok and any("8 BatchCQ units checked" in line for line in report.lines), report.lines
    assert not plan_repair(root).needed
    assert "nothing to repair" in mqfs("repair", "--yes", root).stdout
    assert store_hashes(root) == before


def _damage_batch(root: str, w, how: str) -> str:
    """Damage a BatchCQ store three ways; returns what verify and reads must name."""
    unit_file = os.path.join(root, "batchconsumequeue", w.topic, "0", "0" * 20)
    offset, size, _, base, n = w.records[0][3]  # the inner batch of 4 at 5..8
    if how == "truncated unit file":
        with open(unit_file, "r+b") as f:
            f.truncate(46 * 3 + 20)  # the fourth unit cut short
        return "cut short"
    if how == "INNER_NUM disagrees with batchSize":
        with open(unit_file, "r+b") as f:
            f.seek(46 * 3 + 36)
            f.write(struct.pack(">h", 3))  # the unit says 3, the record holds 4
            f.seek(46 * 4 + 28)
            f.write(struct.pack(">q", 8))  # and the next unit follows on from there
        return "says 3 messages"
    with open(os.path.join(root, "commitlog", "0" * 20), "r+b") as f:  # an inner message cut
        f.seek(offset + 84)  # BODYLEN (IPv4 hosts)
        (body_len,) = struct.unpack(">i", f.read(4))
        body = bytearray(f.read(body_len))
        last = sum(size for size, *_ in batch.inner_parts(body, "test")[:3])
        body[last + 16:last + 20] = struct.pack(">i", body_len)  # its body runs past the batch
        f.seek(offset + 88)
        f.write(body)
        f.seek(offset + 8)  # BODYCRC as the broker computes it: the record itself checks out
        f.write(struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF))
    return "inner message 3"


@pytest.mark.parametrize("how", ["truncated unit file", "INNER_NUM disagrees with batchSize",
                                 "inner message cut"])
def test_damaged_batch_cq_is_reported_and_read_as_an_error_never_as_messages(tmp_path, how):
    root = str(tmp_path)
    w = _batch_store(root)
    what = _damage_batch(root, w, how)
    report = verify_store(root)
    assert not report.ok and any("PROBLEM" in line and what in line for line in report.lines), report.lines
    with MessageStore(root, small_config(read_only=True), create=False) as s:
        good = {(m.topic, m.queue_id, m.queue_offset): (bytes(m.body), m.keys[0], m.tags)
                for q in (0, 1) for m in s.get_range(w.topic, q, 0, 100, skip_damaged=True)}
        assert good and all(w.served[k] == v for k, v in good.items())  # never other messages
        assert not any(k[1:] in {(0, 5), (0, 6), (0, 7), (0, 8)} for k in good) or how == "truncated unit file"
        if how == "truncated unit file":
            assert s.max_offset(w.topic, 0) == 5  # the units before the cut
            with pytest.raises((CorruptionError, NotFound), match="cut short"):
                s.get(w.topic, 0, 5)
        else:
            with pytest.raises(CorruptionError, match=what):
                s.get(w.topic, 0, 6)


@needs_fuse
def test_a_read_only_mount_shows_batch_cq_queues_as_consumers_get_them(tmp_path):
    """ls, cat, getfattr, grep, keys/, tags/ and at/ on a read-only mount of a BatchCQ store:
    exactly the consumer's messages; no byte of the store changes."""
    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    w = _batch_store(root)
    before = store_hashes(root)
    with mounted(root, mnt, "-o", "ro"):
        top = f"{mnt}/topics/{w.topic}"
        for q, sizes in BATCH_PLAN.items():
            listed = sh(f"ls {top}/{q}").stdout.decode().split()
            assert sorted(int(n) for n in listed if n.isdigit()) == list(range(sum(sizes)))
            for offset in range(sum(sizes)):
                body, keys, tags = w.served[(w.topic, q, offset)]
                assert sh(f"cat {top}/{q}/{offset}").stdout == body
                attrs = sh(f"getfattr -d --absolute-names {top}/{q}/{offset}").stdout.decode()
                assert f'user.keys="{keys}"' in attrs and f'user.tags="{tags}"' in attrs
                assert f'user.queue_offset="{offset}"' in attrs
            assert sh(f"getfattr -n user.max_offset --only-values {top}/{q}").stdout == str(sum(sizes)).encode()
        assert sh(f"grep -rl 'inner 7 of queue 0' {top}").stdout == f"{top}/0/7\n".encode()
        assert sh(f"ls {mnt}/keys/bk-1-3").stdout == f"{w.topic}:1:3\n".encode()
        assert sh(f"cat {mnt}/keys/bk-0-6/{w.topic}:0:6").stdout == b"inner 6 of queue 0"
        assert sh(f"ls {mnt}/keys/B00000005").stdout.decode().split() == [f"{w.topic}:0:{o}" for o in (5, 6, 7, 8)]
        assert sh(f"ls {top}/0/tags/Tag1").stdout.split() == [b"1", b"2", b"3", b"5", b"6", b"7", b"8"]
        at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((BATCH_T0 + 3 * 60_000) // 1000))
        assert sh(f"readlink {top}/0/at/{at}Z").stdout == b"../5\n"
        status = json.loads(sh(f"cat {mnt}/status.json").stdout)
        assert status["live"]["queues_awaiting_units"] == 0
    assert store_hashes(root) == before


# --- compaction topics (cleanup.policy=COMPACTION) -------------------------------------------

def _compaction(root: str) -> dict:
    from tests.store.broker_guard_layouts import layout_compaction

    return layout_compaction(root)


def _every_version(root: str) -> dict:
    """Every version of the compaction topic the CommitLog holds, at the ConsumeQueue's offsets."""
    with MessageStore(root, small_config(read_only=True, all_versions=True), create=False) as s:
        return {("Compacted", q, m.queue_offset): bytes(m.body)
                for q in (0, 1) for m in s.get_range("Compacted", q, 0, 1000)}


@pytest.mark.parametrize("read_only", [True, False])
def test_a_compaction_topic_reads_as_the_broker_serves_it(tmp_path, read_only):
    """Newest version of each key where the broker compacted (a tombstone's key gone), every
    version after; offsets with gaps, the copies' own msgIds; puts there refused."""
    from mqfs.store.errors import NotFound, ReadOnlyStore

    root = str(tmp_path)
    served = _compaction(root)
    raw = _every_version(root)
    assert set(served) < set(raw) and len(raw) == 96 and len(served) < 60
    with MessageStore(root, small_config(read_only=read_only), create=False) as s:
        for q in (0, 1):
            msgs = s.get_range("Compacted", q, 0, 1000)
            assert {("Compacted", q, m.queue_offset): bytes(m.body) for m in msgs} == \
                {k: v for k, v in served.items() if k[1] == q}
            offsets = [m.queue_offset for m in msgs]
            assert (s.min_offset("Compacted", q), s.max_offset("Compacted", q)) == (offsets[0], offsets[-1] + 1)
            assert list(s.list_entries("Compacted", q, 0, 1000)[0]) == offsets
            for gone in (offsets[0] - 1, 29 if q == 0 else 0):  # older versions; q0's tombstone
                assert gone not in offsets
                with pytest.raises(NotFound):
                    s.get("Compacted", q, gone)
            assert s.offset_by_time("Compacted", q, 0) == offsets[0]
            tagged = s.get_range("Compacted", q, 0, 1000, tags=["T1"])
            assert tagged and all(m.tags == "T1" for m in tagged) and \
                {m.queue_offset for m in tagged} <= set(offsets)
        m = s.get("Compacted", 0, 40)
        raw_record = next(r for r in s.query_key("k3") if (r.queue_id, r.queue_offset) == (0, 40))
        assert bytes(m.body) == bytes(raw_record.body) and m.msg_id != raw_record.msg_id
        assert m.msg_id.endswith(f"{m.commitlog_offset:016X}")  # the copy's compactionLog position
        hits = s.query_key("k2", queued=True)
        assert {(h.queue_id, h.queue_offset) for h in hits} == {
            (k[1], k[2]) for k in served if bytes(s.get(*k).properties["KEYS"], "ascii") == b"k2"}
        assert len(s.query_key("k2")) > len(hits)  # the broker's key query: every version
        assert s.get("Orders", 0, 0).body.tobytes() == b"order 0"
        if not read_only:
            with pytest.raises(ReadOnlyStore, match="compaction topic"):
                s.put(Message.create("Compacted", b"new", keys=["k1"]))
            with pytest.raises(ReadOnlyStore, match="compaction topic"):
                s.put_batch([Message.create("Orders", b"a"), Message.create("Compacted", b"b", keys=["k"])])
            s.put(Message.create("Orders", b"still writable"))
    with MessageStore(root, small_config(read_only=True, all_versions=True), create=False) as s:
        assert len(s.get_range("Compacted", 0, 0, 1000)) == 48  # every version, as before


def test_a_compaction_store_verifies_and_repair_changes_no_byte(tmp_path):
    root = str(tmp_path)
    _compaction(root)
    report = verify_store(root)
    assert report.ok and "compactionCq units" in report.lines[0], report.lines
    _unchanged_by_verify_and_repair(root)


def test_a_compacted_queue_reads_again_only_the_unit_file_that_changed(tmp_path, monkeypatch):
    """The broker appends to the newest compactionCq file: a look after that reads that file,
    not the queue's older files again (a queue's cost follows what changed)."""
    from mqfs.store.files import compaction_log
    from mqfs.store.format.flavor import ROCKETMQ

    root = str(tmp_path)
    _compaction(root)
    queue = compaction_log.CompactedQueue(root, "Compacted", 0, ROCKETMQ)
    queue.refresh()
    units, files = queue.units.copy(), list(queue.cq_files)
    assert len(files) == 3
    read: list[str] = []
    real = compaction_log._read_whole
    monkeypatch.setattr(compaction_log, "_read_whole",
                        lambda path, size: read.append(os.path.basename(path)) or real(path, size))
    queue.refresh()
    assert read == []
    newest = _unit_file(root)
    st = os.stat(newest)
    os.utime(newest, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    queue.refresh()
    assert read == [os.path.basename(newest)]
    assert queue.units.tobytes() == units.tobytes() and queue.cq_files == files


def _set_policy(root: str, policy: str) -> None:
    """topics.json gives the compaction topic `policy` (RocketMQ knows only upper case)."""
    path = os.path.join(root, "config", "topics.json")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace('"cleanup.policy":"COMPACTION"', f'"cleanup.policy":"{policy}"'))


def _unit_file(root: str, q: int = 0) -> str:
    d = os.path.join(root, "compaction", "compactionCq", "Compacted", str(q))
    return os.path.join(d, sorted(os.listdir(d))[-1])


@pytest.mark.parametrize("attack", ["past-the-end", "missing-log-file", "moved-copy", "bad-policy"])
def test_damaged_compaction_files_are_errors_never_other_messages(tmp_path, attack):
    """A unit past the compactionLog's end, a compactionLog file gone, a unit naming another
    copy, a cleanup.policy RocketMQ does not know: verify reports it, reads fail, and no
    command changes a byte."""
    import re
    import struct

    root = str(tmp_path)
    _compaction(root)
    if attack == "past-the-end":
        with open(_unit_file(root), "r+b") as f:
            f.write(struct.pack(">q", 1 << 40))  # the newest file's first unit
    elif attack == "missing-log-file":
        logs = os.path.join(root, "compaction", "compactionLog", "Compacted", "0")
        os.unlink(os.path.join(logs, sorted(os.listdir(logs))[0]))
    elif attack == "moved-copy":
        with open(_unit_file(root), "r+b") as f:
            unit = f.read(46)
            f.seek(0)
            f.write(unit[:28] + struct.pack(">q", 3) + unit[36:])  # says offset 3 of another copy
    else:
        _set_policy(root, "compaction")
    before = store_hashes(root)
    report = verify_store(root)
    assert not report.ok
    text = "\n".join(report.lines)
    assert {"past-the-end": "past the compactionLog", "missing-log-file": "has no compactionLog file",
            "moved-copy": "does not describe its record", "bad-policy": "cleanup.policy='compaction'"}[attack] in text
    with MessageStore(root, small_config(read_only=True), create=False) as s:
        with pytest.raises(CorruptionError):
            for q in (0, 1):
                s.get_range("Compacted", q, 0, 1000)
        assert s.get("Orders", 0, 0).body.tobytes() == b"order 0"
    assert not plan_repair(root).needed  # the broker's files: not repaired
    repaired = mqfs("repair", "--yes", root, check=False)
    assert repaired.returncode == 1
    assert re.search(r"nothing to repair: \d+ problems? (is|are) in the broker's", repaired.stdout)
    assert store_hashes(root) == before


@needs_fuse
def test_a_mount_answers_eio_for_a_damaged_compaction_unit_or_an_unknown_policy(tmp_path):
    import struct

    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    served = _compaction(root)
    with open(_unit_file(root), "rb+") as f:
        base = struct.unpack_from(">q", f.read(46), 28)[0]
        f.seek(0)
        f.write(struct.pack(">q", 1 << 40))  # points past the compactionLog's end
    with mounted(root, mnt, "-o", "ro"):
        queue = f"{mnt}/topics/Compacted/0"
        assert str(base) in os.listdir(queue)  # listed, and reading it says what is wrong
        damaged = sh(f"cat {queue}/{base}", check=False)
        assert damaged.returncode != 0 and b"Input/output error" in damaged.stderr
        assert sh(f"cat {queue}/{base + 1}").stdout == served[("Compacted", 0, base + 1)]
    _set_policy(root, "Compaction")
    before = store_hashes(root)
    with mounted(root, mnt, "-o", "ro"):
        unknown = sh(f"ls {mnt}/topics/Compacted/0", check=False)
        assert unknown.returncode != 0 and b"Input/output error" in unknown.stderr
        assert sh(f"cat {mnt}/topics/Orders/0/0").stdout == b"order 0"
    with mounted(root, mnt):  # read-write: the topic takes no put either
        refused = sh(f"echo x > {mnt}/topics/Compacted/0/append", check=False)
        assert refused.returncode != 0
        sh(f"echo y > {mnt}/topics/Orders/0/append")
    after = store_hashes(root)
    assert {p: h for p, h in after.items() if p.startswith(("compaction/", "config/topics.json"))} == \
        {p: h for p, h in before.items() if p.startswith(("compaction/", "config/topics.json"))}


@needs_fuse
def test_a_read_only_mount_shows_a_compaction_topic_as_its_consumers_get_it(tmp_path):
    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    served = _compaction(root)
    before = store_hashes(root)
    with mounted(root, mnt, "-o", "ro"):
        for q in (0, 1):
            queue = f"{mnt}/topics/Compacted/{q}"
            listed = sh(f"ls {queue} | grep -E '^[0-9]+$' | sort -n").stdout.split()
            assert [int(n) for n in listed] == sorted(k[2] for k in served if k[1] == q)
            for (_, qq, offset), body in served.items():
                if qq == q:
                    assert sh(f"cat {queue}/{offset}").stdout == body
                    assert int(sh(f"stat -c %s {queue}/{offset}").stdout) == len(body)
            gone = sh(f"cat {queue}/{int(listed[0]) - 1}", check=False)  # compacted away
            assert gone.returncode != 0 and b"No such file" in gone.stderr
            tagged = sorted(int(n) for n in os.listdir(f"{queue}/tags/T1"))
            assert tagged and set(tagged) <= {int(n) for n in listed}
            assert os.readlink(f"{queue}/at/0") == f"../{listed[0].decode()}"
            last = max(k[2] for k in served if k[1] == q)  # follow starts 10 offsets back
            newest = sorted((k for k in served if k[1] == q and k[2] >= last + 1 - 10), key=lambda k: k[2])
            expected = b"".join(served[k] + b"\n" for k in newest)
            assert sh(f"head -c {len(expected)} {queue}/follow").stdout == expected
        assert sh(f"grep -rl 'v95 of k4' {mnt}/topics/Compacted").stdout.strip().endswith(b"/1/47")
        links = sh(f"ls {mnt}/keys/k2").stdout.split()
        assert links and all(os.path.exists(f"{mnt}/keys/k2/{n.decode()}") for n in links)
        assert sorted(links) == sorted(f"Compacted:{q}:{o}".encode() for (_, q, o), body in served.items()
                                       if b"of k2 " in body)
    with mounted(root, mnt, "-o", "ro,all_versions"):
        assert len([n for n in os.listdir(f"{mnt}/topics/Compacted/0") if n.isdigit()]) == 48
    assert store_hashes(root) == before


@needs_fuse
def test_a_read_write_mount_refuses_a_put_to_a_compaction_topic_and_serves_it(tmp_path):
    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    served = _compaction(root)
    with mounted(root, mnt):
        refused = sh(f"echo new > {mnt}/topics/Compacted/0/append", check=False)
        assert refused.returncode != 0 and b"Read-only file system" in refused.stderr
        listed = sorted(int(n) for n in os.listdir(f"{mnt}/topics/Compacted/1") if n.isdigit())
        assert listed == sorted(k[2] for k in served if k[1] == 1)
        sh(f"echo {listed[3]} > {mnt}/groups/g/Compacted/1")
        assert sh(f"cat {mnt}/groups/g/Compacted/1").stdout.strip() == str(listed[3]).encode()
    assert verify_store(root).ok


@pytest.mark.spark
def test_the_spark_source_shows_a_compaction_topic_as_its_consumers_get_it(tmp_path, spark):
    root = str(tmp_path)
    served = _compaction(root)
    raw = _every_version(root)
    with MessageStore(root, small_config(read_only=True), create=False) as s:
        msg_id = s.get("Compacted", 0, 40).msg_id
    for reader in ({}, {"reader": "python"}):  # the default: the JVM reader leaves it to Python
        def reads(reader=reader):
            return spark.read.format("mqfs").options(**reader)

        rows = {(r.topic, r.queue_id, r.queue_offset): (bytes(r.body), r.msg_id)
                for r in reads().load(root).collect()}
        assert {k: v[0] for k, v in rows.items() if k[0] == "Compacted"} == served
        assert {k for k in rows if k[0] == "Orders"} == {("Orders", 0, 0), ("Orders", 0, 1), ("Orders", 1, 0)}
        assert rows[("Compacted", 0, 40)][1] == msg_id
        one = reads().option("topic", "Compacted").option("queue", "1").load(root).where("queue_offset >= 40")
        assert {r.queue_offset for r in one.collect()} == {k[2] for k in served if k[1] == 1 and k[2] >= 40}
        every = reads().option("records", "all").option("topic", "Compacted").load(root)
        assert {(r.topic, r.queue_id, r.queue_offset): bytes(r.body) for r in every.collect()} == raw
    bad = str(tmp_path / "bad")  # a cleanup.policy RocketMQ does not know: an error, not rows
    shutil.copytree(root, bad)
    path = os.path.join(bad, "config", "topics.json")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace('"cleanup.policy":"COMPACTION"', '"cleanup.policy":"compaction"'))
    with pytest.raises(Exception, match=r"cleanup.policy='compaction', which RocketMQ does not know"):
        spark.read.format("mqfs").option("reader", "python").load(bad).count()
    assert spark.read.format("mqfs").option("reader", "python").option("topic", "Orders").load(bad).count() == 3




@pytest.mark.spark
@pytest.mark.allow_logs(r"exception while executing the Python Proxy", r"terminated with error")
def test_a_stream_of_a_compaction_or_batch_cq_topic_is_refused_in_one_line(tmp_path, spark):
    """A stream follows consumequeue/ units: a compaction topic's hold every version (not what
    the broker serves) and a BatchCQ topic has none there, so such a stream is refused in one
    line, never answered with other rows; a stream of the store's other topics goes on."""
    from pyspark.errors import StreamingQueryException

    from mqfs.pipeline.cli import one_line

    compacted, batched = str(tmp_path / "compacted"), str(tmp_path / "batched")
    _compaction(compacted)
    w = _batch_store(batched)
    for root, topic, says in ((compacted, "Compacted", "streams of compaction topic Compacted"),
                              (batched, w.topic, f"streams of BatchCQ topic {w.topic}")):
        q = (spark.readStream.format("mqfs").option("startingOffsets", "earliest").option("topic", topic)
             .load(root).writeStream.format("memory").queryName(f"refused_{topic}").start())
        with pytest.raises(StreamingQueryException) as err:
            q.awaitTermination(300)
        assert says in one_line(err.value)
    q = (spark.readStream.format("mqfs").options(startingOffsets="earliest", topic="Orders")
         .load(compacted).writeStream.format("memory").queryName("others").trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None
    assert spark.sql("select * from others").count() == 3  # Orders' three messages


@pytest.mark.spark
def test_the_spark_source_gives_a_row_per_message_of_a_batch_cq_topic(tmp_path, spark):
    """One row per message a consumer gets (an inner batch is several rows, each at its offset
    with its own body, keys and tags), from the default reader and the Python one, whole or
    selected; reads by queue offsets of such a topic are refused, never answered short."""
    root = str(tmp_path)
    w = _batch_store(root)
    for reader in ({}, {"reader": "python"}):  # the default: the JVM reader where it reads it
        def reads(reader=reader):
            return spark.read.format("mqfs").options(**reader)

        rows = {(r.topic, r.queue_id, r.queue_offset): (bytes(r.body), r.keys[0], r.tags)
                for r in reads().load(root).where(f"topic = '{w.topic}'").collect()}
        assert rows == w.served
        assert reads().load(root).count() == len(w.served) + 3  # Orders' three
        planned = reads().option("subscribe", w.topic).load(root).where("queue_offset >= 6 and queue_id = 0")
        assert sorted(r.queue_offset for r in planned.collect()) == [6, 7, 8, 9, 10]
        tagged = reads().load(root).where("tags = 'Tag1' and queue_id = 1").select("queue_offset", "properties")
        assert sorted((r.queue_offset, dict(r.properties)["KEYS"]) for r in tagged.collect()) == \
            [(5, "bk-1-5")]
    with pytest.raises(Exception, match="BatchCQ topic Batched"):
        spark.read.format("mqfs").option("reader", "python").option("subscribe", w.topic) \
            .option("startingOffsets", '{"Batched": {"0": 2}}').load(root).collect()


def test_dump_gives_the_messages_of_inner_batches(tmp_path):
    """`mqfs dump` of a BatchCQ store: each inner message at its offset, selected by topic,
    queue, offset, tag, key and body, as a consumer gets it (the queue and key selections walk
    the CommitLog: the units and inner keys are not in consumequeue/ or the IndexFile)."""
    root = str(tmp_path)
    w = _batch_store(root)
    rows = [json.loads(line) for line in mqfs("dump", "-t", w.topic, root).stdout.splitlines()]
    assert {(r["topic"], r["queue_id"], r["queue_offset"]): (r["body"].encode(), r["keys"][0], r["tags"])
            for r in rows} == w.served and len(rows) == len(w.served)
    picked = mqfs("dump", "-t", w.topic, "-q", "0", "--tag", "Tag1", "-f", "offsets", root).stdout.splitlines()
    assert [int(line.split()[2]) for line in picked] == [1, 2, 3, 5, 6, 7, 8]
    assert json.loads(mqfs("dump", "-k", "bk-1-3", root).stdout)["body"] == "inner 3 of queue 1"
    assert mqfs("dump", "-c", "-e", "inner [67] of queue 0", root).stdout == "2\n"
    assert mqfs("dump", "-c", "-t", w.topic, "--from-offset", "6", "--to-offset", "9", "-q", "0", root
                ).stdout == "4\n"


@needs_fuse
def test_a_live_read_only_mount_shows_the_batch_units_a_broker_adds(tmp_path):
    """A broker dispatches a record's BatchCQ unit after writing the record: a live `-o ro`
    mount shows the inner batch's messages once the unit is there, and none before."""
    from tests.waits import eventually

    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    w = _batch_store(root)
    unit_file = os.path.join(root, "batchconsumequeue", w.topic, "0", "0" * 20)
    last = 46 * (len(w.records[0]) - 1)  # the inner batch at 9..10, not dispatched yet
    with open(unit_file, "r+b") as f:
        f.seek(last)
        unit = f.read(46)
        f.seek(last)
        f.write(bytes(46))
    with mounted(root, mnt, "-o", "ro"):
        queue = f"{mnt}/topics/{w.topic}/0"
        assert sorted(int(n) for n in os.listdir(queue) if n.isdigit()) == list(range(9))
        with open(unit_file, "r+b") as f:
            f.seek(last)
            f.write(unit)
        eventually(lambda: "10" in os.listdir(queue), "the new inner batch listed")
        assert sh(f"cat {queue}/10").stdout == b"inner 10 of queue 0"
        assert sh(f"ls {mnt}/keys/bk-0-9").stdout == f"{w.topic}:0:9\n".encode()


@needs_fuse
def test_a_damaged_inner_batch_reads_as_eio_at_the_mount(tmp_path):
    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    w = _batch_store(root)
    _damage_batch(root, w, "inner message cut")
    with mounted(root, mnt, "-o", "ro"):
        queue = f"{mnt}/topics/{w.topic}/0"
        failed = sh(f"cat {queue}/6", check=False)
        assert failed.returncode != 0 and b"Input/output error" in failed.stderr
        assert sh(f"cat {queue}/9").stdout == b"inner 9 of queue 0"  # the batch after it


@pytest.mark.spark
def test_the_audit_job_finds_no_problem_in_a_batch_cq_store(tmp_path, spark):
    """The audit counts records, not messages: an inner batch's record is indexed by its own
    keys, and BatchCQ topics have no ConsumeQueue (verify checks their units)."""
    from mqfs.pipeline.jobs import audit

    root = str(tmp_path)
    _batch_store(root)
    found = audit.run(spark, root)
    assert found["problems"] == 0, found["shown"]
