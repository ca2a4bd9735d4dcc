"""Thin pyfuse3 adapter over the Model: converts attributes, keeps open handles, runs slow
disk work in worker threads and turns every failure into an errno.

Every handler is wrapped: FsError and store errors map to their errno; anything else is a
bug, logged with its traceback and answered with EIO, and the daemon keeps serving (an
exception escaping a pyfuse3 handler would end the main loop and kill the mount).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import pyfuse3
import trio

from .errors import FsError, errno_for
from .model import (APPEND, GROUP_QUEUE, JSONL, MESSAGE, Attr, Listing, Model)
from .writers import AppendWriter, JsonlWriter, OffsetWriter

log = logging.getLogger("mqfs")

BLKSIZE = 128 * 1024  # large st_blksize so cp and friends use large reads


@dataclass
class MessageHandle:
    body: bytes


@dataclass
class WriteHandle:
    """An open `append` or `append.jsonl`; writer is None when opened read-only."""

    writer: AppendWriter | JsonlWriter | None


@dataclass
class OffsetHandle:
    ino: int
    text: bytes
    writer: OffsetWriter | None = None


@dataclass
class Handles:
    table: dict = field(default_factory=dict)
    next: int = 1

    def add(self, obj) -> int:
        fh = self.next
        self.next += 1
        self.table[fh] = obj
        return fh

    def get(self, fh: int):
        try:
            return self.table[fh]
        except KeyError:
            raise FsError(errno.EBADF) from None


def guarded(fn: Callable) -> Callable:
    @functools.wraps(fn)
    async def wrapper(*args, **kwargs):
        try:
            return await fn(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except Exception as exc:  # noqa: BLE001 - the one place that must catch everything
            err = errno_for(exc)
            if err is None:
                log.exception("%s failed unexpectedly; answering EIO", fn.__name__)
                err = errno.EIO
            elif isinstance(exc, FsError) and err not in (errno.ENOENT, errno.ENODATA):
                log.debug("%s: %s", fn.__name__, exc)
            raise pyfuse3.FUSEError(err) from None
    return wrapper


async def in_thread(fn: Callable, *args):
    """Disk work that may block (sync puts, fsync, metadata files) off the trio thread."""
    return await trio.to_thread.run_sync(fn, *args)


class Operations(pyfuse3.Operations):
    supports_dot_lookup = True
    enable_writeback_cache = False  # it would merge writes and lose message boundaries
    enable_acl = False

    def __init__(self, model: Model, on_ready: Callable[[], None] | None = None):
        super().__init__()
        self.model = model
        self.store = model.store
        self.on_ready = on_ready
        self.uid, self.gid = os.getuid(), os.getgid()
        self.files = Handles()
        self.dirs = Handles()

    def init(self) -> None:
        if self.on_ready is not None:
            try:
                self.on_ready()
            except Exception:  # noqa: BLE001 - init must not raise
                log.exception("readiness notification failed")

    def entry(self, a: Attr) -> pyfuse3.EntryAttributes:
        e = pyfuse3.EntryAttributes()
        e.st_ino = a.ino
        e.st_mode = a.mode
        e.st_nlink = a.nlink
        e.st_uid = self.uid
        e.st_gid = self.gid
        e.st_size = a.size
        e.st_blksize = BLKSIZE
        e.st_blocks = (a.size + 511) // 512
        e.st_atime_ns = e.st_mtime_ns = e.st_ctime_ns = a.mtime_ns
        e.entry_timeout = a.entry_timeout
        e.attr_timeout = a.attr_timeout
        return e

    # --- names and attributes --------------------------------------------------------------
    @guarded
    async def lookup(self, parent_inode, name, ctx=None):
        return self.entry(self.model.lookup(parent_inode, name))

    @guarded
    async def getattr(self, inode, ctx=None):
        return self.entry(self.model.getattr(inode))

    @guarded
    async def setattr(self, inode, attr, fields, fh, ctx):
        kind = self.model.kind(inode)
        if fields.update_mode or fields.update_uid or fields.update_gid:
            raise FsError(errno.EPERM, "modes and owners are fixed")
        if kind not in (APPEND, JSONL, GROUP_QUEUE):
            raise FsError(errno.EPERM, "messages and directories are immutable")
        if fields.update_size and attr.st_size != 0:
            raise FsError(errno.EPERM, "writable files can only be truncated to 0 (O_TRUNC)")
        # size 0 (O_TRUNC of a fresh handle) and times are accepted and change nothing
        return self.entry(self.model.getattr(inode))

    @guarded
    async def readlink(self, inode, ctx):
        return self.model.readlink(inode)

    @guarded
    async def statfs(self, ctx):
        st = os.statvfs(self.store.root)
        s = pyfuse3.StatvfsData()
        s.f_bsize = st.f_bsize
        s.f_frsize = st.f_frsize
        s.f_blocks, s.f_bfree, s.f_bavail = st.f_blocks, st.f_bfree, st.f_bavail
        s.f_files, s.f_ffree, s.f_favail = st.f_files, st.f_ffree, st.f_favail
        s.f_namemax = 255
        return s

    async def forget(self, inode_list):
        """Inodes are never reused (computed or from a table), so nothing to do."""

    # --- directories -----------------------------------------------------------------------
    @guarded
    async def opendir(self, inode, ctx):
        return self.dirs.add(self.model.listing(inode))

    @guarded
    async def readdir(self, fh, start_id, token):
        listing: Listing = self.dirs.get(fh)
        entry, reply = self.entry, pyfuse3.readdir_reply
        for name, attr, cookie in listing.entries(start_id):
            if not reply(token, name, entry(attr), cookie):
                break

    @guarded
    async def releasedir(self, fh):
        self.dirs.table.pop(fh, None)

    @guarded
    async def fsyncdir(self, fh, datasync):
        await in_thread(self.store.flush)

    @guarded
    async def mkdir(self, parent_inode, name, mode, ctx):
        return self.entry(await in_thread(self.model.mkdir, parent_inode, name))

    @guarded
    async def rmdir(self, parent_inode, name, ctx):
        raise FsError(errno.EPERM, "topics and queues are never removed through the mount")

    @guarded
    async def unlink(self, parent_inode, name, ctx):
        raise FsError(errno.EPERM, "messages are removed only by retention")

    @guarded
    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        raise FsError(errno.EPERM, "nothing can be renamed")

    @guarded
    async def link(self, inode, new_parent_inode, new_name, ctx):
        raise FsError(errno.EPERM, "no hard links")

    @guarded
    async def symlink(self, parent_inode, name, target, ctx):
        raise FsError(errno.EPERM, "no new symlinks")

    @guarded
    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        raise FsError(errno.EPERM, "write to append to add a message")

    @guarded
    async def create(self, parent_inode, name, mode, flags, ctx):
        raise FsError(errno.EPERM, "write to append to add a message")

    # --- files -----------------------------------------------------------------------------
    @guarded
    async def open(self, inode, flags, ctx):
        kind = self.model.kind(inode)
        writing = flags & os.O_ACCMODE != os.O_RDONLY
        if kind == MESSAGE:
            if writing:
                raise FsError(errno.EACCES, "messages are read-only")
            body = self.model.body(inode)
            return pyfuse3.FileInfo(fh=self.files.add(MessageHandle(body)), keep_cache=True)
        if kind in (APPEND, JSONL):
            writer = None
            if writing:
                node = self.model.nodes.get(inode)
                cls = AppendWriter if kind == APPEND else JsonlWriter
                writer = cls(node.topic, node.queue, self.store.config.max_message_size)
            return pyfuse3.FileInfo(fh=self.files.add(WriteHandle(writer)), direct_io=True,
                                    keep_cache=False, nonseekable=True)
        if kind == GROUP_QUEUE:
            handle = OffsetHandle(inode, self.model.offset_text(self.model.nodes.get(inode)),
                                  OffsetWriter() if writing else None)
            return pyfuse3.FileInfo(fh=self.files.add(handle), direct_io=True, keep_cache=False)
        raise FsError(errno.EISDIR)

    @guarded
    async def read(self, fh, off, size):
        h = self.files.get(fh)
        if isinstance(h, MessageHandle):
            return memoryview(h.body)[off:off + size]
        if isinstance(h, OffsetHandle):
            return h.text[off:off + size]
        return b""  # append files read as empty

    @guarded
    async def write(self, fh, off, buf):
        h = self.files.get(fh)
        if isinstance(h, WriteHandle) and h.writer is not None:
            if isinstance(h.writer, AppendWriter):
                return h.writer.write(buf)
            await self._put(h.writer, h.writer.write(buf))
            return len(buf)
        if isinstance(h, OffsetHandle) and h.writer is not None:
            return h.writer.write(off, buf)
        raise FsError(errno.EBADF)

    async def _put(self, writer, messages: list) -> None:
        """In sync-flush mode a put waits for the disk, so it runs in a worker thread; an
        async put only copies into the mapped CommitLog and is cheaper than a thread hop."""
        if not messages:
            return
        try:
            if self.store.config.flush_mode == "sync":
                await in_thread(self.store.put_batch, messages)
            else:
                self.store.put_batch(messages)
        except Exception as exc:
            writer.fail(errno_for(exc) or errno.EIO)
            raise

    async def _commit(self, h) -> None:
        """Make what this handle wrote visible: the one message of `append`, the trailing
        line of `append.jsonl`, the offset of a group file."""
        if isinstance(h, WriteHandle) and h.writer is not None:
            await self._put(h.writer, h.writer.take())
        elif isinstance(h, OffsetHandle) and h.writer is not None:
            offset = h.writer.take()
            if offset is not None:
                node = self.model.nodes.get(h.ino)
                if offset > self.store.max_offset(node.topic, node.queue):
                    h.writer.fail(errno.EINVAL)
                    raise FsError(errno.EINVAL, "offset is past the end of the queue")
                await in_thread(self.store.commit_offset, node.group, node.topic, node.queue,
                                offset)
                h.text = b"%d\n" % offset

    @guarded
    async def flush(self, fh):
        await self._commit(self.files.get(fh))

    @guarded
    async def fsync(self, fh, datasync):
        await self._commit(self.files.get(fh))
        await in_thread(self.store.flush)

    @guarded
    async def release(self, fh):
        h = self.files.table.pop(fh, None)
        if isinstance(h, WriteHandle) and h.writer is not None and h.writer.pending:
            log.warning("released an append handle with %d unflushed bytes; dropped",
                        h.writer.pending)

    # --- extended attributes ---------------------------------------------------------------
    @guarded
    async def getxattr(self, inode, name, ctx):
        if not name.startswith(b"user."):
            raise FsError(pyfuse3.ENOATTR)  # security.capability is asked before every write
        return self.model.xattr(inode, name)

    @guarded
    async def listxattr(self, inode, ctx):
        return list(self.model.xattrs(inode))

    @guarded
    async def setxattr(self, inode, name, value, ctx):
        raise FsError(errno.EPERM, "attributes are read-only")

    @guarded
    async def removexattr(self, inode, name, ctx):
        raise FsError(errno.EPERM, "attributes are read-only")
