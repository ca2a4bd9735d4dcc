"""Crash-safe JSON files (config/*.json, mqfs.json): temp file, fsync, rename, directory fsync,
previous version kept as .bak. Reads accept RocketMQ's fastjson output (unquoted integer keys)
and fall back to .bak when the main file is empty, unparseable or not the shape we write.

Everything a file can hold — garbage, nesting deep enough to exhaust the parser, a valid
document of the wrong shape — ends as one StoreFormatError line naming the file and what to do,
never a traceback: these files are edited by hand and restored from backups."""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable

from ..errors import StoreFormatError
from . import safefs

TYPE_CHECKING = False  # mypy alone reads these: importing typing is ~6% of a tag selection
if TYPE_CHECKING:
    from typing import Any, TypeVar

    T = TypeVar("T")

_UNQUOTED_INT_KEY = re.compile(r'([{,]\s*)(-?\d+)(\s*:)')
_DEFAULT_FIX = "restore it from a backup"


def parse_text(text: str) -> Any:
    """JSON text, RocketMQ's fastjson output (unquoted integer keys) included."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(_UNQUOTED_INT_KEY.sub(r'\1"\2"\3', text))


def _load(path: str, check: Callable[[Any], T] | None) -> T:
    """One candidate file parsed and checked; ValueError says what is wrong with it."""
    try:
        text = safefs.read_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("is not UTF-8 text") from None
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ValueError(f"cannot be read ({exc.strerror or exc})") from None
    if not text.strip():
        raise ValueError("is empty")
    try:
        data = parse_text(text)
    except RecursionError:
        raise ValueError("is nested too deeply to be a config file") from None
    except MemoryError:
        raise ValueError("is too large to parse") from None
    except ValueError as exc:
        raise ValueError(f"is not JSON ({exc})") from None
    if check is None:
        return data
    try:
        return check(data)
    except RecursionError:
        raise ValueError("is nested too deeply to be a config file") from None


def read_json(path: str, default: Any = None, *, check: Callable[[Any], T] | None = None,
              fix: str = _DEFAULT_FIX) -> Any:
    """The file parsed and passed through `check` (which raises ValueError on a shape we never
    write), its .bak when the file is damaged, or `default` when neither exists. `fix` tells
    the user what to do when neither is usable."""
    problems = []
    for candidate in (path, path + ".bak"):
        try:
            data = _load(candidate, check)
        except FileNotFoundError:
            continue
        except ValueError as exc:
            problems.append(f"{candidate} {exc}")
            continue
        if problems:
            import logging  # with threading: a reader's start (mqfs dump -k) needs neither

            logging.getLogger(__name__).warning("%s; using %s", problems[0], candidate)
        return data
    if problems:
        raise StoreFormatError("; ".join(problems) + f"; {fix}")
    return default


def write_json(path: str, data: Any, *, sort_keys: bool = True, backup: bool = True) -> None:
    """Write .tmp (private, synced), keep the current version as .bak (renamed there: no
    copy, never a second name, which safefs would refuse as a hard link; a link planted as
    .bak is replaced, not written through), rename .tmp to the file, sync the directory. A
    crash between the two renames leaves no file but the .bak, which `read_json` reads.
    `backup=False` leaves .bak as it is (a broker's own; the one rename keeps the file whole);
    `sort_keys=False` keeps the order the document has (one read from a broker's file)."""
    write_text(path, json.dumps(data, indent=2, sort_keys=sort_keys) + "\n", backup=backup)


def write_text(path: str, text: str, *, backup: bool = True) -> None:
    """`write_json`'s steps for a text already made (a broker's file changed in place). The
    new version keeps the permissions of the one it replaces (a broker's 0644 topics.json
    stays readable by its other users); a new file is private."""
    directory = os.path.dirname(path) or "."
    safefs.makedirs(directory)
    tmp, bak = path + ".tmp", path + ".bak"
    try:
        st = os.lstat(path)
        mode = stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else safefs.FILE_MODE
    except FileNotFoundError:
        mode = safefs.FILE_MODE
    safefs.write_new(tmp, text.encode(), mode=mode)
    if backup and os.path.lexists(path):
        safefs.rename(path, bak)
    safefs.rename(tmp, path)
    safefs.fsync_dir(directory)
