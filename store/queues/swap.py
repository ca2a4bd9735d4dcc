"""Putting a rebuilt ConsumeQueue in place of a live one while reads go on without a lock
(the scrub's rebuild of a damaged queue).

No moment may show a read the queue emptied or a closed mapping, and nothing waits for a
grace period: the new files are written and synced aside (in quarantine/, same filesystem),
the old ones are copied into quarantine/ as evidence, each new file is renamed over its
old name (a path always holds a whole file, old or new, so an old object that maps a file
again by path reads the rebuilt units), and a new ConsumeQueue object takes the registry's
entry. The old object is not closed: a read that took it goes on through its mappings (a
rename does not unmap them) and sees the old units, which reads check against their records
as always. Its mappings go with the process-wide mapping LRU and garbage collection.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from ..files import quarantine, safefs
from ..files.consume_queue import UNIT_SIZE, ConsumeQueue

if TYPE_CHECKING:
    from .registry import QueueRegistry

Units = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # offsets, sizes, tags, queue offsets


def swap_in(root: str, queues: QueueRegistry, old: ConsumeQueue, units: Units,
            keep_old: bool = True) -> list[str]:
    """Replace `old` by a queue of these units (the caller holds the put lock, so nothing is
    appended meanwhile); the quarantine/ names of the old files (none without `keep_old`:
    files this open wrote from the CommitLog are no evidence)."""
    old.write_out()  # its buffered units too go to its files (and to quarantine/ with them)
    units_per_file = old.file_size // UNIT_SIZE
    aside_root = quarantine.scratch_dir(root, f"rebuilding-{old.topic}-{old.queue_id}")
    aside = ConsumeQueue(aside_root, old.topic, old.queue_id, units_per_file)
    try:
        if len(units[0]):
            aside.put_run(*units)
        aside.flush()
    finally:
        aside.close()
    made, live = aside.queue.directory, old.queue.directory
    kept = [quarantine.copy_file(root, mf.path, f"consumequeue-{old.topic}-{old.queue_id}-"
                                 f"{os.path.basename(mf.path)}") for mf in old.queue.files
            if keep_old]
    names = sorted(safefs.listdir(made))
    safefs.makedirs(live)
    for name in names:
        safefs.rename(os.path.join(made, name), os.path.join(live, name))
    for mf in old.queue.files:
        if os.path.basename(mf.path) not in names:  # past the rebuilt end: its copy is kept
            safefs.unlink(mf.path)
    safefs.fsync_dir(live)
    _remove_empty(aside_root, made)
    new = ConsumeQueue(root, old.topic, old.queue_id, units_per_file)
    new.filler_before = old.filler_before
    new.load()
    new.recover()
    queues.replace((old.topic, old.queue_id), new)
    return kept


def _remove_empty(top: str, deepest: str) -> None:
    """rmdir `deepest` and its parents up to `top` (each empty: its files went into service)."""
    path = deepest
    while True:
        parent, name = os.path.split(path)
        with safefs.directory(parent) as dfd:
            os.rmdir(name, dir_fd=dfd)
        if path == top:
            return
        path = parent
