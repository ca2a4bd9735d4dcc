"""The two functions that differ between store flavors: body checksum and string hash.

`rocketmq` reproduces Apache RocketMQ bit for bit (CRC-32 masked to 31 bits, Java
`String.hashCode()` over UTF-16 code units); `xxhash` swaps in xxh32/xxh64, which are
faster in Python and spread keys better. Everything else in the format is identical.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator

import xxhash

from ..slotted import Frozen

TYPE_CHECKING = False  # mypy alone reads these: importing typing is ~6% of a tag selection

if TYPE_CHECKING:
    import numpy as np

_INT_MIN = -(1 << 31)
CRC_MASK = 0x7FFFFFFF  # both flavors keep 31 bits of their checksums and key hashes


def java_string_hash(text: str) -> int:
    """Java `String.hashCode()`: h = 31*h + c over UTF-16 code units, as a signed int32."""
    h = 0
    if text.isascii():
        for c in text.encode("ascii"):
            h = (31 * h + c) & 0xFFFFFFFF
    else:
        units = text.encode("utf-16-be")
        for i in range(0, len(units), 2):
            h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _rocketmq_crc(body: bytes | memoryview) -> int:
    return zlib.crc32(body) & CRC_MASK


def _rocketmq_key_hash(key: str) -> int:
    h = java_string_hash(key)
    return 0 if h == _INT_MIN else abs(h)


def _rocketmq_tags_code(tags: str) -> int:
    return java_string_hash(tags) if tags else 0


def _xx_crc(body: bytes | memoryview) -> int:
    return xxhash.xxh32_intdigest(body) & CRC_MASK


def _xx_key_hash(key: str) -> int:
    return xxhash.xxh32_intdigest(key.encode("utf-8")) & CRC_MASK


def _rocketmq_key_hashes(keys: Iterable[str], n: int) -> np.ndarray:
    import numpy as np

    return np.fromiter(map(_rocketmq_key_hash, keys), dtype=np.int64, count=n)


def _xx_hashes(texts: Iterable[bytes], n: int) -> np.ndarray:
    import numpy as np

    return np.fromiter(map(xxhash.xxh32_intdigest, texts), dtype=np.int64, count=n) & CRC_MASK


def _xx_key_hashes(keys: Iterable[str], n: int) -> np.ndarray:
    return _xx_hashes(map(str.encode, keys), n)


def _cuts(packed: np.ndarray, ends: np.ndarray) -> Iterator[bytes]:
    """The texts packed back to back, `ends` where each ends, as bytes (C-level iteration)."""
    raw = packed.tobytes()
    bounds = ends.tolist()
    return map(raw.__getitem__, map(slice, [0, *bounds[:-1]], bounds))


def _rocketmq_key_hashes_packed(packed: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Java's hash is sum(c[i] * 31**(n-1-i)) mod 2**32: in uint32 arithmetic, which wraps,
    for ASCII text (one UTF-16 unit a byte); other text per key."""
    import numpy as np

    if (packed >= 0x80).any():
        return _rocketmq_key_hashes(map(bytes.decode, _cuts(packed, ends)), len(ends))
    lens = np.diff(ends, prepend=0)
    powers = np.cumprod(np.full(int(lens.max(initial=0)), 31, dtype=np.uint32), dtype=np.uint32)
    powers = np.append(np.uint32(1), powers[:-1])  # 31**k, k from 0
    exponent = np.repeat(ends - 1, lens) - np.arange(len(packed))
    terms = packed.astype(np.uint32) * powers[exponent]
    h = np.add.reduceat(terms, ends - lens, dtype=np.uint32).view(np.int32).astype(np.int64)
    return np.where(h == _INT_MIN, 0, np.abs(h))


def _xx_key_hashes_packed(packed: np.ndarray, ends: np.ndarray) -> np.ndarray:
    return _xx_hashes(_cuts(packed, ends), len(ends))


def _xx_tags_code(tags: str) -> int:
    if not tags:
        return 0
    v = xxhash.xxh64_intdigest(tags.encode("utf-8"))
    return v - (1 << 64) if v & (1 << 63) else v


class Flavor(Frozen):
    """A named pair of checksum and hash functions."""

    __slots__ = __match_args__ = ("name", "body_crc", "key_hash", "tags_code", "crc_unmasked",
                                  "key_hashes", "key_hashes_packed", "record_crc")
    name: str
    body_crc: Callable[[bytes | memoryview], int]
    key_hash: Callable[[str], int]
    tags_code: Callable[[str], int]
    # the same two for many inputs at once, as arrays: recovery checks and indexes hundreds
    # of thousands of records, and a Python call per item was half of its time
    crc_unmasked: Callable[[bytes | memoryview], int]  # body_crc before `& CRC_MASK`
    key_hashes: Callable[[Iterable[str], int], np.ndarray]  # (keys, how many)
    # key_hash of non-empty UTF-8 texts packed back to back: (uint8 array, where each ends)
    key_hashes_packed: Callable[[np.ndarray, np.ndarray], np.ndarray]
    # every record carries a whole-record checksum (RocketMQ 5's `__CRC32#` trailer, computed
    # with body_crc): new mqfs stores; a store a broker wrote without enabledAppendPropCRC not
    record_crc: bool

    def __init__(self, name: str, body_crc: Callable[[bytes | memoryview], int],
                 key_hash: Callable[[str], int], tags_code: Callable[[str], int],
                 crc_unmasked: Callable[[bytes | memoryview], int],
                 key_hashes: Callable[[Iterable[str], int], np.ndarray],
                 key_hashes_packed: Callable[[np.ndarray, np.ndarray], np.ndarray],
                 record_crc: bool = False) -> None:
        self._set(name=name, body_crc=body_crc, key_hash=key_hash, tags_code=tags_code,
                  crc_unmasked=crc_unmasked, key_hashes=key_hashes,
                  key_hashes_packed=key_hashes_packed, record_crc=record_crc)

    def with_record_crc(self, on: bool) -> Flavor:
        return self if on == self.record_crc else self.replace(record_crc=on)

    def checksums(self, buf: memoryview, starts: list[int], ends: list[int]) -> np.ndarray:
        """body_crc of buf[a:b] for each (a, b), iterated in C: no Python call per item."""
        import numpy as np

        sums = map(self.crc_unmasked, map(buf.__getitem__, map(slice, starts, ends)))
        return np.fromiter(sums, dtype=np.int64, count=len(starts)) & CRC_MASK


ROCKETMQ = Flavor("rocketmq", _rocketmq_crc, _rocketmq_key_hash, _rocketmq_tags_code,
                  zlib.crc32, _rocketmq_key_hashes, _rocketmq_key_hashes_packed)
XXHASH = Flavor("xxhash", _xx_crc, _xx_key_hash, _xx_tags_code, xxhash.xxh32_intdigest,
                _xx_key_hashes, _xx_key_hashes_packed)
FLAVORS = {f.name: f for f in (ROCKETMQ, XXHASH)}


def flavor_named(name: str, record_crc: bool = False) -> Flavor:
    try:
        return FLAVORS[name].with_record_crc(record_crc)
    except KeyError:
        raise ValueError(f"unknown flavor {name!r} (choose {', '.join(FLAVORS)})") from None
