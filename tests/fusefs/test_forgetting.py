"""When the kernel is told to forget moved attributes (fusefs/forgetting.py): at once after a
quiet interval, once more at the end of a busy one, never once per message of a burst."""

from __future__ import annotations

import threading

from mqfs.fusefs.forgetting import Forgetting
from tests.waits import eventually


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_is_told_once_at_once_and_once_at_the_end_of_its_interval():
    told: list[list[int]] = []
    lock = threading.Lock()

    def tell(inodes: list[int]) -> None:
        with lock:
            told.append(sorted(inodes))

    clock = Clock()
    forget = Forgetting(tell, every=0.02, clock=clock)
    forget([1, 2])
    assert told == [[1, 2]]  # quiet before: at once, in the caller's thread
    for _ in range(50):  # a burst within the interval: owed, not told
        clock.now += 0.0001
        forget([1, 2])
    forget([3])  # another inode, not told lately: at once
    assert told == [[1, 2], [3]]
    clock.now += 0.02  # the interval is over: the thread tells what was owed, once
    with forget._cond:
        forget._cond.notify()
    eventually(lambda: len(told) == 3, "the owed inodes told at the interval's end")
    assert told[2] == [1, 2]
    clock.now += 0.05
    forget([2])  # quiet for an interval since: at once again
    assert told[3] == [2]
    with forget._cond:
        assert not forget._owed


def test_nothing_is_told_once_stopped():
    told: list[list[int]] = []
    clock = Clock()
    forget = Forgetting(told.append, every=0.02, clock=clock)
    forget([1])
    forget([1])  # owed: the thread runs
    forget.stop()  # returns once the thread has ended
    assert forget._thread is not None and not forget._thread.is_alive()
    clock.now += 1
    forget([1, 2])
    assert told == [[1]]
