"""A read-only open's look at the CommitLog: its end found in memory, nothing written.

Queues are checked at their first use (`first_use.prove_read_only`), not here: an open costs
the same whatever their number.
"""

from __future__ import annotations

from .recovery import NOWHERE, RecoveryReport, StoreParts, _bytes_past, _refusal, _start_file, scan_end


def open_read_only(parts: StoreParts, crashed: bool) -> RecoveryReport:
    """Damage inside flushed data does not stop it (reads of damaged records fail, every
    intact one is served); after a crash, what a read-write open would do is reported, and
    records no ConsumeQueue holds yet are not shown."""
    report = RecoveryReport(crashed, 0, 0)
    queue = parts.commitlog.queue
    if not queue.files:
        return report
    flushed = parts.checkpoint.commitlog_flushed_offset
    last_start = queue.files[-1].file_from_offset
    start = _start_file(parts, min(last_start, flushed or last_start))
    end, _, reason = scan_end(parts, start, NOWHERE, parts.config.check_crc_on_recover, None)
    reason = reason or _bytes_past(parts, end)
    if end < flushed:
        report.corruption = _refusal(parts, end, flushed, reason)
        end = min(flushed, queue.max_offset)
    elif reason is not None and crashed:
        report.notes.append(f"a read-write open would cut a torn tail at CommitLog offset {end} "
                            f"({reason}), keeping a copy in quarantine/")
    lowest = parts.checkpoint.cq_flushed_offset
    if crashed and lowest < end:
        report.notes.append(f"a read-write open would index records from CommitLog offset "
                            f"about {lowest} to {end}; until then those no queue holds are "
                            "not listed")
    queue.truncate_dirty(end)  # read-only queues only move positions in memory
    report.end_offset = end
    return report
