"""The scrub's check of IndexFile entries: each one must point at a record holding a key of
its hash, and link to an older entry of its own bucket. A damaged entry never serves a wrong
message (key reads check the record's keys), but it can hide a key from lookups, or send a
lookup down another bucket's chain."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import CorruptionError, NotFound
from ..files.index_file import ENTRY_DTYPE, HEADER_SIZE, SLOT_SIZE, IndexFile
from ..files.index_service import build_key

if TYPE_CHECKING:
    from ..files.commitlog import CommitLog
    from ..format.flavor import Flavor


def bad_entries(f: IndexFile, lo: int, hi: int, commitlog: CommitLog, flavor: Flavor
                ) -> list[tuple[int, str]]:
    """(entry number, what is wrong) for entries lo..hi-1 of f (all written: below its
    count). Entries of records retention deleted are left alone; so is a record that is
    damaged itself (the CommitLog check reports it)."""
    every = np.frombuffer(f.mf.buffer(), dtype=ENTRY_DTYPE, count=f.entries,
                          offset=HEADER_SIZE + f.slots * SLOT_SIZE)
    found = []
    for idx in range(lo, hi):
        h, phy, prev = int(every["hash"][idx]), int(every["phy"][idx]), int(every["prev"][idx])
        if not 0 <= prev < idx:
            found.append((idx, f"links to entry {prev}, not to an older one"))
        elif prev and int(every["hash"][prev]) % f.slots != h % f.slots:
            found.append((idx, f"links to entry {prev} of another hash bucket"))
        if phy < 0:  # never an offset: not one retention deleted
            found.append((idx, f"points at CommitLog offset {phy}, which no record can have"))
            continue
        if phy < commitlog.queue.min_offset:
            continue
        why = _record_problem(commitlog, flavor, phy, h)
        if why is not None:
            found.append((idx, why))
    return found


def _record_problem(commitlog: CommitLog, flavor: Flavor, phy: int, key_hash: int) -> str | None:
    try:
        msg = commitlog.read(phy, check_crc=True)
    except NotFound:
        return f"points at CommitLog offset {phy}, past the log's end"
    except CorruptionError:
        try:
            if commitlog.read(phy).commitlog_offset == phy:
                return None  # a damaged record starts there: the CommitLog check's finding
        except (CorruptionError, NotFound):
            pass
        return f"points at CommitLog offset {phy}, where no record starts"
    if msg.commitlog_offset != phy:
        return f"points at CommitLog offset {phy}, where no record starts"
    if key_hash not in {flavor.key_hash(build_key(msg.topic, k)) for k in msg.index_keys()}:
        return f"has a hash that matches no key of the record at CommitLog offset {phy}"
    return None
