"""What an open file or directory handle holds, and the table that numbers them."""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from typing import Any

import trio

from .errors import FsError
from .following import FollowFile
from .staged import Staged
from .writers import AppendWriter, JsonlWriter, OffsetWriter


@dataclass
class MessageHandle:
    body: bytes


@dataclass
class WriteHandle:
    """An open `append` or `append.jsonl`; writer is None when opened read-only. `lane`
    keeps the writes and commits of one handle in order while they wait for threads."""

    ino: int
    writer: AppendWriter | JsonlWriter | None
    lane: trio.Lock = field(default_factory=trio.Lock)


@dataclass
class OffsetHandle:
    ino: int
    text: bytes
    writer: OffsetWriter | None = None


@dataclass
class StagedHandle:
    entry: Staged


@dataclass
class TextHandle:
    """Generated text fixed at open (status.json)."""

    text: bytes


@dataclass
class FollowHandle:
    """`follow`: the queue's follow file (fixed while open) and who holds it."""

    ino: int
    file: FollowFile
    opener: int  # pid of the process that opened it: its signals end a waiting read
    uid: int  # whose slot it holds
    closed: bool = False


@dataclass
class Handles:
    table: dict[int, Any] = field(default_factory=dict)
    next: int = 1

    def add(self, obj: Any) -> int:
        fh = self.next
        self.next += 1
        self.table[fh] = obj
        return fh

    def get(self, fh: int) -> Any:
        try:
            return self.table[fh]
        except KeyError:
            raise FsError(errno.EBADF) from None
