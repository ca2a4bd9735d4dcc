"""Scratch files for message bodies that are still being written (the filesystem's `tmp/`
and large `append` bodies), kept in `<store>/staging/` so they live on the store's disk
rather than in a process's memory.

Nothing here is part of the store's data: each file is unlinked as soon as it is created
(a crashed writer leaves no name behind) and `Staging(root)` empties the directory of
anything an earlier process left (a crash between create and unlink).
"""

from __future__ import annotations

import os
import tempfile

STAGING_DIR = "staging"


class Staging:
    """The staging directory of one store; owned by the process that holds the store lock."""

    def __init__(self, root: str) -> None:
        self.dir = os.path.join(root, STAGING_DIR)
        os.makedirs(self.dir, exist_ok=True)
        for name in os.listdir(self.dir):  # leftovers of a process that died mid-create
            os.unlink(os.path.join(self.dir, name))

    def create(self) -> StagedFile:
        fd, path = tempfile.mkstemp(dir=self.dir, prefix="body-")
        os.unlink(path)
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
