"""The door close shuts (store/in_use.py): a close waits for the calls inside, refuses new
ones, lets a call inside make its nested calls, and may itself run inside a call."""

import threading

import pytest

from mqfs.store.errors import StoreError
from mqfs.store.in_use import Users, in_use


class _Store:
    def __init__(self) -> None:
        self.users = Users()
        self.users.open()
        self.inside = threading.Event()
        self.release = threading.Event()
        self.log: list[str] = []

    @in_use
    def slow(self) -> str:
        self.inside.set()
        self.release.wait()
        self.log.append("slow returned")
        return "done"

    @in_use
    def outer(self, close_inside: bool) -> str:
        if close_inside:
            self.users.shut()  # a close from inside a call waits only for the others
        return self.inner()

    @in_use
    def inner(self) -> str:
        return "inner"


def test_a_close_waits_for_the_call_inside_and_refuses_new_ones():
    s = _Store()
    t = threading.Thread(target=s.slow)
    t.start()
    assert s.inside.wait(60)
    shut = threading.Thread(target=lambda: (s.users.shut(), s.log.append("shut")))
    shut.start()
    while s.users._open:  # the door is shut before the wait
        shut.join(0.001)
    with pytest.raises(StoreError, match="closed"):
        s.inner()
    assert s.log == []  # the close still waits for slow()
    s.release.set()
    t.join()
    shut.join()
    assert s.log == ["slow returned", "shut"]
    assert s.users._calls == []


def test_a_call_inside_makes_its_nested_calls_and_may_close_the_store():
    s = _Store()
    assert s.outer(True) == "inner"  # closed inside, its nested call still gets in
    with pytest.raises(StoreError, match="closed"):
        s.outer(False)
    assert s.users._calls == []
