"""Files staged in a queue's tmp/: bodies being composed (maildir style), published by a
rename into the queue. They live only in this mount, until published, removed or unmounted."""

from __future__ import annotations

import errno
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mqfs.store import Message

from .errors import FsError
from .inodes import NAME_MAX, STAGED_BIT, TMP, Attr, NodeTable
from .keynames import check_key
from .spool import Spool

STAGED_MAX = 10_000  # files in all tmp/ directories together


@dataclass(slots=True)
class Staged:
    """A file in a queue's tmp/: a body being composed, plus keys/tags set as xattrs."""

    ino: int
    name: bytes
    parent: int  # the tmp/ directory's inode
    spool: Spool
    mtime_ns: int
    meta: dict[bytes, bytes] = field(default_factory=dict)
    busy: bool = False  # being published
    gone: bool = False  # published or removed
    failed: bool = False  # a write or truncate failed: what it holds is not what was written


class StagedFiles:
    """Every tmp/ directory's files, by inode and by (tmp/ inode, name)."""

    def __init__(self, nodes: NodeTable, umask: int, spool: Callable[[], Spool] | None,
                 body_limit: Callable[[str, int], int]) -> None:
        self.nodes = nodes
        self.umask = umask
        self.spool = spool  # None: a read-only store, where nothing can be staged
        self.body_limit = body_limit
        self.staged: dict[int, Staged] = {}
        self.tmp_dirs: dict[int, dict[bytes, int]] = {}  # tmp/ inode -> name -> staged inode
        self._next = 1

    def get(self, ino: int) -> Staged:
        entry = self.staged.get(ino)
        if entry is None:
            raise FsError(errno.ENOENT, "the staged file was published or removed")
        return entry

    def attr(self, entry: Staged) -> Attr:
        return Attr(entry.ino, stat.S_IFREG | (0o666 & ~self.umask), entry.spool.size,
                    entry.mtime_ns, 1, 0.0, 0.0)

    def names(self, tmp_ino: int) -> list[tuple[bytes, int]]:
        """(name, inode) of a tmp/ directory's files, sorted."""
        return sorted(self.tmp_dirs.get(tmp_ino, {}).items())

    def lookup(self, tmp_ino: int, name: bytes) -> Attr:
        ino = self.tmp_dirs.get(tmp_ino, {}).get(name)
        if ino is None:
            raise FsError(errno.ENOENT)
        return self.attr(self.staged[ino])

    def create(self, tmp_ino: int, name: bytes) -> Attr:
        node = self.nodes.get(tmp_ino)
        if node.kind != TMP:
            raise FsError(errno.EPERM, "files are created only in tmp/; write to append to "
                                       "add a message")
        if self.spool is None:
            raise FsError(errno.EROFS)
        if len(name) > NAME_MAX:
            raise FsError(errno.ENAMETOOLONG)
        names = self.tmp_dirs.setdefault(tmp_ino, {})
        if name in names:
            raise FsError(errno.EEXIST)
        if len(self.staged) >= STAGED_MAX:
            raise FsError(errno.ENOSPC, f"{STAGED_MAX} files are staged in tmp/ directories "
                                        "already; publish or remove some")
        ino = STAGED_BIT | self._next
        self._next += 1
        entry = Staged(ino, name, tmp_ino, self.spool(), time.time_ns())
        self.staged[ino] = entry
        names[name] = ino
        return self.attr(entry)

    def _detach(self, entry: Staged) -> None:
        del self.tmp_dirs[entry.parent][entry.name]
        del self.staged[entry.ino]
        entry.gone = True
        entry.spool.clear()

    def entry(self, tmp_ino: int, name: bytes) -> Staged:
        ino = self.tmp_dirs.get(tmp_ino, {}).get(name)
        if ino is None:
            raise FsError(errno.ENOENT)
        entry = self.staged[ino]
        if entry.busy:
            raise FsError(errno.EBUSY, "the staged file is being published")
        return entry

    def unlink(self, tmp_ino: int, name: bytes) -> None:
        self._detach(self.entry(tmp_ino, name))

    def move(self, entry: Staged, tmp_ino: int, name: bytes, noreplace: bool) -> None:
        """Rename inside or between tmp/ directories (replacing what has the new name)."""
        if len(name) > NAME_MAX:
            raise FsError(errno.ENAMETOOLONG)
        names = self.tmp_dirs.setdefault(tmp_ino, {})
        old = names.get(name)
        if old == entry.ino:
            return
        if old is not None:
            if noreplace:
                raise FsError(errno.EEXIST)
            self._detach(self.staged[old])
        del self.tmp_dirs[entry.parent][entry.name]
        entry.parent, entry.name = tmp_ino, name
        names[name] = entry.ino

    def _limit(self, entry: Staged) -> int:
        node = self.nodes.get(entry.parent)
        return self.body_limit(node.topic, node.queue)

    def write(self, entry: Staged, offset: int, data: bytes) -> int:
        if entry.gone:
            raise FsError(errno.ENOENT, "the staged file was published or removed")
        if entry.busy:
            raise FsError(errno.EBUSY, "the staged file is being published")
        try:
            limit = self._limit(entry)
            if offset + len(data) > limit:
                raise FsError(errno.EFBIG, f"a message body here is at most {limit} bytes")
            entry.spool.write(offset, data)
        except BaseException:
            entry.failed = True  # e.g. `cp` of a too large file: never publish its prefix
            raise
        entry.mtime_ns = time.time_ns()
        return len(data)

    def truncate(self, entry: Staged, size: int) -> None:
        try:
            if size > self._limit(entry):
                raise FsError(errno.EFBIG)
            entry.spool.truncate(size)
        except BaseException:
            entry.failed = True
            raise
        entry.mtime_ns = time.time_ns()

    @staticmethod
    def message(entry: Staged, topic: str, queue: int) -> Message:
        """The message a staged file publishes as (read from its spool: a worker thread).
        One whose write ever failed is refused (EIO): half a body is never a message."""
        if entry.failed:
            raise FsError(errno.EIO, "a write to this staged file failed, so it holds only part "
                                     "of what was written; remove it and write it again")
        keys = entry.meta.get(b"user.keys", b"").decode().split()
        tags = entry.meta.get(b"user.tags", b"").decode() or None
        return Message.create(topic, entry.spool.getvalue(), queue_id=queue, keys=keys, tags=tags)

    @staticmethod
    def set_xattr(entry: Staged, name: bytes, value: bytes) -> None:
        """user.keys (space-separated) and user.tags become the published message's."""
        if name not in (b"user.keys", b"user.tags"):
            raise FsError(errno.ENOTSUP, "only user.keys and user.tags can be set, on tmp/ files")
        try:
            text = value.decode()
        except UnicodeDecodeError:
            raise FsError(errno.EINVAL, "keys and tags are UTF-8 text") from None
        if name == b"user.keys":
            for key in text.split():
                check_key(key)
        entry.meta[name] = value

    def path(self, ino: int, dir_path: Callable[[int], str]) -> str:
        entry = self.staged.get(ino)
        if entry is None:
            return f"(staged file {ino & ~STAGED_BIT}, gone)"
        return f"{dir_path(entry.parent)}/{entry.name.decode(errors='replace')}"
