"""A dump's output: each message as one JSON line or CSV row of the store's envelope
(store.format.jsonl, shared with `mqfs pipeline export`), a replay line, its offsets, or its
raw body."""

from __future__ import annotations

import csv
import io
from typing import BinaryIO

import orjson

from mqfs.store import StoredMessage
from mqfs.store.format.jsonl import CSV_COLUMNS, csv_row, envelope, replay_line

FORMATS = ("json", "csv", "raw", "replay", "offsets")


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
        if self.fmt == "json":
            self.out.write(orjson.dumps(envelope(msg)) + b"\n")
        elif self.fmt == "raw":  # bodies as `follow` prints them: each ends in a newline
            self.out.write(msg.body)
            if not msg.body or msg.body[-1:] != b"\n":
                self.out.write(b"\n")
        elif self.fmt == "offsets":  # where messages are, for a shell loop
            self.out.write(b"%s %d %d %d\n" % (msg.topic.encode(), msg.queue_id,
                                                msg.queue_offset, msg.store_timestamp))
        elif self.fmt == "replay":
            self.out.write(orjson.dumps(replay_line(msg)) + b"\n")
        else:
            self._csv.writerow(csv_row(msg))
            self._flush_text()

    def _flush_text(self) -> None:
        self.out.write(self._text.getvalue().encode("utf-8"))
        self._text.seek(0)
        self._text.truncate()
