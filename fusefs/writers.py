"""What the bytes written through one open handle become.

- `append`: the bytes written through one open file description since its last commit are
  one message, committed at each flush (every close(2) of a descriptor of it, including
  copies held by forked children) and fsync. Bytes live in a Spool (memory, then staging).
- `append.jsonl`: one message per line, taken as each newline arrives (a last line without
  a newline is taken at flush). The line format is store.jsonl's.
- `append.lines`: as append.jsonl, each line being a body (no JSON).
- `/groups/<g>/<t>/<q>`: the decimal number written is checked and committed as soon as its
  line is complete (or at flush when no newline comes), so `echo N >` fails in the shell.

A writer that failed keeps failing with the same errno, so a later write or close of the
same handle never stores a message the writer's author believes was refused.
"""

from __future__ import annotations

import errno
import io
from collections.abc import Callable
from operator import attrgetter, methodcaller
from typing import Generic, TypeVar

import orjson

from mqfs.store import InvalidMessage, Message
from mqfs.store.format.jsonl import BodyTooLarge, decode_line, decode_lines, measured_lines, message_of
from mqfs.store.format.message import PROPERTY_KEYS, join_keys

from .errors import FsError
from .keynames import SURELY_FITS, check_key
from .spool import Budget, Spool

MAX_OFFSET_TEXT = 64
_BODY, _PROPERTIES = attrgetter("body"), attrgetter("properties")
_KEYS = methodcaller("get", PROPERTY_KEYS, "")  # of a properties dict: the KEYS text
R = TypeVar("R")


class Writer:
    failed: int | None = None

    def check(self) -> None:
        if self.failed is not None:
            raise FsError(self.failed, "an earlier write on this handle failed", repeat=True)

    def fail(self, err: int) -> None:
        self.failed = err


class AppendWriter(Writer):
    def __init__(self, topic: str, queue: int, limit: int, spool: Spool):
        self.topic, self.queue, self.limit = topic, queue, limit
        self.spool = spool

    def write(self, data: bytes) -> int:
        self.check()
        if self.spool.size + len(data) > self.limit:
            self.spool.clear()
            self.fail(errno.EFBIG)
            raise FsError(errno.EFBIG, f"a message body here is at most {self.limit} bytes")
        try:
            self.spool.append(data)
        except (FsError, OSError) as exc:  # no room to hold it: nothing of it may be stored
            self.spool.clear()
            self.fail(exc.errno or errno.EIO)
            raise
        return len(data)

    def take(self) -> list[Message]:
        """The message written since the last take (none if nothing was written)."""
        self.check()
        if not self.spool.size:
            return []
        body = self.spool.getvalue()
        self.spool.clear()
        return [Message.create(self.topic, body, queue_id=self.queue)]

    @property
    def pending(self) -> int:
        return self.spool.size

    def close(self) -> None:
        self.spool.clear()


class JsonlWriter(Writer):
    """Partial lines are kept in memory and counted against the mount's Budget: a write
    that would pass it fails with ENOMEM (lines are short; bodies go in `append` or tmp/).
    `fits(message)` gives the largest body the store takes for that message."""

    c_lines = True  # `write_now` reads JSON lines in C (subclasses reading other lines: False)

    def __init__(self, topic: str, queue: int, limit: int, budget: Budget,
                 fits: Callable[[Message], int] | None = None):
        self.topic, self.queue, self.limit = topic, queue, limit
        self.budget, self.fits = budget, fits
        self.line_limit = limit * 2 + 65536  # base64 and JSON escapes grow a body
        self.buf = bytearray()
        self.held = 0  # bytes of buf counted in the budget
        self.lines = 0

    def write(self, data: bytes) -> list[Message]:
        """Messages for the lines this write completes; all of them or (on error) none.
        The lines are read where they lie in `data` (a write is up to 1 MiB): only the line
        an earlier write began is put together, from its start and this write's head."""
        self.check()
        cut = data.rfind(b"\n") + 1
        if not cut:
            self._hold(data)
            return []
        head, start = b"", 0
        if self.buf:
            start = data.index(b"\n") + 1
            head = bytes(self.buf) + data[:start]
        self.budget.give(self.held)
        self.buf, self.held = bytearray(), 0
        out = self._parse(head, data, start, cut)
        if cut < len(data):
            self._hold(data[cut:])
        return out

    def write_now(self, data: bytes) -> list[Message] | None:
        """`write`'s messages when C reads every line this write completes and they pass the
        bulk checks (nearly every write of producers' lines, ~0.5 us a line, the GIL let go
        while the text is read); None, with nothing changed, when a line needs the Python
        decoder or a closer look, or none is complete: then `write`. A store takes what this
        returns unless it cannot store at all (no room, an I/O error): the lines are plain
        text bodies with short keys that fit."""
        self.check()
        cut = data.rfind(b"\n") + 1
        if not (self.c_lines and cut):
            return None
        head, start = b"", 0
        if self.buf:
            start = data.index(b"\n") + 1
            head = bytes(self.buf) + data[:start]
        read = measured_lines(data, self.topic, self.queue, self.limit, start, cut)
        if read is not None and head:
            first = measured_lines(head, self.topic, self.queue, self.limit)
            read = None if first is None else (first[0] + read[0], max(first[1], read[1]),
                                               max(first[2], read[2]))
        if read is None:
            return None
        out, longest_keys, longest_body = read
        if not self._fit(longest_keys, longest_body):
            return None
        self.budget.give(self.held)
        self.buf, self.held = bytearray(), 0
        self.lines += len(out)
        if cut < len(data):
            self._hold(data[cut:])
        return out

    def take(self) -> list[Message]:
        self.check()
        rest = bytes(self.buf)
        self.budget.give(self.held)
        self.buf, self.held = bytearray(), 0
        return self._parse(b"", rest, 0, len(rest))

    def _hold(self, part: bytes) -> None:
        """Keep the start of a line until its newline comes."""
        if len(self.buf) + len(part) > self.line_limit:
            self._drop(errno.EFBIG)
            raise FsError(errno.EFBIG, f"line {self.lines + 1} is longer than {self.line_limit}")
        if not self.budget.take(len(part)):
            self._drop(errno.ENOMEM)
            raise FsError(errno.ENOMEM, "the in-memory write buffer of the mount is full")
        self.held += len(part)
        self.buf += part

    def _drop(self, err: int) -> None:
        self.budget.give(self.held)
        self.buf, self.held = bytearray(), 0
        self.fail(err)

    def _parse(self, head: bytes, data: bytes, start: int, end: int) -> list[Message]:
        """The lines of `head` and then of `data[start:end]`. The fast paths take every line
        at once (C in place, else orjson); any line they leave alone sends the whole text line
        by line, which gives the errno and reason of the first bad line."""
        out = decode_lines(data, self.topic, self.queue, self.limit, start, end)
        if out is not None and head:
            first = decode_lines(head, self.topic, self.queue, self.limit)
            out = None if first is None else first + out
        if out is None:
            out = read_lines(head + data[start:end], self.topic, self.queue, self.limit)
        if out is not None:
            try:
                self._check_all(out)
            except FsError:
                out = None
        if out is None:
            return self._parse_each((head + data[start:end]).split(b"\n"))
        self.lines += len(out)
        return out

    def _parse_each(self, lines: list[bytes]) -> list[Message]:
        out = []
        for line in lines:
            if not line.strip():
                continue
            self.lines += 1
            try:
                msg = parse_line(line, self.topic, self.queue, self.limit)
                self._check(msg)
                out.append(msg)
            except FsError as exc:
                self._drop(exc.errno)
                raise FsError(exc.errno, f"line {self.lines}: {exc}") from None
        return out

    def _check_all(self, out: list[Message]) -> None:
        """_check of each message, unless the batch surely fits (nearly every one)."""
        if self._surely_fit(out):
            return
        for msg in out:
            self._check(msg)

    def _surely_fit(self, out: list[Message]) -> bool:
        """Whether every body and KEYS text is short enough to pass _check, found from two
        passes of C-level calls, without a Python call per message."""
        return self._fit(max(map(len, map(_KEYS, map(_PROPERTIES, out))), default=0),
                         max(map(len, map(_BODY, out)), default=0))

    def _fit(self, longest_keys: int, longest_body: int) -> bool:
        """Whether messages whose longest KEYS text (characters) and body (bytes) are these
        surely pass _check."""
        return longest_keys <= SURELY_FITS and (self.fits is None or longest_body <= self.limit // 2)

    def _check(self, msg: Message) -> None:
        """EINVAL for a key no /keys name can hold, EFBIG for a body with no room in a record.
        When all the keys together are short, each is: only long ones are looked at."""
        if len(msg.properties.get(PROPERTY_KEYS, "")) > SURELY_FITS:
            for key in msg.keys:
                check_key(key)
        if self.fits is not None and len(msg.body) > self.limit // 2:
            room = self.fits(msg)  # keys and properties take room in the record too
            if len(msg.body) > room:
                raise FsError(errno.EFBIG, f"body is {len(msg.body)} bytes, with these "
                                           f"keys and properties the limit is {room}")

    @property
    def pending(self) -> int:
        return len(self.buf)

    def close(self) -> None:
        self.budget.give(self.held)
        self.buf, self.held = bytearray(), 0


class LinesWriter(JsonlWriter):
    """`append.lines`: each line, its newline taken off, is one message's body (as `kcat -P`
    and kafka-console-producer make them), so `tail -F app.log > append.lines` stores one
    message per log line. Empty lines store nothing; the rest is append.jsonl's."""

    c_lines = False

    def __init__(self, topic: str, queue: int, limit: int, budget: Budget,
                 fits: Callable[[Message], int] | None = None):
        super().__init__(topic, queue, limit, budget, fits)
        self.line_limit = limit + 1  # a body and its newline

    def _parse(self, head: bytes, data: bytes, start: int, end: int) -> list[Message]:
        """When no line is long enough to need a check (nearly always), the messages are
        made in one comprehension; else line by line, which finds the first too long."""
        lines = (head + data[start:end]).split(b"\n")
        longest = max(map(len, lines))  # split gives at least one
        if longest <= (self.limit if self.fits is None else self.limit // 2):
            topic, queue = self.topic, self.queue
            out = [Message(topic, line, queue, {}) for line in lines if line]
            self.lines += len(out)
            return out
        out = []
        for line in lines:
            if not line:
                continue
            self.lines += 1
            msg = Message.create(self.topic, line, self.queue)
            try:
                if len(line) > self.limit:
                    raise FsError(errno.EFBIG, f"body is {len(line)} bytes, the limit is {self.limit}")
                self._check(msg)
            except FsError as exc:
                self._drop(exc.errno)
                raise FsError(exc.errno, f"line {self.lines}: {exc}") from None
            out.append(msg)
        return out


def read_lines(text: bytes, topic: str, queue: int, limit: int) -> list[Message] | None:
    """The messages of the lines in `text` (empty lines skipped; a last line needs no
    newline), or None when a line needs decode_line: one that is malformed, or in a form
    only json reads (a line of blanks, a byte-order mark, UTF-16, lone surrogates, NaN).

    The fast path of every write: orjson decodes each line straight from its UTF-8 bytes,
    twice as fast as json, which decodes text first. It refuses every line json refuses and
    reads strings, lists and objects as json does (numbers may differ, but no field of a
    message is a number), so whatever this accepts decode_line reads to the same message
    (tests/store/test_jsonl.py checks it); what it does not, decode_line explains.

    The commonest lines (a text body, alone or with a list of keys: what producers and the
    bench write) are made into their Message here, a third cheaper than through message_of;
    every other line, and any of these with a check to fail, goes through message_of.
    (`decode_lines`, in C, reads a text whose every line is of those shapes before this.)"""
    out: list[Message] = []
    add, loads = out.append, orjson.loads
    try:
        for line in io.BytesIO(text):  # lines with their newline, found with memchr
            if line == b"\n":
                continue
            obj = loads(line)
            if type(obj) is dict and type(body := obj.get("body")) is str:
                if len(obj) == 1:
                    data = body.encode()
                    if len(data) <= limit:
                        add(Message(topic, data, queue, {}))
                        continue
                elif (len(obj) == 2 and type(keys := obj.get("keys")) is list and keys
                        and all(type(k) is str for k in keys)):
                    data = body.encode()
                    if len(data) <= limit:  # join_keys: InvalidMessage for an empty key or a space
                        add(Message(topic, data, queue, {PROPERTY_KEYS: join_keys(keys)}))
                        continue
            add(message_of(obj, topic, queue, limit))
    except (ValueError, InvalidMessage):  # orjson.JSONDecodeError is a ValueError
        return None
    return out


def parse_line(line: bytes, topic: str, queue: int, limit: int) -> Message:
    """One JSON-lines record -> Message; EINVAL when malformed, EFBIG when too large."""
    try:
        msg = decode_line(line, topic, queue, limit)
    except BodyTooLarge as exc:
        raise FsError(errno.EFBIG, str(exc)) from None
    except InvalidMessage as exc:
        raise FsError(errno.EINVAL, str(exc)) from None
    return msg


class OffsetWriter(Writer, Generic[R]):
    """Text written to a group offset file: a decimal offset, `earliest`, `latest` or
    `@TIME`; `resolve` turns the text into what to commit (an offset; a topic's `all`: one
    per queue) or refuses it (FsError)."""

    def __init__(self, resolve: Callable[[str], R], limit: int = MAX_OFFSET_TEXT) -> None:
        self.resolve = resolve
        self.limit = limit  # bytes written through one handle
        self.buf = bytearray()
        self.dirty = False

    def write(self, off: int, data: bytes) -> R | None:
        """What to commit when this write completes a line, else None."""
        self.check()
        end = off + len(data)
        if end > self.limit or not data.isascii():
            self.fail(errno.EINVAL)
            raise FsError(errno.EINVAL, "write an offset, earliest, latest or @TIME")
        if len(self.buf) < end:
            self.buf.extend(b" " * (end - len(self.buf)))
        self.buf[off:end] = data
        self.dirty = True
        return self.take() if b"\n" in data else None

    def take(self) -> R | None:
        """What to commit, or None when nothing was written since the last take."""
        self.check()
        if not self.dirty:
            return None
        text, self.buf, self.dirty = self.buf.decode().strip(), bytearray(), False
        try:
            return self.resolve(text)
        except FsError as exc:
            self.fail(exc.errno)
            raise
