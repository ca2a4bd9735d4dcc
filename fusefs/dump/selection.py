"""What a dump selects, and the checks that need a decoded record (keys, tags, properties,
a compressed body)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mqfs.store import StoredMessage

# a pattern whose match depends on what surrounds it cannot be searched for over a run of
# records: it is tried on each body alone (anchors, word boundaries, lookarounds)
_CONTEXT = re.compile(rb"\^|\$|\\[AZbB]|\(\?<?[=!]")


@dataclass
class Selection:
    topics: list[str] = field(default_factory=list)  # any of (none: every topic)
    queues: list[int] = field(default_factory=list)  # any of (none: every queue)
    first_offset: int | None = None  # queue offsets, both inclusive
    last_offset: int | None = None
    since: int | None = None  # store times in ms, both inclusive
    until: int | None = None
    keys: list[str] = field(default_factory=list)  # any of
    tags: list[str] = field(default_factory=list)  # any of
    properties: list[tuple[str, str | None]] = field(default_factory=list)  # all of; None: set
    body: re.Pattern[bytes] | None = None

    @property
    def by_queue(self) -> bool:
        """Whether the ConsumeQueues narrow the records to read (else: the CommitLog walk)."""
        return bool(self.topics or self.queues or self.first_offset is not None
                    or self.last_offset is not None or self.since is not None
                    or self.until is not None or self.tags)

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
        """The checks on a decoded record (the columns checked the rest)."""
        if self.keys and not set(self.keys).intersection(msg.index_keys()):
            return False
        if self.tags and msg.tags not in self.tags:
            return False
        props = msg.properties
        for name, value in self.properties:
            if name not in props or (value is not None and props[name] != value):
                return False
        return True
