"""Every ConsumeQueue of an open store by (topic, queue id), opened on first use.

A store may hold tens of thousands of queues. After a clean close that recorded them
(config/dispatchState.json), an open knows each queue by two numbers, its entry count and the
queue offset its first file starts at, and opens nothing: a queue becomes a ConsumeQueue
object when it is first used (a read, a put, its offsets), and its end is proven then
(the `open_queue` callback the store gives). After a crash, and in a read-only open, the queues are
found by listing consumequeue/ (`on_disk`) and registered without a count (`exact` False:
asked for its offsets, such a queue is opened); a crash's recovery opens only the queues it
dispatches records to, and leaves each other queue a cut to make at its first use (`cut`).
A clean exit without a record to trust (a broker's store) is listed too: its recovery opens
the queues of the newest records (store/queues/clean_open.py).

The proof of a queue at its first use runs without the registry's lock (one event per queue
being proven: `open_queue`), so a read or a put of another queue never waits for it; a caller
holding the put lock asks with `ready_queue`, which leaves the proof to it without that lock.

A queue a put_batch makes (`add_fresh`) is held as its units alone, bytes the garbage collector
does not track, until something asks for its object: a read, a later put, a flush (`opened`).
A batch over 80,000 new queues thus makes no object per queue (each was a tracked object, and
the collector walked the growing heap three or four times a batch).

Opened queues stay in a least-recently-used order; `trim` drops the oldest whose every byte is
on disk once more than `cache` are open, remembering their proven end, so memory grows with
the queues in use, not with the store. A dropped object is not closed: a reader that still
holds it sees it whole (its mappings go with the process-wide mapping LRU).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import compress
from typing import NamedTuple

import numpy as np

from ..files import safefs
from ..files.commitlog import CommitLog
from ..files.consume_queue import PRE_BLANK, ConsumeQueue

Key = tuple[str, int]


class FirstUseOwed(Exception):
    """Queues a caller holding the put lock must open first, without it (`ready_queue`)."""

    def __init__(self, keys: list[Key]):
        super().__init__(keys)
        self.keys = keys


class Recorded(NamedTuple):
    """A queue known but not open: its entry count and first file's queue offset, as a
    record gave them (`dropped` False) or as this process last saw it open, its end proven
    (True: its resume point)."""

    entries: int
    head: int
    dropped: bool = False
    low: int | None = None  # its minimum offset when last open (None: its head)
    newest: int = 0  # store time (ms) of its newest message, 0 when unknown or none
    exact: bool = True  # False: its count unknown (`entries` a lower bound), e.g. found on disk
    # a crash's recovery left this queue untouched: its units whose records start at or past
    # this CommitLog offset are a torn or lost tail's, dropped at its first use (None: none)
    cut: int | None = None
    # dropped: the CommitLog minimum `low` was set for (retention since then moves it)
    retained: int | None = None

    @property
    def min_offset(self) -> int:
        return self.head if self.low is None else self.low


class QueueRegistry:
    """The queues of a store: open ones (ConsumeQueue) and recorded ones, one map."""

    def __init__(self, open_queue: Callable[[Key, Recorded], ConsumeQueue],
                 new_queue: Callable[[Key], ConsumeQueue], cache: int = 4096):
        self._open_queue = open_queue
        self._new_queue = new_queue  # the object of a queue without files
        self.cache = cache
        self._open: OrderedDict[Key, ConsumeQueue] = OrderedDict()
        self._recorded: dict[Key, Recorded] = {}
        self._fresh: dict[Key, bytes] = {}  # new queues, no object yet: their units
        self._lock = threading.RLock()
        # queues found open since the last `trim`, last used last: moved to the end of the
        # LRU order there (a put finds its queue without the lock; a lost touch only makes a
        # queue look older, and a trim drops only settled queues)
        self._used: dict[Key, None] = {}
        self._proving: dict[Key, threading.Event] = {}  # queues a thread is proving now
        self.commitlog: CommitLog | None = None  # where the newest messages' times are read
        self.discharged = 0  # cuts made (queues opened that owed one): the owed set changed
        # set when the queues came from a record (not a listing): whether a queue the record
        # does not name has a directory, asked before such a queue is first used
        self.on_disk: DiskProbe | None = None
        self.owed: int | None = None  # the cut `owe` gave (a queue found on disk owes it too)
        self.retained = 0  # CommitLog minimum every open queue's minimum was set for (`retain`)
        # set when no record vouched for the queues' ends: asked (key, next offset; None
        # before the queue is first used) before a put gives a queue an offset; raises while
        # the CommitLog has not proven its end
        self.end_check: Callable[[Key, int | None], None] | None = None

    def record(self, recorded: dict[Key, Recorded]) -> None:
        """Queues known from a clean close's record, to be opened on first use."""
        with self._lock:
            self._recorded.update(recorded)

    # --- a queue's object ------------------------------------------------------------------
    def open_queue(self, key: Key) -> ConsumeQueue | None:
        """The queue's object; None for a queue not known. A queue only recorded is opened
        and its end proven now (`first_use`: file reads, a rebuild from the CommitLog when
        damaged) without the registry's lock: a thread using another queue meanwhile does not
        wait, one using this queue waits for this proof alone."""
        cq = self.if_open(key)
        if cq is not None:
            return cq
        while True:
            with self._lock:
                cq = self._open.get(key)
                if cq is not None:
                    return cq
                if key in self._fresh:
                    return self._open_fresh(key)
                proving = self._proving.get(key)
                if proving is None:
                    rec = self._recorded.get(key) or self._found(key)
                    if rec is None:
                        return None
                    proving = self._proving[key] = threading.Event()
                    break
            proving.wait()  # another thread proves this queue
        try:
            cq = self._open_queue(key, rec)
        finally:
            with self._lock:
                del self._proving[key]
                proving.set()
        with self._lock:
            self._open[key] = cq
            self._forget(key)
        return cq

    def first_use_pending(self, key: Key) -> bool:
        """Whether `open_queue(key)` would prove the queue (or look for its directory) before
        answering: a question that reads no file and waits for no lock."""
        return key in self._recorded or key not in self._open and key not in self._fresh and \
            self.on_disk is not None

    def ready_queue(self, key: Key) -> ConsumeQueue | None:
        """`open_queue` for a caller holding the put lock: FirstUseOwed when the queue needs
        its first use, so the caller proves it (`open_queues`) without the put lock and tries
        again: a put to another queue never waits for a proof."""
        cq = self.if_open(key)
        if cq is None and (key in self._recorded or self._found(key) is not None):
            raise FirstUseOwed([key])
        return cq if cq is not None else self.if_open(key)

    def _wait_for_proof(self, key: Key) -> None:
        """Caller holds the lock: wait (without it) until no thread proves `key`."""
        while (proving := self._proving.get(key)) is not None:
            self._lock.release()
            try:
                proving.wait()
            finally:
                self._lock.acquire()

    def _found(self, key: Key) -> Recorded | None:
        """A queue no record named but with a directory on disk (made after the record, its
        records lost with a crash, or put there by hand): registered with its count unknown,
        so its first use proves its end from its files; a put never starts it at offset 0
        over units already there."""
        probe = self.on_disk
        if probe is None or key in self._open or key in self._fresh or not probe(key):
            return None
        with self._lock:
            rec = self._recorded.setdefault(key, Recorded(0, 0, exact=False, cut=self.owed))
        logging.getLogger(__name__).warning(
            "ConsumeQueue %s/%d has a directory the record of queues does not name: opened "
            "from its files", *key)
        return rec

    def _forget(self, key: Key) -> Recorded | None:
        """Drop a recorded queue (now open, or replaced), counting a cut it owed as made."""
        rec = self._recorded.pop(key, None)
        if rec is not None and rec.cut is not None:
            self.discharged += 1
        return rec

    def if_open(self, key: Key) -> ConsumeQueue | None:
        """The queue if it is open now (a fresh one is, its object made); None otherwise
        (nothing is opened, no file read). An open queue is found without the lock: its use
        is noted (`_used`) and moves it in the LRU order at the next `trim`."""
        cq = self._open.get(key)
        if cq is not None:
            used = self._used
            used.pop(key, None)  # two steps, each atomic: a race loses at most a touch
            used[key] = None
        elif key in self._fresh:
            with self._lock:
                cq = self._open_fresh(key) if key in self._fresh else self._open.get(key)
        return cq

    def _open_fresh(self, key: Key) -> ConsumeQueue:
        """The object of a fresh queue, holding its units in its tail (caller holds the lock)."""
        cq = self._new_queue(key)
        cq.start_with(self._fresh.pop(key))
        self._open[key] = cq
        return cq

    def replace(self, key: Key, cq: ConsumeQueue) -> None:
        """Put `cq` in the queue's place (a rebuild swapped in), after any proof of it."""
        with self._lock:
            self._wait_for_proof(key)
            self._forget(key)
            self._open[key] = cq

    def adopt(self, key: Key, cq: ConsumeQueue) -> Recorded | None:
        """Take a queue opened by its caller (recovery) in place of its record, returned."""
        with self._lock:
            self._wait_for_proof(key)
            rec = self._forget(key)
            self._open[key] = cq
            return rec

    def __contains__(self, key: object) -> bool:
        return key in self._open or key in self._fresh or key in self._recorded

    def __len__(self) -> int:
        with self._lock:
            return len(self._open) + len(self._fresh) + len(self._recorded)

    def __iter__(self) -> Iterator[Key]:
        return iter(self.keys())

    def keys(self) -> list[Key]:
        """Every queue's key, open or not (no queue is opened)."""
        with self._lock:
            return [*self._open, *self._fresh, *self._recorded]

    def open_all(self) -> dict[Key, ConsumeQueue]:
        """Every queue, opened (a first use each: file reads): for whole-store checks and
        tests, not for hot paths."""
        return {key: cq for key in self.keys() if (cq := self.open_queue(key)) is not None}

    def open_queues(self, keys: list[Key]) -> list[ConsumeQueue | None]:
        """open_queue() of many keys at once (a put_batch's queues)."""
        return self._many(keys, self.open_queue)

    def ready_queues(self, keys: list[Key]) -> list[ConsumeQueue | None]:
        """ready_queue() of many keys at once: FirstUseOwed names every queue that needs its
        first use."""
        owed: list[Key] = []

        def ready(key: Key) -> ConsumeQueue | None:
            if key in self._recorded:
                owed.append(key)
                return None
            return self.open_queue(key)

        found = self._many(keys, ready)
        if owed:
            raise FirstUseOwed(owed)
        return found

    def _many(self, keys: list[Key], one: Callable[[Key], ConsumeQueue | None]
              ) -> list[ConsumeQueue | None]:
        """The open ones found and moved up the least-recently-used order in C-level
        passes, the others by `one`; None for a key unknown."""
        with self._lock:
            found = list(map(self._open.get, keys))
            deque(map(self._open.move_to_end, compress(keys, found)), maxlen=0)
        recorded, fresh = self._recorded, self._fresh
        with_dir = self.on_disk.topics() if self.on_disk is not None else ()
        for i in [i for i, cq in enumerate(found) if cq is None]:
            key = keys[i]  # a new topic's queue (most of a spread batch) costs lookups only
            if key in recorded or key in fresh or key[0] in with_dir and self._found(key):
                found[i] = one(key)
        return found

    def add_new(self, keys: list[Key]) -> list[ConsumeQueue]:
        """Objects for queues not known at all, registered (the store makes new queues
        under its put lock, so none can have come meanwhile)."""
        made = list(map(self._new_queue, keys))
        with self._lock:
            self._open.update(zip(keys, made))
        return made

    def add_fresh(self, keys: list[Key]) -> None:
        """Queues not known at all, registered without an object (see the module's doc);
        `fill_fresh` gives them their units."""
        with self._lock:
            self._fresh.update(dict.fromkeys(keys, b""))

    def fill_fresh(self, keys: list[Key], units: list[bytes]) -> list[int]:
        """The first units of queues `add_fresh` registered (caller holds the put lock);
        the positions of those whose object a reader made meanwhile: the caller appends
        theirs to the object."""
        fresh = self._fresh
        with self._lock:
            left = [i for i, key in enumerate(keys) if key not in fresh]
            fresh.update(zip(keys, units))
            for i in left:
                del fresh[keys[i]]
        return left

    def open_fresh(self) -> list[ConsumeQueue]:
        """Make the object of every fresh queue (a flush writes their units out)."""
        with self._lock:
            return [self._open_fresh(key) for key in list(self._fresh)]

    # --- what costs nothing per untouched queue --------------------------------------------
    def opened(self) -> dict[Key, ConsumeQueue]:
        """The queues open now: what flushing, recovery and cleanup loops walk (a queue only
        recorded has nothing unflushed and nothing to recover); fresh ones get their object."""
        with self._lock:
            self.open_fresh()
            return dict(self._open)

    def recorded(self, key: Key) -> Recorded | None:
        """What is known of a queue not open now: None when it is open, unknown, or known
        without a count to trust (found on disk: asked for its offsets, it is opened)."""
        rec = self._recorded.get(key)
        return rec if rec is not None and rec.exact else None

    def waiting(self) -> list[Key]:
        """The queues known but not open."""
        with self._lock:
            return list(self._recorded)

    def owe(self, cut: int) -> None:
        """Every queue not open now drops its units at or past CommitLog offset `cut` at its
        first use (the lower cut of two crashes stands)."""
        with self._lock:
            self.owed = cut if self.owed is None else min(self.owed, cut)
            for key, rec in self._recorded.items():
                if rec.cut is None or cut < rec.cut:
                    self._recorded[key] = rec._replace(cut=cut)

    def cuts(self) -> dict[Key, int]:
        """The cuts queues not opened yet still owe, for config/queueCuts.json."""
        with self._lock:
            return {key: rec.cut for key, rec in self._recorded.items() if rec.cut is not None}

    def recorded_ends(self) -> dict[Key, tuple[int, int, int, bool]]:
        """(entry count, first file's queue offset, newest store time, count exact) of every
        queue not open, for config/queueEnds.log's base."""
        with self._lock:
            return {key: (rec.entries, rec.head, rec.newest, rec.exact)
                    for key, rec in self._recorded.items()}

    def mark_inexact(self, keys: set[Key]) -> None:
        """Queues whose recorded count is a lower bound only (records past the record's
        point): asked for their offsets, they are opened."""
        with self._lock:
            for key in keys:
                rec = self._recorded.get(key)
                if rec is not None:
                    self._recorded[key] = rec._replace(exact=False)

    def inexact(self) -> set[Key]:
        """Queues not opened yet whose count is unknown, for a clean close's record."""
        with self._lock:
            return {key for key, rec in self._recorded.items() if not rec.exact}

    def read_ends(self) -> dict[Key, tuple[int, int, int]]:
        """(entry count, first file's queue offset, newest message's store time) of every
        queue, for a clean close's record (of a queue in `inexact`, a lower bound): opens the
        queues with units only and reads each open queue's newest record header."""
        with self._lock:
            self.open_fresh()
            out = {key: (rec.entries, rec.head, rec.newest) for key, rec in self._recorded.items()}
            opened = list(self._open.items())
            times = self._newest([cq for _, cq in opened])
            out.update((key, (cq.max_offset, cq.first_file_offset, t))
                       for (key, cq), t in zip(opened, times))
            return out

    def _newest(self, queues: list[ConsumeQueue]) -> list[int]:
        """Store time of each queue's last message, read from the record headers in one
        gather; 0 for a queue without one in the log."""
        log = self.commitlog
        if log is None:
            return [0] * len(queues)
        rows, offsets = [], []
        out = [0] * len(queues)
        for i, cq in enumerate(queues):
            unread = cq.unread_newest()  # its last unit is in no memory: kept, not read
            if unread is not None:
                out[i] = unread
                continue
            last = cq.last_entry()
            if last is not None and last[1] != PRE_BLANK[1] and \
                    log.min_offset <= last[0] < log.max_offset:
                rows.append(i)
                offsets.append(last[0])
        stamps = log.body_sizes_and_times(np.array(offsets, dtype=np.int64))[1].tolist()
        for i, t in zip(rows, stamps):
            out[i] = t
        return out

    def retain(self, min_commitlog: int, delete: bool = True) -> None:
        """Retention on the open queues: each one's minimum moved past its entries whose
        records lie below `min_commitlog` (with `delete`, its head files that hold only
        those deleted too); a queue not open does it at its first use. A queue dropped
        after this remembers that it was done (`Recorded.retained`)."""
        for cq in self.opened().values():
            if delete and min_commitlog > 0:
                cq.delete_expired(min_commitlog)
            else:
                cq.correct_min_offset(min_commitlog)
        self.retained = min_commitlog

    def trim(self) -> list[tuple[Key, ConsumeQueue]]:
        """Drop the least recently used open queues past `cache` whose every byte is on disk
        (the caller holds the put lock, so none is between a reservation and its write);
        the queues dropped, for `read_dropped_times`."""
        with self._lock:
            used, self._used = self._used, {}
            for key in list(used):  # (a thread that read `_used` before the swap may add)
                if key in self._open:
                    self._open.move_to_end(key)
            excess = len(self._open) - self.cache
            going: list[tuple[Key, ConsumeQueue]] = []
            for key, cq in self._open.items():
                if len(going) >= excess:
                    break
                if cq.settled():
                    going.append((key, cq))
            for key, cq in going:
                del self._open[key]
                self._recorded[key] = Recorded(cq.max_offset, cq.first_file_offset, True,
                                               cq.min_offset, cq.unread_newest() or 0,
                                               retained=self.retained)
            return going

    def read_dropped_times(self, dropped: list[tuple[Key, ConsumeQueue]]) -> None:
        """Remember the newest message's time of queues `trim` dropped: read from their
        files and records (a page each) without the put lock; a queue opened again meanwhile
        is left alone."""
        times = self._newest([cq for _, cq in dropped])
        with self._lock:
            for (key, _), newest in zip(dropped, times):
                rec = self._recorded.get(key)
                if rec is not None and rec.dropped and newest > rec.newest:
                    self._recorded[key] = rec._replace(newest=newest)

    def close(self) -> None:
        with self._lock:
            for cq in self._open.values():
                cq.close()
            self._open.clear()
            self._fresh.clear()
            self._recorded.clear()


_LISTERS = 16  # topic directories listed at once: a cold listing waits on the disk, not the CPU


def on_disk(root: str) -> list[Key]:
    """Every queue with a directory, consumequeue/<topic>/<id>: two levels of listing (no
    file is opened), links never followed (one there is refused). The topics' directories
    are read several at a time: 20,000 of them read one by one took 5 s with a cold cache."""
    base = os.path.join(root, "consumequeue")
    try:
        topics = sorted(safefs.subdirs(base))
    except FileNotFoundError:
        return []
    with ThreadPoolExecutor(_LISTERS) as pool:
        listed = list(pool.map(safefs.subdirs, [os.path.join(base, t) for t in topics]))
    return [(topic, int(q)) for topic, names in zip(topics, listed)
            for q in sorted(names, key=lambda q: (len(q), q)) if q.isascii() and q.isdigit()]


class DiskProbe:
    """Whether consumequeue/<topic>/<id> is a directory (a link there is refused): the
    topics' directories are listed once, at the first question, so a queue of a topic
    without one costs a set lookup, not a system call."""

    def __init__(self, root: str):
        self._base = os.path.join(root, "consumequeue")
        self._topics: set[str] | None = None

    def topics(self) -> set[str]:
        """The topics with a directory when first asked (the ones this process makes later
        belong to queues it knows)."""
        if self._topics is None:
            try:
                self._topics = set(safefs.subdirs(self._base))
            except FileNotFoundError:
                self._topics = set()
        return self._topics

    def __call__(self, key: Key) -> bool:
        return key[0] in self.topics() and safefs.is_dir(f"{self._base}/{key[0]}/{key[1]}")
