"""Several stores read as one: `load([a, b])` and globs (`load("/data/broker-*/store")`), one
store per broker. Each store is read exactly as alone (its own snapshot, checks and plan); the
rows get a `store` column naming the directory they came from. A stream over several stores
keeps one checkpoint: its offsets are `{store: {topic: {queue: next}}}`."""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, Filter, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from mqfs.store.meta.manifest import is_store

from .locality import checked, opened
from .stream import backlog, pack, share_out

_MAGIC = re.compile(r"[*?[]")


def several(options: Mapping[str, str]) -> bool:
    """Whether a read names stores by a list or a glob (its rows then say which store)."""
    return bool(options.get("paths")) or bool(_MAGIC.search(options.get("path") or ""))


def store_roots(options: Mapping[str, str]) -> list[str]:
    """The store directories of `path` or `paths`, globs expanded (to the directories that
    hold a store), in order, each once."""
    given = json.loads(options["paths"]) if options.get("paths") else [options.get("path")]
    roots: list[str] = []
    for path in given:
        if not path:
            raise ValueError('give the store directory: spark.read.format("mqfs").load("/path/to/store")')
        matches = [path]
        if _MAGIC.search(path):
            matches = sorted(m for m in glob.glob(path) if is_store(m))
            if not matches:
                raise ValueError(f"{path!r} matches no store directory")
        roots += [os.path.abspath(m) for m in matches if os.path.abspath(m) not in roots]
    return roots


class StorePartition(InputPartition):
    """A partition of the store at index `store` of the read's stores."""

    def __init__(self, store: int, inner: InputPartition):
        super().__init__((store, inner.value))
        self.store, self.inner = store, inner


def root_of(roots: list[str], partition: InputPartition) -> str:
    """The store a StorePartition of a read of `roots` reads."""
    assert isinstance(partition, StorePartition)
    return roots[partition.store]


def _with_store(batches: Iterable[pa.RecordBatch], root: str) -> Iterator[pa.RecordBatch]:
    for b in batches:
        yield b.append_column(pa.field("store", pa.string(), False), pa.array([root] * b.num_rows, pa.string()))


class StoresReader(DataSourceReader):
    """Batch reads of several stores: every store's own reader, partitions side by side."""

    def __init__(self, roots: list[str], readers: list, store_column: bool = True):
        self.roots, self.readers, self.store_column = roots, readers, store_column

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Each store's reader takes the same filters (they are the same kind of reader)."""
        left = None
        for r in self.readers:
            left = list(r.pushFilters(filters))
        return filters if left is None else left

    def partitions(self) -> list[InputPartition]:
        return [StorePartition(i, p) for i, r in enumerate(self.readers) for p in r.partitions()]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, StorePartition):  # nothing planned: InputPartition(None)
            return
        rows = self.readers[partition.store].read(partition.inner)
        yield from _with_store(rows, self.roots[partition.store]) if self.store_column else rows


Offsets = dict[str, dict]


class StoresStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream over several stores, limited and held back as one."""

    def __init__(self, roots: list[str], readers: list, store_column: bool = True):
        self.roots, self.readers, self.store_column = roots, readers, store_column

    def initialOffset(self) -> Offsets:
        return {root: r.initialOffset() for root, r in zip(self.roots, self.readers)}

    def prepareForTriggerAvailableNow(self) -> None:
        for r in self.readers:
            r.prepareForTriggerAvailableNow()

    def getDefaultReadLimit(self):
        return self.readers[0].getDefaultReadLimit()

    def latestOffset(self, start: Offsets | None = None, limit=None) -> Offsets:
        """Every store's queues as one set: a row limit is shared out in proportion to each
        queue's backlog and minOffsetsPerTrigger counts the rows waiting in all stores, as
        Kafka's source does over the partitions of all its topics."""
        begin: dict[tuple[int, str, int], int] = {}
        end: dict[tuple[int, str, int], int] = {}
        for i, (root, r) in enumerate(zip(self.roots, self.readers)):
            b, e = r.span((start or {}).get(root))
            begin.update({(i, *k): v for k, v in b.items()})
            end.update({(i, *k): v for k, v in e.items()})
        first = self.readers[0]
        upto = begin if first.waits(backlog(begin, end)) else share_out(begin, end, first.cap(limit))
        return {root: pack({k[1:]: v for k, v in upto.items() if k[0] == i})
                for i, root in enumerate(self.roots)}

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        """Every store's queue ranges, as locality.Checked partitions naming their store's host."""
        hosts = {root: r.host for root, r in zip(self.roots, self.readers) if r.host}
        return checked(self.store_ranges(start, end), lambda p: root_of(self.roots, p), hosts)

    def store_ranges(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        return [StorePartition(i, p) for i, (root, r) in enumerate(zip(self.roots, self.readers))
                for p in r.queue_ranges(start.get(root, {}), end.get(root, {}))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        partition = opened(partition)
        if not isinstance(partition, StorePartition):
            return
        rows = self.readers[partition.store].read(partition.inner)
        yield from _with_store(rows, self.roots[partition.store]) if self.store_column else rows

    def commit(self, end: Offsets) -> None:
        """Nothing to do: the stores are only read; progress lives in Spark's checkpoint."""

