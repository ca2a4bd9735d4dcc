"""A compaction topic's queues as the broker serves them, read from its `compaction/` files
(store/format/compaction.py says what they hold). Read only: mqfs never writes, moves or
deletes anything there.

A queue's units are read at its first use, and a compactionCq file again only when it
changes (the broker appends to the newest, and its compaction replaces files); the records are
read where a unit points, and each must be the copy the unit describes: a unit that does
not is a CorruptionError, never another message.
"""

from __future__ import annotations

import bisect
import os
import threading

import numpy as np

from ..errors import CodecError, CorruptionError, NotFound, StoreError
from ..format import codec, compaction
from ..format.flavor import Flavor
from ..format.message import StoredMessage
from . import safefs

_NAME_LEN = 20


def _files(directory: str) -> list[tuple[int, int, int]]:
    """(start, size, mtime ns) of the 20-digit files of a directory, by start; links and other
    entries are left out (never followed); [] when the directory is absent."""
    try:
        with safefs.directory(directory, write=False) as fd:
            out = []
            for entry in os.scandir(fd):
                if len(entry.name) == _NAME_LEN and entry.name.isdigit() and \
                        entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    out.append((int(entry.name), st.st_size, st.st_mtime_ns))
            return sorted(out)
    except (OSError, StoreError):
        return []


def _read_whole(path: str, size: int) -> bytes:
    fd = safefs.open_file(path)
    try:
        return os.pread(fd, size, 0)
    finally:
        os.close(fd)


class CompactedQueue:
    """One queue of a compaction topic: its compactionCq units and compactionLog copies."""

    def __init__(self, root: str, topic: str, queue_id: int, flavor: Flavor):
        self.topic, self.queue_id, self.flavor = topic, queue_id, flavor
        base = os.path.join(root, compaction.DIRECTORY)
        self.cq_dir = os.path.join(base, compaction.CQ_DIRECTORY, topic, str(queue_id))
        self.log_dir = os.path.join(base, compaction.LOG_DIRECTORY, topic, str(queue_id))
        self._lock = threading.Lock()
        self._seen: tuple | None = None
        self.units = np.zeros(0, dtype=compaction.UNIT)
        self._read: dict[tuple[int, int, int], np.ndarray] = {}  # (start, size, mtime) -> units
        self.cq_files: list[tuple[int, int]] = []  # (name, units it serves)
        self._logs: list[tuple[int, int]] = []  # (start, size) of the compactionLog files

    def refresh(self) -> None:
        """Take in what the broker wrote since the last look (a stat of each file)."""
        cq, logs = _files(self.cq_dir), _files(self.log_dir)
        seen = (tuple(cq), tuple(logs))
        with self._lock:
            if seen == self._seen:
                return
            parts, counts, read = [], [], {}
            for start, size, mtime in cq:
                units = self._read.get((start, size, mtime))
                if units is None:
                    try:
                        raw = _read_whole(os.path.join(self.cq_dir, f"{start:020d}"), size)
                    except OSError:  # replaced by a compaction since the listing: look again next time
                        return
                    units = np.frombuffer(raw, dtype=compaction.UNIT,
                                          count=len(raw) // compaction.UNIT_SIZE)
                    units = units[:compaction.written(units)]
                read[(start, size, mtime)] = units
                parts.append(units)
                counts.append((start, len(units)))
            self._read = read
            self.units = np.concatenate(parts) if parts else np.zeros(0, dtype=compaction.UNIT)
            self.cq_files = counts
            self._logs = [(start, size) for start, size, _ in logs]
            self._seen = seen

    @property
    def min_offset(self) -> int:
        return int(self.units["base"][0]) if len(self.units) else 0

    @property
    def max_offset(self) -> int:
        """One past the newest copy's queue offset (the broker's maxOffsetInQueue)."""
        if not len(self.units):
            return 0
        last = self.units[-1]
        return int(last["base"]) + int(last["batch"])

    def units_in(self, offset: int, n: int) -> np.ndarray:
        """The units whose queue offsets lie in [offset, offset + n): compaction leaves gaps."""
        bases = self.units["base"]
        lo = int(np.searchsorted(bases, offset, "left"))
        hi = int(np.searchsorted(bases, offset + max(n, 0), "left"))
        return self.units[lo:hi]

    def units_from(self, offset: int, n: int) -> np.ndarray:
        """The first n units at or after queue offset `offset` (a listing goes over gaps)."""
        lo = int(np.searchsorted(self.units["base"], offset, "left"))
        return self.units[lo:lo + max(n, 0)]

    def unit_at(self, offset: int) -> np.void | None:
        found = self.units_in(offset, 1)
        return found[0] if len(found) else None

    def offset_by_time(self, ts: int, upper: bool = False) -> int:
        """The first copy stored at or after ts (lower), the last at or before it (upper)."""
        times = self.units["store_time"]
        if upper:
            i = int(np.searchsorted(times, ts, "right")) - 1
            return int(self.units["base"][i]) if i >= 0 else self.min_offset
        i = int(np.searchsorted(times, ts, "left"))
        return int(self.units["base"][i]) if i < len(times) else self.max_offset

    def log_file_of(self, position: int, size: int = 1) -> int:
        """The start of the compactionLog file holding [position, position + size), or -1."""
        i = bisect.bisect_right(self._logs, (position, 1 << 62)) - 1
        if i < 0 or position + size > self._logs[i][0] + self._logs[i][1]:
            return -1
        return self._logs[i][0]

    def log_path(self, start: int) -> str:
        return os.path.join(self.log_dir, f"{start:020d}")

    def read(self, unit: np.void) -> StoredMessage:
        """The copy a unit points at, checked against it: CorruptionError when it is not."""
        position, size = int(unit["offset"]), int(unit["size"])
        where = f"compactionCq {self.topic}/{self.queue_id} unit for offset {int(unit['base'])}"
        start = self.log_file_of(position, size)
        if start < 0:
            raise CorruptionError(f"{where} points at {position}, past the compactionLog's files "
                                  f"({self.log_dir})")
        try:
            fd = safefs.open_file(self.log_path(start))
            try:
                raw = os.pread(fd, size, position - start)
            finally:
                os.close(fd)
        except (OSError, StoreError) as exc:
            raise CorruptionError(f"{where}: compactionLog file {start:020d} unreadable: {exc}") from None
        try:
            msg = codec.decode(raw, 0, copy_body=True) if len(raw) == size else None
            if msg is None:
                raise CodecError(f"the file ends {size - len(raw)} bytes short of it")
            if self.flavor.body_crc(msg.stored_body) != msg.body_crc:
                raise CodecError("body checksum mismatch")
            msg.properties  # noqa: B018 (a checked read decodes the properties, as codec's does)
        except CodecError as exc:
            raise CorruptionError(f"{where}: damaged copy at {position}: {exc}") from None
        wrong = compaction.mismatch(unit, self.topic, self.queue_id, msg.topic, msg.queue_id,
                                    msg.queue_offset, msg.commitlog_offset, msg.total_size,
                                    msg.store_timestamp)
        if wrong is not None:
            raise CorruptionError(f"{where} does not describe its record: {wrong}")
        return msg

    def body_size(self, unit: np.void) -> int:
        """The size of the body a consumer gets, 0 for a damaged copy (reading it says why)."""
        try:
            return len(self.read(unit).body)
        except CorruptionError:
            return 0

    def get(self, offset: int) -> StoredMessage:
        unit = self.unit_at(offset)
        if unit is None:
            raise NotFound(f"no message at {self.topic}/{self.queue_id}/{offset} as the broker "
                           f"serves the compaction topic (offsets {self.min_offset}.."
                           f"{self.max_offset - 1}, with gaps where versions were compacted away)")
        return self.read(unit)


class CompactionViews:
    """The compaction topics of a store served as the broker serves them, one CompactedQueue
    per queue, made at first use. `topics` are those whose topics.json entry says
    cleanup.policy=COMPACTION; they are served from compaction/ only when the store has
    compaction/compactionCq/ (the broker's enableCompaction, on by default). `unreadable` maps
    topics whose cleanup.policy RocketMQ does not know to it: the broker's reads of them fail
    (CleanupPolicy.valueOf), so do these."""

    def __init__(self, root: str, topics: frozenset[str], flavor: Flavor,
                 unreadable: dict[str, str] | None = None):
        served = safefs.is_dir(os.path.join(root, compaction.DIRECTORY, compaction.CQ_DIRECTORY))
        self.root, self.flavor = root, flavor
        self.unreadable = unreadable or {}
        self.topics = (topics if served else frozenset()) | frozenset(self.unreadable)
        self._queues: dict[tuple[str, int], CompactedQueue] = {}
        self._lock = threading.Lock()

    def __contains__(self, topic: object) -> bool:
        return topic in self.topics

    def queue(self, topic: str, queue_id: int) -> CompactedQueue:
        policy = self.unreadable.get(topic)
        if policy is not None:
            raise CorruptionError(f"config/topics.json gives {topic} cleanup.policy={policy!r}, "
                                  "which RocketMQ does not know (DELETE or COMPACTION): the "
                                  "broker fails its reads, and so does mqfs")
        key = (topic, queue_id)
        with self._lock:
            found = self._queues.get(key)
            if found is None:
                found = self._queues[key] = CompactedQueue(self.root, topic, queue_id, self.flavor)
        found.refresh()
        return found

    def queue_ids(self, topic: str) -> list[int]:
        """The queues that have compaction files."""
        base = os.path.join(self.root, compaction.DIRECTORY, compaction.CQ_DIRECTORY, topic)
        try:
            return sorted(int(n) for n in safefs.subdirs(base) if n.isdigit())
        except (OSError, StoreError):
            return []
