"""The one way tests wait for something to become true: `eventually` polls the condition, with
a limit generous enough for a machine whose cores are shared by many busy processes. The limit
only ends a wait that would never end; it is not a measure of speed (those live in
scripts/bench). A loop that polls by hand (sleep, check, a deadline of its own) is this
function written again: call it instead."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

LIMIT = 180.0  # seconds: a loaded 2-core machine has taken over 30 s to start a mount


def eventually(condition: Callable[[], T], what: str, limit: float = LIMIT,
               interval: float = 0.01, alive: Callable[[], object] | None = None) -> T:
    """Poll `condition` until it returns something true, and return that. Fails naming `what`
    after `limit` seconds, or at once when `alive` (the process or job being waited for)
    says no."""
    deadline = time.monotonic() + limit
    while True:
        got = condition()
        if got:
            return got
        if alive is not None:
            assert alive(), f"{what}: what it waited for has ended"
        assert time.monotonic() < deadline, f"{what}: not true after {limit:.0f} s"
        time.sleep(interval)
