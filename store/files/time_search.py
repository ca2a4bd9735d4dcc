"""The one time search over a queue's units: which queue offset a store time names.

RocketMQ bisects a queue's store times, which is only right while they never go backwards.
A broker whose clock stepped back writes them out of order, and a bisection then lands on a
crossing point. So: bisect (free for in-order queues), check the times it read plus the unit
before and at its answer; only when they show disorder, scan the times in chunks with numpy.
"""

from __future__ import annotations

from collections.abc import Callable

TYPE_CHECKING = False  # mypy alone reads these: importing typing is ~6% of a tag selection
if TYPE_CHECKING:
    import numpy as np

Times = Callable[[int, int], "np.ndarray | list[int]"]  # store times of units i..i+k-1

SCAN_CHUNK = 1 << 16  # units whose times one fallback step reads


def search_time(n: int, time_at: Callable[[int], int], times: Times,
                ts: int, upper: bool = False) -> int:
    """Over units 0..n-1 (time_at(i): unit i's store time, -1 when unreadable; times(i, k):
    those of units i..i+k-1): the first unit stored at or after ts (n when none), or with
    `upper` the last stored at or before ts (0 when none)."""
    if n <= 0:
        return 0
    seen: dict[int, int] = {}

    def before(i: int) -> bool:  # does unit i lie left of the answer?
        t = seen[i] = time_at(i)
        return t <= ts if upper else t < ts

    a, b = 0, n
    while a < b:
        mid = (a + b) // 2
        if before(mid):
            a = mid + 1
        else:
            b = mid
    for i in (0, a - 1, a, n - 1):
        if 0 <= i < n and i not in seen:
            before(i)
    probed = [seen[i] for i in sorted(seen)]
    if all(a <= b for a, b in zip(probed, probed[1:])):
        return max(0, a - 1) if upper else a
    return _scan(n, times, ts, upper)


def _scan(n: int, times: Times, ts: int, upper: bool) -> int:
    """The exact answer for times in any order: chunks from the front (first at/after ts) or
    from the back (last at/before ts), stopping at the first chunk that holds it. numpy is
    imported here only: an in-order queue's search (a dump's hour) runs without it."""
    import numpy as np

    if upper:
        stop = n
        while stop > 0:
            start = max(0, stop - SCAN_CHUNK)
            hit = np.flatnonzero(np.asarray(times(start, stop - start)) <= ts)
            if len(hit):
                return start + int(hit[-1])
            stop = start
        return 0
    for start in range(0, n, SCAN_CHUNK):
        hit = np.flatnonzero(np.asarray(times(start, min(SCAN_CHUNK, n - start))) >= ts)
        if len(hit):
            return start + int(hit[0])
    return n
