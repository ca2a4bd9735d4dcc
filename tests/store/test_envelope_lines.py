"""`mqfs dump`'s JSON lines (store.format.jsonl.EnvelopeLines) are the envelope exactly as
json.dumps writes it: the fast writer is held to the plain reference on the texts that need
escaping or base64, on both host widths and on every header field."""

from __future__ import annotations

import json

import orjson
import pytest

from mqfs.store import Message, StoredMessage
from mqfs.store.format import codec
from mqfs.store.format.codec import Encoder
from mqfs.store.format.flavor import XXHASH
from mqfs.store.format.jsonl import EnvelopeLines, envelope

ODD = 'quote " backslash \\ slash / tab \t newline \n nul \x00 esc \x1b del \x7f é € 😀 \u2028 \ufeff'


def reference(msg: StoredMessage) -> bytes:
    return (json.dumps(envelope(msg), ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def stored(msg: Message, store_host: tuple[str, int] = ("10.0.0.7", 10911),
           commitlog_offset: int = 123_456_789) -> StoredMessage:
    rec, ts_pos = Encoder(XXHASH, store_host, 4 << 20).encode(msg)
    codec.stamp(rec, ts_pos, 42, commitlog_offset, 1_790_000_000_123)
    return codec.decode(bytes(rec), 0, XXHASH)


CASES = {
    "utf-8 text": Message.create("T", "héllo wörld 😀\n".encode(), 3, ["k1", "k2"], "TagA",
                                 {"ORDER_ID": "42"}),
    "odd text": Message.create("T", ODD.encode(), 0, [ODD.replace(" ", "_")], ODD, {ODD: ODD}),
    "binary": Message.create("T", bytes(range(256)) * 3, 1, [], None, {"a": "b"}),
    "not utf-8": Message.create("T", b"\xff\xfe ok \xc3", 1),
    "empty": Message.create("T", b"", 0),
    "ipv6 born host": Message("T", b"x", 2, {"KEYS": "a  b"}, flag=-7, sys_flag=0,
                              born_timestamp=1, born_host=("fe80::1", 65535), reconsume_times=3),
    "long topic": Message.create("%RETRY%" + "g" * 200, b"retry", 0, ["k"], "t"),
}


@pytest.mark.parametrize("name", CASES)
def test_a_line_is_the_envelope_as_json_dumps_writes_it(name):
    lines = EnvelopeLines(orjson.dumps)
    for store_host, offset in ((("10.0.0.7", 10911), 123_456_789), (("2001:db8::5", 1), 0),
                               (("127.0.0.1", 10911), (1 << 40) + 5)):
        msg = stored(CASES[name], store_host, offset)
        assert lines.line(msg) == reference(msg)
        assert lines.line(msg) == reference(msg)  # from the caches, the same


def test_a_body_is_text_when_utf8_and_base64_otherwise():
    lines = EnvelopeLines(orjson.dumps)
    text = json.loads(lines.line(stored(CASES["utf-8 text"])))
    raw = json.loads(lines.line(stored(CASES["binary"])))
    assert text["body"] == "héllo wörld 😀\n" and "body_b64" not in text
    assert raw["body_b64"].startswith("AAECAwQF") and "body" not in raw
