"""The scrub: the whole-store check an open no longer makes, done in the background once the
store is serving.

An open checks only what the checkpoint cannot vouch for (each queue's last units, the
CommitLog past the checkpoint), so its cost does not grow with the store. Damage that happens
to old, flushed data while the store is closed (a flipped bit, a zeroed page) is what the scrub
looks for: every ConsumeQueue unit against its record, then every flushed CommitLog record
(checksums included), then every IndexFile entry against its record and its hash chain.
Reads already refuse a unit that does not describe its record, and key reads check the
record's keys, so until the scrub gets there damage costs an error or a missed key, never a
wrong message.

It works in small steps under the put lock (so retention and puts see whole steps), sleeps
between steps so it takes about `share` of one core, and records where it is in
config/scrub.json now and then, so the next mount goes on from there. A damaged queue is
rebuilt from the CommitLog, as an open does (old files to quarantine/); a damaged record or
IndexFile entry is reported (reads of it fail, or key lookups may miss it), the record for
`mqfs repair`, the IndexFile rebuilt by the next read-write open.
Findings go to the log and to `status()`. `mqfs verify` stays the full offline check.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CorruptionError, StoreFormatError
from ..files.consume_queue import ConsumeQueue
from ..files.json_file import read_json, write_json
from ..files.mapped_file import offset_to_name
from ..format import codec
from ..format.layout import MAGIC_BLANK
from ..integrity import index_check, salvage
from ..integrity.index_points import IndexPoints
from ..integrity.scanner import NOWHERE, check_run, step_record
from ..queues import check as queue_check
from ..queues import first_use
from ..queues.swap import swap_in

if TYPE_CHECKING:
    from ..files.dispatcher import TagsCodes
    from ..integrity.parts import StoreParts

log = logging.getLogger(__name__)

NAME = "scrub.json"
_UNITS = 2048  # ConsumeQueue units checked in one step (a decode each, for the tagsCode)
_BYTES = 4 << 20  # CommitLog bytes checked in one step
_ENTRIES = 1024  # IndexFile entries checked in one step (a record decode each)
_SAVE_EVERY = 10.0  # seconds between saves of the position
_FINDINGS = 20  # findings remembered in the state


def _state_shape(data: Any) -> dict[str, Any]:
    """The saved position, refused (ValueError) when of a shape `_save` never writes."""
    if not isinstance(data, dict):
        raise ValueError("is not an object")
    for name in ("passes", "unit", "commitlog", "entry", "started_ms", "completed_ms"):
        if type(data.get(name, 0)) is not int:
            raise ValueError(f"has {name} that is not a whole number")
    if not isinstance(data.get("queue", ""), str) or not isinstance(data.get("index", ""), str) \
            or not isinstance(data.get("findings", []), list) \
            or not all(isinstance(n, str) for n in data.get("damaged_index", [])):
        raise ValueError("has a queue, index, findings or damaged IndexFiles of the wrong type")
    return data

def damaged_index_files(root: str) -> set[str]:
    """IndexFiles a scrub found damaged: the next read-write open rebuilds them, as it does
    one whose header is broken (read before the IndexFiles are loaded)."""
    try:
        state = read_json(os.path.join(root, "config", NAME), {}, check=_state_shape,
                          fix="starting a new pass")
    except StoreFormatError:
        return set()
    return set(state.get("damaged_index", []))


class Scrub:
    """One store's scrub, given its parts, the lock each step takes (the put lock) and the
    tagsCodes units are checked with. `run_pass()` checks everything at once (tests,
    tools); `start()` runs passes in a thread, `interval_s` apart, throttled to `share` of a
    core."""

    def __init__(self, parts: StoreParts, lock: threading.Lock, tags: TagsCodes,
                 share: float = 0.05, interval_s: float = 86400.0):
        self.parts = parts
        self.lock = lock
        self.tags = tags
        self.share = share
        self.interval_s = interval_s
        self.path = os.path.join(parts.root, "config", NAME)
        try:
            state = read_json(self.path, {}, check=_state_shape, fix="starting a new pass")
        except StoreFormatError as exc:  # only a position: never a reason to refuse an open
            log.warning("scrub: %s", exc)
            state = {}
        self.passes: int = state.get("passes", 0)
        self.queue: str = state.get("queue", "")  # "topic/queue" being checked, "" = first
        self.unit: int = state.get("unit", 0)
        self.commitlog: int = state.get("commitlog", -1)  # -1: the queues come first
        # the IndexFile being checked once the CommitLog is done ("" until then, "0" before
        # the first file), and the entry
        self.index: str = state.get("index", "")
        self.entry: int = state.get("entry", 0)
        self.started_ms: int = state.get("started_ms", 0)
        self.completed_ms: int = state.get("completed_ms", 0)
        self.findings: list[str] = list(state.get("findings", []))[-_FINDINGS:]
        # damaged IndexFiles the next read-write open rebuilds; gone once it did
        names = {os.path.basename(f.path) for f in parts.index.files}
        self.damaged_index: list[str] = [n for n in state.get("damaged_index", []) if n in names]
        self.checked_units = 0
        self.checked_bytes = 0
        self.checked_entries = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._saved = time.monotonic()
        self._names: list[str] = []  # "topic/queue" of every queue, sorted
        # where the indexes point, for a resync after a lost header (integrity/index_points.py)
        self._points = IndexPoints(parts.root, parts.config.index_slots)
        self._points_for: tuple[int, int] | None = None  # a CommitLog file's, read next step

    # --- running -----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="mqfs-scrub", daemon=True)
        self._thread.start()

    def halt(self) -> None:
        """Stop after the current step, from any thread (the store was replaced)."""
        self._stop.set()

    def stop(self, save: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if save:
            self._save()

    def run_pass(self) -> None:
        """Check everything from where the scrub is to the end of a pass, unthrottled; stops
        after the current step once halted (a close waits for that, not for the pass)."""
        while not self._stop.is_set() and self.step():
            pass
        self._save()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if not self.started_ms and self.completed_ms and \
                        time.time() * 1000 < self.completed_ms + self.interval_s * 1000:
                    self._stop.wait(min(60.0, self.interval_s))
                    continue
                began = time.monotonic()
                more = self.step()
                spent = time.monotonic() - began
                if time.monotonic() - self._saved > _SAVE_EVERY or not more:
                    self._save()
                self._stop.wait(spent * (1 - self.share) / self.share if self.share > 0 else 1)
        except Exception:  # a scrub that fails must not take the mount down: say so, stop
            log.exception("scrub: stopped")

    def step(self) -> bool:
        """One bounded step; False when it finished a pass."""
        if not self.started_ms:
            self.started_ms = int(time.time() * 1000)
        if self.commitlog < 0:
            if self._queue_step():
                return True
            self.commitlog = self.parts.commitlog.queue.min_offset
        if not self.index:
            if self._commitlog_step():
                return True
            self.index, self.entry = "0", 0
        if self._index_step():
            return True
        self.passes += 1
        self.completed_ms, self.started_ms = int(time.time() * 1000), 0
        self.queue, self.unit, self.commitlog, self.index, self.entry = "", 0, -1, "", 0
        log.info("scrub: pass %d done", self.passes)
        return False

    # --- ConsumeQueues ---------------------------------------------------------------------
    def _queue_step(self, budget: int = _UNITS) -> bool:
        """Check the next `budget` units, queue after queue (names in sorted order, so a saved
        position stays meaningful as queues come); False past the last queue. A queue not
        open yet is first used without the put lock, then the step goes on."""
        parts = self.parts
        with self.lock:
            if len(self._names) != len(parts.consume_queues):
                self._names = sorted(f"{t}/{q}" for t, q in parts.consume_queues)
            names = self._names
            while budget > 0:
                i = bisect.bisect_left(names, self.queue)
                if i == len(names):
                    return False
                if names[i] != self.queue:
                    self.queue, self.unit = names[i], 0
                topic, _, qid = self.queue.rpartition("/")
                cq = parts.consume_queues.if_open((topic, int(qid)))
                if cq is None:  # its first use comes below, without the put lock
                    break
                gap = queue_check.missing_file(cq)
                if gap is not None:  # its units there would be skipped unseen
                    self._rebuild(cq, gap, f"lost a file in the middle (its units from offset {gap})")
                    cq = parts.consume_queues.if_open((topic, int(qid))) or cq
                lo = max(self.unit, cq.min_offset)
                units = cq.entries(lo, budget)
                ok = queue_check.units_ok(parts.commitlog, cq, lo, units)
                ok = queue_check.tags_ok(parts.commitlog, self.tags, units, ok)
                self.checked_units += len(units)
                budget -= max(len(units), 64)  # a queue costs a little even when empty
                if not ok.all():
                    bad = lo + int(np.argmin(ok))
                    self._rebuild(cq, bad, f"unit {bad} does not match its record")
                if lo + len(units) >= cq.max_offset or not len(units):
                    self.queue, self.unit = names[i] + "\0", 0  # sorts just past this queue
                else:
                    self.unit = lo + len(units)
        if budget <= 0:
            return True
        try:
            opened = parts.consume_queues.open_queue((topic, int(qid)))
        except CorruptionError as exc:  # its use refused until a repair: said, passed by
            self._found(str(exc))
            opened = None
        if opened is None:  # (or gone meanwhile)
            self.queue, self.unit = self.queue + "\0", 0
        return self._queue_step(budget)

    def _rebuild(self, cq: ConsumeQueue, bad: int, why: str) -> None:
        """Rebuild a queue with a bad unit from the CommitLog (caller holds the put lock):
        its units are gathered first, and only if the log yields them whole, up to the
        queue's end (no offset given out may be given again), do the new units go in and
        the old files to quarantine/ (`swap_in`: reads going on meanwhile see it whole)."""
        parts = self.parts
        what = f"ConsumeQueue {cq.topic}/{cq.queue_id} {why}"
        units = first_use.units_from_log(parts, self.tags, cq.topic, cq.queue_id)
        if units is None or (len(units[3]) and int(units[3][-1]) + 1 < cq.max_offset):
            self._found(f"{what}; not rebuilt: the CommitLog does not hold every message of "
                        f"the queue (run `mqfs verify {parts.root}` and `mqfs repair`)")
            return
        moved = swap_in(parts.root, parts.consume_queues, cq, units)
        self._found(f"{what}; rebuilt the queue from the CommitLog (old files: "
                    f"{', '.join(moved)})")

    # --- CommitLog -------------------------------------------------------------------------
    def _commitlog_step(self) -> bool:
        """Check up to _BYTES of flushed records from where the scrub is; False at the end."""
        parts = self.parts
        queue = parts.commitlog.queue
        if self._points_for is not None:  # read outside the put lock: every index file
            self._points.load(*self._points_for)
            self._points_for = None
        with self.lock:
            pos = max(self.commitlog, queue.min_offset)
            end = queue.flushed_where
            mf = queue.find(pos)
            if mf is None or pos >= end:
                return False
            base = mf.file_from_offset
            limit = min(end - base, mf.file_size)
            buf, u8 = memoryview(mf.buffer()), np.frombuffer(mf.buffer(), dtype=np.uint8)
            at, stop_at = pos - base, min(pos - base + _BYTES, limit)
            while at < stop_at:
                at, _, more = check_run(buf, u8, at, limit, base, parts.flavor, NOWHERE, (0, 0))
                if more:
                    continue
                if at >= limit or (limit - at >= 8 and codec.peek_header(buf, at)[1] == MAGIC_BLANK):
                    at = mf.file_size  # a BLANK or the flushed end: the next file
                    break
                msg, reason = step_record(buf, at, limit, base, parts.flavor)
                if msg is not None:
                    at += msg.total_size
                    continue
                if not self._points.loaded(base):  # the resync may need them: next step
                    self._points_for = (base, mf.file_size)
                    break
                found = salvage.resync(mf, at, limit, parts.flavor, self._points)
                self._found(f"damaged record at CommitLog offset {base + at} (file "
                            f"{offset_to_name(base)}): {reason or 'zeros inside flushed data'}; "
                            f"reads of it fail: run `mqfs verify {parts.root}` and `mqfs repair`")
                at = found if found is not None else mf.file_size
            self.checked_bytes += at - (pos - base)
            self.commitlog = base + at
        return True

    # --- IndexFiles ------------------------------------------------------------------------
    def _index_step(self) -> bool:
        """Check the next _ENTRIES IndexFile entries, file after file (by name), up to the
        newest file's count when the step began; False past it. A damaged entry is
        reported and recorded, not mended now: rebuilding means indexing their records
        again under the put lock, so the next read-write open does it (old file to
        quarantine/), as for a broken header."""
        parts = self.parts
        with self.lock:
            files = list(parts.index.files)
            names = [os.path.basename(f.path) for f in files]
            i = bisect.bisect_left(names, self.index)
            if i == len(names):
                return False
            if names[i] != self.index:
                self.index, self.entry = names[i], 1
            f = files[i]
            lo = max(self.entry, 1)
            hi = min(f.index_count, lo + _ENTRIES)
            bad = index_check.bad_entries(f, lo, hi, parts.commitlog, parts.flavor)
            self.checked_entries += hi - lo
            if bad:
                if names[i] not in self.damaged_index:
                    self.damaged_index.append(names[i])
                idx, why = bad[0]
                more = f" (and {len(bad) - 1} more entries of this step)" if len(bad) > 1 else ""
                self._found(f"IndexFile {names[i]} entry {idx} {why}{more}: key lookups may "
                            "miss keys (reads never serve a wrong message) until the next "
                            "read-write open rebuilds the file")
            if hi >= f.index_count:
                self.index, self.entry = names[i] + "\0", 0  # sorts just past this file
            else:
                self.entry = hi
        return True

    # --- state -----------------------------------------------------------------------------
    def _found(self, text: str) -> None:
        log.warning("scrub: %s", text)
        self.findings = (self.findings + [text])[-_FINDINGS:]
        self._save()

    def _save(self) -> None:
        self._saved = time.monotonic()
        if self.parts.config.read_only:
            return
        write_json(self.path, {"passes": self.passes, "queue": self.queue, "unit": self.unit,
                               "commitlog": self.commitlog, "index": self.index,
                               "entry": self.entry, "damaged_index": self.damaged_index,
                               "started_ms": self.started_ms,
                               "completed_ms": self.completed_ms, "findings": self.findings})

    def status(self) -> dict[str, Any]:
        """Where the scrub is and what it found, for /status.json."""
        end = self.parts.commitlog.queue.flushed_where
        return {"running": self._thread is not None, "passes": self.passes,
                "phase": "idle" if not self.started_ms else
                "consumequeue" if self.commitlog < 0 else "commitlog" if not self.index else
                "index",
                "queue": self.queue, "commitlog_offset": max(self.commitlog, 0),
                "commitlog_end": end, "checked_units": self.checked_units,
                "checked_bytes": self.checked_bytes, "checked_entries": self.checked_entries,
                "last_pass_done_ms": self.completed_ms,
                "findings": list(self.findings)}
