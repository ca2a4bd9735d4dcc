"""The CommitLog's pages read into memory ahead of the appends, by a thread of their own: a
put's copy into the mapping then meets pages already in the page cache instead of faulting
each one in (the kernel allocating and zeroing it: most of a put's kernel time), and on a
second core that work overlaps the puts. Pages are only read in (MADV_POPULATE_READ), never
written or dirtied: the files and what reaches the disk are unchanged (a page cache holding
zero pages past the end makes SEEK_DATA count them as data until they are evicted: readers
that skip never-written extents read those zeros)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

STEP = 1 << 20  # how far the appends go before the thread is told again
WINDOW = 4 << 20  # bytes read in past the appends' end


class Prefault:
    """Told by the C put where the appends reached (`note`, under the put lock, every STEP
    bytes); its thread, started at the first note, reads in the WINDOW bytes after that."""

    def __init__(self, populate: Callable[[Any, int, int], bool]):
        """`populate(mm, start, end)`: _records.populate (the GIL released around the read)."""
        self._populate = populate
        self._wake = threading.Event()
        self._want: tuple[Any, int] | None = None  # (MappedFile, end of its appends)
        self._closed = False
        self._thread: threading.Thread | None = None
        self.read_to: tuple[Any, int] = (None, 0)  # (file, end of what was read in there)

    def note(self, mf: Any, end: int) -> int:
        """The appends reached `end` in `mf`: the CommitLog offset past which to note again."""
        self._want = (mf, end)
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._run, name="mqfs-prefault", daemon=True)
            self._thread.start()
        self._wake.set()
        return mf.file_from_offset + end + STEP

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            want = self._want
            if self._closed or want is None:
                return
            mf, end = want
            done_in, done = self.read_to
            lo = max(end, done) if done_in is mf else end
            hi = min(mf.file_size, end + WINDOW)
            if lo < hi:  # (False on a kernel without it: the puts fault their pages in)
                self._populate(mf.mm, lo, hi)
            self.read_to = (mf, max(hi, lo))

    def close(self) -> None:
        """Stop the thread (before the files close: it holds the mapping while it reads)."""
        self._closed = True
        self._want = None
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        self.read_to = (None, 0)
