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

from ..errors import InvalidMessage
from .message import PROPERTY_KEYS, PROPERTY_TAGS, Message

FIELDS = frozenset({"body", "body_b64", "keys", "tags", "properties"})
_NO_KEYS: list[str] = []  # defaults for absent fields: read, never changed
_NO_PROPERTIES: dict[str, str] = {}
_STR = repeat(str)  # isinstance's second argument, for map


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
