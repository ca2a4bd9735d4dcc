"""A message as one JSON line: the format of a mount's `append.jsonl` files, kept in one place
so the pipeline that writes it and the filesystem that parses it cannot drift apart.

A line is one JSON object: ``{"body": "text"}`` or ``{"body_b64": "..."}`` (bodies that are
not UTF-8), plus optional ``"keys"`` (a list of strings or one space-separated string),
``"tags"`` (a string) and ``"properties"`` (an object of strings).
"""

from __future__ import annotations

import base64
import binascii
import json
from itertools import chain, repeat

from .codec import PROPERTY_KEYS, PROPERTY_TAGS, Message
from .errors import InvalidMessage

FIELDS = frozenset({"body", "body_b64", "keys", "tags", "properties"})
_NO_KEYS: list[str] = []  # defaults for absent fields: read, never changed
_NO_PROPERTIES: dict[str, str] = {}
_STR = repeat(str)  # isinstance's second argument, for map
_DECODE_AT = json.JSONDecoder().raw_decode  # (text, index) -> (the object there, its end)
PIECE = 64 << 10  # bytes of lines decoded to text at a time


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
    return message_of(obj, topic, queue_id, limit)


def decode_lines(text: bytes, topic: str, queue_id: int, limit: int) -> list[Message] | None:
    """The messages of the lines in `text` (blank lines skipped; a last line needs no
    newline), or None when a line needs decode_line: one that is malformed, or in a form
    only it reads (leading whitespace, a byte-order mark, UTF-16).

    The fast path of a mount's writes: the text is decoded from UTF-8 a piece of lines at a
    time (small enough to stay in the CPU's cache while it is scanned) and each object
    decoded in place by json's C scanner, instead of json.loads per line (which copies,
    sniffs the encoding and decodes every line). Whatever it accepts, decode_line would
    decode to the same message; what it does not, decode_line explains."""
    out: list[Message] = []
    start, size = 0, len(text)
    while start < size:
        stop = text.find(b"\n", min(start + PIECE, size)) + 1 or size
        try:
            piece = str(text[start:stop], "utf-8")
        except UnicodeDecodeError:
            return None
        if not _decode_piece(piece, topic, queue_id, limit, out):
            return None
        start = stop
    return out


def _decode_piece(s: str, topic: str, queue_id: int, limit: int, out: list[Message]) -> bool:
    """Append the messages of the lines in s to out; False when a line needs decode_line."""
    decode_at, pos, end = _DECODE_AT, 0, len(s)
    while pos < end:
        stop = s.find("\n", pos)
        if stop < 0:
            stop = end
        if stop > pos:
            if s[pos] != "{":
                return False
            try:
                obj, last = decode_at(s, pos)
                out.append(message_of(obj, topic, queue_id, limit))
            except (ValueError, InvalidMessage):
                return False
            if last > stop or s[last:stop].strip(" \t\r"):
                return False  # the object runs into the next line, or more follows it
        pos = stop + 1
    return True


def message_of(obj: object, topic: str, queue_id: int, limit: int) -> Message:
    """The message a decoded line stands for; InvalidMessage (BodyTooLarge) as decode_line.
    Every line of a mount's writes passes here, so each check is one C-level call."""
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
        body = text.encode()
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
