"""Recovery on open: find the valid end of the CommitLog, cut the torn tail, and make the
ConsumeQueues and IndexFiles match it by re-dispatching records (format §5.4).

Normal (no `abort` file): everything was flushed and dispatched at close; scan the last files
for the end and dispatch whatever no ConsumeQueue holds yet.
Abnormal (`abort` left by a crash): ConsumeQueue entries are kept only below the offset the
checkpoint says was flushed; the index keeps only files flushed at roll-over; every record from
there on is validated (checksum included) and dispatched again. Dispatch is idempotent, so a
crash during recovery is recovered by running it again.

A record that fails validation below the offset the checkpoint says was flushed is corruption
in acknowledged data: it is reported and the store refuses to open until `repair` is asked for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from . import codec
from .codec import MAGIC_BLANK, MAGIC_V1, MAGIC_V2
from .crash_points import crash_point
from .errors import CodecError, CorruptionError

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]  # (bytes done, bytes total)


@dataclass
class RecoveryReport:
    abnormal: bool
    end_offset: int
    truncated_bytes: int
    dispatched: int
    corruption: str | None = None


def scan_end(store, start: int, dispatch_from: int, check_crc: bool,
             progress: Progress | None) -> tuple[int, int, str | None]:
    """Walk records from `start` (a file start); dispatch those at or after dispatch_from.
    Returns (valid end offset, records dispatched, reason the scan stopped early or None)."""
    commitlog = store.commitlog
    flavor = store.flavor if check_crc else None
    files = [mf for mf in commitlog.queue.files if mf.file_from_offset + mf.file_size > start]
    total = sum(mf.file_size for mf in files)
    done = 0
    dispatched = 0
    end = start
    for mf in files:
        buf = memoryview(mf.buffer())
        pos = max(start - mf.file_from_offset, 0)
        size_limit = mf.file_size
        reason = None
        while True:
            if size_limit - pos < 8:
                reason = "no room for a record header"
                break
            size, magic = codec.peek_header(buf, pos)
            if magic == MAGIC_BLANK:
                if size != size_limit - pos:
                    reason = f"BLANK record of {size} bytes at {mf.file_from_offset + pos}"
                break
            if magic not in (MAGIC_V1, MAGIC_V2):
                reason = None if size == 0 and magic == 0 else (
                    f"bad magic 0x{magic & 0xFFFFFFFF:08X} at {mf.file_from_offset + pos}")
                break
            try:
                msg = codec.decode(buf[: min(pos + size, size_limit)] if size > 0 else buf, pos, flavor)
            except CodecError as exc:
                reason = str(exc)
                break
            phys = mf.file_from_offset + pos
            if msg.commitlog_offset != phys:
                reason = f"record at {phys} says it is at {msg.commitlog_offset}"
                break
            if phys >= dispatch_from:
                crash_point("recovery.dispatch")
                store.dispatch(msg)
                dispatched += 1
            pos += size
        end = mf.file_from_offset + pos
        done += mf.file_size
        if progress:
            progress(done, total)
        blank_ok = reason is None and size_limit - pos >= 8 and \
            codec.peek_header(buf, pos)[1] == MAGIC_BLANK
        if not blank_ok:
            return end, dispatched, reason
        end = mf.file_from_offset + mf.file_size  # a BLANK: the next file starts the next record
        if mf is files[-1]:
            # the last file is full and ends in a BLANK: the next record goes to a new file
            return end, dispatched, None
    return end, dispatched, None


def _start_file(store, offset: int) -> int:
    """Start offset of the file holding `offset` (or the first file)."""
    q = store.commitlog.queue
    mf = q.find(offset)
    if mf is None:
        return q.min_offset
    return mf.file_from_offset


def recover(store, last_exit_ok: bool, repair: bool, progress: Progress | None) -> RecoveryReport:
    commitlog = store.commitlog
    queue = commitlog.queue
    cp = store.checkpoint
    cqs = list(store.consume_queues.values())
    for cq in cqs:
        cq.recover()
    if not queue.files:
        for cq in cqs:
            cq.queue.truncate_dirty(0)
            cq.max_physic_offset = 0
        return RecoveryReport(not last_exit_ok, 0, 0, 0)

    max_cq_end = max((cq.max_physic_offset for cq in cqs), default=0)
    if last_exit_ok:
        dispatch_from = max(max_cq_end, queue.min_offset)
        scan_from = _start_file(store, min(dispatch_from, queue.files[-1].file_from_offset))
    else:
        cq_from = store.checkpoint.cq_flushed_offset
        index_from = store.index.end_phy_offset if store.index.files else queue.min_offset
        dispatch_from = max(min(cq_from, index_from), queue.min_offset)
        for cq in cqs:
            cq.truncate_from_physical(dispatch_from)
        scan_from = _start_file(store, dispatch_from)

    max_before = queue.files[-1].file_from_offset + queue.file_size
    end, dispatched, reason = scan_end(store, scan_from, dispatch_from,
                                       store.config.check_crc_on_recover, progress)
    flushed = store.checkpoint.commitlog_flushed_offset
    report = RecoveryReport(not last_exit_ok, end, 0, dispatched)
    if reason is not None and end < flushed:
        report.corruption = (f"corrupt record at CommitLog offset {end} inside flushed data "
                             f"(flushed up to {flushed}): {reason}")
        if not repair:
            raise CorruptionError(report.corruption + "; run `mqfs repair` to cut the log there")
        log.warning("repair: %s; cutting the CommitLog there", report.corruption)
    elif reason is not None:
        log.info("recovery: CommitLog ends at %d (%s)", end, reason)

    report.truncated_bytes = max(0, max_before - end) if not last_exit_ok else 0
    crash_point("recovery.truncate")
    for cq in store.consume_queues.values():
        cq.truncate_from_physical(end)
    store.index.truncate_from_physical(end)
    queue.truncate_dirty(end)
    if not last_exit_ok or reason is not None:
        store.flush_logics()
    return report
