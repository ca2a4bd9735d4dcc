"""The put path's C modules (setup.py builds them, optional): imported once, here, so every
user agrees on one answer. Each name is the module or None, None when it was not built (no
compiler or -dev packages at install) or when MQFS_PURE_PYTHON=1 forces the Python codec,
which stays the reference the C code is held to byte for byte (tests run both)."""

from __future__ import annotations

import os
import sys
from types import ModuleType

PURE = os.environ.get("MQFS_PURE_PYTHON", "") not in ("", "0")

_said = False


def _load() -> ModuleType | None:
    if PURE:
        return None
    try:
        from . import _records  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _records


records = _load()


def say_if_missing() -> None:
    """One line on stderr, once per process, when the C encoder was not built (not when
    MQFS_PURE_PYTHON asked for the Python codec): puts still work, at about half the speed."""
    global _said
    if records is None and not PURE and not _said:
        _said = True
        print("mqfs: warning: the C record encoder (mqfs.store.format._records) is not built: "
              "puts run in Python; run scripts/setup (needs gcc, python3-dev, libxxhash-dev, "
              "zlib1g-dev)", file=sys.stderr)
