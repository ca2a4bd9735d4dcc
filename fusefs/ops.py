"""The pyfuse3 adapter: translates each request into a call of the Model (or of the handle
an open returned), the Model's attributes into pyfuse3's, and every failure into an errno.
What a call does, and which of its steps may wait for the disk, is the Model's to say; this
module offers the places (`TrioRunner`: the event loop, worker threads, the spool lane).

The trio loop serves every request, so nothing that may wait for the disk runs on it: puts,
flushes, key/tag/time searches, reads of a link's or an xattr's record, copies of bodies
over 64 KiB and staging-file I/O go to worker threads (docs/concurrency.md says which and
why). Message attributes (decoded from the mapped files), queue listings in batches, small
bodies and a small put the store takes without waiting (`Model.put_now`) stay on the loop,
where they cost less than the ~50-100 us of a thread hop.

Every handler is wrapped: FsError and store errors map to their errno; anything else is a
bug, logged with its traceback and answered with EIO, and the daemon keeps serving (an
exception escaping a pyfuse3 handler would end the main loop and kill the mount).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, ParamSpec, TypeVar

import outcome  # trio's
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

from .errors import FsError, errno_for
from .forgetting import Forgetting
from .handles import Behind, Handle, Handles, LinesHandle, Opening
from .inodes import NAME_MAX, Attr
from .listings import Listing
from .model import Model

log = logging.getLogger("mqfs")

# answers too common to be worth a log line, and EINTR: a reader the user interrupted
# (Ctrl-C, `timeout cat follow`) is no failure to list among status.json's recent errors
QUIET = (errno.ENOENT, errno.ENODATA, errno.EINTR)
READDIR_SLOW_BATCH = 64  # entries of a slow listing (tags/, keys/) built per worker-thread trip

CHAINS = threading.Lock()  # a Behind's running, then and failure (`TrioRunner.behind`)

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
    """Tell the kernel cached attributes of these inodes are stale (when: `Forgetting`).
    From a put's thread: a worker, the forgetting thread, or the loop (a put it made). With
    the writeback cache off an attribute-only invalidation never waits: one write to
    /dev/fuse, a few microseconds."""
    for ino in inodes:
        try:
            pyfuse3.invalidate_inode(ino, attr_only=True)
        except OSError:  # not known to the kernel (forgotten) or unmounting: nothing cached
            pass


async def in_thread(fn: Callable[..., R], *args: Any,
                    limiter: trio.CapacityLimiter | None = None) -> R:
    """Work that may wait for the disk (puts, fsync, searches, record reads) off the trio
    thread, so other requests go on meanwhile.

    One trip: the job goes to a cached worker thread (trio's, within the limiter: 40
    threads by default) and its result reschedules the waiting task. trio.to_thread.run_sync
    does the same with a context copy, thread naming (two prctl calls) and scheduler passes
    for the limiter and cancellation that cost the loop about half again as much; nothing
    here uses trio.from_thread, and the trip is not cancellable there either."""
    if limiter is None:
        limiter = trio.to_thread.current_default_thread_limiter()
    task = trio.lowlevel.current_task()
    try:
        limiter.acquire_on_behalf_of_nowait(task)
    except trio.WouldBlock:
        await limiter.acquire_on_behalf_of(task)
    try:
        token = trio.lowlevel.current_trio_token()

        def deliver(result: outcome.Outcome[R]) -> None:
            token.run_sync_soon(trio.lowlevel.reschedule, task, result)

        trio.lowlevel.start_thread_soon(functools.partial(fn, *args), deliver)
        return await trio.lowlevel.wait_task_rescheduled(stay)  # type: ignore[no-any-return]
    finally:
        limiter.release_on_behalf_of(task)


def stay(_: Any) -> trio.lowlevel.Abort:
    """A job in a worker thread runs to its end: its task waits for it even when cancelled."""
    return trio.lowlevel.Abort.FAILED


class TrioRunner:
    """The places a handle's steps run (`fusefs.handles.Runner`), and the event that wakes
    `follow` readers when messages are stored."""

    def __init__(self) -> None:
        # staging-file work of all spools, one thread at a time in arrival order: a spool is
        # touched on the loop only while nothing waits here, so its bytes stay in order
        self.lane = trio.CapacityLimiter(1)
        self.arrived = trio.Event()  # set (and replaced) when messages are stored
        self.watched = False  # `arrived` was handed out since: only then is it set and replaced

    async def thread(self, fn: Callable[..., R], *args: Any) -> R:
        return await in_thread(fn, *args)

    async def spool(self, on_disk: bool, fn: Callable[..., R], *args: Any) -> R:
        if on_disk or self.lane.borrowed_tokens:
            return await in_thread(fn, *args, limiter=self.lane)
        return fn(*args)

    def stored(self) -> None:
        if self.watched:  # a `follow` reader may wait on it (most puts have none)
            self.arrived.set()
            self.arrived = trio.Event()
            self.watched = False

    def arrival(self) -> trio.Event:
        self.watched = True
        return self.arrived

    async def wait(self, arrival: trio.Event, seconds: float) -> None:
        with trio.move_on_after(seconds):
            await arrival.wait()

    def behind(self, fn: Callable[[], object], held: object = None,
               after: Behind | None = None) -> Behind:
        """fn (a put) in a cached worker thread (outside the limiter: one per handle at
        most), its end reported on the loop, where `follow` readers are woken at once and
        `held` is freed. `after`, an earlier put of the same handle: fn runs once it has
        ended, in its thread when it still runs (so the store goes on from one write's put
        to the next without a trip through the loop), and not at all when it failed (the
        job fails with its error): a handle's lines are stored in order, none after a
        failure."""
        job = Behind(held)
        with CHAINS:
            if after is not None and after.running:
                after.then = (fn, job)
                job.running = True
                return job
            job.running = True
        first = [fn, job, after]  # emptied by the thread: it must not keep the messages alive
        trio.lowlevel.start_thread_soon(
            functools.partial(self._chain, first, trio.lowlevel.current_trio_token()), ignore)
        return job

    def _chain(self, first: list[Any], token: trio.lowlevel.TrioToken) -> None:
        """In a worker thread: each put of a handle's chain in turn (`behind`), each end
        reported on the loop in order."""
        fn, job, after = first
        first.clear()
        while True:
            failure = None if after is None else after.failure
            result = outcome.capture(fn) if failure is None else outcome.Error(failure)
            fn = after = None  # the put's messages are freed on the loop (Behind.held)
            with CHAINS:
                job.running = False
                if isinstance(result, outcome.Error):
                    job.failure = result.error
                then, job.then = job.then, None
                try:  # under the lock: a put started after this one ended settles after it
                    token.run_sync_soon(self._settle, job, result)
                except trio.RunFinishedError:  # the mount ended: no handle is left to wait
                    pass
                result = None  # its PutResults too are the loop's to free
            if then is None:
                return
            after, (fn, job) = job, then

    def _settle(self, job: Behind, result: outcome.Outcome[object]) -> None:
        try:
            result.unwrap()
        except Exception as exc:  # noqa: BLE001 - the handle raises it where it waits
            job.error = exc
        else:
            self.stored()
        job.held = None
        job.done.set()


def ignore(_: object) -> None:
    """A chain's own outcome: each put's was reported on the loop."""


class Operations(pyfuse3.Operations):
    supports_dot_lookup = True
    enable_writeback_cache = False  # it would merge writes and lose message boundaries
    enable_acl = False

    def __init__(self, model: Model, on_ready: Callable[[], None] | None = None, *,
                 uid: int | None = None, gid: int | None = None) -> None:
        super().__init__()
        self.model = model
        self.on_ready = on_ready
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        self.files: Handles[Handle] = Handles()
        self.dirs: Handles[Listing] = Handles()
        self.run = TrioRunner()
        self.forgetting = Forgetting(forget_attrs)  # stopped before the session closes

    FH_HANDLERS = {"read", "write", "flush", "fsync", "release"}

    def where(self, op: str, arg: int) -> str:
        """The path a handler's first argument (inode or file handle) stands for."""
        try:
            if op in self.FH_HANDLERS:
                h = self.files.table.get(arg)
                return f"(handle {arg})" if h is None else self.model.path(h.ino)
            if op in ("readdir", "releasedir", "fsyncdir"):
                return f"(directory handle {arg})"
            return self.model.path(arg)
        except Exception:  # noqa: BLE001 - a description must never hide the real error
            return f"({arg})"

    def stop_following(self) -> None:
        """Shutting down: waiting `follow` reads answer EOF."""
        self.model.stop_following()
        self.run.stored()

    def init(self) -> None:
        self.model.forget_attrs = self.forgetting
        if self.on_ready is not None:
            try:
                self.on_ready()
            except Exception:  # noqa: BLE001 - init must not raise
                log.exception("readiness notification failed")

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

    def file_info(self, h: Handle) -> FileInfo:
        return FileInfo(fh=self.files.add(h), direct_io=h.direct_io, keep_cache=h.keep_cache,
                        nonseekable=h.nonseekable)

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
        owner = bool(fields.update_mode or fields.update_uid or fields.update_gid)
        size = attr.st_size if fields.update_size else None
        return self.entry(await self.model.setattr(self.run, inode, size, owner))

    @guarded
    async def readlink(self, inode: InodeT, ctx: RequestContext) -> FileNameT:
        return self.model.readlink(inode)

    @guarded
    async def statfs(self, ctx: RequestContext) -> StatvfsData:
        st = await in_thread(self.model.disk)
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
        listing = self.dirs.get(fh)
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

    async def whole_store_flush(self) -> None:
        """What fsync of any file or directory promises: the whole store on disk, the lines
        of every write already answered included (a put some `append.jsonl` write left
        running behind it is waited for first; its failure is its handle's to report)."""
        for h in list(self.files.table.values()):
            if isinstance(h, LinesHandle) and h.behind is not None:
                await h.behind.done.wait()
        await in_thread(self.model.flush)

    @guarded
    async def fsyncdir(self, fh: FileHandleT, datasync: bool) -> None:
        await self.whole_store_flush()

    @guarded
    async def mkdir(self, parent_inode: InodeT, name: FileNameT, mode: ModeT,
                    ctx: RequestContext) -> EntryAttributes:
        return self.entry(await in_thread(self.model.mkdir, parent_inode, name))

    @guarded
    async def rmdir(self, parent_inode: InodeT, name: FileNameT, ctx: RequestContext) -> None:
        raise FsError(errno.EPERM, "topics and queues are never removed through the mount")

    @guarded
    async def unlink(self, parent_inode: InodeT, name: FileNameT, ctx: RequestContext) -> None:
        await self.model.unlink(self.run, parent_inode, name)

    @guarded
    async def rename(self, parent_inode_old: InodeT, name_old: FileNameT,
                     parent_inode_new: InodeT, name_new: FileNameT, flags: FlagT,
                     ctx: RequestContext) -> None:
        await self.model.rename(self.run, parent_inode_old, name_old, parent_inode_new, name_new,
                                exchange=bool(flags & pyfuse3.RENAME_EXCHANGE),
                                noreplace=bool(flags & pyfuse3.RENAME_NOREPLACE))

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
        handle, attr = self.model.create(parent_inode, name, mode)
        return self.file_info(handle), self.entry(attr)

    # --- files -----------------------------------------------------------------------------
    @guarded
    async def open(self, inode: InodeT, flags: FlagT, ctx: RequestContext) -> FileInfo:
        writing = flags & os.O_ACCMODE != os.O_RDONLY
        how = Opening(writing, bool(flags & os.O_TRUNC), ctx.uid, ctx.pid)
        return self.file_info(await self.model.open(self.run, inode, how))

    @guarded
    async def read(self, fh: FileHandleT, off: int, size: int) -> bytes:
        return await self.files.get(fh).read(self.run, off, size)

    @guarded
    async def write(self, fh: FileHandleT, off: int, buf: bytes) -> int:
        return await self.files.get(fh).write(self.run, off, buf)

    @guarded
    async def flush(self, fh: FileHandleT) -> None:
        await self.files.get(fh).commit(self.run)

    @guarded
    async def fsync(self, fh: FileHandleT, datasync: bool) -> None:
        await self.files.get(fh).commit(self.run)
        await self.whole_store_flush()

    @guarded
    async def release(self, fh: FileHandleT) -> None:
        h = self.files.table.pop(fh, None)
        if h is not None:
            await h.release(self.run)

    # --- extended attributes ---------------------------------------------------------------
    @guarded
    async def getxattr(self, inode: InodeT, name: XAttrNameT, ctx: RequestContext) -> bytes:
        if not name.startswith(b"user."):
            # security.capability is asked at every open with O_TRUNC, security.selinux and the
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
        self.model.setxattr(inode, name, value)

    @guarded
    async def removexattr(self, inode: InodeT, name: XAttrNameT, ctx: RequestContext) -> None:
        raise FsError(errno.EPERM, "attributes are read-only")
