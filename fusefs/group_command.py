"""`mqfs group show|reset`: a consumer group's offsets in a store that is not mounted, with the
positions and refusals of the tree's `groups/<g>/<t>/all` (kinds/groups.py `position`): one
position moves every queue or none, and past a queue's end is refused (ERANGE there, exit
status 3 here), so a script tells it from a typo (status 2)."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when run: `mqfs dump`'s start, which builds this parser, stays lean
    from mqfs.store import MessageStore

USAGE, PAST_END = 2, 3  # exit statuses besides 0 and 1 (any other error)

EPILOG = """\
positions (--to):
  earliest         each queue's first message
  latest           one past each queue's last message: only new messages
  N                offset N (refused, status 3, where a queue ends before it)
  TIME             the first message stored at or after TIME on each queue (latest where none
                   is yet): -10m, -1h, -2d, today, yesterday, 09:00, 2026-11-22T10:00Z, or
                   @EPOCH_MS (a bare number is an offset)

exit status: 0 moved (or shown), 2 a position or name that is not one, 3 a position past a
queue's end (no queue moved), 1 any other error (the store mounted or in use, for one).
A mounted store is reset through its tree: echo POSITION > MNT/groups/GROUP/TOPIC/all.
"""


def add_parser(sub) -> None:
    g = sub.add_parser("group", help="show or reset a consumer group's offsets in a store that "
                                     "is not mounted (a broker's too)",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = g.add_subparsers(dest="action", required=True, parser_class=type(g))
    show = actions.add_parser("show", help="each queue's committed offset and lag: GROUP TOPIC "
                                           "QUEUE OFFSET LAG per line (changes nothing)")
    show.add_argument("store", help="the store directory, where it is mounted, or a path in it")
    show.add_argument("group", nargs="?", help="only this group")
    show.add_argument("topic", nargs="?", help="only this topic (every queue, committed or not)")
    reset = actions.add_parser("reset", help="move a group's offsets on a topic in one write",
                               epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    reset.add_argument("store", help="the store directory (not mounted)")
    reset.add_argument("group")
    reset.add_argument("topic")
    reset.add_argument("--to", required=True, metavar="POSITION",
                       help="earliest, latest, an offset, or a time (-10m, today, ISO-8601)")
    reset.add_argument("-q", "--queue", type=int, action="append", metavar="Q",
                       help="only queue Q (repeatable; default: every queue of the topic)")
    reset.add_argument("-n", "--dry-run", action="store_true",
                       help="print the moves and write nothing (takes no lock)")


def glued(argv: list[str]) -> list[str]:
    """`--to -10m` as `--to=-10m`: argparse would take `-10m` for an option (dump's `glued`)."""
    out: list[str] = []
    words = iter(argv)
    for word in words:
        value = next(words, None) if word == "--to" else None
        out.append(word if value is None else f"--to={value}")
    return out


def cmd_group(a: argparse.Namespace, mount_of: Callable[[str], tuple[str, bool] | None]) -> int:
    """`mount_of`: cli's (the mount a store is on, and whether it is read-only), passed in as
    cli imports this module."""
    from mqfs.store import MessageStore, StoreConfig
    from mqfs.store.errors import StoreFormatError
    from mqfs.store.group_offsets import OfflineOffsets
    from mqfs.store.offline.located import store_root

    from .errors import FsError

    try:
        root = os.path.abspath(store_root(a.store))
    except StoreFormatError:
        root = os.path.abspath(a.store)  # the open says what is wrong with it
    if a.action == "show":
        try:
            with MessageStore(root, StoreConfig(read_only=True), create=False) as s:
                lines, past = _shown(s, a.group, a.topic)
        except FsError as exc:
            print(f"mqfs: {exc}", file=sys.stderr)
            return USAGE
        print("\n".join(lines), end="\n" if lines else "")
        for text in past:
            print(f"mqfs: {text}", file=sys.stderr)
        return 0
    try:
        if a.dry_run:  # changes nothing: no lock, as info and dump
            with MessageStore(root, StoreConfig(read_only=True), create=False) as s:
                moves = _moves(s, a)
        else:
            _refuse_mounted(root, mount_of(root), a)
            with OfflineOffsets(root) as held:
                moves = _moves(held.store, a)
                held.commit(a.group, a.topic, {q: new for q, _, new in moves})
    except FsError as exc:
        print(f"mqfs: {exc}; no queue moved", file=sys.stderr)
        return PAST_END if exc.errno == errno.ERANGE else USAGE
    for q, old, new in moves:
        print(f"{a.topic}/{q}: {'none' if old is None else old} -> {new}")
    if a.dry_run:
        print("dry run: nothing written")
    return 0


def _text(to: str) -> str:
    """--to as the tree's position text: a bare time gets its `@`."""
    if to in ("earliest", "latest") or to.startswith("@") or (to.isascii() and to.isdigit()):
        return to
    return "@" + to


def _moves(s: MessageStore, a: argparse.Namespace) -> list[tuple[int, int | None, int]]:
    """(queue, committed offset or None, new offset) for each queue moved; FsError (no
    queue moved) when a position is refused on one."""
    from mqfs.store import StoreError
    from mqfs.store.meta.metadata import validate_group

    from .errors import FsError, errno_for
    from .kinds.groups import one_instant, position

    try:
        validate_group(a.group)
    except StoreError as exc:
        raise FsError(errno_for(exc) or errno.EINVAL, str(exc)) from None
    queues = s.queue_ids(a.topic)
    if not queues:
        raise FsError(errno.ENOENT, f"no topic {a.topic!r} in {s.root}")
    wanted = queues if a.queue is None else sorted(set(a.queue))
    missing = [q for q in wanted if q not in queues]
    if missing:
        raise FsError(errno.ENOENT, f"{a.topic} has no queue {missing[0]} (queues: "
                                    f"{' '.join(map(str, queues))})")
    text = one_instant(_text(a.to))
    return [(q, s.committed_offset(a.group, a.topic, q), position(s, a.topic, q, text))
            for q in wanted]


def _refuse_mounted(root: str, mount: tuple[str, bool] | None, a: argparse.Namespace) -> None:
    """A mounted store's daemon holds its offsets: the reset is one write in its tree, or,
    the mount being read-only (which takes no writes: a DLedger store's, `-o ro`), after
    `mqfs umount`."""
    from mqfs.store import StoreError

    if mount is None:
        return
    mnt, read_only = mount
    if read_only:
        raise StoreError(f"{root} is mounted read-only on {mnt}, whose groups/ takes no "
                         f"write: `mqfs umount {mnt}` first; nothing was changed")
    target = "all" if a.queue is None or len(a.queue) > 1 else str(a.queue[0])
    raise StoreError(f"{root} is mounted on {mnt}: reset through the mount, `echo "
                     f"{_text(a.to)} > {mnt}/groups/{a.group}/{a.topic}/{target}`, or "
                     f"`mqfs umount {mnt}` first; nothing was changed")


def _shown(s: MessageStore, group: str | None, topic: str | None) -> tuple[list[str], list[str]]:
    """GROUP TOPIC QUEUE OFFSET LAG lines: committed queues, or every queue of a named
    group's topic (an uncommitted one at its first offset, where a new consumer starts);
    and a warning for each offset committed past its queue's end (its lag reads 0: the
    offsets between were lost in a crash, which `mqfs verify` reports as a finding)."""
    from .errors import FsError

    rows: list[tuple[str, str, int, int]] = []
    if group is not None and topic is not None:
        if not s.queue_ids(topic):
            raise FsError(errno.ENOENT, f"no topic {topic!r} in {s.root}")
        for q in s.queue_ids(topic):
            done = s.committed_offset(group, topic, q)
            rows.append((group, topic, q, s.min_offset(topic, q) if done is None else done))
    else:
        for g, per_topic in sorted(s.groups().items()):
            if group is None or g == group:
                rows += [(g, t, q, o) for t, queues in sorted(per_topic.items())
                         for q, o in sorted(queues.items())]
    out, past = [], []
    for g, t, q, o in rows:
        known = q in s.queue_ids(t)
        lag = max(0, s.max_offset(t, q) - max(o, s.min_offset(t, q))) if known else 0
        out.append(f"{g} {t} {q} {o} {lag}")
        if known and o > s.max_offset(t, q):
            past.append(f"group {g} committed offset {o} on {t}/{q}, past the queue's end "
                        f"{s.max_offset(t, q)}: offsets lost in a crash (`mqfs verify` says more)")
    return out, past
