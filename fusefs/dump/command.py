"""`mqfs dump STORE`: the command line, and where its messages come from for a selection."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator

from mqfs.store import StoredMessage
from mqfs.store.errors import StoreError, StoreFormatError
from mqfs.store.offline.views import StoreLayout, store_layout

from ..timenames import FORMS, when
from . import source
from .envelope import FORMATS, Writer
from .scan import messages
from .selection import Selection

EPILOG = """\
exit status: 0 when a message was selected, 1 when none was, 2 on an error (a store that
cannot be read, a bad argument) or when a damaged record was skipped (each one named on
stderr). Times: """ + FORMS + "."


def add_parser(sub) -> None:
    d = sub.add_parser("dump", help="print a store's messages as JSON lines, CSV or raw "
                                    "bodies (reads the files: mounted or not, a broker's, "
                                    "a live one; changes nothing)",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("store", help="the store directory, or where it is mounted")
    d.add_argument("-t", "--topic", action="append", default=[], metavar="TOPIC",
                   help="only this topic (repeat for several)")
    d.add_argument("-q", "--queue", action="append", default=[], type=int, metavar="N",
                   help="only this queue id (repeat for several)")
    d.add_argument("--from-offset", type=int, metavar="N", help="first queue offset")
    d.add_argument("--to-offset", type=int, metavar="N", help="last queue offset (inclusive)")
    d.add_argument("--since", metavar="TIME", help="stored at or after TIME (-1h, today, "
                                                   "2026-11-22T10:00Z, epoch ms, ...)")
    d.add_argument("--until", metavar="TIME", help="stored at or before TIME")
    d.add_argument("-k", "--key", action="append", default=[], metavar="KEY",
                   help="holding this key (KEYS or UNIQ_KEY; found with the IndexFiles)")
    d.add_argument("--tag", action="append", default=[], metavar="TAG",
                   help="with this tag (repeat: any of them)")
    d.add_argument("-p", "--property", action="append", default=[], metavar="NAME[=VALUE]",
                   help="with this property (and value); repeat: all of them")
    d.add_argument("-e", "--regex", metavar="PATTERN",
                   help="whose body matches PATTERN (Python regex over the bytes)")
    d.add_argument("-i", "--ignore-case", action="store_true", help="-e ignores case")
    d.add_argument("-f", "--format", choices=FORMATS, default="json",
                   help="json (default: one object per line), csv (with a header), raw "
                        "(bodies, each ending in a newline), replay (lines append.jsonl "
                        "publishes again: body, keys, tags, user properties, "
                        "ORIGIN_MESSAGE_ID), offsets (TOPIC QUEUE OFFSET STORE_MS per line)")
    d.add_argument("-n", "--max", type=int, metavar="N", help="stop after N messages")
    d.add_argument("-c", "--count", action="store_true",
                   help="print only how many messages are selected")


VALUED = ("--since", "--until", "-e", "--regex")  # values that may start with "-" (-1h)


def glued(argv: list[str]) -> list[str]:
    """`--since -1h` as `--since=-1h`: argparse would take `-1h` for an option, where getopt
    (grep -e, journalctl --since) takes the next word as the value, as users expect."""
    out: list[str] = []
    words = iter(argv)
    for word in words:
        if word in VALUED:
            value = next(words, None)
            out.append(word if value is None else f"{word}={value}" if word.startswith("--")
                       else word + value)
        else:
            out.append(word)
    return out


def selection(a: argparse.Namespace) -> Selection:
    """The Selection the arguments spell; ValueError for one that is wrong."""
    props: list[tuple[str, str | None]] = []
    for text in a.property:
        name, eq, value = text.partition("=")
        if not name:
            raise ValueError(f"--property {text!r}: no name")
        props.append((name, value if eq else None))
    body = None
    if a.regex is not None:
        try:
            body = re.compile(a.regex.encode(), re.IGNORECASE if a.ignore_case else 0)
        except re.error as exc:
            raise ValueError(f"--regex {a.regex!r}: {exc}") from None
    try:
        since = None if a.since is None else when(a.since)
        until = None if a.until is None else when(a.until)
    except ValueError as exc:
        raise ValueError(f"--since/--until: {exc}") from None
    return Selection(a.topic, a.queue, a.from_offset, a.to_offset, since, until, a.key,
                     a.tag, props, body)


def layout_of(path: str) -> StoreLayout:
    """The store at path, or the store mounted there (its root names it in an xattr)."""
    try:
        return store_layout(path)
    except StoreFormatError:
        try:
            root = os.getxattr(path, "user.mqfs.store", follow_symlinks=False)
        except OSError:
            raise StoreFormatError(f"{path} is not a store or an mqfs mount") from None
        _written_out(path)
        return store_layout(os.fsdecode(root))


def _written_out(mount: str) -> None:
    """Ask the daemon to write out what it holds in memory (an fsync of the mount's root is
    its flush), so the files show every message put through the mount before this command ran:
    a new queue's units stay in the daemon's memory until a flush. A read-only mount has
    nothing of its own to write (its refusal is no error here)."""
    fd = os.open(mount, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def selected(layout: StoreLayout, sel: Selection, damage: source.Damage
             ) -> Iterator[StoredMessage]:
    """The messages a selection picks, reading as little as it lets: keys through the
    IndexFiles, queues, offsets, times and tags through the ConsumeQueues, else the whole
    CommitLog in store order."""
    log = source.CommitLog(layout)
    flavor = layout.checked_flavor
    if sel.keys:
        runs = log.runs_at(source.key_offsets(layout, sel), damage)
    elif sel.by_queue:
        runs = (run for offsets in source.queue_offsets(layout, sel, flavor.tags_code)
                for run in log.runs_at(offsets, damage))
    else:
        runs = log.walk(damage)

        def in_flight_or(offset: int, what: str) -> None:  # past what a unit vouched for
            if offset <= log.vouched():  # when the walk began, a record that fails its
                damage(offset, what)  # checks may be one a live writer is still copying

        return messages(runs, sel, flavor, in_flight_or)
    return messages(runs, sel, flavor, damage)


def cmd_dump(a: argparse.Namespace) -> int:
    """grep's exit statuses: 0 selected, 1 none, 2 trouble."""
    skipped = 0

    def damage(offset: int, what: str) -> None:
        nonlocal skipped
        skipped += 1
        print(f"mqfs: dump: skipped the record at CommitLog offset {offset}: {what}",
              file=sys.stderr)

    try:
        sel = selection(a)
        layout = layout_of(a.store)
        out = sys.stdout.buffer
        writer = None if a.count else Writer(out, a.format)
        n = 0
        for msg in selected(layout, sel, damage):
            if a.max is not None and n >= a.max:
                break
            n += 1
            if writer is not None:
                writer.write(msg)
        if a.count:
            out.write(b"%d\n" % n)
    except BrokenPipeError:
        raise
    except (StoreError, OSError, ValueError) as exc:
        print(f"mqfs: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return 2 if skipped else (0 if n else 1)
