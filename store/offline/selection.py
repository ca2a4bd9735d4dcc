"""What an offline reader of a store selects (`mqfs dump`, `mqfs pipeline export`): one
definition of the options, their parsing and the checks on a decoded message, so both
commands select the same messages for the same words."""

from __future__ import annotations

import argparse
import re

from ..slotted import Slotted
from .timetext import FORMS, when

TYPE_CHECKING = False  # mypy alone reads these: importing typing is ~6% of a tag selection

if TYPE_CHECKING:
    from ..format.message import StoredMessage

# a pattern whose match depends on what surrounds it cannot be searched for over a run of
# records: it is tried on each body alone (anchors, word boundaries, lookarounds)
_CONTEXT = re.compile(rb"\^|\$|\\[AZbB]|\(\?<?[=!]")
VALUED = ("--since", "--until", "-e", "--regex")  # values that may start with "-" (-1h)


class Selection(Slotted):
    __slots__ = __match_args__ = ("topics", "queues", "first_offset", "last_offset", "since",
                                  "until", "keys", "tags", "properties", "body")

    def __init__(self, topics: list[str] | None = None, queues: list[int] | None = None,
                 first_offset: int | None = None, last_offset: int | None = None,
                 since: int | None = None, until: int | None = None,
                 keys: list[str] | None = None, tags: list[str] | None = None,
                 properties: list[tuple[str, str | None]] | None = None,
                 body: re.Pattern[bytes] | None = None) -> None:
        self.topics = [] if topics is None else topics  # any of (none: every topic)
        self.queues = [] if queues is None else queues  # any of (none: every queue)
        self.first_offset = first_offset  # queue offsets, both inclusive
        self.last_offset = last_offset
        self.since = since  # store times in ms, both inclusive
        self.until = until
        self.keys = [] if keys is None else keys  # any of
        self.tags = [] if tags is None else tags  # any of
        self.properties = [] if properties is None else properties  # all of; None: set
        self.body = body

    @property
    def by_queue(self) -> bool:
        """Whether the ConsumeQueues narrow the records to read (else: the CommitLog walk)."""
        return bool(self.topics or self.queues or self.first_offset is not None
                    or self.last_offset is not None or self.since is not None
                    or self.until is not None or self.tags)

    @property
    def by_record(self) -> bool:
        """Whether only a decoded record can say (keys, tags, properties, a body pattern)."""
        return bool(self.keys or self.tags or self.properties or self.body is not None)

    @property
    def body_in_context(self) -> bool:
        return self.body is not None and (_CONTEXT.search(self.body.pattern) is not None
                                          or self.body.search(b"") is not None)

    def property_literals(self) -> list[list[bytes]]:
        """For each check on properties, bytes one of which the raw PROPERTIES must hold
        (name 0x01 value): a cheap test over many records before any is decoded."""
        found = []
        if self.keys:  # a key is a whole KEYS token or the UNIQ_KEY: its bytes are there
            found.append([k.encode() for k in self.keys])
        if self.tags:
            found.append([b"TAGS\x01" + t.encode() for t in self.tags])
        for name, value in self.properties:
            found.append([name.encode() + b"\x01" + (value or "").encode()])
        return found

    def holds(self, msg: StoredMessage) -> bool:
        """The checks on a decoded record but its body (columns checked the rest)."""
        if self.keys and not set(self.keys).intersection(msg.index_keys()):
            return False
        if self.tags and msg.tags not in self.tags:
            return False
        props = msg.properties
        for name, value in self.properties:
            if name not in props or (value is not None and props[name] != value):
                return False
        return True

    def picks(self, msg: StoredMessage) -> bool:
        """Every check on a decoded message: topic, queue, offsets, times, then `holds`, then
        the pattern over the body a consumer gets (inflated when compressed)."""
        return ((not self.topics or msg.topic in self.topics)
                and (not self.queues or msg.queue_id in self.queues)
                and (self.first_offset is None or msg.queue_offset >= self.first_offset)
                and (self.last_offset is None or msg.queue_offset <= self.last_offset)
                and (self.since is None or msg.store_timestamp >= self.since)
                and (self.until is None or msg.store_timestamp <= self.until)
                and self.holds(msg)
                and (self.body is None or self.body.search(msg.body) is not None))


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The selection options, as `mqfs dump` and `mqfs pipeline export` take them."""
    p.add_argument("-t", "--topic", action="append", default=[], metavar="TOPIC",
                   help="only this topic (repeat, or a,b, for several)")
    p.add_argument("-q", "--queue", action="append", default=[], metavar="N",
                   help="only this queue id (repeat, or 0,1, for several)")
    p.add_argument("--from-offset", type=int, metavar="N", help="first queue offset")
    p.add_argument("--to-offset", type=int, metavar="N", help="last queue offset (inclusive)")
    p.add_argument("--since", metavar="TIME", help="stored at or after TIME (-1h, today, "
                                                   "2026-11-22T10:00Z, epoch ms, ...)")
    p.add_argument("--until", metavar="TIME", help="stored at or before TIME")
    p.add_argument("-k", "--key", action="append", default=[], metavar="KEY",
                   help="holding this key (KEYS or UNIQ_KEY)")
    p.add_argument("--tag", action="append", default=[], metavar="TAG",
                   help="with this tag (repeat: any of them)")
    p.add_argument("-p", "--property", action="append", default=[], metavar="NAME[=VALUE]",
                   help="with this property (and value); repeat: all of them")
    p.add_argument("-e", "--regex", metavar="PATTERN",
                   help="whose body matches PATTERN (Python regex over the bytes)")
    p.add_argument("-i", "--ignore-case", action="store_true", help="-e ignores case")


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


def _listed(values: list[str]) -> list[str]:
    return [v for text in values for v in text.split(",") if v]


def selection_of(a: argparse.Namespace) -> Selection:
    """The Selection the options spell; ValueError, in one line, for one that is wrong."""
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
        queues = [int(q) for q in _listed(a.queue)]
    except ValueError:
        raise ValueError(f"--queue {','.join(a.queue)!r}: not queue ids") from None
    try:
        since = None if a.since is None else when(a.since)
        until = None if a.until is None else when(a.until)
    except ValueError as exc:
        raise ValueError(f"--since/--until: {exc}") from None
    return Selection(_listed(a.topic), queues, a.from_offset, a.to_offset, since, until,
                     a.key, a.tag, props, body)


TIMES = "Times: " + FORMS + "."
