"""A store's ConsumeQueues checked against the CommitLog, and mended: what recovery checks
at open (each queue's last units, as far as the checkpoint cannot vouch for them) and what the
scrub checks after (every unit). Queue offsets come from the records, so a rebuilt queue loses
or reuses none."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..config import parse_delay_levels
from ..errors import CodecError, CorruptionError, NotFound
from ..files.consume_queue import PRE_BLANK, UNIT_SIZE, ConsumeQueue, RebuiltQueue
from ..files.dispatcher import TagsCodes
from ..format import codec, layout
from ..format.multi_dispatch import dispatched
from ..integrity import dledger_walk, salvage

if TYPE_CHECKING:
    from ..files.commitlog import CommitLog
    from ..integrity.parts import StoreParts

log = logging.getLogger(__name__)


def damaged_queues(parts: StoreParts, trusted: int) -> list[tuple[ConsumeQueue, int, bool]]:
    """Check each ConsumeQueue's units against their records (numpy) from its end backwards,
    as far as the checkpoint cannot vouch for them (`_check_back`): (queue, first bad queue
    offset, True when a good unit follows it) for each queue with a bad unit. Changes nothing
    on disk. Units the checkpoint vouches for are the background scrub's to check."""
    found = []
    for cq in parts.consume_queues.opened().values():
        bad = check_back(parts, cq, trusted)
        if bad is not None:
            found.append((cq, *bad))
    return found


def check_back(parts: StoreParts, cq: ConsumeQueue, trusted: int) -> tuple[int, bool] | None:
    """Check a queue's units a chunk at a time from its end (64 units, then 4x more each
    time) until a chunk's first unit checks out and its record starts below `trusted`: every
    unit before it was on disk when the checkpoint was written. So a clean open reads each
    queue's last units and the records they point at (proving the queue's end), and an
    abnormal one what was written after the checkpoint. (first bad offset, good unit after)
    or None."""
    first, hi, step = cq.min_offset, cq.max_offset, 64
    checked: list[np.ndarray] = []
    while hi > first:
        lo = max(first, hi - step)
        units = cq.entries(lo, hi - lo)
        if not len(units):
            break
        ok = units_ok(parts.commitlog, cq, lo, units)
        if hi == cq.max_offset:  # the queue's last good units: their tagsCodes too
            last = np.flatnonzero(ok)[-TAGS_CHECKED:]
            ok[last] = tags_ok(parts.commitlog, TagsCodes(parts.flavor, parse_delay_levels(
                parts.config.message_delay_level)), units[last], ok[last])
        checked.insert(0, ok)
        hi, step = lo, min(step * 4, 1 << 16)
        if ok[0] and (units["size"][0] == PRE_BLANK[1] or units["offset"][0] < trusted):
            break
    ok = np.concatenate(checked) if checked else np.ones(0, dtype=bool)
    if ok.all():
        return None
    bad = int(np.argmin(ok))
    return hi + bad, bool(ok[bad:].any())


def tail_start(parts: StoreParts, target: int, limit: int | None = None) -> int:
    """A record boundary at or below CommitLog offset `target`, as close as the open queues
    (the `limit` most recently used, or all) know one: per queue, a bisection over its units
    (offsets grow within a queue) finds the last unit below it, and only a unit that
    describes its record counts. 0 when none does. Stops at the first queue with one within
    1 MiB of the target."""
    best = 0
    for cq in list(reversed(parts.consume_queues.opened().values()))[:limit]:
        lo, hi = cq.min_offset, cq.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            entry = cq.entry(mid)
            if entry is not None and 0 <= entry[0] <= target:
                lo = mid + 1
            else:
                hi = mid
        if lo <= cq.min_offset:
            continue
        units = cq.entries(lo - 1, 1)
        if len(units) and max(best, parts.commitlog.queue.min_offset - 1) < \
                int(units["offset"][0]) <= target and \
                units_ok(parts.commitlog, cq, lo - 1, units).all():
            best = int(units["offset"][0])
            if best >= target - (1 << 20):
                break
    return best


def missing_file(cq: ConsumeQueue) -> int | None:
    """The first queue offset of a file missing between two of a queue's files (deleted by
    hand, lost to a restore), or None: the units it held would be skipped unseen."""
    files = cq.queue.files
    for before, after in zip(files, files[1:]):
        if after.file_from_offset != before.file_from_offset + before.file_size:
            return (before.file_from_offset + before.file_size) // UNIT_SIZE
    return None


def units_ok(commitlog: CommitLog, cq: ConsumeQueue, lo: int, units: np.ndarray) -> np.ndarray:
    """Which of a queue's units from queue offset `lo` describe their record: pre-blank
    units and a leading run pointing below the CommitLog minimum (a head retention deleted
    the records of) count as good; a negative offset is no record's."""
    real = units["size"] != PRE_BLANK[1]
    below = (units["offset"] >= 0) & (units["offset"] < commitlog.queue.min_offset)
    real[:int(np.argmin(below)) if not below.all() else len(units)] = False
    ok = ~real
    ok[real] = commitlog.units_match(units["offset"][real], units["size"][real], cq.topic,
                                     cq.queue_id, np.arange(lo, lo + len(units), dtype=np.int64)[real])
    return ok


TAGS_CHECKED = 4  # a queue's last units whose tagsCode an open checks (the scrub: every one)


def tags_ok(commitlog: CommitLog, tags: TagsCodes, units: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Which units (those `ok` says describe their record) hold their record's tagsCode: a
    flipped bit there passes every other check, and a tag filter would skip the message.
    One decode per unit: for the few an open checks and the scrub's steps."""
    out = ok.copy()
    for i in np.flatnonzero(ok & (units["size"] != PRE_BLANK[1])).tolist():
        try:
            msg = commitlog.read(int(units["offset"][i]))
            if codec.is_filler(msg.topic, msg.sys_flag):
                continue
            out[i] = tags.of(msg.topic, msg.properties, msg.store_timestamp) == int(units["tags"][i])
        except (CorruptionError, NotFound, CodecError):
            continue  # the record's own damage: reads and the CommitLog checks report it
    return out


def mend_queues(parts: StoreParts, damaged: list[tuple[ConsumeQueue, int, bool]], dispatch_from: int,
                notes: list[str], quarantined: list[str], noted: frozenset = frozenset()) -> int:
    """A bad tail is cut and dispatched again; a bad unit with good ones after it means the
    queue file was damaged: its files go to quarantine/ and the queue is rebuilt from the
    CommitLog (queue offsets come from the records, so none is lost or reused). Returns the
    new dispatch_from. Queues in `noted` were explained by the caller already."""
    lowest = parts.commitlog.queue.min_offset
    for cq, bad, good_after in damaged:
        if not good_after:
            if bad < cq.max_offset:  # (a crash's ConsumeQueue tail may be cut already)
                cq.cut_tail(bad)
            dispatch_from = max(min(dispatch_from, cq.max_physic_offset), lowest)
            continue
        quarantined += cq.move_to_quarantine(parts.root)
        note = (f"ConsumeQueue {cq.topic}/{cq.queue_id} unit {bad} does not match its "
                f"record; rebuilt the queue from the CommitLog (old files in quarantine/)")
        if (cq.topic, cq.queue_id) not in noted:
            log.warning("recovery: %s", note)
            notes.append(note)
        dispatch_from = lowest
    return dispatch_from


def cut_lost_tail(parts: StoreParts, cq: ConsumeQueue, cut: int) -> str | None:
    """The cut a crash's recovery left a queue it dispatched no record to: units whose
    records start at or past CommitLog offset `cut` are a torn write's or a lost tail's
    (pointing past the recovered end, where other queues' records go next). The last run of
    them that do not describe their own record goes: a unit that does was put after the cut
    was owed (a stale record of it), and stays with every unit before it (a bad one among
    those is damage, for the proof after to find). Zeros are written over them and synced
    in a read-write store; a read-only one drops them in memory. What was done, or None."""
    at, end = cq.first_from_physical(cut), cq.max_offset
    hi = at  # one past the last unit from `at` on that describes its record
    while at < end:
        units = cq.entries(at, min(end - at, 1 << 16))
        if not len(units):
            break
        good = np.flatnonzero(units_ok(parts.commitlog, cq, at, units))
        if len(good):
            hi = at + int(good[-1]) + 1
        at += len(units)
    if hi >= end:
        return None
    cq.cut_tail(hi)
    return (f"ConsumeQueue {cq.topic}/{cq.queue_id}: dropped {end - hi} unit(s) from offset {hi}, "
            "written after the checkpoint for records the crash lost")


class Halted(Exception):
    """A walk of the whole log stopped because its store is closing (`stop` said so)."""


def queues_from_log(parts: StoreParts, keys: set[tuple[str, int]] | None,
                    stop: Callable[[], bool] | None = None
                    ) -> dict[tuple[str, int], RebuiltQueue]:
    """Queues rebuilt in memory from every record of the log that checks out: those of
    `keys`, or every queue a record names (None: a store whose ConsumeQueue mqfs cannot read),
    LMQ queues with the units multi-dispatch gives them. `stop` is asked at every record: a
    close need not wait for a walk of the whole log (Halted)."""
    found: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {k: [] for k in keys or ()}
    tags = TagsCodes(parts.flavor, parse_delay_levels(parts.config.message_delay_level))
    # a record past the log's end is never read (a broker's recovery cut before it: it left
    # the bytes, and a read there finds no data): its queue offset is not served either
    end = parts.commitlog.queue.max_offset
    cl = parts.commitlog
    items = dledger_walk.walk(cl) if cl.dledger else salvage.walk(cl.queue.files, parts.flavor, cl.file_size)
    for item in items:
        if stop is not None and stop():
            raise Halted
        if isinstance(item, salvage.Damage) or not layout.in_queue(item.sys_flag) \
                or codec.is_filler(item.topic, item.sys_flag) or item.commitlog_offset >= end:
            continue
        units = [(item.topic, item.queue_id, item.queue_offset),  # its own, and any LMQ queue's
                 *dispatched(item.topic, item.queue_id, item.properties)]
        for topic, queue_id, queue_offset in units:
            if keys is None or (topic, queue_id) in keys:
                found.setdefault((topic, queue_id), []).append(
                    (queue_offset, item.commitlog_offset, item.total_size,
                     tags.of(item.topic, item.properties, item.store_timestamp)))
    return {k: RebuiltQueue.of(k[0], k[1], v) for k, v in found.items()}
