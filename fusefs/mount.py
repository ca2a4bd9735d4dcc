"""Mount lifecycle: open the store (lock, recovery with progress, abort file), mount, serve
on trio until unmounted or signalled, then close the store cleanly.

Without -f the process forks *before* opening the store (the store starts threads, and
forking a threaded process is unsafe); the parent waits on a pipe and exits 0 only once
the child reports the mount ready, or prints the child's one-line error and exits 1.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import faulthandler
import logging
import logging.handlers
import os
import resource
import signal
import socket
import stat
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext

from .options import MountOptions
from .progress import progress_bar

log = logging.getLogger("mqfs")


def systemd_notify(message: str) -> None:
    """sd_notify without libsystemd: one datagram to $NOTIFY_SOCKET, if set."""
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return
    if path.startswith("@"):
        path = "\0" + path[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(path)
        sock.sendall(message.encode())


def describe_recovery(report) -> str:
    """What opening the store found and did, as one line a person reads (the facts: where
    the CommitLog ends, records indexed again, files moved to quarantine/, notes)."""
    facts = ["recovered after an unclean shutdown" if report.abnormal else "clean",
             f"CommitLog ends at offset {report.end_offset}",
             f"{report.dispatched} record{'' if report.dispatched == 1 else 's'} indexed again"]
    if report.quarantined:
        facts.append(f"moved to quarantine: {', '.join(report.quarantined)}")
    if report.corruption:
        facts.append(f"damage served around: {report.corruption}")
    facts.extend(report.notes)
    return "; ".join(facts)


LOG_DIR = "logs"  # inside the store directory
LOG_BYTES = 4 << 20  # mqfs.log is rotated at this size, keeping LOG_KEEP old files
LOG_KEEP = 3


LIVE_REFRESH_MS = 200  # how often an -o ro mount takes in what a broker or daemon wrote
# objects made (net of those freed) before a young garbage collection: a write to append.jsonl
# makes a Message a line and its put a PutResult (a 1 MiB write of 1 KiB lines: ~2,000 objects,
# freed two writes later), so at the default 700 each write ran two or three collections that
# walked its batch, holding the GIL (~0.1-0.2 us a line); at this many, a stream's batches are
# freed before any collection sees them
GC_YOUNG = 20_000


def default_log(store_root: str, read_only: bool) -> str:
    """STORE/logs/mqfs.log; for a read-only mount, which must not write into the store,
    $XDG_STATE_HOME/mqfs/<store path>.log (~/.local/state by default)."""
    if not read_only:
        return os.path.join(store_root, LOG_DIR, "mqfs.log")
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    name = os.path.abspath(store_root).strip("/").replace("/", "_") or "root"
    return os.path.join(state, "mqfs", f"{name}.log")


def is_broker_refused(store_root: str) -> bool:
    """A store whose broker layout a read-write open refuses (and so must not log into)."""
    from mqfs.store import StoreError
    from mqfs.store.meta.features import recognise

    try:
        return recognise(store_root).refusal() is not None
    except (OSError, StoreError):
        return False


def journal_stderr() -> bool:
    """stderr is systemd's journal: the unit (a service, or the mount unit whose mount(8)
    started this) says so in JOURNAL_STREAM, the device and inode of that stream."""
    try:
        st = os.fstat(2)
    except OSError:
        return False
    return os.environ.get("JOURNAL_STREAM") == f"{st.st_dev}:{st.st_ino}"


def setup_logging(target: str | None, foreground: bool, store_root: str,
                  read_only: bool = False, debug: bool = False) -> None:
    """target: a file path, 'syslog', 'stderr' or 'none'. Default: stderr in the
    foreground (systemd's journal takes it), else `default_log`, rotated; syslog when that
    cannot be written. A read-write mount whose store has no log yet holds its records
    (`PendingLog`) until `settle_log` knows whether the open succeeded."""
    from .logfile import PendingLog

    in_store = target is None and not foreground and not read_only
    if in_store and is_broker_refused(store_root):
        in_store, read_only = False, True  # the open refuses: not a byte into that store
    handler: logging.Handler
    if target is None and in_store and not os.path.lexists(default_log(store_root, False)):
        handler = PendingLog()  # a refused open must leave no file it made in the store
    else:
        if target is None:
            target = "stderr" if foreground else _ready_file(
                default_log(store_root, read_only), store_root, in_store)
        handler = _handler(target, in_store)
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    root.handlers[:] = [handler]
    if not foreground and target != "stderr" and journal_stderr():
        # a background mount under systemd: its log also goes where `journalctl -u` looks
        # (the journal stamps time and pid itself); ready() keeps stderr open for it
        journal = logging.StreamHandler(sys.stderr)
        journal.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(journal)


def settle_log(store_root: str, opened: bool) -> None:
    """Give the records a `PendingLog` holds their file: STORE/logs/mqfs.log once the
    read-write open succeeded, else the read-only mount's log outside the store."""
    from .logfile import PendingLog

    root = logging.getLogger()
    for i, pending in enumerate(root.handlers):
        if isinstance(pending, PendingLog):
            target = _ready_file(default_log(store_root, not opened), store_root, opened)
            root.handlers[i] = _handler(target, in_store=opened)
            pending.setTarget(root.handlers[i])
            pending.close()  # hands every held record on, in order


def _ready_file(path: str, store_root: str, in_store: bool) -> str:
    """path, created to append to; 'syslog' (or 'none') where it cannot be."""
    from mqfs.store import StoreError
    from mqfs.store.files import safefs
    from mqfs.store.meta.manifest import is_store

    try:
        if not is_store(store_root):  # never create files where no store is
            raise FileNotFoundError(store_root)
        if in_store:  # never into a store mqfs refuses, and no link followed
            safefs.check_store(store_root)
            safefs.makedirs(os.path.dirname(path))
            os.close(safefs.open_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT))
        else:
            os.makedirs(os.path.dirname(path), mode=safefs.DIR_MODE, exist_ok=True)
    except (OSError, StoreError):  # the store's own check refuses it with one line
        return "syslog" if os.path.exists("/dev/log") else "none"
    return path


def _handler(target: str, in_store: bool) -> logging.Handler:
    from .logfile import PrivateLog

    handler: logging.Handler
    if target == "none":
        handler = logging.NullHandler()
    elif target == "stderr":
        handler = logging.StreamHandler(sys.stderr)
    elif target == "syslog":
        handler = logging.handlers.SysLogHandler("/dev/log")
        handler.setFormatter(logging.Formatter("mqfs[%(process)d]: %(levelname)s %(message)s"))
        return handler
    else:
        handler = PrivateLog(target, LOG_BYTES, LOG_KEEP, in_store=in_store)
    handler.setFormatter(logging.Formatter(
        "%(asctime)s mqfs[%(process)d] %(levelname)s %(name)s: %(message)s"))
    return handler


def raise_open_file_limit() -> None:
    """Raise the soft RLIMIT_NOFILE to the hard limit: a store of many queues and a mount
    serving many open files need more than the usual soft 1,024, and the hard limit is what
    the administrator (or systemd's LimitNOFILE) allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open file limit from %d to %d: %s", soft, hard, exc)


def release_freed_heap() -> None:
    """Hand back to the kernel the heap a recovery freed. Recovery's arrays for what it
    re-dispatches are freed when it ends, but glibc keeps the pages it had for them, so a
    daemon that recovered 1 GB held ~125 MB it no longer used for the whole mount."""
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to hand back this way
        pass


def _dead_mount(mountpoint: str) -> OSError:
    return OSError(f"mount point {mountpoint} is a mount whose daemon is gone (Transport "
                   f"endpoint is not connected): `mqfs umount {mountpoint}` first")


def check_mountpoint(mountpoint: str) -> None:
    """Refuse, with one line, a mount point that is no directory, is mounted already (a
    second mount would hide the first), or is a mount whose daemon died."""
    try:
        st = os.stat(mountpoint)
        if os.path.ismount(mountpoint):
            os.statvfs(mountpoint)  # always asks the filesystem: a dead daemon cannot answer
    except OSError as exc:
        if exc.errno == errno.ENOTCONN:
            raise _dead_mount(mountpoint) from None
        raise OSError(f"mount point {mountpoint}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(f"mount point {mountpoint} is not a directory")
    if os.path.ismount(mountpoint):
        raise OSError(f"mount point {mountpoint} is already mounted: unmount it first "
                      f"(`mqfs umount {mountpoint}`)")


def serve(store_root: str, mountpoint: str, opts: MountOptions,
          ready: Callable[[], None]) -> int:
    """Open, mount, serve, close. `ready` is called once the kernel has the mount."""
    import gc

    import pyfuse3
    import trio

    from mqfs.store import MessageStore, StoreConfig

    from .model import Model
    from .ops import Operations
    from .spool import Budget

    check_mountpoint(mountpoint)
    raise_open_file_limit()
    cfg = StoreConfig(flush_mode=opts.flush_mode, transient_pool=opts.transient,
                      read_only=opts.read_only, retention_hours=opts.retention_hours,
                      retention_bytes=opts.retention_bytes,
                      message_delay_level=opts.message_delay_level or StoreConfig().message_delay_level,
                      live_refresh_ms=LIVE_REFRESH_MS if opts.read_only else 0,
                      all_versions=opts.all_versions)
    crashed = os.path.exists(os.path.join(store_root, "abort"))
    # a clean open only re-checks the tail: quick, and not worth a bar
    started = time.monotonic()
    with progress_bar("recovery") if crashed else nullcontext(None) as progress:
        store = MessageStore(store_root, cfg, progress=progress, create=False)
        store.open()
    settle_log(store_root, opened=True)
    release_freed_heap()
    if store.recovery is not None:
        summary = describe_recovery(store.recovery)
        log.info("opened %s in %.1f s: %s", store_root, time.monotonic() - started, summary)
        if crashed and sys.stderr.isatty():  # the person who mounted sees what recovery did
            print(f"mqfs: {summary} ({time.monotonic() - started:.1f} s)", file=sys.stderr)
    clean = False
    try:
        model = Model(store, umask=opts.umask, keys_max=opts.keys_max,
                      budget=Budget(opts.buffer_max))
        def on_ready() -> None:
            ready()
            store.start_scrub()  # the whole-store check, once the mount serves

        ops = Operations(model, on_ready=on_ready, uid=opts.uid, gid=opts.gid)
        pyfuse3.init(ops, mountpoint, opts.fuse_options(store.root))
        # a full garbage collection stops the event loop too, for as long as it takes to
        # walk every object: what open built (modules, the loaded store) lives as long as
        # the mount, so it is left out of those walks; and a young collection waits for
        # GC_YOUNG new objects, not 700
        gc.freeze()
        gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
        try:
            trio.run(_main_loop, ops)
            clean = True
        finally:
            ops.forgetting.stop()  # no invalidation may reach a closed session
            pyfuse3.close(unmount=clean)  # after a crash keep the (dead) mount: see README
    finally:
        store.close()
        log.info("store closed%s", "" if clean else " after an error")
    return 0


async def _main_loop(ops) -> None:
    """Serve until unmounted or signalled; on a signal, end waiting `follow` reads first
    (pyfuse3.main returns only when every request has been answered)."""
    import pyfuse3
    import trio

    async def on_signal() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as sigs:
            async for signum in sigs:
                log.info("signal %d: unmounting", signum)
                ops.stop_following()
                pyfuse3.terminate()
                return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(on_signal)
        await pyfuse3.main()
        nursery.cancel_scope.cancel()


def run_foreground(store_root: str, mountpoint: str, opts: MountOptions, *,
                   use_systemd: bool, log_target: str | None) -> int:
    setup_logging(log_target, foreground=True, store_root=store_root, debug=opts.debug)
    faulthandler.register(signal.SIGUSR1)

    def ready() -> None:
        log.info("mounted %s on %s", store_root, mountpoint)
        if use_systemd:
            systemd_notify(f"READY=1\nSTATUS=serving {store_root} on {mountpoint}\nMAINPID={os.getpid()}")

    try:
        return serve(store_root, mountpoint, opts, ready)
    finally:
        if use_systemd:
            systemd_notify("STOPPING=1")


def run_daemon(store_root: str, mountpoint: str, opts: MountOptions, *,
               log_target: str | None) -> int:
    """Fork; the parent returns 0 only once the child has the mount ready."""
    r, w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(w)
        with os.fdopen(r, "rb") as pipe:
            report = pipe.read().decode(errors="replace").strip()
        if report == "ok":
            return 0
        os.waitpid(pid, 0)
        raise OSError(report or "the mount daemon exited before the mount was ready")
    # child: no return from here
    os.close(r)
    code = 1
    try:
        os.setsid()
        os.chdir("/")
        setup_logging(log_target, foreground=False, store_root=store_root,
                      read_only=opts.read_only)
        faulthandler.register(signal.SIGUSR1)

        def ready() -> None:
            os.write(w, b"ok\n")
            os.close(w)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1) if journal_stderr() else (0, 1, 2):
                os.dup2(devnull, fd)
            os.close(devnull)
            log.info("mounted %s on %s", store_root, mountpoint)

        code = serve(store_root, mountpoint, opts, ready)
    except BaseException as exc:  # noqa: BLE001 - report anything to the waiting parent
        from mqfs.store import StoreError

        if isinstance(exc, (StoreError, OSError, ValueError)):  # a refusal: one line says it
            log.warning("mount refused: %s", exc)
        else:
            log.exception("mount failed")
        settle_log(store_root, opened=False)
        try:
            os.write(w, f"{exc}\n".encode())
        except OSError:
            pass  # the parent already has its answer; the log has the details
    finally:
        os._exit(code)
