"""A BatchCQ topic's queue: the broker's `batchconsumequeue/<topic>/<queue>/` files, read only
(docs/format.md, "BatchCQ"). mqfs never writes them (a read-write open refuses the store).

Files are named by byte offset and hold 46-byte units (store/format/batch.py) up to the first
one the broker has not written. Unlike a ConsumeQueue a unit's position says nothing of its
queue offset: a unit covers [msgBaseOffset, msgBaseOffset + batchSize), found by a binary
search. The units read are kept; a later read takes in what the broker appended since.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import numpy as np

from ..errors import CorruptionError, StoreError
from ..format import batch
from . import safefs

BATCH_CQ_DIR = "batchconsumequeue"

_CHUNK = 46 << 10  # bytes read at a time from the end already read (1024 units)


class BatchQueue:
    """One queue's units, whole and checked for order: each unit starts where the one before
    it ends. A file cut inside a unit, a unit that does not follow on, or a file that stops
    before its end while a later one exists is damage: `damage` names it and reads stop
    before it (never another message)."""

    def __init__(self, root: str, topic: str, queue_id: int, visible_to: Callable[[], int] | None = None):
        self.topic, self.queue_id = topic, queue_id
        self.visible_to = visible_to  # the CommitLog's shown end: units past it wait (a live writer)
        self.directory = os.path.join(root, BATCH_CQ_DIR, topic, str(queue_id))
        self._lock = threading.Lock()
        self._files: list[tuple[int, int]] = []  # (start, bytes of whole units read) per file
        self._units = np.zeros(0, dtype=batch.UNIT_DTYPE)
        self._closed = False  # a file ended short or the order broke: nothing after it is read
        self._columns: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # bases, ends, record ends
        self.damage: str | None = None

    def _names(self) -> list[int]:
        try:
            return sorted(int(n) for n in safefs.listdir(self.directory) if len(n) == 20 and n.isdigit())
        except (OSError, StoreError):
            return []

    def refresh(self) -> None:
        """Take in units the broker wrote since the last read."""
        with self._lock:
            if self._closed:
                return
            starts = self._names()
            known = {s for s, _ in self._files}
            if self._files:
                self._extend(*self._files.pop())
            for start in starts:
                if start not in known and not self._closed:
                    if self._files and self._files[-1][1] < start - self._files[-1][0]:
                        self._stop(f"{self._path(self._files[-1][0])} ends at unit "
                                   f"{self._files[-1][1] // batch.UNIT_SIZE} while {start:020d} follows")
                        break
                    self._extend(start, 0)

    def _path(self, start: int) -> str:
        return os.path.join(self.directory, f"{start:020d}")

    def _stop(self, why: str) -> None:
        self._closed, self.damage = True, why

    def _extend(self, start: int, read: int) -> None:
        """Read the file at `start` on from byte `read`; keep (start, bytes of whole units)."""
        path = self._path(start)
        try:
            fd = safefs.open_file(path)
        except (OSError, StoreError):
            self._files.append((start, read))
            return
        try:
            size = os.fstat(fd).st_size
            pos = read
            while pos < size:  # a file not read yet at once; new units of a known one a bit at a time
                raw = os.pread(fd, size - pos if not read else min(_CHUNK, size - pos), pos)
                whole = len(raw) // batch.UNIT_SIZE * batch.UNIT_SIZE
                if not whole:
                    self._stop(f"{path}: a unit cut short at byte {pos} ({size - pos} bytes)")
                    break
                units = np.frombuffer(raw[:whole], dtype=batch.UNIT_DTYPE)
                n = batch.written(units)
                if not self._take(units[:n], path, pos):
                    break
                pos += n * batch.UNIT_SIZE
                if n < len(units):
                    break
        finally:
            os.close(fd)
        self._files.append((start, pos))

    def _take(self, units: np.ndarray, path: str, pos: int) -> bool:
        """Append units that follow on; stop (damage) at the first that does not."""
        if not len(units):
            return True
        base = units["base"].astype(np.int64)
        ends = base + units["batch"].astype(np.int64)
        expected = np.concatenate(([self.max_offset if len(self._units) else base[0]], ends[:-1]))
        bad = np.flatnonzero(base != expected)
        n = int(bad[0]) if len(bad) else len(units)
        self._units = np.concatenate((self._units, units[:n].copy()))
        self._columns = None
        if n < len(units):
            self._stop(f"{path}: unit {(pos // batch.UNIT_SIZE) + n} starts at queue offset "
                       f"{int(base[n])}, not {int(expected[n])}")
            return False
        return True

    @property
    def max_offset(self) -> int:
        """One past the last unit read (shown or not)."""
        if not len(self._units):
            return 0
        last = self._units[-1]
        return int(last["base"]) + int(last["batch"])

    def bounds(self) -> tuple[int, int]:
        units = self.units()
        if not len(units):
            return 0, 0
        return int(units["base"][0]), int(units["base"][-1]) + int(units["batch"][-1])

    def _searched(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(bases, ends, record ends) of the units read, as int64, made once per growth."""
        with self._lock:
            if self._columns is None or len(self._columns[0]) != len(self._units):
                u = self._units
                bases = u["base"].astype(np.int64)
                self._columns = (bases, bases + u["batch"].astype(np.int64),
                                 u["offset"].astype(np.int64) + u["size"].astype(np.int64))
            return self._columns

    def _shown(self) -> int:
        """How many of the units read the CommitLog shows the records of."""
        n = len(self._units)
        if self.visible_to is not None and n:
            n = int(np.searchsorted(self._searched()[2], self.visible_to(), side="right"))
        return n

    def units(self) -> np.ndarray:
        """Every unit read so far (refreshed) whose record the CommitLog shows."""
        self.refresh()
        return self._units[:self._shown()]

    def covering(self, lo: int, hi: int) -> np.ndarray:
        """The units holding any of queue offsets [lo, hi)."""
        self.refresh()
        n = self._shown()
        if not n or hi <= lo:
            return self._units[:0]
        bases, ends, _ = self._searched()
        first = int(np.searchsorted(ends[:n], lo, side="right"))
        last = int(np.searchsorted(bases[:n], hi, side="left"))
        return self._units[first:last]

    def messages(self, lo: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(queue offsets, unit index into `covering`'s result repeated per message) of the
        messages at [lo, lo + n) that the queue holds."""
        units = self.covering(lo, lo + n)
        if not len(units):
            return np.zeros(0, dtype=np.int64), units
        counts = units["batch"].astype(np.int64)
        which = np.repeat(np.arange(len(units)), counts)
        offsets = np.repeat(units["base"].astype(np.int64), counts)
        offsets += np.arange(len(which)) - np.repeat(np.cumsum(counts) - counts, counts)
        keep = (offsets >= lo) & (offsets < lo + n)
        return offsets[keep], units[which[keep]]

    def unit_at(self, queue_offset: int) -> tuple[int, int, int, int, int] | None:
        """(CommitLog offset, size, tagsCode, base, batch) of the unit holding queue_offset."""
        units = self.covering(queue_offset, queue_offset + 1)
        if not len(units):
            return None
        u = units[0]
        return int(u["offset"]), int(u["size"]), int(u["tags"]), int(u["base"]), int(u["batch"])

    def check(self) -> None:
        """CorruptionError when the queue's files are damaged (reads serve what comes before)."""
        self.refresh()
        if self.damage:
            raise CorruptionError(f"BatchCQ {self.topic}/{self.queue_id}: {self.damage}")


def batch_queue_ids(root: str, topic: str) -> list[int]:
    """The queue ids with a directory under batchconsumequeue/<topic>/."""
    try:
        names = safefs.listdir(os.path.join(root, BATCH_CQ_DIR, topic))
    except (OSError, StoreError):
        return []
    return sorted(int(n) for n in names if n.isdigit() and len(n) < 10)


def batch_topics(root: str) -> list[str]:
    """The topics with a directory under batchconsumequeue/."""
    try:
        return sorted(safefs.subdirs(os.path.join(root, BATCH_CQ_DIR)))
    except (OSError, StoreError):
        return []
