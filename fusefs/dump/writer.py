"""A dump's output: each message as one JSON line or CSV row of the store's envelope
(store.format.jsonl, shared with `mqfs pipeline export`), a replay line, its offsets, or its
raw body."""

from __future__ import annotations

import io
import json
from collections.abc import Callable

from mqfs.store import StoredMessage
from mqfs.store.format.jsonl import CSV_COLUMNS, EnvelopeLines, csv_row, replay_line

TYPE_CHECKING = False  # mypy alone reads these: importing typing is ~6% of a tag selection
if TYPE_CHECKING:
    from typing import BinaryIO

BATCH = 256  # JSON lines encoded and written at once
# JSON lines Python prints with json, the reference, before it takes orjson: importing orjson
# (and the dataclasses, uuid and datetime it imports) costs what json's escaping of ~1,000
# bodies of 1 KiB does more than orjson's, and a key selection prints a line or two
ORJSON_AFTER = 256


def plain_json(obj: object) -> bytes:
    """Compact JSON as EnvelopeLines is held to write it (json.dumps), without importing
    orjson: for a few lines."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


class Writer:
    """Writes messages in one format to a binary stream."""

    def __init__(self, out: BinaryIO, fmt: str) -> None:
        self.out = out
        self.fmt = fmt
        self._dumps: Callable[[object], bytes] = plain_json
        self._envelopes = EnvelopeLines(plain_json)
        self._printed = 0  # JSON lines Python printed (not those C made)
        self._lines: list[bytes] = []
        if fmt == "csv":  # imported by the format that uses it: a selection's start is
            import csv  # most of its cost

            self._text = io.StringIO()
            self._csv = csv.writer(self._text, lineterminator="\n")
            self._csv.writerow(CSV_COLUMNS)
            self._flush_text()

    def write(self, msg: StoredMessage | bytes) -> None:
        """One message, or JSON lines made already (command.selected's `json_lines`)."""
        if isinstance(msg, bytes):  # (many lines at once: written as they are, not joined)
            self.flush()
            self.out.write(msg)
        elif self.fmt == "json":
            self._lines.append(self._envelopes.line(msg))
            self._printed_one()
            if len(self._lines) >= BATCH:
                self.flush()
        elif self.fmt == "raw":  # bodies as `follow` prints them: each ends in a newline
            self.out.write(msg.body)
            if not msg.body or msg.body[-1:] != b"\n":
                self.out.write(b"\n")
        elif self.fmt == "offsets":  # where messages are, for a shell loop
            self.out.write(b"%s %d %d %d\n" % (msg.topic.encode(), msg.queue_id,
                                                msg.queue_offset, msg.store_timestamp))
        elif self.fmt == "replay":
            self.out.write(self._dumps(replay_line(msg)) + b"\n")
            self._printed_one()
        else:
            self._csv.writerow(csv_row(msg))
            self._flush_text()

    def _printed_one(self) -> None:
        self._printed += 1
        if self._printed == ORJSON_AFTER:  # the same bytes, sooner from here on
            import orjson

            self._dumps = orjson.dumps
            self._envelopes = EnvelopeLines(orjson.dumps)

    def flush(self) -> None:
        """Write out the lines held back (JSON lines go out a batch at a time)."""
        if self._lines:
            self.out.write(b"".join(self._lines))
            self._lines.clear()

    def _flush_text(self) -> None:
        self.out.write(self._text.getvalue().encode("utf-8"))
        self._text.seek(0)
        self._text.truncate()
