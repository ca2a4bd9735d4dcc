"""The C line decoder (store/format/_jsonl.c, `jsonl.decode_lines`) against the Python one
(`decode_line`, the reference): whatever it returns is decode_line's messages, field for
field and type for type; what it does not read it declines as a whole (None), so the Python
decoder gives every refusal its words. Hostile lines too: bad UTF-8, escapes, surrogates,
huge numbers, duplicate fields, nesting, control bytes."""

from __future__ import annotations

import gc
import json
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqfs.store import InvalidMessage, Message
from mqfs.store.format import compiled
from mqfs.store.format.jsonl import decode_line, decode_lines, measured_lines

LIMIT = 64


def _exact(msg: Message) -> tuple:
    """Every field with its type: a str subclass or a list where bytes belong would differ;
    and every attribute the object holds (slots set or not, its __dict__), so a Message made
    in C from the prototype's slots holds exactly what one made by its class does."""
    return (type(msg), msg.topic, type(msg.body), msg.body, msg.queue_id, type(msg.properties),
            [(type(k), k, type(v), v) for k, v in msg.properties.items()], msg.flag,
            msg.sys_flag, msg.born_timestamp, msg.born_host, msg.reconsume_times,
            msg.prepared_transaction_offset, _held(msg))


def _held(obj: object) -> list:
    """What an object holds: each slot of its class (its value and type, or unset) and its
    __dict__ (absent: None)."""
    unset = object()
    slots = [(name, type(value), value) if (value := getattr(obj, name, unset)) is not unset
             else (name, "unset")
             for cls in type(obj).__mro__ for name in cls.__dict__.get("__slots__", ())]
    return [slots, getattr(obj, "__dict__", None), gc.is_tracked(obj)]


def python_messages(text: bytes, limit: int = LIMIT) -> list[Message] | None:
    """decode_line of each line the mount reads (empty lines skipped), or None when any is
    refused."""
    try:
        return [decode_line(line, "t", 3, limit) for line in text.split(b"\n") if line.strip()]
    except InvalidMessage:
        return None


def check(text: bytes, limit: int = LIMIT) -> list[Message] | None:
    """decode_lines against decode_line, and measured_lines against both: the same messages,
    with the most characters of a KEYS text and bytes of a body among them."""
    got = decode_lines(text, "t", 3, limit)
    measured = measured_lines(text, "t", 3, limit)
    assert (got is None) == (measured is None), text
    if got is not None and measured is not None:
        want = python_messages(text, limit)
        assert want is not None, text
        assert list(map(_exact, got)) == list(map(_exact, want)) == list(map(_exact, measured[0]))
        assert measured[1:] == (max((len(m.properties.get("KEYS", "")) for m in want), default=0),
                                max((len(m.body) for m in want), default=0)), text
    return got


needs_c = pytest.mark.skipif(compiled.PURE, reason="MQFS_PURE_PYTHON=1: no C decoder")


@needs_c
@pytest.mark.parametrize("line", [
    b'{"body": "a"}', b'{"body":"a","keys":["k1","k2"]}', b'{"keys": ["k"], "body": "a"}',
    b' \t{ "body" : "" , "keys" : [ "k" ] } \r', b'{"body": "\\u00e9\\ud83d\\ude00\\"\\\\\\/\\b\\f\\n\\r\\t"}',
    b'{"body": "\\u0000"}', b'{"body": "caf\xc3\xa9 \xf0\x9f\x98\x80 \xef\xbf\xbf"}',
    b'{"body": "a", "keys": ["\\u00e9", "\\t", "x\\u00a0y"]}', b'{"body": "a", "keys": ["k", "k"]}',
    b'{"body": "' + b"x" * LIMIT + b'"}',
])
def test_the_common_shapes_are_read_in_c(line):
    for text in (line, line + b"\n", b"\n" + line + b"\n\n" + line):
        got = check(text)
        assert got is not None and len(got) == text.count(b"{"), text


@needs_c
@pytest.mark.parametrize("line", [
    b'', b'\n', b'\n\n',
])
def test_no_lines_are_no_messages(line):
    assert decode_lines(line, "t", 3, LIMIT) == []


@pytest.mark.parametrize("line", [
    b'{"body": "a", "body": "b"}', b'{"keys": ["a"], "keys": ["b"], "body": "c"}',  # duplicates
    b'{"b\\u006fdy": "a"}', b'{"body": "a", "tags": "t"}', b'{"body": "a", "keys": "k"}',
    b'{"body": "a", "keys": []}', b'{"body": "a", "keys": [""]}', b'{"body": "a", "keys": ["a b"]}',
    b'{"body": "a", "keys": ["a\\u0020b"]}', b'{"body": "a", "keys": [1]}', b'{"body": 1}',
    b'{"body": null}', b'{"body": "a", "keys": [["k"]]}', b'{"body": "a", "keys": [{"k": "v"}]}',
    b'{"body": "a",}', b'{"body": "a"', b'{"body": "a"}}', b'{"body": "a"} x', b'{}', b'[]',
    b'{"body_b64": "YQ=="}', b'{"body": "a", "keys": ["k",]}', b'{"body": "a", "keys": ["k"] ',
    b'{"body": "\xff"}', b'{"body": "\xc0\x80"}', b'{"body": "\xed\xa0\x80"}',  # not UTF-8
    b'{"body": "\xf4\x90\x80\x80"}', b'{"body": "\xe2\x82"}', b'\xef\xbb\xbf{"body": "a"}',
    b'{"body": "\\ud800"}', b'{"body": "\\udc00"}', b'{"body": "\\ud800\\u0041"}',  # surrogates
    b'{"body": "\\ud800\\ud800"}', b'{"body": "a", "keys": ["\\udfff"]}',
    b'{"body": "\\x41"}', b'{"body": "\\u12"}', b'{"body": "\\u12G4"}', b'{"body": "\\',
    b'{"body": "a\tb"}', b'{"body": "\x00"}', b'{"body": "\x1f"}',  # control bytes
    b'{\x00"body": "a"}', b'{"body": "a"}\x0c', b'\x0b{"body": "a"}', b' ', b'\r',
    b'{"body": "' + b"x" * (LIMIT + 1) + b'"}', b'{"body": "' + b"\\u00e9" * 33 + b'"}',
    b'{"body": "a", "keys": ["k"], "x": 1e999999}', b'{"body": "a", "x": ' + b"[" * 5000 + b"]" * 5000 + b'}',
    b'{"body": 123456789012345678901234567890}',
])
def test_every_other_line_is_declined_whole(line):
    """Each of these spoils a text of good lines: the whole text goes to the Python decoder."""
    text = b'{"body": "fine"}\n' + line + b'\n{"body": "fine"}\n'
    assert decode_lines(text, "t", 3, LIMIT) is None


_bodies = (st.text(max_size=20)
           | st.text(st.characters(min_codepoint=0xD7F0, max_codepoint=0xE010), max_size=4)
           | st.text(st.sampled_from('"\\/\b\f\n\r\t\x00 \x7f\u2028'), max_size=6))
_keys = st.lists(st.text(max_size=5) | st.sampled_from(["k", "a b", "", " ", "\t"]), max_size=3)


@st.composite
def _lines(draw) -> bytes:
    """Near the shapes C reads: body and keys, sometimes another field or a duplicate, dumped
    with and without escapes, white space of every kind around the tokens."""
    fields: list[tuple[str, object]] = [("body", draw(_bodies))]
    if draw(st.booleans()):
        fields.append(("keys", draw(_keys | _bodies)))
    fields += draw(st.lists(st.tuples(st.sampled_from(["body", "keys", "tags", "bod\u00ff", "x"]),
                                      st.none() | st.integers() | _bodies | _keys), max_size=1))
    fields = draw(st.permutations(fields))
    ws = st.sampled_from(["", "", "", " ", "\t", "\r", "\x0c", " \t "])
    ascii_only = draw(st.booleans())
    parts = [draw(ws), "{", draw(ws)]
    for i, (name, value) in enumerate(fields):
        try:
            dumped = json.dumps(value, ensure_ascii=ascii_only)
        except ValueError:
            dumped = "null"
        parts += [",", draw(ws)] if i else []
        parts += [json.dumps(name), draw(ws), ":", draw(ws), dumped, draw(ws)]
    parts += ["}", draw(ws)]
    return "".join(parts).encode("utf-8", "surrogatepass")


@st.composite
def _spoiled(draw) -> bytes:
    line = draw(_lines())
    at = draw(st.integers(0, len(line)))
    byte = bytes([draw(st.integers(0, 255))])
    return draw(st.sampled_from([line[:at] + byte + line[at:], line[:at] + byte + line[at + 1:],
                                 line[:at]]))


@settings(max_examples=1500, deadline=None)
@given(st.lists(_lines() | _spoiled() | st.binary(max_size=24), max_size=4),
       st.sampled_from([b"\n", b"\r\n", b"\n\n"]), st.booleans(), st.sampled_from([0, 8, LIMIT]))
def test_what_c_reads_is_what_decode_line_reads(lines, newline, last_newline, limit):
    text = newline.join(lines) + (newline if last_newline else b"")
    check(text, limit)


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=300), st.lists(
    st.text(st.characters(blacklist_categories=("Cs", "Zs")), min_size=1, max_size=6),
    max_size=3)), min_size=1, max_size=20), st.booleans())
def test_every_line_of_the_shapes_is_read_in_c(rows, ascii_only):
    """Any text body (escaped or not) and any keys without a space: C reads them all."""
    text = b"".join(json.dumps({"body": body, **({"keys": keys} if keys else {})},
                               ensure_ascii=ascii_only).encode("utf-8", "surrogatepass") + b"\n"
                    for body, keys in rows)
    got = check(text, limit=4 << 20)
    assert got is not None and len(got) == len(rows)


@needs_c
def test_a_megabyte_of_lines_is_read_with_the_gil_let_go():
    """Texts over 64 KiB are read, and their bodies copied, without the GIL: the same messages
    as the Python decoder, bodies read in place (plain), unescaped (escapes) or empty."""
    bodies = [lambda i: f"{i} " + "x\u00e9\"" * 100, lambda i: f"{i} " + "y" * 700, lambda i: ""]
    lines = [json.dumps({"body": bodies[i % 3](i), "keys": [f"k{i}", "\u00e9"]}).encode()
             for i in range(2000)]
    text = b"\n".join(lines) + b"\n"
    got = check(text, limit=1 << 20)
    assert got is not None and len(got) == 2000 and got[1999].keys == ["k1999", "\u00e9"]
    assert [bytes(m.body) for m in got[:3]] == [bodies[i](i).encode() for i in range(3)]


@needs_c
@pytest.mark.parametrize("args", [
    (bytearray(b'{"body": "a"}'), "t", 3, LIMIT), (memoryview(b'{"body": "a"}'), "t", 3, LIMIT),
    (b'{"body": "a"}', b"t", 3, LIMIT), (b'{"body": "a"}', "t", True, LIMIT),
])
def test_arguments_of_other_types_are_declined(args):
    assert decode_lines(*args) is None


_inits: list[type] = []  # the classes whose __init__ ran, in order


class SlotsMessage:
    """Message's fields in slots, as the store API's plain classes keep them."""

    __slots__ = ("topic", "body", "queue_id", "properties", "flag", "sys_flag", "born_timestamp",
                 "born_host", "reconsume_times", "prepared_transaction_offset")

    def __init__(self, topic, body, queue_id=0, properties=None, flag=0, sys_flag=0,
                 born_timestamp=0, born_host=("127.0.0.1", 0), reconsume_times=0,
                 prepared_transaction_offset=0):
        _inits.append(type(self))
        self.topic, self.body, self.queue_id = topic, body, queue_id
        self.properties = {} if properties is None else properties
        self.flag, self.sys_flag, self.born_timestamp = flag, sys_flag, born_timestamp
        self.born_host, self.reconsume_times = born_host, reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset


class WithDict(SlotsMessage):
    """Slots and a __dict__: called."""


class WithWeakref(SlotsMessage):
    __slots__ = ("__weakref__",)


class ExtraSlot(SlotsMessage):
    """One more slot: copied from the prototype as it is there."""

    __slots__ = ("note",)


class TopicProperty(SlotsMessage):
    """A field read through a property: its slot is not where C would look, so called."""

    __slots__ = ("_topic",)

    @property
    def topic(self):
        return self._topic

    @topic.setter
    def topic(self, value):
        self._topic = value


class OnException(Exception):
    """A base with fields of its own in C: called."""

    __slots__ = ("topic", "body", "queue_id", "properties")

    def __init__(self, topic, body, queue_id=0, properties=None):
        _inits.append(type(self))
        super().__init__()
        self.topic, self.body, self.queue_id, self.properties = topic, body, queue_id, properties


def _by_class(cls, text: bytes, proto) -> list:
    """What calling the class with each line's four fields makes: the reference."""
    made = []
    for m in decode_lines(text, "t", 3, LIMIT) or []:
        msg = cls("t", m.body, 3, m.properties)
        for name in ("note",):
            if hasattr(proto, name):
                setattr(msg, name, getattr(proto, name))
        made.append(msg)
    return made


@needs_c
@pytest.mark.parametrize(("cls", "copied"), [
    (SlotsMessage, True), (ExtraSlot, True), (WithDict, False), (WithWeakref, False),
    (TopicProperty, False), (OnException, False)])
def test_messages_are_made_as_the_prototypes_class_makes_them(cls, copied):
    """Whether C copies the prototype's slots (a class keeping every field in a slot: no
    __init__ runs) or calls its class, each message holds what the class's __init__ stores:
    the same fields, slots and types, tracked by the GC alike."""
    proto = cls("", b"", 0, {})
    if cls is ExtraSlot:
        proto.note = ("kept", 1)
    text = b'{"body": "a", "keys": ["k1", "k2"]}\n\n{"body": "\\u00e9"}\n'
    _inits.clear()
    got = compiled.jsonl.decode(text, "t", 3, LIMIT, proto, "KEYS")
    assert _inits == ([] if copied else [cls, cls])
    want = _by_class(cls, text, proto)
    assert [type(m) for m in got] == [cls, cls]
    assert list(map(_held, got)) == list(map(_held, want))
    assert got[0].properties == {"KEYS": "k1 k2"} and got[1].properties == {}
    assert got[0].properties is not got[1].properties is not proto.properties


@needs_c
def test_made_messages_hold_their_references_and_no_more():
    """Each copied slot takes a reference and gives it back when the message goes: nothing
    leaks and nothing is freed early (run under ASAN too: C-ATTACK.md)."""
    proto = ExtraSlot("", b"", 0, {})
    proto.note = note = object()
    text = b'{"body": "a", "keys": ["k"]}\n' * 100
    before = sys.getrefcount(note), sys.getrefcount(proto.born_host)
    for _ in range(50):
        got = compiled.jsonl.decode(text, "t", 3, LIMIT, proto, "KEYS")
        assert all(m.note is note for m in got)
        del got
    assert (sys.getrefcount(note), sys.getrefcount(proto.born_host)) == before
