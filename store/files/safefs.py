"""The one way to reach a file inside a store: the store directory is untrusted input.

The daemon may run as root over a directory another user owns, and that user can plant a
symlink or swap a directory at any moment. So every path is walked one component at a time
from `/`, each directory opened with O_NOFOLLOW relative to the one before (openat), and the
file itself opened with O_NOFOLLOW relative to its directory: a symlink anywhere on the way
is refused, never followed, and there is no window between checking and opening. A store is
opened by its resolved path (`os.path.realpath`, the administrator's own symlinks), so a
link found later was put there by someone else.

Everything written to (a file opened for writing, a directory whose entries change) and a
store as it is opened (`check_store`) is checked the way sshd's StrictModes checks a home
directory: owned by the daemon's user (or root, or a user the administrator trusts with
`trust_owner`) and not writable by group or others. Reading alone is not: the pipeline may
read a store another user writes. Files and directories mqfs creates are private to their
owner (0600 and 0700), whatever the process umask.
"""

from __future__ import annotations

import ctypes
import errno
import os
import pwd
import stat
import struct
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import UntrustedStore

FILE_MODE = 0o600
DIR_MODE = 0o700
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_trusted: set[int] = set()  # owners besides this process's user and root


def trust_owner(uid: int) -> None:
    """Accept stores (and files in them) owned by `uid` too: a root daemon serving the store of
    a service user. Links are still never followed inside such a store."""
    _trusted.add(uid)


def trusted() -> frozenset[int]:
    """The owners `trust_owner` added."""
    return frozenset(_trusted)


def _give_to_owner(fd: int, parent: os.stat_result) -> None:
    """What root creates in a store it serves for a trusted user belongs to that user (as the
    directory it is in does), so the user's own tools (a broker) can still use it. Callers
    pass only what this call made (mkdir or O_EXCL succeeded): a file found there, even a
    root-owned one, is never given away."""
    if parent.st_uid in _trusted and parent.st_uid != 0 and os.geteuid() == 0 \
            and os.fstat(fd).st_uid == 0:
        os.fchown(fd, parent.st_uid, parent.st_gid)


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def check(st: os.stat_result, path: str) -> None:
    """Refuse what another user could change under the daemon (UntrustedStore, one line)."""
    me = os.geteuid()
    if st.st_uid not in (me, 0) and st.st_uid not in _trusted:
        raise UntrustedStore(
            f"{path} is owned by {_user(st.st_uid)}, not by {_user(me)} who runs mqfs: another "
            f"user's store could be turned against this process; run mqfs as {_user(st.st_uid)}, "
            f"or `chown -R {_user(me)} STORE`, or pass --trust-owner {_user(st.st_uid)}")
    if st.st_mode & 0o022:
        raise UntrustedStore(
            f"{path} is writable by group or others (mode {stat.filemode(st.st_mode)}): "
            f"anyone could change the store under mqfs; run `chmod go-w {path}`")


def _refuse_hard_link(path: str, links: int) -> UntrustedStore:
    return UntrustedStore(f"{path} has {links} names (hard links): mqfs never writes a file "
                          "another name may reach, which could be outside the store; copy it "
                          f"(`cp --preserve {path} {path}.copy && mv {path}.copy {path}`) or "
                          "remove its other names")


def refuse_link(path: str) -> UntrustedStore:
    return UntrustedStore(f"{path} is a symbolic link (or not what the store keeps there): "
                          "mqfs never follows links inside a store; replace it with the real "
                          "file or directory")


def _step(fd: int, name: str, path: str) -> int:
    try:
        return os.open(name, _DIR, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise refuse_link(path) from None
        raise OSError(exc.errno, exc.strerror, path) from None


_SYS_OPENAT2 = 437  # the same number on every Linux architecture (since 5.6)
_RESOLVE_NO_SYMLINKS = 0x04
_libc = ctypes.CDLL(None, use_errno=True)
_openat2_works = [hasattr(_libc, "syscall")]


def _openat2(path: str, flags: int = _DIR) -> int | None:
    """`path` opened in one system call that refuses any link on the way or at the end
    (openat2 with RESOLVE_NO_SYMLINKS): the kernel does the walk below. None where the
    kernel lacks openat2; UntrustedStore for a link."""
    how = ctypes.create_string_buffer(struct.pack("QQQ", flags, 0, _RESOLVE_NO_SYMLINKS), 24)
    fd = _libc.syscall(_SYS_OPENAT2, -100, os.fsencode(path), how, 24)
    if fd >= 0:
        return fd
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EPERM):  # old kernel, or a seccomp filter that denies it
        _openat2_works[0] = False
        return None
    if err in (errno.ELOOP, errno.ENOTDIR):
        raise refuse_link(path)
    raise OSError(err, os.strerror(err), path)


def _walk(path: str, create: bool = False) -> int:
    """An fd of directory `path`, reached without following any link; `create` makes the
    missing ones (0700). One openat2 call when the kernel has it, else one openat per
    component."""
    path = os.path.abspath(path)
    if not create and _openat2_works[0]:
        found = _openat2(path)
        if found is not None:
            return found
    fd = os.open("/", _DIR)
    done = ""
    try:
        for name in path.split("/"):
            if not name:
                continue
            done += "/" + name
            made = False
            if create:
                try:
                    os.mkdir(name, DIR_MODE, dir_fd=fd)
                    made = True
                except FileExistsError:
                    pass
            nxt = _step(fd, name, done)
            if made and _trusted:
                _give_to_owner(nxt, os.fstat(fd))
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_dir(path: str, create: bool = False, write: bool = True) -> int:
    """A directory fd (O_DIRECTORY, no link on the way), `check`ed when entries are to
    change (`write`); the caller closes it."""
    fd = _walk(path, create)
    if not write:
        return fd
    try:
        check(os.fstat(fd), path)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def directory(path: str, create: bool = False, write: bool = True) -> Iterator[int]:
    fd = open_dir(path, create, write)
    try:
        yield fd
    finally:
        os.close(fd)


def open_file(path: str, flags: int = os.O_RDONLY, mode: int = FILE_MODE) -> int:
    """An fd of the regular file at `path` (created `mode` with O_CREAT); a link, a FIFO or a
    device there, or a link on the way, is refused; the caller closes the fd."""
    path = os.path.abspath(path)
    # O_NONBLOCK: a FIFO planted in the store must not hang the open (a regular file, the
    # only kind accepted, ignores the flag)
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    write = bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC))
    found = None if write or not _openat2_works[0] else _openat2(path, flags)
    if found is not None:
        fd = found  # a reader needs no check of the directory: one system call
    else:
        parent, name = os.path.split(path)
        with directory(parent, write=write) as dfd:
            fd, made = _open_at(dfd, name, flags, mode, path)
            if _trusted and made:
                _give_to_owner(fd, os.fstat(dfd))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise refuse_link(path)
        if write:
            check(st, path)
            if st.st_nlink > 1:  # a hard link: the same file may have a name outside the store
                raise _refuse_hard_link(path, st.st_nlink)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_at(dfd: int, name: str, flags: int, mode: int, path: str) -> tuple[int, bool]:
    """openat of `name`, and whether this call created it: with O_CREAT it first tries
    O_EXCL, so a file found there is told apart from one made now."""
    try:
        if flags & os.O_CREAT and not flags & os.O_EXCL:
            try:
                return os.open(name, flags | os.O_EXCL, mode, dir_fd=dfd), True
            except FileExistsError:
                pass
        made = bool(flags & os.O_EXCL)
        return os.open(name, flags, mode, dir_fd=dfd), made
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise refuse_link(path) from None
        raise OSError(exc.errno, exc.strerror, path) from None


def read_bytes(path: str) -> bytes:
    fd = open_file(path)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_new(path: str, data: bytes | memoryview, *, sync: bool = True, mode: int = FILE_MODE) -> None:
    """Create (or truncate) `path` with `data`, synced: a private file, or `mode` (without
    group or other write, which `check` refuses) for one that replaces a broker's file."""
    fd = open_file(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        if mode != FILE_MODE:
            os.fchmod(fd, mode & 0o755)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def makedirs(path: str) -> None:
    """Make `path` and its missing parents (0700), refusing a link on the way."""
    os.close(_made(os.path.abspath(path)))


def _made(path: str) -> int:
    """An fd of directory `path`, made with its missing parents: one openat2 when it exists,
    else its parent's fd and a mkdirat and openat below it (a new queue's directory costs
    a few system calls, not a mkdir and an openat for every component from `/`)."""
    parent, name = os.path.split(path)
    if not _openat2_works[0] or not name:
        return _walk(path, create=True)
    try:
        found = _openat2(path)
    except FileNotFoundError:
        found = None
    if found is not None:
        return found
    if not _openat2_works[0]:
        return _walk(path, create=True)
    pfd = _made(parent)
    try:
        try:
            os.mkdir(name, DIR_MODE, dir_fd=pfd)
            made = True
        except FileExistsError:
            made = False
        fd = _step(pfd, name, path)
        if made and _trusted:
            _give_to_owner(fd, os.fstat(pfd))
        return fd
    finally:
        os.close(pfd)


def listdir(path: str) -> list[str]:
    """The names in directory `path` (FileNotFoundError when there is none)."""
    with directory(path, write=False) as fd:
        return os.listdir(fd)


def subdirs(path: str) -> list[str]:
    """The names of the directories in directory `path`, from the entries' types (no stat
    each); a link among them is refused (UntrustedStore), other entries are left out."""
    out = []
    with directory(path, write=False) as fd:
        for entry in os.scandir(fd):
            if entry.is_symlink():
                raise refuse_link(os.path.join(path, entry.name))
            if entry.is_dir(follow_symlinks=False):
                out.append(entry.name)
    return out


def is_dir(path: str) -> bool:
    """A directory at `path`; a link there is refused (UntrustedStore), not taken for one."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    if stat.S_ISLNK(mode):
        raise refuse_link(path)
    return stat.S_ISDIR(mode)


def unlink(path: str) -> None:
    """Remove the name (a link is removed, never what it points to)."""
    parent, name = os.path.split(os.path.abspath(path))
    with directory(parent) as dfd:
        os.unlink(name, dir_fd=dfd)


def rename(src: str, dst: str) -> None:
    """rename(2) of `src` to `dst`, each reached without following a link."""
    (sp, sn), (dp, dn) = os.path.split(os.path.abspath(src)), os.path.split(os.path.abspath(dst))
    with directory(sp) as sfd, directory(dp) as dfd:
        os.rename(sn, dn, src_dir_fd=sfd, dst_dir_fd=dfd)


def make_private(path: str) -> None:
    """chmod 0600 (a file) or 0700 (a directory), reached without following a link; a file
    with more than one name is left as it is (its other names may be outside the store)."""
    is_directory = is_dir(path)
    fd = open_dir(path) if is_directory else open_file(path, os.O_RDONLY)
    try:
        if is_directory or os.fstat(fd).st_nlink == 1:  # a file with other names keeps
            os.fchmod(fd, DIR_MODE if is_directory else FILE_MODE)  # its mode: theirs too
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
    with directory(path) as fd:
        os.fsync(fd)


def syncfs(path: str) -> None:
    """Sync the whole file system holding directory `path` (syncfs(2)): every file and
    directory entry written so far, in one journal commit, where an fsync of each of
    thousands of new ConsumeQueue files and directories costs a commit apiece."""
    with directory(path, write=False) as fd:
        if not hasattr(_libc, "syncfs"):
            os.sync()
        elif _libc.syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)


def size(path: str) -> int:
    """Bytes of the file at `path` itself (a link's own size, never its target's)."""
    return os.lstat(path).st_size


# the directories whose entries check_store looks at one by one: few files each (a CommitLog
# file is a GiB); consumequeue/ and quarantine/ may hold thousands and are checked as opened;
# staging/'s entries are never opened by name (store/files/staging.py), so none is checked
_LISTED = ("", "commitlog", "index", "config", "logs")


def refuse_links(root: str) -> None:
    """Refuse (UntrustedStore, one line) a store holding a symbolic link where a reader looks
    first: the directory, its entries and the files of commitlog/, index/, config/ and logs/.
    No owner check: a reader may read a store another user writes (a broker's). ConsumeQueue
    directories are checked as they are listed (`subdirs`), files as they are opened."""
    with directory(root, write=False):
        pass
    for sub in _LISTED:
        base = os.path.join(root, sub) if sub else root
        try:
            fd = open_dir(base, write=False)
        except FileNotFoundError:
            continue
        try:
            for entry in os.scandir(fd):
                if entry.is_symlink():
                    raise refuse_link(os.path.join(base, entry.name))
        finally:
            os.close(fd)


def check_store(root: str, write: bool = True) -> None:
    """Refuse, before anything is written, a store another user could turn against this
    process: the directory, its top-level entries and the files of commitlog/, index/,
    config/ and logs/ must be owned by a trusted user, not writable by group or
    others, and not links (symbolic or hard: mqfs gives no file of a store a second name).
    `write` False (an open that writes nothing in the store): a file with a second name is
    read as it is (a hard-link snapshot, `cp -al`, gives every file one); only a writer
    could change what the other name shows."""
    with directory(root):
        pass  # the store directory itself
    for sub in _LISTED:
        base = os.path.join(root, sub) if sub else root
        try:
            names = listdir(base)
        except FileNotFoundError:
            continue
        for name in names:
            path = os.path.join(base, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:  # removed since listed (a writer closing: abort, lock)
                continue
            if stat.S_ISLNK(st.st_mode):
                raise refuse_link(path)
            check(st, path)
            if write and stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                raise _refuse_hard_link(path, st.st_nlink)
