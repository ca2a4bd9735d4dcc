"""store.jsonl: what the pipeline writes into append.jsonl is what the mount reads back."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store import InvalidMessage, Message
from store.jsonl import PIECE, BodyTooLarge, decode_line, decode_lines, encode_line


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
    (b'{"body": "a", "body_b64": "AA=="}', "give exactly one"), (b'{"body": null}', "body must be"),
    (b'{"body": 1, "body_b64": "AA=="}', "give exactly one"), (b'{"body_b64": null}', "not base64"),
    (b'{"body": "a", "keys": [""]}', "keys must be strings"),
    (b'{"body": "a", "keys": ["a b"], "tags": 1}', "keys must be strings"),
    (b'{"body": "a", "keys": null}', "keys must be strings"),
    (b'{"body": "a", "properties": null}', "properties strings"),
    (b'{"body": "a", "keys": ["k", "a b"]}', "message key 'a b' is empty or contains a space"),
])
def test_malformed_lines_say_why(line, why):
    with pytest.raises(InvalidMessage, match=re.escape(why)) as info:
        decode_line(line, "t", 0, 10)
    assert not isinstance(info.value, BodyTooLarge)


def test_a_body_over_the_limit_is_too_large():
    with pytest.raises(BodyTooLarge, match="body is 11 bytes, the limit is 10"):
        decode_line(b'{"body": "' + b"x" * 11 + b'"}', "t", 0, 10)
    assert decode_line(b'{"body": "' + b"x" * 10 + b'"}', "t", 0, 10).body == b"x" * 10


_texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_keys = st.lists(st.text(st.characters(blacklist_categories=("Cs", "Zs", "Cc")), min_size=1,
                         max_size=8), max_size=3)
_messages = st.builds(
    lambda body, keys, tags, props: Message.create("t", body, queue_id=2, keys=keys,
                                                   tags=tags, properties=props),
    st.one_of(_texts.map(str.encode), st.binary(max_size=40)), _keys,
    st.one_of(st.none(), _texts.filter(bool)), st.dictionaries(_texts, _texts, max_size=3))


@settings(max_examples=200, deadline=None)
@given(st.lists(_messages, max_size=8), st.sampled_from(["\n", "\r\n", "\n\n"]))
def test_decode_lines_reads_what_decode_line_reads(msgs, newline):
    text = "".join(encode_line(m).replace("\n", newline) for m in msgs).encode()
    got = decode_lines(text, "t", 2, limit=1 << 20)
    want = [decode_line(line, "t", 2, limit=1 << 20) for line in text.split(b"\n")
            if line.strip()]
    assert got is not None
    assert [(m.topic, m.queue_id, m.body, m.properties) for m in got] == \
        [(m.topic, m.queue_id, m.body, m.properties) for m in want]


@pytest.mark.parametrize("text", [
    b'{"body": "a",\n"keys": []}\n',  # one object over two lines
    b'{"body": "a"} {"body": "b"}\n',  # two on one line
    b'{"body": "a"}x\n', b'nope\n', b'{"body": 5}\n', b'{"body": "a", "x": 1}\n',
    b'{"body": "' + b"x" * 11 + b'"}\n',  # over the limit
    b' {"body": "a"}\n', b'\xef\xbb\xbf{"body": "a"}\n',  # leading space, byte-order mark
    b'{"body": "\xff"}\n', b'{"body": "a"}\n\x0c\n',
])
def test_decode_lines_leaves_every_odd_line_to_decode_line(text):
    assert decode_lines(b'{"body": "fine"}\n' + text, "t", 0, limit=10) is None


def test_decode_lines_reads_text_longer_than_one_piece():
    lines = [encode_line(Message.create("t", b"%d " % i + b"x" * 1000, keys=[f"k{i}"]))
             for i in range(300)]
    text = "".join(lines).encode()
    assert len(text) > 4 * PIECE
    got = decode_lines(text, "t", 0, limit=1 << 20)
    assert got is not None and [(m.body, m.keys) for m in got] == \
        [(b"%d " % i + b"x" * 1000, [f"k{i}"]) for i in range(300)]
