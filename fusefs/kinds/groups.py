"""/groups: consumer groups' committed offsets, one text file per group, topic and queue."""

from __future__ import annotations

import errno

from mqfs.store import MessageStore
from mqfs.store.errors import InvalidMessage
from mqfs.store.meta.metadata import validate_group

from ..errors import FsError
from ..handles import Handle, OffsetHandle, Opening, Runner
from ..inodes import (
    GROUP,
    GROUP_ALL,
    GROUP_QUEUE,
    GROUP_TOPIC,
    GROUPS,
    GROUPS_INO,
    LONG,
    Attr,
    Node,
    canonical_int,
    text_name,
)
from ..parts import Parts
from ..timenames import when as time_of
from ..topicnames import topic_entry
from ..writers import MAX_OFFSET_TEXT, OffsetWriter
from .base import File, Kind

ALL = b"all"  # /groups/<g>/<t>/all: every queue of the topic at once


def group_path(node: Node) -> str:
    parts = [node.group, node.topic, "" if node.queue < 0 else str(node.queue)]
    return "/groups/" + "/".join(p for p in parts if p)


class Groups(Kind):
    """/groups: every valid group name exists; the listing shows groups that committed."""

    kind = GROUPS

    def lookup(self, node: Node, name: bytes) -> Attr:
        group = text_name(name)
        try:
            validate_group(group)
        except InvalidMessage:
            raise FsError(errno.ENOENT) from None
        return self.parts.node_attr(self._group(group))

    def _group(self, group: str) -> Node:
        return self.parts.nodes.intern(("g", group), GROUP, GROUPS_INO, group=group)

    def children(self, node: Node) -> list[tuple[bytes, int]]:
        return [(g.encode(), self._group(g).ino) for g in sorted(self.parts.store.groups())]

    def path(self, node: Node) -> str:
        return "/groups"


class Group(Kind):
    """/groups/<g>: a directory per topic."""

    kind = GROUP

    def lookup(self, node: Node, name: bytes) -> Attr:
        return self.parts.node_attr(self._topic(node, self.existing_topic(name)))

    def _topic(self, node: Node, topic: str) -> Node:
        return self.parts.nodes.intern(("gt", node.group, topic), GROUP_TOPIC, node.ino,
                                    group=node.group, topic=topic)

    def children(self, node: Node) -> list[tuple[bytes, int]]:
        return [(topic_entry(t).encode(), self._topic(node, t).ino) for t in sorted(self.parts.store.topics())]

    def path(self, node: Node) -> str:
        return group_path(node)


class GroupTopic(Kind):
    """/groups/<g>/<t>: an offset file per queue of the topic, and `all` (not listed, so
    `groups/<g>/<t>/*` globs the queues' files)."""

    kind = GROUP_TOPIC

    def lookup(self, node: Node, name: bytes) -> Attr:
        if name == ALL:
            return self.parts.node_attr(self.parts.nodes.intern(
                ("ga", node.group, node.topic), GROUP_ALL, node.ino, group=node.group,
                topic=node.topic))
        return self.parts.node_attr(self._queue(node, self.existing_queue(node.topic, name)))

    def _queue(self, node: Node, q: int) -> Node:
        return self.parts.nodes.intern(("gq", node.group, node.topic, q), GROUP_QUEUE, node.ino,
                                    group=node.group, topic=node.topic, queue=q)

    def children(self, node: Node) -> list[tuple[bytes, int]]:
        return [(b"%d" % q, self._queue(node, q).ino) for q in self.parts.store.queue_ids(node.topic)]

    def path(self, node: Node) -> str:
        return group_path(node)


def position(store: MessageStore, topic: str, q: int, text: str) -> int:
    """The offset a written text names in a queue: a decimal offset (ERANGE past the end),
    `earliest` (the queue's first), `latest` (one past its last: only new messages) or
    `@TIME` (the first message stored at or after TIME, any form at/ takes: `@-1h`,
    `@today`, `@2026-11-22T10:00Z`; `latest` when none is yet); EINVAL for other text."""
    if text.isascii() and text.isdigit():
        hi = store.max_offset(topic, q)
        if int(text) > hi:
            raise FsError(errno.ERANGE, f"offset {text} is past the end of {topic}/{q} (max {hi})")
        return int(text)
    if text == "earliest":
        return store.min_offset(topic, q)
    if text == "latest":
        return store.max_offset(topic, q)
    if text.startswith("@"):
        try:
            when = time_of(text[1:])
        except ValueError as exc:
            raise FsError(errno.EINVAL, str(exc)) from None
        return min(store.offset_by_time(topic, q, when), store.max_offset(topic, q))
    raise FsError(errno.EINVAL, f"write an offset, earliest, latest or @TIME, not {text!r}")


def one_instant(text: str) -> str:
    """A position as every queue of one write takes it: `@-10m` or `@today` read once, so
    the queues move to the same instant (the clock moves between queues)."""
    if text.startswith("@"):
        try:
            return f"@{time_of(text[1:])}"
        except ValueError:
            pass  # `position` refuses it, with the forms
    return text


class GroupFile(File):
    """A file of a group's offsets: its text moves with commits and retention, so its
    attributes are never cached; its mtime is the last commit through this mount."""

    perm = 0o666
    takes_writes = True

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self.commit_ns: dict[tuple[str, str, int], int] = {}  # last commit through this mount

    def attr(self, node: Node) -> Attr:
        text = self.offset_text(node)
        when = self.commit_ns.get((node.group, node.topic, node.queue), self.parts.started_ns)
        return Attr(node.ino, self.mode, len(text), when, 1, LONG, 0.0)

    def path(self, node: Node) -> str:
        return group_path(node)

    def offset_text(self, node: Node) -> bytes:
        raise NotImplementedError

    def committed(self, group: str, topic: str, q: int) -> int:
        """The group's committed offset, or where a new consumer starts (the min offset)."""
        store = self.parts.store
        value = store.committed_offset(group, topic, q)
        return store.min_offset(topic, q) if value is None else value

    def commit(self, node: Node, offsets: dict[int, int]) -> bytes:
        self.parts.store.commit_offsets(node.group, node.topic, offsets)  # one write: all or none
        self.commit_ns[(node.group, node.topic, node.queue)] = self.parts.clock()
        return self.offset_text(node)


class GroupQueue(GroupFile):
    """/groups/<g>/<t>/<q>: the group's next offset as text; writing a position commits it."""

    kind = GROUP_QUEUE

    async def open(self, run: Runner, node: Node, how: Opening) -> Handle:
        offsets = None
        if how.writing:
            offsets = OffsetWriter(lambda text: position(self.parts.store, node.topic,
                                                         node.queue, text))
        return OffsetHandle(node.ino, self.offset_text(node), offsets,
                            lambda offset: self.commit(node, {node.queue: offset}))

    def offset_text(self, node: Node) -> bytes:
        return b"%d\n" % self.committed(node.group, node.topic, node.queue)


class GroupAll(GroupFile):
    """/groups/<g>/<t>/all: a line `<q> <offset>` per queue. One position written (an
    offset, earliest, latest, @TIME) moves every queue; lines `<q> <position>` (what it
    reads as: `cat all > saved`, later `cat saved > all`) move those queues. All the
    queues of a write move, or none when one refuses (ERANGE: an offset past its end)."""

    kind = GROUP_ALL

    async def open(self, run: Runner, node: Node, how: Opening) -> Handle:
        offsets = None
        if how.writing:
            room = MAX_OFFSET_TEXT * (len(self.parts.store.queue_ids(node.topic)) + 1)
            offsets = OffsetWriter(lambda text: self.resolve(node, text), room)
        return OffsetHandle(node.ino, self.offset_text(node), offsets,
                            lambda found: self.commit(node, found))

    def resolve(self, node: Node, text: str) -> dict[int, int]:
        store, topic = self.parts.store, node.topic
        queues = store.queue_ids(topic)
        lines = [line.split() for line in text.splitlines() if line.strip()]
        if not lines:
            raise FsError(errno.EINVAL, "write a position, or lines '<queue> <position>'")
        if len(lines) == 1 and len(lines[0]) == 1:
            text = one_instant(lines[0][0])
            return {q: position(store, topic, q, text) for q in queues}
        out = {}
        for words in lines:
            q = canonical_int(words[0].encode()) if len(words) == 2 else None
            if q is None or q not in queues:
                raise FsError(errno.EINVAL, f"write a position, or lines '<queue> <position>' "
                                            f"of {topic}'s queues, not {' '.join(words)!r}")
            out[q] = position(store, topic, q, words[1])
        return out

    def offset_text(self, node: Node) -> bytes:
        return b"".join(b"%d %d\n" % (q, self.committed(node.group, node.topic, q))
                        for q in self.parts.store.queue_ids(node.topic))

    def path(self, node: Node) -> str:
        return group_path(node) + "/all"
