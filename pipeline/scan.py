"""Turn CommitLog records into Arrow batches of the message schema, column by column.

Finding record boundaries is a walk (each record's size gives the next start); everything
after that is numpy over whole batches of records: fixed fields are gathered through a
sliding-window view, hex message ids come from a lookup table, hosts are formatted once per
distinct value, and properties are split by Arrow compute kernels. Filters on topic, queue and
store time are applied right after the fixed fields, before bodies and properties are copied.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store import codec
from store.codec import MAGIC_BLANK, MAGIC_V1, MAGIC_V2
from store.errors import CodecError
from store.flavor import Flavor

from .schema import ARROW_SCHEMA

MIN_RECORD = 91
_HDR = struct.Struct(">ii")
_HEAD = np.dtype([("total", ">i4"), ("magic", ">i4"), ("crc", ">i4"), ("queue_id", ">i4"),
                  ("flag", ">i4"), ("queue_offset", ">i8"), ("phys", ">i8"),
                  ("sys_flag", ">i4"), ("born_ts", ">i8")])
_HEX = np.frombuffer(b"".join(f"{i:02X}".encode() for i in range(256)), np.uint8).reshape(256, 2)
_TYPES = {f.name: f.type for f in ARROW_SCHEMA}


@dataclass(frozen=True)
class RowFilter:
    """Rows to keep: topics and queue ids (None = all), store time in [start_ms, end_ms)."""

    topics: frozenset[str] | None = None
    queues: frozenset[int] | None = None
    start_ms: int | None = None
    end_ms: int | None = None


@dataclass
class Walk:
    starts: list[int]  # positions of whole records in the file
    next_pos: int  # where the walk stopped
    state: str  # "more" (limit reached), "blank" (file rolled over), "end" (no more records)


def walk(buf, pos: int, max_records: int, max_bytes: int) -> Walk:
    """Record starts from pos until a limit, a BLANK filler or the first thing that is not a
    whole record header (zeros past a live store's end, or garbage)."""
    starts: list[int] = []
    limit = len(buf)
    stop = pos + max_bytes
    unpack = _HDR.unpack_from
    while pos + 8 <= limit:
        size, magic = unpack(buf, pos)
        if magic == MAGIC_V1 or magic == MAGIC_V2:
            if size < MIN_RECORD or pos + size > limit:
                break
            starts.append(pos)
            pos += size
            if len(starts) >= max_records or pos >= stop:
                return Walk(starts, pos, "more")
        elif magic == MAGIC_BLANK:
            return Walk(starts, pos, "blank")
        else:
            break
    return Walk(starts, pos, "end")


def last_record_whole(buf, pos: int, flavor: Flavor) -> bool:
    """A live writer may be copying the record that ends the data: trust it only when it
    decodes with a matching body checksum."""
    try:
        codec.decode(buf, pos, flavor)
        return True
    except CodecError:
        return False


class FileBatcher:
    """Builds batches from record positions in one mapped CommitLog file."""

    def __init__(self, buf, file_from: int):
        self.buf = buf
        self.mv = memoryview(buf)
        self.arr = np.frombuffer(buf, np.uint8)
        self.file_from = file_from
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

    def _varying(self, pos: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Concatenated bytes of [pos, pos+len) per row and int32 Arrow offsets."""
        offsets = np.zeros(len(pos) + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        total = int(offsets[-1])
        idx = np.repeat(pos - offsets[:-1], lens) + np.arange(total, dtype=np.int64)
        return self.arr[idx], offsets.astype(np.int32)

    def _hosts(self, pos: np.ndarray, width: np.ndarray) -> pa.Array:
        """'ip:port' strings; each distinct address is formatted once."""
        if len(pos) == 0:
            return pa.array([], pa.string())
        w = int(width[0])
        if not (width == w).all():
            return pa.array([_host(bytes(self.mv[p:p + n])) for p, n in zip(pos.tolist(), width.tolist())],
                            pa.string())
        raw = np.ascontiguousarray(self._fixed(pos, w)).view(f"V{w}").ravel()
        uniq, inverse = np.unique(raw, return_inverse=True)
        names = pa.array([_host(u.tobytes()) for u in uniq], pa.string())
        return names.take(pa.array(inverse.astype(np.int32).ravel()))

    def _msg_ids(self, pos: np.ndarray, width: np.ndarray, phys: np.ndarray) -> pa.Array:
        """offsetMsgId: hex of store host bytes and the big-endian CommitLog offset."""
        n = len(pos)
        w = int(width[0]) if n else 8
        if n and not (width == w).all():
            return pa.array([codec.msg_id(bytes(self.mv[p:p + k]), int(o))
                             for p, k, o in zip(pos.tolist(), width.tolist(), phys.tolist())],
                            pa.string())
        raw = np.concatenate([self._fixed(pos, w), phys.astype(">i8").view(np.uint8).reshape(n, 8)],
                             axis=1)
        chars = np.ascontiguousarray(_HEX[raw]).reshape(-1)
        step = 2 * (w + 8)
        offsets = np.arange(0, step * (n + 1), step, dtype=np.int32)
        return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(chars))

    def batch(self, starts: np.ndarray, flt: RowFilter | None = None) -> pa.RecordBatch | None:
        """The rows for records at these positions that pass the filter, or None."""
        head = self._fixed(starts, 48).view(_HEAD).ravel()
        sys_flag = head["sys_flag"].astype(np.int32)
        bh = np.where(sys_flag & codec.BORNHOST_V6_FLAG, 20, 8)
        sh = np.where(sys_flag & codec.STOREHOST_V6_FLAG, 20, 8)
        store_ts = self._int(starts + 48 + bh, ">i8")
        body_pos = starts + 72 + bh + sh
        body_len = self._int(body_pos - 4, ">i4").astype(np.int64)
        v2 = head["magic"] == MAGIC_V2
        tl_pos = body_pos + body_len
        if (body_len < 0).any() or (tl_pos + 3 > starts + head["total"]).any():
            raise CodecError(f"malformed record in the batch at CommitLog offset {self.file_from + int(starts[0])}")
        topic_len = np.where(v2, 0, self.arr[tl_pos]).astype(np.int64)
        if v2.any():
            topic_len[v2] = self._int(tl_pos[v2], ">i2")
        topic_pos = tl_pos + np.where(v2, 2, 1)

        keep = np.ones(len(starts), bool)
        if flt is not None:
            queue_id = head["queue_id"]
            if flt.queues is not None:
                keep &= np.isin(queue_id, np.fromiter(flt.queues, np.int64))
            if flt.start_ms is not None:
                keep &= store_ts >= flt.start_ms
            if flt.end_ms is not None:
                keep &= store_ts < flt.end_ms
            if flt.topics is not None:
                keep &= self._topic_in(topic_pos, topic_len, flt.topics)
            if not keep.all():
                if not keep.any():
                    return None
                starts, head, bh, sh, store_ts = starts[keep], head[keep], bh[keep], sh[keep], store_ts[keep]
                body_pos, body_len = body_pos[keep], body_len[keep]
                topic_pos, topic_len = topic_pos[keep], topic_len[keep]
        n = len(starts)
        props_pos = topic_pos + topic_len + 2
        props_len = self._int(props_pos - 2, ">i2").astype(np.int64)
        total = head["total"].astype(np.int64)
        if (topic_len <= 0).any() or (props_len < 0).any() or (props_pos + props_len != starts + total).any():
            bad = int(starts[np.flatnonzero((topic_len <= 0) | (props_len < 0) |
                                            (props_pos + props_len != starts + total))[0]])
            raise CodecError(f"malformed record at CommitLog offset {self.file_from + bad}")

        phys = starts + self.file_from
        topic_data, topic_off = self._varying(topic_pos, topic_len)
        props_data, props_off = self._varying(props_pos, props_len)
        properties = _properties(pa.StringArray.from_buffers(
            n, pa.py_buffer(props_off), pa.py_buffer(props_data)))
        keys, tags = _keys_and_tags(properties)
        ends = (body_pos + body_len).tolist()
        body = b"".join([self.mv[s:e] for s, e in zip(body_pos.tolist(), ends)])
        body_off = np.zeros(n + 1, np.int64)
        np.cumsum(body_len, out=body_off[1:])

        columns = {
            "topic": pa.StringArray.from_buffers(n, pa.py_buffer(topic_off), pa.py_buffer(topic_data)),
            "queue_id": pa.array(head["queue_id"].astype(np.int32)),
            "queue_offset": pa.array(head["queue_offset"].astype(np.int64)),
            "commitlog_offset": pa.array(phys.astype(np.int64)),
            "size": pa.array(total.astype(np.int32)),
            "store_timestamp": pa.array(store_ts * 1000, _TYPES["store_timestamp"]),
            "born_timestamp": pa.array(head["born_ts"].astype(np.int64) * 1000, _TYPES["born_timestamp"]),
            "born_host": self._hosts(starts + 48, bh),
            "store_host": self._hosts(starts + 56 + bh, sh),
            "msg_id": self._msg_ids(starts + 56 + bh, sh, phys),
            "keys": keys,
            "tags": tags,
            "properties": properties,
            "flag": pa.array(head["flag"].astype(np.int32)),
            "sys_flag": pa.array(head["sys_flag"].astype(np.int32)),
            "body": pa.BinaryArray.from_buffers(pa.binary(), n, [None, pa.py_buffer(body_off.astype(np.int32)),
                                                                pa.py_buffer(body)]),
        }
        return pa.RecordBatch.from_arrays([columns[f.name] for f in ARROW_SCHEMA], schema=ARROW_SCHEMA)

    def _topic_in(self, pos: np.ndarray, lens: np.ndarray, topics: frozenset[str]) -> np.ndarray:
        hit = np.zeros(len(pos), bool)
        for t in topics:
            want = np.frombuffer(t.encode("ascii"), np.uint8)
            cand = np.flatnonzero(lens == len(want))
            if cand.size:
                hit[cand] |= (self._fixed(pos[cand], len(want)) == want).all(axis=1)
        return hit


def _host(raw: bytes) -> str:
    host, port = codec.decode_host(raw)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _properties(raw: pa.StringArray) -> pa.MapArray:
    """RocketMQ's string2messageProperties in Arrow kernels: split pairs on 0x02, name from
    value on the first 0x01, drop pairs with an empty name or value."""
    pairs = pc.split_pattern(raw, "\x02")
    parent = pc.list_parent_indices(pairs).to_numpy()
    kv = pc.split_pattern(pairs.flatten(), "\x01", max_splits=1)
    ok = pc.equal(pc.list_value_length(kv), 2).to_numpy(zero_copy_only=False)
    kv = kv.filter(pa.array(ok))
    names, values = pc.list_element(kv, 0), pc.list_element(kv, 1)
    nonempty = (pc.binary_length(names).to_numpy() > 0) & (pc.binary_length(values).to_numpy() > 0)
    mask = pa.array(nonempty)
    names, values = names.filter(mask), values.filter(mask)
    counts = np.bincount(parent[ok][nonempty], minlength=len(raw))
    offsets = np.zeros(len(raw) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.MapArray.from_arrays(pa.array(offsets), names, values, type=_TYPES["properties"])


def _keys_and_tags(props: pa.MapArray) -> tuple[pa.ListArray, pa.StringArray]:
    """KEYS split on spaces (empty tokens dropped, as the index does) and TAGS (null if absent)."""
    tags = pc.map_lookup(props, pa.scalar(codec.PROPERTY_TAGS), "first")
    keys = pc.map_lookup(props, pa.scalar(codec.PROPERTY_KEYS), "first")
    tokens = pc.split_pattern(keys.fill_null(""), " ")
    parent = pc.list_parent_indices(tokens).to_numpy()
    flat = tokens.flatten()
    nonempty = pc.binary_length(flat).to_numpy() > 0
    counts = np.bincount(parent[nonempty], minlength=len(props))
    offsets = np.zeros(len(props) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    values = flat.filter(pa.array(nonempty))
    return pa.ListArray.from_arrays(pa.array(offsets), values, type=_TYPES["keys"]), tags.cast(pa.string())
