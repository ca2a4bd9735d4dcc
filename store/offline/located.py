"""The store a path on the command line names: a store directory, the mount point of one, or
any path inside a mount (one resolver for `mqfs dump`, `mqfs info` and `mqfs pipeline`)."""

from __future__ import annotations

import os

from ..errors import StoreFormatError
from ..files import safefs
from ..meta.manifest import is_store
from .store_files import StoreLayout, store_layout

STORE_XATTR = "user.mqfs.store"  # a mount's root names its store's directory in it


def store_root(path: str) -> str:
    """The directory of the store at `path`, or behind the mount `path` is in. A mount is
    asked to write out what it holds in memory first (see `_written_out`), so the files show
    every message put through it before the caller ran. StoreFormatError (one line) when the
    path is neither."""
    if is_store(path):
        return path
    mount = _mount_of(path)
    if mount is None:
        raise StoreFormatError(f"{path} is not a store or in an mqfs mount")
    root = os.fsdecode(os.getxattr(mount, STORE_XATTR, follow_symlinks=False))
    _written_out(mount)
    return root


def layout_at(path: str, dledger: bool = False) -> StoreLayout:
    """`store_layout` of the store `path` names (store_root)."""
    return store_layout(store_root(path), dledger)


def _mount_of(path: str) -> str | None:
    """The mqfs mount point `path` is at or inside: the nearest mount point on the way up,
    if its root carries the store's xattr (no other filesystem's is looked past)."""
    at = os.path.realpath(path)
    if not os.path.exists(at):
        return None
    while not os.path.ismount(at):
        at = os.path.dirname(at)
    try:
        os.getxattr(at, STORE_XATTR, follow_symlinks=False)
    except OSError:
        return None
    return at


def _written_out(mount: str) -> None:
    """Ask the daemon to write out what it holds in memory (an fsync of the mount's root is
    its flush): a new queue's units stay in the daemon's memory until a flush. A read-only
    mount has nothing of its own to write (its refusal is no error here)."""
    fd = safefs.open_dir(mount, write=False)  # a real path: _mount_of resolved it
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
