"""A store's files as an offline reader finds them, without numpy: its layout (mqfs.json, or
a broker's store), its CommitLog files, its queues, read-only mappings. `views` publishes
these with its array readers; a reader of a few records (`mqfs dump -k`) imports this alone
and starts without numpy. The store directory is untrusted input: every file is opened and
every directory listed through safefs, so a link planted in it is refused, never read
through."""

from __future__ import annotations

import mmap
import os

from ..errors import StoreFormatError, UntrustedStore
from ..files import safefs
from ..format.flavor import Flavor, flavor_named
from ..meta.features import dledger_data
from ..meta.manifest import is_store, read_manifest
from ..slotted import Frozen

TYPE_CHECKING = False  # mypy alone reads these: importing typing is ~6% of a tag selection
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import TypeVar

    F = TypeVar("F")


class StoreLayout(Frozen):
    """What a reader needs to know about a store: where it is, its flavor and file sizes."""

    __slots__ = __match_args__ = ("root", "flavor", "commitlog_file_size", "consume_queue_units",
                                  "index_slots", "index_entries", "record_crc", "dledger")
    root: str
    flavor: str
    commitlog_file_size: int
    consume_queue_units: int
    index_slots: int
    index_entries: int
    record_crc: bool  # every record carries the whole-record checksum
    dledger: bool  # the CommitLog is a broker's DLedger entry log (`commitlog_files`), read only

    def __init__(self, root: str, flavor: str, commitlog_file_size: int, consume_queue_units: int,
                 index_slots: int, index_entries: int, record_crc: bool = False,
                 dledger: bool = False) -> None:
        self._set(root=root, flavor=flavor, commitlog_file_size=commitlog_file_size,
                  consume_queue_units=consume_queue_units, index_slots=index_slots,
                  index_entries=index_entries, record_crc=record_crc, dledger=dledger)

    @property
    def checked_flavor(self) -> Flavor:
        """The flavor reads check records with (a trailer required where the store has one)."""
        return flavor_named(self.flavor, self.record_crc)


def store_layout(root: str, dledger: bool = False) -> StoreLayout:
    """mqfs.json when present; a directory without it is a RocketMQ broker's store. The root
    is resolved first (a link to the store is the administrator's); a link inside it is
    refused (UntrustedStore) before any file is read. `dledger`: the reader walks a DLedger
    CommitLog's entries (`StoreLayout.dledger`); others refuse one (UnsupportedFeature)."""
    root = os.path.realpath(root)
    if not is_store(root):
        raise StoreFormatError(f"{root} is not a store (no mqfs.json and no commitlog/)")
    safefs.refuse_links(root)
    cfg = read_manifest(root, dledger=dledger)
    return StoreLayout(root, cfg.flavor, cfg.commitlog_file_size, cfg.consume_queue_units,
                       cfg.index_slots, cfg.index_entries, cfg.record_crc,
                       dledger and dledger_data(root) is not None)


def numbered_files(directory: str, name_len: int = 20) -> list[tuple[int, str]]:
    """(number, path) of the non-empty files named by `name_len` digits, in order; a link
    among them, or on the way to the directory, is refused (UntrustedStore)."""
    try:
        fd = safefs.open_dir(directory, write=False)
    except FileNotFoundError:
        return []
    found = []
    try:
        for entry in os.scandir(fd):
            name = entry.name
            if len(name) == name_len and name.isdigit():
                if entry.is_symlink():
                    raise UntrustedStore(f"{directory}/{name} is a symbolic link: mqfs "
                                                "never follows links inside a store")
                if entry.stat(follow_symlinks=False).st_size > 0:
                    found.append((int(name), os.path.join(directory, name)))
    finally:
        os.close(fd)
    return sorted(found)


def commitlog_files(root: str) -> list[tuple[int, str]]:
    """The CommitLog's files: commitlog/'s, or a DLedger CommitLog's entry files (a store with
    no commitlog/: only a reader that walks entries gets a layout of one, `store_layout`)."""
    directory = os.path.join(root, "commitlog")
    if not os.path.lexists(directory):
        directory = dledger_data(root) or directory
    return numbered_files(directory)


def newest_begun(files: Sequence[F], head: Callable[[F], bytes]) -> F | None:
    """The CommitLog file the log ends in, of `files` (oldest first; `head(f)`: f's first 8
    bytes): the newest a record was begun in. A broker makes its next file ahead, all zeros
    (a killed one leaves it), and the log then ends in the file before it. The oldest file
    when none is begun, None for none. The one rule: every reader that asks where the log
    ends by its files asks it (only the newest files' first bytes are read)."""
    for f in reversed(files[1:]):
        if any(head(f)):
            return f
    return files[0] if files else None


def newest_begun_file(root: str) -> tuple[int, str] | None:
    """`newest_begun` of the store's CommitLog files: (start offset, path)."""
    return newest_begun(commitlog_files(root), lambda f: _head(f[1]))


def _head(path: str) -> bytes:
    """A file's first 8 bytes; none for one gone since it was listed (a restarting broker
    deletes its made-ahead file: no record was begun in it)."""
    try:
        fd = safefs.open_file(path)
    except FileNotFoundError:
        return b""
    try:
        return os.pread(fd, 8, 0)
    finally:
        os.close(fd)


def map_readonly(path: str) -> mmap.mmap:
    """A read-only shared mapping: sees a live writer's appends, cannot change the file (a
    link at or on the way to `path` is refused, never followed)."""
    fd = safefs.open_file(path)
    try:
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


def queues(root: str) -> list[tuple[str, int]]:
    """Every (topic, queue id) that has a ConsumeQueue directory; a link among them is
    refused (UntrustedStore)."""
    base = os.path.join(root, "consumequeue")
    found: list[tuple[str, int]] = []
    try:
        topics = sorted(safefs.subdirs(base))
    except (FileNotFoundError, NotADirectoryError):
        return found
    for topic in topics:
        names = safefs.subdirs(os.path.join(base, topic))
        found.extend((topic, int(q)) for q in sorted(names, key=lambda s: (len(s), s)) if q.isdigit())
    return found


def index_files(root: str) -> list[str]:
    return [p for _, p in numbered_files(os.path.join(root, "index"), 17)]
