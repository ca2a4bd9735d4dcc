"""A queue directory, its files (append, append.jsonl, follow) and its tmp/."""

from __future__ import annotations

import errno
import stat
from collections.abc import Callable

from mqfs.store import StoredMessage

from ..errors import FsError
from ..handles import (
    AppendHandle,
    FollowHandle,
    Handle,
    LinesHandle,
    Opening,
    Runner,
    StagedHandle,
)
from ..inodes import (
    APPEND,
    AT,
    BLKSIZE,
    FOLLOW,
    JSONL,
    LINES,
    OFFSET_MASK,
    QUEUE,
    QUEUE_SUB_VIEW,
    REPLAY,
    TAGS,
    TMP,
    Attr,
    Node,
    canonical_int,
)
from ..listings import Listing, QueueListing
from ..parts import Parts
from ..staged import Staged
from ..topicnames import topic_entry
from ..writers import AppendWriter, JsonlWriter, LinesWriter
from .base import File, Kind
from .root import MovingDir

SINK_BLKSIZE = 1 << 20  # append files: cat and cp write 1 MiB per request (the most FUSE
                        # takes in one), so append.jsonl gets ~900 lines of 1 KiB per put

# a queue's named children: name -> (kind, ident tag in the node table); `follow` is never
# listed, so globs, `grep -r` and `find | xargs cat` do not block on it, nor is `replay`
# (globs over a queue find its messages and the ways to write them)
CHILDREN = {b"append": (APPEND, "a"), b"append.jsonl": (JSONL, "j"), b"append.lines": (LINES, "l"),
            b"follow": (FOLLOW, "f"), b"tmp": (TMP, "tmp"), b"at": (AT, "at"), b"tags": (TAGS, "tags"),
            b"replay": (REPLAY, "r")}
LISTED = (b"append", b"append.jsonl", b"append.lines", b"tmp", b"at", b"tags")
# names a staged file cannot be published as: the queue's own entries, but `append`
UNPUBLISHABLE = frozenset(CHILDREN) - {b"append"}


class InQueue:
    """A queue directory or one of its children: the path is the queue's plus a tail."""

    tail = ""
    parts: Parts  # the Kind's

    def path(self, node: Node) -> str:
        return f"/topics/{topic_entry(node.topic)}/{node.queue}{self.tail}"

    def linked(self, node: Node, name: bytes, keep: Callable[[StoredMessage], bool]) -> Attr:
        """A link named by offset in a view of the queue (tags/<tag>/, at/<a>..<b>/): ENOENT
        unless the name is an offset of the queue whose message the view keeps."""
        offset = canonical_int(name)
        if offset is None:
            raise FsError(errno.ENOENT)
        msg = self.parts.messages.get(node.topic, node.queue, offset)
        if not keep(msg):
            raise FsError(errno.ENOENT)
        return self.parts.messages.link_attr(self.parts.nodes.qidx(node.topic, node.queue), msg,
                                             QUEUE_SUB_VIEW)


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

    @staticmethod
    def check_publish_name(name: bytes) -> None:
        """A staged file renamed into the queue publishes under any new name or `append`;
        the queue's other entries are refused."""
        if name in UNPUBLISHABLE:
            raise FsError(errno.EINVAL, "rename into the queue directory or onto append")

    async def publish(self, run: Runner, node: Node, entry: Staged) -> None:
        """Store a staged file as one message of this queue, then remove it from tmp/; the
        rename answers once it is stored (refused: the file stays)."""
        tmp = self.parts.tmp
        entry.busy = True
        try:
            msg = await run.spool(entry.spool.on_disk, tmp.message, entry, node.topic,
                                  node.queue)
            await run.thread(self.parts.put, [msg])
            run.stored()
        finally:
            entry.busy = False
        await run.spool(entry.spool.on_disk, tmp.unlink, entry.parent, entry.name)


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
    takes_writes = True

    async def usable(self, run: Runner, node: Node) -> None:
        """Open for writing: the queue's first use made now (in a worker thread: it reads its
        files), so a queue it refuses (the log does not hold every offset it gave out) fails
        the open, which a shell reports, not the close it never checks."""
        if self.parts.store.needs_first_use(node.topic, node.queue):
            await run.thread(self.parts.store.use_queue, node.topic, node.queue)

    async def open(self, run: Runner, node: Node, how: Opening) -> Handle:
        writer = None
        if how.writing:
            await self.usable(run, node)
            writer = AppendWriter(node.topic, node.queue,
                                  self.parts.body_limit(node.topic, node.queue), self.parts.spool())
        return AppendHandle(node.ino, writer, self.parts.put, self.parts.put_now)


class Jsonl(Append):
    """append.jsonl: as append, one message per JSON line."""

    kind = JSONL
    tail = "/append.jsonl"
    writer: type[JsonlWriter] = JsonlWriter

    async def open(self, run: Runner, node: Node, how: Opening) -> Handle:
        writer = None
        if how.writing:
            await self.usable(run, node)
            parts = self.parts
            writer = self.writer(node.topic, node.queue, parts.body_limit(node.topic, node.queue),
                                 parts.budget, parts.store.max_body_size)
        return LinesHandle(node.ino, writer, self.parts.put, self.parts.put_now,
                           write_behind=self.parts.store.config.flush_mode == "async")


class Lines(Jsonl):
    """append.lines: as append, one message per line."""

    kind = LINES
    tail = "/append.lines"
    writer = LinesWriter


class Follow(QueueFile):
    """follow: a file of the queue's newest bodies that grows as messages arrive
    (`fusefs.following`); its size is measured at every stat, never cached."""

    kind = FOLLOW
    tail = "/follow"

    def attr(self, node: Node) -> Attr:
        return Attr(node.ino, self.mode, self.parts.follows.size(node.topic, node.queue),
                    self.parts.times.queue_mtime(node.topic, node.queue), attr_timeout=0.0,
                    blksize=self.blksize)

    async def open(self, run: Runner, node: Node, how: Opening) -> Handle:
        if how.writing:
            raise FsError(errno.EACCES, "follow is read-only")
        follows = self.parts.follows
        return FollowHandle(node.ino, follows.open(node.topic, node.queue, how.uid), follows,
                            how.pid, how.uid)


class Tmp(InQueue, Kind):
    """tmp/: files being staged (see `fusefs.staged`)."""

    kind = TMP
    perm = 0o777
    tail = "/tmp"

    def lookup(self, node: Node, name: bytes) -> Attr:
        return self.parts.tmp.lookup(node.ino, name)

    def children(self, node: Node) -> list[tuple[bytes, int]]:
        return self.parts.tmp.names(node.ino)

    # staged files: their inodes are the Model's to dispatch (not table nodes), so these
    # take the tmp/ directory's inode
    def create(self, tmp_ino: int, name: bytes, mode: int) -> tuple[Handle, Attr]:
        """A new staged file, open."""
        if not stat.S_ISREG(mode) and stat.S_IFMT(mode):
            raise FsError(errno.EPERM, "only regular files can be staged")
        tmp = self.parts.tmp
        attr = tmp.create(tmp_ino, name)
        return StagedHandle(tmp.staged[attr.ino], tmp), attr

    async def open_staged(self, run: Runner, entry: Staged, how: Opening) -> Handle:
        if how.truncate and how.writing:
            await run.spool(entry.spool.on_disk, self.parts.tmp.truncate, entry, 0)
        return StagedHandle(entry, self.parts.tmp)

    async def truncate(self, run: Runner, entry: Staged, size: int) -> None:
        disk = entry.spool.on_disk or size > entry.spool.size
        await run.spool(disk, self.parts.tmp.truncate, entry, size)

    async def remove(self, run: Runner, tmp_ino: int, name: bytes) -> None:
        """rm: abandons it (closing its staging file, if any, in the lane)."""
        entry = self.parts.tmp.entry(tmp_ino, name)
        await run.spool(entry.spool.on_disk, self.parts.tmp.unlink, entry.parent, entry.name)

    async def move_in(self, run: Runner, tmp_ino: int, entry: Staged, name: bytes,
                      noreplace: bool) -> None:
        """A rename from a tmp/ into this one: a plain rename (replacing what has the name)."""
        tmp = self.parts.tmp
        replaced = tmp.tmp_dirs.get(tmp_ino, {}).get(name)
        disk = replaced is not None and tmp.staged[replaced].spool.on_disk
        await run.spool(disk, tmp.move, entry, tmp_ino, name, noreplace)
