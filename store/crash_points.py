"""Named crash sites for crash tests: with MQFS_CRASH_AT=site:n in the environment, the n-th
time the process passes `site` it dies on the spot (os._exit), as a kill -9 would leave it;
with site:n:enospc the call there fails with ENOSPC instead, as a full disk would make it.
Without the variable `crash_point` is a no-op."""

from __future__ import annotations

import errno
import os

SITES = (
    "commitlog.before_write", "commitlog.after_write", "commitlog.roll",
    "flush.before", "flush.after", "cq.write", "index.write", "index.roll",
    "checkpoint.before", "checkpoint.after", "ends.append", "abort.create", "abort.delete",
    "recovery.dispatch", "recovery.truncate",
    "repair.journal", "repair.rename", "repair.filler", "repair.move",
)


def _parse(spec: str | None) -> tuple[str, int, bool] | None:
    if not spec:
        return None
    site, _, rest = spec.partition(":")
    count, _, how = rest.partition(":")
    if site not in SITES:
        raise ValueError(f"MQFS_CRASH_AT names unknown site {site!r}; sites: {', '.join(SITES)}")
    if how not in ("", "enospc"):
        raise ValueError(f"MQFS_CRASH_AT: {how!r} is not enospc")
    return site, int(count or 1), how == "enospc"


_TARGET = _parse(os.environ.get("MQFS_CRASH_AT"))
_seen = 0


def _crash_point(site: str) -> None:
    global _seen
    if _TARGET is not None and site == _TARGET[0]:
        _seen += 1
        if _seen == _TARGET[1]:
            if _TARGET[2]:
                raise OSError(errno.ENOSPC, f"No space left on device (injected at {site})")
            os._exit(137)


def _no_crash_point(site: str) -> None:
    return None


crash_point = _crash_point if _TARGET else _no_crash_point
# hot paths test this before calling crash_point, so an unarmed put pays no call per site
ARMED = _TARGET is not None
