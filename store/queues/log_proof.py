"""Queue ends from the CommitLog, for an open that no count record vouches for.

A queue is proven at its first use against config/dispatchState.json or config/queueEnds.log.
When neither vouches (a broker's store, consumequeue/ deleted by hand, config/ restored from
an older copy, a crash whose queueEnds.log is missing or another store's), the files of a
queue may hold fewer units than the log holds records for it, or none at all: the next put
would give out an offset given out before. So there, a queue's last record in the CommitLog
decides its end.

The proof walks the CommitLog's files newest first (each file forward, with the same walker
as verify and repair: `salvage.walk_runs_of_file`), keeping per queue the end (last queue
offset + 1) and the lowest queue offset its records carry. A queue is decided once a file
holding one of its records has been walked with every newer file (its last record is then
known), and every queue once the oldest file is done. The open walks a log of up to
`FOREGROUND` bytes itself (a small store is proven before the first put); a larger one is
walked in a background thread. A put to a queue not decided yet, or decided short (its files hold fewer
units than the log, start above its oldest record, or miss a file in the middle), is refused
with `QueueNotProven` (EAGAIN through a mount) until the walk reaches it or its rebuild from
the log is done; the put never waits for the walk. Short queues are rebuilt from the log in
the background (one more pass over the log for all of them), swapped in while reads go on.

Until the proof is done, config/queueProof.json says so: a later open (after a crash, or a
close before the end) proves again rather than trust a record written meanwhile.

LMQ queues (units pointing at another topic's records) are not the records' own queues:
they never appear in the walk and keep the old path.

A read-only open (a mount with `-o ro`, `mqfs info`) proves the same way and writes nothing:
no config/queueProof.json, and a queue found short (or with no ConsumeQueue at all) is
served from the log (`check.queues_from_log`: a `RebuiltQueue` in memory, which a live
follower extends) instead of rebuilt on disk. Until the walk reaches a queue, its files are
served as they are, as a read-write open serves them.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np

from ..errors import QueueNotProven, StoreError
from ..files import safefs
from ..files.consume_queue import PRE_BLANK, ConsumeQueue
from ..files.dispatcher import TagsCodes, has_queue_dir
from ..files.json_file import write_json
from ..format import layout
from ..integrity import dledger_walk, salvage
from . import check
from .first_use import units_of
from .registry import Key
from .swap import swap_in

if TYPE_CHECKING:
    from ..integrity.parts import StoreParts

log = logging.getLogger(__name__)

NAME = "queueProof.json"
FOREGROUND = 64 << 20  # a log of at most this many bytes of records is proven by the open itself


def pending(root: str) -> bool:
    """Whether an earlier open's proof did not finish (its record of queues vouches for less
    than it seems): this open proves again."""
    return os.path.lexists(os.path.join(root, "config", NAME))


class LogProof:
    """One open's proof of queue ends from the CommitLog (see the module)."""

    def __init__(self, parts: StoreParts, tags: TagsCodes, put_lock: threading.Lock,
                 make_queue: Callable[[str, int], ConsumeQueue],
                 probe_queue: Callable[[Key], ConsumeQueue],
                 note: Callable[[str, list[str]], None], read_only: bool = False,
                 show: Callable[[Iterable[Key]], None] | None = None,
                 elsewhere: frozenset[str] = frozenset(), made: frozenset[Key] = frozenset()):
        self.parts = parts
        self.read_only = read_only  # nothing written: short queues served from the log
        self.show = show  # queues the topics do not list yet (TopicTable.add_found)
        self.elsewhere = elsewhere  # topics whose queues are not in consumequeue/ (BatchCQ)
        # queues with no files before this open, whose units its recovery wrote (from where
        # it re-dispatched): rebuilt, they are replaced, not kept in quarantine/ as old files
        self.made = made
        self.tags = tags
        self.put_lock = put_lock
        self.make_queue = make_queue  # an object for a queue the registry does not know
        self.probe_queue = probe_queue  # a read-only object of a registered queue, loaded
        self.note = note  # what was found and done, shown with what recovery did
        queue = parts.commitlog.queue
        self.files = list(queue.files)
        self.limit = queue.max_offset  # records put after the open go to proven queues
        self.total = sum(mf.file_size for mf in self.files)
        self.walked = 0  # bytes walked (newest files first)
        self.ends: dict[Key, tuple[int, int]] = {}  # queue -> (end, lowest queue offset)
        self.done = False  # every file walked
        self.short: set[Key] = set()  # decided short: rebuilt from the log in the background
        self.failed: dict[Key, str] = {}  # short, and the log cannot give every offset back
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stop = False
        self._thread: threading.Thread | None = None
        self._next = len(self.files) - 1  # the next file to walk, going back

    # --- the walk --------------------------------------------------------------------------
    def begin(self) -> None:
        """Mark the proof as owed (synced); a log of at most FOREGROUND bytes of records is
        proven whole now, its short queues rebuilt (one more walk of it), a larger one in the
        background (`start`)."""
        if not self.read_only:
            write_json(os.path.join(self.parts.root, "config", NAME), {"format": 1, "proving": True})
        queue = self.parts.commitlog.queue
        if queue.max_offset - queue.min_offset > FOREGROUND:
            return
        while self._next >= 0:
            self._walk_one()
        if self._next < 0:
            self._walked_all()
            if self.short:
                self._rebuild(set(self.short))

    def start(self) -> None:
        """Walk the rest and rebuild short queues in a background thread."""
        self._thread = threading.Thread(target=self._run, name="mqfs-log-ends", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stop = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        try:
            while self._next >= 0 and not self._stop:
                self._walk_one()
            if self._stop:
                return
            if not self.done:
                self._walked_all()
            while True:
                with self._lock:
                    while not self.short and not self._stop:
                        self._wake.wait()
                    if self._stop:
                        return
                    keys = set(self.short)
                self._rebuild(keys)
        except Exception:  # the mount goes on; puts to undecided queues stay refused
            log.exception("queue ends: the proof from the CommitLog stopped")

    def _walk_one(self) -> int:
        """Walk the next file back; its bytes (0: close stopped it, at a run of records, so
        a close never waits for the walk of a whole file)."""
        mf = self.files[self._next]
        found: dict[Key, tuple[int, int]] = {}
        last = self._next == len(self.files) - 1
        walk = dledger_walk.runs_of_file if self.parts.commitlog.dledger else salvage.walk_runs_of_file
        for item in walk(mf, self.parts.flavor, last):
            if self._stop:  # closing: this file is walked again by the next open's proof
                return 0
            if isinstance(item, salvage.Run):
                _merge(found, {k: v for k, v in _run_ends(item, self.limit).items()
                               if k[0] not in self.elsewhere})
        with self._lock:
            for key, (end, low) in found.items():
                had = self.ends.get(key)
                self.ends[key] = (end, low) if had is None else (max(had[0], end), min(had[1], low))
            self._next -= 1
            self.walked += mf.file_size
        return mf.file_size

    def _walked_all(self) -> None:
        """Every file walked: each queue the log holds records of is checked now (one not
        open through a read-only object of its files, as its first use would read them)."""
        queues = self.parts.consume_queues
        with self._lock:
            self.done = True
            ends = dict(self.ends)
        for key in ends:
            if self._stop:
                return
            if key not in queues:
                self._short(key, "has records in the CommitLog but no ConsumeQueue")
                continue
            cq = queues.if_open(key)
            if cq is not None:
                self.check_open(cq)
                continue
            probe = self.probe_queue(key)
            try:
                self.check_open(probe)
            finally:
                probe.close()
        self._finish_if_clean()
        log.info("queue ends: the CommitLog's %d files walked (%d queues hold records)",
                 len(self.files), len(ends))

    # --- what puts and first uses ask ------------------------------------------------------
    def decided(self, key: Key) -> tuple[int, int] | None:
        """(end, lowest queue offset) of a queue's records in the log once decided ((0, 0) for a
        queue without one); None while the walk has not reached it."""
        got = self.ends.get(key)
        if got is not None:
            return got
        return (0, 0) if self.done else None

    def check_open(self, cq: ConsumeQueue) -> None:
        """A queue just opened (or open when the walk ended), compared with its records in the
        log once decided: a short one is rebuilt from the log in the background."""
        key = (cq.topic, cq.queue_id)
        got = self.decided(key)
        if got is None or got == (0, 0) or not isinstance(cq, ConsumeQueue):
            return  # (a RebuiltQueue, read-only: already served from the log)
        end, low = got
        gap = check.missing_file(cq)
        oldest = cq.entry(low) if cq.min_offset <= low < cq.max_offset else None
        if cq.max_offset < end:
            self._short(key, f"holds {cq.max_offset} units, the CommitLog {end} records")
        elif gap is not None:
            self._short(key, f"lost a file in the middle (from offset {gap})")
        elif oldest is None or oldest[1] == PRE_BLANK[1]:
            self._short(key, f"does not hold offset {low}, its oldest record in the CommitLog")

    def check_put(self, key: Key, next_offset: int | None) -> None:
        """Before a put gives queue `key` offset `next_offset` (None: asked before its first
        use, so that a put never waits for a rebuild there): refused (QueueNotProven) while
        its end is not proven from the log."""
        with self._lock:
            why = self.failed.get(key)
            if why is not None:
                raise QueueNotProven(why)
            if key in self.short:
                raise QueueNotProven(f"queue {key[0]}/{key[1]}: its ConsumeQueue is being rebuilt "
                                     "from the CommitLog; try again")
            got = self.ends.get(key)
            if got is None and not self.done:
                raise QueueNotProven(
                    f"queue {key[0]}/{key[1]}: its end is not proven yet (no record of the queues "
                    f"vouches for it; the CommitLog is being walked for its last record, "
                    f"{self.walked >> 20} of {self.total >> 20} MiB, newest first); try again")
        if got is not None and next_offset is not None and next_offset < got[0]:
            self._short(key, f"holds {next_offset} units, the CommitLog {got[0]} records")
            raise QueueNotProven(f"queue {key[0]}/{key[1]}: the CommitLog holds offsets up to "
                                 f"{got[0] - 1}; its ConsumeQueue is being rebuilt from it; try again")

    @property
    def settled(self) -> bool:
        """Nothing left to prove or rebuild (puts need not ask)."""
        return self.done and not self.short and not self.failed

    # --- rebuilding short queues -----------------------------------------------------------
    def _short(self, key: Key, why: str) -> None:
        with self._lock:
            if key in self.short or key in self.failed:
                return
            self.short.add(key)
            self._wake.notify_all()
        log.warning("queue ends: ConsumeQueue %s/%d %s (no record vouched for its end): %s",
                    key[0], key[1], why, "served from the CommitLog" if self.read_only else
                    "rebuilding it from the CommitLog; puts to it wait")

    def _rebuild(self, keys: set[Key]) -> None:
        if self.read_only:
            self._serve_from_log(keys)
        else:
            self._rebuild_files(keys)

    def _serve_from_log(self, keys: set[Key]) -> None:
        """A read-only open's short queues, each served from one walk of the log (in memory).
        Under the put lock, which a live follower's refresh takes: no unit it adds to the old
        object is lost, and it extends the new one with what comes after."""
        queues = self.parts.consume_queues
        with self.put_lock:
            try:
                found = check.queues_from_log(self.parts, keys, lambda: self._stop)
            except check.Halted:
                return  # closing: served from their files until the next open
            for key in sorted(keys):
                old = queues.if_open(key)
                if old is not None and old.max_offset > found[key].max_offset:
                    continue  # its files hold more (offsets a repair kept): served as they are
                queues.replace(key, found[key])  # type: ignore[arg-type]
        if self.show is not None:
            self.show(keys)
        for key in sorted(keys):
            text = (f"ConsumeQueue {key[0]}/{key[1]} does not hold every record the CommitLog "
                    "has for it: served from the CommitLog (a read-write open rebuilds it)")
            log.warning("queue ends: %s", text)
            self.note(text, [])
        with self._lock:
            self.short -= keys

    def _rebuild_files(self, keys: set[Key]) -> None:
        """One pass over the log for the units of every short queue, each swapped in (old files
        to quarantine/) under the put lock, so no put lands between the pass and the swap
        with an offset the pass did not see."""
        # no put lands in these queues meanwhile (`check_put` refuses them), so the walk
        # needs no lock; the swaps take the put lock. A put that passed `check_put` before
        # they were marked short holds the put lock until its record is in the log: taking
        # it once now waits for such a put, so the walk sees its record (else the swap finds
        # the files a unit longer than the walk and leaves them as they are, unrebuilt)
        with self.put_lock:
            pass
        try:
            found = units_of(self.parts, self.tags, keys, self.limit, lambda: self._stop)
        except check.Halted:
            return  # closing: config/queueProof.json stays, the next open proves again
        with self.put_lock:
            queues = self.parts.consume_queues
            for key in sorted(keys):
                units = found.get(key)
                if units is None:
                    why = (f"queue {key[0]}/{key[1]}: its ConsumeQueue holds fewer units than "
                           "the CommitLog has records, and the log does not give every offset "
                           f"back; run `mqfs verify {self.parts.root}` and `mqfs repair`")
                    log.warning("queue ends: %s", why)
                    self.note(why, [])
                    with self._lock:
                        self.failed[key] = why
                        self.short.discard(key)
                    continue
                cq = queues.if_open(key)
                if cq is None and key in queues:
                    # its files as they are, not proven: a first use would rebuild it from
                    # the log once more, and it is rebuilt from this walk now
                    cq = self.parts.load_queue(key)
                    cq.recover()
                    queues.adopt(key, cq)
                if cq is None:
                    cq = self.make_queue(*key)
                if cq.max_offset > (int(units[3][-1]) + 1 if len(units[3]) else 0):
                    units = None  # its files hold more (kept offsets): left as they are
                made = key in self.made
                moved = swap_in(self.parts.root, queues, cq, units, keep_old=not made) \
                    if units is not None else []
                if units is None:
                    text = (f"ConsumeQueue {key[0]}/{key[1]} holds units past the CommitLog's "
                            "last record for it (offsets a repair kept): left as its files are, "
                            f"not rebuilt; `mqfs verify {self.parts.root}` says what it lacks")
                elif made:
                    text = (f"ConsumeQueue {key[0]}/{key[1]} had no files, and recovery gave it "
                            "only the records it re-dispatched: rebuilt from the CommitLog")
                else:
                    text = (f"ConsumeQueue {key[0]}/{key[1]} did not hold every record the "
                            f"CommitLog has for it: rebuilt from the CommitLog (old files: "
                            f"{', '.join(moved) or 'none'})")
                log.warning("queue ends: %s", text)
                self.note(text, moved)
                with self._lock:
                    self.short.discard(key)
        self._finish_if_clean()

    def _finish_if_clean(self) -> None:
        """The proof is done: config/queueProof.json goes (a later open trusts the records)."""
        if not self.settled or self.read_only:
            return
        try:
            safefs.unlink(os.path.join(self.parts.root, "config", NAME))
        except FileNotFoundError:
            pass
        except (OSError, StoreError) as exc:
            log.warning("queue ends: config/%s not removed: %s", NAME, exc)

    def status(self) -> dict:
        with self._lock:
            return {"walked_bytes": self.walked, "total_bytes": self.total, "done": self.done,
                    "rebuilding": sorted(f"{t}/{q}" for t, q in self.short),
                    "refused": sorted(f"{t}/{q}" for t, q in self.failed)}


def _run_ends(run: salvage.Run, limit: int) -> dict[Key, tuple[int, int]]:
    """(end, lowest queue offset) of each queue among a run's records below `limit`."""
    r = run.records
    rows = np.flatnonzero(layout.in_queue(r.sys_flag) & (run.base + r.starts < limit) &
                          (r.queue_id >= 0))
    if not len(rows):
        return {}
    names, which = layout.topic_names(run.u8, r.topic_pos[rows], r.topic_len[rows])
    code = which << 32 | r.queue_id[rows]
    qo = r.queue_offset[rows]
    order = np.lexsort((qo, code))
    code, qo = code[order], qo[order]
    firsts = np.flatnonzero(np.append(True, code[1:] != code[:-1]))
    lasts = np.append(firsts[1:], len(code)) - 1
    out = {}
    for c, lo, hi in zip(code[firsts].tolist(), qo[firsts].tolist(), qo[lasts].tolist()):
        topic = names[c >> 32]
        if has_queue_dir(topic):
            out[(topic, c & 0xFFFFFFFF)] = (hi + 1, lo)
    return out


def _merge(into: dict[Key, tuple[int, int]], more: dict[Key, tuple[int, int]]) -> None:
    for key, (end, low) in more.items():
        had = into.get(key)
        into[key] = (end, low) if had is None else (max(had[0], end), min(had[1], low))

