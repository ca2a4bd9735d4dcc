"""RocketMQ 5 store layouts built the way a broker writes them, with our codec following
RocketMQ's code: compressed bodies (the Java producer's compressors, DefaultMQProducerImpl
compressing bodies over compressMsgBodyOverHowmuch), and the helpers that hash a store
before and after a command. Each builder takes a MessageStore of broker_store()."""

from __future__ import annotations

import os
import shutil
import struct

from mqfs.store import Message, MessageStore
from mqfs.store.format.compression import compression_flags, deflate
from mqfs.store.format.multi_dispatch import PROPERTY_INNER_MULTI_DISPATCH, PROPERTY_INNER_MULTI_QUEUE_OFFSET
from tests.store.helpers import file_hashes, small_config

COMPRESS_OVER = 4096  # the Java producer's default compressMsgBodyOverHowmuch


def broker_store(root: str, writes) -> None:
    """A store as a RocketMQ 5 broker leaves it: rocketmq flavor, no whole-record checksum,
    no mqfs.json and no config/; `writes(store)` puts what the broker put."""
    cfg = small_config(flavor="rocketmq", record_crc=False, index_slots=64, index_entries=256,
                       commitlog_file_size=1 << 20)
    with MessageStore(root, cfg) as s:
        writes(s)
    os.unlink(os.path.join(root, "mqfs.json"))
    shutil.rmtree(os.path.join(root, "config"))


def produced(topic: str, body: bytes, kind: str | None, queue_id: int = 0, **kw) -> Message:
    """A message as a Java producer sends it: a body over COMPRESS_OVER compressed with `kind`
    ('lz4', 'zstd', 'zlib', or '4.x' for zlib with no type bits) and SYSFLAG saying so."""
    if kind is None or len(body) <= COMPRESS_OVER:
        return Message.create(topic, body, queue_id=queue_id, **kw)
    if kind == "4.x":
        return Message.create(topic, deflate(body, "zlib"), queue_id=queue_id, sys_flag=0x1, **kw)
    return Message.create(topic, deflate(body, kind), queue_id=queue_id, sys_flag=compression_flags(kind), **kw)


def json_body(i: int, size: int = 20_000) -> bytes:
    """A JSON document of about `size` bytes that compresses well, with a word grep can find."""
    row = b'{"order": %d, "item": "widget-%d", "note": "needle-%d"},' % (i, i, i)
    return b"[" + row * (size // len(row)) + b"{}]"


COMPRESSIONS = ("lz4", "zstd", "zlib", "4.x")


def compressed_workload(s: MessageStore) -> dict[tuple[str, int, int], bytes]:
    """One queue per compression, small bodies left plain between compressed ones, keys and
    tags on each; returns (topic, queue, offset) -> the body a consumer gets."""
    served: dict[tuple[str, int, int], bytes] = {}
    for q, kind in enumerate(COMPRESSIONS):
        for i in range(4):
            body = json_body(i) if i % 2 == 0 else b"small %d" % i
            r = s.put(produced("Packed", body, kind, queue_id=q, keys=[f"{kind}-{i}"], tags=f"T{i % 2}"))
            served[("Packed", q, r.queue_offset)] = body
    return served


# which LMQ queues each record of the parent topic is dispatched to (an MQTT bridge's way)
LMQ_FANOUT = (["%LMQ%a", "%LMQ%b"], ["%LMQ%a"], ["%LMQ%b", "%LMQ%c"], ["%LMQ%a", "%LMQ%c"],
              ["%LMQ%c"], ["%LMQ%a", "%LMQ%b", "%LMQ%c"], ["%LMQ%b"])


class LmqWorkload:
    """Records of a parent topic multi-dispatched to LMQ queues, as a broker with enableLmq and
    enableMultiDispatch writes them: LmqDispatch.wrapLmqDispatch stamps each record's
    INNER_MULTI_QUEUE_OFFSET from the LMQ queues' counters before the put, and
    ConsumeQueue.multiDispatchLmqQueue adds a unit (the record's offset, size and tagsCode)
    to consumequeue/<lmq>/0/ at that offset after the parent's unit. `served` is what each
    queue's consumer gets: (topic, queue, offset) -> body."""

    def __init__(self, fanout=LMQ_FANOUT, unit_less: str | None = None):
        self.fanout = fanout
        self.unit_less = unit_less  # an LMQ queue the records name but that has no unit (an attack)
        self.units: dict[str, list[tuple[int, int, int]]] = {}
        self.served: dict[tuple[str, int, int], bytes] = {}

    def __call__(self, s: MessageStore) -> None:
        counters: dict[str, int] = {}
        for i, lmqs in enumerate(self.fanout):
            names = [*lmqs, self.unit_less] if self.unit_less else lmqs
            offsets = [counters.get(n, 0) for n in names]
            body = b"lmq message %d" % i
            r = s.put(Message.create("Parent", body, queue_id=i % 2, keys=[f"lmq-{i}"], tags="TagL", properties={
                PROPERTY_INNER_MULTI_DISPATCH: ",".join(names),
                PROPERTY_INNER_MULTI_QUEUE_OFFSET: ",".join(map(str, offsets))}))
            self.served[("Parent", i % 2, r.queue_offset)] = body
            for name, offset in zip(names, offsets):
                counters[name] = offset + 1
                if name != self.unit_less:
                    self.units.setdefault(name, []).append((r.commitlog_offset, r.size, s.flavor.tags_code("TagL")))
                    self.served[(name, 0, offset)] = body

    def write_units(self, root: str) -> None:
        """The LMQ queues' files, of the size of the parent's (the broker's mapped file size)."""
        parent = os.path.join(root, "consumequeue", "Parent", "0")
        size = os.path.getsize(os.path.join(parent, sorted(os.listdir(parent))[0]))
        for name, units in self.units.items():
            directory = os.path.join(root, "consumequeue", name, "0")
            os.makedirs(directory, mode=0o700)
            raw = b"".join(struct.pack(">qiq", *u) for u in units)
            with open(os.path.join(directory, "0" * 20), "wb") as f:
                f.write(raw + bytes(size - len(raw)))


def lmq_store(root: str, workload: LmqWorkload | None = None) -> LmqWorkload:
    workload = workload or LmqWorkload()
    broker_store(root, workload)
    workload.write_units(root)
    return workload


EXT_FILE_SIZE = 48 << 20  # mappedFileSizeConsumeQueueExt (a sparse file here)


def ext_store(root: str) -> dict[tuple[str, int, int], bytes]:
    """A store of a broker with enableConsumeQueueExt: each unit of topic Filtered holds the
    address of an ext unit (its tagsCode, store time and a filter bit map) in
    consumequeue_ext/Filtered/<q>/, as ConsumeQueue.putMessagePositionInfoWrapper writes
    them. Returns what each queue's consumer gets."""
    from mqfs.store.files.consume_queue_ext import encode_unit, ext_address

    served: dict[tuple[str, int, int], bytes] = {}

    def writes(s: MessageStore) -> None:
        for i in range(8):
            r = s.put(Message.create("Filtered", b"filtered %d" % i, queue_id=i % 2, keys=[f"f-{i}"],
                                     tags=f"Tag{i % 3}"))
            served[("Filtered", i % 2, r.queue_offset)] = b"filtered %d" % i

    broker_store(root, writes)
    with MessageStore(root, small_config(read_only=True), create=False) as s:
        msgs = {q: s.get_range("Filtered", q, 0, 100) for q in (0, 1)}
    for q, found in msgs.items():
        ext_dir = os.path.join(root, "consumequeue_ext", "Filtered", str(q))
        os.makedirs(ext_dir, mode=0o700)
        cq_dir = os.path.join(root, "consumequeue", "Filtered", str(q))
        cq = os.path.join(cq_dir, sorted(os.listdir(cq_dir))[0])
        ext, offset = bytearray(), 0
        with open(cq, "r+b") as f:
            for m in found:
                unit = encode_unit(s.flavor.tags_code(m.tags), m.store_timestamp, bytes([1 << m.queue_offset % 8]))
                f.seek(m.queue_offset * 20 + 12)
                f.write(struct.pack(">q", ext_address(offset)))
                ext += unit
                offset += len(unit)
        with open(os.path.join(ext_dir, "0" * 20), "wb") as f:
            f.write(bytes(ext))
            f.truncate(EXT_FILE_SIZE)
    return served


def store_hashes(root: str) -> dict[str, str]:
    """Every file of the store and its hash (what no command may change on a correct store)."""
    return file_hashes(root)


# the batches each queue of topic Batched receives, in put order: 1 is a plain message (a
# send of one message), n > 1 an inner batch of n (a batch send with a uniq id)
BATCH_PLAN = {0: (1, 3, 1, 4, 2), 1: (5, 1, 1)}
BATCH_T0 = 1_700_000_000_000  # step i of the plan is stored a minute after step i - 1


class BatchWorkload:
    """A BatchCQ topic (queue.type=BatchCQ) as a 5.x broker writes it. A batch send becomes one
    inner-batch record (SendMessageProcessor: SYSFLAG NEED_UNWRAP|INNER_BATCH, INNER_NUM the
    count of messages MessageDecoder.encodeMessages packed in the body; BatchConsumeQueue.
    assignQueueOffset: INNER_BASE and QUEUEOFFSET the queue's counter, which then advances by
    INNER_NUM); a single send a plain record. Each record gets a 46-byte unit in
    batchconsumequeue/<t>/<q>/ (base, batch size; 1 for a plain one) and none in
    consumequeue/. The broker's index holds the records' own keys (the batch's UNIQ_KEY),
    not the inner messages'. `served`: (topic, queue, offset) -> (body, keys, tags)."""

    topic = "Batched"

    def __init__(self, plan=BATCH_PLAN):
        self.plan = plan
        self.records: dict[int, list[tuple[int, int, int, int, int]]] = {}  # q -> (offset, size, tags, base, n)
        self.served: dict[tuple[str, int, int], tuple[bytes, str, str]] = {}
        self.store_ts: dict[int, int] = {}

    def __call__(self, s: MessageStore) -> None:
        from mqfs.store.format.batch import (
            INNER_BATCH_FLAG,
            NEED_UNWRAP_FLAG,
            PROPERTY_INNER_BASE,
            PROPERTY_INNER_NUM,
            encode_inner,
        )

        counters: dict[int, int] = {}
        for step in range(max(len(p) for p in self.plan.values())):
            for q, sizes in self.plan.items():
                if step >= len(sizes):
                    continue
                n, base = sizes[step], counters.get(q, 0)
                s.clock = lambda: BATCH_T0 + 60_000 * step  # noqa: B023 (called by this put)
                tags = f"Tag{step % 2}"
                inner = [(i, b"inner %d of queue %d" % (base + i, q),
                          {"KEYS": f"bk-{q}-{base + i}", "TAGS": tags, "UNIQ_KEY": f"U{q:02d}{base + i:06d}",
                           "WAIT": "true"}) for i in range(n)]
                if n == 1:
                    flag, body, props = inner[0]
                    msg = Message(self.topic, body, q, {**props, "CLUSTER": "DefaultCluster"})
                else:
                    msg = Message(self.topic, encode_inner(inner), q, {
                        "UNIQ_KEY": f"B{q:02d}{base:06d}", "WAIT": "true", "CLUSTER": "DefaultCluster",
                        PROPERTY_INNER_NUM: str(n), PROPERTY_INNER_BASE: str(base)},
                        sys_flag=NEED_UNWRAP_FLAG | INNER_BATCH_FLAG)
                r = s.put(msg)
                tags_code = s.flavor.tags_code(tags) if n == 1 else 0
                self.records.setdefault(q, []).append((r.commitlog_offset, r.size, tags_code, base, n))
                self.store_ts[r.commitlog_offset] = r.store_timestamp
                for i, (_, body, props) in enumerate(inner):
                    self.served[(self.topic, q, base + i)] = (body, props["KEYS"], tags)
                counters[q] = base + n

    def write_units(self, root: str, commitlog_file_size: int) -> None:
        """Each record's QUEUEOFFSET as the broker's counter gave it, the units in
        batchconsumequeue/ (files of FILE_UNITS units, zeros after the last) and no queue in
        consumequeue/."""
        from mqfs.store.format.batch import FILE_UNITS, UNIT_SIZE, encode_unit

        for q, records in self.records.items():
            for offset, _, _, base, _ in records:
                path = os.path.join(root, "commitlog", f"{offset // commitlog_file_size * commitlog_file_size:020d}")
                with open(path, "r+b") as f:
                    f.seek(offset % commitlog_file_size + 20)  # QUEUEOFFSET
                    f.write(struct.pack(">q", base))
            directory = os.path.join(root, "batchconsumequeue", self.topic, str(q))
            os.makedirs(directory, mode=0o755)
            raw = b"".join(encode_unit(off, size, tags, self.store_ts[off], base, n)
                           for off, size, tags, base, n in records)
            with open(os.path.join(directory, "0" * 20), "wb") as f:
                f.write(raw)
                f.truncate(FILE_UNITS * UNIT_SIZE)
        shutil.rmtree(os.path.join(root, "consumequeue", self.topic))
