"""<store>/quarantine/: where the store puts bytes it takes out of service instead of deleting
them (a torn tail cut by recovery, damaged ranges repair replaced, ConsumeQueue and IndexFile
files rebuilt from the CommitLog). Nothing reads them back; they are evidence for a person, who
deletes them when satisfied."""

from __future__ import annotations

import os
import time

from .mapped_file import fsync_dir

DIRECTORY = "quarantine"


def _target(root: str, name: str) -> str:
    directory = os.path.join(root, DIRECTORY)
    os.makedirs(directory, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    path = os.path.join(directory, f"{stamp}-{name}")
    n = 1
    while os.path.exists(path):
        n += 1
        path = os.path.join(directory, f"{stamp}-{name}.{n}")
    return path


def save_bytes(root: str, name: str, data: bytes | memoryview) -> str:
    """Write a copy of `data` under quarantine/ (durably) and return its path."""
    path = _target(root, name)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(os.path.dirname(path))
    return path


def move_file(root: str, path: str, name: str) -> str:
    """Move a store file into quarantine/ (same filesystem: a rename) and return its path."""
    target = _target(root, name)
    os.rename(path, target)
    fsync_dir(os.path.dirname(target))
    fsync_dir(os.path.dirname(path))
    return target
