"""Names of times in the tree: `at/<time>`, `at/<since>..<until>` and group resets (`@TIME`)
take the times `mqfs dump --since` takes (store.offline.timetext)."""

from __future__ import annotations

import errno

from mqfs.store.offline.timetext import FORMS, now_ms, when

from .errors import FsError

__all__ = ["FORMS", "RANGE", "is_range", "parse_range", "parse_time", "when"]

RANGE = b".."  # `<since>..<until>`: no time has two dots in a row


def parse_time(name: bytes) -> int:
    """Epoch milliseconds a name in at/ spells; EINVAL, with the forms it takes, for a name
    that is no time."""
    return _when(name, now_ms())


def is_range(name: bytes) -> bool:
    return RANGE in name


def parse_range(name: bytes) -> tuple[int | None, int | None]:
    """`<since>..<until>` as epoch ms, both ends inclusive (dump's --since and --until); an end
    left out is open (`-1h..`: everything since an hour ago). Relative ends are taken from one
    `now`. EINVAL for an end that is no time or an until before the since."""
    head, _, tail = name.partition(RANGE)
    now = now_ms()
    since = _when(head, now) if head else None
    until = _when(tail, now) if tail else None
    if since is not None and until is not None and until < since:
        raise FsError(errno.EINVAL, f"at/{name.decode(errors='replace')}: it ends before "
                                    "it starts")
    return since, until


def _when(name: bytes, now: int) -> int:
    text = name.decode("utf-8", errors="replace")
    try:
        return when(text, now)
    except ValueError:
        raise FsError(errno.EINVAL, f"at/{text}: not {FORMS}") from None
