"""Encode and decode CommitLog records, byte for byte as Apache RocketMQ writes them: the
scalar reference that store/layout.py's columnar walker must agree with (tests/test_layout.py).

Layout (big-endian; docs/format.md, "CommitLog record"; positions and sizes in store/layout.py):
TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP
BORNHOST(8|20) STORETIMESTAMP STOREHOST(8|20) RECONSUMETIMES PREPAREDTXOFFSET BODYLEN BODY
TOPICLEN(1|2) TOPIC PROPERTIESLEN PROPERTIES
"""

from __future__ import annotations

import ipaddress
import re
import struct
import time
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import chain, repeat
from operator import attrgetter

import numpy as np

from ..errors import CodecError, InvalidMessage
from .flavor import CRC_MASK, Flavor
from .layout import (
    BORN_HOST_POS,
    BORNHOST_V6_FLAG,
    CRC_HEAD,
    HEADER_V4,
    HOST_V6_FLAGS,
    IPV4_HOST_LEN,
    IPV6_HOST_LEN,
    MAGIC_POS,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    PHYSICAL_OFFSET_POS,
    QUEUE_ID_POS,
    QUEUE_OFFSET_POS,
    RECORD_CRC_LEN,
    STOREHOST_V6_FLAG,
    SYSFLAG_POS,
    TOTALSIZE_POS,
    TRANSACTION_MASK,
    TRANSACTION_ROLLBACK,
    body_len_pos,
    body_pos,
    born_host_len,
    decode_host,
    gather,
    indexed,
    store_host_len,
    store_timestamp_pos,
)

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_DELAY = "DELAY"  # a delayed message's level (PROPERTY_DELAY_TIME_LEVEL)
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # where a broker keeps delayed messages until due
PROPERTY_CRC32 = "__CRC32#"  # RocketMQ 5's whole-record checksum trailer (enabledAppendPropCRC)
_CRC_PLACEHOLDER = CRC_HEAD + b"0" * 10 + b"\x02"
# Repair writes a filler record over bytes it could not read: a rolled-back transaction (no
# queue entry, not indexed, skipped by every reader) on a reserved topic
FILLER_TOPIC = "%DAMAGED"
NAME_VALUE_SEP = "\x01"
PROPERTY_SEP = "\x02"

MAX_PROPERTIES_LEN = 32767
MAX_TOPIC_LEN = 127
MAX_RETRY_TOPIC_LEN = 255
MAX_STORED_TOPIC_LEN = 32767  # a v2 record's TOPICLEN is an int16
NAME_MAX = 255  # bytes in a file name: a topic longer has no consumequeue/<topic> directory
DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024
_QUEUE_ID_LIMIT = 1 << 31

_TOPIC_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]+")
_HEAD = struct.Struct(">iiiiiqqiq")  # up to and including BORNTIMESTAMP (48 bytes)
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")
_TAIL = struct.Struct(">iqi")  # RECONSUMETIMES, PREPAREDTXOFFSET, BODYLEN
_OFFSETS = struct.Struct(">qq")  # QUEUEOFFSET and PHYSICALOFFSET, adjacent in every record
assert PHYSICAL_OFFSET_POS == QUEUE_OFFSET_POS + 8


def validate_topic(topic: str) -> None:
    """Refuse names for new topics that Apache RocketMQ refuses (TopicValidator rules)."""
    validate_stored_topic(topic)
    limit = MAX_RETRY_TOPIC_LEN if topic.startswith("%RETRY%") else MAX_TOPIC_LEN
    if len(topic) > limit:
        raise InvalidMessage(f"topic name is {len(topic)} characters, the limit is {limit}")


def validate_stored_topic(topic: str) -> None:
    """Refuse a topic name no broker writes: bad characters (the broker checks them on every
    put) or longer than a v2 record's TOPICLEN holds. A broker configured for longer topics
    writes them with the v2 magic: a store holding one is read, not refused."""
    if not topic:
        raise InvalidMessage("topic name is empty")
    if not _TOPIC_PATTERN.fullmatch(topic):
        raise InvalidMessage(f"topic {topic!r} has characters other than letters, digits, %|_-")
    if len(topic) > MAX_STORED_TOPIC_LEN:
        raise InvalidMessage(f"topic name is {len(topic)} characters, a record holds {MAX_STORED_TOPIC_LEN}")
    if topic.startswith("%") and FILLER_TOPIC.startswith(topic):
        raise InvalidMessage(f"topic name {topic!r} is reserved for damaged ranges")


@lru_cache(maxsize=256)
def encode_host(host: str, port: int) -> tuple[bytes, bool]:
    """Address bytes plus an int32 port; True when the address is IPv6. InvalidMessage for
    what is no IP address and port."""
    try:
        addr = ipaddress.ip_address(host)
        return addr.packed + _I32.pack(port), addr.version == 6
    except (ValueError, TypeError, struct.error):
        raise InvalidMessage(f"born host {host!r}:{port!r} is not an IP address and a port") \
            from None


def parse_host(text: str) -> tuple[str, int]:
    """'1.2.3.4:10911' or '[::1]:10911' -> (host, port)."""
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def encode_properties(props: dict[str, str]) -> bytes:
    """PROPERTIES as RocketMQ writes them; InvalidMessage for a name or value holding a
    separator or text that is not valid UTF-8 (a lone surrogate)."""
    if not props:
        return b""
    text = "".join([f"{k}\x01{v}\x02" for k, v in props.items()])
    n = len(props)
    if text.count(NAME_VALUE_SEP) != n or text.count(PROPERTY_SEP) != n:
        bad = [k for k, v in props.items() if set(f"{k}{v}") & {NAME_VALUE_SEP, PROPERTY_SEP}]
        raise InvalidMessage(f"property {bad[0]!r} contains a \\x01 or \\x02 separator byte")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidMessage(f"a property is not valid text: {exc.reason}") from None


def decode_properties(raw: bytes | memoryview, with_crc: bool = False) -> dict[str, str]:
    """string2messageProperties: drops empty keys and empty values, tolerates no trailing 0x02.
    The `__CRC32#` trailer is the record's checksum, not the message's: kept `with_crc`."""
    props: dict[str, str] = {}
    text = bytes(raw).decode("utf-8")
    for item in text.split(PROPERTY_SEP):
        key, sep, value = item.partition(NAME_VALUE_SEP)
        if sep and key and value:
            props[key] = value
    if not with_crc:
        props.pop(PROPERTY_CRC32, None)
    return props


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


def join_keys(keys: list[str] | tuple[str, ...]) -> str:
    """KEYS: the keys joined by spaces, so none may be empty or hold a space (checked on
    the joined text, which has one space fewer than keys exactly when none does)."""
    try:
        text = " ".join(keys)
        if text.count(" ") == len(keys) - 1 and "" not in keys:
            return text
    except TypeError:  # a key that is not text: the loop says which
        pass
    for k in keys:
        if not k or " " in k:
            raise InvalidMessage(f"message key {k!r} is empty or contains a space")
    return " ".join(keys)


def msg_id(store_host: bytes, commitlog_offset: int) -> str:
    """offsetMsgId: store host bytes, int32 port, int64 commitlog offset, upper-case hex."""
    return (store_host + _I64.pack(commitlog_offset)).hex().upper()


def parse_msg_id(text: str) -> tuple[str, int, int]:
    """offsetMsgId -> (store host, port, commitlog offset); CodecError when malformed."""
    if len(text) not in (32, 56):
        raise CodecError(f"message id {text!r} is not 32 or 56 hex digits")
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raise CodecError(f"message id {text!r} is not hexadecimal") from None
    host, port = decode_host(raw[:-8])
    return host, port, _I64.unpack(raw[-8:])[0]


def keys_to_index(uniq: str | None, keys: list[str]) -> list[str]:
    """What the IndexFile indexes for a message, in RocketMQ's order: UNIQ_KEY, then every
    KEYS token."""
    return [uniq, *keys] if uniq else list(keys)


class _WellKnownProperties:
    """KEYS and TAGS read from a `properties` mapping, for producer and stored messages."""

    __slots__ = ()
    properties: dict[str, str]

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get(PROPERTY_KEYS, "").split(" ") if k]

    @property
    def tags(self) -> str:
        return self.properties.get(PROPERTY_TAGS, "")

    def index_keys(self) -> list[str]:
        return keys_to_index(self.properties.get(PROPERTY_UNIQ_KEY), self.keys)


@dataclass
class Message(_WellKnownProperties):
    """A message as a producer hands it to the store."""

    topic: str
    body: bytes
    queue_id: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @classmethod
    def create(
        cls,
        topic: str,
        body: bytes,
        queue_id: int = 0,
        keys: list[str] | tuple[str, ...] = (),
        tags: str | None = None,
        properties: dict[str, str] | None = None,
        **fields,
    ) -> Message:
        props = dict(properties) if properties else {}
        if keys:
            props[PROPERTY_KEYS] = join_keys(keys)
        if tags:
            props[PROPERTY_TAGS] = tags
        if fields:
            return cls(topic, body, queue_id, props, **fields)
        return cls(topic, body, queue_id, props)  # a call without ** is a third cheaper


class StoredMessage(_WellKnownProperties):
    """A record decoded from the CommitLog. Hosts and properties are decoded on first use:
    most reads (cat of a message, a ConsumeQueue check) never look at them."""

    __slots__ = ("total_size", "magic", "body_crc", "queue_id", "flag", "queue_offset",
                 "commitlog_offset", "sys_flag", "born_timestamp", "store_timestamp",
                 "reconsume_times", "prepared_transaction_offset", "body", "topic",
                 "born_host_raw", "store_host_raw", "_props_raw", "_props")

    def __init__(self, total_size: int, magic: int, body_crc: int, queue_id: int, flag: int,
                 queue_offset: int, commitlog_offset: int, sys_flag: int, born_timestamp: int,
                 born_host_raw: bytes, store_timestamp: int, store_host_raw: bytes,
                 reconsume_times: int, prepared_transaction_offset: int,
                 body: bytes | memoryview, topic: str, props_raw: bytes):
        self.total_size = total_size
        self.magic = magic
        self.body_crc = body_crc
        self.queue_id = queue_id
        self.flag = flag
        self.queue_offset = queue_offset
        self.commitlog_offset = commitlog_offset
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host_raw = born_host_raw
        self.store_timestamp = store_timestamp
        self.store_host_raw = store_host_raw
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.body = body
        self.topic = topic
        self._props_raw = props_raw
        self._props: dict[str, str] | None = None

    def __repr__(self) -> str:
        return (f"StoredMessage({self.topic}/{self.queue_id}/{self.queue_offset} "
                f"@{self.commitlog_offset}, {len(self.body)} bytes)")

    @property
    def born_host(self) -> tuple[str, int]:
        return decode_host(self.born_host_raw)

    @property
    def store_host(self) -> tuple[str, int]:
        return decode_host(self.store_host_raw)

    @property
    def properties(self) -> dict[str, str]:  # type: ignore[override]  # read-only, decoded late
        if self._props is None:
            try:
                self._props = decode_properties(self._props_raw)
            except UnicodeDecodeError:
                raise CodecError(f"properties of the record at {self.commitlog_offset} are not "
                                 "UTF-8") from None
        return self._props

    @property
    def stored_properties(self) -> dict[str, str]:
        """The properties as RocketMQ's own read shows them: `__CRC32#` (the record's
        checksum trailer, ten digits) included when the record has one."""
        return decode_properties(self._props_raw, with_crc=True)

    @property
    def msg_id(self) -> str:
        return msg_id(self.store_host_raw, self.commitlog_offset)

    @property
    def transaction_type(self) -> int:
        return self.sys_flag & TRANSACTION_MASK


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
        self._no_props = _I16.pack(len(self._crc_tail)) + self._crc_tail

    def _topic_part(self, topic: str) -> bytes:
        """TOPICLEN + TOPIC bytes, validated once per topic name."""
        part = self._topics.get(topic)
        if part is None:
            validate_topic(topic)
            raw = topic.encode("ascii")
            part = (_I16.pack(len(raw)) if len(raw) > MAX_TOPIC_LEN else bytes([len(raw)])) + raw
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
            raise InvalidMessage(f"property {PROPERTY_CRC32!r} is reserved for the checksum")
        raw = encode_properties(props) + self._crc_tail
        if len(raw) > MAX_PROPERTIES_LEN:
            raise InvalidMessage(f"properties are {len(raw)} bytes, the limit is {MAX_PROPERTIES_LEN}")
        return _I16.pack(len(raw)) + raw

    def encode(self, msg: Message) -> tuple[bytearray, int]:
        """The record with QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP still zero, and the
        position of STORETIMESTAMP (it moves with the born host's width). Every put runs
        this: cached topic and host parts, one pack for the fixed fields."""
        body = msg.body
        body_len = len(body)
        if body_len > self.max_message_size:
            raise InvalidMessage(f"message body is {body_len} bytes, the limit is {self.max_message_size}")
        queue_id = msg.queue_id
        if not 0 <= queue_id < _QUEUE_ID_LIMIT:
            raise InvalidMessage(f"queue id {queue_id} is out of range")
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
        rec += tail
        return rec, ts_pos

    def encode_batch(self, msgs: list[Message]) -> EncodedBatch | None:
        """Validate and lay out many records at once, with C-level maps and numpy rather
        than Python code per message: the fixed header fields as one numpy array, the
        properties of the whole batch as one text. None when a host is IPv6 or a topic
        needs a v2 record (other header widths): the caller encodes those one by one.
        Raises InvalidMessage, naming the first bad message's problem, before anything
        is written."""
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
        queue_id = _int_column(qids, "queue id")
        if ((queue_id < 0) | (queue_id >= _QUEUE_ID_LIMIT)).any():
            raise InvalidMessage(f"queue id {queue_id[(queue_id < 0) | (queue_id >= _QUEUE_ID_LIMIT)][0]} "
                                 "is out of range")
        props_raw, props_len = self._batch_properties(props)
        parts = list(map(topic_parts.__getitem__, topics))
        head = np.zeros(n, dtype=HEADER_V4)
        head["total"] = (HEADER_V4.itemsize + 2 + body_len + props_len
                         + np.fromiter(map(len, parts), dtype=np.int64, count=n))
        head["magic"] = MAGIC_V1
        head["body_crc"] = np.fromiter(map(self.flavor.crc_unmasked, bodies), dtype=np.int64, count=n) & CRC_MASK
        head["queue_id"] = queue_id
        sys_flag = _int_column(sys_flags, "sysflag", 32) & ~HOST_V6_FLAGS
        head["sys_flag"] = sys_flag
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

    def _batch_properties(self, props: list[dict[str, str]]) -> tuple[list[bytes], np.ndarray]:
        """PROPERTIES of every message (each with the checksum trailer the flavor wants) and
        their lengths: one text for the batch, checked and encoded once, then cut apart."""
        counts = np.fromiter(map(len, props), dtype=np.int64, count=len(props))
        if any(map(dict.__contains__, props, repeat(PROPERTY_CRC32))):
            raise InvalidMessage(f"property {PROPERTY_CRC32!r} is reserved for the checksum")
        try:
            items = list(map(NAME_VALUE_SEP.join, chain.from_iterable(map(dict.items, props))))
        except TypeError:  # a name or value that is not text: formatted as encode() does
            items = [f"{k}{NAME_VALUE_SEP}{v}" for p in props for k, v in p.items()]
        text = PROPERTY_SEP.join(items) + PROPERTY_SEP if items else ""
        if text.count(NAME_VALUE_SEP) != len(items) or text.count(PROPERTY_SEP) != len(items):
            for p in props:
                encode_properties(p)  # raises, naming the property
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
        return list(map(raw.__getitem__, map(slice, start.tolist(), stop.tolist()))), props_len


def _int_column(values: list[int], what: str, bits: int = 64) -> np.ndarray:
    """A message field of the whole batch as int64; InvalidMessage for one that does not fit
    the record's `bits`-bit field."""
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
    """What is wrong with the header field of `msg` that did not pack."""
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
_POWERS_OF_TEN = 10 ** np.arange(10, dtype=np.int64)


@dataclass
class EncodedBatch:
    """Records of a batch before the store places them: header fields in `head` (stamp
    QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP there), then `records` joins and seals them.
    The messages' topics, queue ids, sysflags and properties come along for dispatch."""

    head: np.ndarray
    bodies: list[bytes]
    lengths: list[bytes]  # TOPICLEN, TOPIC and PROPERTIESLEN of each record
    props: list[bytes]  # PROPERTIES of each record, without the checksum trailer
    crc_tail: bytes  # the checksum trailer every record ends in (digits zero), or b""
    flavor: Flavor
    topics: list[str]
    queue_id: np.ndarray
    sys_flag: np.ndarray
    properties: list[dict[str, str]]

    @property
    def sizes(self) -> list[int]:
        return self.head["total"].tolist()

    def records(self, lo: int, hi: int) -> bytearray:
        """Records lo..hi-1 as one buffer, each with its whole-record checksum when the
        flavor wants one: the parts of every record interleaved and joined in one call,
        the checksums mapped over the joined buffer, their digits written with numpy
        (as `seal` writes them one by one)."""
        m = hi - lo
        parts: list[bytes] = [self.crc_tail] * (5 * m)
        parts[0::5] = self.head[lo:hi].view(f"V{HEADER_V4.itemsize}").tolist()
        parts[1::5] = self.bodies[lo:hi]
        parts[2::5] = self.lengths[lo:hi]
        parts[3::5] = self.props[lo:hi]
        buf = bytearray().join(parts)
        if self.crc_tail:
            ends = np.cumsum(self.head["total"][lo:hi].astype(np.int64))
            starts = ends - self.head["total"][lo:hi]
            view = memoryview(buf)
            sums = self.flavor.checksums(view, starts.tolist(), (ends - RECORD_CRC_LEN).tolist())
            digits = (sums[:, None] // _POWERS_OF_TEN) % 10 + 48
            u8 = np.frombuffer(buf, dtype=np.uint8)
            u8[(ends - 11)[:, None] + np.arange(10)] = digits
        return buf


def stamp(rec: bytearray, store_ts_pos: int, queue_offset: int, commitlog_offset: int, store_ts: int) -> None:
    """Patch the three fields RocketMQ fills inside the put lock (QUEUEOFFSET and
    PHYSICALOFFSET are adjacent: one pack)."""
    _OFFSETS.pack_into(rec, QUEUE_OFFSET_POS, queue_offset, commitlog_offset)
    _I64.pack_into(rec, store_ts_pos, store_ts)


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
            p = pos + HEADER_V4.itemsize
        else:
            bh, sh = born_host_len(sys_flag), store_host_len(sys_flag)
            p = pos + BORN_HOST_POS
            born_raw = bytes(view[p : p + bh])
            p += bh
            (store_ts,) = _I64.unpack_from(view, p)
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
            (topic_len,) = _I16.unpack_from(view, p)
            p += 2
        else:
            topic_len = view[p]
            p += 1
        if topic_len <= 0 or p + topic_len > end:
            raise CodecError(f"topic length {topic_len} at {pos} overruns the record")
        topic = str(view[p : p + topic_len], "ascii")
        p += topic_len
        (props_len,) = _I16.unpack_from(view, p)
        p += 2
        if props_len < 0 or p + props_len != end:
            raise CodecError(f"properties length {props_len} at {pos} does not end the record")
        props_raw = bytes(view[p : p + props_len])
        if flavor is not None:
            check_record(view, pos, total, body, crc, flavor)
            decode_properties(props_raw)  # checked reads validate the properties too
    except CodecError:
        raise
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as exc:
        raise CodecError(f"malformed record at {pos}: {exc}") from None
    return StoredMessage(
        total, magic, crc, qid, flag, qoff, commitlog_offset, sys_flag, born_ts, born_raw, store_ts,
        store_raw, reconsume, prep, bytes(body) if copy_body else body, topic, props_raw,
    )


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


def filler_record(size: int, commitlog_offset: int, store_ts: int, store_host: bytes, flavor: Flavor
                  ) -> bytearray:
    """A record of exactly `size` bytes at `commitlog_offset` to stand where damaged bytes were: a
    rolled-back transaction on the reserved topic, body of zeros. The topic is cut short for
    a small range (the smallest record repair meets is a one-letter topic with no body)."""
    props = _CRC_PLACEHOLDER if flavor.record_crc else b""
    # v1, IPv4 born host
    fixed = body_pos(IPV4_HOST_LEN, len(store_host)) + 1 + 2 + len(props)
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
        bytes(4) + _I32.pack(0), store_ts, store_host, 0, 0, body_len))
    rec += body
    rec += bytes([len(topic)]) + topic
    rec += _I16.pack(len(props)) + props
    if flavor.record_crc:
        seal(rec, flavor)
    return rec


def unit_matches(u8: np.ndarray, pos: np.ndarray, size: np.ndarray, topic: str, queue_id: int,
                 queue_offset: np.ndarray) -> np.ndarray:
    """Which ConsumeQueue units describe the record at their position of one file (`u8`):
    magic, TOTALSIZE, QUEUEID, QUEUEOFFSET and topic agree, and the record fits in the file;
    or the unit stands for a message lost to damage and points at a filler record."""
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
    prefix = (_I16.pack(len(raw)) if wide else bytes([len(raw)])) + raw
    same = ((magic == (MAGIC_V2 if wide else MAGIC_V1))
            & (gather(u8, pos + QUEUE_ID_POS, ">i4") == queue_id)
            & (gather(u8, pos + QUEUE_OFFSET_POS, ">i8") == queue_offset)
            & (gather(u8, topic_at, f"V{len(prefix)}") == np.void(prefix)))
    filler = fillers(u8, topic_at, sys_flag) & (magic == MAGIC_V1)
    return fits & (total == size) & (same | filler)


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

    @classmethod
    def of(cls, msg: StoredMessage) -> RecordRun:
        """A run of one decoded record."""
        def col(v: int) -> np.ndarray:
            return np.array([v], dtype=np.int64)
        delays = [msg.properties.get(PROPERTY_DELAY, "")] if msg.topic == SCHEDULE_TOPIC else None
        return cls(col(msg.commitlog_offset), col(msg.total_size), col(msg.queue_id),
                   col(msg.queue_offset), col(msg.sys_flag), col(msg.store_timestamp),
                   [msg.topic], [msg.tags], KeySpans.of(msg.index_keys()), delays)

    def from_row(self, i: int) -> RecordRun:
        """The records of the run from row i on."""
        if i == 0:
            return self
        return RecordRun(self.commitlog_offset[i:], self.size[i:], self.queue_id[i:], self.queue_offset[i:],
                         self.sys_flag[i:], self.store_ts[i:], self.topics[i:], self.tags[i:],
                         self.keys.from_row(i), None if self.delays is None else self.delays[i:])

    def __len__(self) -> int:
        return len(self.commitlog_offset)
