"""Times as file names, for `<queue>/at/<time>`.

A name is epoch milliseconds (digits) or ISO-8601 (`2026-11-22T10:00:00Z`, `2026-11-22 10:00`,
`2026-11-22`); a time with no zone is the daemon's local time, as `date` would read it.
"""

from __future__ import annotations

import errno
from datetime import UTC, datetime, timedelta

from .errors import FsError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def parse_time(name: bytes) -> int:
    """Epoch milliseconds a name spells; EINVAL, with the forms it takes, for a name that
    is no time."""
    text = name.decode("utf-8", errors="replace")
    if text.isascii() and text.isdigit() and len(text) <= 18:
        return int(text)
    try:
        when = datetime.fromisoformat(text)
        if when.tzinfo is None:
            when = when.astimezone()  # naive: the local time zone
    except (ValueError, OverflowError, OSError):
        raise FsError(errno.EINVAL, f"at/{text}: not epoch milliseconds or ISO-8601") from None
    micros = (when - EPOCH) // _MICROSECOND
    return -(-micros // 1000)  # store times are whole ms: "at or after" rounds up
