"""The CommitLog: every message of every topic, appended in one sequence of mapped files.

Appends happen under the store's put lock (the caller holds it); a record that would leave
fewer than 8 bytes at the end of a file goes to the next file and the rest of this one is
marked by a BLANK record (docs/format.md).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable

import numpy as np

from ..crash_points import ARMED, crash_point
from ..errors import CodecError, CorruptionError, InvalidMessage, NotFound, StoreError
from ..format import codec, columns, layout
from ..format.compression import COMPRESSED_FLAG
from ..format.flavor import Flavor
from ..format.layout import END_FILE_MIN_BLANK, MAGIC_BLANK
from ..format.message import StoredMessage
from .mapped_file import MappedFile
from .mapped_file_queue import MappedFileQueue

_BLANK = struct.Struct(">ii")


class CommitLog:
    def __init__(self, root: str, file_size: int, flavor: Flavor, *, transient: bool = False,
                 read_only: bool = False, zero_ahead: bool = False,
                 place: Callable[[bytearray, int, int, int, int], None] | None = None,
                 dledger_data: str | None = None):
        """`zero_ahead`: for sync flush, see MappedFile._zero_ahead. `place`: stamps and
        seals a record as codec.place does (the compiled encoder's), or None for codec.place.
        `dledger_data`: a broker's DLedger entry files (docs/format.md, "DLedger CommitLog"),
        read only: a record sits at its offset as in commitlog/, each after a 48-byte entry
        header, so reads by offset are the same and walks use store/integrity/dledger_walk.py."""
        self.file_size = file_size
        self.dledger = dledger_data is not None
        self.flavor = flavor
        self._record_crc = flavor.crc_unmasked if flavor.record_crc else None
        self.place: Callable[[bytearray, int, int, int, int], None] | None = place
        self.queue = MappedFileQueue(dledger_data or os.path.join(root, "commitlog"), file_size,
                                     transient=transient, read_only=read_only,
                                     zero_ahead=zero_ahead)

    def load(self) -> None:
        self.queue.load()

    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    @property
    def max_offset(self) -> int:
        return self.queue.max_offset

    # --- writing (caller holds put_lock) ---------------------------------------------------
    def check_fits(self, size: int) -> None:
        if size + END_FILE_MIN_BLANK > self.file_size:
            raise InvalidMessage(
                f"record of {size} bytes does not fit in a CommitLog file of {self.file_size} bytes"
            )

    def file_for(self, size: int) -> MappedFile:
        """The file that takes the next `size` bytes, writing a BLANK and rolling if needed."""
        mf = self.queue.last_file_for_append()
        if size + END_FILE_MIN_BLANK > mf.remaining():
            nxt = self.queue.ensure_next_file()  # may raise ENOSPC: nothing written yet
            crash_point("commitlog.roll")
            blank = mf.remaining()
            mf.append(_BLANK.pack(blank, MAGIC_BLANK))
            mf.wrote_position = self.file_size
            mf = nxt
        return mf

    def append(self, rec: bytearray, store_ts_pos: int, queue_offset: int, store_ts: int) -> int:
        """Stamp, seal and append one encoded record; return its CommitLog offset. Every
        put runs this: the fields are packed in place and crash sites cost a flag test."""
        files = self.queue.files
        mf = files[-1] if files else None
        size = len(rec)
        if mf is None or size + END_FILE_MIN_BLANK > mf.file_size - mf.wrote_position:
            mf = self.file_for(size)
        commitlog_offset = mf.file_from_offset + mf.wrote_position
        place = self.place
        if place is not None:
            place(rec, store_ts_pos, queue_offset, commitlog_offset, store_ts)
        else:
            codec.place(rec, store_ts_pos, queue_offset, commitlog_offset, store_ts, self._record_crc)
        if ARMED:
            crash_point("commitlog.before_write")
        mf.append(rec)
        if ARMED:
            crash_point("commitlog.after_write")
        mf.store_timestamp = store_ts
        return commitlog_offset

    def write_run(self, mf: MappedFile, records: bytes | bytearray | memoryview, store_ts: int) -> None:
        """Append records already stamped for consecutive positions of `mf` in one copy."""
        crash_point("commitlog.before_write")
        mf.append(records)
        crash_point("commitlog.after_write")
        mf.store_timestamp = store_ts

    # --- reading ---------------------------------------------------------------------------
    def read(self, offset: int, check_crc: bool = False) -> StoredMessage:
        """The record at a physical offset: NotFound when the offset is outside the log,
        CorruptionError when the bytes there are not a whole (checked) record."""
        mf = self.queue.find(offset)
        if mf is None or offset < 0:
            raise NotFound(f"no CommitLog data at offset {offset}")
        pos = offset - mf.file_from_offset
        limit = mf.read_position
        if pos >= limit:
            raise NotFound(f"no CommitLog data at offset {offset}")
        view = memoryview(mf.buffer())[:limit]
        try:
            return codec.decode(view, pos, self.flavor if check_crc else None)
        except CodecError as exc:
            raise CorruptionError(f"damaged record at CommitLog offset {offset} "
                                  f"(file {os.path.basename(mf.path)}): {exc}") from None

    def body_sizes_and_times(self, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """BODYLEN and STORETIMESTAMP of the records at these offsets, gathered with numpy
        from the record headers (no decode, no checksum): what a directory listing needs.
        A compressed body's length is -1: only inflating it tells its size."""
        lengths = np.zeros(len(offsets), dtype=np.int64)
        stamps = np.zeros(len(offsets), dtype=np.int64)
        if not len(offsets):
            return lengths, stamps
        starts = offsets - offsets % self.file_size
        for start in np.unique(starts):
            mf = self.queue.find(int(start))
            if mf is None:
                continue
            sel = np.flatnonzero(starts == start)
            pos = offsets[sel] - int(start)
            raw = np.frombuffer(mf.buffer(), dtype=np.uint8, count=mf.read_position)
            sys_flag = layout.gather(raw, pos + layout.SYSFLAG_POS, ">i4").astype(np.int64)
            bh, sh = layout.born_host_len(sys_flag), layout.store_host_len(sys_flag)
            stamps[sel] = layout.gather(raw, pos + layout.store_timestamp_pos(bh), ">i8")
            lengths[sel] = np.where(sys_flag & COMPRESSED_FLAG, -1,
                                    layout.gather(raw, pos + layout.body_len_pos(bh, sh), ">i4"))
        return lengths, stamps

    def units_match(self, offsets: np.ndarray, sizes: np.ndarray, topic: str, queue_id: int,
                    queue_offsets: np.ndarray) -> np.ndarray:
        """columns.unit_matches for units anywhere in the log: which describe their record.
        A unit pointing outside every file does not."""
        ok = np.zeros(len(offsets), dtype=bool)
        if not len(offsets) or not self.queue.files:
            return ok
        offsets = offsets.astype(np.int64)
        base = self.queue.min_offset
        starts = offsets - (offsets - base) % self.file_size
        for start in np.unique(starts).tolist():
            mf = self.queue.find(start)
            if mf is None or mf.file_from_offset != start:
                continue
            sel = np.flatnonzero(starts == start)
            raw = np.frombuffer(mf.buffer(), dtype=np.uint8)
            ok[sel] = columns.unit_matches(raw, offsets[sel] - start, sizes[sel], topic, queue_id,
                                         queue_offsets[sel])
        return ok

    def record_time_at(self, offset: int) -> int | None:
        """Store time of the record decoded at an offset; None where no whole record starts
        there."""
        try:
            msg = self.read(offset)
        except StoreError:  # NotFound, CorruptionError
            return None
        return msg.store_timestamp if msg.commitlog_offset == offset else None

    def store_timestamp_at(self, offset: int) -> int:
        """Store time of the record at an offset, without decoding the rest of it."""
        mf = self.queue.find(offset)
        if mf is None:
            return -1
        return layout.store_timestamp_at(mf.buffer(), offset - mf.file_from_offset)

    def close(self) -> None:
        self.queue.close()
