"""Encode and decode whole CommitLog records, byte for byte as Apache RocketMQ writes them: the
scalar reference that store/format/layout.py's columnar walker must agree with (tests/store/test_layout.py).

Layout (big-endian; docs/format.md, "CommitLog record"; positions and sizes in store/format/layout.py):
TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP
BORNHOST(8|20) STORETIMESTAMP STOREHOST(8|20) RECONSUMETIMES PREPAREDTXOFFSET BODYLEN BODY
TOPICLEN(1|2) TOPIC PROPERTIESLEN PROPERTIES
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from itertools import chain
from operator import attrgetter, itemgetter

from ..errors import CodecError, InvalidMessage
from ..slotted import Slotted
from .compiled import records as compiled_records
from .compression import COMPRESSED_FLAG, put_refusal
from .flavor import CRC_MASK, Flavor
from .layout import (
    BORN_HOST_POS,
    BORNHOST_V6_FLAG,
    CRC_HEAD,
    HEADER_V4_SIZE,
    HOST_V6_FLAGS,
    IPV4_HOST_LEN,
    IPV6_HOST_LEN,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    PHYSICAL_OFFSET_POS,
    QUEUE_OFFSET_POS,
    RECORD_CRC_LEN,
    STOREHOST_V6_FLAG,
    TRANSACTION_ROLLBACK,
    body_pos,
    born_host_len,
    indexed,
    store_host_len,
    store_timestamp_pos,
)
from .message import (
    FILLER_TOPIC,
    I16,
    I32,
    I64,
    MAX_PROPERTIES_LEN,
    MAX_TOPIC_LEN,
    NAME_VALUE_SEP,
    PROPERTY_CRC32,
    PROPERTY_SEP,
    QUEUE_ID_LIMIT,
    Message,
    StoredMessage,
    decode_properties,
    encode_host,
    encode_properties,
    not_text,
    separator_refusal,
    validate_topic,
)

TYPE_CHECKING = False  # mypy alone reads these: importing typing is ~6% of a tag selection
if TYPE_CHECKING:
    from typing import Any

    import numpy as np

_CRC_PLACEHOLDER = CRC_HEAD + b"0" * 10 + b"\x02"


_HEAD = struct.Struct(">iiiiiqqiq")  # up to and including BORNTIMESTAMP (48 bytes)


_TAIL = struct.Struct(">iqi")  # RECONSUMETIMES, PREPAREDTXOFFSET, BODYLEN


_OFFSETS = struct.Struct(">qq")  # QUEUEOFFSET and PHYSICALOFFSET, adjacent in every record


assert PHYSICAL_OFFSET_POS == QUEUE_OFFSET_POS + 8


def crc_digits(value: int) -> bytes:
    """The ten ASCII digits RocketMQ writes for a checksum: least significant first,
    zero-padded on the right (123 -> b"3210000000")."""
    return (b"%010d" % value)[::-1]


def record_crc_of(view, pos: int, total: int) -> int | None:
    """The checksum a record's `__CRC32#` trailer holds, or None when it has none."""
    end = pos + total
    if total < MIN_RECORD_SIZE + RECORD_CRC_LEN or bytes(view[end - RECORD_CRC_LEN : end - 11]) != CRC_HEAD \
            or view[end - 1] != 2:
        return None
    digits = bytes(view[end - 11 : end - 1])
    if not digits.isdigit():
        return None
    return int(digits[::-1])


def seal(rec: bytearray, flavor: Flavor) -> None:
    """Write the whole-record checksum into the trailer the encoder reserved: the flavor's
    checksum of every byte before it, taken after the store stamped its fields."""
    n = len(rec) - RECORD_CRC_LEN
    rec[n + 9 : n + 19] = crc_digits(flavor.crc_unmasked(memoryview(rec)[:n]) & CRC_MASK)


class Encoder:
    """Builds records for one store: fixed store host, flavor and size limit.

    The hot path of every put: the fixed part of the header is packed in one struct call
    and topic validation is cached per topic name.
    """

    def __init__(self, flavor: Flavor, store_host: tuple[str, int], max_message_size: int):
        self.flavor = flavor
        self.store_host_raw, self.store_v6 = encode_host(*store_host)
        self.max_message_size = max_message_size
        self._topics: dict[str, bytes] = {}
        self._layouts: dict[tuple[int, int], struct.Struct] = {}
        self._born: dict[tuple[str, int], tuple[bytes, int, struct.Struct, int]] = {}
        self._crc_unmasked = flavor.crc_unmasked
        self._crc_tail = _CRC_PLACEHOLDER if flavor.record_crc else b""
        self._no_props = I16.pack(len(self._crc_tail)) + self._crc_tail
        # the C twin (store/format/_records.c), sharing the caches above; it declines (None)
        # whatever it does not encode exactly as this class does, which then runs
        self.compiled: Any = None
        xx = {"xxhash": True, "rocketmq": False}.get(flavor.name)  # its checksum, as the C dispatch picks its hash
        if compiled_records is not None and xx is not None:
            self.compiled = compiled_records.Codec(
                self.store_host_raw, max_message_size, xx, flavor.record_crc, self._topics,
                self._born, self._topic_part, self._hosts)
            self._compiled_encode = self.compiled.encode
            self.encode = self._encode_compiled  # type: ignore[method-assign]

    def _encode_compiled(self, msg: Message) -> tuple[bytearray, int]:
        return self._compiled_encode(msg) or Encoder.encode(self, msg)

    def _topic_part(self, topic: str) -> bytes:
        """TOPICLEN + TOPIC bytes, validated once per topic name."""
        part = self._topics.get(topic)
        if part is None:
            validate_topic(topic)
            raw = topic.encode("ascii")
            part = (I16.pack(len(raw)) if len(raw) > MAX_TOPIC_LEN else bytes([len(raw)])) + raw
            if len(self._topics) < 100_000:
                self._topics[topic] = part
        return part

    def _layout(self, born_len: int) -> struct.Struct:
        """Header struct from TOTALSIZE to BODYLEN for a born-host width."""
        key = (born_len, len(self.store_host_raw))
        st = self._layouts.get(key)
        if st is None:
            st = self._layouts[key] = struct.Struct(
                f">iiiiiqqiq{born_len}sq{len(self.store_host_raw)}siqi")
        return st

    def _hosts(self, born_host: tuple[str, int]) -> tuple[bytes, int, struct.Struct, int]:
        """(BORNHOST bytes, SYSFLAG host bits, header struct, STORETIMESTAMP position) for a
        born host: computed once per host, as most messages come from a few."""
        found = self._born.get(born_host)
        if found is None:
            born_raw, born_v6 = encode_host(*born_host)
            bits = (BORNHOST_V6_FLAG if born_v6 else 0) | (STOREHOST_V6_FLAG if self.store_v6 else 0)
            found = (born_raw, bits, self._layout(len(born_raw)), store_timestamp_pos(len(born_raw)))
            if len(self._born) < 10_000:
                self._born[born_host] = found
        return found

    def _properties(self, props: dict[str, str]) -> bytes:
        """PROPERTIESLEN and PROPERTIES, with the checksum trailer the flavor wants (its
        digits still zero)."""
        if not props:
            return self._no_props
        if PROPERTY_CRC32 in props:
            raise _reserved_name()
        raw = encode_properties(props)
        # sought again in the text encoded (each of whose items holds one separator): a dict
        # that hides the name, or a thread that adds it meanwhile, is refused too
        if raw.startswith(_CRC_ITEM[1:]) or _CRC_ITEM in raw:
            raise _reserved_name()
        raw += self._crc_tail
        if len(raw) > MAX_PROPERTIES_LEN:
            raise InvalidMessage(f"properties are {len(raw)} bytes, the limit is {MAX_PROPERTIES_LEN}")
        return I16.pack(len(raw)) + raw

    def encode(self, msg: Message) -> tuple[bytearray, int]:
        """The record with QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP still zero, and the
        position of STORETIMESTAMP (it moves with the born host's width). Every put runs
        this: cached topic and host parts, one pack for the fixed fields."""
        body = msg.body
        body_len = len(body)
        if body_len > self.max_message_size:
            raise InvalidMessage(f"message body is {body_len} bytes, the limit is {self.max_message_size}")
        queue_id = msg.queue_id
        if not 0 <= queue_id < QUEUE_ID_LIMIT or queue_id.__class__ is bool:
            raise InvalidMessage(_bad_queue_id(queue_id))
        topic = msg.topic
        tail = (self._topics.get(topic) or self._topic_part(topic)) + self._properties(msg.properties)
        born_raw, host_bits, head, ts_pos = self._born.get(msg.born_host) or self._hosts(msg.born_host)
        try:
            rec = bytearray(head.pack(
                head.size + body_len + len(tail), MAGIC_V1 if len(topic) <= MAX_TOPIC_LEN else MAGIC_V2,
                self._crc_unmasked(body) & CRC_MASK, queue_id, msg.flag, 0, 0,
                (msg.sys_flag & ~HOST_V6_FLAGS) | host_bits, msg.born_timestamp or time.time_ns() // 1_000_000,
                born_raw, 0, self.store_host_raw, msg.reconsume_times, msg.prepared_transaction_offset,
                body_len))
        except (struct.error, TypeError):
            raise InvalidMessage(_bad_field(msg)) from None
        rec += body
        if msg.sys_flag & COMPRESSED_FLAG:  # checked on the bytes the record holds
            _check_inflates(rec[head.size:], msg.sys_flag)
        rec += tail
        return rec, ts_pos

    def encode_batch(self, msgs: list[Message]) -> EncodedBatch | CompiledBatch | None:
        """Validate and lay out many records at once: in C when the compiled encoder takes
        the batch, else with C-level maps and numpy rather
        than Python code per message: the fixed header fields as one numpy array, the
        properties of the whole batch as one text. None when a host is IPv6 or a topic
        needs a v2 record (other header widths): the caller encodes those one by one.
        Raises InvalidMessage, naming the first bad message's problem, before anything
        is written."""
        import numpy as np

        from .columnar import HEADER_V4

        if self.compiled is not None:
            found = self.compiled.encode_batch(msgs)
            if found is not None:
                buf, layout, topics, *columns, delays = found
                queue_id, sys_flag, tags_codes, key_rows, key_hashes = (
                    np.frombuffer(c, dtype=np.int64) for c in columns)
                return CompiledBatch(buf, layout, topics, queue_id, sys_flag, tags_codes, key_rows,
                                     key_hashes, delays, self.compiled.place_run)
        if self.store_v6:
            return None
        n = len(msgs)
        (topics, bodies, qids, props, flags, sys_flags, born_ts, born_hosts, reconsume,
         prepared) = (list(map(field_of, msgs)) for field_of in _MESSAGE_FIELDS)
        hosts = {h: self._hosts(h) for h in set(born_hosts)}
        topic_parts = {t: self._topics.get(t) or self._topic_part(t) for t in set(topics)}
        if any(bits for _, bits, _, _ in hosts.values()) or \
                max(map(len, topic_parts.values())) > MAX_TOPIC_LEN + 1:
            return None  # IPv6 hosts or a v2 record (long topic): rare, encoded one by one
        body_len = np.fromiter(map(len, bodies), dtype=np.int64, count=n)
        if body_len.max() > self.max_message_size:
            raise InvalidMessage(f"message body is {body_len.max()} bytes, the limit is "
                                 f"{self.max_message_size}")
        if any(isinstance(q, bool) for q in qids):
            raise InvalidMessage(_bad_queue_id(True))
        queue_id = _int_column(qids, "queue id")
        if ((queue_id < 0) | (queue_id >= QUEUE_ID_LIMIT)).any():
            raise InvalidMessage(f"queue id {queue_id[(queue_id < 0) | (queue_id >= QUEUE_ID_LIMIT)][0]} "
                                 "is out of range")
        props_raw, props_len, props = self._batch_properties(props)
        parts = list(map(topic_parts.__getitem__, topics))
        head = np.zeros(n, dtype=HEADER_V4)
        head["total"] = (HEADER_V4_SIZE + 2 + body_len + props_len
                         + np.fromiter(map(len, parts), dtype=np.int64, count=n))
        head["magic"] = MAGIC_V1
        try:
            crcs = np.fromiter(map(self.flavor.crc_unmasked, bodies), dtype=np.int64, count=n)
        except TypeError:
            if any(isinstance(b, str) for b in bodies):
                raise InvalidMessage(_STR_BODY) from None
            raise
        head["body_crc"] = crcs & CRC_MASK
        head["queue_id"] = queue_id
        sys_flag = _int_column(sys_flags, "sysflag", 32) & ~HOST_V6_FLAGS
        head["sys_flag"] = sys_flag
        for i in np.flatnonzero(sys_flag & COMPRESSED_FLAG).tolist():
            _check_inflates(bodies[i], int(sys_flag[i]))
        born = _int_column(born_ts, "born timestamp")
        if not all(born_ts):
            born[born == 0] = time.time_ns() // 1_000_000
        head["born_ts"] = born
        head["born_host"] = [hosts[h][0] for h in born_hosts] if len(hosts) > 1 else \
            hosts[born_hosts[0]][0]
        head["store_host"] = self.store_host_raw
        for name, values, what, bits in (("flag", flags, "flag", 32),
                                         ("reconsume", reconsume, "reconsume times", 32),
                                         ("prepared", prepared, "prepared transaction offset", 64)):
            if any(values):  # mostly all zeros, as np.zeros left them
                head[name] = _int_column(values, what, bits)
        head["body_len"] = body_len
        lens = props_len.astype(">u2").view("V2").tolist()
        return EncodedBatch(head, list(bodies), list(map(bytes.__add__, parts, lens)), props_raw,
                            self._crc_tail, self.flavor, topics, queue_id, sys_flag, props)

    def _batch_properties(self, props: list[dict[str, str]]
                          ) -> tuple[list[bytes], np.ndarray, list[dict[str, str]]]:
        """PROPERTIES of every message (each with the checksum trailer the flavor wants),
        their lengths and the properties they were encoded from (copies: dispatch reads the
        keys and tags the records hold): one text for the batch, checked and encoded once,
        then cut apart."""
        import numpy as np

        # one snapshot of every dict, counted and encoded: another thread or a name's hook
        # may change them while this runs, and counts from another moment cut records wrong
        snaps = [list(p.items()) for p in props]
        counts = np.fromiter(map(len, snaps), dtype=np.int64, count=len(snaps))
        pairs = list(chain.from_iterable(snaps))
        if PROPERTY_CRC32 in set(map(itemgetter(0), pairs)):  # by hash, as a dict looks
            raise _reserved_name()
        try:
            items = list(map(NAME_VALUE_SEP.join, pairs))
        except TypeError:  # a name or value that is not text: refused, as encode() does
            raise not_text(pairs) from None
        text = PROPERTY_SEP.join(items) + PROPERTY_SEP if items else ""
        if text.count(NAME_VALUE_SEP) != len(items) or text.count(PROPERTY_SEP) != len(items):
            raise separator_refusal(items, pairs)
        try:
            raw = text.encode("utf-8")
            item_len = np.fromiter(map(len, items if text.isascii() else map(str.encode, items)),
                                   dtype=np.int64, count=len(items)) + 1
        except UnicodeEncodeError as exc:
            raise InvalidMessage(f"a property is not valid text: {exc.reason}") from None
        ends = np.cumsum(item_len)
        last = np.cumsum(counts)  # items of message i end before item last[i]
        stop = np.where(last > 0, ends[np.maximum(last - 1, 0)] if len(ends) else 0, 0)
        start = np.append(0, stop[:-1])
        props_len = stop - start + len(self._crc_tail)
        if props_len.max(initial=0) > MAX_PROPERTIES_LEN:
            raise InvalidMessage(f"properties are {props_len.max()} bytes, the limit is {MAX_PROPERTIES_LEN}")
        return list(map(raw.__getitem__, map(slice, start.tolist(), stop.tolist()))), props_len, \
            list(map(dict, snaps))


_STR_BODY = "message body must be bytes, not str"
_CRC_ITEM = (PROPERTY_SEP + PROPERTY_CRC32 + NAME_VALUE_SEP).encode()  # the reserved name as an item


def _reserved_name() -> InvalidMessage:
    """The one refusal of a message that names the record's checksum property itself."""
    return InvalidMessage(f"property {PROPERTY_CRC32!r} is reserved for the checksum")


def _check_inflates(body, sys_flag: int) -> None:
    """InvalidMessage for a body SYSFLAG calls compressed that does not inflate (the C
    encoders decline every compressed message, so this is the one check on every put path)."""
    refusal = put_refusal(body, sys_flag)
    if refusal is not None:
        raise InvalidMessage(refusal)


def _bad_queue_id(queue_id: int) -> str:
    """A bool is an int to Python but not a queue id: True would name queue 1 in the record
    and a directory "True" on disk."""
    if queue_id.__class__ is bool:
        return f"queue id {queue_id} is not an integer"
    return f"queue id {queue_id} is out of range"


def _int_column(values: list[int], what: str, bits: int = 64) -> np.ndarray:
    """A message field of the whole batch as int64; InvalidMessage for one that does not fit
    the record's `bits`-bit field."""
    import numpy as np

    try:
        column = np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, ValueError, OverflowError):
        raise InvalidMessage(f"a message's {what} is not a 64-bit integer") from None
    if bits < 64 and ((column < -(1 << bits - 1)) | (column >= 1 << bits - 1)).any():
        raise InvalidMessage(f"a message's {what} is not a {bits}-bit integer")
    return column


# the header fields a producer sets, with the width of each in the record
_FIELD_BITS = (("flag", "flag", 32), ("sys_flag", "sysflag", 32),
               ("born_timestamp", "born timestamp", 64), ("reconsume_times", "reconsume times", 32),
               ("prepared_transaction_offset", "prepared transaction offset", 64))


def _bad_field(msg: Message) -> str:
    """What is wrong with the header field of `msg` that did not pack (or with its body, whose
    checksum is packed with them)."""
    if isinstance(msg.body, str):
        return _STR_BODY
    for attr, what, bits in _FIELD_BITS:
        value = getattr(msg, attr)
        if not isinstance(value, int) or not -(1 << bits - 1) <= value < 1 << bits - 1:
            return f"a message's {what} is not a {bits}-bit integer: {value!r}"
    return "a message's header fields are not integers of the record's widths"


# one getter per field, each mapped over the batch: a column per pass reads the messages
# faster than one tuple per message transposed (a batch's messages are seldom in cache)
_MESSAGE_FIELDS = tuple(map(attrgetter, (
    "topic", "body", "queue_id", "properties", "flag", "sys_flag", "born_timestamp", "born_host",
    "reconsume_times", "prepared_transaction_offset")))


class EncodedBatch(Slotted):
    """Records of a batch before the store places them: header fields in `head` (stamp
    QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP there), then `records` joins and seals them.
    The messages' topics, queue ids, sysflags and properties come along for dispatch."""

    __slots__ = __match_args__ = ("head", "bodies", "lengths", "props", "crc_tail", "flavor",
                                  "topics", "queue_id", "sys_flag", "properties")

    def __init__(self, head: np.ndarray, bodies: list[bytes], lengths: list[bytes],
                 props: list[bytes], crc_tail: bytes, flavor: Flavor, topics: list[str],
                 queue_id: np.ndarray, sys_flag: np.ndarray,
                 properties: list[dict[str, str]]) -> None:
        self.head = head
        self.bodies = bodies
        self.lengths = lengths  # TOPICLEN, TOPIC and PROPERTIESLEN of each record
        self.props = props  # PROPERTIES of each record, without the checksum trailer
        self.crc_tail = crc_tail  # the checksum trailer every record ends in (digits zero), or b""
        self.flavor = flavor
        self.topics = topics
        self.queue_id = queue_id
        self.sys_flag = sys_flag
        self.properties = properties

    @property
    def sizes(self) -> np.ndarray:
        """Each record's size (int64)."""
        import numpy as np

        return self.head["total"].astype(np.int64)

    def placed(self, lo: int, hi: int, queue_offsets: np.ndarray, commitlog_offsets: np.ndarray,
               store_ts: int) -> bytearray:
        """Records lo..hi-1 stamped (offsets indexed like the batch) and sealed, as one buffer."""
        head = self.head[lo:hi]
        head["queue_offset"] = queue_offsets[lo:hi]
        head["commitlog_offset"] = commitlog_offsets[lo:hi]
        head["store_ts"] = store_ts
        return self.records(lo, hi)

    def records(self, lo: int, hi: int) -> bytearray:
        """Records lo..hi-1 as one buffer, each with its whole-record checksum when the
        flavor wants one: the parts of every record interleaved and joined in one call,
        the checksums mapped over the joined buffer, their digits written with numpy
        (as `seal` writes them one by one)."""
        import numpy as np

        m = hi - lo
        parts: list[bytes] = [self.crc_tail] * (5 * m)
        parts[0::5] = self.head[lo:hi].view(f"V{HEADER_V4_SIZE}").tolist()
        parts[1::5] = self.bodies[lo:hi]
        parts[2::5] = self.lengths[lo:hi]
        parts[3::5] = self.props[lo:hi]
        buf = bytearray().join(parts)
        if self.crc_tail:
            ends = np.cumsum(self.head["total"][lo:hi].astype(np.int64))
            starts = ends - self.head["total"][lo:hi]
            view = memoryview(buf)
            sums = self.flavor.checksums(view, starts.tolist(), (ends - RECORD_CRC_LEN).tolist())
            digits = (sums[:, None] // 10 ** np.arange(10, dtype=np.int64)) % 10 + 48
            u8 = np.frombuffer(buf, dtype=np.uint8)
            u8[(ends - 11)[:, None] + np.arange(10)] = digits
        return buf


class CompiledBatch(Slotted):
    """Records of a batch the C encoder laid out back to back in `buf`, with `layout`
    (start, size, STORETIMESTAMP position of each, native int64): EncodedBatch's interface
    for the store, stamped and sealed in C too. The columns come along for dispatch, with
    what it needs of the properties, read in C with the records (no dict is kept): each
    unit's tagsCode from TAGS, the index keys as (`key_rows`, `key_hashes`) in put order,
    and `delays`, each message's DELAY when a record is of the delay topic (else None)."""

    __slots__ = __match_args__ = ("buf", "layout", "topics", "queue_id", "sys_flag", "tags_codes",
                                  "key_rows", "key_hashes", "delays", "place_run")

    def __init__(self, buf: bytearray, layout: bytes, topics: list[str], queue_id: np.ndarray,
                 sys_flag: np.ndarray, tags_codes: np.ndarray, key_rows: np.ndarray,
                 key_hashes: np.ndarray, delays: list[str | None] | None,
                 place_run: Callable[..., None]) -> None:
        self.buf = buf
        self.layout = layout
        self.topics = topics
        self.queue_id = queue_id
        self.sys_flag = sys_flag
        self.tags_codes = tags_codes
        self.key_rows = key_rows
        self.key_hashes = key_hashes
        self.delays = delays
        self.place_run = place_run

    @property
    def sizes(self) -> np.ndarray:
        """Each record's size (int64, a copy: no Python int each)."""
        import numpy as np

        return np.frombuffer(self.layout, dtype=np.int64)[1::3].copy()

    def placed(self, lo: int, hi: int, queue_offsets: np.ndarray, commitlog_offsets: np.ndarray,
               store_ts: int) -> memoryview:
        """Records lo..hi-1 stamped (offsets indexed like the batch) and sealed, as one view."""
        import numpy as np

        if lo == hi:  # no record (a roll's empty run): no bytes
            return memoryview(self.buf)[:0]
        self.place_run(self.buf, self.layout, lo, hi, np.ascontiguousarray(queue_offsets, dtype=np.int64),
                       np.ascontiguousarray(commitlog_offsets, dtype=np.int64), store_ts)
        at = np.frombuffer(self.layout, dtype=np.int64)
        return memoryview(self.buf)[int(at[3 * lo]) : int(at[3 * (hi - 1)] + at[3 * (hi - 1) + 1])]


def stamp(rec: bytearray, store_ts_pos: int, queue_offset: int, commitlog_offset: int, store_ts: int) -> None:
    """Patch the three fields RocketMQ fills inside the put lock (QUEUEOFFSET and
    PHYSICALOFFSET are adjacent: one pack)."""
    _OFFSETS.pack_into(rec, QUEUE_OFFSET_POS, queue_offset, commitlog_offset)
    I64.pack_into(rec, store_ts_pos, store_ts)


def place(rec: bytearray, store_ts_pos: int, queue_offset: int, commitlog_offset: int,
          store_ts: int, record_crc: Callable[[memoryview], int] | None) -> None:
    """`stamp`, then `seal` with `record_crc` (the flavor's crc_unmasked; None: a flavor
    without the trailer), in one call: what every put does to its record under the lock."""
    _OFFSETS.pack_into(rec, QUEUE_OFFSET_POS, queue_offset, commitlog_offset)
    I64.pack_into(rec, store_ts_pos, store_ts)
    if record_crc is not None:
        n = len(rec) - RECORD_CRC_LEN
        rec[n + 9 : n + 19] = (b"%010d" % (record_crc(memoryview(rec)[:n]) & CRC_MASK))[::-1]


def peek_header(buf, pos: int) -> tuple[int, int]:
    """(TOTALSIZE, MAGIC) at pos, or CodecError when fewer than 8 bytes remain."""
    if len(buf) - pos < 8:
        raise CodecError(f"only {len(buf) - pos} bytes left at {pos}")
    return struct.unpack_from(">ii", buf, pos)


_FIXED_V4 = struct.Struct(">iiiiiqqiq8sq8siqi")  # both hosts IPv4: the common case


def decode(buf, pos: int = 0, flavor: Flavor | None = None,
           copy_body: bool = False) -> StoredMessage:
    """Decode the record at pos. With a flavor, verify the body checksum.

    Raises CodecError for anything that is not a whole, well-formed v1/v2 record,
    including a BLANK filler (callers check the magic first with peek_header).
    """
    view = memoryview(buf)
    try:
        avail = len(view) - pos
        (total, magic, crc, qid, flag, qoff, commitlog_offset, sys_flag, born_ts) = _HEAD.unpack_from(view, pos)
        if magic != MAGIC_V1 and magic != MAGIC_V2:
            raise CodecError(f"bad magic code 0x{magic & 0xFFFFFFFF:08X} at {pos}")
        if total < MIN_RECORD_SIZE or total > avail:
            raise CodecError(f"record size {total} at {pos} does not fit in {avail} bytes")
        if not sys_flag & HOST_V6_FLAGS:
            (_, _, _, _, _, _, _, _, _, born_raw, store_ts, store_raw, reconsume, prep,
             body_len) = _FIXED_V4.unpack_from(view, pos)
            p = pos + HEADER_V4_SIZE
        else:
            bh, sh = born_host_len(sys_flag), store_host_len(sys_flag)
            p = pos + BORN_HOST_POS
            born_raw = bytes(view[p : p + bh])
            p += bh
            (store_ts,) = I64.unpack_from(view, p)
            p += 8
            store_raw = bytes(view[p : p + sh])
            p += sh
            reconsume, prep, body_len = _TAIL.unpack_from(view, p)
            p += 16
        end = pos + total
        if body_len < 0 or p + body_len > end:
            raise CodecError(f"body length {body_len} at {pos} overruns the record")
        body = view[p : p + body_len]
        p += body_len
        if magic == MAGIC_V2:
            (topic_len,) = I16.unpack_from(view, p)
            p += 2
        else:
            topic_len = view[p]
            p += 1
        if topic_len <= 0 or p + topic_len > end:
            raise CodecError(f"topic length {topic_len} at {pos} overruns the record")
        topic = str(view[p : p + topic_len], "ascii")
        p += topic_len
        (props_len,) = I16.unpack_from(view, p)
        p += 2
        if props_len < 0 or p + props_len != end:
            raise CodecError(f"properties length {props_len} at {pos} does not end the record")
        props_raw = bytes(view[p : p + props_len])
        props = None
        if flavor is not None:
            check_record(view, pos, total, body, crc, flavor)
            props = decode_properties(props_raw)  # checked reads validate the properties too
    except CodecError:
        raise
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as exc:
        raise CodecError(f"malformed record at {pos}: {exc}") from None
    msg = StoredMessage(
        total, magic, crc, qid, flag, qoff, commitlog_offset, sys_flag, born_ts, born_raw, store_ts,
        store_raw, reconsume, prep, bytes(body) if copy_body else body, topic, props_raw,
    )
    msg._props = props  # what the check decoded is what `properties` gives: decoded once
    return msg


def verify(buf, pos: int, msg: StoredMessage, flavor: Flavor) -> None:
    """What `decode` with a flavor checks on top of a decode without one, for a record at pos
    decoded without it: its checksums and properties, with decode's CodecError. A reader that
    rules most records out by their fields decodes each once, and checks only those it keeps."""
    try:
        check_record(memoryview(buf), pos, msg.total_size, msg.stored_body, msg.body_crc, flavor)
        msg._props = decode_properties(msg._props_raw)
    except CodecError:
        raise
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as exc:
        raise CodecError(f"malformed record at {pos}: {exc}") from None


def check_record(view, pos: int, total: int, body, body_crc: int, flavor: Flavor) -> None:
    """The checksums of a well-formed record: its whole-record trailer when it has one (or
    must have one), otherwise its body checksum. CodecError on a mismatch."""
    stored = record_crc_of(view, pos, total)
    if stored is not None:
        if flavor.body_crc(view[pos : pos + total - RECORD_CRC_LEN]) != stored:
            raise CodecError(f"whole-record checksum mismatch at {pos}")
        return
    if flavor.record_crc:
        raise CodecError(f"record at {pos} has no whole-record checksum ({PROPERTY_CRC32})")
    if flavor.body_crc(body) != body_crc:
        raise CodecError(f"body checksum mismatch at {pos}")


def is_filler(topic: str, sys_flag: int) -> bool:
    """A record repair wrote over damaged bytes: readers skip it."""
    return (not indexed(sys_flag) and topic.startswith("%")
            and FILLER_TOPIC.startswith(topic))


def _filler_fixed(store_host: bytes, flavor: Flavor) -> int:
    """A filler record's bytes but its topic and body (v1, IPv4 born host)."""
    return body_pos(IPV4_HOST_LEN, len(store_host)) + 1 + 2 + len(_CRC_PLACEHOLDER if flavor.record_crc else b"")


def smallest_filler(store_host: bytes, flavor: Flavor) -> int:
    """The fewest bytes a filler record takes: a one-letter topic, no body."""
    return _filler_fixed(store_host, flavor) + 1


def filler_record(size: int, commitlog_offset: int, store_ts: int, store_host: bytes, flavor: Flavor
                  ) -> bytearray:
    """A record of exactly `size` bytes at `commitlog_offset` to stand where damaged bytes were: a
    rolled-back transaction on the reserved topic, body of zeros. The topic is cut short for
    a small range (the smallest record repair meets is a one-letter topic with no body)."""
    props = _CRC_PLACEHOLDER if flavor.record_crc else b""
    fixed = _filler_fixed(store_host, flavor)
    topic = FILLER_TOPIC[: max(1, min(len(FILLER_TOPIC), size - fixed))].encode("ascii")
    body_len = size - fixed - len(topic)
    if body_len < 0:
        raise InvalidMessage(f"a damaged range of {size} bytes is too small for a filler record")
    body = bytes(body_len)
    v6 = len(store_host) == IPV6_HOST_LEN
    fixed_part = struct.Struct(f">iiiiiqqiq8sq{len(store_host)}siqi")
    rec = bytearray(fixed_part.pack(
        size, MAGIC_V1, flavor.body_crc(body), 0, 0, 0, commitlog_offset,
        TRANSACTION_ROLLBACK | (STOREHOST_V6_FLAG if v6 else 0), store_ts,
        bytes(4) + I32.pack(0), store_ts, store_host, 0, 0, body_len))
    rec += body
    rec += bytes([len(topic)]) + topic
    rec += I16.pack(len(props)) + props
    if flavor.record_crc:
        seal(rec, flavor)
    return rec
