"""mqfs.store.format.jsonl: what the pipeline writes into append.jsonl is what the mount reads back, and
the mount's fast reader (fusefs.writers.read_lines) reads lines as decode_line does."""

from __future__ import annotations

import base64
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqfs.fusefs.writers import read_lines
from mqfs.store import InvalidMessage, Message
from mqfs.store.format.jsonl import BodyTooLarge, decode_line, encode_line


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
    (b'{"body": "\\ud800"}', "lone surrogate"), (b'{"body": "\xed\xa0\x80"}', "lone surrogate"),
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
def test_read_lines_reads_what_decode_line_reads(msgs, newline):
    text = "".join(encode_line(m).replace("\n", newline) for m in msgs).encode()
    got = read_lines(text, "t", 2, limit=1 << 20)
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
    b'\xef\xbb\xbf{"body": "a"}\n', b'{"body": "\xff"}\n',  # byte-order mark, not UTF-8
    b'{"body": "a"}\n\x0c\n', b'{"body": "a"}\n \r\n',  # lines of white space
    b'{"body": "a", "keys": ["\\ud800"]}\n',  # a lone surrogate (json reads it, orjson not)
    b'{"body": "a", "tags": NaN}\n', b'{"body": "a", "tags": 1e400}\n',
])
def test_read_lines_leaves_every_odd_line_to_decode_line(text):
    assert read_lines(b'{"body": "fine"}\n' + text, "t", 0, limit=10) is None


def test_read_lines_reads_many_lines_and_white_space_around_them():
    lines = [encode_line(Message.create("t", b"%d " % i + b"x" * 1000, keys=[f"k{i}"]))
             for i in range(300)]
    text = "".join(f" \t{line[:-1]} \r\n\n" for line in lines).encode()
    got = read_lines(text, "t", 0, limit=1 << 20)
    assert got is not None and [(m.body, m.keys) for m in got] == \
        [(b"%d " % i + b"x" * 1000, [f"k{i}"]) for i in range(300)]


# lines near the format: objects of the fields, each mostly of its type but maybe any JSON
# value (lone surrogates too), written with and without escapes, white space around
_any_text = st.text(max_size=8) | st.text(max_size=8) | st.text(
    st.characters(min_codepoint=0xD7F0, max_codepoint=0xE010), max_size=3)
_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _any_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=6)
_field_values = {
    "body": _any_text, "body_b64": st.binary(max_size=9).map(lambda b: base64.b64encode(b).decode()),
    "keys": st.lists(_any_text, max_size=3) | _any_text, "tags": st.none() | _any_text,
    "properties": st.dictionaries(_any_text, _any_text, max_size=3), "x": _values}


@st.composite
def _lines(draw) -> bytes:
    names = draw(st.sets(st.sampled_from(["body", "body_b64", "keys", "tags", "properties"] * 3
                                         + ["x"])))
    names.add(draw(st.sampled_from(["body", "body", "body_b64"])))
    obj = {name: draw(draw(st.sampled_from([_field_values[name]] * 9 + [_values])))
           for name in names}
    try:
        text = json.dumps(obj, ensure_ascii=draw(st.booleans()), allow_nan=draw(st.booleans()))
    except ValueError:  # NaN refused
        text = "{}"
    return b"".join([draw(st.sampled_from([b""] * 6 + [b" ", b"\xef\xbb\xbf", b"\t"])),
                     text.encode("utf-8", "surrogatepass"),
                     draw(st.sampled_from([b""] * 6 + [b" ", b"\r", b"x", b"}"]))])


@st.composite
def _spoiled_lines(draw) -> bytes:
    """A line with one byte put in, changed or the rest cut off."""
    line = draw(_lines())
    at = draw(st.integers(0, len(line)))
    byte = bytes([draw(st.integers(0, 255))])
    return draw(st.sampled_from([line[:at] + byte + line[at:], line[:at] + byte + line[at + 1:],
                                 line[:at]]))


def _fields(msg: Message) -> tuple:
    return msg.topic, msg.queue_id, msg.body, list(msg.properties.items())


@settings(max_examples=1000, deadline=None)
@given(st.lists(_lines(), min_size=1, max_size=3) | st.lists(_spoiled_lines(), min_size=1, max_size=2)
       | st.lists(st.binary(max_size=30), max_size=3))
def test_what_read_lines_accepts_decode_line_reads_alike(lines):
    """The mount takes read_lines' messages when it gives any, else decode_line's answer
    line by line: so every line the fast path reads, decode_line reads to the same message
    (properties in the same order, which is their order in the record)."""
    text = b"\n".join(lines)
    got = read_lines(text, "t", 1, limit=64)
    if got is not None:
        want = [decode_line(line, "t", 1, limit=64) for line in text.split(b"\n") if line.strip()]
        assert list(map(_fields, got)) == list(map(_fields, want))


@pytest.mark.parametrize("line", [
    b'{"body": "a", "keys": ["k1", "k2"]}', b'{"keys": ["k"], "body": "a"}', b'{"body": ""}',
    b'{"body": "a", "keys": []}', b'{"body": "a", "keys": ["k", 1]}', b'{"body": "a", "keys": [1]}',
    b'{"body": "a", "keys": ["a b"]}', b'{"body": "a", "keys": [" "]}', b'{"body": "a", "keys": [""]}',
    b'{"body": "a", "keys": ["k", ""]}', b'{"body": "a", "keys": [null]}',
    b'{"body": "a", "keys": "k1 k2"}', b'{"body": "a", "tags": "t"}', b'{"body": "a", "body": "b"}',
    b'{"body": "0123456789"}', b'{"body": "0123456789x"}', b'{"body": "0123456789x", "keys": ["k"]}',
    b'{"body": "\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9", "keys": ["\\u00e9"]}',  # 12 bytes
])
def test_the_common_lines_read_as_decode_line_reads_them(line):
    """read_lines builds a text body alone or with a list of keys itself: every such line,
    and each near miss of that shape, reads as decode_line reads it or is left to it."""
    got = read_lines(line + b"\n", "t", 1, limit=10)
    try:
        want = [decode_line(line, "t", 1, limit=10)]
    except InvalidMessage:
        assert got is None
    else:
        assert got is not None and list(map(_fields, got)) == list(map(_fields, want))
