"""Crash-safe JSON files (config/*.json, mqfs.json): temp file, fsync, rename, directory fsync,
previous version kept as .bak. Reads accept RocketMQ's fastjson output (unquoted integer keys)
and fall back to .bak when the main file is empty or unparseable."""

from __future__ import annotations

import json
import os
import re
import shutil

from .errors import StoreFormatError
from .mapped_file import fsync_dir

_UNQUOTED_INT_KEY = re.compile(r'([{,]\s*)(-?\d+)(\s*:)')


def _parse(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(_UNQUOTED_INT_KEY.sub(r'\1"\2"\3', text))


def read_json(path: str, default=None):
    """The parsed file, its .bak when the file is damaged, or default when neither exists."""
    errors = []
    for candidate in (path, path + ".bak"):
        try:
            with open(candidate, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            continue
        if not text.strip():
            errors.append(f"{candidate} is empty")
            continue
        try:
            return _parse(text)
        except (json.JSONDecodeError, ValueError) as exc:
            errors.append(f"{candidate}: {exc}")
    if errors:
        raise StoreFormatError("cannot read " + "; ".join(errors))
    return default


def write_json(path: str, data) -> None:
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    if os.path.exists(path):
        shutil.copy2(path, path + ".bak")
    os.replace(tmp, path)
    fsync_dir(directory)
