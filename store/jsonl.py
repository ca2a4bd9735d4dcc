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

from .codec import PROPERTY_KEYS, PROPERTY_TAGS, Message
from .errors import InvalidMessage

FIELDS = frozenset({"body", "body_b64", "keys", "tags", "properties"})


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
    if not isinstance(obj, dict):
        raise InvalidMessage("a line must be a JSON object")
    unknown = set(obj) - FIELDS
    if unknown:
        raise InvalidMessage(f"unknown fields {sorted(unknown)}")
    if ("body" in obj) == ("body_b64" in obj):
        raise InvalidMessage("give exactly one of body and body_b64")
    if "body" in obj:
        if not isinstance(obj["body"], str):
            raise InvalidMessage("body must be a string (use body_b64 for bytes)")
        body = obj["body"].encode("utf-8")
    else:
        try:
            body = base64.b64decode(obj["body_b64"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise InvalidMessage("body_b64 is not base64") from None
    if len(body) > limit:
        raise BodyTooLarge(f"body is {len(body)} bytes, the limit is {limit}")
    keys = obj.get("keys", [])
    if isinstance(keys, str):
        keys = keys.split()
    tags = obj.get("tags")
    props = obj.get("properties", {})
    if (not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys)
            or not (tags is None or isinstance(tags, str))
            or not isinstance(props, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in props.items())):
        raise InvalidMessage("keys must be strings, tags a string, properties strings")
    return Message.create(topic, body, queue_id=queue_id, keys=keys, tags=tags, properties=props)
