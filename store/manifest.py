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
        commitlog = os.path.join(root, "commitlog")
        sizes = {os.path.getsize(os.path.join(commitlog, n))
                 for n in (os.listdir(commitlog) if os.path.isdir(commitlog) else [])
                 if len(n) == 20 and n.isdigit()} - {0}
        if not sizes:
            return config
        if len(sizes) > 1:
            raise StoreFormatError(f"CommitLog files of different sizes {sorted(sizes)} in {commitlog}")
        return replace(config, flavor="rocketmq", commitlog_file_size=sizes.pop())
    if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION:
        raise StoreFormatError(f"{manifest_path(root)} has an unknown format (want {FORMAT_VERSION})")
    try:
        fields = {k: int(data[k]) for k in _SIZE_FIELDS}
        return replace(config, flavor=str(data["flavor"]), **fields)
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreFormatError(f"{manifest_path(root)} is missing or has a bad field: {exc}") from None


def write_manifest(root: str, config: StoreConfig) -> None:
    data = {"format": FORMAT_VERSION, "flavor": config.flavor}
    data.update({k: getattr(config, k) for k in _SIZE_FIELDS})
    write_json(manifest_path(root), data)
