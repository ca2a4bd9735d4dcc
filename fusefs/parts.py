"""What the kinds of node, the listings and status.json are given to work with: the store's
published API, the inode table, the clock and the pieces of the tree they share, passed in
by the Model that builds them rather than looked up through it (nothing below the Model
imports it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mqfs.store import Message, MessageStore, PutResult

from .following import Follows
from .handles import Put
from .inodes import Attr, Node, NodeTable
from .messages import Messages
from .recent import Recent
from .spool import Budget, Spool
from .staged import StagedFiles
from .times import QueueTimes


@dataclass(frozen=True, slots=True)
class Parts:
    store: MessageStore
    nodes: NodeTable
    messages: Messages  # message and link inodes
    times: QueueTimes  # mtimes that move with puts
    tmp: StagedFiles  # every tmp/ directory's files
    follows: Follows  # every queue's `follow` file and its readers
    recent: Recent  # refusals and cut key listings, for status.json
    budget: Budget  # the memory all write buffers share
    umask: int
    keys_max: int  # hits listed under one /keys/<key>
    started_ns: int  # the mount's time: the mtime of what has no other
    clock: Callable[[], int]  # now, in ns since the epoch
    # the Model's dispatch over kinds: any inode's attributes, and a table node's (which tells
    # the kernel to forget a moving time when it moves)
    getattr: Callable[[int], Attr]
    node_attr: Callable[[Node], Attr]
    body_limit: Callable[[str, int], int]  # the largest plain body a queue takes
    spool: Callable[[], Spool]  # a new write buffer (memory, then staging)
    put: Put  # store messages, moving the times
    put_now: Callable[[list[Message]], list[PutResult] | None]  # `put` on the loop, or None
