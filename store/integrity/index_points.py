"""Where the store's indexes say records start: the resync's second witness.

After damage that leaves no chain to follow (the damaged record's header is gone, or what
comes after its span does not check out), a walk searches for the next record by its magic
code. A record that checks out there may still be a well-formed record planted inside a
body. A ConsumeQueue unit or an IndexFile entry pointing at it says the store wrote a record
there, so the search takes only a record an index points at, wherever the indexes reach
(below the highest CommitLog offset any of them points at); past that (records no index
holds yet: the tail a crash left) the record's own checks decide, as they did before.
docs/format.md ("Resync after damage") is the rule.

The points are read from the files' units and entries, never from an IndexFile's header
(it may be what is damaged), only when such damage is met, and once per CommitLog file: a
walk without it reads none.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from ..files import safefs
from ..files.consume_queue import PRE_BLANK, UNIT_DTYPE, UNIT_SIZE
from ..files.index_file import ENTRY_DTYPE, ENTRY_SIZE, HEADER_SIZE, SLOT_SIZE


class IndexPoints:
    """The CommitLog offsets a store's indexes point at, asked one CommitLog file at a time."""

    def __init__(self, root: str, index_slots: int):
        self.root = root
        self.index_slots = index_slots
        self._files: dict[int, np.ndarray] = {}  # a CommitLog file's start -> sorted points in it
        self._reach = -1  # the highest offset any index points at (-1: none read yet)

    def loaded(self, file_from: int) -> bool:
        """Whether the points of a CommitLog file are read (`accepts` reads them otherwise:
        a caller under a lock reads them first, outside it, with `load`)."""
        return file_from in self._files

    def load(self, file_from: int, file_size: int) -> None:
        if file_from not in self._files:
            self._files[file_from] = self._read(file_from, file_from + file_size)

    def accepts(self, offset: int, file_from: int, file_size: int) -> bool:
        """Whether a record found by the search at `offset` (in the CommitLog file starting at
        `file_from`) may be taken: an index points at it, or no index reaches it."""
        self.load(file_from, file_size)
        points = self._files[file_from]
        if offset > self._reach:
            return True
        i = int(np.searchsorted(points, offset))
        return i < len(points) and int(points[i]) == offset

    def _read(self, lo: int, hi: int) -> np.ndarray:
        """Every ConsumeQueue unit's and IndexFile entry's offset in [lo, hi), sorted; the
        highest offset of all on the way."""
        found = [self._in_range(offsets, lo, hi) for offsets in self._all()]
        return np.unique(np.concatenate(found)) if found else np.empty(0, dtype=np.int64)

    def _in_range(self, offsets: np.ndarray, lo: int, hi: int) -> np.ndarray:
        if len(offsets):
            self._reach = max(self._reach, int(offsets.max()))
        return offsets[(offsets >= lo) & (offsets < hi)]

    def _all(self) -> Iterator[np.ndarray]:
        """The offsets of each ConsumeQueue file, then of each IndexFile (entry 0 is never
        written; an entry never written is zeros)."""
        base = os.path.join(self.root, "consumequeue")
        for topic in _names(base):
            for queue in _names(os.path.join(base, topic)):
                directory = os.path.join(base, topic, queue)
                for name in _names(directory):
                    data = _read(os.path.join(directory, name))
                    units = np.frombuffer(data, UNIT_DTYPE, count=len(data) // UNIT_SIZE)
                    sizes = units["size"]  # zeros: never written; PRE_BLANK: below the head
                    yield units["offset"].astype(np.int64)[(sizes > 0) & (sizes != PRE_BLANK[1])]
        directory = os.path.join(self.root, "index")
        start = HEADER_SIZE + self.index_slots * SLOT_SIZE
        for name in _names(directory):
            data = _read(os.path.join(directory, name))
            if len(data) <= start:
                continue
            entries = np.frombuffer(data, ENTRY_DTYPE, count=(len(data) - start) // ENTRY_SIZE,
                                    offset=start)
            yield entries["phy"].astype(np.int64)[(entries["hash"] != 0) | (entries["phy"] != 0)]


def _names(directory: str) -> list[str]:
    """The entries of a directory of the store (safefs: a planted link is refused); none
    when it is not there or is no directory."""
    try:
        return sorted(safefs.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _read(path: str) -> bytes:
    try:
        return safefs.read_bytes(path)
    except (FileNotFoundError, IsADirectoryError):
        return b""
