"""BatchCQ topics (`queue.type=BatchCQ`): the 46-byte units of `batchconsumequeue/` and the
inner-batch records whose body packs several messages (docs/format.md, "BatchCQ"). The one
place that knows both layouts; readers of the store, the mount, verify and the Spark source
ask it, and a JVM reader must decode the same way.

A unit covers queue offsets [msgBaseOffset, msgBaseOffset + batchSize) with one record. An
inner-batch record (SYSFLAG NEED_UNWRAP | INNER_BATCH, properties INNER_NUM and INNER_BASE,
QUEUEOFFSET = INNER_BASE) holds INNER_NUM messages in its body, each
`int32 size, int32 magic (0), int32 body crc (0), int32 flag, int32 body length, body,
int16 properties length, properties` (MessageDecoder.encodeMessage); a consumer gets message
*i* at queue offset INNER_BASE + i with its own flag, body and properties and the record's
topic, queue, hosts, times, size, SYSFLAG (as the consumer shows it: COMPRESSED cleared once
the body is inflated) and CommitLog offset; RECONSUMETIMES and the prepared-transaction offset
are 0, as MessageDecoder.decodeMessage leaves them.
"""

from __future__ import annotations

import struct

import numpy as np

from ..errors import CorruptionError
from .layout import INNER_BATCH_FLAG as INNER_BATCH_FLAG  # published here first
from .layout import NEED_UNWRAP_FLAG as NEED_UNWRAP_FLAG
from .message import StoredMessage, encode_properties

UNIT_SIZE = 46  # BatchConsumeQueue.CQ_STORE_UNIT_SIZE

# offset, body size, tagsCode, store time, msgBaseOffset, batchSize, compactedOffset, reserved
UNIT_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8"), ("store_time", ">i8"),
                       ("base", ">i8"), ("batch", ">i2"), ("compacted", ">i4"), ("reserved", ">i4")])

_UNIT = struct.Struct(">qiqqqhii")

FILE_UNITS = 300_000  # MessageStoreConfig.mapperFileSizeBatchConsumeQueue / UNIT_SIZE

PROPERTY_INNER_NUM = "INNER_NUM"

PROPERTY_INNER_BASE = "INNER_BASE"

_INNER_HEAD = struct.Struct(">iiiii")  # size, magic, body crc, flag, body length

_INNER_MIN = _INNER_HEAD.size + 2


def encode_unit(commitlog_offset: int, size: int, tags_code: int, store_time: int,
                base: int, batch: int) -> bytes:
    """A unit as BatchConsumeQueue.putBatchMessagePositionInfo writes it (compactedOffset -1,
    reserved 0)."""
    return _UNIT.pack(commitlog_offset, size, tags_code, store_time, base, batch, -1, 0)


def written(units: np.ndarray) -> int:
    """How many of these units (from a file's start) the broker wrote: up to the first whose
    offset or base is negative or whose size or batch is not positive, where
    BatchConsumeQueue.recover stops."""
    bad = (units["offset"] < 0) | (units["size"] <= 0) | (units["base"] < 0) | (units["batch"] <= 0)
    hits = np.flatnonzero(bad)
    return int(hits[0]) if len(hits) else len(units)


def is_inner_batch(sys_flag: int) -> bool:
    """A record a consumer unwraps (PullAPIWrapper.processPullResult: both flags)."""
    return sys_flag & (NEED_UNWRAP_FLAG | INNER_BATCH_FLAG) == NEED_UNWRAP_FLAG | INNER_BATCH_FLAG


def encode_inner(messages: list[tuple[int, bytes, dict[str, str]]]) -> bytes:
    """A batch body of (flag, body, properties) as MessageDecoder.encodeMessages packs it
    (tests build broker stores with it)."""
    out = bytearray()
    for flag, body, props in messages:
        raw = encode_properties(props)
        out += _INNER_HEAD.pack(_INNER_HEAD.size + len(body) + 2 + len(raw), 0, 0, flag, len(body))
        out += body + struct.pack(">h", len(raw)) + raw
    return bytes(out)


def inner_parts(body: bytes | memoryview, where: str) -> list[tuple[int, int, memoryview, bytes]]:
    """(size, flag, body, raw properties) of each message packed in a batch body; the parts
    must tile it exactly (CorruptionError naming `where` otherwise: a cut or garbled batch is
    never read as other messages)."""
    view = memoryview(body)
    out: list[tuple[int, int, memoryview, bytes]] = []
    pos = 0
    while pos < len(view):
        if len(view) - pos < _INNER_MIN:
            raise CorruptionError(f"{where}: inner message {len(out)} is cut short at byte {pos}")
        size, _, _, flag, body_len = _INNER_HEAD.unpack_from(view, pos)
        at = pos + _INNER_HEAD.size
        if body_len < 0 or at + body_len + 2 > len(view):
            raise CorruptionError(f"{where}: inner message {len(out)} body of {body_len} bytes "
                                  f"does not fit the batch")
        (props_len,) = struct.unpack_from(">h", view, at + body_len)
        end = at + body_len + 2 + props_len
        if props_len < 0 or end > len(view) or size != end - pos:
            raise CorruptionError(f"{where}: inner message {len(out)} size {size} does not match "
                                  f"its parts ({end - pos} bytes)")
        out.append((size, flag, view[at:at + body_len], bytes(view[at + body_len + 2:end])))
        pos = end
    return out


def inner_num(msg: StoredMessage) -> int:
    """INNER_NUM of an inner-batch record (CorruptionError when missing or not a number)."""
    text = msg.properties.get(PROPERTY_INNER_NUM, "")
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise CorruptionError(f"the inner batch at CommitLog offset {msg.commitlog_offset} has "
                              f"INNER_NUM {text!r}")
    return n


def unwrap(msg: StoredMessage) -> list[StoredMessage]:
    """The messages a consumer gets from an inner-batch record, at queue offsets
    QUEUEOFFSET + i; CorruptionError when the body does not hold exactly INNER_NUM of them."""
    where = f"the inner batch at CommitLog offset {msg.commitlog_offset}"
    parts = inner_parts(msg.body, where)
    n = inner_num(msg)
    if len(parts) != n:
        raise CorruptionError(f"{where} holds {len(parts)} messages, INNER_NUM says {n}")
    return [StoredMessage(msg.total_size, msg.magic, 0, msg.queue_id, flag, msg.queue_offset + i,
                          msg.commitlog_offset, msg.sys_flag, msg.born_timestamp, msg.born_host_raw,
                          msg.store_timestamp, msg.store_host_raw, 0, 0, body, msg.topic, props)
            for i, (_, flag, body, props) in enumerate(parts)]


def served(msg: StoredMessage, topic: str, queue_id: int, queue_offset: int) -> StoredMessage | None:
    """The message a consumer of topic/queue_id gets at queue_offset from this inner-batch
    record, or None when the record does not hold that offset (CorruptionError when it
    should and cannot be unwrapped)."""
    if not is_inner_batch(msg.sys_flag) or (msg.topic, msg.queue_id) != (topic, queue_id):
        return None
    i = queue_offset - msg.queue_offset
    if i < 0 or i >= inner_num(msg):
        return None
    return unwrap(msg)[i]
