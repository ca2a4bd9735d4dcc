"""mqfs.json: format version, flavor, whole-record checksums and file sizes of a store, and
its identity (`store_id`, random, made with the store): the records mqfs keeps beside the
files (config/dispatchState.json, config/queueEnds.log, repair-journal.json) carry it, so one
restored from another store is known as another store's and vouches for nothing.

A directory holding RocketMQ files and no manifest was written by Apache RocketMQ: it opens
with the CommitLog file size found on disk and the flavor its records' checksums show. The
records are asked on every open: a manifest that was damaged, deleted or edited must never make
intact records look corrupt (and get cut); a read-write open refuses instead, with the fix.
"""

from __future__ import annotations

import errno
import os
import stat

from ..config import StoreConfig
from ..errors import StoreFormatError, UnsupportedFeature
from ..files.index_layout import index_file_size
from ..files.json_file import read_json, write_json
from ..slotted import Slotted
from . import features
from .flavor_probe import probe

FORMAT_VERSION = 1
MANIFEST = "mqfs.json"
_SIZE_FIELDS = ("commitlog_file_size", "consume_queue_units", "index_slots", "index_entries")
_ID_DIGITS = 32  # hex digits of a store id (128 random bits)


def manifest_path(root: str) -> str:
    return os.path.join(root, MANIFEST)


def is_store(root: str) -> bool:
    """Whether `root` holds a store: mqfs.json, or a commitlog/ directory (a broker's), or a
    DLedger directory (a broker's with enableDLegerCommitLog, which `inspect`
    refuses to read). PermissionError when this user may not look inside `root`: a store
    another user keeps is not "no store" (whose advice, `mqfs init`, would be wrong)."""
    for path, want_dir in ((manifest_path(root), False), (os.path.join(root, "commitlog"), True)):
        try:
            st = os.stat(path)
        except PermissionError:
            raise PermissionError(errno.EACCES, "permission denied: this user may not read "
                                  "the store's directory", root) from None
        except OSError:
            continue
        if not want_dir or stat.S_ISDIR(st.st_mode):
            return True
    return bool(features.dledger_dirs(root))


class StoreFormat(Slotted):
    __slots__ = __match_args__ = ("config", "problem", "rewrite", "store_id")

    def __init__(self, config: StoreConfig, problem: str | None = None, rewrite: bool = False,
                 store_id: str | None = None) -> None:
        self.config = config  # what to read the store with (the records' flavor where they tell)
        self.problem = problem  # why a read-write open must refuse; None when all agrees
        self.rewrite = rewrite  # the manifest is damaged or wrong: `repair` writes it again
        self.store_id = store_id  # None: a broker's store, or one an older mqfs made


def new_store_id() -> str:
    """A store's identity: random, so two stores never share one (copies of one store do)."""
    import secrets  # hashlib and hmac: a reader of a store never makes one

    return secrets.token_hex(_ID_DIGITS // 2)


def checked_store_id(value: object) -> str | None:
    """A store id read from a file (None: the file has none); ValueError when malformed."""
    if value is None:
        return None
    if not (isinstance(value, str) and len(value) == _ID_DIGITS and
            all(c in "0123456789abcdef" for c in value)):
        raise ValueError(f"has the store id {str(value)[:40]!r}, not {_ID_DIGITS} hex digits")
    return value


def store_id(root: str) -> str | None:
    """The identity mqfs.json gives the store; None when it has none, or no readable manifest
    (a broker's store, an older mqfs's, a damaged one a read-write open refuses)."""
    try:
        return _parse_manifest(manifest_path(root), StoreConfig())[1]
    except (StoreFormatError, RecursionError, ValueError, OSError):
        return None


def _parse_manifest(path: str, config: StoreConfig) -> tuple[StoreConfig, str | None]:
    data = read_json(path)
    if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION:
        raise StoreFormatError(f"it is not a format-{FORMAT_VERSION} manifest")
    try:
        fields = {k: data[k] for k in _SIZE_FIELDS}
        flavor, record_crc = data["flavor"], data.get("record_crc", False)
    except KeyError as exc:
        raise StoreFormatError(f"field {exc} is missing") from None
    for name, value in fields.items():
        if type(value) is not int or value <= 0:
            raise StoreFormatError(f"field {name!r} is not a positive integer")
    if flavor not in ("xxhash", "rocketmq") or type(record_crc) is not bool:
        raise StoreFormatError("field 'flavor' or 'record_crc' has a bad value")
    try:
        found_id = checked_store_id(data.get("store_id"))
    except ValueError as exc:
        raise StoreFormatError(f"field 'store_id' {exc}") from None
    return config.replace(flavor=flavor, record_crc=record_crc, **fields), found_id


def inspect(root: str, config: StoreConfig | None = None, dledger: bool = False) -> StoreFormat:
    """How to read `root`: the manifest's format fields over `config`, checked against what
    the records show. Never writes. A store no reader here reads as its consumers do
    (`features.unreadable`; `dledger`: the caller reads a DLedger CommitLog) is refused:
    UnsupportedFeature."""
    why = features.unreadable(root, dledger)
    if why is not None:
        raise UnsupportedFeature(why)
    config = config or StoreConfig()
    path = manifest_path(root)
    found = probe(root)
    if not os.path.exists(path):
        inferred = _infer_broker_config(root, config, found.flavor, found.record_crc)
        return StoreFormat(inferred)
    try:
        parsed, found_id = _parse_manifest(path, config)
    except (StoreFormatError, RecursionError, ValueError) as exc:
        inferred = _infer_broker_config(root, config, found.flavor, found.record_crc)
        return StoreFormat(inferred, f"{path} is damaged ({exc}); nothing was changed: restore "
                           f"it, or run `mqfs repair {root}` to write it again from the files "
                           f"(the records say flavor {inferred.flavor})", rewrite=True)
    if found.contradicts(parsed.flavor):
        return StoreFormat(
            parsed.replace(flavor=found.flavor or parsed.flavor, record_crc=found.record_crc),
            f"{path} says flavor {parsed.flavor}, but the checksums of {found.sampled} CommitLog "
            f"records are {found.flavor}; nothing was changed: restore the manifest, or run "
            f"`mqfs repair {root}` to write it again from the records", rewrite=True,
            store_id=found_id)
    return StoreFormat(parsed, store_id=found_id)


def file_sizes(config: StoreConfig) -> dict[str, int]:
    """Bytes of one CommitLog file, one IndexFile and one ConsumeQueue file of a store made
    with this config: what `mqfs init` tells a user about disk use."""
    from ..files.consume_queue import UNIT_SIZE  # with the queue's code: a reader needs neither

    return {"commitlog": config.commitlog_file_size,
            "index": index_file_size(config.index_slots, config.index_entries),
            "consume_queue": config.consume_queue_units * UNIT_SIZE}


def read_manifest(root: str, config: StoreConfig | None = None, dledger: bool = False) -> StoreConfig:
    """The config to read `root` with (readers: the records' flavor wins over a bad manifest);
    `dledger`: the reader reads a DLedger CommitLog (`inspect`)."""
    return inspect(root, config, dledger).config


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


def _infer_broker_config(root: str, config: StoreConfig, flavor: str | None,
                         record_crc: bool) -> StoreConfig:
    """Sizes of a store a RocketMQ broker wrote, read off its files (the broker keeps them in
    its own config), and the flavor its records show (rocketmq when they tell nothing).
    IndexFiles are assumed to keep RocketMQ's 4 entries per slot."""
    commitlog = _one_size(features.dledger_data(root) or os.path.join(root, "commitlog"), 20)
    if commitlog is None:
        return config
    found: dict = {"flavor": flavor or "rocketmq", "record_crc": record_crc,
                   "commitlog_file_size": commitlog}
    cq = _one_size(os.path.join(root, "consumequeue"), 20)
    if cq is not None:
        found["consume_queue_units"] = cq // 20
    index = _one_size(os.path.join(root, "index"), 17)
    if index is not None and (index - 40) % 84 == 0:
        found["index_slots"] = (index - 40) // 84
        found["index_entries"] = 4 * found["index_slots"]
    return config.replace(**found)


def write_manifest(root: str, config: StoreConfig, store_id: str | None) -> None:
    """Write mqfs.json (crash-safe: temp file, fsync, rename); `store_id` None only when
    the store's is unknown (a damaged manifest rewritten: the next read-write open gives
    it one)."""
    data: dict = {"format": FORMAT_VERSION, "flavor": config.flavor, "record_crc": config.record_crc}
    data.update({k: getattr(config, k) for k in _SIZE_FIELDS})
    if store_id is not None:
        data["store_id"] = store_id
    write_json(manifest_path(root), data)
