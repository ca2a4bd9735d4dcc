"""The mounted tree as plain Python: the facade the adapter (`ops.py`) calls.

Nothing here knows about pyfuse3, so the whole tree can be tested without a kernel. The
adapter turns `Attr` into pyfuse3 objects and `FsError` into `FUSEError`. The work is done by
the parts this facade holds: inode numbers and the node table (`inodes`), one class per kind
of named node (`kinds`), messages and links (`messages`), moving times (`times`), tmp/ files
(`staged`), listings (`listings`) and status.json (`status`).
"""

from __future__ import annotations

import errno
import json
import time
from collections.abc import Callable
from typing import cast

from mqfs.store import Message, MessageStore, PutResult, StoredMessage
from mqfs.store.files.staging import Staging

from .errors import FsError
from .following import Follows
from .inodes import (
    GROUP_QUEUE,
    LINK,
    LINK_BIT,
    MESSAGE,
    MSG_BIT,
    NAME_MAX,
    STAGED,
    STAGED_BIT,
    STATUS,
    Attr,
    Node,
    NodeTable,
)
from .kinds import KINDS, Kind
from .kinds.groups import GroupQueue
from .kinds.root import Status
from .listings import Listing
from .messages import Messages, message_xattr
from .parts import Parts
from .recent import Recent
from .spool import Budget, Spool
from .staged import Staged, StagedFiles
from .status import status
from .times import QueueTimes

KEY_HITS_MAX = 10_000  # default cap on entries listed under one /keys/<key> (-o keys_max=)


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
        self.staged = self.tmp.staged
        self.tmp_dirs = self.tmp.tmp_dirs
        self.follows = Follows(store)
        self.recent = Recent()
        self._limits: dict[str, int] = {}
        self.forget_attrs: Callable[[list[int]], None] = lambda inodes: None
        self.parts = Parts(store, self.nodes, self.messages, self.times, self.tmp, self.follows,
                           self.recent, budget or Budget(), umask, keys_max, started_ns,
                           time.time_ns, self.getattr, self.node_attr, self.body_limit,
                           self.spool, self.put)
        self.kinds: dict[int, Kind] = {cls.kind: cls(self.parts) for cls in KINDS}
        self.group_files = cast(GroupQueue, self.kinds[GROUP_QUEUE])
        self.status_file = cast(Status, self.kinds[STATUS])

    def spool(self) -> Spool:
        return Spool(self.staging, self.parts.budget)

    def body_limit(self, topic: str, queue: int) -> int:
        """The largest body a plain message to topic may have (max size or file size)."""
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

    def status_text(self) -> bytes:
        """/status.json's text, made now (its size is what stat shows until the next)."""
        text = (json.dumps(self.status(), indent=1) + "\n").encode()
        self.status_file.size = len(text)
        return text

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

    def queue_mtime(self, topic: str, queue: int) -> int:
        return self.times.queue_mtime(topic, queue)

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
        """Whether a lookup may wait for the disk: the keys/, tags/ and at/ searches, and a
        message with a large body."""
        node = self.nodes.find(parent)
        return node is not None and self.kinds[node.kind].lookup_slow(node, name)

    def getattr_slow(self, ino: int) -> bool:
        return bool(ino & MSG_BIT) and self.messages.getattr_slow(ino)

    def body_slow(self, ino: int) -> bool:
        return self.messages.body_slow(ino)

    def listing_slow(self, ino: int) -> bool:
        node = self.nodes.find(ino)
        return node is not None and self.kinds[node.kind].slow_listing

    def xattrs_slow(self, ino: int) -> bool:
        """A message's attributes come from its record, a key directory's from a query."""
        return bool(ino & MSG_BIT) or self.listing_slow(ino)

    # --- messages and links ----------------------------------------------------------------
    def body(self, ino: int) -> bytes:
        return self.messages.body(ino)

    def message(self, ino: int) -> StoredMessage:
        return self.messages.message(ino)

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
            value = message_xattr(self.message(ino), name)
        else:
            value = self.xattrs(ino).get(name)
        if value is None:
            raise FsError(errno.ENODATA)
        return value

    # --- changes ---------------------------------------------------------------------------
    def mkdir(self, parent: int, name: bytes) -> Attr:
        """mkdir in /topics creates a topic, mkdir N in /topics/<t> creates queue N."""
        node = self.nodes.get(parent)
        return self.kinds[node.kind].mkdir(node, name)

    def put(self, messages: list[Message]) -> list[PutResult]:
        """Store messages (all or none) and move the times of their queues."""
        results = self.store.put_batch(messages)
        moved = self.times.note_puts(messages, results)
        if moved:
            self.forget_attrs(moved)
        return results

    # --- group offset files ----------------------------------------------------------------
    def offset_text(self, node: Node) -> bytes:
        return self.group_files.offset_text(node)

    def group_offset_for(self, node: Node, text: str) -> int:
        """The offset a text written to a group file names (FsError when refused)."""
        return self.group_files.resolve(node, text)

    def commit_group_offset(self, node: Node, offset: int) -> None:
        self.group_files.commit(node, offset)

    # --- tmp/: staged files (see `fusefs.staged`) -----------------------------------------
    def tmp_create(self, tmp_ino: int, name: bytes) -> Attr:
        return self.tmp.create(tmp_ino, name)

    def tmp_entry(self, tmp_ino: int, name: bytes) -> Staged:
        return self.tmp.entry(tmp_ino, name)

    def tmp_unlink(self, tmp_ino: int, name: bytes) -> None:
        self.tmp.unlink(tmp_ino, name)

    def tmp_move(self, entry: Staged, tmp_ino: int, name: bytes, noreplace: bool) -> None:
        self.tmp.move(entry, tmp_ino, name, noreplace)

    def staged_write(self, entry: Staged, offset: int, data: bytes) -> int:
        return self.tmp.write(entry, offset, data)

    def staged_truncate(self, entry: Staged, size: int) -> None:
        self.tmp.truncate(entry, size)

    def staged_message(self, entry: Staged, topic: str, queue: int) -> Message:
        return self.tmp.message(entry, topic, queue)

    def set_staged_xattr(self, entry: Staged, name: bytes, value: bytes) -> None:
        self.tmp.set_xattr(entry, name, value)
