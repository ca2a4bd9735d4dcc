"""A read-only open's look at the CommitLog: its end found in memory, nothing written.

Queues are checked at their first use (`first_use.prove_read_only`), not here: an open costs
the same whatever their number.
"""

from __future__ import annotations

import numpy as np

from ..format import layout
from ..format.columns import RecordRun
from ..offline.store_files import newest_begun
from .dledger_walk import end_scan
from .log_tail import bytes_past, refusal
from .parts import StoreParts
from .recovery import RecoveryReport
from .scanner import NOWHERE, file_start


def _newest_begun(parts: StoreParts) -> int:
    """Start of the CommitLog file the log ends in (`newest_begun`: not a broker's made-ahead
    file of zeros), where the scan for the log's end begins at the latest."""
    files = parts.commitlog.queue.files
    found = newest_begun(files, lambda mf: mf.buffer()[:8])
    return found.file_from_offset if found is not None else 0


def open_read_only(parts: StoreParts, crashed: bool, unsure_from: int | None = None,
                   queues_from_log: bool = False) -> RecoveryReport:
    """Damage inside flushed data does not stop it (reads of damaged records fail, every
    intact one is served); after a crash, what a read-write open would do is reported, and
    records no ConsumeQueue holds yet are not shown. `unsure_from`: the counts the queues
    were registered with hold for records below this CommitLog offset (the checkpoint's,
    config/queueEnds.log's); a queue with a record past it has its count found at its
    first use instead. `queues_from_log`: every queue is served from the records (a broker's
    RocksDB ConsumeQueue), so none lags the CommitLog and no open would index them."""
    report = RecoveryReport(crashed, 0, 0)
    queue = parts.commitlog.queue
    if not queue.files:
        return report
    flushed = parts.checkpoint.commitlog_flushed_offset
    last_start = _newest_begun(parts)
    start = file_start(parts.commitlog, min(last_start, flushed or last_start, unsure_from or NOWHERE))
    touched: set[tuple[str, int]] = set()

    def note(run: RecordRun) -> None:
        rows = np.flatnonzero(layout.in_queue(run.sys_flag)).tolist()
        touched.update(zip(map(run.topics.__getitem__, rows), run.queue_id[rows].tolist()))

    end, _, reason = end_scan(parts.commitlog, parts.scan_flavor, start,
                              NOWHERE if unsure_from is None else unsure_from, note)
    parts.consume_queues.mark_inexact(touched)
    reason = reason or bytes_past(parts, end)
    if end < flushed:
        report.corruption = refusal(parts, end, flushed, reason)
        end = min(flushed, queue.max_offset)
    elif reason is not None and crashed:
        report.notes.append(f"a read-write open would cut a torn tail at CommitLog offset {end} "
                            f"({reason}), keeping a copy in quarantine/")
    elif reason is not None:  # records after a clean close's end: an older copy restored?
        why = refusal(parts, end, flushed, reason, clean=True)
        if why is not None:
            report.notes.append(f"a read-write open would refuse: {why}")
    lowest = parts.checkpoint.cq_flushed_offset
    if crashed and lowest < end and not queues_from_log and not parts.commitlog.dledger:
        report.notes.append(f"a read-write open would index records from CommitLog offset "
                            f"about {lowest} to {end}; until then those no queue holds are "
                            "not listed")
    queue.truncate_dirty(end)  # read-only queues only move positions in memory
    report.end_offset = end
    return report
