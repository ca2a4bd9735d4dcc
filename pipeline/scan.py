"""Turn CommitLog records into Arrow batches of the message schema, column by column.

Finding record boundaries is a walk (each record's size gives the next start); everything
after that is numpy over whole batches of records: fixed fields are gathered through a
sliding-window view, bodies are copied by Arrow from binary views over the mapped file, hosts
and message ids are formatted once per distinct host, and properties are split with numpy
(Arrow compute kernels handle the rare irregular strings). Filters on topic, queue and store
time are applied right after the fixed fields, before bodies and properties are touched.
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
# TOTALSIZE .. BODYLEN of a record whose born and store hosts are IPv4 (the common case)
_HEAD_V4 = np.dtype([("total", ">i4"), ("magic", ">i4"), ("crc", ">i4"), ("queue_id", ">i4"),
                     ("flag", ">i4"), ("queue_offset", ">i8"), ("phys", ">i8"),
                     ("sys_flag", ">i4"), ("born_ts", ">i8"), ("born_host", "V8"),
                     ("store_ts", ">i8"), ("store_host", "V8"), ("reconsume", ">i4"),
                     ("prepared", ">i8"), ("body_len", ">i4")])
_V6_FLAGS = codec.BORNHOST_V6_FLAG | codec.STOREHOST_V6_FLAG
_HEX_DIGITS = np.frombuffer(b"0123456789ABCDEF", np.uint8)
_NIBBLE_SHIFTS = np.arange(60, -4, -4, dtype=np.int64)
_TYPES = {f.name: f.type for f in ARROW_SCHEMA}
_KEYS = np.frombuffer(codec.PROPERTY_KEYS.encode(), np.uint8)
_TAGS = np.frombuffer(codec.PROPERTY_TAGS.encode(), np.uint8)


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
                follows = pos + 8 <= limit and unpack(buf, pos)[1] in (MAGIC_V1, MAGIC_V2, MAGIC_BLANK)
                return Walk(starts, pos, "more" if follows else "end")
        elif magic == MAGIC_BLANK:
            return Walk(starts, pos, "blank")
        else:
            break
    return Walk(starts, pos, "end")


def record_whole(buf, pos: int, flavor: Flavor) -> bool:
    """True when the record at pos decodes with a matching body checksum (a live writer may
    still be copying the record that ends the data)."""
    try:
        codec.decode(buf, pos, flavor)
        return True
    except CodecError:
        return False


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
    """Builds batches from record positions in one mapped CommitLog file."""

    def __init__(self, buf, file_from: int):
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

    def _head(self, starts: np.ndarray) -> dict[str, np.ndarray]:
        """Fixed fields of every record, plus the positions of its variable parts."""
        head = self._fixed(starts, _HEAD_V4.itemsize).view(_HEAD_V4).ravel()
        f = {name: head[name].astype(head.dtype[name].newbyteorder("="))
             for name in ("total", "magic", "queue_id", "flag", "queue_offset", "sys_flag",
                          "born_ts", "store_ts", "body_len")}
        f["total"] = f["total"].astype(np.int64)
        f["body_len"] = f["body_len"].astype(np.int64)
        f["bh"] = np.full(len(starts), 8, np.int64)
        f["sh"] = np.full(len(starts), 8, np.int64)
        v6 = np.flatnonzero(f["sys_flag"] & _V6_FLAGS)
        if v6.size:  # wider hosts move every field after BORNHOST
            sf = f["sys_flag"][v6]
            bh = np.where(sf & codec.BORNHOST_V6_FLAG, 20, 8)
            sh = np.where(sf & codec.STOREHOST_V6_FLAG, 20, 8)
            f["bh"][v6], f["sh"][v6] = bh, sh
            f["store_ts"][v6] = self._int(starts[v6] + 48 + bh, ">i8")
            f["body_len"][v6] = self._int(starts[v6] + 68 + bh + sh, ">i4")
        f["body_pos"] = starts + 72 + f["bh"] + f["sh"]
        tl_pos = f["body_pos"] + f["body_len"]
        if (f["body_len"] < 0).any() or (tl_pos + 3 > starts + f["total"]).any():
            bad = np.flatnonzero((f["body_len"] < 0) | (tl_pos + 3 > starts + f["total"]))[0]
            raise CodecError(f"malformed record at CommitLog offset {self.file_from + int(starts[bad])}")
        v2 = f["magic"] == MAGIC_V2
        f["topic_len"] = self.arr[tl_pos].astype(np.int64)
        if v2.any():
            f["topic_len"][v2] = self._int(tl_pos[v2], ">i2")
        f["topic_pos"] = tl_pos + np.where(v2, 2, 1)
        return f

    def batch(self, starts: np.ndarray, flt: RowFilter | None = None) -> pa.RecordBatch | None:
        """The rows for records at these positions that pass the filter, or None."""
        f = self._head(starts)
        if flt is not None:
            keep = self._keep(f, flt)
            if not keep.all():
                if not keep.any():
                    return None
                starts = starts[keep]
                f = {k: v[keep] for k, v in f.items()}
        n = len(starts)
        props_pos = f["topic_pos"] + f["topic_len"] + 2
        props_len = self._int(props_pos - 2, ">i2").astype(np.int64)
        bad = (f["topic_len"] <= 0) | (props_len < 0) | (props_pos + props_len != starts + f["total"])
        if bad.any():
            raise CodecError("malformed record at CommitLog offset "
                             f"{self.file_from + int(starts[np.flatnonzero(bad)[0]])}")
        phys = starts + self.file_from
        topic_data, topic_off = _gather(self.arr, f["topic_pos"], f["topic_len"])
        props_data, props_off = _gather(self.arr, props_pos, props_len)
        parsed = _fast_properties(props_data, props_off)
        if parsed is None:
            properties = _properties(_strings(props_off, props_data))
            keys, tags = _keys_and_tags(properties)
        else:
            properties, keys, tags = parsed
        born_host, _, _ = self._hosts(starts + 48, f["bh"])
        store_host, store_raw, store_inv = self._hosts(starts + 56 + f["bh"], f["sh"])
        columns = {
            "topic": _strings(topic_off, topic_data),
            "queue_id": pa.array(f["queue_id"].astype(np.int32)),
            "queue_offset": pa.array(f["queue_offset"].astype(np.int64)),
            "commitlog_offset": pa.array(phys),
            "size": pa.array(f["total"].astype(np.int32)),
            "store_timestamp": pa.array(f["store_ts"] * 1000, _TYPES["store_timestamp"]),
            "born_timestamp": pa.array(f["born_ts"] * 1000, _TYPES["born_timestamp"]),
            "born_host": born_host,
            "store_host": store_host,
            "msg_id": self._msg_ids(store_raw, store_inv, phys, starts + 56 + f["bh"], f["sh"]),
            "keys": keys,
            "tags": tags,
            "properties": properties,
            "flag": pa.array(f["flag"].astype(np.int32)),
            "sys_flag": pa.array(f["sys_flag"].astype(np.int32)),
            "body": self._bodies(f["body_pos"], f["body_len"]),
        }
        return pa.RecordBatch.from_arrays([columns[x.name] for x in ARROW_SCHEMA], schema=ARROW_SCHEMA)

    def _keep(self, f: dict[str, np.ndarray], flt: RowFilter) -> np.ndarray:
        keep = np.ones(len(f["total"]), bool)
        if flt.queues is not None:
            keep &= np.isin(f["queue_id"], np.fromiter(flt.queues, np.int64))
        if flt.start_ms is not None:
            keep &= f["store_ts"] >= flt.start_ms
        if flt.end_ms is not None:
            keep &= f["store_ts"] < flt.end_ms
        if flt.topics is not None:
            hit = np.zeros(len(keep), bool)
            for t in flt.topics:
                want = np.frombuffer(t.encode("ascii"), np.uint8)
                cand = np.flatnonzero(keep & (f["topic_len"] == len(want)))
                if cand.size:
                    hit[cand] |= (self._fixed(f["topic_pos"][cand], len(want)) == want).all(axis=1)
            keep &= hit
        return keep

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
            names = [_host(bytes(self.mv[p:p + k])) for p, k in zip(pos.tolist(), width.tolist())]
            return pa.array(names, pa.string()), None, None
        raw = np.ascontiguousarray(self._fixed(pos, w)).view(np.uint64 if w == 8 else f"V{w}").ravel()
        if (raw == raw[0]).all():  # one producer host, or the store host: format it once
            uniq, inverse = raw[:1], np.zeros(len(raw), np.int64)
        else:
            uniq, inverse = np.unique(raw, return_inverse=True)
            inverse = inverse.ravel()
        names = pa.array([_host(u.tobytes()) for u in uniq], pa.string())
        return names.take(pa.array(inverse.astype(np.int32))), uniq, inverse

    def _msg_ids(self, uniq: np.ndarray | None, inverse: np.ndarray | None, phys: np.ndarray,
                 pos: np.ndarray, width: np.ndarray) -> pa.Array:
        """offsetMsgId: hex of the store host bytes, then of the big-endian CommitLog offset."""
        if uniq is None:
            return pa.array([codec.msg_id(bytes(self.mv[p:p + k]), int(o)) for p, k, o in
                             zip(pos.tolist(), width.tolist(), phys.tolist())], pa.string())
        host_hex = np.array([np.frombuffer(u.tobytes().hex().upper().encode(), np.uint8) for u in uniq])
        offset_hex = _HEX_DIGITS[(phys[:, None] >> _NIBBLE_SHIFTS) & 15]
        chars = np.concatenate([host_hex[inverse], offset_hex], axis=1)
        step = chars.shape[1]
        return _strings(np.arange(0, step * (len(phys) + 1), step), chars.ravel())


def _host(raw: bytes) -> str:
    host, port = codec.decode_host(raw)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


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

    def lookup(name: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        cand = np.flatnonzero(name_len == len(name))
        hit = cand[(d[pair_start[cand, None] + np.arange(len(name))] == name).all(axis=1)]
        return hit, row[hit]

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
    value on the first 0x01, drop pairs with an empty name or value."""
    pairs = pc.split_pattern(raw, "\x02")
    parent = pc.list_parent_indices(pairs).to_numpy()
    kv = pc.split_pattern(pairs.flatten(), "\x01", max_splits=1)
    ok = pc.equal(pc.list_value_length(kv), 2).to_numpy(zero_copy_only=False)
    kv = kv.filter(pa.array(ok))
    names, values = pc.list_element(kv, 0), pc.list_element(kv, 1)
    nonempty = (pc.binary_length(names).to_numpy() > 0) & (pc.binary_length(values).to_numpy() > 0)
    mask = pa.array(nonempty)
    counts = np.bincount(parent[ok][nonempty], minlength=len(raw))
    return pa.MapArray.from_arrays(pa.array(_offsets(counts).astype(np.int32)), names.filter(mask),
                                   values.filter(mask), type=_TYPES["properties"])


def _keys_and_tags(props: pa.MapArray) -> tuple[pa.Array, pa.Array]:
    """KEYS split on spaces (empty tokens dropped) and TAGS (null if absent), last one wins
    like the decoder's dict."""
    tags = pc.map_lookup(props, pa.scalar(codec.PROPERTY_TAGS), "last").cast(pa.string())
    keys = pc.map_lookup(props, pa.scalar(codec.PROPERTY_KEYS), "last").fill_null("")
    tokens = pc.split_pattern(keys, " ")
    parent = pc.list_parent_indices(tokens).to_numpy()
    flat = tokens.flatten()
    nonempty = pc.binary_length(flat).to_numpy() > 0
    counts = np.bincount(parent[nonempty], minlength=len(props))
    return (pa.ListArray.from_arrays(pa.array(_offsets(counts).astype(np.int32)),
                                     flat.filter(pa.array(nonempty)), type=_TYPES["keys"]), tags)
