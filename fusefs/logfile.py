"""The daemon's log file, rotated at a size and private to its owner (0600: it names topics,
keys and paths).

STORE/logs/mqfs.log lies inside a directory another user may own, so it is opened, rotated
and replaced only through store.files.safefs: a link planted as the log, as an old log or as
`logs/` makes the open fail instead of letting the daemon append to (or rename over) a
file outside the store. A file the administrator names with --log is theirs: it is opened
as given.
"""

from __future__ import annotations

import logging.handlers
import os

from mqfs.store.files import safefs

_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT


class PrivateLog(logging.handlers.RotatingFileHandler):
    """A RotatingFileHandler whose files are created 0600 and, with `in_store`, reached and
    rotated without following a link."""

    def __init__(self, path: str, max_bytes: int, keep: int, *, in_store: bool) -> None:
        self.in_store = in_store
        super().__init__(path, maxBytes=max_bytes, backupCount=keep, encoding="utf-8")

    def _open(self):
        if self.in_store:
            fd = safefs.open_file(self.baseFilename, _APPEND)
        else:
            fd = os.open(self.baseFilename, _APPEND | os.O_CLOEXEC, safefs.FILE_MODE)
        return os.fdopen(fd, "a", encoding="utf-8")

    def doRollover(self) -> None:
        """mqfs.log.N-1 -> .N ... mqfs.log -> .1: each rename replaces the older file."""
        if self.stream:
            self.stream.close()
            self.stream = None  # type: ignore[assignment]
        rename = safefs.rename if self.in_store else os.rename
        for i in range(self.backupCount - 1, 0, -1):
            source = f"{self.baseFilename}.{i}"
            if os.path.lexists(source):
                rename(source, f"{self.baseFilename}.{i + 1}")
        if self.backupCount > 0:
            rename(self.baseFilename, f"{self.baseFilename}.1")
        self.stream = self._open()


class PendingLog(logging.handlers.MemoryHandler):
    """A read-write mount's records until its open succeeded or was refused (see
    mount.settle_log): a store with no log yet gets STORE/logs/ only from an open that
    succeeded, so a refused one (a broker's store its broker holds) gains no file."""

    def __init__(self) -> None:
        super().__init__(capacity=1 << 16, flushLevel=logging.CRITICAL + 1)


def check_writable(path: str) -> None:
    """Refuse a --log FILE that cannot be written, with one line, before the daemon forks."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise OSError(f"--log {path}: directory {directory} does not exist")
    os.close(os.open(path, _APPEND | os.O_CLOEXEC, safefs.FILE_MODE))
