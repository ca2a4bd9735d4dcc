"""Scratch files for message bodies that are still being written (the filesystem's `tmp/`
and large `append` bodies), kept in `<store>/staging/` so they live on the store's disk
rather than in a process's memory.

Nothing here is part of the store's data: each file is anonymous (O_TMPFILE, or unlinked as
soon as it is created where the filesystem lacks O_TMPFILE), so a crashed writer leaves no
name behind, and `Staging(root)` empties the directory of anything an earlier process left.
The directory is held open by descriptor and every name in it is reached through that
descriptor: a `staging` that is (or becomes) a link is refused, so nothing outside the store
is ever created or deleted here. Entries it did not make (another name, a directory) are left
alone and never fatal: only files named `body-...` are its own.
"""

from __future__ import annotations

import errno
import os
import secrets

from . import safefs

STAGING_DIR = "staging"
_PREFIX = "body-"  # the names `create` gives where O_TMPFILE is missing
_CREATE = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Staging:
    """The staging directory of one store; owned by the process that holds the store lock."""

    def __init__(self, root: str) -> None:
        self.dir = os.path.join(root, STAGING_DIR)
        safefs.makedirs(self.dir)
        self.dir_fd = safefs.open_dir(self.dir)  # held for the life of the process's mount
        for name in os.listdir(self.dir_fd):  # leftovers of a process that died mid-create
            if name.startswith(_PREFIX):  # only names this class makes: anything else is not ours
                try:
                    os.unlink(name, dir_fd=self.dir_fd)  # a link is removed, never followed
                except (IsADirectoryError, PermissionError, FileNotFoundError):
                    pass  # a directory by that name is not one of ours either

    def create(self) -> StagedFile:
        try:
            return StagedFile(os.open(".", os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC,
                                      safefs.FILE_MODE, dir_fd=self.dir_fd))
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
        name = f"{_PREFIX}{secrets.token_hex(8)}"
        fd = os.open(name, _CREATE, safefs.FILE_MODE, dir_fd=self.dir_fd)
        os.unlink(name, dir_fd=self.dir_fd)
        return StagedFile(fd)

class StagedFile:
    """An anonymous file: positional reads and writes, truncate, close."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def pwrite(self, offset: int, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            done = os.pwrite(self.fd, view, offset)
            view, offset = view[done:], offset + done

    def pread(self, offset: int, size: int) -> bytes:
        return os.pread(self.fd, size, offset)

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
