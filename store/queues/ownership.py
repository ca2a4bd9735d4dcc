"""Whether the records of queue counts (config/dispatchState.json, config/queueEnds.log)
are this store's: `verify`, `pipeline audit` and `repair` name one that is not (another
store's id, or a fingerprint of other CommitLog bytes than this store holds) as one
problem, where the open only logs that it vouches for nothing. Costs one read of at most
4 KiB of the CommitLog per record, whatever the store holds."""

from __future__ import annotations

import os

import xxhash

from ..errors import StoreFormatError
from ..files import safefs
from ..files.json_file import read_json
from ..files.mapped_file import offset_to_name
from ..meta.manifest import store_id
from . import dispatch_state, ends_log, log_fingerprint

_NOTHING = "it vouches for no queue (each queue's end is proven from the CommitLog)"


def _before(root: str, file_size: int, end: int) -> int | None:
    """`log_fingerprint.before` read from the files by path (no CommitLog object); None
    where no file holds the byte before `end` (retention deleted it: nothing to compare)."""
    if end <= 0:
        return None
    start = (end - 1) - (end - 1) % file_size
    try:
        fd = safefs.open_file(os.path.join(root, "commitlog", offset_to_name(start)))
    except FileNotFoundError:
        return None
    try:
        hi = end - start
        lo = max(0, hi - log_fingerprint.SPAN)
        return xxhash.xxh64_intdigest(f"{end}:".encode() + os.pread(fd, hi - lo, lo))
    finally:
        os.close(fd)


def _owner(theirs: object, ours: str | None) -> str | None:
    if theirs == ours:
        return None
    return (f"belongs to {f'store {theirs}' if theirs else 'a store without an id'}, not to "
            f"this store ({ours or 'no id'})")


def foreign_records(root: str, file_size: int) -> list[str]:
    """One problem line for each count record that is not this store's."""
    out = []
    ours = store_id(root)
    try:
        data = read_json(os.path.join(root, "config", dispatch_state.NAME), None,
                         check=lambda d: d if isinstance(d, dict) else {})
    except StoreFormatError:
        data = None  # damaged: `verify` names it among the config files
    if data:
        why = _owner(data.get("storeId"), ours)
        end, tail = data.get("commitlogEnd"), data.get("tailFingerprint")
        if why is None and isinstance(tail, str) and type(end) is int:
            found = _before(root, file_size, end)
            if found is not None and f"{found:016x}" != tail:
                why = f"was written for other CommitLog bytes before offset {end}"
        if why is not None:
            out.append(f"config/{dispatch_state.NAME} {why}: {_NOTHING}; `mqfs repair {root}` "
                       "moves it to quarantine/")
    found_log, why = ends_log.replay(root, 1 << 62)
    if why is not None and "belongs to" in why:
        out.append(f"{why}: {_NOTHING}; `mqfs repair {root}` moves it to quarantine/")
    elif found_log is not None and found_log.fingerprint is not None:
        now = _before(root, file_size, found_log.at)
        if now is not None and now != found_log.fingerprint:
            out.append(f"config/{ends_log.NAME} was written for other CommitLog bytes before "
                       f"offset {found_log.at}: {_NOTHING}; `mqfs repair {root}` moves it to "
                       "quarantine/")
    return out
