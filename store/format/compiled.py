"""The put path's C modules (setup.py builds them, optional): imported once, here, so every
user agrees on one answer. Each name is the module or None, None when it was not built (no
compiler or -dev packages at install) or when MQFS_PURE_PYTHON=1 forces the Python codec,
which stays the reference the C code is held to byte for byte (tests run both)."""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

PURE = os.environ.get("MQFS_PURE_PYTHON", "") not in ("", "0")

_said = False


def _load(name: str) -> ModuleType | None:
    if PURE:
        return None
    try:
        return importlib.import_module(name, __package__)
    except ImportError:
        return None


records = _load("._records")  # CommitLog records (store/format/_records.c)
dispatch = _load("..files._dispatch")  # IndexFile entries (store/files/_dispatch.c)
jsonl = _load("._jsonl")  # JSON lines of the commonest shapes (store/format/_jsonl.c)
dump = _load("..offline._dump")  # mqfs dump's common records (store/offline/_dump.c)


def say_if_missing() -> None:
    """One line on stderr, once per process, when a C module was not built (not when
    MQFS_PURE_PYTHON asked for the Python codec): puts still work, at about half the speed."""
    global _said
    missing = [name for name, module in (("mqfs.store.format._records", records),
                                         ("mqfs.store.files._dispatch", dispatch),
                                         ("mqfs.store.format._jsonl", jsonl)) if module is None]
    if missing and not PURE and not _said:
        _said = True
        print(f"mqfs: warning: the put path's C modules ({', '.join(missing)}) are not built: "
              "puts run in Python; run scripts/setup (needs gcc, python3-dev, libxxhash-dev, "
              "zlib1g-dev)", file=sys.stderr)
