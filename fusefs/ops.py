"""Thin pyfuse3 adapter over the Model: converts attributes, keeps open handles, runs slow
disk work in worker threads and turns every failure into an errno.

The trio loop serves every request, so nothing that may wait for the disk runs on it: puts,
flushes, key/tag/time searches, reads of a link's or an xattr's record, copies of bodies
over 64 KiB and staging-file I/O go to worker threads (docs/concurrency.md says which and
why). Message attributes (decoded from the mapped files), queue listings in batches and small
bodies stay on the loop, where they cost less than the ~50-100 us of a thread hop.

Every handler is wrapped: FsError and store errors map to their errno; anything else is a
bug, logged with its traceback and answered with EIO, and the daemon keeps serving (an
exception escaping a pyfuse3 handler would end the main loop and kill the mount).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import stat
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, ParamSpec, TypeVar

import pyfuse3
import trio
from pyfuse3 import (
    EntryAttributes,
    FileHandleT,
    FileInfo,
    FileNameT,
    FlagT,
    InodeT,
    ModeT,
    ReaddirToken,
    RequestContext,
    SetattrFields,
    StatvfsData,
    XAttrNameT,
)

from mqfs.store import Message

from .errors import FsError, errno_for
from .handles import (
    FollowHandle,
    Handles,
    MessageHandle,
    OffsetHandle,
    StagedHandle,
    TextHandle,
    WriteHandle,
)
from .inodes import (
    APPEND,
    FOLLOW,
    GROUP_QUEUE,
    JSONL,
    LINES,
    MESSAGE,
    NAME_MAX,
    QUEUE,
    STAGED,
    STATUS,
    TMP,
    Attr,
    Node,
)
from .listings import Listing
from .model import Model
from .staged import Staged
from .writers import AppendWriter, JsonlWriter, LinesWriter, OffsetWriter

log = logging.getLogger("mqfs")

FOLLOWERS_MAX = 32  # blocked `follow` reads each hold one of pyfuse3's (99) request tasks
FOLLOWERS_PER_USER = FOLLOWERS_MAX // 2  # so that one user cannot take every slot
SIGNAL_CHECK = 0.25  # seconds between checks for a signal sent to a waiting follow reader
# answers too common to be worth a log line, and EINTR: a reader the user interrupted
# (Ctrl-C, `timeout cat follow`) is no failure to list among status.json's recent errors
QUIET = (errno.ENOENT, errno.ENODATA, errno.EINTR)
READDIR_SLOW_BATCH = 64  # entries of a slow listing (tags/, keys/) built per worker-thread trip

P = ParamSpec("P")
R = TypeVar("R")


# handlers whose (parent inode, name) arguments name the entry they act on
NAMED_HANDLERS = {"lookup", "mkdir", "rmdir", "unlink", "create", "mknod", "symlink", "rename"}


def guarded(fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """Every failure becomes an errno; refusals (other than ENOENT/ENODATA) are logged with
    their reason and the path, and remembered for status.json; bugs are logged with a
    traceback and answered with EIO."""
    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except Exception as exc:  # noqa: BLE001 - the one place that must catch everything
            err = errno_for(exc)
            if err in QUIET:
                raise pyfuse3.FUSEError(err) from None
            ops = args[0] if args and isinstance(args[0], Operations) else None
            arg = args[1] if len(args) > 1 else None
            where = ops.where(fn.__name__, arg) if ops is not None and isinstance(arg, int) else "?"
            name = args[2] if len(args) > 2 else None
            if isinstance(name, bytes) and fn.__name__ in NAMED_HANDLERS:  # the entry, not its parent
                where = f"{where.rstrip('/')}/{name.decode(errors='replace')}"
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


async def in_thread(fn: Callable[..., R], *args: Any,
                    limiter: trio.CapacityLimiter | None = None) -> R:
    """Work that may wait for the disk (puts, fsync, searches, record reads) off the trio
    thread, so other requests go on meanwhile."""
    return await trio.to_thread.run_sync(fn, *args, limiter=limiter)


class Operations(pyfuse3.Operations):
    supports_dot_lookup = True
    enable_writeback_cache = False  # it would merge writes and lose message boundaries
    enable_acl = False

    def __init__(self, model: Model, on_ready: Callable[[], None] | None = None, *,
                 uid: int | None = None, gid: int | None = None) -> None:
        super().__init__()
        self.model = model
        self.store = model.store
        self.on_ready = on_ready
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        self.files = Handles()
        self.dirs = Handles()
        self.following: dict[int, int] = {}  # uid -> open `follow` handles
        self.arrived = trio.Event()  # set (and replaced) whenever messages are stored
        self.closing = False
        # staging-file work of all spools, one thread at a time in arrival order: a spool is
        # touched on the loop only while nothing waits here, so its bytes stay in order
        self.spool_lane = trio.CapacityLimiter(1)

    FH_HANDLERS = {"read", "write", "flush", "fsync", "release"}

    def where(self, op: str, arg: int) -> str:
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

    async def _spool_io(self, disk: bool, fn: Callable[..., R], *args: Any) -> R:
        """Run spool work on the loop when it stays in memory and the lane is idle, else in
        the lane (its staging file may wait for the disk)."""
        if disk or self.spool_lane.borrowed_tokens:
            return await in_thread(fn, *args, limiter=self.spool_lane)
        return fn(*args)

    def entry(self, a: Attr) -> EntryAttributes:
        e = EntryAttributes()
        e.st_ino = a.ino
        e.st_mode = a.mode
        e.st_nlink = a.nlink
        e.st_uid = self.uid
        e.st_gid = self.gid
        e.st_size = a.size
        e.st_blksize = a.blksize
        e.st_blocks = (a.size + 511) // 512
        e.st_atime_ns = e.st_mtime_ns = e.st_ctime_ns = a.mtime_ns
        e.entry_timeout = a.entry_timeout
        e.attr_timeout = a.attr_timeout
        return e

    # --- names and attributes --------------------------------------------------------------
    @guarded
    async def lookup(self, parent_inode: InodeT, name: FileNameT,
                     ctx: RequestContext | None = None) -> EntryAttributes:
        model = self.model
        if model.lookup_slow(parent_inode, name):
            return self.entry(await in_thread(model.lookup, parent_inode, name))
        return self.entry(model.lookup(parent_inode, name))

    @guarded
    async def getattr(self, inode: InodeT, ctx: RequestContext | None = None) -> EntryAttributes:
        model = self.model
        if model.getattr_slow(inode):
            return self.entry(await in_thread(model.getattr, inode))
        return self.entry(model.getattr(inode))

    @guarded
    async def setattr(self, inode: InodeT, attr: EntryAttributes, fields: SetattrFields,
                      fh: FileHandleT | None, ctx: RequestContext) -> EntryAttributes:
        kind = self.model.kind(inode)
        if fields.update_mode or fields.update_uid or fields.update_gid:
            raise FsError(errno.EPERM, "modes and owners are fixed (mount options uid, gid, "
                                       "umask)")
        if kind == STAGED:
            entry = self.model.staged[inode]
            if fields.update_size:
                disk = entry.spool.on_disk or attr.st_size > entry.spool.size
                await self._spool_io(disk, self.model.staged_truncate, entry, attr.st_size)
            return self.entry(self.model.getattr(inode))
        if kind not in (APPEND, JSONL, LINES, GROUP_QUEUE):
            raise FsError(errno.EPERM, "messages and directories are immutable")
        if fields.update_size and attr.st_size != 0:
            raise FsError(errno.EPERM, "writable files can only be truncated to 0 (O_TRUNC)")
        # size 0 (O_TRUNC of a fresh handle) and times are accepted and change nothing
        return self.entry(self.model.getattr(inode))

    @guarded
    async def readlink(self, inode: InodeT, ctx: RequestContext) -> FileNameT:
        return self.model.readlink(inode)

    @guarded
    async def statfs(self, ctx: RequestContext) -> StatvfsData:
        st = await in_thread(os.statvfs, self.store.root)
        s = StatvfsData()
        s.f_bsize = st.f_bsize
        s.f_frsize = st.f_frsize
        s.f_blocks, s.f_bfree, s.f_bavail = st.f_blocks, st.f_bfree, st.f_bavail
        s.f_files, s.f_ffree, s.f_favail = st.f_files, st.f_ffree, st.f_favail
        s.f_namemax = NAME_MAX
        return s

    async def forget(self, inode_list: Sequence[tuple[InodeT, int]]) -> None:
        """Inodes are never reused (computed or from a table), so nothing to do."""

    # --- directories -----------------------------------------------------------------------
    @guarded
    async def opendir(self, inode: InodeT, ctx: RequestContext) -> FileHandleT:
        model = self.model
        if model.listing_slow(inode):
            return self.dirs.add(await in_thread(model.listing, inode))
        return self.dirs.add(model.listing(inode))

    @guarded
    async def readdir(self, fh: FileHandleT, start_id: int, token: ReaddirToken) -> None:
        """Queue listings stream on the loop (a batch of headers is cheap); listings whose
        entries read records are built in a worker thread, a batch per trip."""
        listing: Listing = self.dirs.get(fh)
        entry, reply = self.entry, pyfuse3.readdir_reply
        if not listing.slow:
            for name, attr, cookie in listing.entries(start_id):
                if not reply(token, name, entry(attr), cookie):
                    break
            return
        batch = await in_thread(listing.batch, start_id, READDIR_SLOW_BATCH)
        count = 0
        for name, attr, cookie in batch:
            if not reply(token, name, entry(attr), cookie):
                break
            count += 1
        listing.taken(batch, count)

    @guarded
    async def releasedir(self, fh: FileHandleT) -> None:
        self.dirs.table.pop(fh, None)

    @guarded
    async def fsyncdir(self, fh: FileHandleT, datasync: bool) -> None:
        await in_thread(self.store.flush)

    @guarded
    async def mkdir(self, parent_inode: InodeT, name: FileNameT, mode: ModeT,
                    ctx: RequestContext) -> EntryAttributes:
        return self.entry(await in_thread(self.model.mkdir, parent_inode, name))

    @guarded
    async def rmdir(self, parent_inode: InodeT, name: FileNameT, ctx: RequestContext) -> None:
        raise FsError(errno.EPERM, "topics and queues are never removed through the mount")

    @guarded
    async def unlink(self, parent_inode: InodeT, name: FileNameT, ctx: RequestContext) -> None:
        if self.model.kind(parent_inode) == TMP:
            await self._drop_staged(self.model.tmp_entry(parent_inode, name))  # abandons it
            return
        raise FsError(errno.EPERM, "messages are removed only by retention")

    async def _drop_staged(self, entry: Staged) -> None:
        """Remove a staged file (closing its staging file, if any, in the lane)."""
        await self._spool_io(entry.spool.on_disk, self.model.tmp_unlink, entry.parent, entry.name)

    @guarded
    async def rename(self, parent_inode_old: InodeT, name_old: FileNameT,
                     parent_inode_new: InodeT, name_new: FileNameT, flags: FlagT,
                     ctx: RequestContext) -> None:
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
            replaced = model.tmp_dirs.get(parent_inode_new, {}).get(name_new)
            disk = replaced is not None and model.staged[replaced].spool.on_disk
            await self._spool_io(disk, model.tmp_move, entry, parent_inode_new, name_new,
                                 noreplace)
            return
        if target != QUEUE:
            raise FsError(errno.EPERM, "publish a staged file by renaming it into a queue "
                                       "directory")
        if name_new in (b"tmp", b"follow", b"append.jsonl", b"append.lines", b"at", b"tags"):
            raise FsError(errno.EINVAL, "rename into the queue directory or onto append")
        if noreplace and name_new != b"append":
            try:
                model.lookup(parent_inode_new, name_new)
                raise FsError(errno.EEXIST)
            except FsError as exc:
                if exc.errno != errno.ENOENT:
                    raise
        await self._publish(entry, model.nodes.get(parent_inode_new))

    async def _publish(self, entry: Staged, queue: Node) -> None:
        model = self.model
        entry.busy = True
        try:
            msg = await self._spool_io(entry.spool.on_disk, model.staged_message, entry,
                                       queue.topic, queue.queue)
            await self._store_messages([msg])
        finally:
            entry.busy = False
        await self._drop_staged(entry)

    async def _store_messages(self, messages: list[Message]) -> None:
        """Put (in a worker thread: bodies may be large, sync mode waits for the disk)."""
        await in_thread(self._store, messages)
        self.stored()

    def _store(self, messages: list[Message]) -> None:
        """Put, in a worker thread; refusals for size are EFBIG with the limit that applied."""
        try:
            self.model.put(messages)
        except Exception as exc:
            for msg in messages:
                room = self.store.max_body_size(msg)
                if len(msg.body) > room:
                    raise FsError(errno.EFBIG, f"body is {len(msg.body)} bytes, the limit here "
                                               f"is {room}") from exc
            raise

    def _write_lines(self, writer: JsonlWriter, buf: bytes) -> bool:
        """One write to `append.jsonl` or `append.lines`, in a worker thread: decoding a megabyte of lines
        would hold the event loop as long as storing them. True when lines were stored."""
        messages = writer.write(buf)
        if not messages:
            return False
        try:
            self._store(messages)
        except Exception as exc:
            writer.fail(errno_for(exc) or errno.EIO)
            raise
        return True

    @guarded
    async def link(self, inode: InodeT, new_parent_inode: InodeT, new_name: FileNameT,
                   ctx: RequestContext) -> EntryAttributes:
        raise FsError(errno.EPERM, "no hard links")

    @guarded
    async def symlink(self, parent_inode: InodeT, name: FileNameT, target: FileNameT,
                      ctx: RequestContext) -> EntryAttributes:
        raise FsError(errno.EPERM, "no new symlinks")

    @guarded
    async def mknod(self, parent_inode: InodeT, name: FileNameT, mode: ModeT, rdev: int,
                    ctx: RequestContext) -> EntryAttributes:
        raise FsError(errno.EPERM, "create regular files in tmp/, or write to append")

    @guarded
    async def create(self, parent_inode: InodeT, name: FileNameT, mode: ModeT, flags: FlagT,
                     ctx: RequestContext) -> tuple[FileInfo, EntryAttributes]:
        if not stat.S_ISREG(mode) and stat.S_IFMT(mode):
            raise FsError(errno.EPERM, "only regular files can be staged")
        attr = self.model.tmp_create(parent_inode, name)
        entry = self.model.staged[attr.ino]
        fh = self.files.add(StagedHandle(entry))
        return FileInfo(fh=fh, direct_io=True, keep_cache=False), self.entry(attr)

    # --- files -----------------------------------------------------------------------------
    @guarded
    async def open(self, inode: InodeT, flags: FlagT, ctx: RequestContext) -> FileInfo:
        model = self.model
        kind = model.kind(inode)
        writing = flags & os.O_ACCMODE != os.O_RDONLY
        if kind == MESSAGE:
            if writing:
                raise FsError(errno.EACCES, "messages are read-only")
            if model.body_slow(inode):
                body = await in_thread(model.body, inode)
            else:
                body = model.body(inode)
            return FileInfo(fh=self.files.add(MessageHandle(body)), keep_cache=True)
        if kind in (APPEND, JSONL, LINES):
            writer: AppendWriter | JsonlWriter | None = None
            if writing:
                node = model.nodes.get(inode)
                limit = model.body_limit(node.topic, node.queue)
                if kind == APPEND:
                    writer = AppendWriter(node.topic, node.queue, limit, model.spool())
                else:
                    lines = LinesWriter if kind == LINES else JsonlWriter
                    writer = lines(node.topic, node.queue, limit, model.parts.budget,
                                   self.store.max_body_size)
            return FileInfo(fh=self.files.add(WriteHandle(inode, writer)), direct_io=True,
                            keep_cache=False, nonseekable=True)
        if kind == GROUP_QUEUE:
            node = model.nodes.get(inode)
            offsets = None
            if writing:
                offsets = OffsetWriter(lambda text: model.group_offset_for(node, text))
            text_handle = OffsetHandle(inode, model.offset_text(node), offsets)
            return FileInfo(fh=self.files.add(text_handle), direct_io=True, keep_cache=False)
        if kind == STAGED:
            entry = model.staged[inode]
            if flags & os.O_TRUNC and writing:
                await self._spool_io(entry.spool.on_disk, model.staged_truncate, entry, 0)
            return FileInfo(fh=self.files.add(StagedHandle(entry)), direct_io=True,
                            keep_cache=False)
        if kind == STATUS:
            text = await in_thread(model.status_text)  # statvfs, each queue's newest record
            return FileInfo(fh=self.files.add(TextHandle(text)), direct_io=True,
                            keep_cache=False)
        if kind == FOLLOW:
            if writing:
                raise FsError(errno.EACCES, "follow is read-only")
            if self.model.follows.readers >= FOLLOWERS_MAX:
                raise FsError(errno.EMFILE, f"at most {FOLLOWERS_MAX} follow readers at once")
            mine = self.following.get(ctx.uid, 0)
            if mine >= FOLLOWERS_PER_USER:
                raise FsError(errno.EMFILE, f"at most {FOLLOWERS_PER_USER} follow readers per "
                                            f"user (uid {ctx.uid} has them)")
            node = model.nodes.get(inode)
            handle = FollowHandle(inode, model.follows.file(node.topic, node.queue, opening=True),
                                  ctx.pid, ctx.uid)
            self.model.follows.readers += 1
            self.following[ctx.uid] = mine + 1
            # seekable: tail reads the last lines back from the end, then what the size grew by
            return FileInfo(fh=self.files.add(handle), direct_io=True, keep_cache=False)
        raise FsError(errno.EISDIR)

    @guarded
    async def read(self, fh: FileHandleT, off: int, size: int) -> bytes:
        h = self.files.get(fh)
        if isinstance(h, MessageHandle):
            return memoryview(h.body)[off:off + size]
        if isinstance(h, (OffsetHandle, TextHandle)):
            return h.text[off:off + size]
        if isinstance(h, StagedHandle):
            if h.entry.gone:
                raise FsError(errno.ENOENT, "the staged file was published or removed")
            return await self._spool_io(h.entry.spool.on_disk, h.entry.spool.read, off, size)
        if isinstance(h, FollowHandle):
            return await self._follow(h, off, size)
        return b""  # append files read as empty

    async def _follow(self, h: FollowHandle, off: int, size: int) -> bytes:
        """The follow file's bytes at `off` (`fusefs.following`); at its end, waits until a
        message makes it grow, so `cat follow` prints new messages as they come.

        pyfuse3 does not pass on the kernel's INTERRUPT, and the kernel waits for the answer
        of a read the daemon has taken even when the reader is killed: so a waiting read
        looks at the opener's pending signals a few times a second and answers EINTR when
        there is one (Ctrl-C, `timeout`, kill end `cat follow` at once)."""
        file, topic, queue = h.file, h.file.topic, h.file.queue
        while True:
            if h.closed or self.closing:
                return b""
            arrived = self.arrived
            end = await in_thread(file.grow, self.model.follows.sizes, self.store.max_offset(topic, queue))
            if off < end:
                return await in_thread(file.read, self.model.follows.bodies, off, size)
            with trio.move_on_after(SIGNAL_CHECK):
                await arrived.wait()
            if signal_pending(h.opener):
                raise FsError(errno.EINTR, "the reader was signalled while waiting")

    @guarded
    async def write(self, fh: FileHandleT, off: int, buf: bytes) -> int:
        h = self.files.get(fh)
        if isinstance(h, WriteHandle) and h.writer is not None:
            async with h.lane:
                writer = h.writer
                if isinstance(writer, AppendWriter):
                    spool = writer.spool
                    return await self._spool_io(not spool.fits_in_memory(spool.size + len(buf)),
                                                writer.write, buf)
                if await in_thread(self._write_lines, writer, buf):
                    self.stored()
                return len(buf)
        if isinstance(h, StagedHandle):
            disk = not h.entry.spool.fits_in_memory(off + len(buf))
            return await self._spool_io(disk, self.model.staged_write, h.entry, off, buf)
        if isinstance(h, OffsetHandle) and h.writer is not None:
            offset = h.writer.write(off, buf)
            if offset is not None:
                await self._commit_offset(h, offset)
            return len(buf)
        raise FsError(errno.EBADF)

    async def _put(self, writer: AppendWriter | JsonlWriter, messages: list[Message]) -> None:
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

    async def _commit(self, h: object) -> None:
        """Make what this handle wrote visible: the one message of `append`, the trailing
        line of `append.jsonl`, the offset of a group file."""
        if isinstance(h, WriteHandle) and h.writer is not None:
            async with h.lane:
                writer = h.writer
                disk = isinstance(writer, AppendWriter) and writer.spool.on_disk
                await self._put(writer, await self._spool_io(disk, writer.take))
        elif isinstance(h, OffsetHandle) and h.writer is not None:
            offset = h.writer.take()
            if offset is not None:
                await self._commit_offset(h, offset)

    @guarded
    async def flush(self, fh: FileHandleT) -> None:
        await self._commit(self.files.get(fh))

    @guarded
    async def fsync(self, fh: FileHandleT, datasync: bool) -> None:
        await self._commit(self.files.get(fh))
        await in_thread(self.store.flush)

    @guarded
    async def release(self, fh: FileHandleT) -> None:
        h = self.files.table.pop(fh, None)
        if isinstance(h, WriteHandle) and h.writer is not None:
            writer = h.writer
            if writer.pending:
                log.warning("released an append handle with %d unflushed bytes; dropped",
                            writer.pending)
            await self._spool_io(isinstance(writer, AppendWriter) and writer.spool.on_disk,
                                 writer.close)
        elif isinstance(h, FollowHandle):
            h.closed = True
            self.model.follows.closed(h.file)
            self.model.follows.readers -= 1
            self.following[h.uid] -= 1
            if not self.following[h.uid]:
                del self.following[h.uid]
            self.stored()  # wakes a read still waiting for this handle, which then ends

    # --- extended attributes ---------------------------------------------------------------
    @guarded
    async def getxattr(self, inode: InodeT, name: XAttrNameT, ctx: RequestContext) -> bytes:
        if not name.startswith(b"user."):
            # security.capability is asked before every write, security.selinux and the
            # ACL names by every `ls -l`: answered before any other work (and not as an
            # FsError, whose handling costs as much as the round trip)
            raise pyfuse3.FUSEError(pyfuse3.ENOATTR)
        model = self.model
        if model.xattrs_slow(inode):
            return await in_thread(model.xattr, inode, name)
        return model.xattr(inode, name)

    @guarded
    async def listxattr(self, inode: InodeT, ctx: RequestContext) -> Sequence[XAttrNameT]:
        model = self.model
        if model.xattrs_slow(inode):
            return list(await in_thread(model.xattrs, inode))
        return list(model.xattrs(inode))

    @guarded
    async def setxattr(self, inode: InodeT, name: XAttrNameT, value: bytes,
                       ctx: RequestContext) -> None:
        if self.model.kind(inode) == STAGED:
            self.model.set_staged_xattr(self.model.staged[inode], name, value)
            return
        raise FsError(errno.EPERM, "attributes are read-only (but user.keys and user.tags "
                                   "of files in tmp/)")

    @guarded
    async def removexattr(self, inode: InodeT, name: XAttrNameT, ctx: RequestContext) -> None:
        raise FsError(errno.EPERM, "attributes are read-only")
