"""Telling the kernel to forget attributes that moved (a queue's, a topic's, /topics' mtime),
as often as a reader can tell the difference and no more often.

Every invalidation costs a GETATTR at the next path walk through the inode: a shell loop
appending to `topics/t/0/append` walks /topics, the topic, the queue and `append`, so
telling at every message doubled the requests of each `echo >` (10 instead of 6). An inode
is told at once when it was not told in the last `every` seconds; within that interval it
is told once more, at the interval's end, by a thread of its own. So a time the kernel shows
is at most `every` behind the newest message, and a burst of appends costs one invalidation
per inode per interval instead of one per message.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

FORGET_EVERY = 0.02  # seconds: the most a shown mtime lags the newest message, in a burst


class Forgetting:
    """Called with inodes whose attributes moved (from worker threads); `tell` sends the
    invalidations (pyfuse3's, in the adapter)."""

    def __init__(self, tell: Callable[[list[int]], None], every: float = FORGET_EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.tell, self.every, self.clock = tell, every, clock
        self._cond = threading.Condition()
        self._told: dict[int, float] = {}  # inode -> when it was last told
        self._owed: set[int] = set()  # moved since it was told: told at the interval's end
        self._wake_at = math.inf  # when the thread looks at the owed inodes next
        self._thread: threading.Thread | None = None
        self._stopped = False

    def stop(self) -> None:
        """Before the FUSE session closes: nothing is told after this returns."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join()

    def __call__(self, inodes: list[int]) -> None:
        now = self.clock()
        at_once = []
        wake = False
        with self._cond:
            if self._stopped:
                return
            for ino in inodes:
                told = self._told.get(ino, -self.every)
                if now - told >= self.every:
                    self._told[ino] = now
                    self._owed.discard(ino)
                    at_once.append(ino)
                elif ino not in self._owed:
                    self._owed.add(ino)
                    wake |= told + self.every < self._wake_at
            if wake:  # the thread is woken only when it would look too late (once a burst)
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="mqfs-forget",
                                                    daemon=True)
                    self._thread.start()
                self._cond.notify()
        if at_once:
            self.tell(at_once)

    def _run(self) -> None:
        """Tells each owed inode at the end of its interval; sleeps while none is owed."""
        while True:
            with self._cond:
                while True:
                    if self._stopped:
                        return
                    if not self._owed:
                        self._wake_at = math.inf
                        self._cond.wait()
                        continue
                    now = self.clock()
                    self._wake_at = min(self._told[ino] for ino in self._owed) + self.every
                    if self._wake_at <= now:
                        break
                    self._cond.wait(self._wake_at - now)
                ready = [ino for ino in self._owed if now - self._told[ino] >= self.every]
                for ino in ready:
                    self._owed.discard(ino)
                    self._told[ino] = now
                if len(self._told) > 4096:  # inodes quiet for an interval are told at once anyway
                    self._told = {i: t for i, t in self._told.items() if now - t < self.every}
            self.tell(ready)
