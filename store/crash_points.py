"""Named crash sites for crash tests: with MQFS_CRASH_AT=site:n in the environment, the n-th
time the process passes `site` it dies on the spot (os._exit), as a kill -9 would leave it.
Without the variable `crash_point` is a no-op."""

from __future__ import annotations

import os

SITES = (
    "commitlog.before_write", "commitlog.after_write", "commitlog.roll",
    "flush.before", "flush.after", "cq.write", "index.write", "index.roll",
    "checkpoint.before", "checkpoint.after", "abort.create", "abort.delete",
    "recovery.dispatch", "recovery.truncate",
)


def _parse(spec: str | None) -> tuple[str, int] | None:
    if not spec:
        return None
    site, _, count = spec.partition(":")
    if site not in SITES:
        raise ValueError(f"MQFS_CRASH_AT names unknown site {site!r}; sites: {', '.join(SITES)}")
    return site, int(count or 1)


_TARGET = _parse(os.environ.get("MQFS_CRASH_AT"))
_seen = 0


def _crash_point(site: str) -> None:
    global _seen
    if _TARGET is not None and site == _TARGET[0]:
        _seen += 1
        if _seen == _TARGET[1]:
            os._exit(137)


def _no_crash_point(site: str) -> None:
    return None


crash_point = _crash_point if _TARGET else _no_crash_point
# hot paths test this before calling crash_point, so an unarmed put pays no call per site
ARMED = _TARGET is not None
