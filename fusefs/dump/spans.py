"""Which of many byte ranges of one buffer (record bodies, properties) a pattern matches,
found with a few searches over the whole run rather than one call per record: a search
over mapped CommitLog bytes runs at the regex engine's speed, and only ranges near a hit are
looked at one by one."""

from __future__ import annotations

import re

import numpy as np


def matching(pattern: re.Pattern[bytes], buf: memoryview, starts: np.ndarray,
             ends: np.ndarray, alone: bool = False) -> np.ndarray:
    """A mask of the ranges [starts[i], ends[i]) (ascending, not overlapping) in which the
    pattern matches, exactly as `pattern.search(buf[start:end])` would say.

    Over the run: a range holding a match at p makes the run's search find one starting at
    or before p (a pattern that does not look at its context matches the same bytes there),
    so each search either lands in a range, which is then checked alone when the match runs
    past its end, or in a gap, and the next search starts at the next range: at most two
    searches per range that has a hit nearby, one for a run of ranges without. With `alone`
    (a pattern that looks at its context: anchors, lookarounds, an empty match) each range
    is searched by itself."""
    n = len(starts)
    hits = np.zeros(n, dtype=bool)
    if alone:
        for i, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):
            hits[i] = pattern.search(buf[a:b]) is not None
        return hits
    if not n:
        return hits
    first, last = starts.tolist(), ends.tolist()
    i, pos, end = 0, first[0], last[-1]
    search = pattern.search
    while True:
        m = search(buf, pos, end)
        if m is None:
            return hits
        at = m.start()
        i = int(np.searchsorted(starts, at, side="right")) - 1
        if i >= 0 and at < last[i]:  # inside range i
            hits[i] = m.end() <= last[i] or search(buf[first[i]:last[i]]) is not None
        if i + 1 >= n:
            return hits
        pos = first[i + 1]


def holding(buf: memoryview, starts: np.ndarray, ends: np.ndarray,
            literals: list[bytes]) -> np.ndarray:
    """A mask of the ranges that hold one of the literals (a pre-check: bytes are looked for,
    not parsed)."""
    pattern = re.compile(b"|".join(re.escape(x) for x in literals))
    return matching(pattern, buf, starts, ends)
