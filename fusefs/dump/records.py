"""The selected messages of a few units (`queue_spans.few_units`), a record at a time and
without numpy: what the columnar reader (source.CommitLog.runs_at, then scan.messages) does,
in the same order and with the same words for damage (tests/fusefs/test_dump_units.py holds
the two to each other). Each record is decoded once without its checksums, ruled out by its
fields where the columns would, and checked only when kept."""

from __future__ import annotations

import bisect
import mmap
from collections.abc import Iterator

from mqfs.store import StoredMessage
from mqfs.store.errors import CodecError, CorruptionError
from mqfs.store.format.codec import decode, verify
from mqfs.store.format.compression import COMPRESSED_FLAG
from mqfs.store.format.flavor import Flavor
from mqfs.store.format.layout import in_queue
from mqfs.store.offline.selection import Selection
from mqfs.store.offline.store_files import StoreLayout, commitlog_files, map_readonly

from .picks import INNER_BATCHES, Damage, served
from .queue_spans import CHUNK, Span

TYPE_CHECKING = False  # mypy alone reads these: importing typing is ~6% of a tag selection
if TYPE_CHECKING:
    from typing import Any

_MAPS_KEPT = 16  # CommitLog files kept mapped at once (a mapping holds a descriptor)
NO_RECORD = "no record there (damaged or not yet written)"
_OWN_HANDLING = INNER_BATCHES | COMPRESSED_FLAG  # records `served` handles its own way


class Files:
    """The store's CommitLog files, mapped read-only when first needed."""

    def __init__(self, layout: StoreLayout) -> None:
        self.files = commitlog_files(layout.root)
        self.starts = [s for s, _ in self.files]
        self._maps: dict[int, mmap.mmap] = {}

    def which(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset) - 1

    def mapped(self, i: int) -> mmap.mmap:
        mm = self._maps.pop(i, None) or map_readonly(self.files[i][1])
        self._maps[i] = mm  # most recently used last
        while len(self._maps) > _MAPS_KEPT:
            del self._maps[next(iter(self._maps))]
        return mm


def _kept(msg: StoredMessage, sel: Selection, literals: list[list[bytes]]) -> bool:
    """scan.candidate_rows for one record read through a queue's unit."""
    if not in_queue(msg.sys_flag):
        return False
    if sel.since is not None and msg.store_timestamp < sel.since:
        return False
    if sel.until is not None and msg.store_timestamp > sel.until:
        return False
    if msg.sys_flag & INNER_BATCHES == INNER_BATCHES:  # its messages are checked one by one
        return True
    props = msg._props_raw
    for wanted in literals:
        for w in wanted:
            if w in props:
                break
        else:
            return False
    if sel.body is not None and not msg.stored_sys_flag & COMPRESSED_FLAG:
        return sel.body.search(msg.stored_body) is not None
    return True


def messages(layout: StoreLayout, picked: list[tuple[Span, list[tuple[int, int]]]],
             sel: Selection, flavor: Flavor, damage: Damage, lines: Any = None
             ) -> Iterator[StoredMessage | bytes]:
    """The selected messages of these units, queue by queue; within a chunk of a queue's
    offsets, file by file (as runs_at reads them), a file's units without a record first.
    A record that is its unit's own queue's message and neither packs nor compresses
    messages is `served` without a generator of its own (most of a selection's records).
    With `lines` (store.offline.dump_lines), such records come as their JSON lines (bytes,
    the lines of a whole group of units at once where C takes each), made in C; what C
    declines is read here as without it."""
    log = Files(layout)
    literals = sel.property_literals()
    holds = sel.holds
    for span, units in picked:
        topic, q = span.units.topic, span.units.queue_id
        order = sorted(((qo - span.lo) // CHUNK, log.which(at), qo, at) for qo, at in units)
        k = 0
        while k < len(order):
            chunk, i = order[k][:2]
            group = []
            while k < len(order) and order[k][:2] == (chunk, i):
                group.append(order[k][2:])
                k += 1
            if i < 0:
                for _, at in group:
                    damage(at, "no CommitLog file holds it")
                continue
            buf = log.mapped(i)
            base = log.starts[i]
            if lines is not None:
                text = lines.lines(buf, base, group, topic, q)
                if text is not None:
                    if text:
                        yield text
                    continue
            found: list[tuple[int, int, StoredMessage] | bytes] = []
            for qo, at in group:
                if lines is not None:
                    line = lines.line(buf, at - base, at, topic, q, qo)
                    if line is not None:  # its JSON line, or False: not selected
                        if line:
                            found.append(line)
                        continue
                try:
                    msg = decode(buf, at - base)
                except CodecError:
                    msg = None
                if msg is None or msg.commitlog_offset != at:
                    damage(at, NO_RECORD)
                else:
                    found.append((qo, at, msg))
            for item in found:
                if isinstance(item, bytes):
                    yield item
                    continue
                qo, at, msg = item
                if not _kept(msg, sel, literals):
                    continue
                try:
                    verify(buf, at - base, msg, flavor)
                except (CodecError, CorruptionError) as exc:
                    damage(at, str(exc))
                    continue
                if (not msg.stored_sys_flag & _OWN_HANDLING and msg.queue_offset == qo
                        and msg.queue_id == q and msg.topic == topic):
                    if holds(msg):
                        yield msg
                else:
                    yield from served(msg, sel, (topic, q, qo), damage, at)
