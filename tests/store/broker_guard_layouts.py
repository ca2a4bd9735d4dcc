"""Broker stores with the RocketMQ 5 layouts mqfs must never harm, built as a 5.x broker leaves
them: records with our codec (rocketmq flavor, no whole-record checksum), then each feature's
files and config entries as RocketMQ's code writes them (paths from StorePathConfigHelper,
CompactionStore, TimerMessageStore, RocksDBConsumeQueueStore, BrokerPathConfigHelper).

Each `layout_*` function takes an empty directory and leaves a whole broker store in it."""

from __future__ import annotations

import os
import shutil
import struct

from mqfs.store import Message, MessageStore
from mqfs.store.format.batch import encode_unit
from mqfs.store.format.layout import MAGIC_BLANK
from tests.store.broker_layouts import BatchWorkload
from tests.store.helpers import small_config

T0 = 1_700_000_000_000

# config/topics.json as a 5.x broker writes it (fastjson, pretty, keys sorted): TBW102 carries
# PERM_INHERIT (perm 7) and every topic its attributes and fields
TOPICS_JSON = """{
\t"dataVersion":{
\t\t"counter":7,
\t\t"stateVersion":0,
\t\t"timestamp":1700000000123
\t},
\t"topicConfigTable":{
\t\t"TBW102":{
\t\t\t"attributes":{},
\t\t\t"order":false,
\t\t\t"perm":7,
\t\t\t"readQueueNums":8,
\t\t\t"topicFilterType":"SINGLE_TAG",
\t\t\t"topicName":"TBW102",
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":8
\t\t},
\t\t"Orders":{
\t\t\t"attributes":{
\t\t\t\t"message.type":"NORMAL"
\t\t\t},
\t\t\t"order":false,
\t\t\t"perm":6,
\t\t\t"readQueueNums":2,
\t\t\t"topicFilterType":"SINGLE_TAG",
\t\t\t"topicName":"Orders",
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":2
\t\t},
\t\t"ReadOnly":{
\t\t\t"attributes":{},
\t\t\t"order":true,
\t\t\t"perm":4,
\t\t\t"readQueueNums":1,
\t\t\t"topicFilterType":"MULTI_TAG",
\t\t\t"topicName":"ReadOnly",
\t\t\t"topicSysFlag":1,
\t\t\t"writeQueueNums":1
\t\t}%EXTRA%
\t},
\t"topicQueueMappingDataVersion":{
\t\t"counter":0,
\t\t"stateVersion":0,
\t\t"timestamp":1700000000000
\t}
}"""

# config/consumerOffset.json as a 5.x broker writes it: fastjson's unquoted integer keys,
# dataVersion, and fields mqfs has no use for
OFFSETS_JSON = """{
\t"dataVersion":{
\t\t"counter":42,
\t\t"stateVersion":0,
\t\t"timestamp":1700000000456
\t},
\t"groupTopicMap":{
\t\t"billing":["Orders"]
\t},
\t"offsetTable":{
\t\t"Orders@billing":{0:1,1:0
\t\t},
\t\t"ReadOnly@audit":{0:0
\t\t}
\t},
\t"pullOffsetTable":{}
}"""


def _topic_entry(name: str, attributes: dict[str, str], queues: int = 1) -> str:
    attrs = ",".join(f'\n\t\t\t\t"{k}":"{v}"' for k, v in attributes.items())
    return (f',\n\t\t"{name}":{{\n\t\t\t"attributes":{{{attrs}\n\t\t\t}},\n\t\t\t"order":false,'
            f'\n\t\t\t"perm":6,\n\t\t\t"readQueueNums":{queues},\n\t\t\t"topicFilterType":'
            f'"SINGLE_TAG",\n\t\t\t"topicName":"{name}",\n\t\t\t"topicSysFlag":0,'
            f'\n\t\t\t"writeQueueNums":{queues}\n\t\t}}')


def broker_store(root: str, writes=None, topics: dict[str, dict[str, str]] | None = None,
                 queues: int = 1) -> None:
    """A plain 5.x broker store: rocketmq flavor, no whole-record checksum, no mqfs.json, the
    broker's config/ (topics.json with `topics` added, consumerOffset.json, their .bak, and
    files mqfs never reads)."""
    cfg = small_config(flavor="rocketmq", record_crc=False, index_slots=64, index_entries=256)
    with MessageStore(root, cfg) as s:
        s.clock = lambda: T0
        for i in range(3):
            s.put(Message.create("Orders", b"order %d" % i, queue_id=i % 2, keys=[f"o{i}"],
                                 tags="created"))
        if writes is not None:
            writes(s)
    os.unlink(os.path.join(root, "mqfs.json"))
    shutil.rmtree(os.path.join(root, "config"))
    config = os.path.join(root, "config")
    os.mkdir(config, 0o755)
    extra = "".join(_topic_entry(t, a, queues) for t, a in (topics or {}).items())
    files = {"topics.json": TOPICS_JSON.replace("%EXTRA%", extra),
             "consumerOffset.json": OFFSETS_JSON,
             "subscriptionGroup.json": '{"dataVersion":{"counter":1},"subscriptionGroupTable":{}}',
             "delayOffset.json": '{"offsetTable":{}}'}
    for name, text in files.items():
        for suffix in ("", ".bak"):
            with open(os.path.join(config, name + suffix), "w") as f:
                f.write(text + "\n" * len(suffix))  # the broker's .bak: an older version
    with open(os.path.join(config, "topics.json.bak"), "w") as f:
        f.write(TOPICS_JSON.replace("%EXTRA%", "").replace('"counter":7', '"counter":6'))


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def _rocksdb_dir(path: str, tag: bytes) -> None:
    """The files RocksDB keeps in a database directory (contents are opaque to mqfs)."""
    _write(os.path.join(path, "CURRENT"), b"MANIFEST-000005\n")
    _write(os.path.join(path, "IDENTITY"), b"5a1c7c1e-0000-4000-8000-" + tag + b"\n")
    _write(os.path.join(path, "LOCK"), b"")
    _write(os.path.join(path, "MANIFEST-000005"), b"\x00rocksdb manifest " + tag)
    _write(os.path.join(path, "OPTIONS-000007"), b"[Version]\n  rocksdb_version=8.5.3\n")
    _write(os.path.join(path, "000008.log"), b"\x01wal " + tag)
    _write(os.path.join(path, "000009.sst"), b"\x02sst " + tag * 40)


def layout_rocksdb(root: str) -> None:
    """storeType=defaultRocksDB: consumequeue/ is a RocksDB database (RocksDBConsumeQueueStore
    opens StorePathConfigHelper.getStorePathConsumeQueue), and the broker's topics, offsets and
    groups live in RocksDB under config/topics/, config/consumerOffsets/,
    config/subscriptionGroups/ (RocksDB*ConfigManager.rocksdbConfigFilePath)."""
    broker_store(root)
    shutil.rmtree(os.path.join(root, "consumequeue"))
    _rocksdb_dir(os.path.join(root, "consumequeue"), b"cq")
    for name in ("topics", "consumerOffsets", "subscriptionGroups"):
        _rocksdb_dir(os.path.join(root, "config", name), name.encode())


class CompactionQueueFiles:
    """What RocketMQ 5's CompactionLog writes for one queue of a compaction topic, in memory:
    compactionLog files (copies of the CommitLog records, PHYSICALOFFSET set to the copy's own
    position; a BLANK where the next copy does not fit) and compactionCq files named as the
    log file they index (46-byte units; an end unit where a file is closed early), rolled
    when either is full (CompactionAppendMessageCallback.doAppend); `compact()` is
    CompactionLog.compactAndReplace. `served` is what the broker's getMessage gives."""

    def __init__(self, cq_size: int, log_size: int):
        self.cq_size, self.log_size = cq_size, log_size
        self.logs: dict[int, bytearray] = {}
        self.cqs: dict[int, bytearray] = {}
        self.kept: dict[int, list[tuple[int, str, bytes]]] = {}  # file -> (queue offset, keys, body)
        self.current = -1
        self.log_pos = self.cq_pos = 0
        self.newest = -1  # the newest queue offset taken ("fix duplicate")
        self.position = -1  # CompactionPositionMgr's offset for the queue

    def _roll(self, start: int) -> None:
        self.logs[start], self.cqs[start], self.kept[start] = bytearray(self.log_size), bytearray(self.cq_size), []
        self.current, self.log_pos, self.cq_pos = start, 0, 0

    def append(self, record: bytes, keys: str, body: bytes, tags_code: int, store_ts: int, queue_offset: int) -> None:
        if queue_offset <= self.newest or not keys:
            return
        if self.current < 0:
            self._roll(0)
        elif self.log_pos == self.log_size:
            self._roll(self.current + self.log_size)
        if self.cq_pos + 46 >= self.cq_size or len(record) + 8 > self.log_size - self.log_pos:
            cq, log = self.cqs[self.current], self.logs[self.current]
            if self.cq_pos + 46 <= self.cq_size:  # SparseConsumeQueue.putEndPositionInfo
                cq[self.cq_pos:self.cq_pos + 46] = struct.pack(">qiqqqhii", -1, 0, 0, 0, 0, 0, -1, 0)
            log[self.log_pos:self.log_pos + 8] = struct.pack(">ii", self.log_size - self.log_pos, MAGIC_BLANK)
            self._roll(self.current + self.log_size)
        position = self.current + self.log_pos
        copy = bytearray(record)
        copy[28:36] = struct.pack(">q", position)
        self.logs[self.current][self.log_pos:self.log_pos + len(copy)] = copy
        self.cqs[self.current][self.cq_pos:self.cq_pos + 46] = encode_unit(
            position, len(copy), tags_code, store_ts, queue_offset, 1)
        self.log_pos += len(copy)
        self.cq_pos += 46
        self.kept[self.current].append((queue_offset, keys, body))
        self.newest = queue_offset

    def compact(self) -> None:
        """Every file but the newest rewritten from offset 0 with the newest version of each
        key among them (a version with no body is dropped: a tombstone), newer files kept."""
        files = sorted(self.logs)
        if len(files) < 2:
            return
        older, newest_file = files[:-1], files[-1]
        if not any(e[0] > self.position for f in older for e in self.kept[f]):
            return
        latest: dict[str, int] = {}
        last = -1
        for f in older:
            for offset, keys, _ in self.kept[f]:
                if offset > self.position:
                    latest[keys], last = offset, offset
        records = [(f, i) for f in older for i in range(len(self.kept[f]))]
        old_logs, old_cqs, old_kept = self.logs, self.cqs, self.kept
        units = {f: [struct.unpack_from(">qiqqqhii", old_cqs[f], 46 * i) for i in range(len(old_kept[f]))]
                 for f in older}
        current = (old_logs[newest_file], old_cqs[newest_file], old_kept[newest_file], self.log_pos, self.cq_pos)
        self.logs, self.cqs, self.kept, self.current, self.newest = {}, {}, {}, -1, -1
        for f, i in records:
            offset, keys, body = old_kept[f][i]
            if offset > last or (offset >= latest.get(keys, -1) and body):
                position, size, tags_code, store_ts = units[f][i][:4]
                record = bytes(old_logs[f][position - f:position - f + size])
                self.append(record, keys, body, tags_code, store_ts, offset)
        self.logs[newest_file], self.cqs[newest_file], self.kept[newest_file], self.log_pos, self.cq_pos = current
        self.current = newest_file
        self.newest = max(e[0] for e in self.kept[newest_file])
        self.position = last

    def served(self) -> list[tuple[int, bytes]]:
        return [(offset, body) for f in sorted(self.kept) for offset, _, body in self.kept[f]]

    def write(self, root: str, topic: str, queue_id: int) -> None:
        for kind, files in (("compactionLog", self.logs), ("compactionCq", self.cqs)):
            for start, data in files.items():
                _write(os.path.join(root, "compaction", kind, topic, str(queue_id), f"{start:020d}"), bytes(data))


COMPACTION_CQ_SIZE = 16 * 46  # compactionCqMappedFileSize of these tests: 16 units a file


def _compaction_records(s: MessageStore) -> None:
    for i in range(96):  # seven keys on two queues, versions of many sizes, a tombstone
        body = b"" if i == 58 else (b"v%d of k%d " % (i, i % 7)) * (1 + i % 9) * 3
        s.put(Message.create("Compacted", body, queue_id=i % 2, keys=[f"k{i % 7}"],
                             tags=f"T{i % 3}"))


def layout_compaction(root: str, compact_after: int = 64, topic_attributes: dict[str, str] | None = None
                      ) -> dict[tuple[str, int, int], bytes]:
    """cleanup.policy=COMPACTION: the topic's records stay in the CommitLog and its
    ConsumeQueue; the broker's dispatcher (CommitLogDispatcherCompaction) also copies each
    into compaction/compactionLog/<t>/<q>/ with a unit in compaction/compactionCq/<t>/<q>/,
    its compaction rewrites the older files to the newest version of each key, and
    CompactionPositionMgr keeps compaction/position-checkpoint. Here the first
    `compact_after` records are dispatched, each queue compacted, then the rest dispatched.
    Returns what the broker serves: (topic, queue, offset) -> body."""
    from mqfs.store.format.compaction import log_file_size

    broker_store(root, _compaction_records,
                 {"Compacted": topic_attributes or {"cleanup.policy": "COMPACTION"}})
    with MessageStore(root, small_config(read_only=True), create=False) as s:
        msgs = sorted((m for q in (0, 1) for m in s.get_range("Compacted", q, 0, 1000)),
                      key=lambda m: m.commitlog_offset)
    tags = {}  # each record's tagsCode, as its ConsumeQueue unit holds it (one file: 48 units)
    for q in (0, 1):
        with open(os.path.join(root, "consumequeue", "Compacted", str(q), "0" * 20), "rb") as f:
            units = f.read()
        tags.update({(q, m.queue_offset): struct.unpack_from(">q", units, m.queue_offset * 20 + 12)[0]
                     for m in msgs if m.queue_id == q})
    log = b"".join(open(os.path.join(root, "commitlog", n), "rb").read()
                   for n in sorted(os.listdir(os.path.join(root, "commitlog"))))
    queues = {q: CompactionQueueFiles(COMPACTION_CQ_SIZE, log_file_size(COMPACTION_CQ_SIZE, 4096)) for q in (0, 1)}
    for i, m in enumerate(msgs):
        if i == compact_after:
            for files in queues.values():
                files.compact()
        record = log[m.commitlog_offset:m.commitlog_offset + m.total_size]
        queues[m.queue_id].append(record, m.properties["KEYS"], bytes(m.body), tags[(m.queue_id, m.queue_offset)],
                                  m.store_timestamp, m.queue_offset)
    served = {}
    for q, files in queues.items():
        files.write(root, "Compacted", q)
        served.update({("Compacted", q, offset): body for offset, body in files.served()})
    positions = ",".join(f'"Compacted_{q}":{files.position}' for q, files in queues.items())
    _write(os.path.join(root, "compaction", "position-checkpoint"), f'{{"queueOffsetMap":{{{positions}}}}}'.encode())
    return served


def _timer_records(s: MessageStore) -> None:
    for i in range(3):
        s.put(Message.create("rmq_sys_wheel_timer", b"timer %d" % i, properties={
            "TIMER_DELIVER_MS": str(T0 + 60_000 * (i + 1)), "REAL_TOPIC": "Orders",
            "REAL_QID": "0", "TIMER_OUT_MS": str(T0 + 60_000 * (i + 1))}))


def layout_timer(root: str) -> None:
    """Timer messages (TimerMessageStore): records on rmq_sys_wheel_timer with their queue,
    `timerwheel` (32-byte slots), `timerlog/` (52-byte units), config/timercheck and
    config/timermetrics."""
    broker_store(root, _timer_records)
    slot = struct.pack(">qqqii", T0 + 60_000, 0, 0, 1, 0x30ED)
    _write(os.path.join(root, "timerwheel"), slot * 64)
    unit = struct.pack(">iqiqiqiiq", 52, 0, 0x3B, T0, 60, 0, 200, 0, 0)
    _write(os.path.join(root, "timerlog", "0" * 20), unit * 3 + b"\x00" * 1024)
    _write(os.path.join(root, "config", "timercheck"),
           struct.pack(">qqqqqqq", T0, 156, 3, 3, 0, T0, 1) + b"\x00" * 4040)
    _write(os.path.join(root, "config", "timermetrics"), b'{"dataVersion":{},"timingCount":{}}')


def layout_batch_cq(root: str, workload: BatchWorkload | None = None) -> BatchWorkload:
    """queue.type=BatchCQ: the topic's units live in batchconsumequeue/<t>/<q>/ (46 bytes:
    offset, size, tagsCode, store time, msgBaseOffset, batchSize, compactedOffset, reserved),
    none in consumequeue/; inner-batch records hold several messages (BatchWorkload)."""
    workload = workload or BatchWorkload()
    broker_store(root, workload, {workload.topic: {"queue.type": "BatchCQ"}}, queues=2)
    workload.write_units(root, small_config().commitlog_file_size)
    return workload


def layout_cq_ext(root: str) -> None:
    """enableConsumeQueueExt: consumequeue_ext/<t>/<q>/ holds (tagsCode, store time, bit map)
    units the ConsumeQueue's tagsCodes address."""
    broker_store(root)
    _write(os.path.join(root, "consumequeue_ext", "Orders", "0", "0" * 20),
           struct.pack(">hhqq", 0, 0, 1, T0) * 2 + b"\x00" * 64)


def layout_lmq(root: str) -> None:
    """enableLmq/enableMultiDispatch: a parent record carries INNER_MULTI_DISPATCH and the
    broker adds a unit to consumequeue/%LMQ%a/0/ pointing at it."""
    def writes(s: MessageStore) -> None:
        s.put(Message.create("Parent", b"to lmq", properties={
            "INNER_MULTI_DISPATCH": "%LMQ%a", "INNER_MULTI_QUEUE_OFFSET": "0"}))

    broker_store(root, writes)
    parent = os.path.join(root, "consumequeue", "Parent", "0", "0" * 20)
    with open(parent, "rb") as f:
        unit = f.read(20)
    _write(os.path.join(root, "consumequeue", "%LMQ%a", "0", "0" * 20),
           unit + b"\x00" * (os.path.getsize(parent) - 20))


def layout_pop_kv(root: str) -> None:
    """Pop consumption with its RocksDB store (PopConsumerService: STORE/kvStore/)."""
    broker_store(root)
    _rocksdb_dir(os.path.join(root, "kvStore"), b"pop")


def layout_ha_epoch(root: str) -> None:
    """Controller-mode HA (AutoSwitchHAService): EpochFileCache keeps `epochFileCheckpoint`
    (and its .bak) in the store root, one line per epoch: epoch-startOffset."""
    broker_store(root)
    for name in ("epochFileCheckpoint", "epochFileCheckpoint.bak"):
        _write(os.path.join(root, name), b"1-0\n")


def layout_unknown(root: str) -> None:
    """A directory a newer broker (or another tool) keeps in the store root."""
    broker_store(root)
    _write(os.path.join(root, "tieredstore", "metadata.json"), b"{}")


LAYOUTS = {"rocksdb": layout_rocksdb, "compaction": layout_compaction, "timer": layout_timer,
           "batch-cq": layout_batch_cq, "pop-kv-store": layout_pop_kv,
           "consumequeue-ext": layout_cq_ext, "lmq": layout_lmq, "ha-epoch": layout_ha_epoch,
           "unknown": layout_unknown}
