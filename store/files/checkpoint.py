"""The 4 KiB checkpoint file: five big-endian int64 values at offsets 0, 8, 16, 24, 32.

physicMsgTimestamp (CommitLog flushed), logicsMsgTimestamp (ConsumeQueue flushed),
indexMsgTimestamp (last full IndexFile flushed), masterFlushedOffset, confirmPhyOffset.

mqfs adds, in bytes RocketMQ leaves unused: 40 commitlogFlushedOffset (every CommitLog byte below
it was on disk when the checkpoint was written), 48 cqFlushedOffset (every ConsumeQueue entry
for records below it was on disk), 56 an xxh32 of bytes 0..56. Offsets do not suffer from clock
jumps the way timestamps do. A torn or foreign checkpoint fails the checksum and the extension
reads as zero: recovery then re-dispatches everything, which costs time, never data.

At 64 a second block, its own xxh32 at 80 over bytes 0..80: indexFile (the newest IndexFile's
name, yyyyMMddHHmmssSSS as a number) and indexCount (its entries 1..indexCount-1 were on disk,
synced after the ConsumeQueues, and point at records below commitlogFlushedOffset). After a
crash that file is kept up to there instead of being indexed again from its first record.
Written by a store that knows nothing of it, the block fails its checksum and reads as zero.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

import xxhash

from ..crash_points import crash_point
from . import safefs
from .safefs import fsync_dir

SIZE = 4096
_FIELDS = struct.Struct(">qqqqq")
_EXT = struct.Struct(">qqI")
_INDEX_AT = 64
_INDEX = struct.Struct(">qqI")
_END = _INDEX_AT + _INDEX.size


@dataclass
class Checkpoint:
    path: str
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0
    commitlog_flushed_offset: int = 0
    cq_flushed_offset: int = 0
    index_file: int = 0  # the newest IndexFile's name as a number, 0: none vouched for
    index_count: int = 0  # its entries below this number were synced
    checked: bool = False  # loaded, and its checksum holds: its times can be trusted
    # its IndexFile block was read and checks out: index_file 0 then says no IndexFile was
    # there when it was written (no record below cq_flushed_offset had a key to index)
    index_vouched: bool = False

    @classmethod
    def load(cls, path: str) -> Checkpoint:
        cp = cls(path)
        try:
            raw = safefs.read_bytes(path)[:_END]
        except FileNotFoundError:
            return cp
        if len(raw) >= _FIELDS.size:
            (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp,
             cp.master_flushed_offset, cp.confirm_phy_offset) = _FIELDS.unpack_from(raw)
        if len(raw) >= _FIELDS.size + _EXT.size:
            cl, cq, digest = _EXT.unpack_from(raw, _FIELDS.size)
            if digest == xxhash.xxh32_intdigest(raw[:56]) and digest != 0:
                cp.commitlog_flushed_offset, cp.cq_flushed_offset = cl, cq
                cp.checked = True
        if cp.checked and len(raw) == _END:
            name, count, digest = _INDEX.unpack_from(raw, _INDEX_AT)
            if digest == xxhash.xxh32_intdigest(raw[:_END - 4]) and digest != 0:
                cp.index_file, cp.index_count = name, count
                cp.index_vouched = True
        return cp

    def flush(self) -> None:
        buf = bytearray(SIZE)
        _FIELDS.pack_into(buf, 0, self.physic_msg_timestamp, self.logics_msg_timestamp,
                          self.index_msg_timestamp, self.master_flushed_offset,
                          self.confirm_phy_offset)
        _EXT.pack_into(buf, _FIELDS.size, self.commitlog_flushed_offset, self.cq_flushed_offset, 0)
        _EXT.pack_into(buf, _FIELDS.size, self.commitlog_flushed_offset, self.cq_flushed_offset,
                       xxhash.xxh32_intdigest(bytes(buf[:56])))
        _INDEX.pack_into(buf, _INDEX_AT, self.index_file, self.index_count, 0)
        _INDEX.pack_into(buf, _INDEX_AT, self.index_file, self.index_count,
                         xxhash.xxh32_intdigest(bytes(buf[:_END - 4])))
        created = not os.path.lexists(self.path)
        fd = safefs.open_file(self.path, os.O_RDWR | os.O_CREAT)
        try:
            crash_point("checkpoint.before")
            os.pwrite(fd, buf, 0)
            os.fdatasync(fd)
            crash_point("checkpoint.after")
        finally:
            os.close(fd)
        if created:
            fsync_dir(os.path.dirname(self.path) or ".")
