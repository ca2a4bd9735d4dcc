"""The two functions that differ between store flavors: body checksum and string hash.

`rocketmq` reproduces Apache RocketMQ bit for bit (CRC-32 masked to 31 bits, Java
`String.hashCode()` over UTF-16 code units); `xxhash` swaps in xxh32/xxh64, which are
faster in Python and spread keys better. Everything else in the format is identical.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import numpy as np
import xxhash

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
    return np.fromiter(map(_rocketmq_key_hash, keys), dtype=np.int64, count=n)


def _xx_key_hashes(keys: Iterable[str], n: int) -> np.ndarray:
    hashes = map(xxhash.xxh32_intdigest, map(str.encode, keys))
    return np.fromiter(hashes, dtype=np.int64, count=n) & CRC_MASK


def _xx_tags_code(tags: str) -> int:
    if not tags:
        return 0
    v = xxhash.xxh64_intdigest(tags.encode("utf-8"))
    return v - (1 << 64) if v & (1 << 63) else v


@dataclass(frozen=True)
class Flavor:
    """A named pair of checksum and hash functions."""

    name: str
    body_crc: Callable[[bytes | memoryview], int]
    key_hash: Callable[[str], int]
    tags_code: Callable[[str], int]
    # the same two for many inputs at once, as arrays: recovery checks and indexes hundreds
    # of thousands of records, and a Python call per item was half of its time
    crc_unmasked: Callable[[bytes | memoryview], int]  # body_crc before `& CRC_MASK`
    key_hashes: Callable[[Iterable[str], int], np.ndarray]  # (keys, how many)
    # every record carries a whole-record checksum (RocketMQ 5's `__CRC32#` trailer, computed
    # with body_crc): new mqfs stores; a store a broker wrote without enabledAppendPropCRC not
    record_crc: bool = False

    def with_record_crc(self, on: bool) -> Flavor:
        return self if on == self.record_crc else replace(self, record_crc=on)

    def checksums(self, buf: memoryview, starts: list[int], ends: list[int]) -> np.ndarray:
        """body_crc of buf[a:b] for each (a, b), iterated in C: no Python call per item."""
        sums = map(self.crc_unmasked, map(buf.__getitem__, map(slice, starts, ends)))
        return np.fromiter(sums, dtype=np.int64, count=len(starts)) & CRC_MASK


ROCKETMQ = Flavor("rocketmq", _rocketmq_crc, _rocketmq_key_hash, _rocketmq_tags_code,
                  zlib.crc32, _rocketmq_key_hashes)
XXHASH = Flavor("xxhash", _xx_crc, _xx_key_hash, _xx_tags_code, xxhash.xxh32_intdigest,
                _xx_key_hashes)
FLAVORS = {f.name: f for f in (ROCKETMQ, XXHASH)}


def flavor_named(name: str, record_crc: bool = False) -> Flavor:
    try:
        return FLAVORS[name].with_record_crc(record_crc)
    except KeyError:
        raise ValueError(f"unknown flavor {name!r} (choose {', '.join(FLAVORS)})") from None
