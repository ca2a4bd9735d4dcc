"""Checks of the CommitLog's files as a whole, made by every read-write open before it reads a
record: none missing, each where its name says, the log not grown past the last checkpoint.
They cost a little per file, nothing per record."""

from __future__ import annotations

import mmap
import os
from typing import TYPE_CHECKING

from ..errors import CorruptionError
from ..files.mapped_file import MappedFile, offset_to_name
from ..format import codec
from ..format.layout import MAGIC_V1, MAGIC_V2
from ..meta.log_start import recorded_min_offset

if TYPE_CHECKING:
    from ..files.checkpoint import Checkpoint
    from ..files.commitlog import CommitLog
    from .parts import StoreParts

_PHYSOFFSET = 28  # where a record's header holds its own CommitLog offset


def check_files(parts: StoreParts) -> None:
    """Refuse to open when a CommitLog file is missing: a gap between files, or the oldest
    file gone while retention never deleted it (config/retention.json says where the log
    starts)."""
    files = parts.commitlog.queue.files
    size = parts.config.commitlog_file_size
    fix = (f"nothing was changed: restore the file, or run `mqfs repair {parts.root}` to "
           "accept the loss")
    for before, after in zip(files, files[1:]):
        if after.file_from_offset != before.file_from_offset + size:
            raise CorruptionError(
                f"CommitLog file {offset_to_name(before.file_from_offset + size)} is missing "
                f"(offsets {before.file_from_offset + size}..{after.file_from_offset} lie "
                f"between {os.path.basename(before.path)} and "
                f"{os.path.basename(after.path)}); {fix}")
    starts = {mf.file_from_offset for mf in files}
    for mf in files:  # every file's first page asked for at once: cold, each is a disk read
        mf.buffer().madvise(mmap.MADV_WILLNEED, 0, min(mmap.PAGESIZE, mf.file_size))
    for mf in files:
        holds = _first_record_at(mf)
        if holds != mf.file_from_offset and holds in starts:
            raise CorruptionError(
                f"CommitLog file {os.path.basename(mf.path)} holds the records of "
                f"{offset_to_name(holds)}: the files were swapped or renamed; nothing was "
                "changed: give them back their names")
        if mf.file_from_offset % size:
            raise CorruptionError(f"CommitLog file {os.path.basename(mf.path)} is not named by a "
                                  f"multiple of the file size {size}; nothing was changed")
    recorded = recorded_min_offset(parts.root)
    if files and recorded is not None and files[0].file_from_offset > recorded:
        raise CorruptionError(
            f"CommitLog file {offset_to_name(recorded)} is missing: the log starts at "
            f"{files[0].file_from_offset}, but retention only deleted up to {recorded}; {fix}")
    flushed = parts.checkpoint.commitlog_flushed_offset
    ends = files[-1].file_from_offset + size if files else 0
    if flushed > ends and (files or recorded is not None):
        raise CorruptionError(
            f"the CommitLog files end at {ends}, but the checkpoint says {flushed} bytes were "
            f"flushed: the newest CommitLog file(s) are missing; {fix}")


def _first_record_at(mf: MappedFile) -> int | None:
    """The CommitLog offset the first record of a file names as its own (None: no record
    starts the file): a file swapped with another's name holds that other's records."""
    buf = mf.buffer()
    if mf.file_size < _PHYSOFFSET + 8 or codec.peek_header(buf, 0)[1] not in (MAGIC_V1, MAGIC_V2):
        return None
    return int.from_bytes(buf[_PHYSOFFSET:_PHYSOFFSET + 8], "big")


def grew_after_checkpoint(commitlog: CommitLog, checkpoint: Checkpoint) -> bool:
    """A clean close leaves the checkpoint's flushed offset at the very end of the CommitLog,
    followed by zeros (never written, or zeroed by recovery). Anything else there means the log
    was written after the last checkpoint: the exit was not clean, whatever the missing
    `abort` file says."""
    flushed = checkpoint.commitlog_flushed_offset
    mf = commitlog.queue.find(flushed) if flushed > 0 else None
    if mf is None or mf.file_size - (flushed - mf.file_from_offset) < 8:
        return False
    pos = flushed - mf.file_from_offset
    return mf.buffer()[pos : pos + 8] != bytes(8)
