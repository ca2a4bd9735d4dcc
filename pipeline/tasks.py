"""How many tasks read a planned number of bytes: byte ranges (source.py) and unit selections
(units.py) of a JVM read are cut by the same rule, so every core reads to the end."""

from __future__ import annotations

import math

# Below this many bytes one task reads everything, as Spark's file sources do below their
# spark.sql.files.openCostInBytes (4 MiB): a second task costs more than it saves there
ONE_TASK_BYTES = 4 << 20


def even_tasks(total: int, task_bytes: int, slots: int) -> int:
    """How many tasks of at most about task_bytes read `total` bytes on `slots` cores that
    are all busy to the end: a multiple of the slots; one when the bytes are few."""
    if total <= min(task_bytes, ONE_TASK_BYTES):
        return 1
    return slots * max(1, math.ceil(math.ceil(total / task_bytes) / slots))
