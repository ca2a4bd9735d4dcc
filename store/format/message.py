"""Messages as the store takes and gives them: Message, StoredMessage, and the text
fields of a record (topic names, hosts, properties, keys, message ids) with their checks.
"""

from __future__ import annotations

import re
import struct
from functools import lru_cache

from ..errors import CodecError, InvalidMessage
from ..slotted import Slotted
from .compression import COMPRESSED_FLAG, consumer_sys_flag, inflate
from .layout import (
    decode_host,
)

PROPERTY_KEYS = "KEYS"


PROPERTY_TAGS = "TAGS"


PROPERTY_UNIQ_KEY = "UNIQ_KEY"


PROPERTY_DELAY = "DELAY"  # a delayed message's level (PROPERTY_DELAY_TIME_LEVEL)


SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # where a broker keeps delayed messages until due


PROPERTY_CRC32 = "__CRC32#"  # RocketMQ 5's whole-record checksum trailer (enabledAppendPropCRC)


# Repair writes a filler record over bytes it could not read: a rolled-back transaction (no
# queue entry, not indexed, skipped by every reader) on a reserved topic
FILLER_TOPIC = "%DAMAGED"


NAME_VALUE_SEP = "\x01"


PROPERTY_SEP = "\x02"


MAX_PROPERTIES_LEN = 32767


MAX_TOPIC_LEN = 127


MAX_RETRY_TOPIC_LEN = 255


MAX_STORED_TOPIC_LEN = 32767  # a v2 record's TOPICLEN is an int16


NAME_MAX = 255  # bytes in a file name (Linux): a topic longer has no consumequeue/<topic> directory
# (and the mount shortens its names to fit)


DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024


QUEUE_ID_LIMIT = 1 << 31


_TOPIC_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]+")


I32 = struct.Struct(">i")


I64 = struct.Struct(">q")


I16 = struct.Struct(">h")


def validate_topic(topic: str) -> None:
    """Refuse names for new topics that Apache RocketMQ refuses (TopicValidator rules)."""
    validate_stored_topic(topic)
    limit = MAX_RETRY_TOPIC_LEN if topic.startswith("%RETRY%") else MAX_TOPIC_LEN
    if len(topic) > limit:
        raise InvalidMessage(f"topic name is {len(topic)} characters, the limit is {limit}")


# Topics a broker keeps for itself, which no producer may make: those it refuses sends to
# (TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET), its system topics (rmq_sys_..., the timer's
# among them) and LMQ queues (%LMQ%..., made by multi-dispatch alone). Made by hand, their
# messages would be taken for the broker's own (delayed, half, timer messages), and the
# store for a broker's that uses those features (read-only to mqfs: store/meta/features.py).
_BROKER_TOPICS = frozenset({SCHEDULE_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                            "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"})
_BROKER_PREFIXES = ("rmq_sys_", "%LMQ%")  # TopicValidator.SYSTEM_TOPIC_PREFIX, MixAll.LMQ_PREFIX


def validate_new_topic(topic: str) -> None:
    """Refuse what `validate_topic` refuses, and the topics a broker keeps for itself, for
    a topic made by hand (create_topic, add_queue, mkdir): puts to a broker's own topics,
    found in its store, are not refused here."""
    validate_topic(topic)
    if topic in _BROKER_TOPICS or topic.startswith(_BROKER_PREFIXES):
        raise InvalidMessage(f"topic {topic!r} is one a broker keeps for itself: a producer "
                             "may not make it")


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
    import ipaddress  # a few ms to load: a reader that only decodes needs none of it

    try:
        addr = ipaddress.ip_address(host)
        return addr.packed + I32.pack(port), addr.version == 6
    except (ValueError, TypeError, struct.error):
        raise InvalidMessage(f"born host {host!r}:{port!r} is not an IP address and a port") \
            from None


def parse_host(text: str) -> tuple[str, int]:
    """'1.2.3.4:10911' or '[::1]:10911' -> (host, port)."""
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def encode_properties(props: dict[str, str]) -> bytes:
    """PROPERTIES as RocketMQ writes them; InvalidMessage for a name or value that is not a
    str, holds a separator or is not valid UTF-8 (a lone surrogate). Encodes one snapshot of
    the items: another thread or a name's hook may change the dict while this runs."""
    items = list(props.items())
    if not items:
        return b""
    try:  # name SEP value, each item ended by the other SEP, joined in C
        if len(items) == 1:  # most puts (KEYS alone): a third cheaper than the join of a map
            ((name, value),) = items
            pieces = [name + NAME_VALUE_SEP + value]
        else:
            pieces = list(map(NAME_VALUE_SEP.join, items))
    except TypeError:  # refused before any byte: the indexes read KEYS, UNIQ_KEY and TAGS
        raise not_text(items) from None  # as text after the record is written
    text = PROPERTY_SEP.join(pieces) + PROPERTY_SEP
    if text.count(NAME_VALUE_SEP) != len(pieces) or text.count(PROPERTY_SEP) != len(pieces):
        raise separator_refusal(pieces, items)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidMessage(f"a property is not valid text: {exc.reason}") from None


def not_text(items: list[tuple[str, str]]) -> InvalidMessage:
    """The refusal naming the first item whose name or value is not a str."""
    name, value = next(((k, v) for k, v in items if not isinstance(k, str) or not isinstance(v, str)),
                       items[0])  # (a str subclass whose + raises: named as the first item)
    culprit = value if isinstance(name, str) else name
    return InvalidMessage(f"property {name!r} is not text ({type(culprit).__name__}): "
                          "names and values are str")


def separator_refusal(pieces: list[str], items: list[tuple[str, str]]) -> InvalidMessage:
    """The refusal naming the first item whose piece (name SEP value) holds a separator byte
    of its own: sought in the very pieces whose text failed the count, so one is there."""
    name = next(k for (k, _), piece in zip(items, pieces)
                if piece.count(NAME_VALUE_SEP) != 1 or PROPERTY_SEP in piece)
    return InvalidMessage(f"property {name!r} contains a \\x01 or \\x02 separator byte")


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
    return (store_host + I64.pack(commitlog_offset)).hex().upper()


def parse_msg_id(text: str) -> tuple[str, int, int]:
    """offsetMsgId -> (store host, port, commitlog offset); CodecError when malformed."""
    if len(text) not in (32, 56):
        raise CodecError(f"message id {text!r} is not 32 or 56 hex digits")
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raise CodecError(f"message id {text!r} is not hexadecimal") from None
    host, port = decode_host(raw[:-8])
    return host, port, I64.unpack(raw[-8:])[0]


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


_NEW: dict[str, str] = {}  # stands for "not given": each such message gets a dict of its own


class Message(_WellKnownProperties, Slotted):
    """A message as a producer hands it to the store. Slots, not a dataclass (a selection's
    start imports no dataclasses; C reads the fields of a put); `replace` makes a changed copy."""

    __slots__ = __match_args__ = (
        "topic", "body", "queue_id", "properties", "flag", "sys_flag", "born_timestamp",
        "born_host", "reconsume_times", "prepared_transaction_offset")

    def __init__(self, topic: str, body: bytes, queue_id: int = 0,
                 properties: dict[str, str] = _NEW, flag: int = 0, sys_flag: int = 0,
                 born_timestamp: int = 0, born_host: tuple[str, int] = ("127.0.0.1", 0),
                 reconsume_times: int = 0, prepared_transaction_offset: int = 0) -> None:
        self.topic = topic
        self.body = body
        self.queue_id = queue_id
        self.properties = {} if properties is _NEW else properties
        self.flag = flag
        self.sys_flag = sys_flag
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset

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
    """A record decoded from the CommitLog, shown as a consumer sees it (`body`, `sys_flag`,
    `properties`), with the record's own values beside (`stored_body`, `stored_sys_flag`,
    `stored_properties`). Hosts and properties are decoded on first use: most reads (cat of
    a message, a ConsumeQueue check) never look at them."""

    __slots__ = ("total_size", "magic", "body_crc", "queue_id", "flag", "queue_offset",
                 "commitlog_offset", "sys_flag", "stored_sys_flag", "born_timestamp", "store_timestamp",
                 "reconsume_times", "prepared_transaction_offset", "stored_body", "topic",
                 "born_host_raw", "store_host_raw", "_props_raw", "_props", "_body")

    def __init__(self, total_size: int, magic: int, body_crc: int, queue_id: int, flag: int,
                 queue_offset: int, commitlog_offset: int, sys_flag: int, born_timestamp: int,
                 born_host_raw: bytes, store_timestamp: int, store_host_raw: bytes,
                 reconsume_times: int, prepared_transaction_offset: int,
                 stored_body: bytes | memoryview, topic: str, props_raw: bytes):
        self.total_size = total_size
        self.magic = magic
        self.body_crc = body_crc
        self.queue_id = queue_id
        self.flag = flag
        self.queue_offset = queue_offset
        self.commitlog_offset = commitlog_offset
        # as a consumer's decode shows it (docs/format.md, "Compressed bodies")
        self.stored_sys_flag = sys_flag
        if sys_flag & COMPRESSED_FLAG:
            self.sys_flag = consumer_sys_flag(sys_flag, len(stored_body))
            self._body: bytes | memoryview | None = None
        else:
            self.sys_flag = sys_flag
            self._body = stored_body
        self.born_timestamp = born_timestamp
        self.born_host_raw = born_host_raw
        self.store_timestamp = store_timestamp
        self.store_host_raw = store_host_raw
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.stored_body = stored_body
        self.topic = topic
        self._props_raw = props_raw
        self._props: dict[str, str] | None = None

    def __repr__(self) -> str:
        return (f"StoredMessage({self.topic}/{self.queue_id}/{self.queue_offset} "
                f"@{self.commitlog_offset}, {len(self.stored_body)} bytes stored)")

    @property
    def body(self) -> bytes | memoryview:
        """The body a consumer gets: `stored_body` (what the record holds, what its checksums
        cover) inflated when the producer compressed it (compression.inflate;
        CorruptionError when it does not inflate)."""
        if self._body is None:
            self._body = inflate(self.stored_body, self.stored_sys_flag, self.commitlog_offset)
        return self._body

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
