"""Thin pyfuse3 adapter over the Model: converts attributes, keeps open handles, runs slow
disk work in worker threads and turns every failure into an errno.

Every handler is wrapped: FsError and store errors map to their errno; anything else is a
bug, logged with its traceback and answered with EIO, and the daemon keeps serving (an
exception escaping a pyfuse3 handler would end the main loop and kill the mount).
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field

import pyfuse3
import trio

from store import Message

from .errors import FsError, errno_for
from .model import (APPEND, FOLLOW, GROUP_QUEUE, JSONL, MESSAGE, QUEUE, STAGED, STATUS, TMP,
                    Attr, Listing, Model, Staged)
from .writers import AppendWriter, JsonlWriter, OffsetWriter

log = logging.getLogger("mqfs")

BLKSIZE = 128 * 1024  # large st_blksize so cp and friends use large reads
FOLLOWERS_MAX = 32  # blocked `follow` reads each hold one of pyfuse3's (99) request tasks
FOLLOW_BATCH = 64  # messages read from the store per refill of a follow handle
SIGNAL_CHECK = 0.25  # seconds between checks for a signal sent to a waiting follow reader
QUIET = (errno.ENOENT, errno.ENODATA)  # answers too common to be worth a log line


@dataclass
class MessageHandle:
    body: bytes


@dataclass
class WriteHandle:
    """An open `append` or `append.jsonl`; writer is None when opened read-only."""

    ino: int
    writer: AppendWriter | JsonlWriter | None


@dataclass
class OffsetHandle:
    ino: int
    text: bytes
    writer: OffsetWriter | None = None


@dataclass
class StagedHandle:
    entry: Staged


@dataclass
class TextHandle:
    """Generated text fixed at open (status.json)."""

    text: bytes


@dataclass
class FollowHandle:
    """`follow`: the next offset to deliver and bytes delivered in part."""

    ino: int
    topic: str
    queue: int
    next: int
    opener: int  # pid of the process that opened it: its signals end a waiting read
    pending: bytes = b""
    closed: bool = False


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
    """Every failure becomes an errno; refusals (other than ENOENT/ENODATA) are logged with
    their reason and the path, and remembered for status.json; bugs are logged with a
    traceback and answered with EIO."""
    @functools.wraps(fn)
    async def wrapper(*args, **kwargs):
        try:
            return await fn(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except Exception as exc:  # noqa: BLE001 - the one place that must catch everything
            err = errno_for(exc)
            if err in QUIET:
                raise pyfuse3.FUSEError(err) from None
            ops = args[0] if args and isinstance(args[0], Operations) else None
            where = ops.where(fn.__name__, args[1]) if ops is not None and len(args) > 1 else "?"
            if err is None:
                log.exception("%s failed unexpectedly on %s; answering EIO", fn.__name__, where)
                err = errno.EIO
                if ops is not None:
                    ops.model.note_error(fn.__name__, where, err, f"internal error: {exc!r}")
            elif not getattr(exc, "repeat", False):
                why = str(exc)
                log.info("%s %s: %s (%s)", fn.__name__, where, errno.errorcode.get(err, err), why)
                if ops is not None:
                    ops.model.note_error(fn.__name__, where, err, why)
            raise pyfuse3.FUSEError(err) from None
    return wrapper


def forget_attrs(inodes: list[int]) -> None:
    """Tell the kernel cached attributes of these inodes are stale. Called from worker
    threads only (with the writeback cache off it does not block, but a call from the trio
    thread would still hold the loop for the write to /dev/fuse)."""
    for ino in inodes:
        try:
            pyfuse3.invalidate_inode(ino, attr_only=True)
        except OSError:  # not known to the kernel (forgotten) or unmounting: nothing cached
            pass


def signal_pending(pid: int) -> bool:
    """Whether a signal waits for process pid (its main thread or the process as a whole).
    A process that is gone counts as no: its fd may live on in a child that reads it."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16):
                    return True
    except (OSError, ValueError):
        return False
    return False


async def in_thread(fn: Callable, *args):
    """Disk work that may block (sync puts, fsync, metadata files) off the trio thread."""
    return await trio.to_thread.run_sync(fn, *args)


class Operations(pyfuse3.Operations):
    supports_dot_lookup = True
    enable_writeback_cache = False  # it would merge writes and lose message boundaries
    enable_acl = False

    def __init__(self, model: Model, on_ready: Callable[[], None] | None = None, *,
                 uid: int | None = None, gid: int | None = None):
        super().__init__()
        self.model = model
        self.store = model.store
        self.on_ready = on_ready
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        self.files = Handles()
        self.dirs = Handles()
        self.arrived = trio.Event()  # set (and replaced) whenever messages are stored
        self.closing = False

    FH_HANDLERS = {"read", "write", "flush", "fsync", "release"}

    def where(self, op: str, arg) -> str:
        """The path a handler's first argument (inode or file handle) stands for."""
        try:
            if op in self.FH_HANDLERS:
                h = self.files.table.get(arg)
                if isinstance(h, StagedHandle):
                    return self.model.path(h.entry.ino)
                ino = getattr(h, "ino", None)
                return self.model.path(ino) if ino is not None else f"(handle {arg})"
            if op in ("readdir", "releasedir", "fsyncdir"):
                return f"(directory handle {arg})"
            return self.model.path(arg)
        except Exception:  # noqa: BLE001 - a description must never hide the real error
            return f"({arg})"

    def stop_following(self) -> None:
        """Shutting down: waiting `follow` reads answer EOF."""
        self.closing = True
        self.stored()

    def stored(self) -> None:
        """Wake `follow` readers: new messages are in."""
        self.arrived.set()
        self.arrived = trio.Event()

    def init(self) -> None:
        self.model.forget_attrs = forget_attrs
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
            raise FsError(errno.EPERM, "modes and owners are fixed (mount options uid, gid, "
                                       "umask)")
        if kind == STAGED:
            entry = self.model.staged[inode]
            if fields.update_size:
                self.model.staged_truncate(entry, attr.st_size)
            return self.entry(self.model.getattr(inode))
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
        if self.model.kind(parent_inode) == TMP:
            self.model.tmp_unlink(parent_inode, name)  # abandons a staged message
            return
        raise FsError(errno.EPERM, "messages are removed only by retention")

    @guarded
    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        """Out of tmp/: into tmp/ is a plain rename; into a queue directory (any name, or
        onto `append`) publishes the staged file as one message of that queue."""
        model = self.model
        if model.kind(parent_inode_old) != TMP:
            raise FsError(errno.EPERM, "only files in tmp/ can be renamed")
        if flags & pyfuse3.RENAME_EXCHANGE:
            raise FsError(errno.EINVAL, "files in tmp/ cannot be exchanged")
        noreplace = bool(flags & pyfuse3.RENAME_NOREPLACE)
        entry = model.tmp_entry(parent_inode_old, name_old)
        target = model.kind(parent_inode_new)
        if target == TMP:
            model.tmp_move(entry, parent_inode_new, name_new, noreplace)
            return
        if target != QUEUE:
            raise FsError(errno.EPERM, "publish a staged file by renaming it into a queue "
                                       "directory")
        if name_new in (b"tmp", b"follow", b"append.jsonl", b"at", b"tags"):
            raise FsError(errno.EINVAL, "rename into the queue directory or onto append")
        if noreplace and name_new != b"append":
            try:
                model.lookup(parent_inode_new, name_new)
                raise FsError(errno.EEXIST)
            except FsError as exc:
                if exc.errno != errno.ENOENT:
                    raise
        await self._publish(entry, model.nodes.get(parent_inode_new))

    async def _publish(self, entry: Staged, queue) -> None:
        model = self.model
        entry.busy = True
        try:
            msg = await in_thread(model.staged_message, entry, queue.topic, queue.queue)
            await self._store_messages([msg])
        finally:
            entry.busy = False
        model.tmp_unlink(entry.parent, entry.name)

    async def _store_messages(self, messages: list[Message]) -> None:
        """Put (in a worker thread: bodies may be large, sync mode waits for the disk);
        refusals for size are EFBIG with the limit that applied."""
        try:
            await in_thread(self.model.put, messages)
        except Exception as exc:
            for msg in messages:
                room = self.store.max_body_size(msg)
                if len(msg.body) > room:
                    raise FsError(errno.EFBIG, f"body is {len(msg.body)} bytes, the limit here "
                                               f"is {room}") from exc
            raise
        self.stored()

    @guarded
    async def link(self, inode, new_parent_inode, new_name, ctx):
        raise FsError(errno.EPERM, "no hard links")

    @guarded
    async def symlink(self, parent_inode, name, target, ctx):
        raise FsError(errno.EPERM, "no new symlinks")

    @guarded
    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        raise FsError(errno.EPERM, "create regular files in tmp/, or write to append")

    @guarded
    async def create(self, parent_inode, name, mode, flags, ctx):
        if not stat.S_ISREG(mode) and stat.S_IFMT(mode):
            raise FsError(errno.EPERM, "only regular files can be staged")
        attr = self.model.tmp_create(parent_inode, name)
        entry = self.model.staged[attr.ino]
        fh = self.files.add(StagedHandle(entry))
        return pyfuse3.FileInfo(fh=fh, direct_io=True, keep_cache=False), self.entry(attr)

    # --- files -----------------------------------------------------------------------------
    @guarded
    async def open(self, inode, flags, ctx):
        model = self.model
        kind = model.kind(inode)
        writing = flags & os.O_ACCMODE != os.O_RDONLY
        if kind == MESSAGE:
            if writing:
                raise FsError(errno.EACCES, "messages are read-only")
            body = model.body(inode)
            return pyfuse3.FileInfo(fh=self.files.add(MessageHandle(body)), keep_cache=True)
        if kind in (APPEND, JSONL):
            writer = None
            if writing:
                node = model.nodes.get(inode)
                limit = model.body_limit(node.topic, node.queue)
                if kind == APPEND:
                    writer = AppendWriter(node.topic, node.queue, limit, model.spool())
                else:
                    writer = JsonlWriter(node.topic, node.queue, limit, model.budget,
                                         self.store.max_body_size)
            return pyfuse3.FileInfo(fh=self.files.add(WriteHandle(inode, writer)), direct_io=True,
                                    keep_cache=False, nonseekable=True)
        if kind == GROUP_QUEUE:
            node = model.nodes.get(inode)
            writer = None
            if writing:
                writer = OffsetWriter(lambda offset: model.check_group_offset(node, offset))
            handle = OffsetHandle(inode, model.offset_text(node), writer)
            return pyfuse3.FileInfo(fh=self.files.add(handle), direct_io=True, keep_cache=False)
        if kind == STAGED:
            entry = model.staged[inode]
            if flags & os.O_TRUNC and writing:
                model.staged_truncate(entry, 0)
            return pyfuse3.FileInfo(fh=self.files.add(StagedHandle(entry)), direct_io=True,
                                    keep_cache=False)
        if kind == STATUS:
            text = (json.dumps(model.status(), indent=1) + "\n").encode()
            return pyfuse3.FileInfo(fh=self.files.add(TextHandle(text)), direct_io=True,
                                    keep_cache=False)
        if kind == FOLLOW:
            if writing:
                raise FsError(errno.EACCES, "follow is read-only")
            if self.model.followers >= FOLLOWERS_MAX:
                raise FsError(errno.EMFILE, f"at most {FOLLOWERS_MAX} follow readers at once")
            node = model.nodes.get(inode)
            self.model.followers += 1
            handle = FollowHandle(inode, node.topic, node.queue,
                                  self.store.max_offset(node.topic, node.queue), ctx.pid)
            return pyfuse3.FileInfo(fh=self.files.add(handle), direct_io=True, keep_cache=False,
                                    nonseekable=True)
        raise FsError(errno.EISDIR)

    @guarded
    async def read(self, fh, off, size):
        h = self.files.get(fh)
        if isinstance(h, MessageHandle):
            return memoryview(h.body)[off:off + size]
        if isinstance(h, (OffsetHandle, TextHandle)):
            return h.text[off:off + size]
        if isinstance(h, StagedHandle):
            if h.entry.gone:
                raise FsError(errno.ENOENT, "the staged file was published or removed")
            return await in_thread(h.entry.spool.read, off, size)
        if isinstance(h, FollowHandle):
            return await self._follow(h, size)
        return b""  # append files read as empty

    async def _follow(self, h: FollowHandle, size: int) -> bytes:
        """Bodies of messages stored after the open, each ending in a newline (added when
        the body has none); waits until there is at least one.

        pyfuse3 does not pass on the kernel's INTERRUPT, and the kernel waits for the answer
        of a read the daemon has taken even when the reader is killed: so a waiting read
        looks at the opener's pending signals a few times a second and answers EINTR when
        there is one (Ctrl-C, `timeout`, kill end `cat follow` at once)."""
        while not h.pending:
            if h.closed or self.closing:
                return b""
            arrived = self.arrived
            lo = self.store.min_offset(h.topic, h.queue)
            h.next = max(h.next, lo)  # retention may have removed what was next
            if h.next < self.store.max_offset(h.topic, h.queue):
                msgs = await in_thread(self.store.get_range, h.topic, h.queue, h.next,
                                       FOLLOW_BATCH)
                if msgs:
                    h.next = msgs[-1].queue_offset + 1
                    h.pending = b"".join(bytes(m.body) if bytes(m.body[-1:]) == b"\n"
                                         else bytes(m.body) + b"\n" for m in msgs)
                    break
            with trio.move_on_after(SIGNAL_CHECK):
                await arrived.wait()
            if signal_pending(h.opener):
                raise FsError(errno.EINTR, "the reader was signalled while waiting")
        out, h.pending = h.pending[:size], h.pending[size:]
        return out

    @guarded
    async def write(self, fh, off, buf):
        h = self.files.get(fh)
        if isinstance(h, WriteHandle) and h.writer is not None:
            if isinstance(h.writer, AppendWriter):
                return h.writer.write(buf)
            await self._put(h.writer, h.writer.write(buf))
            return len(buf)
        if isinstance(h, StagedHandle):
            return self.model.staged_write(h.entry, off, buf)
        if isinstance(h, OffsetHandle) and h.writer is not None:
            offset = h.writer.write(off, buf)
            if offset is not None:
                await self._commit_offset(h, offset)
            return len(buf)
        raise FsError(errno.EBADF)

    async def _put(self, writer, messages: list) -> None:
        if not messages:
            return
        try:
            await self._store_messages(messages)
        except Exception as exc:
            writer.fail(errno_for(exc) or errno.EIO)
            raise

    async def _commit_offset(self, h: OffsetHandle, offset: int) -> None:
        node = self.model.nodes.get(h.ino)
        await in_thread(self.model.commit_group_offset, node, offset)
        h.text = b"%d\n" % offset

    async def _commit(self, h) -> None:
        """Make what this handle wrote visible: the one message of `append`, the trailing
        line of `append.jsonl`, the offset of a group file."""
        if isinstance(h, WriteHandle) and h.writer is not None:
            await self._put(h.writer, h.writer.take())
        elif isinstance(h, OffsetHandle) and h.writer is not None:
            offset = h.writer.take()
            if offset is not None:
                await self._commit_offset(h, offset)

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
        if isinstance(h, WriteHandle) and h.writer is not None:
            if h.writer.pending:
                log.warning("released an append handle with %d unflushed bytes; dropped",
                            h.writer.pending)
            h.writer.close()
        elif isinstance(h, FollowHandle):
            h.closed = True
            self.model.followers -= 1
            self.stored()  # wakes a read still waiting for this handle, which then ends

    # --- extended attributes ---------------------------------------------------------------
    @guarded
    async def getxattr(self, inode, name, ctx):
        if not name.startswith(b"user."):
            # security.capability is asked before every write, security.selinux and the
            # ACL names by every `ls -l`: answered before any other work (and not as an
            # FsError, whose handling costs as much as the round trip)
            raise pyfuse3.FUSEError(pyfuse3.ENOATTR)
        return self.model.xattr(inode, name)

    @guarded
    async def listxattr(self, inode, ctx):
        return list(self.model.xattrs(inode))

    @guarded
    async def setxattr(self, inode, name, value, ctx):
        if self.model.kind(inode) == STAGED:
            self.model.set_staged_xattr(self.model.staged[inode], name, value)
            return
        raise FsError(errno.EPERM, "attributes are read-only (but user.keys and user.tags "
                                   "of files in tmp/)")

    @guarded
    async def removexattr(self, inode, name, ctx):
        raise FsError(errno.EPERM, "attributes are read-only")
