"""Inode numbers and the table of named nodes.

A few fixed inodes, a small table for named directories and files (topics, queues, keys,
groups), and computed numbers for messages and key links:
``MSG_BIT | qidx << 40 | offset`` where qidx indexes the (small) table of queues seen so far;
symlinks to a message add ``LINK_BIT | view << 60`` (the directory the link is in decides
its target). Nothing grows with the number of messages. Files staged in `tmp/` get
``STAGED_BIT | n`` from a counter (never reused) and live only until published, removed or
unmounted.
"""

from __future__ import annotations

import errno
import threading
from dataclasses import dataclass

from mqfs.store.format.message import NAME_MAX

from .errors import FsError

ROOT_INO, TOPICS_INO, KEYS_INO, GROUPS_INO, STATUS_INO = 1, 2, 3, 4, 5
(ROOT, TOPICS, KEYS, GROUPS, TOPIC, QUEUE, APPEND, JSONL, KEYDIR, GROUP, GROUP_TOPIC,
 GROUP_QUEUE, MESSAGE, LINK, TMP, STAGED, FOLLOW, STATUS, AT, TAGS, TAGDIR, LINES, AT_RANGE,
 TOPIC_AT, TOPIC_AT_TIME, TOPIC_AT_RANGE, GROUP_ALL, REPLAY) = range(28)

MSG_BIT = 1 << 63
LINK_BIT = 1 << 62
STAGED_BIT = 1 << 61
OFFSET_BITS = 40
QIDX_BITS = 20
VIEW_SHIFT = OFFSET_BITS + QIDX_BITS
# where a link inode's name was found, which decides its target: /keys/<key>/, <queue>/at/,
# a directory below the queue's (tags/<tag>/, at/<range>/), one below the topic's at/
KEY_VIEW, AT_VIEW, QUEUE_SUB_VIEW, TOPIC_AT_VIEW = range(4)
OFFSET_MASK = (1 << OFFSET_BITS) - 1
QIDX_MASK = (1 << QIDX_BITS) - 1

LONG = 3600.0  # seconds the kernel may cache what never changes (messages, fixed dirs)
BLKSIZE = 128 * 1024  # large st_blksize so cp and friends use large reads


@dataclass(slots=True)
class Node:
    """A named thing with a table inode."""

    ino: int
    kind: int
    parent: int
    topic: str = ""
    queue: int = -1
    key: str = ""
    group: str = ""


@dataclass(slots=True)
class Attr:
    ino: int
    mode: int
    size: int = 0
    mtime_ns: int = 0
    nlink: int = 1
    entry_timeout: float = LONG
    attr_timeout: float = LONG
    blksize: int = BLKSIZE


def message_ino(qidx: int, offset: int) -> int:
    if offset > OFFSET_MASK or qidx > QIDX_MASK:
        raise FsError(errno.ENOENT, f"offset {offset} is past any queue's end")
    return MSG_BIT | qidx << OFFSET_BITS | offset


def link_ino(qidx: int, offset: int, view: int = KEY_VIEW) -> int:
    return message_ino(qidx, offset) | LINK_BIT | view << VIEW_SHIFT


def split_ino(ino: int) -> tuple[bool, int, int]:
    """(is_link, qidx, offset) of a computed inode."""
    return bool(ino & LINK_BIT), (ino >> OFFSET_BITS) & QIDX_MASK, ino & OFFSET_MASK


def link_view(ino: int) -> int:
    return (ino >> VIEW_SHIFT) & 3


def canonical_int(name: bytes) -> int | None:
    """The number a name spells in canonical decimal ("0", "17"), else None, so that
    "007" and "7" never name the same file."""
    if not name.isdigit() or len(name) > 18 or (len(name) > 1 and name[0] == 0x30):
        return None
    return int(name)


def text_name(name: bytes) -> str:
    if len(name) > NAME_MAX:
        raise FsError(errno.ENAMETOOLONG)
    try:
        return name.decode("utf-8")
    except UnicodeDecodeError:
        raise FsError(errno.ENOENT) from None


class NodeTable:
    """Inodes of the named things; small (topics, queues, keys looked up, groups)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_ino: dict[int, Node] = {}
        self._by_key: dict[tuple, Node] = {}
        self.queues: list[Node] = []  # qidx -> QUEUE node
        self._qidx: dict[tuple[str, int], int] = {}
        self._next = 16
        for ino, kind in ((ROOT_INO, ROOT), (TOPICS_INO, TOPICS), (KEYS_INO, KEYS),
                          (GROUPS_INO, GROUPS), (STATUS_INO, STATUS)):
            self._by_ino[ino] = Node(ino, kind, ROOT_INO)

    def get(self, ino: int) -> Node:
        node = self._by_ino.get(ino)
        if node is None:
            raise FsError(errno.ENOENT, f"no inode {ino}")
        return node

    def find(self, ino: int) -> Node | None:
        """The node of a table inode, None when there is none (no error to report)."""
        return self._by_ino.get(ino)

    def intern(self, ident: tuple, kind: int, parent: int, **fields) -> Node:
        node = self._by_key.get(ident)
        if node is not None:
            return node
        with self._lock:
            node = self._by_key.get(ident)
            if node is None:
                node = Node(self._next, kind, parent, **fields)
                self._next += 1
                self._by_ino[node.ino] = node
                self._by_key[ident] = node
                if kind == QUEUE:
                    self._qidx[(node.topic, node.queue)] = len(self.queues)
                    self.queues.append(node)
        return node

    def ino_of(self, ident: tuple) -> int | None:
        node = self._by_key.get(ident)
        return None if node is None else node.ino

    def topic(self, topic: str) -> Node:
        return self.intern(("t", topic), TOPIC, TOPICS_INO, topic=topic)

    def queue(self, topic: str, queue: int) -> Node:
        parent = self.topic(topic).ino
        return self.intern(("q", topic, queue), QUEUE, parent, topic=topic, queue=queue)

    def child(self, parent: Node, kind: int, tag: str) -> Node:
        """A queue's file or directory (append, tmp/, at/, ...), named by its ident tag."""
        return self.intern((tag, parent.topic, parent.queue), kind, parent.ino,
                           topic=parent.topic, queue=parent.queue)

    def qidx(self, topic: str, queue: int) -> int:
        """The queue's index in message inodes (the queue gets one when it has none)."""
        self.queue(topic, queue)
        return self._qidx[(topic, queue)]

    def queue_at(self, qidx: int) -> Node:
        """The queue a message inode's qidx names; ENOENT for one never handed out."""
        try:
            return self.queues[qidx]
        except IndexError:
            raise FsError(errno.ENOENT) from None
