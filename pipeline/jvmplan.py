"""What the JVM reader (pipeline/*.java) is handed: each partition the Python reader
planned, as JSON the JVM parses.

There is one planner, this package's: offsets, splits, unit selection, pushdown and pruning
are decided in Python (the reference for what a read selects), in the planning worker Spark
already runs for every read of a Python data source. When ScopedScans asks for a JVM read (the
JVM key in the read schema's metadata), the reader's partitions are turned into explicit work:
byte ranges of CommitLog files to walk, or the CommitLog positions of the units a few-queue
read (or a stream's micro-batch: RecordStream.java) selected, with the row filter, the checks
and the store's flavor. The JVM reader then
decodes the records itself, with no Python worker per task; it is held to the Python codec by
tests/pipeline/test_pipeline_jvm.py.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Protocol

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from mqfs.store.meta.features import BAD_POLICY, Features, recognise
from mqfs.store.offline.views import StoreLayout

from . import compacted
from .locality import fingerprint
from .options import ReadOptions
from .recognised import planning
from .scan import RowFilter
from .stores import StorePartition, StoresReader, StoresStreamReader
from .stream import MqfsStreamReader, QueueRange, units_by_file
from .unit_rows import UnitRows
from .units import UnitRange

JVM = "mqfs.jvm"  # = ScopedScans.JVM: the read schema's metadata key asking for a JVM plan
SLOTS = "mqfs.slots"  # = RecordScan.SLOTS: beside it, the session's cores (Spark's defaultParallelism)
# Store features (store/meta/features.py) whose rows the JVM reader does not give yet: a store
# with one is read by the Python reader (FallbackReader), never answered short
JVM_UNREAD = (BAD_POLICY,)
_said = False


def jvm_unread(root: str, found: Features | None = None) -> str | None:
    """Why the JVM reader cannot read the store at `root` (a feature it does not read), or
    None; `found`: its features, when recognised already. Recognition reads a few listings and
    files, never the store's records (features.recognise); the source does it once per
    DataFrame, with its pinned snapshot."""
    found = found if found is not None else recognise(root)
    for name in JVM_UNREAD:
        feature = found.named(name)
        if feature is not None:
            return f"{root} uses {name} ({feature.seen}), which the JVM reader does not read yet"
    return None


def jvm_asked(schema: StructType | None) -> bool:
    return bool(schema is not None and schema.fields and (schema.fields[0].metadata or {}).get(JVM))


def jvm_slots(schema: StructType | None) -> int | None:
    """The session's cores the JVM scan named (jvm_asked), for tasks that keep them all busy."""
    slots = (schema.fields[0].metadata or {}).get(SLOTS) if schema is not None and schema.fields else None
    return slots if isinstance(slots, int) and slots > 0 else None


def say_python_reads() -> None:
    """Once per process: this read decodes in Python workers (no JVM half on the class path)."""
    global _said
    if not _said:
        _said = True
        print("mqfs: the JVM reader is not on Spark's class path (run scripts/setup, which puts "
              "mqfs-spark.jar in pyspark's jars); reading through Python workers, slower", file=sys.stderr)


class JvmPartition(InputPartition):
    """One planned partition as JSON, and the host that holds its store (None: any; the
    `hosts` option, pipeline/locality.py), pickled as those alone (the JVM unpickles them)."""

    def __init__(self, index: int, text: str, host: str | None = None):
        super().__init__(index)
        self.text = text
        self.host = host

    def __reduce__(self):
        return (JvmPartition, (self.value, self.text, self.host))


class PythonRead(InputPartition):
    """The first partition of a read the JVM scan hands to the Python reader (RecordScan.java
    reads the other partitions through Spark's Python batch): `why` is said once."""

    def __init__(self, why: str):
        super().__init__(0)
        self.why = why

    def __reduce__(self):
        return (PythonRead, (self.why,))


class FallbackReader(DataSourceReader):
    """The Python reader's partitions after a PythonRead: the JVM scan of a store with a
    feature the JVM reader does not read (`jvm_unread`) reads them through Python workers."""

    def __init__(self, reader: DataSourceReader, why: str):
        self.reader = reader
        self.why = why

    def partitions(self) -> list[InputPartition]:
        return [PythonRead(self.why), *self.reader.partitions()]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, PythonRead):  # the JVM scan never sends it; it holds no rows
            return iter(())
        return self.reader.read(partition)


class PlannedReader(Protocol):
    """What the JVM plan takes of a Python reader (source.MqfsReader, which imports this
    module): its store, options and partitions, and whether it checks headers only."""

    layout: StoreLayout
    opts: ReadOptions
    jvm: bool
    slots: int | None

    def partitions(self) -> list[InputPartition]: ...

    def _header_only(self) -> bool: ...


class JvmPlanReader(DataSourceReader):
    """The Python reader's plan, for the JVM: partitions() only (the JVM reads them)."""

    def __init__(self, reader: PlannedReader | StoresReader, hosts: dict[str, str], slots: int | None):
        self.reader = reader
        self.hosts = hosts
        readers: list[PlannedReader] = reader.readers if isinstance(reader, StoresReader) else [reader]
        for r in readers:
            r.jvm = True  # tasks sized for the JVM
            r.slots = slots

    def partitions(self) -> list[InputPartition]:
        """The plan and its description in one `planning()`: the units the plan selected are
        described from the same reads, not read again."""
        prints: dict[str, str] = {}
        with planning():
            if isinstance(self.reader, StoresReader):
                roots = self.reader.roots
                parts = [p for p in self.reader.partitions() if isinstance(p, StorePartition)]
                plans = [(_describe(self.reader.readers[p.store], p.inner, roots[p.store], prints),
                          self.hosts.get(roots[p.store])) for p in parts]
            else:
                host = self.hosts.get(self.reader.layout.root)
                plans = [(_describe(self.reader, p, None, prints), host) for p in self.reader.partitions()]
        return _jvm_partitions(plans) or [JvmPartition(0, "null")]  # "null": no rows

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        raise RuntimeError("mqfs: a JVM-planned partition is read by the JVM reader")


class JvmStreamPlan(MqfsStreamReader):
    """A stream whose micro-batches the JVM reads (RecordStream.java): offsets, limits and
    queue ranges are MqfsStreamReader's, each handed over as the CommitLog positions of its
    units, read with the stream's row filter and checks, on the store's host."""

    def partitions(self, start, end) -> list[InputPartition]:
        prints: dict[str, str] = {}
        return _jvm_partitions([(_describe_queue(self, p, None, prints), self.host)
                                for p in self.queue_ranges(start, end)])

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        raise RuntimeError("mqfs: a JVM-planned partition is read by the JVM reader")


class JvmStoresStreamPlan(StoresStreamReader):
    """JvmStreamPlan over several stores: each store's partitions, naming their store and host."""

    def partitions(self, start, end) -> list[InputPartition]:
        plans = []
        prints: dict[str, str] = {}
        for p in self.store_ranges(start, end):
            if isinstance(p, StorePartition) and isinstance(p.inner, QueueRange):
                reader = self.readers[p.store]
                plans.append((_describe_queue(reader, p.inner, self.roots[p.store], prints), reader.host))
        return _jvm_partitions(plans)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        raise RuntimeError("mqfs: a JVM-planned partition is read by the JVM reader")


def _jvm_partitions(plans: list[tuple[dict, str | None]]) -> list[InputPartition]:
    return [JvmPartition(i, json.dumps(p, separators=(",", ":")), host) for i, (p, host) in enumerate(plans)]


def _describe_queue(reader: MqfsStreamReader, part: QueueRange, store: str | None, prints: dict[str, str]) -> dict:
    """A micro-batch's queue range as the JVM reads it (what MqfsStreamReader.read reads)."""
    return {**_common(reader.layout, reader.opts, store), "checksums": True, "filter": _filter(reader.rows_of(part)),
            "units": _unit_files(reader.layout, part, reader.opts, prints)}


def _print(path: str, prints: dict[str, str]) -> str:
    """The file's fingerprint (locality.fingerprint), once per plan."""
    if path not in prints:
        prints[path] = fingerprint(path)
    return prints[path]


def _listed(values: frozenset | None) -> list | None:
    return None if values is None else sorted(values)


def _filter(flt: RowFilter) -> dict:
    return {"topics": _listed(flt.topics), "queues": _listed(flt.queues), "startMs": flt.start_ms,
            "endMs": flt.end_ms, "queueOffsets": list(flt.queue_offsets),
            "commitlogOffsets": list(flt.commitlog_offsets),
            "queueRanges": None if flt.queue_ranges is None else [list(r) for r in flt.queue_ranges],
            "allRecords": flt.all_records, "excludedTopics": sorted(flt.excluded_topics)}


def _common(layout: StoreLayout, opts: ReadOptions, store: str | None) -> dict:
    flavor = layout.checked_flavor
    return {"store": store, "flavor": flavor.name, "recordCrc": flavor.record_crc,
            "skip": opts.skip_damaged, "kafka": opts.kafka,
            "root": layout.root, "indexSlots": layout.index_slots}  # the resync's IndexPoints


def _describe(reader: PlannedReader, part: InputPartition, store: str | None, prints: dict[str, str]) -> dict:
    """A partition of `reader` as the JVM reads it: each CommitLog file with its fingerprint,
    which the task checks before reading it."""
    layout = reader.layout
    opts = reader.opts
    out = _common(layout, opts, store)
    if isinstance(part, UnitRows):  # no file read: rows from queue offsets alone
        return {**out, "checksums": False, "filter": _filter(RowFilter()), "rows": [list(r) for r in part.ranges]}
    if isinstance(part, UnitRange):
        return {**out, "checksums": True, "filter": _filter(part.flt),
                "units": _unit_files(layout, part, opts, prints)}
    if isinstance(part, compacted.CompactedPartition):  # the copies compaction/ serves
        files, lost = compacted.unit_files(layout, part)
        for f in files:
            f["print"] = _print(f["path"], prints)
        return {**out, "checksums": True, "filter": _filter(compacted.served_filter(part)),
                "compacted": {"topic": part.topic, "queue": part.queue_id, "files": files, "lost": lost}}
    pieces = getattr(part, "pieces", None)
    if not pieces:  # nothing planned: Spark's InputPartition(None)
        return {**out, "checksums": True, "filter": _filter(RowFilter()), "pieces": []}
    return {**out, "checksums": not reader._header_only(), "filter": _filter(pieces[0].flt),
            "pieces": [{"path": p.path, "from": p.file_from, "start": p.start, "end": p.end,
                        "print": _print(p.path, prints)} for p in pieces]}


def _unit_files(layout: StoreLayout, part: QueueRange, opts, prints: dict[str, str]) -> list[dict]:
    """The CommitLog positions of queue entries [start, end), per file in queue order (what
    stream.read_queue_range reads, data loss included)."""
    return [{"path": path, "from": file_from, "at": pos.tolist(), "print": _print(path, prints)}
            for (file_from, path), pos in units_by_file(layout, part, opts).items()]
