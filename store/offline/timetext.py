"""Times as people type them, for `mqfs dump --since/--until`, `mqfs pipeline export`, a
mount's `<queue>/at/<time>` and group resets (`@TIME`).

A time is epoch milliseconds (digits), ISO-8601 (`2026-11-22T10:00:00Z`, `2026-11-22 10:00`,
`2026-11-22`), a time of day (`09:00`, `09:05:30`: today), `now`, `today` or `yesterday`
(local midnight), or an offset from now: `-10m`, `-1h`, `-2d`, `-90s`, `-1w` (journalctl's
and rpk's forms). A time with no zone is local time, as `date` would read it.
"""

from __future__ import annotations

import re
import time

TYPE_CHECKING = False  # mypy alone reads these: importing typing is ~6% of a tag selection
if TYPE_CHECKING:
    from datetime import datetime

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000,
            "w": 604_800_000}
_RELATIVE = re.compile(r"-(\d{1,12})(ms|s|m|h|d|w)")
FORMS = "epoch ms, ISO-8601, HH:MM[:SS] (today), now, today, yesterday or -N[ms|s|m|h|d|w]"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def when(text: str, now: int | None = None) -> int:
    """Epoch milliseconds a text spells (`now` defaults to the clock); ValueError, naming
    the forms, for a text that is no time. An instant between two milliseconds rounds up:
    store times are whole ms, and "at or after" must not take the one before."""
    now = now_ms() if now is None else now
    if text.isascii() and text.isdigit() and len(text) <= 18:
        return int(text)
    relative = _RELATIVE.fullmatch(text)
    if relative:
        return now - int(relative.group(1)) * _UNIT_MS[relative.group(2)]
    if text == "now":
        return now
    # calendar times: datetime is imported for them alone (epoch ms and offsets, what
    # scripts pass, cost a dump's start nothing more)
    from datetime import datetime, timedelta
    from datetime import time as dt_time

    if text in ("today", "yesterday"):  # local midnight: 23 or 25 hours apart across DST
        day = datetime.fromtimestamp(now / 1000).date()
        if text == "yesterday":
            day -= timedelta(days=1)
        return _ms(datetime.combine(day, datetime.min.time()).astimezone())
    if ":" in text and "-" not in text and "T" not in text:  # 09:00, 09:05:30: today
        try:
            clock = dt_time.fromisoformat(text)
        except ValueError:
            raise ValueError(f"{text!r} is no time ({FORMS})") from None
        day = datetime.fromtimestamp(now / 1000).date()
        return _ms(datetime.combine(day, clock).astimezone())
    try:
        parsed = datetime.fromisoformat(text)
        if parsed.tzinfo is None:
            parsed = parsed.astimezone()  # naive: the local time zone
        return _ms(parsed)
    except (ValueError, OverflowError, OSError):
        raise ValueError(f"{text!r} is no time ({FORMS})") from None


def _ms(moment: datetime) -> int:
    from datetime import UTC, datetime, timedelta

    micros = (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    return -(-micros // 1000)
