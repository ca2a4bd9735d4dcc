"""What every kind of named node answers: lookup in it, its attributes, its listing, its path
(for logs), its xattrs, mkdir in it and its open (the handle). One class per kind, with the
rules of that kind; `fusefs.kinds` registers them."""

from __future__ import annotations

import errno
import stat

from ..errors import FsError
from ..handles import Handle, Opening, Runner
from ..inodes import Attr, Node, canonical_int, text_name
from ..listings import Listing, SnapshotListing
from ..parts import Parts
from ..topicnames import TopicNames, topic_named


class Kind:
    """A kind of named node. The defaults are a read-only directory that lists nothing."""

    kind: int  # the Node.kind this class answers for
    is_dir = True
    perm = 0o555  # less the umask option (0o777: takes mkdir, create or rename into)
    moving = False  # its mtime is the newest message's: the kernel is told when it moves
    searches = False  # a lookup in it searches the store's indexes (a worker thread's job)
    slow_listing = False  # its listing queries the store at opendir (a worker thread's job)
    takes_writes = False  # a file opened for writing: O_TRUNC (to size 0) is accepted

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.mode = (stat.S_IFDIR if self.is_dir else stat.S_IFREG) | (self.perm & ~parts.umask)

    def lookup(self, node: Node, name: bytes) -> Attr:
        """The attributes of `name` in this directory (a name of at most NAME_MAX bytes,
        not "." or "..")."""
        raise FsError(errno.ENOENT)

    def lookup_slow(self, node: Node, name: bytes) -> bool:
        """Whether `lookup(node, name)` may wait for the disk."""
        return self.searches

    def attr(self, node: Node) -> Attr:
        return Attr(node.ino, self.mode, 0, self.parts.started_ns, 2)

    def children(self, node: Node) -> list[tuple[bytes, int]]:
        """(name, inode) of a small directory, taken once per opendir. None by default:
        keys/, at/ and tags/ are looked up by name (hashes and times), never enumerated."""
        return []

    def listing(self, node: Node) -> Listing:
        return SnapshotListing(self.parts, node, self.children(node), self.slow_listing)

    def path(self, node: Node) -> str:
        raise NotImplementedError

    def xattrs(self, node: Node) -> dict[bytes, bytes]:
        return {}

    def mkdir(self, node: Node, name: bytes) -> Attr:
        raise FsError(errno.EPERM, "directories are created only in /topics and /topics/<t>")

    async def open(self, run: Runner, node: Node, how: Opening) -> Handle:
        """The handle of an open file of this kind (directories are opened with opendir)."""
        raise FsError(errno.EISDIR)

    def has_queue(self, topic: str, queue: int) -> bool:
        return queue in self.parts.store.queue_ids(topic)

    def existing_topic(self, name: bytes) -> str:
        """The topic a name spells; ENOENT when the store has no such topic."""
        topic = topic_named(text_name(name), TopicNames(self.parts.store))
        if topic is None:
            raise FsError(errno.ENOENT)
        return topic

    def existing_queue(self, topic: str, name: bytes) -> int:
        """The queue of topic a name spells; ENOENT when the topic has no such queue."""
        q = canonical_int(name)
        if q is None or not self.has_queue(topic, q):
            raise FsError(errno.ENOENT)
        return q


class File(Kind):
    """A named file (not a directory)."""

    is_dir = False
    perm = 0o444
