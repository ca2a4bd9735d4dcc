"""A message as one JSON line (kcat -J's idea, with mqfs's field names: the xattrs'), a CSV
row, or its raw body. A body that is UTF-8 is `body`, text; any other is `body_b64`, as
append.jsonl takes them, so a dumped line's body can be written back as it came."""

from __future__ import annotations

import base64
import csv
import io
from typing import BinaryIO

import orjson

from mqfs.store import StoredMessage
from mqfs.store.format.layout import host_text

FORMATS = ("json", "csv", "raw", "replay", "offsets")
# properties a re-published message does not carry over: its own fields (KEYS, TAGS), the
# old message's identity (UNIQ_KEY) and broker plumbing that would delay, retry or hold it
# again (RocketMQ's MessageConst names)
NOT_REPLAYED = frozenset({"KEYS", "TAGS", "UNIQ_KEY", "DELAY", "REAL_TOPIC", "REAL_QID",
                          "RETRY_TOPIC", "TRAN_MSG", "PGROUP", "WAIT", "RECONSUME_TIME",
                          "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "MIN_OFFSET",
                          "MAX_OFFSET", "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET"})
ORIGIN = "ORIGIN_MESSAGE_ID"  # RocketMQ's: the message a retry or DLQ copy came from
CSV_COLUMNS = ("topic", "queue_id", "queue_offset", "msgid", "keys", "tags", "born_timestamp",
               "store_timestamp", "born_host", "store_host", "commitlog_offset",
               "record_size", "flag", "sys_flag", "reconsume_times", "properties",
               "body_encoding", "body")


def fields(msg: StoredMessage) -> dict:
    """Every field of a message, in the names its xattrs use."""
    return {
        "topic": msg.topic, "queue_id": msg.queue_id, "queue_offset": msg.queue_offset,
        "msgid": msg.msg_id, "keys": msg.keys, "tags": msg.tags or None,
        "born_timestamp": msg.born_timestamp, "store_timestamp": msg.store_timestamp,
        "born_host": host_text(*msg.born_host), "store_host": host_text(*msg.store_host),
        "commitlog_offset": msg.commitlog_offset, "record_size": msg.total_size,
        "flag": msg.flag, "sys_flag": msg.sys_flag, "reconsume_times": msg.reconsume_times,
        "properties": msg.properties,
    }


def replay(msg: StoredMessage) -> dict:
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


class Writer:
    """Writes messages in one format to a binary stream."""

    def __init__(self, out: BinaryIO, fmt: str) -> None:
        self.out = out
        self.fmt = fmt
        self._text = io.StringIO()
        self._csv = csv.writer(self._text, lineterminator="\n")
        if fmt == "csv":
            self._csv.writerow(CSV_COLUMNS)
            self._flush_text()

    def write(self, msg: StoredMessage) -> None:
        if self.fmt == "raw":  # bodies as `follow` prints them: each ends in a newline
            self.out.write(msg.body)
            if not msg.body or msg.body[-1:] != b"\n":
                self.out.write(b"\n")
            return
        if self.fmt == "offsets":  # where messages are, for a shell loop
            self.out.write(b"%s %d %d %d\n" % (msg.topic.encode(), msg.queue_id,
                                                msg.queue_offset, msg.store_timestamp))
            return
        if self.fmt == "replay":
            self.out.write(orjson.dumps(replay(msg)) + b"\n")
            return
        row = fields(msg)
        name, body = body_field(msg.body)
        if self.fmt == "json":
            row[name] = body
            self.out.write(orjson.dumps(row) + b"\n")
            return
        row["keys"] = " ".join(msg.keys)
        row["properties"] = orjson.dumps(msg.properties).decode()
        self._csv.writerow([*(row[c] for c in CSV_COLUMNS[:-2]),
                            "text" if name == "body" else "base64", body])
        self._flush_text()

    def _flush_text(self) -> None:
        self.out.write(self._text.getvalue().encode("utf-8"))
        self._text.seek(0)
        self._text.truncate()
