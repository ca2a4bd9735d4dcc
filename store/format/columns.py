"""Columnar reading of many records at once (recovery, verify, scrub, the scan): which
units match their records, which records are fillers, and the properties a dispatch
needs (tags, keys, unique keys) found as byte spans with numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import CodecError
from . import codec
from .layout import (
    MAGIC_POS,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    QUEUE_ID_POS,
    QUEUE_OFFSET_POS,
    SYSFLAG_POS,
    TOTALSIZE_POS,
    body_len_pos,
    body_pos,
    born_host_len,
    gather,
    indexed,
    store_host_len,
)
from .message import (
    FILLER_TOPIC,
    I16,
    MAX_TOPIC_LEN,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SCHEDULE_TOPIC,
    StoredMessage,
)
from .multi_dispatch import (
    PROPERTY_INNER_MULTI_DISPATCH,
    PROPERTY_INNER_MULTI_QUEUE_OFFSET,
    Unit,
    describes,
    dispatched,
)


def unit_matches(u8: np.ndarray, pos: np.ndarray, size: np.ndarray, topic: str, queue_id: int,
                 queue_offset: np.ndarray) -> np.ndarray:
    """Which ConsumeQueue units describe the record at their position of one file (`u8`):
    magic, TOTALSIZE, QUEUEID, QUEUEOFFSET and topic agree, and the record fits in the file;
    or the record is multi-dispatched to this queue at that offset (`multi_dispatch.describes`,
    asked only of the units that fail the first test: an LMQ queue's); or the unit stands for
    a message lost to damage and points at a filler record."""
    pos = pos.astype(np.int64)
    size = size.astype(np.int64)
    fits = (pos >= 0) & (size >= MIN_RECORD_SIZE) & (pos + size <= len(u8))
    total = gather(u8, pos + TOTALSIZE_POS, ">i4").astype(np.int64)
    magic = gather(u8, pos + MAGIC_POS, ">i4")
    sys_flag = gather(u8, pos + SYSFLAG_POS, ">i4").astype(np.int64)
    bh, sh = born_host_len(sys_flag), store_host_len(sys_flag)
    body_len = gather(u8, pos + body_len_pos(bh, sh), ">i4").astype(np.int64)
    topic_at = pos + body_pos(bh, sh) + np.maximum(body_len, 0)
    raw = topic.encode("ascii")
    wide = len(raw) > MAX_TOPIC_LEN
    prefix = (I16.pack(len(raw)) if wide else bytes([len(raw)])) + raw
    same = ((magic == (MAGIC_V2 if wide else MAGIC_V1))
            & (gather(u8, pos + QUEUE_ID_POS, ">i4") == queue_id)
            & (gather(u8, pos + QUEUE_OFFSET_POS, ">i8") == queue_offset)
            & (gather(u8, topic_at, f"V{len(prefix)}") == np.void(prefix)))
    filler = fillers(u8, topic_at, sys_flag) & (magic == MAGIC_V1)
    ok = fits & (total == size) & (same | filler)
    others = np.flatnonzero(fits & (total == size) & ~ok)
    for i, at in zip(others.tolist(), pos[others].tolist()):
        ok[i] = _dispatched_here(u8, at, int(size[i]), topic, queue_id, int(queue_offset[i]))
    return ok


def _dispatched_here(u8: np.ndarray, pos: int, size: int, topic: str, queue_id: int, queue_offset: int) -> bool:
    """Whether the well-formed record at `pos` names queue `topic`/`queue_id` at `queue_offset`
    in its multi-dispatch properties."""
    try:
        msg = codec.decode(u8[pos:pos + size].tobytes(), 0)
        return describes(msg.topic, msg.queue_id, msg.queue_offset, lambda: msg.properties,
                         topic, queue_id, queue_offset)
    except (CodecError, UnicodeDecodeError):
        return False


def fillers(u8: np.ndarray, topic_len_at: np.ndarray, sys_flag: np.ndarray) -> np.ndarray:
    """Which records (v1, TOPICLEN at `topic_len_at`) are filler records (`is_filler`)."""
    filler = ~indexed(sys_flag)  # rolled back
    if filler.any():
        seen = np.zeros(len(topic_len_at), dtype=bool)
        for n in range(1, len(FILLER_TOPIC) + 1):
            want = bytes([n]) + FILLER_TOPIC[:n].encode("ascii")
            seen |= gather(u8, topic_len_at, f"V{len(want)}") == np.void(want)
        filler &= seen
    return filler


_DISPATCH_NAMES = (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY)


def _starts_with(joined: np.ndarray, pos: np.ndarray, prefix: bytes) -> np.ndarray:
    """Which positions of `joined` start with `prefix` (each has room for it): one gather of
    the prefix as a single value per position, through a one-byte-stride view."""
    if not len(pos):
        return np.zeros(0, dtype=bool)
    dt = np.dtype(f"V{len(prefix)}")
    view = np.ndarray((len(joined) - dt.itemsize + 1,), dtype=dt, buffer=joined, strides=(1,))
    return view[pos] == np.void(prefix)


def dispatch_properties(joined: np.ndarray, starts: np.ndarray) -> tuple[list[str], KeySpans]:
    """TAGS and index keys (UNIQ_KEY, then KEYS tokens) of many records at once. `joined`
    holds their valid UTF-8 properties, each record's followed by 0x02, and `starts` where
    each begins. Items are found with numpy instead of a dict per record; the result is what
    `properties` gives (empty names and values dropped, the last item of a name wins). Keys
    stay spans of `joined`: recovery hashes their bytes without a str or list per key."""
    ends = np.flatnonzero(joined == 0x02)  # every item ends at one, the last record's too
    items = np.append(0, ends[:-1] + 1)
    tags_at, keys_at, uniq_at = (_property_spans(joined, items, ends, starts, name)
                                 for name in _DISPATCH_NAMES)
    return _texts(joined, tags_at, len(starts)), _key_spans(joined, keys_at, uniq_at)


def dispatched_units(joined: np.ndarray, starts: np.ndarray, topics: list[str], queue_ids: np.ndarray
                     ) -> list[list[Unit]] | None:
    """Each record's multi-dispatch units (`multi_dispatch.dispatched`), from properties laid
    out as for `dispatch_properties`; None when no record names any (one search tells)."""
    if joined.tobytes().find(PROPERTY_INNER_MULTI_DISPATCH.encode() + b"\x01") < 0:
        return None
    names = property_values(joined, starts, PROPERTY_INNER_MULTI_DISPATCH)
    offsets = property_values(joined, starts, PROPERTY_INNER_MULTI_QUEUE_OFFSET)
    return [dispatched(t, q, {PROPERTY_INNER_MULTI_DISPATCH: n, PROPERTY_INNER_MULTI_QUEUE_OFFSET: o}) if n else []
            for t, q, n, o in zip(topics, queue_ids.tolist(), names, offsets)]


def property_values(joined: np.ndarray, starts: np.ndarray, name: str) -> list[str]:
    """Each record's value of property `name` ("" without one), from properties laid out as
    for `dispatch_properties`."""
    ends = np.flatnonzero(joined == 0x02)
    items = np.append(0, ends[:-1] + 1)
    return _texts(joined, _property_spans(joined, items, ends, starts, name), len(starts))


_Spans = tuple[np.ndarray, np.ndarray, np.ndarray]  # (record, start, end) of values in `joined`


def _property_spans(joined: np.ndarray, items: np.ndarray, ends: np.ndarray, starts: np.ndarray,
                    name: str) -> _Spans:
    """Where each record's value of property `name` lies in `joined` (records without one
    left out), found with numpy: no Python call per record."""
    prefix = name.encode() + b"\x01"
    rows = np.flatnonzero(ends - items > len(prefix))  # long enough for a value
    rows = rows[_starts_with(joined, items[rows], prefix)]
    owner = np.searchsorted(starts, items[rows], "right") - 1
    last = np.ones(len(rows), dtype=bool)  # a record's last item of the name wins
    last[:-1] = owner[1:] != owner[:-1]
    rows = rows[last]
    return owner[last], items[rows] + len(prefix), ends[rows]


def _texts(joined: np.ndarray, spans: _Spans, n: int) -> list[str]:
    """The values at `spans` as text, "" for the records of n without one; cut with C-level
    iteration."""
    owner, lo, hi = spans
    if not len(owner):
        return [""] * n
    raw = joined.tobytes()
    cuts = map(slice, lo.tolist(), hi.tolist())
    values = (list(map(raw.decode("ascii").__getitem__, cuts)) if raw.isascii() else
              [raw[cut].decode("utf-8") for cut in cuts])
    if len(values) == n:  # every record has one (owners are distinct and sorted)
        return values
    column = np.full(n, "", dtype=object)
    column[owner] = values
    return column.tolist()


def _key_spans(joined: np.ndarray, keys_at: _Spans, uniq_at: _Spans) -> KeySpans:
    """Index keys as spans of `joined` in RocketMQ's order: a record's UNIQ_KEY, then its
    KEYS value split on spaces with empty tokens dropped (as `keys`). UTF-8 never holds a
    0x20 byte inside a character, so the split works on bytes."""
    owner, lo, hi = keys_at
    if _any_within(np.flatnonzero(joined == 0x20), lo, hi):  # else each value is one token
        edge = np.zeros(len(joined) + 1, dtype=np.int8)
        edge[lo], edge[hi] = 1, -1  # values never touch: 0x02 ends each one
        word = np.zeros(len(joined) + 2, dtype=np.int8)
        word[1:-1] = (np.cumsum(edge[:-1]) > 0) & (joined != 0x20)
        bounds = np.diff(word)
        lo, hi = np.flatnonzero(bounds == 1), np.flatnonzero(bounds == -1)
        owner = owner[np.searchsorted(keys_at[1], lo, "right") - 1]
    if len(uniq_at[0]):
        owner, lo, hi = (np.concatenate((u, k)) for u, k in zip(uniq_at, (owner, lo, hi)))
        order = np.argsort(owner, kind="stable")  # a record's UNIQ_KEY before its KEYS tokens
        owner, lo, hi = owner[order], lo[order], hi[order]
    return KeySpans(joined, lo, hi, owner)


def _any_within(pos: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> bool:
    """Whether any position lies in one of the sorted, disjoint spans [lo, hi)."""
    span = np.searchsorted(lo, pos, "right") - 1
    return bool(len(lo) and ((span >= 0) & (pos < hi[span])).any())


@dataclass
class KeySpans:
    """The index keys of a run of records, key i being the UTF-8 bytes data[start[i]:end[i]]
    of record row[i]; rows never decrease, and a record's keys are in index order (UNIQ_KEY,
    then KEYS tokens). Recovery indexes every record: columns instead of a list of str per
    record let it hash the keys' bytes in bulk."""

    data: np.ndarray  # uint8
    start: np.ndarray  # int64
    end: np.ndarray  # int64
    row: np.ndarray  # int64

    @classmethod
    def of(cls, keys: list[str]) -> KeySpans:
        """The keys of one record."""
        lens = np.array([len(k.encode()) for k in keys], dtype=np.int64)
        data = np.frombuffer("".join(keys).encode(), dtype=np.uint8)
        return cls(data, np.cumsum(lens) - lens, np.cumsum(lens), np.zeros(len(keys), dtype=np.int64))

    def from_row(self, i: int) -> KeySpans:
        """The keys of records i on, numbered from i."""
        k = int(np.searchsorted(self.row, i))
        return KeySpans(self.data, self.start[k:], self.end[k:], self.row[k:] - i)

    def lists(self, n: int) -> list[list[str]]:
        """Each of n records' keys as text."""
        raw = self.data.tobytes()
        keys = [raw[a:b].decode("utf-8") for a, b in zip(self.start.tolist(), self.end.tolist())]
        bounds = np.searchsorted(self.row, np.arange(n + 1)).tolist()
        return [keys[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


@dataclass
class RecordRun:
    """Consecutive validated records, in CommitLog order, as columns: what dispatch needs to
    build their ConsumeQueue units and IndexFile entries without a StoredMessage each."""

    commitlog_offset: np.ndarray  # int64 CommitLog offsets
    size: np.ndarray  # int64 TOTALSIZE
    queue_id: np.ndarray  # int64
    queue_offset: np.ndarray  # int64
    sys_flag: np.ndarray  # int64
    store_ts: np.ndarray  # int64
    topics: list[str]
    tags: list[str]
    keys: KeySpans  # index keys: UNIQ_KEY, then KEYS tokens
    delays: list[str] | None = None  # DELAY of each record, when one is on SCHEDULE_TOPIC
    dispatched: list[list[Unit]] | None = None  # each record's LMQ units, when one has any

    @classmethod
    def of(cls, msg: StoredMessage) -> RecordRun:
        """A run of one decoded record."""
        def col(v: int) -> np.ndarray:
            return np.array([v], dtype=np.int64)
        delays = [msg.properties.get(PROPERTY_DELAY, "")] if msg.topic == SCHEDULE_TOPIC else None
        units = dispatched(msg.topic, msg.queue_id, msg.properties)
        return cls(col(msg.commitlog_offset), col(msg.total_size), col(msg.queue_id),
                   col(msg.queue_offset), col(msg.sys_flag), col(msg.store_timestamp),
                   [msg.topic], [msg.tags], KeySpans.of(msg.index_keys()), delays,
                   [units] if units else None)

    def from_row(self, i: int) -> RecordRun:
        """The records of the run from row i on."""
        if i == 0:
            return self
        return RecordRun(self.commitlog_offset[i:], self.size[i:], self.queue_id[i:], self.queue_offset[i:],
                         self.sys_flag[i:], self.store_ts[i:], self.topics[i:], self.tags[i:],
                         self.keys.from_row(i), None if self.delays is None else self.delays[i:],
                         None if self.dispatched is None else self.dispatched[i:])

    def __len__(self) -> int:
        return len(self.commitlog_offset)
