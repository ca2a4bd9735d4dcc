"""A message as one JSON line: the format of a mount's `append.jsonl` files, and the envelope
of a stored message (`mqfs dump`, `mqfs pipeline export`), kept in one place so the commands
that write them and the filesystem that parses them cannot drift apart.

A line is one JSON object: ``{"body": "text"}`` or ``{"body_b64": "..."}`` (bodies that are
not UTF-8), plus optional ``"keys"`` (a list of strings or one space-separated string),
``"tags"`` (a string) and ``"properties"`` (an object of strings).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from itertools import chain, repeat

from ..errors import InvalidMessage
from . import compiled
from .layout import decode_host, host_text
from .message import PROPERTY_KEYS, PROPERTY_TAGS, Message, StoredMessage

FIELDS = frozenset({"body", "body_b64", "keys", "tags", "properties"})
_NO_KEYS: list[str] = []  # defaults for absent fields: read, never changed
_NO_PROPERTIES: dict[str, str] = {}
_STR = repeat(str)  # isinstance's second argument, for map
# what the C decoder makes its Messages like (the default fields): never changed
_PROTOTYPE = Message("", b"", 0, {})


class BodyTooLarge(InvalidMessage):
    """A line whose body is over the limit it was decoded with (a mount answers EFBIG)."""


def encode_line(msg: Message) -> str:
    """One line, newline included; KEYS and TAGS travel as their own fields."""
    props = {k: v for k, v in msg.properties.items() if k not in (PROPERTY_KEYS, PROPERTY_TAGS)}
    line: dict = {"keys": msg.keys, "tags": msg.tags, "properties": props}
    try:
        line["body"] = msg.body.decode("utf-8")
    except UnicodeDecodeError:
        line["body_b64"] = base64.b64encode(msg.body).decode("ascii")
    return json.dumps(line, ensure_ascii=False) + "\n"


def decode_line(line: bytes, topic: str, queue_id: int, limit: int) -> Message:
    """The message one line holds; InvalidMessage when malformed, BodyTooLarge when its body
    is over `limit` bytes."""
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidMessage(f"not JSON: {exc}") from None
    except RecursionError:  # json's parser recurses once per level of nesting
        raise InvalidMessage("nested too deeply to be a message") from None
    return message_of(obj, topic, queue_id, limit)


def decode_lines(text: bytes, topic: str, queue_id: int, limit: int, start: int = 0,
                 end: int | None = None) -> list[Message] | None:
    """The messages of the lines in `text[start:end]` (empty lines skipped; a last line needs
    no newline) when every line is `{"body": "text"}`, optionally with `"keys": ["k", ...]`
    (what producers and the bench write), decoded in C (store/format/_jsonl.c) without a copy
    of the text; else None, and `decode_line` reads them. Whatever this returns is what
    decode_line makes of each line (tests/store/test_jsonl_c.py holds it to that); None too
    without the C module."""
    c = compiled.jsonl
    if c is None:
        return None
    if start or end is not None:
        return c.decode(text, topic, queue_id, limit, _PROTOTYPE, PROPERTY_KEYS,  # type: ignore[no-any-return]
                        start, len(text) if end is None else end)
    return c.decode(text, topic, queue_id, limit, _PROTOTYPE, PROPERTY_KEYS)  # type: ignore[no-any-return]


def measured_lines(text: bytes, topic: str, queue_id: int, limit: int, start: int = 0,
                   end: int | None = None) -> tuple[list[Message], int, int] | None:
    """`decode_lines` with what a reader checks the messages by, found while they are made:
    (messages, the most characters of a KEYS text, the most bytes of a body)."""
    c = compiled.jsonl
    if c is None:
        return None
    return c.decode(text, topic, queue_id, limit, _PROTOTYPE, PROPERTY_KEYS,  # type: ignore[no-any-return]
                    start, len(text) if end is None else end, True)


def message_of(obj: object, topic: str, queue_id: int, limit: int) -> Message:
    """The message a decoded line (any JSON value) stands for; InvalidMessage (BodyTooLarge)
    as decode_line. A reader that decodes lines its own faster way checks them here, so the
    fields of a line are coded once; each check is one C-level call, as every line a mount
    takes passes here."""
    if not isinstance(obj, dict):
        raise InvalidMessage("a line must be a JSON object")
    if not FIELDS.issuperset(obj):
        raise InvalidMessage(f"unknown fields {sorted(set(obj) - FIELDS)}")
    text = obj.get("body")
    if "body_b64" in obj:
        if "body" in obj:
            raise InvalidMessage("give exactly one of body and body_b64")
        try:
            body = base64.b64decode(obj["body_b64"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise InvalidMessage("body_b64 is not base64") from None
    elif isinstance(text, str):
        try:
            body = text.encode()
        except UnicodeEncodeError:  # json reads "\ud800" escapes into text UTF-8 cannot hold
            raise InvalidMessage("body has a lone surrogate (use body_b64 for bytes)") from None
    elif "body" in obj:
        raise InvalidMessage("body must be a string (use body_b64 for bytes)")
    else:
        raise InvalidMessage("give exactly one of body and body_b64")
    if len(body) > limit:
        raise BodyTooLarge(f"body is {len(body)} bytes, the limit is {limit}")
    keys = obj.get("keys", _NO_KEYS)
    if isinstance(keys, str):
        keys = keys.split()
    tags = obj.get("tags")
    props = obj.get("properties", _NO_PROPERTIES)
    if (not isinstance(keys, list) or "" in keys or not all(map(isinstance, keys, _STR))
            or not (tags is None or isinstance(tags, str))
            or not isinstance(props, dict)
            or (props and not all(map(isinstance, chain.from_iterable(props.items()), _STR)))):
        raise InvalidMessage("keys must be strings, tags a string, properties strings")
    return Message.create(topic, body, queue_id, keys, tags, props)


# The envelope: a stored message with every field, in the names its xattrs use (kcat -J's
# idea), as `mqfs dump` prints it and `mqfs pipeline export -f jsonl|csv` writes it. A body
# that is UTF-8 is `body`, text; any other is `body_b64`, as a line above takes them, so a
# dumped line's body can be written back as it came.
CSV_COLUMNS = ("topic", "queue_id", "queue_offset", "msgid", "keys", "tags", "born_timestamp",
               "store_timestamp", "born_host", "store_host", "commitlog_offset",
               "record_size", "flag", "sys_flag", "reconsume_times", "properties",
               "body_encoding", "body")
# properties a re-published message does not carry over: its own fields (KEYS, TAGS), the
# old message's identity (UNIQ_KEY) and broker plumbing that would delay, retry or hold it
# again (RocketMQ's MessageConst names)
NOT_REPLAYED = frozenset({"KEYS", "TAGS", "UNIQ_KEY", "DELAY", "REAL_TOPIC", "REAL_QID",
                          "RETRY_TOPIC", "TRAN_MSG", "PGROUP", "WAIT", "RECONSUME_TIME",
                          "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "MIN_OFFSET",
                          "MAX_OFFSET", "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET"})
ORIGIN = "ORIGIN_MESSAGE_ID"  # RocketMQ's: the message a retry or DLQ copy came from


def envelope(msg: StoredMessage) -> dict:
    """Every field of a message and its body (`body` or `body_b64`): one JSON line's object."""
    row = {
        "topic": msg.topic, "queue_id": msg.queue_id, "queue_offset": msg.queue_offset,
        "msgid": msg.msg_id, "keys": msg.keys, "tags": msg.tags or None,
        "born_timestamp": msg.born_timestamp, "store_timestamp": msg.store_timestamp,
        "born_host": host_text(*msg.born_host), "store_host": host_text(*msg.store_host),
        "commitlog_offset": msg.commitlog_offset, "record_size": msg.total_size,
        "flag": msg.flag, "sys_flag": msg.sys_flag, "reconsume_times": msg.reconsume_times,
        "properties": msg.properties,
    }
    name, body = body_field(msg.body)
    row[name] = body
    return row


# `envelope` as a JSON line, field by field in its order: what a dump of thousands of messages
# spends per message is this, so nothing is built that is not printed (no dict, no host
# tuple, no msgid bytes), what repeats is formatted once (a topic's head, a host), and the
# texts (body, properties, keys, tags) go through the caller's JSON encoder (orjson escapes
# them in half json's time; `store` itself imports only the standard library).
_LINE = (b'%s%d,"queue_offset":%d,"msgid":"%s%016X","keys":%s,"tags":%s,"born_timestamp":%d,'
         b'"store_timestamp":%d,"born_host":%s,"commitlog_offset":%d,"record_size":%d,'
         b'"flag":%d,"sys_flag":%d,"reconsume_times":%d,"properties":%s,"%s":%s}\n')
_U64 = (1 << 64) - 1  # msgid holds the offset as 8 bytes, two's complement


class EnvelopeLines:
    """`envelope` as JSON lines (bytes), exactly as `json.dumps(envelope(msg),
    ensure_ascii=False, separators=(",", ":"))` writes them (tests/store/test_envelope_lines.py
    holds it to that), given `dumps`: compact JSON of a str, list or dict of str as UTF-8 bytes
    (orjson.dumps)."""

    def __init__(self, dumps: Callable[[object], bytes]) -> None:
        self._dumps = dumps
        self._topics: dict[str, bytes] = {}  # topic -> b'{"topic":"T","queue_id":'
        # (raw born host, raw store host) -> (msgid's first hex digits, both hosts' fields)
        self._hosts: dict[tuple[bytes, bytes], tuple[bytes, bytes]] = {}

    def line(self, msg: StoredMessage) -> bytes:
        """One line, newline included."""
        dumps = self._dumps
        head = self._topics.get(msg.topic)
        if head is None:
            head = self._topics[msg.topic] = b'{"topic":' + dumps(msg.topic) + b',"queue_id":'
        props = msg.properties
        keys = props.get(PROPERTY_KEYS)
        tags = props.get(PROPERTY_TAGS)
        raw = (msg.born_host_raw, msg.store_host_raw)
        hosts = self._hosts.get(raw)
        if hosts is None:
            hosts = self._hosts[raw] = envelope_hosts(*raw)
        try:
            name, body = b"body", dumps(str(msg.body, "utf-8"))
        except UnicodeDecodeError:
            name, body = b"body_b64", b'"' + binascii.b2a_base64(msg.body, newline=False) + b'"'
        return _LINE % (
            head, msg.queue_id, msg.queue_offset, hosts[0], msg.commitlog_offset & _U64,
            (b"[]" if not keys else dumps([keys]) if " " not in keys
             else dumps([k for k in keys.split(" ") if k])),
            dumps(tags) if tags else b"null", msg.born_timestamp, msg.store_timestamp, hosts[1],
            msg.commitlog_offset, msg.total_size, msg.flag, msg.sys_flag, msg.reconsume_times,
            dumps(props), name, body)


def envelope_hosts(born: bytes, store: bytes) -> tuple[bytes, bytes]:
    """(msgid's first hex digits, both hosts' fields) of a record's raw hosts. A host's text
    (digits, dots, hex digits, colons, brackets) is its JSON string between quotes."""
    return (store.hex().upper().encode(), b'"%s","store_host":"%s"' % (
        host_text(*decode_host(born)).encode(), host_text(*decode_host(store)).encode()))


def csv_row(msg: StoredMessage) -> list:
    """The envelope as a row of CSV_COLUMNS: keys space-separated, properties as JSON, the
    body's encoding named (`text` or `base64`)."""
    row = envelope(msg)
    text = row.pop("body", None)
    encoded = row.pop("body_b64", None)
    row["keys"] = " ".join(msg.keys)
    row["properties"] = json.dumps(msg.properties, ensure_ascii=False, separators=(",", ":"))
    return [*(row[c] for c in CSV_COLUMNS[:-2]), "text" if text is not None else "base64",
            text if text is not None else encoded]


def replay_line(msg: StoredMessage) -> dict:
    """A line `append.jsonl` takes to publish the message again: body, keys, tags and user
    properties, ORIGIN_MESSAGE_ID pointing back at the first message (kept when the message
    is itself a copy: a retry or dead letter)."""
    props = {k: v for k, v in msg.properties.items() if k not in NOT_REPLAYED}
    props.setdefault(ORIGIN, msg.msg_id)
    name, body = body_field(msg.body)
    line: dict = {name: body, "properties": props}
    if msg.keys:
        line["keys"] = msg.keys
    if msg.tags:
        line["tags"] = msg.tags
    return line


def body_field(body: bytes | memoryview) -> tuple[str, str]:
    """("body", text) for a UTF-8 body, ("body_b64", base64) for any other."""
    raw = bytes(body)
    try:
        return "body", raw.decode("utf-8")
    except UnicodeDecodeError:
        return "body_b64", base64.b64encode(raw).decode("ascii")
