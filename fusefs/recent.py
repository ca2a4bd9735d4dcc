"""The refusals and cut key listings a mount remembers for status.json."""

from __future__ import annotations

import errno
import time
from collections import deque

RECENT_MAX = 50  # errors and capped key listings remembered for status.json


class Recent:
    """Refusals and cut key listings, the newest RECENT_MAX of each (the log has them all)."""

    def __init__(self) -> None:
        self.errors: deque[dict] = deque(maxlen=RECENT_MAX)
        self.keys_cut: deque[dict] = deque(maxlen=RECENT_MAX)

    def error(self, op: str, where: str, err: int, why: str) -> None:
        self.errors.append({"time_ms": time.time_ns() // 1_000_000, "op": op, "path": where,
                            "errno": errno.errorcode.get(err, str(err)), "reason": why})

    def key_cut(self, key: str, listed: int) -> None:
        if not any(c["key"] == key for c in self.keys_cut):
            self.keys_cut.append({"key": key, "listed": listed,
                                  "note": "newest hits only; raise -o keys_max="})
