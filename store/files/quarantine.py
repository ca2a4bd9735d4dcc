"""<store>/quarantine/: where the store puts bytes it takes out of service instead of deleting
them (a torn tail cut by recovery, damaged ranges repair replaced, ConsumeQueue and IndexFile
files rebuilt from the CommitLog). Nothing reads them back; they are evidence for a person, who
deletes them when satisfied. Copies are private to the store's owner (0600 in a 0700
directory): they hold message bodies."""

from __future__ import annotations

import errno
import os
import time

from . import safefs

DIRECTORY = "quarantine"


def _target(root: str, name: str) -> str:
    directory = os.path.join(root, DIRECTORY)
    safefs.makedirs(directory)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    path = os.path.join(directory, f"{stamp}-{name}")
    n = 1
    while os.path.lexists(path):
        n += 1
        path = os.path.join(directory, f"{stamp}-{name}.{n}")
    return path


def save_bytes(root: str, name: str, data: bytes | memoryview) -> str:
    """Write a copy of `data` under quarantine/ (durably) and return its path."""
    path = _target(root, name)
    fd = safefs.open_file(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        view = memoryview(data).cast("B")
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    safefs.fsync_dir(os.path.dirname(path))
    return path


def copy_file(root: str, path: str, name: str) -> str:
    """A copy of a store file in quarantine/ (synced), which stays in service until the
    caller replaces it; its path. A copy, not a second name: a store file with two names
    is one safefs refuses to write (a hard link planted to a file outside the store looks
    the same). Holes stay holes: only the data regions are copied."""
    target = _target(root, name)
    src = safefs.open_file(path)
    try:
        dst = safefs.open_file(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            end = os.fstat(src).st_size
            pos = 0
            while pos < end:
                try:
                    pos = os.lseek(src, pos, os.SEEK_DATA)
                    stop = os.lseek(src, pos, os.SEEK_HOLE)
                except OSError as exc:
                    if exc.errno == errno.ENXIO:  # only holes from here
                        break
                    stop = end  # no SEEK_DATA here: copy the rest whole
                while pos < stop:
                    chunk = os.pread(src, min(stop - pos, 1 << 20), pos)
                    if not chunk:
                        break
                    os.pwrite(dst, chunk, pos)
                    pos += len(chunk)
            os.ftruncate(dst, end)
            os.fsync(dst)
        finally:
            os.close(dst)
    finally:
        os.close(src)
    safefs.fsync_dir(os.path.dirname(target))
    return target


def scratch_dir(root: str, name: str) -> str:
    """A new, empty directory under quarantine/ to build files in before they go into
    service by rename (same filesystem); what a crash leaves there is never read back."""
    path = _target(root, name)
    safefs.makedirs(path)
    return path


def move_file(root: str, path: str, name: str) -> str:
    """Move a store file into quarantine/ (same filesystem: a rename) and return its path."""
    target = _target(root, name)
    safefs.rename(path, target)
    safefs.make_private(target)  # a file of an older store may be 0644
    safefs.fsync_dir(os.path.dirname(target))
    safefs.fsync_dir(os.path.dirname(path))
    return target
