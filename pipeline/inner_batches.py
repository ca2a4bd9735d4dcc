"""Rows for a BatchCQ topic's inner-batch records: one per message packed in the record, at
its own queue offset, with its own body, keys, tags, properties and flag, as a consumer's pull
unwraps it (docs/format.md, "BatchCQ"; the one decoder is `mqfs.store.format.batch.unwrap`).
Such records are rare and small in number next to plain ones, so they are decoded one by one;
a batch that does not unwrap is a damaged record (fails the read, or is skipped and counted),
never other rows."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from mqfs.store.errors import CodecError, CorruptionError
from mqfs.store.format.batch import INNER_BATCH_FLAG, NEED_UNWRAP_FLAG, unwrap
from mqfs.store.format.codec import decode
from mqfs.store.format.layout import format_host

from .schema import arrow_schema

INNER_BATCHES = NEED_UNWRAP_FLAG | INNER_BATCH_FLAG

# (topic, queue id, queue offset, store time ms, CommitLog offset) -> the row filter keeps it
Passes = Callable[[str, int, int, int, int], bool]
Reject = Callable[[int, str], None]  # (CommitLog offset, why): fail the read or count it


def inner_batches(sys_flag: np.ndarray) -> np.ndarray:
    """Which records are inner batches a consumer unwraps (both flags, as PullAPIWrapper)."""
    return (sys_flag & INNER_BATCHES) == INNER_BATCHES


def rows(buf, file_from: int, starts: list[int], passes: Passes, reject: Reject,
         columns: frozenset[str] | None) -> pa.RecordBatch | None:
    """The rows of the inner messages of the records at these positions (already checked)."""
    values: dict[str, list] = {f.name: [] for f in arrow_schema(columns)}
    for pos in starts:
        offset = file_from + pos
        try:
            msgs = unwrap(decode(buf, pos))
            for m in msgs:  # properties that are not UTF-8 damage the batch, whatever the columns
                m.properties  # noqa: B018
        except (CorruptionError, CodecError) as exc:
            reject(offset, str(exc))
            continue
        for m in msgs:
            if not passes(m.topic, m.queue_id, m.queue_offset, m.store_timestamp, offset):
                continue
            row = {"topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
                   "commitlog_offset": offset, "size": m.total_size,
                   "store_timestamp": _long(m.store_timestamp * 1000),
                   "born_timestamp": _long(m.born_timestamp * 1000), "flag": m.flag, "sys_flag": m.sys_flag}
            for name, column in values.items():
                column.append(row[name] if name in row else _lazy(name, m))
    if not next(iter(values.values()), []):
        return None
    schema = arrow_schema(columns)
    return pa.RecordBatch.from_arrays([pa.array(values[f.name], f.type) for f in schema], schema=schema)


def _long(n: int) -> int:
    """n as a 64-bit signed integer, wrapping as the plain rows' numpy columns and the JVM
    reader's longs do: a damaged time (ms x 1000 past 2**63 microseconds) gives its row, not
    an OverflowError that fails the read."""
    return (n + (1 << 63)) % (1 << 64) - (1 << 63)


def _lazy(name: str, m) -> object:
    """The columns that decode hosts or properties, built only when asked for."""
    if name == "born_host":
        return format_host(m.born_host_raw)
    if name == "store_host":
        return format_host(m.store_host_raw)
    if name == "msg_id":
        return m.msg_id
    if name == "keys":
        return [k for k in m.keys if k]
    if name == "tags":
        return m.properties.get("TAGS")
    if name == "properties":
        return list(m.properties.items())
    return bytes(m.body)
