"""Who is using an open store, so that close never pulls its files from under a call.

Every public read and write of MessageStore runs between `enter` and `leave`; `close` first
shuts the door (`shut`: new calls raise StoreError "the store is closed") and waits for the
calls already inside to return, and only then stops the services and closes the files. A
call a close overtook therefore sees either the whole store or a clean refusal, never a
closed mapping (which a queue's first use would take for damage and rebuild).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from threading import get_ident
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from .errors import StoreError

P = ParamSpec("P")
R = TypeVar("R")


class Users:
    """The calls inside an open store, and the door close shuts.

    Each call inside is its thread's id in `_calls`; a list's append and remove are single
    steps under the GIL, so a call costs no lock and no thread-local (it is on every put's
    path). A call enters, then looks at the door: `shut` closes the door, then counts, so
    either it counts a call that entered or that call sees the door shut and leaves."""

    def __init__(self) -> None:
        self._calls: list[int] = []
        self._cond = threading.Condition(threading.Lock())  # `shut` waits on it
        self._open = False

    def open(self) -> None:
        with self._cond:
            self._open = True

    def enter(self) -> int:
        """Count a call of this thread in; its id, for `leave`. A call made inside another
        of the same thread gets in after the door shut (it counts once in `shut`)."""
        me = get_ident()
        calls = self._calls
        calls.append(me)
        if not self._open and calls.count(me) == 1:
            self.leave(me)
            raise StoreError("the store is closed")
        return me

    def leave(self, me: int) -> None:
        self._calls.remove(me)
        if not self._open:  # a close is waiting (`shut`), maybe inside a call itself
            with self._cond:
                self._cond.notify_all()

    def shut(self) -> None:
        """Refuse new calls and wait until the ones inside (other than this thread's own)
        have returned."""
        calls = self._calls
        with self._cond:
            self._open = False
            mine = calls.count(get_ident())
            self._cond.wait_for(lambda: len(calls) <= mine)


class _HasUsers(Protocol):
    users: Users


S = TypeVar("S", bound=_HasUsers)


def in_use(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Run a store method as a user of the open store (see the module docstring)."""
    @functools.wraps(method)
    def wrapper(self: S, *args: P.args, **kwargs: P.kwargs) -> R:
        users = self.users
        me = users.enter()
        try:
            return method(self, *args, **kwargs)
        finally:
            users.leave(me)
    return wrapper
