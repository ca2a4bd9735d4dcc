"""The mounted tree as plain Python: the facade the adapter (`ops.py`) calls.

Nothing here knows about pyfuse3, so the whole tree can be tested without a kernel. The
adapter turns `Attr` into pyfuse3 objects and `FsError` into `FUSEError`. The work is done by
the parts this facade holds: inode numbers and the node table (`inodes`), one class per kind
of named node (`kinds`), messages and links (`messages`), moving times (`times`), tmp/ files
(`staged`), listings (`listings`) and status.json (`status`).
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from typing import cast

from mqfs.store import InvalidMessage, Message, MessageStore, PutResult
from mqfs.store.files.staging import Staging

from .errors import FsError
from .following import Follows
from .handles import Handle, Opening, Runner
from .inodes import (
    APPEND,
    GROUP_QUEUE,
    JSONL,
    LINES,
    LINK,
    LINK_BIT,
    MESSAGE,
    MSG_BIT,
    NAME_MAX,
    QUEUE,
    STAGED,
    STAGED_BIT,
    TMP,
    TOPIC,
    TOPICS,
    Attr,
    Node,
    NodeTable,
    canonical_int,
)
from .kinds import KINDS, Kind
from .kinds.groups import GroupQueue
from .kinds.queue import Queue, Tmp
from .listings import Listing
from .messages import Messages, message_xattr
from .parts import Parts
from .recent import Recent
from .spool import Budget, Spool
from .staged import StagedFiles
from .status import status
from .times import QueueTimes

KEY_HITS_MAX = 10_000  # default cap on entries listed under one /keys/<key> (-o keys_max=)
LOOP_BODY_MAX = 64 * 1024  # a put on the event loop copies at most this much (as a small body's read)


class Model:
    """The tree over one open MessageStore. Thread-safe: the adapter may call it from
    worker threads (mkdir, puts) while the trio thread serves reads."""

    def __init__(self, store: MessageStore, *, umask: int = 0o022,
                 keys_max: int = KEY_HITS_MAX, budget: Budget | None = None) -> None:
        self.store = store
        self.nodes = NodeTable()
        started_ns = time.time_ns()
        # staging holds spilled bodies; a read-only store gets none (writes are EROFS)
        self.staging = None if store.config.read_only else Staging(store.root)
        self.messages = Messages(store, self.nodes, umask)
        self.times = QueueTimes(store, self.nodes, started_ns)
        self.tmp = StagedFiles(self.nodes, umask, None if self.staging is None else self.spool,
                               self.body_limit)
        self.follows = Follows(store)
        self.recent = Recent()
        self._limits: dict[str, int] = {}
        self.forget_attrs: Callable[[list[int]], None] = lambda inodes: None
        self.parts = Parts(store, self.nodes, self.messages, self.times, self.tmp, self.follows,
                           self.recent, budget or Budget(), umask, keys_max, started_ns,
                           time.time_ns, self.getattr, self.node_attr, self.body_limit,
                           self.spool, self.put, self.put_now)
        self.kinds: dict[int, Kind] = {cls.kind: cls(self.parts) for cls in KINDS}
        self.group_files = cast(GroupQueue, self.kinds[GROUP_QUEUE])
        self.queue_dir = cast(Queue, self.kinds[QUEUE])
        self.tmp_dir = cast(Tmp, self.kinds[TMP])

    def spool(self) -> Spool:
        return Spool(self.staging, self.parts.budget)

    def body_limit(self, topic: str, queue: int) -> int:
        """The largest body a plain message to topic may have (max size or file size); asked
        when a writer opens, so a topic that takes no puts (a compaction topic) refuses there:
        a shell never checks close."""
        if topic in self.store.compaction:
            self.store.check_writable(topic)
        limit = self._limits.get(topic)
        if limit is None:
            limit = self._limits[topic] = self.store.max_body_size(
                Message.create(topic, b"", queue_id=queue))
        return limit

    def note_error(self, op: str, where: str, err: int, why: str) -> None:
        """Remember a refusal for status.json (the log has them all)."""
        self.recent.error(op, where, err, why)

    def status(self) -> dict:
        """What /status.json shows."""
        return status(self.parts)

    # --- names and attributes --------------------------------------------------------------
    def lookup(self, parent: int, name: bytes) -> Attr:
        node = self.nodes.get(parent)
        if name == b".":
            return self.getattr(parent)
        if name == b"..":
            return self.getattr(node.parent)
        kind = self.kinds[node.kind]
        if not kind.is_dir:
            raise FsError(errno.ENOTDIR)
        if len(name) > NAME_MAX:
            raise FsError(errno.ENAMETOOLONG)
        return kind.lookup(node, name)

    def getattr(self, ino: int) -> Attr:
        if ino & STAGED_BIT and not ino & MSG_BIT:
            return self.tmp.attr(self.tmp.get(ino))
        if ino & MSG_BIT:
            return self.messages.getattr(ino)
        return self.node_attr(self.nodes.get(ino))

    def node_attr(self, node: Node) -> Attr:
        kind = self.kinds[node.kind]
        if kind.moving:
            self.times.shown(node.ino)  # before the time is read: see QueueTimes.note_puts
        return kind.attr(node)

    def kind(self, ino: int) -> int:
        if ino & MSG_BIT:
            return LINK if ino & LINK_BIT else MESSAGE
        if ino & STAGED_BIT:
            self.tmp.get(ino)
            return STAGED
        return self.nodes.get(ino).kind

    def path(self, ino: int) -> str:
        """The mount-relative path of an inode, for log lines and status.json."""
        if ino & MSG_BIT:
            return self.messages.path(ino)
        if ino & STAGED_BIT:
            return self.tmp.path(ino, self.path)
        node = self.nodes.find(ino)
        if node is None:
            return f"(inode {ino})"
        return self.kinds[node.kind].path(node)

    def listing(self, ino: int) -> Listing:
        node = self.nodes.get(ino)
        kind = self.kinds[node.kind]
        if not kind.is_dir:
            raise FsError(errno.ENOTDIR)
        return kind.listing(node)

    # --- what may wait for the disk (the adapter runs it in a worker thread) ---------------
    def lookup_slow(self, parent: int, name: bytes) -> bool:
        """Whether a lookup may wait for the disk: the keys/, tags/ and at/ searches, a
        message with a large body, and a topic or queue whose attributes need a queue's
        first use (its newest time is its mtime)."""
        node = self.nodes.find(parent)
        if node is None:
            return False
        if node.kind == TOPICS:
            topic = os.fsdecode(name)
            return not self.times.known(topic) and self._topic_owes_first_use(topic)
        if node.kind == TOPIC:
            queue = canonical_int(name)
            return queue is not None and not self.times.known(node.topic, queue) and \
                self.store.needs_first_use(node.topic, queue)
        return self.kinds[node.kind].lookup_slow(node, name)

    def getattr_slow(self, ino: int) -> bool:
        if ino & MSG_BIT:
            return self.messages.getattr_slow(ino)
        node = self.nodes.find(ino)
        return node is not None and not self._times_known(node) and self._owes_first_use(node)

    def _times_known(self, node: Node) -> bool:
        """Whether the node's attributes are its queue's or topic's time alone, and that time
        is kept: then they never wait, whatever the queue owes (a path walk asks for them at
        every directory, and a shell append walks four)."""
        if node.kind in (QUEUE, APPEND, JSONL, LINES):
            return self.times.known(node.topic, node.queue)
        return node.kind == TOPIC and self.times.known(node.topic)

    def _owes_first_use(self, node: Node) -> bool:
        """Whether the node's attributes (a queue's or a topic's mtime, a queue's bounds) would
        open a queue not opened since the mount: answered from memory, for the event loop."""
        if node.queue >= 0:
            return self.store.needs_first_use(node.topic, node.queue)
        return node.kind == TOPIC and self._topic_owes_first_use(node.topic)

    def _topic_owes_first_use(self, topic: str) -> bool:
        return any(self.store.needs_first_use(topic, q) for q in self.store.queue_ids(topic))

    def listing_slow(self, ino: int) -> bool:
        node = self.nodes.find(ino)
        return node is not None and self.kinds[node.kind].slow_listing

    def xattrs_slow(self, ino: int) -> bool:
        """A message's attributes come from its record, a key directory's from a query, a
        queue's bounds from the queue (its first use, when not opened yet); the rest
        (topics, the queue's files: `getfattr -d append`) from memory."""
        if ino & MSG_BIT or self.listing_slow(ino):
            return True
        node = self.nodes.find(ino)
        return node is not None and node.kind == QUEUE and \
            self.store.needs_first_use(node.topic, node.queue)

    # --- messages and links ----------------------------------------------------------------
    def readlink(self, ino: int) -> bytes:
        return self.messages.readlink(ino)

    # --- xattrs ----------------------------------------------------------------------------
    def xattrs(self, ino: int) -> dict[bytes, bytes]:
        """Every user.* attribute of an inode, names to values."""
        if ino & STAGED_BIT and not ino & MSG_BIT:
            return dict(self.tmp.get(ino).meta)
        if ino & MSG_BIT:
            return self.messages.xattrs(ino)
        node = self.nodes.get(ino)
        return self.kinds[node.kind].xattrs(node)

    def xattr(self, ino: int, name: bytes) -> bytes:
        if not name.startswith(b"user."):
            value = None
        elif ino & MSG_BIT and not ino & LINK_BIT:
            value = message_xattr(self.messages.message(ino), name)
        else:
            value = self.xattrs(ino).get(name)
        if value is None:
            raise FsError(errno.ENODATA)
        return value

    def setxattr(self, ino: int, name: bytes, value: bytes) -> None:
        """Only a staged file's user.keys and user.tags can be set."""
        if self.kind(ino) != STAGED:
            raise FsError(errno.EPERM, "attributes are read-only (but user.keys and user.tags "
                                       "of files in tmp/)")
        self.tmp.set_xattr(self.tmp.get(ino), name, value)

    # --- open files ------------------------------------------------------------------------
    async def open(self, run: Runner, ino: int, how: Opening) -> Handle:
        """The handle of an open file: a message's, a staged file's, or a kind's."""
        if ino & MSG_BIT:
            if ino & LINK_BIT:
                raise FsError(errno.EISDIR)
            return await self.messages.open(run, ino, how.writing)
        if ino & STAGED_BIT:
            return await self.tmp_dir.open_staged(run, self.tmp.get(ino), how)
        node = self.nodes.get(ino)
        return await self.kinds[node.kind].open(run, node, how)

    def create(self, parent: int, name: bytes, mode: int) -> tuple[Handle, Attr]:
        """A new file, open: only in tmp/."""
        return self.tmp_dir.create(parent, name, mode)

    # --- changes ---------------------------------------------------------------------------
    def mkdir(self, parent: int, name: bytes) -> Attr:
        """mkdir in /topics creates a topic, mkdir N in /topics/<t> creates queue N."""
        node = self.nodes.get(parent)
        attr = self.kinds[node.kind].mkdir(node, name)
        if node.kind == TOPIC:
            self.times.queue_added(node.topic)
        return attr

    async def setattr(self, run: Runner, ino: int, size: int | None, owner: bool) -> Attr:
        """A new size (a staged file's any, a writable file's 0: O_TRUNC), times (accepted,
        changing nothing); modes and owners (`owner`) are refused."""
        kind = self.kind(ino)
        if owner:
            raise FsError(errno.EPERM, "modes and owners are fixed (mount options uid, gid, "
                                       "umask)")
        if kind == STAGED:
            if size is not None:
                await self.tmp_dir.truncate(run, self.tmp.get(ino), size)
            return self.getattr(ino)
        if kind in (MESSAGE, LINK) or not self.kinds[kind].takes_writes:
            raise FsError(errno.EPERM, "messages and directories are immutable")
        if size is not None and size != 0:
            raise FsError(errno.EPERM, "writable files can only be truncated to 0 (O_TRUNC)")
        return self.getattr(ino)

    async def unlink(self, run: Runner, parent: int, name: bytes) -> None:
        if self.kind(parent) != TMP:
            raise FsError(errno.EPERM, "messages are removed only by retention")
        await self.tmp_dir.remove(run, parent, name)

    async def rename(self, run: Runner, parent: int, name: bytes, new_parent: int,
                     new_name: bytes, *, exchange: bool, noreplace: bool) -> None:
        """Out of tmp/: into tmp/ is a plain rename; into a queue directory (any name, or
        onto `append`) publishes the staged file as one message of that queue."""
        if self.kind(parent) != TMP:
            raise FsError(errno.EPERM, "only files in tmp/ can be renamed")
        if exchange:
            raise FsError(errno.EINVAL, "files in tmp/ cannot be exchanged")
        entry = self.tmp.entry(parent, name)
        target = self.kind(new_parent)
        if target == TMP:
            await self.tmp_dir.move_in(run, new_parent, entry, new_name, noreplace)
            return
        if target != QUEUE:
            raise FsError(errno.EPERM, "publish a staged file by renaming it into a queue "
                                       "directory")
        self.queue_dir.check_publish_name(new_name)
        if noreplace and new_name != b"append":
            try:
                self.lookup(new_parent, new_name)
                raise FsError(errno.EEXIST)
            except FsError as exc:
                if exc.errno != errno.ENOENT:
                    raise
        await self.queue_dir.publish(run, self.nodes.get(new_parent), entry)

    def put(self, messages: list[Message], one_queue: bool = False, /) -> list[PutResult]:
        """Store messages (all or none) and move the times of their queues; a refusal for
        size is EFBIG with the limit that applied. `one_queue`: they are all for one queue
        (a write's lines), whose time the last one gives, not a pass over the batch."""
        try:
            results = self.store.put_batch(messages)
        except Exception as exc:
            for msg in messages:
                room = self.store.max_body_size(msg)
                if len(msg.body) > room:
                    raise FsError(errno.EFBIG, f"body is {len(msg.body)} bytes, the limit here "
                                               f"is {room}") from exc
            raise
        moved = (self.times.note_puts(messages[-1:], results[-1:]) if one_queue else
                 self.times.note_puts(messages, results))
        if moved:
            self.forget_attrs(moved)
        return results

    def put_now(self, messages: list[Message]) -> list[PutResult] | None:
        """`put` on the event loop, when nothing can make it wait: one message whose body is
        at most LOOP_BODY_MAX, stored by `MessageStore.put_nowait`. None, with nothing stored,
        when the store cannot take it so (a put lock taken, a roll or a new file due, sync
        mode...): then `put` stores it, from a worker thread."""
        if len(messages) != 1 or len(messages[0].body) > LOOP_BODY_MAX:
            return None
        try:
            result = self.store.put_nowait(messages[0])
        except InvalidMessage:  # refused before a byte is written: put says why (EFBIG...)
            return None
        if result is None:
            return None
        results = [result]
        moved = self.times.note_puts(messages, results)
        if moved:
            self.forget_attrs(moved)
        return results

    def flush(self) -> None:
        """Everything on disk (fsync, fsyncdir): a worker thread's job."""
        self.store.flush()

    def disk(self) -> os.statvfs_result:
        """The store's file system (statfs): a worker thread's job."""
        return os.statvfs(self.store.root)

    def stop_following(self) -> None:
        """Shutting down: waiting `follow` reads answer EOF (once woken)."""
        self.follows.closing = True
