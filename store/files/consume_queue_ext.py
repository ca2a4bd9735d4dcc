"""ConsumeQueue ext (enableConsumeQueueExt): the broker's `consumequeue_ext/<topic>/<queue>/`
files, read only (docs/format.md, "ConsumeQueue ext"). mqfs never writes them.

With ext on, a unit's tagsCode is an address (ConsumeQueueExt.decorate: at or below
MAX_ADDR = Integer.MIN_VALUE - 1) of an ext unit at file offset `address - Long.MIN_VALUE`:
int16 size, int64 tagsCode, int64 store time, int16 bit map size, the filter bit map.
"""

from __future__ import annotations

import os
import struct

from . import safefs

EXT_ADDRESS_MAX = -(1 << 31) - 1  # ConsumeQueueExt.MAX_ADDR

_HEAD = struct.Struct(">hqqh")  # size, tagsCode, store time, bit map size

MIN_EXT_UNIT_SIZE = _HEAD.size  # 20


def is_ext_address(tags_code: int) -> bool:
    return tags_code <= EXT_ADDRESS_MAX


def ext_offset(address: int) -> int:
    """ConsumeQueueExt.unDecorate: where the ext unit an address names starts."""
    return address + (1 << 63)


def ext_address(offset: int) -> int:
    """ConsumeQueueExt.decorate: the tagsCode a unit holds for an ext unit at `offset`."""
    return offset - (1 << 63)


def encode_unit(tags_code: int, store_time: int, bit_map: bytes = b"") -> bytes:
    """An ext unit as CqExtUnit.write lays it out (tests build broker stores with it)."""
    return _HEAD.pack(MIN_EXT_UNIT_SIZE + len(bit_map), tags_code, store_time, len(bit_map)) + bit_map


class ExtReader:
    """One queue's ext files: the units their addresses name."""

    def __init__(self, root: str, topic: str, queue_id: int):
        self.directory = os.path.join(root, "consumequeue_ext", topic, str(queue_id))
        try:
            self.starts = sorted(int(n) for n in safefs.listdir(self.directory) if len(n) == 20 and n.isdigit())
        except OSError:
            self.starts = []

    def unit(self, address: int) -> tuple[int, int, bytes] | None:
        """(tagsCode, store time, bit map) of the ext unit at `address`, or None when no file
        holds a well-formed one there."""
        offset = ext_offset(address)
        base = max((s for s in self.starts if s <= offset), default=None)
        if base is None:
            return None
        try:
            fd = safefs.open_file(os.path.join(self.directory, f"{base:020d}"))
        except OSError:
            return None
        try:
            head = os.pread(fd, _HEAD.size, offset - base)
            if len(head) < _HEAD.size:
                return None
            size, tags_code, store_time, bits = _HEAD.unpack(head)
            if size < MIN_EXT_UNIT_SIZE or bits < 0 or size != MIN_EXT_UNIT_SIZE + bits:
                return None
            bit_map = os.pread(fd, bits, offset - base + _HEAD.size)
            return (tags_code, store_time, bit_map) if len(bit_map) == bits else None
        finally:
            os.close(fd)
