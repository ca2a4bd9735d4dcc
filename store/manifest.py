"""mqfs.json: format version, flavor and file sizes of a store. A directory holding RocketMQ
files and no manifest was written by Apache RocketMQ: it opens with the rocketmq flavor and
the CommitLog file size found on disk."""

from __future__ import annotations

import os
from dataclasses import replace

from .config import StoreConfig
from .errors import StoreFormatError
from .json_file import read_json, write_json

FORMAT_VERSION = 1
MANIFEST = "mqfs.json"
_SIZE_FIELDS = ("commitlog_file_size", "consume_queue_units", "index_slots", "index_entries")


def manifest_path(root: str) -> str:
    return os.path.join(root, MANIFEST)


def is_store(root: str) -> bool:
    return os.path.exists(manifest_path(root)) or os.path.isdir(os.path.join(root, "commitlog"))


def read_manifest(root: str, config: StoreConfig | None = None) -> StoreConfig:
    """The config to open `root` with: the manifest's format fields over `config`."""
    config = config or StoreConfig()
    data = read_json(manifest_path(root))
    if data is None:
        return _infer_broker_config(root, config)
    if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION:
        raise StoreFormatError(f"{manifest_path(root)} has an unknown format (want {FORMAT_VERSION})")
    try:
        fields = {k: int(data[k]) for k in _SIZE_FIELDS}
        return replace(config, flavor=str(data["flavor"]), **fields)
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreFormatError(f"{manifest_path(root)} is missing or has a bad field: {exc}") from None


def _file_sizes(directory: str, name_len: int) -> set[int]:
    sizes: set[int] = set()
    for dirpath, _, names in os.walk(directory):
        sizes.update(os.path.getsize(os.path.join(dirpath, n)) for n in names
                     if len(n) == name_len and n.isdigit())
    return sizes - {0}


def _one_size(directory: str, name_len: int) -> int | None:
    sizes = _file_sizes(directory, name_len)
    if len(sizes) > 1:
        raise StoreFormatError(f"files of different sizes {sorted(sizes)} under {directory}")
    return sizes.pop() if sizes else None


def _infer_broker_config(root: str, config: StoreConfig) -> StoreConfig:
    """Sizes of a store a RocketMQ broker wrote, read off its files (the broker keeps them in
    its own config). IndexFiles are assumed to keep RocketMQ's 4 entries per slot."""
    commitlog = _one_size(os.path.join(root, "commitlog"), 20)
    if commitlog is None:
        return config
    found = {"flavor": "rocketmq", "commitlog_file_size": commitlog}
    cq = _one_size(os.path.join(root, "consumequeue"), 20)
    if cq is not None:
        found["consume_queue_units"] = cq // 20
    index = _one_size(os.path.join(root, "index"), 17)
    if index is not None and (index - 40) % 84 == 0:
        found["index_slots"] = (index - 40) // 84
        found["index_entries"] = 4 * found["index_slots"]
    return replace(config, **found)


def write_manifest(root: str, config: StoreConfig) -> None:
    data = {"format": FORMAT_VERSION, "flavor": config.flavor}
    data.update({k: getattr(config, k) for k in _SIZE_FIELDS})
    write_json(manifest_path(root), data)
