"""Progress of long store work (recovery, verify, repair) drawn with tqdm on stderr while it
is a terminal, and nothing otherwise: the store only calls back (bytes done, bytes total)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tqdm import tqdm

Progress = Callable[[int, int], None]


@contextmanager
def progress_bar(label: str) -> Iterator[Progress]:
    """A (done, total) callback that moves a bar labelled `label`; the bar starts at the
    first call and stays on screen, at 100% when the work is done."""
    bar: tqdm | None = None

    def update(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            # disable=None: drawn only on a terminal; redrawn at most every mininterval s
            bar = tqdm(total=total, desc=label, unit="B", unit_scale=True, unit_divisor=1024,
                       disable=None, file=sys.stderr, dynamic_ncols=True, leave=True)
        if total != bar.total:
            bar.total = total
        bar.update(done - bar.n)

    try:
        yield update
    finally:
        if bar is not None:
            bar.close()
