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
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from .errors import StoreError

P = ParamSpec("P")
R = TypeVar("R")


class Users:
    """A count of the calls inside an open store, and the door close shuts."""

    def __init__(self) -> None:
        # every call takes `_lock` itself (a C-level `with`, unlike a Condition's Python
        # __enter__: this is on every put's path); `_cond` waits on the same lock
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._inside = 0
        self._open = False
        self._depth = threading.local()  # a call made inside another counts once

    def open(self) -> None:
        with self._cond:
            self._open = True

    def enter(self) -> None:
        depth = getattr(self._depth, "n", 0)
        if depth == 0:
            with self._lock:
                if not self._open:
                    raise StoreError("the store is closed")
                self._inside += 1
        self._depth.n = depth + 1

    def leave(self) -> None:
        depth = self._depth.n - 1
        self._depth.n = depth
        if depth == 0:
            with self._lock:
                self._inside -= 1
                if self._inside == 0:
                    self._cond.notify_all()

    def shut(self) -> None:
        """Refuse new calls and wait until the ones inside (other than this thread's own)
        have returned."""
        mine = 1 if getattr(self._depth, "n", 0) else 0
        with self._cond:
            self._open = False
            self._cond.wait_for(lambda: self._inside <= mine)


class _HasUsers(Protocol):
    users: Users


S = TypeVar("S", bound=_HasUsers)


def in_use(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Run a store method as a user of the open store (see the module docstring)."""
    @functools.wraps(method)
    def wrapper(self: S, *args: P.args, **kwargs: P.kwargs) -> R:
        users = self.users
        users.enter()
        try:
            return method(self, *args, **kwargs)
        finally:
            users.leave()
    return wrapper
