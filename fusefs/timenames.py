"""Names of times in the tree: `<queue>/at/<time>` and group resets (`@TIME`) take the times
`mqfs dump --since` takes (store.offline.timetext)."""

from __future__ import annotations

import errno

from mqfs.store.offline.timetext import FORMS, when

from .errors import FsError

__all__ = ["FORMS", "parse_time", "when"]


def parse_time(name: bytes) -> int:
    """Epoch milliseconds a name in at/ spells; EINVAL, with the forms it takes, for a name
    that is no time."""
    text = name.decode("utf-8", errors="replace")
    try:
        return when(text)
    except ValueError:
        raise FsError(errno.EINVAL, f"at/{text}: not {FORMS}") from None
