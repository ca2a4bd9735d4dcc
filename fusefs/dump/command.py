"""`mqfs dump STORE`: running the command, and where its messages come from for a selection."""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Iterator
from itertools import chain

from mqfs.store import StoredMessage
from mqfs.store.errors import StoreError
from mqfs.store.format.jsonl import envelope_hosts
from mqfs.store.integrity.served_end import served_end
from mqfs.store.meta.features import BATCH_CQ, ROCKSDB_CQ, Features, recognise, topics_of
from mqfs.store.offline.dump_lines import envelope_lines
from mqfs.store.offline.keys import key_candidates
from mqfs.store.offline.located import layout_at
from mqfs.store.offline.selection import Selection, selection_of
from mqfs.store.offline.store_files import StoreLayout

from . import records
from .compacted import served_messages, served_views
from .picks import Damage, messages_at
from .queue_spans import few_units, spans
from .writer import Writer

TYPE_CHECKING = False  # mypy alone reads these: importing typing is ~6% of a tag selection
if TYPE_CHECKING:
    from . import source

OUT_BUFFER = 1 << 16  # bytes of output per write(2)
def selected(layout: StoreLayout, sel: Selection, damage: Damage,
             each: int | None = None, all_versions: bool = False,
             json_lines: bool = False) -> Iterator[StoredMessage | bytes]:
    """The messages a selection picks, reading as little as it lets: keys through the
    IndexFiles, queues, offsets, times and tags through the ConsumeQueues, else the whole
    CommitLog in store order (always when a BatchCQ topic may be selected, or the
    ConsumeQueues are a RocksDB database); with `each`, at most that many of each queue. A
    compaction topic is its versions the broker serves (after the rest), unless
    `all_versions`. With `json_lines`, messages may come as their JSON lines already made
    (bytes: one or more of EnvelopeLines.line's, made in C for the common records of a few
    units)."""
    features = recognise(layout.root)
    views = None if all_versions else served_views(layout, features, sel)
    if json_lines and each is None and views is None:  # nothing below reads a line's fields
        return _selected(layout, features, sel, damage, each, True)
    # without json_lines every item is a message
    found: Iterator[StoredMessage] = _selected(layout, features, sel, damage, each)  # type: ignore[assignment]
    if views is not None:  # its records in the CommitLog are every version: the served follow
        found = chain((m for m in found if m.topic not in views.topics),
                      served_messages(views, sel, damage))
    if each is None:
        return found
    taken: dict[tuple[str, int], int] = {}

    def capped() -> Iterator[StoredMessage]:
        for msg in found:
            n = taken.get((msg.topic, msg.queue_id), 0)
            if n < each:
                taken[(msg.topic, msg.queue_id)] = n + 1
                yield msg
    return capped()


def _selected(layout: StoreLayout, features: Features, sel: Selection, damage: Damage,
              each: int | None, json_lines: bool = False) -> Iterator[StoredMessage | bytes]:
    batch = topics_of(features, BATCH_CQ)  # their units are not in consumequeue/,
    walk = bool(batch) and (not sel.topics or bool(batch & set(sel.topics)))  # nor inner keys in the IndexFile
    # a RocksDB ConsumeQueue store has no queue directories to read, nor topics to look keys up in
    walk = walk or features.named(ROCKSDB_CQ) is not None
    if sel.keys and not walk:  # a hit that is no record, or a damaged one, is no hit (as keys/ says)
        end = served_end(layout)  # a broker-cut store's records past its end are no hit
        return messages_at(layout, [o for o in key_candidates(layout, sel) if end is None or o < end], sel)
    flavor = layout.checked_flavor
    found = spans(layout, sel, each) if sel.by_queue and not walk else None
    if found is not None:
        picked = few_units(found, sel, flavor.tags_code)
        if picked is not None:  # a tag, an hour: a record at a time, without numpy
            lines = envelope_lines(flavor, sel, envelope_hosts) if json_lines else None
            return records.messages(layout, picked, sel, flavor, damage, lines)
    # the columnar readers: numpy, imported only here
    from . import source
    from .scan import messages

    log = source.CommitLog(layout)
    runs: Iterator[source.Run]
    if found is not None:
        runs = (run for queue, offsets in source.queue_offsets(layout, found, sel, flavor.tags_code)
                for run in log.runs_at(offsets, damage, queue))
    else:
        runs = log.walk(damage)

        def in_flight_or(offset: int | None, what: str) -> None:  # past what a unit vouched for
            if offset is None or offset <= log.vouched():  # when the walk began, a record that fails its
                damage(offset, what)  # checks may be one a live writer is still copying

        return messages(runs, sel, flavor, in_flight_or)
    return messages(runs, sel, flavor, damage)


def _line_ends(text: bytes, k: int) -> int:
    """Where the first k lines of `text` end."""
    end = 0
    for _ in range(k):
        end = text.index(b"\n", end) + 1
    return end


def cmd_dump(a: argparse.Namespace) -> int:
    """grep's exit statuses: 0 selected, 1 none, 2 trouble."""
    skipped = 0

    def damage(offset: int | None, what: str) -> None:
        nonlocal skipped
        skipped += 1
        where = "" if offset is None else f"the record at CommitLog offset {offset}: "
        print(f"mqfs: dump: skipped {where}{what}", file=sys.stderr)

    try:
        sel = selection_of(a)
        layout = layout_at(a.store, dledger=True)  # its walk follows a DLedger CommitLog's entries
        # its own buffer: with PYTHONUNBUFFERED (common in containers) every message would
        # be a write(2) of its own, a third of a selection's time at 5,000 messages
        out = io.BufferedWriter(io.FileIO(sys.stdout.fileno(), "wb", closefd=False), OUT_BUFFER)
        writer = None if a.count else Writer(out, a.format)
        n = 0
        for msg in selected(layout, sel, damage, a.each, a.all_versions, a.format == "json" and not a.count):
            if a.max is not None and n >= a.max:
                break
            if isinstance(msg, bytes):  # JSON lines made already, each ending in its only newline
                if a.max is None:  # (not --count): only whether any was selected is told
                    n += 1
                else:
                    k = min(msg.count(b"\n"), a.max - n)
                    msg = msg[:_line_ends(msg, k)]
                    n += k
            else:
                n += 1
            if writer is not None:
                writer.write(msg)
        if writer is not None:
            writer.flush()
        if a.count:
            out.write(b"%d\n" % n)
        out.flush()
    except BrokenPipeError:
        raise
    except (StoreError, OSError, ValueError) as exc:
        text = " ".join(str(exc).split())
        if isinstance(exc, OSError) and exc.strerror and exc.filename:
            text = f"{exc.filename}: {exc.strerror}"  # as every other subcommand says it
        print(f"mqfs: {text}", file=sys.stderr)
        return 2
    return 2 if skipped else (0 if n else 1)
