"""Who may open a store: three locks, taken in this order and held until close.

1. flock(2) on the store directory itself, through a descriptor kept open for as long as the
   store is: nobody can delete or replace the directory's inode under us, so `rm STORE/lock`
   cannot let a second writer in.
2. flock(2) on `config/mqfs.lock`, a file mqfs creates 0600: only a user who may write the
   store can open it, so only a writer (or verify, run by the owner) can hold it.
3. The `lock` file: an exclusive POSIX record lock on byte 0, as RocketMQ's
   FileChannel.tryLock(0, 1) takes it, so mqfs and a real broker exclude each other.

A refused writer removes the `config/mqfs.lock` (and `config/`) it created, by the inode it
made and while it still holds the flock (one the lock let in, whose open then refuses, too:
`refused`); so that an opener that opened that file just before
cannot take a lock nobody else sees, a flock on `config/mqfs.lock` counts only while the name
still stands for the file locked.

A writer takes both exclusively; `shared` (verify, repair's plan, read-only opens that must
keep writers out) takes both shared and creates nothing; `live` (a read-only view of a store a
writer is using, which must change nothing and block no one) takes neither.

Anyone who can open a file can lock it: a local user who may only read a store (a directory
0755, a broker's `lock` 0644) could lock 1 and 3 and keep every writer out. So those two
count only when a process that may write the store holds them (root, the store's owner, this
process's user, a trusted owner: /proc/locks names the holders, /proc/PID/status their
users); one held by anyone else is logged and passed by, and 2 still keeps writers apart.
What remains: the record lock such a reader holds also keeps a broker out, which mqfs cannot
change, and while a reader holds 1, `rm STORE/config/mqfs.lock` lets a second writer in.
"""

from __future__ import annotations

import fcntl
import logging
import os
import stat
import struct

from ..errors import StoreError, StoreLocked
from . import safefs

log = logging.getLogger(__name__)
_FLOCK = "hhqqi4x"  # struct flock on Linux x86_64/aarch64: type, whence, start, len, pid
_HELD_HERE: set[str] = set()  # POSIX locks do not exclude the same process
NAME = "lock"
PRIVATE = os.path.join("config", "mqfs.lock")


def _inode(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _record_holder(fd: int) -> int | None:
    query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
    try:
        reply = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    except OSError:
        return None
    l_type, _, _, _, pid = struct.unpack(_FLOCK, reply)
    return pid if l_type != fcntl.F_UNLCK else None


def _holders(fd: int, kind: str) -> list[int]:
    """The pids /proc/locks names as holding a lock of `kind` (FLOCK or POSIX) on this
    file (flock has no F_GETLK, and F_GETLK names one holder of many); waiters left out."""
    st = os.fstat(fd)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    found = []
    try:
        with open("/proc/locks") as f:
            for line in f:
                fields = line.split()
                if kind in fields and dev in fields and "->" not in fields:
                    found.append(int(fields[fields.index(dev) - 1]))
    except (OSError, ValueError, IndexError):
        pass
    return found


def _uid_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[2])  # the effective uid
    except (OSError, ValueError, IndexError):
        pass
    return None


def _may_write(pid: int, store: os.stat_result) -> bool:
    """Whether the process could write the store (root, the store's owner, this process's
    user, a trusted owner): only such a holder's lock keeps a writer out. Unknown: yes."""
    uid = _uid_of(pid)
    return uid is None or uid in (0, os.geteuid(), store.st_uid) or uid in safefs.trusted()


class StoreLock:
    def __init__(self, root: str):
        self.root = root
        self.path = os.path.join(root, NAME)
        self.key = os.path.realpath(root)
        self.dir_fd = -1
        self.private_fd = -1
        self.replacement_fd = -1
        self.fd = -1
        self.held = False
        self._made: list[tuple[str, tuple[int, int]]] = []  # (path in root, inode) made here

    def _in_use(self, pid: int | None) -> StoreLocked:
        who = f"pid {pid}" if pid else "another process"
        return StoreLocked(f"store {self.key} is in use: its lock is held by {who}")

    def acquire(self, shared: bool = False, *, live: bool = False) -> None:
        """Exclusive for a writer; see the module docstring for `shared` and `live`."""
        if self.key in _HELD_HERE:
            raise StoreLocked(f"store {self.key} is already open in this process "
                              f"(pid {os.getpid()})")
        if not live:
            self._lock_directory(shared)
            try:
                self._lock_private(shared)
                self._lock_file(shared)
            except BaseException:
                self._remove_made()
                self.release()
                raise
        self.held = True
        _HELD_HERE.add(self.key)

    def _held_by_others(self, fd: int, kind: str) -> bool:
        """After a lock was refused: True when every holder is a process that may not
        write the store (a local user who can only read it): its lock is not a writer's and
        keeps no one out. StoreLocked, naming the holder, when one may write."""
        store = os.stat(self.root)
        pids = _holders(fd, kind)
        writers = [pid for pid in pids if _may_write(pid, store)]
        if pids and not writers:
            log.warning("store %s: %s lock held by pid %s, whose user may not write the store: "
                        "ignored", self.key, "directory" if kind == "FLOCK" else "record",
                        ", ".join(map(str, sorted(set(pids)))))
            return True
        raise self._in_use(writers[0] if writers else None)

    def _lock_directory(self, shared: bool) -> None:
        fd = safefs.open_dir(self.root)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError:
            try:
                self._held_by_others(fd, "FLOCK")
            except BaseException:
                os.close(fd)
                raise
        self.dir_fd = fd

    def _lock_private(self, shared: bool) -> None:
        """flock on `config/mqfs.lock`, a file only the store's owner can open (0600): the
        one lock no mere reader can hold, so it alone is never passed by."""
        path = os.path.join(self.root, PRIVATE)
        try:
            fd = safefs.open_file(path, os.O_RDONLY) if shared else self._open_private(path)
        except (FileNotFoundError, PermissionError):
            if shared:
                return  # a reader creates nothing; one who cannot open it has the others
            raise
        try:
            if not shared and os.fstat(fd).st_mode & 0o077:
                os.fchmod(fd, safefs.FILE_MODE)  # an older copy others could open
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            if self._inode(PRIVATE) != _inode(os.fstat(fd)):  # removed by a refused opener
                raise OSError("config/mqfs.lock is no longer the file locked")
        except OSError:
            pids = _holders(fd, "FLOCK")
            os.close(fd)
            raise self._in_use(pids[0] if pids else None) from None
        self.private_fd = fd

    def _open_private(self, path: str) -> int:
        """config/mqfs.lock opened for a writer, made (with config/) when missing; what was
        made is noted, for a refusal to remove."""
        config = os.path.dirname(PRIVATE)
        if self._inode(config) is None:
            safefs.makedirs(os.path.dirname(path))
            self._note_made(config)
        try:
            fd = safefs.open_file(path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return safefs.open_file(path, os.O_RDWR)
        self._made.append((PRIVATE, _inode(os.fstat(fd))))
        return fd

    def _inode(self, rel: str) -> tuple[int, int] | None:
        """The inode `rel` names in the directory locked (no link followed at its end)."""
        try:
            return _inode(os.stat(rel, dir_fd=self.dir_fd, follow_symlinks=False))
        except OSError:
            return None

    def _note_made(self, rel: str) -> None:
        found = self._inode(rel)
        if found is not None:
            self._made.append((rel, found))

    def _remove_made(self) -> None:
        """Remove what this refused open made, newest first, through the locked directory's
        fd, each only while its name still stands for the inode made, and only while this
        open holds the flock on mqfs.lock (else another opener may hold the file it made)."""
        made, self._made = self._made, []
        if self.private_fd < 0:
            return
        for rel, inode in reversed(made):
            parent, name = os.path.split(rel)
            dfd = self.dir_fd
            try:
                if parent:
                    dfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW |
                                  os.O_CLOEXEC, dir_fd=self.dir_fd)
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if _inode(st) == inode:
                    if stat.S_ISDIR(st.st_mode):
                        os.rmdir(name, dir_fd=dfd)
                    else:
                        os.unlink(name, dir_fd=dfd)
            except OSError as exc:  # left behind, as before: the refusal stands
                log.warning("store %s: could not remove %s after the refusal: %s",
                            self.key, rel, exc)
            finally:
                if dfd != self.dir_fd:
                    os.close(dfd)

    def _lock_file(self, shared: bool) -> None:
        try:
            fd = safefs.open_file(self.path, os.O_RDONLY if shared else os.O_RDWR | os.O_CREAT)
        except FileNotFoundError:
            if shared:
                return  # nothing to create for a reader: the directory lock keeps writers out
            raise
        try:
            fcntl.lockf(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB, 1, 0)
        except OSError:
            try:
                self._held_by_others(fd, "POSIX")
            except StoreLocked:
                pid = _record_holder(fd)
                os.close(fd)
                raise self._in_use(pid) from None
            except BaseException:
                os.close(fd)
                raise
        if not shared and os.pread(fd, 4, 0) != b"lock":  # RocketMQ's marker
            os.pwrite(fd, b"lock", 0)
        self.fd = fd

    def replaced(self) -> bool:
        """Whether the store's path now names another directory than the one locked (moved
        away, a copy put in its place): what is written by path would land in the new one."""
        if self.dir_fd < 0:
            return False
        try:
            now = os.lstat(self.root)
        except FileNotFoundError:
            return True
        held = os.fstat(self.dir_fd)
        return (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino)

    def hold_replacement(self) -> None:
        """flock what now stands at the path, so no second writer starts on it while this
        process still has the old store's files open (best effort: it may be gone or taken)."""
        try:
            fd = safefs.open_dir(self.root, write=False)
        except (OSError, StoreError):
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return
        self.replacement_fd = fd

    def refused(self) -> None:
        """Release after an open refused (before its first change): what acquire made goes
        too (`config/mqfs.lock`, and `config/` when it made it), so the refusal leaves the
        store as it found it."""
        self._remove_made()
        self.release()

    def release(self) -> None:
        self._made = []
        for name in ("fd", "private_fd", "dir_fd", "replacement_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)  # closing drops the POSIX lock and the flock
                setattr(self, name, -1)
        if self.held:
            self.held = False
            _HELD_HERE.discard(self.key)
