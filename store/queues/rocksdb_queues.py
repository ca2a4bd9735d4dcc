"""A broker's RocksDB ConsumeQueue (storeType=defaultRocksDB) read from RocksDB itself, so an
open costs what a ConsumeQueue open costs: the queue list and each queue's min and max come
from the `offset` column family (two keys a queue), units from the default one when a read
asks (docs/format.md, "RocksDB ConsumeQueue").

The broker writes units without RocksDB's write-ahead log: what a kill lost, and what the
broker added after RocksDB's last flush, is read from the CommitLog records past the offset
the database says it holds (`CHECKPOINT_TOPIC`), as the broker's own recovery dispatches them.

Nothing in the broker's `consumequeue/` is written, made or renamed: rocksdict writes its own
`rocksdict-config.json`, and RocksDB its info LOG, in the directory it opens, so it opens a
private directory of ours whose names are links to `/proc/self/fd/N` of files we opened
without following links and checked regular. RocksDB reads exactly the files checked.
`open_queues` says in one line why it could not (no rocksdict, a link planted, a database
rocksdict refuses, a checkpoint the CommitLog does not bear out): the caller then walks
the CommitLog, as before.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..config import parse_delay_levels
from ..errors import UntrustedStore
from ..files import safefs
from ..files.consume_queue import UNIT_DTYPE, RebuiltQueue
from ..files.dispatcher import TagsCodes
from ..format import layout
from ..format.columns import RecordRun
from ..integrity.parts import StoreParts
from ..integrity.scanner import scan_end

Key = tuple[str, int]
Unit = tuple[int, int, int, int]  # queue offset, CommitLog offset, size, tagsCode
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"  # the offset family's key of the dispatched CommitLog end
_VALUE = struct.Struct(">qiqq")  # CommitLog offset, size, tagsCode, store time
_VALUE_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8"), ("time", ">i8")])
_MIN_MAX = struct.Struct(">qq")  # CommitLog offset, queue offset
_CTRL_1 = b"\x01"


def unit_key(topic: bytes, queue_id: int, queue_offset: int) -> bytes:
    """The default family's key of a unit: len(topic), 1, topic, 1, queue id, 1, offset."""
    return b"".join((struct.pack(">i", len(topic)), _CTRL_1, topic, _CTRL_1,
                     struct.pack(">i", queue_id), _CTRL_1, struct.pack(">q", queue_offset)))


def _offset_key(key: bytes) -> tuple[str, str, int] | None:
    """(topic, "min"/"max", queue id) of an offset-family key; None for any other shape."""
    if len(key) < 14:
        return None
    (n,) = struct.unpack_from(">i", key)
    if n < 0 or len(key) != 14 + n or key[4:5] != _CTRL_1 or key[5 + n:6 + n] != _CTRL_1 \
            or key[9 + n:10 + n] != _CTRL_1:
        return None
    try:
        topic = key[5:5 + n].decode()
    except UnicodeDecodeError:
        return None
    return topic, key[6 + n:9 + n].decode("latin-1"), struct.unpack_from(">i", key, 10 + n)[0]


class Shadow:
    """A private directory whose every name links to an fd of the broker's file of that name,
    opened without following links and checked regular (safefs.open_file): RocksDB and
    rocksdict make their files here, never in the broker's directory."""

    def __init__(self, db_dir: str):
        self.path = tempfile.mkdtemp(prefix="mqfs_rocksdb_")  # 0700: ours alone
        self._fds: list[int] = []
        try:
            subdirs = set(safefs.subdirs(db_dir))  # (a link among them refused)
            for name in sorted(safefs.listdir(db_dir)):
                # the writer's lock, its info logs; a double-writing broker's ConsumeQueue files
                if name == "LOCK" or name.startswith("LOG") or name in subdirs:
                    continue
                fd = safefs.open_file(os.path.join(db_dir, name))
                self._fds.append(fd)
                os.symlink(f"/proc/self/fd/{fd}", os.path.join(self.path, name))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
        shutil.rmtree(self.path, ignore_errors=True)


class RocksDB:
    """The broker's database opened read-only through a `Shadow`; units read on demand."""

    def __init__(self, db_dir: str):
        from rocksdict import AccessType, Options, Rdict, ReadOptions  # optional: the caller falls back
        self._read_options = ReadOptions
        self.shadow = Shadow(db_dir)
        try:
            opts = Options(raw_mode=True)
            opts.create_if_missing(False)
            opts.set_db_log_dir(self.shadow.path)
            self.db: Any = Rdict(self.shadow.path, options=opts,
                                 column_families={"offset": Options(raw_mode=True)},
                                 access_type=AccessType.read_only(False))
        except BaseException:
            self.shadow.close()
            raise
        self.offsets: Any = self.db.get_column_family("offset")

    def offset_rows(self) -> Iterator[tuple[tuple[str, str, int], bytes]]:
        for key, value in self.offsets.items():
            parsed = _offset_key(key)
            if parsed is not None:
                yield parsed, value

    def units(self, topic: bytes, queue_id: int, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """(queue offsets, values) of the queue's units in [start, stop), in order: RocksDB
        bounds the iteration, numpy parses it (a listing of a big queue)."""
        if start >= stop:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=_VALUE_DTYPE)
        read = self._read_options()
        read.set_iterate_upper_bound(unit_key(topic, queue_id, stop))
        keys, values = [], []
        for key, value in self.db.items(from_key=unit_key(topic, queue_id, start), read_opt=read):
            if len(value) == _VALUE.size and len(key) == len(topic) + 19:  # else no unit's
                keys.append(key)
                values.append(value)
        offsets = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(-1, len(topic) + 19)[:, -8:]
        return (np.ascontiguousarray(offsets).view(">i8").ravel().astype(np.int64),
                np.frombuffer(b"".join(values), dtype=_VALUE_DTYPE))

    def close(self) -> None:
        del self.offsets
        self.db.close()
        self.shadow.close()


class RocksQueue(RebuiltQueue):
    """A queue served from RocksDB below `rocks_max`, and from the CommitLog records above it
    (the in-memory units a live follower or the open's tail walk adds: `extend`)."""

    def __init__(self, db: RocksDB, topic: str, queue_id: int, low: int, rocks_max: int):
        super().__init__(topic, queue_id, rocks_max, np.empty(0, dtype=UNIT_DTYPE))
        self.min_offset = low
        self._db, self._name, self.rocks_max = db, topic.encode(), rocks_max

    def extend(self, found: list[Unit]) -> None:
        """Units of records found past what RocksDB holds (the open's tail walk, a live
        follower's, one thread): in place before `max_offset` shows them."""
        above = [f for f in found if f[0] >= self.rocks_max]
        if not above:
            return
        top = max(f[0] for f in above) + 1
        if top - self.rocks_max > len(self._units):
            units = np.zeros(max(top - self.rocks_max, 2 * len(self._units)), dtype=UNIT_DTYPE)
            units["offset"] = -1
            units[:len(self._units)] = self._units
            self._units = units
        for queue_offset, commitlog_offset, size, tags in above:
            self._units[queue_offset - self.rocks_max] = (commitlog_offset, size, tags)
        self.max_offset = max(self.max_offset, top)

    def entry(self, queue_offset: int) -> tuple[int, int, int] | None:
        units = self.entries(queue_offset, 1)
        if queue_offset < self.min_offset or not len(units) or units["offset"][0] < 0:
            return None
        return int(units["offset"][0]), int(units["size"][0]), int(units["tags"][0])

    def entries(self, queue_offset: int, n: int) -> np.ndarray:
        lo = max(queue_offset, self.min_offset)
        hi = max(lo, min(queue_offset + n, self.max_offset))
        out = np.zeros(hi - lo, dtype=UNIT_DTYPE)
        out["offset"] = -1  # an offset no unit holds reads as missing
        at, values = self._db.units(self._name, self.queue_id, lo, min(hi, self.rocks_max))
        for field in ("offset", "size", "tags"):
            out[field][at - lo] = values[field]
        if hi > self.rocks_max and len(self._units):
            start = max(lo, self.rocks_max)
            out[start - lo:] = self._units[start - self.rocks_max:hi - self.rocks_max]
        return out


def open_queues(parts: StoreParts) -> tuple[RocksDB, dict[Key, RebuiltQueue]] | str:
    """Every queue of the broker's RocksDB ConsumeQueue, with the units of the records past
    what the database holds; or why not (one line: the caller walks the CommitLog)."""
    try:
        db = RocksDB(os.path.join(parts.root, "consumequeue"))
    except ImportError:
        return "rocksdict is not installed"
    except UntrustedStore as exc:
        return str(exc)
    except Exception as exc:  # rocksdict's own: a database it refuses
        return f"RocksDB refused consumequeue/: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    try:
        found = _queues(db, parts)
    except BaseException:
        db.close()
        raise
    if isinstance(found, str):
        db.close()
    return found if isinstance(found, str) else (db, found)


def _queues(db: RocksDB, parts: StoreParts) -> dict[Key, RebuiltQueue] | str:
    bounds: dict[Key, dict[str, tuple[int, int]]] = {}
    held = None
    for (topic, kind, queue_id), value in db.offset_rows():
        if topic == CHECKPOINT_TOPIC:
            if kind == "max" and len(value) == 8:
                held = struct.unpack(">q", value)[0]
            continue
        if kind in ("min", "max") and len(value) == _MIN_MAX.size:
            bounds.setdefault((topic, queue_id), {})[kind] = _MIN_MAX.unpack(value)
    log = parts.commitlog.queue
    if held is None:
        return "the RocksDB ConsumeQueue holds no dispatched CommitLog offset (a broker killed " \
               "before its first flush)"
    if not log.min_offset <= held <= log.max_offset and not (held == 0 == log.max_offset):
        return f"the RocksDB ConsumeQueue says it holds the CommitLog to {held}, outside the " \
               f"log's {log.min_offset}..{log.max_offset}"
    queues: dict[Key, RebuiltQueue] = {}  # RocksQueue each, and those only the tail names
    for key, kinds in bounds.items():
        if "max" not in kinds:
            continue
        top = kinds["max"][1] + 1
        low = min(kinds["min"][1], top) if "min" in kinds else 0
        if not 0 <= low < top or not len(db.units(key[0].encode(), key[1], top - 1, top)[0]):
            return f"the RocksDB ConsumeQueue's max of {key[0]}/{key[1]} ({top - 1}) names no unit"
        queue = RocksQueue(db, key[0], key[1], low, top)
        if "min" in kinds and kinds["min"][0] < log.min_offset:  # retention deleted its head
            queue.min_offset = _first_kept(queue, log.min_offset)
        queues[key] = queue
    tail, end, why = _tail(parts, held)
    if why is not None and end < log.max_offset:
        return f"the CommitLog past the RocksDB ConsumeQueue's offset {held} does not read: {why}"
    for key, units in tail.items():
        if key in queues:
            queues[key].extend(units)
        else:
            queues[key] = RebuiltQueue.of(key[0], key[1], units)
    return queues


def _first_kept(queue: RocksQueue, log_min: int) -> int:
    """The queue's minimum as its consumers get it: its first unit whose record the broker's
    retention kept (RocksDB's min lags a deletion, as RocketMQ's correctMinOffset finds)."""
    lo, hi = queue.min_offset, queue.max_offset
    while lo < hi:
        mid = (lo + hi) // 2
        entry = queue.entries(mid, 1)
        if len(entry) and 0 <= int(entry["offset"][0]) < log_min:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _tail(parts: StoreParts, start: int) -> tuple[dict[Key, list[Unit]], int, str | None]:
    """The units of the checked records from CommitLog offset `start` to the log's end (the
    broker's dispatch RocksDB had not flushed), as `LiveReader` adds them."""
    tags = TagsCodes(parts.flavor, parse_delay_levels(parts.config.message_delay_level))
    found: dict[Key, list[Unit]] = {}

    def take(run: RecordRun) -> None:
        rows = np.flatnonzero(layout.in_queue(run.sys_flag)).tolist()
        codes = tags.column(run.topics, run.tags, run.delays, run.store_ts).tolist()
        for i in rows:
            unit = (int(run.commitlog_offset[i]), int(run.size[i]), codes[i])
            found.setdefault((run.topics[i], int(run.queue_id[i])), []).append(
                (int(run.queue_offset[i]), *unit))
            for topic, queue_id, queue_offset in run.dispatched[i] if run.dispatched is not None else ():
                found.setdefault((topic, queue_id), []).append((queue_offset, *unit))

    if start >= parts.commitlog.queue.max_offset:
        return found, start, None
    end, _, why = scan_end(parts.commitlog, parts.flavor, start, start, take)
    return found, end, why
