"""Appends through `df.write.format("mqfs").mode("append").save(STORE)`.

Rows need `topic` and `body` (binary or string); `queue_id` (or `queue`), `keys` (array or
space-separated string), `tags` and `properties` (map) are optional. With option
`mount=/path/to/mountpoint` rows go through the mount's `/topics/<t>/<q>/append.jsonl` files
(the store is held by the mount daemon); otherwise each task opens the store with
MessageStore, waiting up to `lockTimeout` seconds (default 300) for the store lock, so tasks
write one at a time.

No duplicates on retry: every row gets a deterministic UNIQ_KEY `mqfs-<job>-<partition>-<row>`
(a row that already carries UNIQ_KEY keeps it and is deduplicated by it). The job id is the
`jobId` option when given, so rerunning a whole job with the same jobId over the same input
writes nothing twice; without it, one is drawn on the driver, which covers task retries only.
UNIQ_KEY is indexed, so a task first looks its rows up and skips those a
failed earlier attempt already wrote. Attempts write in row order while holding the lock, so
what an earlier attempt left is a prefix: lookups stop at the first row not found. This needs
a deterministic row order inside each input partition, as any Spark retry does.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from mqfs.store import Message, MessageStore, StoreLocked
from mqfs.store.format.jsonl import encode_line
from mqfs.store.format.message import PROPERTY_UNIQ_KEY

CHUNK = 1000
_JOB_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


@dataclass
class WriteSummary(WriterCommitMessage):
    partition: int
    written: int
    skipped: int


def to_message(row, dedup_key: str) -> Message:
    d = row.asDict() if hasattr(row, "asDict") else dict(row)
    body = d.get("body")
    if body is None:
        raise ValueError("a row to write has no body")
    if isinstance(body, str):
        body = body.encode("utf-8")
    keys = d.get("keys") or []
    if isinstance(keys, str):
        keys = keys.split()
    props = dict(d.get("properties") or {})
    props.setdefault(PROPERTY_UNIQ_KEY, dedup_key)
    queue = d.get("queue_id", d.get("queue"))
    return Message.create(str(d["topic"]), bytes(body), queue_id=int(queue or 0), keys=list(keys),
                          tags=d.get("tags") or None, properties=props)


def _chunks(items: Iterable[Message], n: int) -> Iterator[list[Message]]:
    chunk: list[Message] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= n:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class StoreSink:
    """Direct appends with MessageStore, holding the store lock for the whole task."""

    def __init__(self, root: str, lock_timeout: float):
        deadline = time.monotonic() + lock_timeout
        while True:
            try:
                self.store = MessageStore(root).open()
                return
            except StoreLocked as exc:
                if time.monotonic() > deadline:
                    raise StoreLocked(f"{exc}; waited lockTimeout={lock_timeout:g} s (when a mount "
                                      "holds the store, write with .option('mount', MOUNTPOINT))"
                                      ) from None
                time.sleep(0.1)

    def exists(self, msg: Message) -> bool:
        key = msg.properties[PROPERTY_UNIQ_KEY]
        return bool(self.store.query_key(key, topic=msg.topic, max_n=1))

    def append(self, messages: list[Message]) -> None:
        self.store.put_batch(messages)

    def close(self) -> None:
        self.store.close()


class MountSink:
    """Appends through a mounted store's JSON-lines append files."""

    def __init__(self, mount: str):
        self.mount = mount

    def exists(self, msg: Message) -> bool:
        hits = os.path.join(self.mount, "keys", msg.properties[PROPERTY_UNIQ_KEY])
        return os.path.isdir(hits) and bool(os.listdir(hits))

    def append(self, messages: list[Message]) -> None:
        i = 0
        while i < len(messages):  # one open/close per run of rows for the same queue
            t, q = messages[i].topic, messages[i].queue_id
            j = i
            lines = []
            while j < len(messages) and (messages[j].topic, messages[j].queue_id) == (t, q):
                lines.append(encode_line(messages[j]))
                j += 1
            queue_dir = os.path.join(self.mount, "topics", t, str(q))
            if not os.path.isdir(queue_dir):  # mkdir creates a topic or queue in the mount
                os.makedirs(queue_dir, exist_ok=True)
            with open(os.path.join(queue_dir, "append.jsonl"), "a") as f:
                f.write("".join(lines))
            i = j

    def close(self) -> None:
        pass


def _unescape(field: str) -> str:
    """A /proc/self/mountinfo field: spaces, tabs, newlines and backslashes are octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mount_points(root: str) -> list[str]:
    """Where this machine has the store at `root` mounted by mqfs (a FUSE mount whose source
    is the store directory)."""
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        head, sep, tail = line.partition(" - ")
        parts, rest = head.split(), tail.split()
        if sep and len(parts) >= 5 and len(rest) >= 2 and rest[0] == "fuse.mqfs" \
                and os.path.abspath(_unescape(rest[1])) == root:
            found.append(_unescape(parts[4]))
    return found


class MqfsWriter(DataSourceWriter):
    def __init__(self, root: str, schema: StructType, options):
        if "topic" not in schema.fieldNames() or "body" not in schema.fieldNames():
            raise ValueError("rows written to mqfs need at least the columns topic and body")
        self.root = root
        self.mount = options.get("mount")
        mounted = [] if self.mount else mount_points(root)
        if mounted:  # the mount daemon holds the store: direct appends would wait for nothing
            raise ValueError(f"the store {root} is mounted at {mounted[0]}, whose daemon holds it: "
                             f"write through the mount with .option('mount', '{mounted[0]}')")
        self.lock_timeout = float(options.get("lockTimeout") or 300)
        job = options.get("jobId")
        if job is not None and not _JOB_ID.fullmatch(str(job)):
            raise ValueError(f"jobId={job!r}: use 1-64 letters, digits, '.', '_' or '-'")
        self.job = str(job) if job else uuid.uuid4().hex[:16]  # same for every task attempt

    def write(self, iterator: Iterator) -> WriteSummary:
        return self.write_job(iterator, self.job)

    def write_job(self, iterator: Iterator, job: str) -> WriteSummary:
        """One task's rows, each with UNIQ_KEY mqfs-<job>-<partition>-<row>."""
        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx else 0
        messages = (to_message(row, f"mqfs-{job}-{part}-{i}") for i, row in enumerate(iterator))
        sink = MountSink(self.mount) if self.mount else StoreSink(self.root, self.lock_timeout)
        written = skipped = 0
        checking = True
        try:
            for chunk in _chunks(messages, CHUNK):
                while checking and chunk and sink.exists(chunk[0]):
                    chunk.pop(0)
                    skipped += 1
                if chunk:
                    checking = False
                    sink.append(chunk)
                    written += len(chunk)
        finally:
            sink.close()
        return WriteSummary(part, written, skipped)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Rows are already in the store when a task succeeds; nothing is staged."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Appends of tasks that succeeded stay in the store: a store cannot take them back."""


class MqfsStreamWriter(DataSourceStreamWriter):
    """`writeStream.format("mqfs")`: every micro-batch appended exactly once. The job id of a
    batch is `<query id>-<batch id>` (Spark hands both to every task; the query id is kept in
    the checkpoint), so a batch run again after a failure or a driver crash finds the rows an
    earlier attempt wrote by their UNIQ_KEY and writes only the rest, as a jobId rerun does.
    Like any Spark retry, it needs each partition's rows in a deterministic order."""

    def __init__(self, root: str, schema: StructType, options):
        self.batch_writer = MqfsWriter(root, schema, options)

    def write(self, iterator: Iterator) -> WriteSummary:
        ctx = TaskContext.get()
        query = ctx.getLocalProperty("sql.streaming.queryId") if ctx else None
        batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx else None
        if not query or batch is None:
            raise RuntimeError("the mqfs sink runs only inside a streaming query (no query or batch id)")
        return self.batch_writer.write_job(iterator, f"{query}-{batch}")

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Rows are already in the store when a task succeeds; nothing is staged."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Appends of tasks that succeeded stay: the batch runs again and skips them."""
