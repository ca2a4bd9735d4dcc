"""What the bytes written through one open handle become.

- `append`: every byte written through one handle is one message, taken at flush/fsync.
- `append.jsonl`: one message per line, taken as each newline arrives (a last line without
  a newline is taken at flush). Line format (one JSON object):
  ``{"body": "text"} | {"body_b64": "..."}`` plus optional ``"keys"`` (list of strings or
  one space-separated string), ``"tags"`` (string), ``"properties"`` (object of strings).
- `/groups/<g>/<t>/<q>`: the decimal number written is committed at flush.

A writer that failed keeps failing with the same errno, so a later write or close of the
same handle never stores a message the writer's author believes was refused.
"""

from __future__ import annotations

import base64
import binascii
import errno
import json

from store import Message

from .errors import FsError

JSONL_FIELDS = {"body", "body_b64", "keys", "tags", "properties"}
MAX_OFFSET_TEXT = 64


class Writer:
    failed: int | None = None

    def check(self) -> None:
        if self.failed is not None:
            raise FsError(self.failed, "an earlier write on this handle failed")

    def fail(self, err: int) -> None:
        self.failed = err


class AppendWriter(Writer):
    def __init__(self, topic: str, queue: int, limit: int):
        self.topic, self.queue, self.limit = topic, queue, limit
        self.buf = bytearray()

    def write(self, data: bytes) -> int:
        self.check()
        if len(self.buf) + len(data) > self.limit:
            self.buf = bytearray()
            self.fail(errno.EFBIG)
            raise FsError(errno.EFBIG, f"a message body is at most {self.limit} bytes")
        self.buf += data
        return len(data)

    def take(self) -> list[Message]:
        """The message written so far (none if nothing was written since the last take)."""
        self.check()
        if not self.buf:
            return []
        body, self.buf = bytes(self.buf), bytearray()
        return [Message.create(self.topic, body, queue_id=self.queue)]

    @property
    def pending(self) -> int:
        return len(self.buf)


class JsonlWriter(Writer):
    def __init__(self, topic: str, queue: int, limit: int):
        self.topic, self.queue, self.limit = topic, queue, limit
        self.line_limit = limit * 2 + 65536  # base64 and JSON escapes grow a body
        self.buf = bytearray()
        self.lines = 0

    def write(self, data: bytes) -> list[Message]:
        """Messages for the lines this write completes; all of them or (on error) none."""
        self.check()
        self.buf += data
        cut = self.buf.rfind(b"\n") + 1
        if not cut:
            if len(self.buf) > self.line_limit:
                self.fail(errno.EFBIG)
                raise FsError(errno.EFBIG, f"line {self.lines + 1} is longer than {self.line_limit}")
            return []
        complete = bytes(self.buf[:cut])
        del self.buf[:cut]
        return self._parse(complete.split(b"\n"))

    def take(self) -> list[Message]:
        self.check()
        rest, self.buf = bytes(self.buf), bytearray()
        return self._parse([rest])

    def _parse(self, lines: list[bytes]) -> list[Message]:
        out = []
        for line in lines:
            if not line.strip():
                continue
            self.lines += 1
            try:
                out.append(parse_line(line, self.topic, self.queue, self.limit))
            except FsError as exc:
                self.fail(exc.errno)
                raise FsError(exc.errno, f"line {self.lines}: {exc}") from None
        return out

    @property
    def pending(self) -> int:
        return len(self.buf)


def parse_line(line: bytes, topic: str, queue: int, limit: int) -> Message:
    """One JSON-lines record -> Message; EINVAL when malformed, EFBIG when too large."""
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FsError(errno.EINVAL, f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise FsError(errno.EINVAL, "a line must be a JSON object")
    unknown = set(obj) - JSONL_FIELDS
    if unknown:
        raise FsError(errno.EINVAL, f"unknown fields {sorted(unknown)}")
    if ("body" in obj) == ("body_b64" in obj):
        raise FsError(errno.EINVAL, "give exactly one of body and body_b64")
    if "body" in obj:
        if not isinstance(obj["body"], str):
            raise FsError(errno.EINVAL, "body must be a string (use body_b64 for bytes)")
        body = obj["body"].encode("utf-8")
    else:
        try:
            body = base64.b64decode(obj["body_b64"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise FsError(errno.EINVAL, "body_b64 is not base64") from None
    if len(body) > limit:
        raise FsError(errno.EFBIG, f"body is {len(body)} bytes, the limit is {limit}")
    keys = obj.get("keys", [])
    if isinstance(keys, str):
        keys = keys.split()
    tags = obj.get("tags")
    props = obj.get("properties", {})
    if (not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys)
            or not (tags is None or isinstance(tags, str))
            or not isinstance(props, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in props.items())):
        raise FsError(errno.EINVAL, "keys must be strings, tags a string, properties strings")
    return Message.create(topic, body, queue_id=queue, keys=keys, tags=tags, properties=props)


class OffsetWriter(Writer):
    """Text written to a group offset file."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.dirty = False

    def write(self, off: int, data: bytes) -> int:
        self.check()
        end = off + len(data)
        if end > MAX_OFFSET_TEXT or data.translate(None, b"0123456789 \t\r\n"):
            self.fail(errno.EINVAL)
            raise FsError(errno.EINVAL, "write a decimal offset")
        if len(self.buf) < end:
            self.buf.extend(b" " * (end - len(self.buf)))
        self.buf[off:end] = data
        self.dirty = True
        return len(data)

    def take(self) -> int | None:
        """The offset to commit, or None when nothing was written since the last take."""
        self.check()
        if not self.dirty:
            return None
        text, self.buf, self.dirty = self.buf.decode().strip(), bytearray(), False
        if not text.isdigit():
            self.fail(errno.EINVAL)
            raise FsError(errno.EINVAL, "write one decimal offset")
        return int(text)
