"""<queue>/replay: offsets written to it publish those messages of the queue again (replay),
a dead letter or retry back to the topic it came from (redrive). What a copy keeps and
what it loses is `store.format.jsonl.replay_line`'s, as for `mqfs dump -f replay`."""

from __future__ import annotations

import errno

from mqfs.store import InvalidMessage, Message, StoredMessage
from mqfs.store.errors import StoreError
from mqfs.store.format.jsonl import BodyTooLarge, message_of, replay_line

from ..errors import FsError, errno_for
from ..handles import Handle, LinesHandle, Opening, Runner
from ..inodes import REPLAY, Node, canonical_int
from ..parts import Parts
from ..writers import JsonlWriter
from .queue import QueueFile

ORIGIN_TOPIC = "RETRY_TOPIC"  # the topic a broker's retry or dead-letter copy came from
COPIES = ("%DLQ%", "%RETRY%")  # the topics of such copies


class ReplayWriter(JsonlWriter):
    """Each line an offset of the queue (as `ls` of the queue, of `at/<range>/` or
    `tags/<tag>/` prints them); the messages of the lines one write completes are published
    together or (a line naming no message: ENOENT, no offset: EINVAL) not at all."""

    c_lines = False

    def __init__(self, parts: Parts, topic: str, queue: int):
        super().__init__(topic, queue, 0, parts.budget)  # the limit is each copy's topic's
        self.parts = parts
        self.line_limit = 64  # an offset and its newline, with room for blanks

    def _parse(self, head: bytes, data: bytes, start: int, end: int) -> list[Message]:
        out = []
        for line in (head + data[start:end]).split(b"\n"):
            word = line.strip()
            if not word:
                continue
            self.lines += 1
            try:
                out.append(self.copy(word))
            except (FsError, StoreError) as exc:  # a refusal fails the handle
                err = errno_for(exc) or errno.EIO
                self._drop(err)
                raise FsError(err, f"line {self.lines}: {exc}") from exc
        return out

    def copy(self, word: bytes) -> Message:
        offset = canonical_int(word)
        if offset is None:
            raise FsError(errno.EINVAL, f"{word.decode(errors='replace')!r} is no offset")
        stored = self.parts.messages.get(self.topic, self.queue, offset)
        topic, queue = self.destination(stored)
        try:
            return message_of(replay_line(stored), topic, queue,
                              self.parts.body_limit(topic, queue))
        except BodyTooLarge as exc:
            raise FsError(errno.EFBIG, str(exc)) from None
        except InvalidMessage as exc:
            raise FsError(errno.EINVAL, str(exc)) from None

    def destination(self, msg: StoredMessage) -> tuple[str, int]:
        """A retry or dead letter goes to the topic its RETRY_TOPIC names, in queue
        offset mod its queues (spread as a producer spreads); any other message to its
        own queue."""
        origin = msg.properties.get(ORIGIN_TOPIC) if self.topic.startswith(COPIES) else None
        if not origin:
            return self.topic, self.queue
        queues = self.parts.store.queue_ids(origin)
        if not queues:
            raise FsError(errno.ENOENT, f"{origin}, the topic message {msg.queue_offset} came "
                                        "from, has no queue here")
        return origin, queues[msg.queue_offset % len(queues)]


class Replay(QueueFile):
    """replay: write-only in effect (it reads as empty); not listed, like follow."""

    kind = REPLAY
    tail = "/replay"
    perm = 0o666
    takes_writes = True

    async def open(self, run: Runner, node: Node, how: Opening) -> Handle:
        writer = ReplayWriter(self.parts, node.topic, node.queue) if how.writing else None
        return LinesHandle(node.ino, writer, self.parts.put)
