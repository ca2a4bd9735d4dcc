"""The CommitLog record layout read a column at a time with numpy (`fields`, `walk`): the
full scans' reader. Split from `layout` so a reader of a few records (`mqfs dump -k`)
starts without numpy; `layout` hands out these names, importing this module on first
use. Positions and codes come from `record_layout`, their one owner.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from .flavor import Flavor
from .record_layout import (
    CRC_HEAD,
    HEADER_V4_FIELDS,
    HOST_V6_FLAGS,
    MAGIC_BLANK,
    MAGIC_POS,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    RECORD_CRC_LEN,
    TOTALSIZE_POS,
    body_len_pos,
    body_pos,
    born_host_len,
    store_host_len,
    store_timestamp_pos,
    topic_len_width,
)

HEADER_V4 = np.dtype(HEADER_V4_FIELDS)
_HEADER_INTS = [name for name in HEADER_V4.names or () if HEADER_V4[name].kind != "V"]


# --- columnar reading --------------------------------------------------------------------------
def gather(u8: np.ndarray, pos: np.ndarray, dtype: np.dtype | str) -> np.ndarray:
    """The value of `dtype` at each byte position of a byte array, through a view with a
    stride of one byte (a gather copies one item per position). Positions are clamped into
    the buffer: one computed from a bad record's fields may point anywhere, and that record
    fails its checks anyway. Items are copied as raw bytes and then viewed as `dtype`: numpy
    copies a structured item field by field, 15x slower for the 88-byte header."""
    dt = np.dtype(dtype)
    if len(u8) < dt.itemsize:  # no whole value anywhere: every position is a bad record's
        return np.zeros(len(pos), dtype=dt)
    raw = np.dtype(f"V{dt.itemsize}")
    view = np.ndarray((len(u8) - dt.itemsize + 1,), dtype=raw, buffer=u8, strides=(1,))
    return view[np.clip(pos, 0, len(view) - 1)].view(dt)


def _int(u8: np.ndarray, pos: np.ndarray, dtype: str) -> np.ndarray:
    return gather(u8, pos, dtype).astype(np.int64)


@dataclass
class Records:
    """Fields of records at `starts` of one buffer, as int64 columns, and `well_formed`:
    which of them `codec.decode` (without a flavor) would accept. The other rows' fields
    are meaningless."""

    starts: np.ndarray
    total: np.ndarray
    magic: np.ndarray
    body_crc: np.ndarray
    queue_id: np.ndarray
    flag: np.ndarray
    queue_offset: np.ndarray
    commitlog_offset: np.ndarray
    sys_flag: np.ndarray
    born_ts: np.ndarray
    store_ts: np.ndarray
    born_len: np.ndarray
    store_len: np.ndarray
    body_pos: np.ndarray
    body_len: np.ndarray
    topic_pos: np.ndarray
    topic_len: np.ndarray
    props_pos: np.ndarray
    props_len: np.ndarray
    well_formed: np.ndarray

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def ends(self) -> np.ndarray:
        return self.starts + self.total

    @property
    def topic_len_pos(self) -> np.ndarray:
        return self.topic_pos - topic_len_width(self.magic)

    def take(self, rows: np.ndarray | slice) -> Records:
        """The records at these rows (a mask, indices or a slice)."""
        return Records(**{k: v[rows] for k, v in vars(self).items()})


def fields(u8: np.ndarray, starts: np.ndarray, limit: int | None = None) -> Records:
    """Every field of the records at `starts` (records must end by `limit`, default the
    buffer's end), read with one gather of the IPv4 header and a few more for the rows with
    IPv6 hosts or v2 topics; `well_formed` repeats decode's structural checks."""
    limit = len(u8) if limit is None else limit
    given = np.asarray(starts, dtype=np.int64)
    inside = (given >= 0) & (given + MIN_RECORD_SIZE <= limit)
    s = np.where(inside, given, 0)  # fields of a start outside are read at 0, and refused
    head = gather(u8, s, HEADER_V4)
    col = {name: head[name].astype(np.int64) for name in _HEADER_INTS}
    sys_flag = col["sys_flag"]
    born_len, store_len = born_host_len(sys_flag), store_host_len(sys_flag)
    v6 = np.flatnonzero(sys_flag & HOST_V6_FLAGS)
    if v6.size:  # wider hosts move every field after BORNHOST
        at, bh, sh = s[v6], born_len[v6], store_len[v6]
        col["store_ts"][v6] = _int(u8, at + store_timestamp_pos(bh), ">i8")
        col["body_len"][v6] = _int(u8, at + body_len_pos(bh, sh), ">i4")
    total, magic, body_len = col["total"], col["magic"], col["body_len"]
    end = s + total
    body_at = s + body_pos(born_len, store_len)
    topic_len_at = body_at + np.maximum(body_len, 0)
    wide = magic == MAGIC_V2
    topic_len = _int(u8, topic_len_at, "u1")
    if wide.any():
        topic_len[wide] = _int(u8, topic_len_at[wide], ">i2")
    topic_at = topic_len_at + 1 + wide
    props_at = topic_at + np.maximum(topic_len, 0) + 2
    props_len = _int(u8, props_at - 2, ">i2")
    ok = (inside & ((magic == MAGIC_V1) | wide) & (total >= MIN_RECORD_SIZE) & (end <= limit)
          & (body_len >= 0) & (topic_len_at <= end)
          & (topic_len > 0) & (topic_at + topic_len <= end)
          & (props_len >= 0) & (props_at + props_len == end))
    ok[ok] = ascii_strings(u8, topic_at[ok], topic_len[ok])  # decode reads topics as ASCII
    return Records(given, total, magic, col["body_crc"], col["queue_id"], col["flag"],
                   col["queue_offset"], col["commitlog_offset"], sys_flag, col["born_ts"], col["store_ts"],
                   born_len, store_len, body_at, body_len, topic_at, topic_len, props_at,
                   props_len, ok)


def distinct(values: np.ndarray) -> list[int]:
    """The distinct values of an int column, ascending. A run's records mostly share one
    size, topic length and properties length: testing for that is 30x cheaper than the sort
    in np.unique."""
    if len(values) and values.min() == values.max():
        return [int(values[0])]
    return np.unique(values).tolist()


def ascii_strings(u8: np.ndarray, pos: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Which strings [pos, pos+length) of the buffer are ASCII."""
    good = np.ones(len(pos), dtype=bool)
    widths = distinct(length)
    for width in widths:
        rows = np.flatnonzero(length == width) if len(widths) > 1 else np.arange(len(pos))
        raw = gather(u8, pos[rows], f"V{width}").view(np.uint8)
        if raw.max(initial=0) >= 0x80:  # rows are checked one by one only when one fails
            good[rows] = (raw.reshape(len(rows), width) < 0x80).all(axis=1)
    return good


def topic_names(u8: np.ndarray, pos: np.ndarray, length: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Distinct topic names of records (ASCII, checked before) and each record's index into
    them."""
    which = np.zeros(len(pos), dtype=np.int64)
    names: list[str] = []
    if len(length) and (length == length[0]).all():
        raw = gather(u8, pos, f"V{int(length[0])}")
        if (raw == raw[0]).all():  # one topic, the common run: no sort
            return [raw[0].tobytes().decode("ascii")], which
    for width in np.unique(length).tolist():
        rows = np.flatnonzero(length == width)
        uniq, inverse = np.unique(gather(u8, pos[rows], f"V{width}"), return_inverse=True)
        which[rows] = inverse.ravel() + len(names)
        names += [u.tobytes().decode("ascii") for u in uniq]
    return names, which


_FEW_WIDTHS = 16  # up to this many distinct lengths, `joined` gathers per length


def joined(u8: np.ndarray, pos: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The strings [pos, pos+length) one after another, each followed by 0x02, and where each
    begins. With the separator, items of PROPERTIES never span records, and the whole is
    valid UTF-8 exactly when every string is."""
    lens = length + 1
    at = np.cumsum(lens) - lens
    out = np.empty(int(lens.sum()), dtype=np.uint8)
    widths = distinct(length)
    if len(widths) == 1 and widths[0]:  # the common run: rows of one size, no index arrays
        grid = out.reshape(len(pos), widths[0] + 1)
        grid[:, :-1] = gather(u8, pos, f"V{widths[0]}").view(np.uint8).reshape(len(pos), -1)
        grid[:, -1] = 2
        return out, at
    if len(widths) <= _FEW_WIDTHS:  # a gather of fixed-size rows per length, then placed
        for width in widths:
            if width:
                rows = np.flatnonzero(length == width)
                block = gather(u8, pos[rows], f"V{width}").view(np.uint8)
                out[(at[rows][:, None] + np.arange(width)).ravel()] = block
    else:  # lengths all over the place: one index per byte
        idx = np.repeat(pos - at, lens) + np.arange(len(out))
        out[:] = u8[np.minimum(idx, len(u8) - 1)]  # a separator slot may lie past the end
    out[at + lens - 1] = 2
    return out, at


def utf8_prefix(data: np.ndarray, at: np.ndarray) -> int:
    """How many leading strings of a `joined` array are valid UTF-8."""
    if not (data >= 0x80).any() or _utf8(data.tobytes()):
        return len(at)
    bounds = np.append(at, len(data)).tolist()
    return next(i for i in range(len(at)) if not _utf8(data[bounds[i]:bounds[i + 1]].tobytes()))


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


_TRAILER_HEAD = np.void(CRC_HEAD)
# least significant digit first; as floats the sum is a matrix-vector product numpy hands to
# BLAS (integer matmul has no fast path), exact below 2**53
_DIGIT_WEIGHTS = 10.0 ** np.arange(10)


def trailers(u8: np.ndarray, starts: np.ndarray, ends: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """For records [starts, ends) of a byte array: which carry a `__CRC32#` trailer, and the
    checksum each holds (the vectorized `codec.record_crc_of`)."""
    digits = gather(u8, ends - 11, "V10").view(np.uint8).reshape(-1, 10) - np.uint8(48)
    has = ((ends - starts >= MIN_RECORD_SIZE + RECORD_CRC_LEN)
           & (gather(u8, ends - RECORD_CRC_LEN, "V9") == _TRAILER_HEAD)
           & (gather(u8, ends - 1, "u1") == 2))
    if digits.max(initial=0) > 9:  # (bytes below "0" wrap around to large values)
        has &= (digits <= 9).all(axis=1)
    return has, (digits @ _DIGIT_WEIGHTS).astype(np.int64)


def checksums_hold(buf, u8: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                   body_starts: np.ndarray, body_ends: np.ndarray, body_crcs: np.ndarray,
                   flavor: Flavor) -> np.ndarray:
    """`codec.check_record` for many records of one buffer: the whole-record checksum of
    those with a trailer, the body checksum of the others (refused when the flavor wants
    trailers). One checksum call per record."""
    has, stored = trailers(u8, starts, ends)
    if has.all():  # a store with trailers: no row selection
        return flavor.checksums(buf, starts.tolist(), (ends - RECORD_CRC_LEN).tolist()) == stored
    good = np.zeros(len(starts), dtype=bool)
    rows = np.flatnonzero(has)
    if rows.size:
        sums = flavor.checksums(buf, starts[rows].tolist(), (ends[rows] - RECORD_CRC_LEN).tolist())
        good[rows] = sums == stored[rows]
    rows = np.flatnonzero(~has)
    if rows.size and not flavor.record_crc:
        sums = flavor.checksums(buf, body_starts[rows].tolist(), body_ends[rows].tolist())
        good[rows] = sums == body_crcs[rows]
    return good


# --- the walker --------------------------------------------------------------------------------
_HDR = struct.Struct(">ii")


@dataclass
class Walk:
    """Consecutive records a walk accepted, and where and why it stopped: "limit" (it took
    `max_records`), "room" (fewer than 8 bytes left), "blank" (a BLANK record), "magic" (no
    record magic: zeros or garbage), "size" (TOTALSIZE below the smallest record or past the
    limit), "malformed" (fields that do not add up, or a topic that is not ASCII), "checksum"
    (with a flavor: a checksum fails or the properties are not UTF-8)."""

    records: Records
    stop: int
    why: str
    buf: memoryview
    u8: np.ndarray
    _props: tuple[np.ndarray, np.ndarray] | None = None

    def properties(self) -> tuple[np.ndarray, np.ndarray]:
        """PROPERTIES of every record `joined`, computed once."""
        if self._props is None:
            r = self.records
            self._props = joined(self.u8, r.props_pos, r.props_len)
        return self._props


_LEAP_MIN = 16  # a leap is tried for at least this many records...
_LEAP_BACKOFF = 64  # ...and, after one that found fewer, not again for this many
_LEAP_FIRST = 1024  # records a leap looks at when the one before found fewer than half


def chain(buf, u8: np.ndarray, pos: int, limit: int, max_records: int
          ) -> tuple[list[int], int, str]:
    """Record starts from pos, following TOTALSIZE while the header has a record's magic and
    a size that fits by `limit`; where and why it stopped (see `Walk`). The one sequential
    step of a walk: everything after it is columnar.

    Records of one size often follow each other. After two of the same size the walk leaps:
    it reads TOTALSIZE and MAGIC at every multiple of that size with numpy, and takes the
    leading positions that hold a record of exactly that size (each one's size then puts
    the next where it was read, so this is the same chain, found in one step). A leap looks
    as far as twice the run the last one found (at least _LEAP_FIRST records): runs of a
    thousand records between two of another size must not cost a gather of max_records each."""
    starts: list[int] = []
    append = starts.append
    unpack = _HDR.unpack_from
    v1, v2, smallest = MAGIC_V1, MAGIC_V2, MIN_RECORD_SIZE
    last = 0
    quiet = 0  # records to walk one by one before the next leap
    reach = _LEAP_FIRST  # how many records the next leap looks at, at most
    while len(starts) < max_records:
        if limit - pos < 8:
            return starts, pos, "room"
        size, magic = unpack(buf, pos)
        if magic != v1 and magic != v2:
            return starts, pos, "blank" if magic == MAGIC_BLANK else "magic"
        if not smallest <= size <= limit - pos:
            return starts, pos, "size"
        append(pos)
        pos += size
        quiet -= 1
        if size != last or quiet > 0:
            last = size
            continue
        k = min(max_records - len(starts), (limit - pos) // size, reach)
        if k < _LEAP_MIN:
            quiet = _LEAP_BACKOFF
            continue
        at = pos + size * np.arange(k, dtype=np.int64)
        magics = gather(u8, at + MAGIC_POS, ">i4")
        same = (gather(u8, at + TOTALSIZE_POS, ">i4") == size) & ((magics == v1) | (magics == v2))
        m = k if same.all() else int(np.argmin(same))
        starts += at[:m].tolist()
        pos += m * size
        reach = max(_LEAP_FIRST, 2 * m)
        if m < _LEAP_MIN:
            quiet = _LEAP_BACKOFF
    return starts, pos, "limit"


def walk(buf, pos: int, limit: int, max_records: int, flavor: Flavor | None = None,
         u8: np.ndarray | None = None, checked: tuple[int, int] = (0, 0)) -> Walk:
    """The records from `pos` that `codec.decode(buf[:limit], p, flavor)` accepts, one after
    another, as columns (at most max_records); the walk stops at the first it would refuse.
    With a flavor the checksums are checked inline, one call per record, except for records
    inside `checked` (buffer positions [lo, hi)): a caller's earlier walk checked those very
    bytes."""
    view = memoryview(buf)
    u8 = np.frombuffer(buf, dtype=np.uint8) if u8 is None else u8
    starts, stop, why = chain(view, u8, pos, limit, max_records)
    recs = fields(u8, np.array(starts, dtype=np.int64), limit)
    ok = recs.well_formed
    n = len(starts) if ok.all() else int(np.argmin(ok))
    if n < len(starts):
        recs, stop, why = recs.take(slice(0, n)), starts[n], "malformed"
    result = Walk(recs, stop, why, view, u8)
    if flavor is None or not n:
        return result
    good = np.ones(n, dtype=bool)
    rows = np.flatnonzero((recs.starts < checked[0]) | (recs.ends > checked[1]))
    if rows.size:
        good[rows] = checksums_hold(view, u8, recs.starts[rows], recs.ends[rows],
                                    recs.body_pos[rows], recs.body_pos[rows] + recs.body_len[rows],
                                    recs.body_crc[rows], flavor)
    m = n if good.all() else int(np.argmin(good))
    m = min(m, utf8_prefix(*result.properties()))  # decode checks properties with a flavor
    if m < n:
        data, at = result.properties()
        end = int(at[m])
        result = Walk(recs.take(slice(0, m)), int(recs.starts[m]), "checksum", view, u8,
                      (data[:end], at[:m]))
    return result
