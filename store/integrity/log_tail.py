"""The CommitLog past where its valid records end: what lies there, and whether an open may
cut it (only a torn tail, never flushed data), said in one line when it may not."""

from __future__ import annotations

import os
from collections.abc import Iterator

from ..files import quarantine
from ..files.mapped_file import MappedFile, offset_to_name
from . import salvage
from .parts import StoreParts


def _valid_record_in(parts: StoreParts, lo: int, hi: int) -> int | None:
    """Offset of the first whole record that checks out (position field included) starting
    in (lo, hi), or None: what tells damage in the middle of the log from a torn tail."""
    for mf in parts.commitlog.queue.files:
        a = max(lo + 1, mf.file_from_offset) - mf.file_from_offset
        b = min(hi, mf.file_from_offset + mf.file_size) - mf.file_from_offset
        found = salvage.next_record(mf, a, b, parts.flavor) if a < b else None
        if found is not None:
            return mf.file_from_offset + found
    return None


def _file_name_at(parts: StoreParts, offset: int) -> str:
    mf = parts.commitlog.queue.find(offset)
    return os.path.basename(mf.path) if mf is not None else f"(no file holds offset {offset})"


def refusal(parts: StoreParts, end: int, flushed: int, reason: str | None,
            clean: bool = False) -> str | None:
    """Why the CommitLog may not be cut at `end`: it may cut only a torn tail, bytes after
    the offset the checkpoint says were flushed (or, with no such offset, after which no
    valid record follows). `clean`: the end is where the last clean close left the log,
    which flushed everything; a valid record past it was written after that close (an
    older copy of the store restored over a newer one), never a torn tail: cut, its queue
    offset would be given out again."""
    name = _file_name_at(parts, end)
    what = reason or "no record"
    tail = (f"run `mqfs verify {parts.root}` to see the damage and `mqfs repair {parts.root}` "
            "to salvage")
    if end < flushed:
        return (f"damaged record at CommitLog offset {end} (file {name}) inside flushed data "
                f"(flushed up to {flushed}): {what}; nothing was changed: {tail}")
    if flushed == 0 or clean:
        files = parts.commitlog.queue.files
        found = _valid_record_in(parts, end, files[-1].file_from_offset + files[-1].file_size)
        if found is not None and clean and flushed > 0:
            return (f"records follow the CommitLog's end at {end} (file {name}), where the "
                    f"last clean close left it: a valid one at {found} (file "
                    f"{_file_name_at(parts, found)}) was written after that close (an older "
                    f"copy of the store restored over a newer one?); nothing was changed: run "
                    f"`mqfs verify {parts.root}` to see them and `mqfs repair {parts.root}` "
                    "to keep them, with every queue offset they took")
        if found is not None:
            return (f"damaged record at CommitLog offset {end} (file {name}): {what}, and a "
                    f"valid record follows at {found}; nothing was changed: {tail}")
    return None


def _data_past(parts: StoreParts, end: int) -> Iterator[tuple[MappedFile, int, int]]:
    """(file, lo, hi) for each file holding non-zero bytes past the cut at `end`: they lie
    in [lo, hi) of the file."""
    for mf in parts.commitlog.queue.files:
        lo = max(end - mf.file_from_offset, 0)
        if lo < mf.file_size:
            hi = salvage.nonzero_end(mf, lo)
            if hi > lo:
                yield mf, lo, hi


def bytes_past(parts: StoreParts, end: int) -> str | None:
    """Why a log whose records end in zeros at `end` still has a torn tail: non-zero bytes
    further on (a power cut lost a page in the middle of what was written), or None. They
    are treated as a torn tail: kept in quarantine/ before the cut, never zeroed unseen."""
    found = next(_data_past(parts, end), None)
    if found is None:
        return None
    mf, _, hi = found
    return f"zeros at {end}, but non-zero bytes follow up to {mf.file_from_offset + hi}"


def quarantine_tail(parts: StoreParts, end: int) -> list[str]:
    """Copy every non-zero byte the cut at `end` takes away into quarantine/."""
    return [quarantine.save_bytes(parts.root,
                                  f"commitlog-{offset_to_name(mf.file_from_offset + lo)}-torn-tail",
                                  mf.buffer()[lo:hi])
            for mf, lo, hi in _data_past(parts, end)]
