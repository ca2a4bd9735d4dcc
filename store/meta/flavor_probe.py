"""Which flavor wrote a store, read from its records' checksums.

The manifest names the flavor, but a manifest can be lost, damaged or edited; checking records
with the wrong checksum function makes every record look corrupt. So every open samples the
first records of the oldest and the newest CommitLog file and counts, per flavor, the records
whose checksum holds. Reads only (os.pread), no mapping, nothing written.
"""

from __future__ import annotations

import os
import struct

from ..errors import CodecError
from ..files import safefs
from ..format import codec
from ..format.flavor import FLAVORS
from ..format.layout import MIN_RECORD_SIZE, RECORD_MAGICS
from ..slotted import Slotted

SAMPLE = 8  # records per sampled file
_MAX_RECORD = 64 << 20


class Probe(Slotted):
    __slots__ = __match_args__ = ("sampled", "matches", "with_trailer")

    def __init__(self, sampled: int = 0, matches: dict[str, int] | None = None,
                 with_trailer: int = 0) -> None:
        self.sampled = sampled  # structurally whole records looked at
        self.matches = {} if matches is None else matches  # flavor name -> checksums that held
        self.with_trailer = with_trailer  # records carrying a `__CRC32#` trailer

    @property
    def flavor(self) -> str | None:
        """The flavor the records agree on, or None when they tell nothing."""
        best = max(self.matches, key=lambda n: self.matches[n], default=None)
        if best is None or self.matches[best] == 0:
            return None
        if sum(1 for n in self.matches if self.matches[n] == self.matches[best]) > 1:
            return None
        return best

    def contradicts(self, name: str) -> bool:
        """True when the records say clearly that `name` did not write them."""
        found = self.flavor
        return found is not None and found != name and self.matches.get(name, 0) == 0

    @property
    def record_crc(self) -> bool:
        return self.sampled > 0 and self.with_trailer == self.sampled


def _records(path: str) -> list[bytes]:
    """The first SAMPLE records of a file, as far as their headers hold together."""
    out: list[bytes] = []
    pos = 0
    fd = safefs.open_file(path)
    try:
        size_on_disk = os.fstat(fd).st_size
        while len(out) < SAMPLE and pos + 8 <= size_on_disk:
            size, magic = struct.unpack(">ii", os.pread(fd, 8, pos))
            if magic not in RECORD_MAGICS or not MIN_RECORD_SIZE <= size <= _MAX_RECORD:
                break
            out.append(os.pread(fd, size, pos))
            pos += size
    finally:
        os.close(fd)
    return out


def probe(root: str) -> Probe:
    directory = os.path.join(root, "commitlog")
    result = Probe(matches={name: 0 for name in FLAVORS})
    try:
        names = sorted(n for n in safefs.listdir(directory) if len(n) == 20 and n.isdigit())
    except OSError:
        return result
    for name in dict.fromkeys([*names[:1], *names[-1:]]):
        try:
            records = _records(os.path.join(directory, name))
        except OSError:
            continue
        for raw in records:
            try:
                msg = codec.decode(raw, 0)
            except CodecError:
                continue
            result.sampled += 1
            result.with_trailer += codec.record_crc_of(raw, 0, len(raw)) is not None
            for flavor_name, flavor in FLAVORS.items():
                try:
                    codec.check_record(raw, 0, len(raw), msg.stored_body, msg.body_crc, flavor)
                except CodecError:
                    continue
                result.matches[flavor_name] += 1
    return result
