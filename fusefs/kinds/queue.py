"""A queue directory, its files (append, append.jsonl, follow) and its tmp/."""

from __future__ import annotations

import errno

from ..errors import FsError
from ..inodes import (
    APPEND,
    AT,
    BLKSIZE,
    FOLLOW,
    JSONL,
    LINES,
    OFFSET_MASK,
    QUEUE,
    TAGS,
    TMP,
    Attr,
    Node,
    canonical_int,
)
from ..listings import Listing, QueueListing
from ..topicnames import topic_entry
from .base import File, Kind
from .root import MovingDir

SINK_BLKSIZE = 1 << 20  # append files: cat and cp write 1 MiB per request (the most FUSE
                        # takes in one), so append.jsonl gets ~900 lines of 1 KiB per put

# a queue's named children: name -> (kind, ident tag in the node table); `follow` is never
# listed, so globs, `grep -r` and `find | xargs cat` do not block on it
CHILDREN = {b"append": (APPEND, "a"), b"append.jsonl": (JSONL, "j"), b"append.lines": (LINES, "l"),
            b"follow": (FOLLOW, "f"), b"tmp": (TMP, "tmp"), b"at": (AT, "at"), b"tags": (TAGS, "tags")}
LISTED = (b"append", b"append.jsonl", b"append.lines", b"tmp", b"at", b"tags")


class InQueue:
    """A queue directory or one of its children: the path is the queue's plus a tail."""

    tail = ""

    def path(self, node: Node) -> str:
        return f"/topics/{topic_entry(node.topic)}/{node.queue}{self.tail}"


class Queue(InQueue, MovingDir):
    """/topics/<t>/<q>: its files, and the messages named by offset."""

    kind = QUEUE

    def lookup(self, node: Node, name: bytes) -> Attr:
        child = CHILDREN.get(name)
        if child is not None:
            return self.parts.node_attr(self.parts.nodes.child(node, *child))
        offset = canonical_int(name)
        if offset is None:
            raise FsError(errno.ENOENT)
        return self.parts.messages.attr(node, offset)

    def lookup_slow(self, node: Node, name: bytes) -> bool:
        """A message with a large body (see `Messages.cached_if_small`)."""
        offset = canonical_int(name)
        if offset is None or offset > OFFSET_MASK:
            return False
        return not self.parts.messages.cached_if_small(node, offset)

    def listing(self, node: Node) -> Listing:
        nodes = self.parts.nodes
        return QueueListing(self.parts, node,
                            [(name, nodes.child(node, *CHILDREN[name]).ino) for name in LISTED])

    def xattrs(self, node: Node) -> dict[bytes, bytes]:
        lo = self.parts.store.min_offset(node.topic, node.queue)
        hi = self.parts.store.max_offset(node.topic, node.queue)
        return {b"user.min_offset": b"%d" % lo, b"user.max_offset": b"%d" % hi}


class QueueFile(InQueue, File):
    """A file of a queue, always empty to stat, whose mtime is the queue's."""

    moving = True
    blksize = BLKSIZE

    def attr(self, node: Node) -> Attr:
        return Attr(node.ino, self.mode, 0,
                    self.parts.times.queue_mtime(node.topic, node.queue), blksize=self.blksize)


class Append(QueueFile):
    """append: bytes written become a message."""

    kind = APPEND
    tail = "/append"
    perm = 0o666
    blksize = SINK_BLKSIZE


class Jsonl(Append):
    """append.jsonl: as append, one message per JSON line."""

    kind = JSONL
    tail = "/append.jsonl"


class Lines(Append):
    """append.lines: as append, one message per line."""

    kind = LINES
    tail = "/append.lines"


class Follow(QueueFile):
    """follow: a file of the queue's newest bodies that grows as messages arrive
    (`fusefs.following`); its size is measured at every stat, never cached."""

    kind = FOLLOW
    tail = "/follow"

    def attr(self, node: Node) -> Attr:
        return Attr(node.ino, self.mode, self.parts.follows.size(node.topic, node.queue),
                    self.parts.times.queue_mtime(node.topic, node.queue), attr_timeout=0.0,
                    blksize=self.blksize)


class Tmp(InQueue, Kind):
    """tmp/: files being staged (see `fusefs.staged`)."""

    kind = TMP
    perm = 0o777
    tail = "/tmp"

    def lookup(self, node: Node, name: bytes) -> Attr:
        return self.parts.tmp.lookup(node.ino, name)

    def children(self, node: Node) -> list[tuple[bytes, int]]:
        return self.parts.tmp.names(node.ino)
