"""`mqfs dump`'s JSON lines of its common records, in C (store/offline/_dump.c): a record
read through its queue's unit, decoded, checked and printed in one call, as the envelope
`store.format.jsonl.EnvelopeLines` writes it; anything uncommon is declined and read in
Python, the reference (tests/fusefs/test_dump_c.py holds the two to each other)."""

from __future__ import annotations

from collections.abc import Callable

from ..format import compiled
from ..format.flavor import Flavor
from .selection import Selection

TYPE_CHECKING = False  # mypy alone reads these: importing typing is ~6% of a tag selection
if TYPE_CHECKING:
    from typing import Any

_I64 = 1 << 63
_XX = {"xxhash": True, "rocketmq": False}  # a flavor's checksum, as C computes it


def envelope_lines(flavor: Flavor, sel: Selection,
                   hosts_of: Callable[[bytes, bytes], tuple[bytes, bytes]]) -> Any:
    """A `Lines` whose `line(buf, pos, at, topic, queue_id, queue_offset)` gives the JSON
    line of the record at `pos` of a mapped CommitLog file (at CommitLog offset `at`) read
    through that unit, False for one the selection rules out, None for one Python must read;
    `lines(buf, base, units, topic, queue_id)` the lines of a list of units (queue offset,
    CommitLog offset) of the file starting at `base`, joined, or None when it would decline
    one; `hosts_of` is `jsonl.envelope_hosts`. None when C cannot take the selection: keys,
    properties or a body pattern (Python checks those), or without the C module
    (MQFS_PURE_PYTHON=1)."""
    c = compiled.dump
    xx = _XX.get(flavor.name)
    if c is None or xx is None or sel.keys or sel.properties or sel.body is not None:
        return None
    if any(t is not None and not -_I64 <= t < _I64 for t in (sel.since, sel.until)):
        return None
    try:
        tags = tuple(t.encode() for t in sel.tags) if sel.tags else None
        literals = tuple(map(tuple, sel.property_literals()))
    except UnicodeEncodeError:  # a tag from argv that is no text (surrogate escapes)
        return None
    return c.Lines(xx, flavor.record_crc, sel.since, sel.until, tags, literals, hosts_of)
