"""Where the CommitLog starts, as retention left it (config/retention.json): recorded
before retention deletes a head file, so an open can tell a file retention deleted from one
that went missing (store/services/retention.py deletes; store/integrity/commitlog_files.py
checks)."""

from __future__ import annotations

import os

from ..errors import StoreFormatError
from ..files.json_file import read_json, write_json

NAME = "retention.json"


def _path(root: str) -> str:
    return os.path.join(root, "config", NAME)


def recorded_min_offset(root: str) -> int | None:
    """The CommitLog minimum retention left (0 for a store mqfs created), or None for a store
    that never recorded one (written by a broker or an older mqfs)."""
    path = _path(root)
    try:
        data = read_json(path)
    except (StoreFormatError, RecursionError, ValueError) as exc:
        raise StoreFormatError(f"{path} is damaged ({exc}); restore it from {path}.bak or "
                               "delete it (the oldest CommitLog file is then trusted)") from None
    if data is None:
        return None
    value = data.get("commitlogMinOffset") if isinstance(data, dict) else None
    if type(value) is not int or value < 0:
        raise StoreFormatError(f"{path} has no valid commitlogMinOffset; restore it from "
                               f"{path}.bak or delete it (the oldest CommitLog file is then "
                               "trusted)")
    return value


def record_min_offset(root: str, offset: int) -> None:
    write_json(_path(root), {"commitlogMinOffset": offset})
