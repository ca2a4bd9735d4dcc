"""The mount root, /status.json, /topics and /topics/<t>."""

from __future__ import annotations

import errno
import json
import logging
import os

from mqfs.store.errors import InvalidMessage
from mqfs.store.format.message import MAX_RETRY_TOPIC_LEN, MAX_TOPIC_LEN, validate_topic

from ..errors import FsError
from ..handles import Handle, Opening, Runner, TextHandle
from ..inodes import (
    GROUPS_INO,
    KEYS_INO,
    LONG,
    NAME_MAX,
    ROOT,
    STATUS,
    STATUS_INO,
    TOPIC,
    TOPIC_AT,
    TOPICS,
    TOPICS_INO,
    Attr,
    Node,
    canonical_int,
    text_name,
)
from ..parts import Parts
from ..status import status
from ..topicnames import topic_entry
from .base import File, Kind

log = logging.getLogger(__name__)

STATUS_NAME = b"status.json"
ROOT_ENTRIES = [(b"topics", TOPICS_INO), (b"keys", KEYS_INO), (b"groups", GROUPS_INO),
                (STATUS_NAME, STATUS_INO)]
ROOT_NAMES = dict(ROOT_ENTRIES)


class Root(Kind):
    kind = ROOT

    def lookup(self, node: Node, name: bytes) -> Attr:
        ino = ROOT_NAMES.get(name)
        if ino is None:
            raise FsError(errno.ENOENT)
        return self.parts.getattr(ino)

    def children(self, node: Node) -> list[tuple[bytes, int]]:
        return list(ROOT_ENTRIES)

    def path(self, node: Node) -> str:
        return "/"

    def xattrs(self, node: Node) -> dict[bytes, bytes]:
        store = self.parts.store
        return {b"user.mqfs.pid": b"%d" % os.getpid(),
                b"user.mqfs.store": store.root.encode(),
                b"user.mqfs.flush_mode": store.config.flush_mode.encode()}


class Status(File):
    """/status.json: its text is made at open, so its attributes are never cached; its size
    is the text's made at the last open, so `tail` (open, then fstat) reads the text it got."""

    kind = STATUS

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self.size = 0  # bytes of the text made at the last open

    def attr(self, node: Node) -> Attr:
        return Attr(node.ino, self.mode, self.size, self.parts.clock(), 1, LONG, 0.0)

    def path(self, node: Node) -> str:
        return "/status.json"

    async def open(self, run: Runner, node: Node, how: Opening) -> Handle:
        return TextHandle(node.ino, await run.thread(self.text))  # statvfs, newest records

    def text(self) -> bytes:
        """The text, made now; its size is what stat shows until the next."""
        text = (json.dumps(status(self.parts), indent=1) + "\n").encode()
        self.size = len(text)
        return text


class MovingDir(Kind):
    """A directory whose mtime is its newest message's (/topics, a topic, a queue): cached
    by the kernel until a put moves it (a queue directory's attributes are asked for at
    every name resolved in it: three times per entry of an `ls -l`)."""

    perm = 0o777
    moving = True

    def attr(self, node: Node) -> Attr:
        return Attr(node.ino, self.mode, 0, self.parts.times.dir_mtime(node), 2)


class Topics(MovingDir):
    kind = TOPICS

    def lookup(self, node: Node, name: bytes) -> Attr:
        return self.parts.node_attr(self.parts.nodes.topic(self.existing_topic(name)))

    def children(self, node: Node) -> list[tuple[bytes, int]]:
        return [(topic_entry(t).encode(), self.parts.nodes.topic(t).ino) for t in sorted(self.parts.store.topics())]

    def path(self, node: Node) -> str:
        return "/topics"

    def mkdir(self, node: Node, name: bytes) -> Attr:
        """mkdir in /topics creates a topic: an empty directory, queues come with mkdir N."""
        topic = text_name(name)
        limit = MAX_RETRY_TOPIC_LEN if topic.startswith("%RETRY%") else MAX_TOPIC_LEN
        if len(topic) > limit:
            raise FsError(errno.ENAMETOOLONG, f"topic names are at most {limit} characters")
        try:
            validate_topic(topic)
            if self.parts.store.has_topic(topic):
                raise FsError(errno.EEXIST)
            self.parts.store.create_topic(topic, 0)  # (refuses a topic a broker keeps)
        except InvalidMessage as exc:
            raise FsError(errno.EINVAL, str(exc)) from None
        return self.parts.node_attr(self.parts.nodes.topic(topic))


class Topic(MovingDir):
    """/topics/<t>: its queues, and at/ (not listed: globs over a topic's entries find queues)."""

    kind = TOPIC

    def lookup(self, node: Node, name: bytes) -> Attr:
        if name == b"at":
            return self.parts.node_attr(self.parts.nodes.child(node, TOPIC_AT, "at"))
        q = self.existing_queue(node.topic, name)
        return self.parts.node_attr(self.parts.nodes.queue(node.topic, q))

    def children(self, node: Node) -> list[tuple[bytes, int]]:
        return [(b"%d" % q, self.parts.nodes.queue(node.topic, q).ino)
                for q in self.parts.store.queue_ids(node.topic)]

    def path(self, node: Node) -> str:
        return f"/topics/{topic_entry(node.topic)}"

    def xattrs(self, node: Node) -> dict[bytes, bytes]:
        return {b"user.queues": b"%d" % len(self.parts.store.queue_ids(node.topic))}

    def mkdir(self, node: Node, name: bytes) -> Attr:
        """mkdir N in /topics/<t> creates queue N (a new topic has none, so `mkdir T/{0..3}`
        makes four). Queues are numbered from 0 without gaps (RocketMQ's queue count): N past
        the next one makes those between too, and the log says so."""
        if len(name) > NAME_MAX:
            raise FsError(errno.ENAMETOOLONG)
        q = canonical_int(name)
        if q is None:
            raise FsError(errno.EINVAL, "queue directories are named by their number")
        if self.has_queue(node.topic, q):
            raise FsError(errno.EEXIST)
        ids = self.parts.store.queue_ids(node.topic)
        after = ids[-1] + 1 if ids else 0
        self.parts.store.add_queue(node.topic, q)
        if q > after:
            log.info("mkdir /topics/%s/%d: made queues %d..%d (a topic's queues are numbered "
                     "from 0 without gaps)", node.topic, q, after, q)
        return self.parts.node_attr(self.parts.nodes.queue(node.topic, q))
