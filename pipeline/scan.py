"""Turn CommitLog records into Arrow batches of the message schema, column by column.

Finding record boundaries is a walk (each record's size gives the next start); everything
after that is numpy over whole batches of records: fixed fields are gathered through a
sliding-window view, bodies are copied by Arrow from binary views over the mapped file, hosts
and message ids are formatted once per distinct host, and properties are split with numpy
(Arrow compute kernels handle the rare irregular strings). Filters on topic, queue, offsets and
store time are applied right after the fixed fields, before bodies and properties are touched.

Reads are checked: every record kept is validated (`failed_checks`) before it becomes a row; a
damaged one fails the read naming its file and offset, or, when the caller asks, is skipped and
counted. Filler records that `repair` writes over damaged ranges (topic %DAMAGED) are never rows.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mqfs.store.errors import CodecError, CorruptionError
from mqfs.store.format.columns import fillers
from mqfs.store.format.compression import COMPRESSED_FLAG, consumer_sys_flag, inflate
from mqfs.store.format.flavor import Flavor
from mqfs.store.format.layout import (
    BORN_HOST_POS,
    MAGIC_V1,
    RECORD_CRC_LEN,
    Records,
    checksums_hold,
    fields,
    format_host,
    in_queue,
    store_host_pos,
    trailers,
    walk,
)
from mqfs.store.format.message import (
    FILLER_TOPIC,
    PROPERTY_CRC32,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    decode_properties,
    msg_id,
)
from mqfs.store.format.multi_dispatch import PROPERTY_INNER_MULTI_DISPATCH, dispatched
from mqfs.store.integrity.index_points import IndexPoints
from mqfs.store.integrity.salvage import resync_in

from . import inner_batches
from .schema import ARROW_SCHEMA, arrow_schema

_HEX_DIGITS = np.frombuffer(b"0123456789ABCDEF", np.uint8)
_NIBBLE_SHIFTS = np.arange(60, -4, -4, dtype=np.int64)
_TYPES = {f.name: f.type for f in ARROW_SCHEMA}
_KEYS = np.frombuffer(PROPERTY_KEYS.encode(), np.uint8)
_TAGS = np.frombuffer(PROPERTY_TAGS.encode(), np.uint8)
_CRC = np.frombuffer(PROPERTY_CRC32.encode(), np.uint8)
_FILLER = np.frombuffer(FILLER_TOPIC.encode("ascii"), np.uint8)
_DISPATCH_NAME = PROPERTY_INNER_MULTI_DISPATCH.encode() + b"\x01"
Range = tuple[int | None, int | None]  # [lo, hi), None = unbounded
BODY_COLUMNS = frozenset({"body", "keys", "tags", "properties"})  # read from the body onwards


def header_only(columns: frozenset[str] | None) -> bool:
    """Whether a read of these columns needs nothing of a record past its header and topic:
    such a read never touches bodies, so it cannot check their checksums (`Checks`)."""
    return columns is not None and not columns & BODY_COLUMNS


@dataclass(frozen=True)
class RowFilter:
    """Rows to keep: topics and queue ids (None = all), store time in [start_ms, end_ms),
    queue and CommitLog offsets in their ranges, and, when `queue_ranges` is given, only the
    listed queues, each within its own [lo, hi) of queue offsets (Kafka's per-partition
    starting/ending offsets)."""

    topics: frozenset[str] | None = None
    queues: frozenset[int] | None = None
    start_ms: int | None = None
    end_ms: int | None = None
    queue_offsets: Range = (None, None)
    commitlog_offsets: Range = (None, None)
    queue_ranges: tuple[tuple[str, int, int, int], ...] | None = None
    all_records: bool = False  # else only queued ones: what a broker serves a consumer
    excluded_topics: frozenset[str] = frozenset()  # served from elsewhere (pipeline/compacted.py)


ALL_ROWS = RowFilter()


def warn(text: str) -> None:
    """A warning the user sees on the stderr of the driver (planning) or executor (reading)."""
    print(f"mqfs: warning: {text}", file=sys.stderr)


class DamagedRecord(CodecError):
    """A record failed its checks; the message names the file and both offsets."""


@dataclass
class Checks:
    """How a read treats damaged records: fail (default) or skip and count them. With
    `checksums` off (header-only reads) a record is checked as far as its header goes: its
    magic, its size, and field lengths that add up to it with an ASCII topic (the walk's
    structural checks, what `codec.decode` checks before any checksum); the checksums, which
    cover the body, are not computed. `points`: where the store's indexes say records start,
    the resync's witness after a lost header (`checked_runs`); read only when that happens."""

    flavor: Flavor
    path: str = ""
    skip: bool = False
    checksums: bool = True
    points: IndexPoints | None = None
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (CommitLog offset, reason)

    def reject(self, commitlog_offset: int, file_from: int, reason: str) -> None:
        where = f"{self.path or 'CommitLog file ' + str(file_from)} at byte {commitlog_offset - file_from}"
        if not self.skip:
            raise DamagedRecord(f"damaged record at CommitLog offset {commitlog_offset} ({where}): {reason}; "
                                "read with option damagedRecords=skip to skip it, `mqfs verify` "
                                "for details")
        self.skipped.append((commitlog_offset, reason))


def failed_checks(mv: memoryview, arr: np.ndarray, starts: np.ndarray,
                  f: dict[str, np.ndarray], flavor: Flavor) -> np.ndarray:
    """Which records fail their checksums (the store's `checksums_hold`): the
    whole-record `__CRC32#` trailer where a record has one, else BODYCRC. The one place a
    read checks a record."""
    return ~checksums_hold(mv, arr, starts, starts + f["total"], f["body_pos"],
                                  f["body_pos"] + f["body_len"], f["crc"], flavor)


_WHY = {"malformed": "malformed record", "checksum": "checksum mismatch"}  # else a broken header


def checked_runs(buf, file_from: int, start: int, end: int, checks: Checks,
                 max_records: int, max_bytes: int) -> Iterator[Records]:
    """The records starting in [start, end) of one mapped CommitLog file, as runs that check
    out: the store's walker (`layout.walk` with the store's flavor: exactly the records
    `codec.decode` accepts). Each damaged range between runs goes to `checks` once, and the
    walk goes on where the store's resync puts the next record (`salvage.resync_in`, as
    verify, repair and the scrub: never inside a damaged record's intact span and, after a
    lost header, only at a record `checks.points` says an index points at); a run holds at
    most max_records records and, unless one record is larger, max_bytes bytes."""
    u8 = np.frombuffer(buf, np.uint8)
    flavor = checks.flavor if checks.checksums else None
    points = checks.points
    pointed = None if points is None else (lambda offset: points.accepts(offset, file_from, len(buf)))
    pos = start
    while pos < end:
        w = walk(buf, pos, end, max_records, flavor, u8)
        r = w.records
        cut = 0
        while cut < len(r):
            upto = max(cut + 1, int(np.searchsorted(r.ends, r.starts[cut] + max_bytes, side="right")))
            yield r.take(slice(cut, upto))
            cut = upto
        pos = w.stop
        if w.why == "limit":
            continue
        if w.why == "blank" or pos >= end:
            return
        checks.reject(file_from + pos, file_from, _WHY.get(w.why, "broken record header"))
        found = resync_in(buf, file_from, pos, end, checks.flavor, pointed=pointed)
        if found is None:
            return
        pos = found


def record_starts_ok(arr: np.ndarray, pos: np.ndarray, file_from: int) -> np.ndarray:
    """Which positions hold a well-formed record that names itself (PHYSICALOFFSET equal to
    where it is): how a ConsumeQueue unit is trusted as a record start."""
    r = fields(arr, pos)
    return r.well_formed & (r.commitlog_offset == r.starts + file_from)


def _offsets(lens: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=out[1:])
    return out


def _gather(src: np.ndarray, pos: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated src[pos:pos+len] per row, and their offsets."""
    offsets = _offsets(lens)
    idx = np.repeat(pos - offsets[:-1], lens) + np.arange(offsets[-1], dtype=np.int64)
    return src[idx], offsets


def _strings(offsets: np.ndarray, data: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    n = len(offsets) - 1
    bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets.astype(np.int32)),
                                       pa.py_buffer(np.ascontiguousarray(data)), bitmap)


class FileBatcher:
    """Builds batches from record positions in one mapped CommitLog file; every record that
    would become a row passes `checks` first."""

    def __init__(self, buf, file_from: int, checks: Checks, unwrap: bool = True):
        # a row per message a consumer gets: an inner batch's messages, a multi-dispatched
        # record's rows in its other queues (else each record's own row alone, as audit checks)
        self.unwrap = unwrap
        self.mv = memoryview(buf)
        self.arr = np.frombuffer(buf, np.uint8)
        self.file_from = file_from
        self.checks = checks
        self._windows: dict[int, np.ndarray] = {}

    def _fixed(self, pos: np.ndarray, width: int) -> np.ndarray:
        """(n, width) bytes at each position, copied row by row."""
        win = self._windows.get(width)
        if win is None:
            win = self._windows[width] = np.lib.stride_tricks.sliding_window_view(self.arr, width)
        return win[pos]

    def _int(self, pos: np.ndarray, fmt: str) -> np.ndarray:
        dt = np.dtype(fmt)
        return self._fixed(pos, dt.itemsize).view(dt).ravel().astype(dt.newbyteorder("="))

    def _head(self, r: Records, properties: bool = True) -> dict[str, np.ndarray]:
        """Fixed fields of every record (`fields`), the positions of its variable
        parts, and `bad`: the records decode would refuse (their other fields are
        meaningless). PROPERTIES leave out the whole-record checksum trailer: it is the
        record's, not a property of the message (found only when `properties` are read)."""
        bad = ~r.well_formed
        has_trailer = trailers(self.arr, r.starts, r.ends)[0] if properties else False
        return {
            "total": r.total, "magic": r.magic, "crc": r.body_crc, "queue_id": r.queue_id,
            "flag": r.flag, "queue_offset": r.queue_offset, "sys_flag": r.sys_flag,
            "born_ts": r.born_ts, "store_ts": r.store_ts, "bh": r.born_len, "sh": r.store_len,
            "body_pos": r.body_pos, "body_len": r.body_len, "topic_pos": r.topic_pos,
            "topic_len": r.topic_len, "props_pos": r.props_pos, "bad": bad,
            "props_len": np.where(has_trailer & ~bad, r.props_len - RECORD_CRC_LEN,
                                  r.props_len),
            "filler": fillers(self.arr, r.topic_len_pos, r.sys_flag) & (r.magic == MAGIC_V1),
        }

    def _reject(self, starts: np.ndarray, which: np.ndarray, reason: str) -> None:
        """Fail on (or, when skipping, count) the records at starts[which]."""
        for pos in starts[which].tolist():
            self.checks.reject(self.file_from + pos, self.file_from, reason)

    def batch(self, starts: np.ndarray, flt: RowFilter | None = None,
              columns: frozenset[str] | None = None) -> pa.RecordBatch | None:
        """The rows for records at these positions that pass the filter and the checks, or None.
        With `columns`, only those are built (the rest of the schema is left out)."""
        return self._batch(fields(self.arr, starts), flt, columns, checked=False)

    def checked_batch(self, records: Records, flt: RowFilter | None = None,
                      columns: frozenset[str] | None = None) -> pa.RecordBatch | None:
        """`batch` for records a checked walk (`checked_runs`) found: not checked again."""
        return self._batch(records, flt, columns, checked=True)

    def _batch(self, records: Records, flt: RowFilter | None, columns: frozenset[str] | None,
               checked: bool) -> pa.RecordBatch | None:
        starts = records.starts
        f = self._head(records, not header_only(columns))
        flt = flt or RowFilter()
        keep = ~f["bad"]
        if not keep.all():
            self._reject(starts, ~keep, "malformed record")
        batches = keep & inner_batches.inner_batches(f["sys_flag"]) & self.unwrap  # a row per message packed
        if batches.any():  # offsets are the messages': filtered per message
            unwrapped = batches & self._keep(starts, f, replace(flt, queue_offsets=(None, None), queue_ranges=None))
            keep &= ~batches
        keep &= self._keep(starts, f, flt)
        if keep.any() and not checked:
            self._check(starts, f, keep)
        parts = [self._rows(starts, f, keep, columns),
                 self._dispatched_rows(starts, f, flt, columns, checked) if self.unwrap else None]
        if batches.any():
            parts.append(self._inner_rows(starts, f, unwrapped, flt, columns, checked))
        found = [b for b in parts if b is not None]
        if len(found) < 2:
            return found[0] if found else None
        return pa.Table.from_batches(found).combine_chunks().to_batches()[0]

    def _inner_rows(self, starts: np.ndarray, f: dict[str, np.ndarray], which: np.ndarray, flt: RowFilter,
                    columns: frozenset[str] | None, checked: bool) -> pa.RecordBatch | None:
        """The messages of the inner batches at starts[which] that pass the filter."""
        if not checked and which.any():
            self._check(starts, f, which)
        return inner_batches.rows(
            self.mv, self.file_from, starts[which].tolist(),
            lambda t, q, o, ts, at: _passes(flt, t, q, o, ts, at),
            lambda at, why: self.checks.reject(at, self.file_from, why), columns)

    def _check(self, starts: np.ndarray, f: dict[str, np.ndarray], keep: np.ndarray) -> None:
        """Drop from `keep` (and reject) the kept records whose checksums fail."""
        sel = np.flatnonzero(keep)
        failed = failed_checks(self.mv, self.arr, starts[sel],
                               {k: f[k][sel] for k in ("body_pos", "body_len", "crc", "total")},
                               self.checks.flavor)
        if failed.any():
            self._reject(starts, sel[failed], "checksum mismatch")
            keep[sel[failed]] = False

    def _rows(self, starts: np.ndarray, f: dict[str, np.ndarray], keep: np.ndarray,
              columns: frozenset[str] | None) -> pa.RecordBatch | None:
        if columns is None or "body" in columns:
            self._inflate(starts, f, keep)
        if not keep.all():
            if not keep.any():
                return None
            starts = starts[keep]
            f = {k: v[keep] for k, v in f.items()}
        return self._columns(starts, f, columns)

    def _dispatched_rows(self, starts: np.ndarray, f: dict[str, np.ndarray], flt: RowFilter,
                         columns: frozenset[str] | None, checked: bool) -> pa.RecordBatch | None:
        """A row for each queue a record is multi-dispatched to (LMQ: `multi_dispatch.dispatched`,
        what that queue's consumer gets), with that queue's topic, id and offset; the same
        filters and checks as the records' own rows. None when the batch has none (one search
        of its bytes for the property's name tells)."""
        if not len(starts):
            return None
        region = self.mv[int(starts[0]):int(starts[-1] + f["total"][-1])]
        if bytes(region).find(_DISPATCH_NAME) < 0:
            return None
        cand = ~f["bad"] & ~f["filler"] & in_queue(f["sys_flag"])
        rows, topics, qids, qoffs = [], [], [], []
        for i in np.flatnonzero(cand).tolist():
            props = bytes(self.mv[int(f["props_pos"][i]):int(f["props_pos"][i] + f["props_len"][i])])
            if _DISPATCH_NAME not in props:
                continue
            try:
                found = decode_properties(props)
                topic = bytes(self.mv[int(f["topic_pos"][i]):int(f["topic_pos"][i] + f["topic_len"][i])]
                              ).decode("ascii")
            except UnicodeDecodeError:
                continue  # a malformed record: its own row's checks report it
            for t, q, o in dispatched(topic, int(f["queue_id"][i]), found):
                if _passes(flt, t, q, o, int(f["store_ts"][i]), self.file_from + int(starts[i])):
                    rows.append(i)
                    topics.append(t)
                    qids.append(q)
                    qoffs.append(o)
        if not rows:
            return None
        at = np.array(rows, dtype=np.int64)
        sub = {k: v[at] for k, v in f.items()}
        keep = np.ones(len(at), bool)
        if not checked:
            self._check(starts[at], sub, keep)
        batch = self._rows(starts[at], sub, keep, columns)
        if batch is None:
            return None
        kept = np.flatnonzero(keep)
        served = {"topic": pa.array([topics[k] for k in kept.tolist()], pa.string()),
                  "queue_id": pa.array(np.array(qids, np.int32)[kept]),
                  "queue_offset": pa.array(np.array(qoffs, np.int64)[kept])}
        return pa.RecordBatch.from_arrays(
            [served.get(name, batch.column(name)) for name in batch.schema.names], schema=batch.schema)

    def _inflate(self, starts: np.ndarray, f: dict[str, np.ndarray], keep: np.ndarray) -> None:
        """The bodies a consumer gets for the kept records whose producer compressed them, in
        f["inflated"] (None for the others); a body that does not inflate is a damaged
        record (fails the read, or is skipped and counted)."""
        packed = np.flatnonzero(keep & (f["sys_flag"] & COMPRESSED_FLAG != 0))
        if not packed.size:
            return
        inflated = np.full(len(starts), None, dtype=object)
        for i, pos, n, flag in zip(packed.tolist(), f["body_pos"][packed].tolist(),
                                   f["body_len"][packed].tolist(), f["sys_flag"][packed].tolist()):
            offset = self.file_from + int(starts[i])
            try:
                inflated[i] = inflate(self.mv[pos:pos + n], flag, offset)
            except CorruptionError as exc:
                self.checks.reject(offset, self.file_from, str(exc))
                keep[i] = False
        f["inflated"] = inflated

    def _columns(self, starts: np.ndarray, f: dict[str, np.ndarray],
                 wanted: frozenset[str] | None) -> pa.RecordBatch:
        want = (lambda name: True) if wanted is None else wanted.__contains__
        commitlog_offset = starts + self.file_from
        columns: dict[str, pa.Array] = {}
        if want("topic"):
            topic_data, topic_off = _gather(self.arr, f["topic_pos"], f["topic_len"])
            columns["topic"] = _strings(topic_off, topic_data)
        if want("keys") or want("tags") or want("properties"):
            props_data, props_off = _gather(self.arr, f["props_pos"], f["props_len"])
            parsed = _fast_properties(props_data, props_off)
            if parsed is None:
                properties = _properties(_strings(props_off, props_data))
                keys, tags = _keys_and_tags(properties)
            else:
                properties, keys, tags = parsed
            columns.update(keys=keys, tags=tags, properties=properties)
        if want("born_host"):
            columns["born_host"] = self._hosts(starts + BORN_HOST_POS, f["bh"])[0]
        if want("store_host") or want("msg_id"):
            at = starts + store_host_pos(f["bh"])
            store_host, store_raw, store_inv = self._hosts(at, f["sh"])
            columns["store_host"] = store_host
            columns["msg_id"] = self._msg_ids(store_raw, store_inv, commitlog_offset, at, f["sh"])
        if want("body"):
            columns["body"] = self._bodies(f["body_pos"], f["body_len"])
            if "inflated" in f:  # compressed bodies: the inflated ones take their rows
                stored = columns["body"].to_pylist()
                columns["body"] = pa.array([s if i is None else i for s, i in zip(stored, f["inflated"])],
                                           pa.binary())
        plain = {
            "queue_id": lambda: pa.array(f["queue_id"].astype(np.int32)),
            "queue_offset": lambda: pa.array(f["queue_offset"].astype(np.int64)),
            "commitlog_offset": lambda: pa.array(commitlog_offset),
            "size": lambda: pa.array(f["total"].astype(np.int32)),
            "store_timestamp": lambda: pa.array(f["store_ts"] * 1000, _TYPES["store_timestamp"]),
            "born_timestamp": lambda: pa.array(f["born_ts"] * 1000, _TYPES["born_timestamp"]),
            "flag": lambda: pa.array(f["flag"].astype(np.int32)),
            "sys_flag": lambda: pa.array(consumer_sys_flag(f["sys_flag"], f["body_len"]).astype(np.int32)),
        }
        schema = arrow_schema(wanted)
        return pa.RecordBatch.from_arrays(
            [columns[x.name] if x.name in columns else plain[x.name]() for x in schema], schema=schema)

    def _topic_is(self, f: dict[str, np.ndarray], rows: np.ndarray, topic: bytes | np.ndarray) -> np.ndarray:
        """Which of `rows` (a mask) hold records of this topic."""
        want = np.frombuffer(topic, np.uint8) if isinstance(topic, bytes) else topic
        hit = np.zeros(len(rows), bool)
        cand = np.flatnonzero(rows & (f["topic_len"] == len(want)))
        if cand.size:
            hit[cand] = (self._fixed(f["topic_pos"][cand], len(want)) == want).all(axis=1)
        return hit

    def _keep(self, starts: np.ndarray, f: dict[str, np.ndarray], flt: RowFilter) -> np.ndarray:
        keep = ~f["bad"] & ~f["filler"]  # repair's fillers stand for lost bytes: no message
        if not flt.all_records:  # prepared and rolled-back transactions are never consumed
            keep &= in_queue(f["sys_flag"])
        if flt.queues is not None:
            keep &= np.isin(f["queue_id"], np.fromiter(flt.queues, np.int64))
        if flt.start_ms is not None:
            keep &= f["store_ts"] >= flt.start_ms
        if flt.end_ms is not None:
            keep &= f["store_ts"] < flt.end_ms
        for (lo, hi), values in ((flt.queue_offsets, f["queue_offset"]),
                                 (flt.commitlog_offsets, starts + self.file_from)):
            if lo is not None:
                keep &= values >= lo
            if hi is not None:
                keep &= values < hi
        if flt.topics is not None:
            hit = np.zeros(len(keep), bool)
            for t in flt.topics:
                hit |= self._topic_is(f, keep, t.encode())
            keep &= hit
        if flt.queue_ranges is not None:
            hit = np.zeros(len(keep), bool)
            for t in sorted({r[0] for r in flt.queue_ranges}):
                in_topic = self._topic_is(f, keep, t.encode())
                for _, q, lo, hi in (r for r in flt.queue_ranges if r[0] == t):
                    hit |= in_topic & (f["queue_id"] == q) & (f["queue_offset"] >= lo) & (f["queue_offset"] < hi)
            keep &= hit
        for t in flt.excluded_topics:
            keep &= ~self._topic_is(f, keep, t.encode())
        return keep & ~self._topic_is(f, keep, _FILLER)

    def _bodies(self, pos: np.ndarray, lens: np.ndarray) -> pa.Array:
        """Arrow binary views over the mapped file, then one C++ copy into a binary array."""
        n = len(pos)
        if n == 0:
            return pa.array([], pa.binary())
        first = int(pos[0])
        views = np.zeros((n, 4), np.int32)
        views[:, 0] = lens
        long = np.flatnonzero(lens > 12)
        views[long, 1] = self._fixed(pos[long], 4).view(np.int32).ravel()
        views[long, 3] = pos[long] - first
        short = np.flatnonzero(lens <= 12)
        if short.size:  # up to 12 bytes live inline in the view
            inline = np.zeros((short.size, 12), np.uint8)
            data, offsets = _gather(self.arr, pos[short], lens[short])
            col = np.arange(offsets[-1]) - np.repeat(offsets[:-1], lens[short])
            inline[np.repeat(np.arange(short.size), lens[short]), col] = data
            views[short, 1:] = inline.view(np.int32)
        end = int((pos + lens).max())
        region = pa.py_buffer(self.mv[first:end])
        return pa.Array.from_buffers(pa.binary_view(), n, [None, pa.py_buffer(views), region]).cast(pa.binary())

    def _hosts(self, pos: np.ndarray, width: np.ndarray) -> tuple[pa.Array, np.ndarray | None, np.ndarray | None]:
        """'ip:port' strings, each distinct address formatted once; also the distinct raw
        addresses and each row's index into them (None when widths are mixed)."""
        w = int(width[0])
        if not (width == w).all():
            names = [format_host(bytes(self.mv[p:p + k]))
                     for p, k in zip(pos.tolist(), width.tolist())]
            return pa.array(names, pa.string()), None, None
        raw = np.ascontiguousarray(self._fixed(pos, w)).view(np.uint64 if w == 8 else f"V{w}").ravel()
        if (raw == raw[0]).all():  # one producer host, or the store host: format it once
            uniq, inverse = raw[:1], np.zeros(len(raw), np.int64)
        else:
            uniq, inverse = np.unique(raw, return_inverse=True)
            inverse = inverse.ravel()
        names = pa.array([format_host(u.tobytes()) for u in uniq], pa.string())
        return names.take(pa.array(inverse.astype(np.int32))), uniq, inverse

    def _msg_ids(self, uniq: np.ndarray | None, inverse: np.ndarray | None, commitlog_offset: np.ndarray,
                 pos: np.ndarray, width: np.ndarray) -> pa.Array:
        """offsetMsgId: hex of the store host bytes, then of the big-endian CommitLog offset."""
        if uniq is None:
            return pa.array([msg_id(bytes(self.mv[p:p + k]), int(o)) for p, k, o in
                             zip(pos.tolist(), width.tolist(), commitlog_offset.tolist())], pa.string())
        host_hex = np.array([np.frombuffer(u.tobytes().hex().upper().encode(), np.uint8) for u in uniq])
        offset_hex = _HEX_DIGITS[(commitlog_offset[:, None] >> _NIBBLE_SHIFTS) & 15]
        chars = np.concatenate([host_hex[inverse], offset_hex], axis=1)
        step = chars.shape[1]
        return _strings(np.arange(0, step * (len(commitlog_offset) + 1), step), chars.ravel())


def _passes(flt: RowFilter, topic: str, queue_id: int, queue_offset: int, store_ts: int,
            commitlog_offset: int) -> bool:
    """`FileBatcher._keep` for one row given its queue (a multi-dispatched row's)."""
    if (flt.topics is not None and topic not in flt.topics) or \
            (flt.queues is not None and queue_id not in flt.queues):
        return False
    if (flt.start_ms is not None and store_ts < flt.start_ms) or (flt.end_ms is not None and store_ts >= flt.end_ms):
        return False
    for (lo, hi), value in ((flt.queue_offsets, queue_offset), (flt.commitlog_offsets, commitlog_offset)):
        if (lo is not None and value < lo) or (hi is not None and value >= hi):
            return False
    return flt.queue_ranges is None or any(
        t == topic and q == queue_id and lo <= queue_offset < hi for t, q, lo, hi in flt.queue_ranges)


def _fast_properties(d: np.ndarray, offsets: np.ndarray) -> tuple[pa.Array, pa.Array, pa.Array] | None:
    """Properties map, KEYS tokens and TAGS with numpy, for the regular case every RocketMQ
    encoder produces (name 0x01 value 0x02, every pair terminated, no empty name or value);
    None when a batch holds anything else."""
    n = len(offsets) - 1
    is_sep = (d == 1) | (d == 2)
    sep = np.flatnonzero(is_sep)
    if len(sep) % 2:
        return None
    kinds = d[sep]
    ones, twos = sep[0::2], sep[1::2]
    ends = offsets[1:][offsets[1:] > offsets[:-1]]
    if not ((kinds[0::2] == 1).all() and (kinds[1::2] == 2).all() and (d[ends - 1] == 2).all()):
        return None
    pair_start = np.concatenate([[0], twos[:-1] + 1]).astype(np.int64)
    name_len, value_len = ones - pair_start, twos - ones - 1
    if (name_len <= 0).any() or (value_len <= 0).any():
        return None
    parity = np.cumsum(is_sep, dtype=np.int32) & 1
    names = _strings(_offsets(name_len), d[~is_sep & (parity == 0)])
    values_data = d[~is_sep & (parity == 1)]
    value_off = _offsets(value_len)
    values = _strings(value_off, values_data)
    map_off = np.concatenate([[0], np.searchsorted(twos, offsets[1:])]).astype(np.int32)
    properties = pa.MapArray.from_arrays(pa.array(map_off), names, values, type=_TYPES["properties"])
    row = np.searchsorted(offsets[1:], pair_start, side="right")

    def lookup(name: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cand = np.flatnonzero(name_len == len(name))
        hit = cand[(d[pair_start[cand, None] + np.arange(len(name))] == name).all(axis=1)]
        return hit, row[hit]

    if len(lookup(_CRC)[0]):  # a damaged trailer left in the properties: the general path drops it
        return None
    tag_pairs, tag_rows = lookup(_TAGS)
    key_pairs, key_rows = lookup(_KEYS)
    if (np.diff(tag_rows) == 0).any() or (np.diff(key_rows) == 0).any():
        return None  # a repeated name: leave "which one wins" to the general path
    lens = np.zeros(n, np.int64)
    lens[tag_rows] = value_len[tag_pairs]
    valid = np.zeros(n, bool)
    valid[tag_rows] = True
    tag_data, _ = _gather(values_data, value_off[tag_pairs], value_len[tag_pairs])
    tags = _strings(_offsets(lens), tag_data, valid)
    keys = _split_keys(*_gather(values_data, value_off[key_pairs], value_len[key_pairs]), key_rows, n)
    return properties, keys, tags


def _split_keys(data: np.ndarray, value_off: np.ndarray, rows: np.ndarray, n: int) -> pa.Array:
    """KEYS values split into runs of non-space bytes (empty tokens dropped, as the index does)."""
    word = data != 32
    first = np.zeros(len(data), bool)
    first[value_off[:-1][value_off[:-1] < len(data)]] = True
    starts = word & (first | np.concatenate([[True], ~word[:-1]]))
    token = np.cumsum(starts) - 1
    token_len = np.bincount(token[word], minlength=int(starts.sum()))
    before = np.concatenate([[0], np.cumsum(starts)])
    per_row = np.zeros(n, np.int64)
    per_row[rows] = before[value_off[1:]] - before[value_off[:-1]]
    tokens = _strings(_offsets(token_len), data[word])
    return pa.ListArray.from_arrays(pa.array(_offsets(per_row).astype(np.int32)), tokens,
                                    type=_TYPES["keys"])


def _properties(raw: pa.StringArray) -> pa.MapArray:
    """RocketMQ's string2messageProperties in Arrow kernels: split pairs on 0x02, name from
    value on the first 0x01, drop pairs with an empty name or value, and a `__CRC32#` left by
    a trailer too damaged to be one (the record's checksum, never the message's: the store's
    `decode_properties` drops it too)."""
    pairs = pc.split_pattern(raw, "\x02")
    parent = pc.list_parent_indices(pairs).to_numpy()
    kv = pc.split_pattern(pairs.flatten(), "\x01", max_splits=1)
    ok = pc.equal(pc.list_value_length(kv), 2).to_numpy(zero_copy_only=False)
    kv = kv.filter(pa.array(ok))
    names, values = pc.list_element(kv, 0), pc.list_element(kv, 1)
    nonempty = ((pc.binary_length(names).to_numpy() > 0) & (pc.binary_length(values).to_numpy() > 0)
                & ~pc.equal(names, PROPERTY_CRC32).to_numpy(zero_copy_only=False))
    mask = pa.array(nonempty)
    counts = np.bincount(parent[ok][nonempty], minlength=len(raw))
    return pa.MapArray.from_arrays(pa.array(_offsets(counts).astype(np.int32)), names.filter(mask),
                                   values.filter(mask), type=_TYPES["properties"])


def _keys_and_tags(props: pa.MapArray) -> tuple[pa.Array, pa.Array]:
    """KEYS split on spaces (empty tokens dropped) and TAGS (null if absent), last one wins
    like the decoder's dict."""
    tags = pc.map_lookup(props, pa.scalar(PROPERTY_TAGS), "last").cast(pa.string())
    keys = pc.map_lookup(props, pa.scalar(PROPERTY_KEYS), "last").fill_null("")
    tokens = pc.split_pattern(keys, " ")
    parent = pc.list_parent_indices(tokens).to_numpy()
    flat = tokens.flatten()
    nonempty = pc.binary_length(flat).to_numpy() > 0
    counts = np.bincount(parent[nonempty], minlength=len(props))
    return (pa.ListArray.from_arrays(pa.array(_offsets(counts).astype(np.int32)),
                                     flat.filter(pa.array(nonempty)), type=_TYPES["keys"]), tags)
