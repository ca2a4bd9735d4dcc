"""store.jsonl: what the pipeline writes into append.jsonl is what the mount reads back."""

from __future__ import annotations

import json
import re

import pytest

from store import InvalidMessage, Message
from store.jsonl import BodyTooLarge, decode_line, encode_line


@pytest.mark.parametrize("body", [b"plain text", "h\u00e9llo \u2603".encode(), b"\x00\xff\x80 bytes",
                                  b""])
def test_a_message_survives_its_line(body):
    msg = Message.create("Orders", body, queue_id=3, keys=["k1", "k2"], tags="TagA",
                         properties={"a": "b", "UNIQ_KEY": "u1"})
    line = encode_line(msg)
    assert line.endswith("\n") and line.count("\n") == 1
    back = decode_line(line.encode(), "Orders", 3, limit=1 << 20)
    assert (back.body, back.keys, back.tags, back.properties) == \
        (msg.body, msg.keys, msg.tags, msg.properties)


def test_bodies_that_are_not_utf8_travel_as_base64():
    assert set(json.loads(encode_line(Message.create("t", b"\xff")))) == \
        {"body_b64", "keys", "tags", "properties"}
    assert "body" in json.loads(encode_line(Message.create("t", b"ok")))


def test_keys_may_be_one_space_separated_string():
    assert decode_line(b'{"body": "x", "keys": "a b"}', "t", 0, 10).keys == ["a", "b"]


@pytest.mark.parametrize("line,why", [
    (b"nope", "not JSON"), (b"[]", "a line must be a JSON object"),
    (b'{"body": "a", "x": 1}', "unknown fields ['x']"),
    (b'{"tags": "a"}', "give exactly one of body and body_b64"),
    (b'{"body": 1}', "body must be a string"), (b'{"body_b64": "!"}', "body_b64 is not base64"),
    (b'{"body": "a", "properties": {"k": 1}}', "properties strings"),
])
def test_malformed_lines_say_why(line, why):
    with pytest.raises(InvalidMessage, match=re.escape(why)) as info:
        decode_line(line, "t", 0, 10)
    assert not isinstance(info.value, BodyTooLarge)


def test_a_body_over_the_limit_is_too_large():
    with pytest.raises(BodyTooLarge, match="body is 11 bytes, the limit is 10"):
        decode_line(b'{"body": "' + b"x" * 11 + b'"}', "t", 0, 10)
    assert decode_line(b'{"body": "' + b"x" * 10 + b'"}', "t", 0, 10).body == b"x" * 10
