"""Topic table (config/topics.json) and consumer offsets (config/consumerOffset.json),
in the shapes RocketMQ's TopicConfigManager and ConsumerOffsetManager persist.

Both files are checked on load: a shape we never write (and RocketMQ never writes) is refused
with one line naming the file, because a wrong queue count or offset would be served as truth
and a huge queue count makes every listing of the topic walk that many queues."""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import InvalidMessage, StoreFormatError
from ..files import safefs
from ..files.json_file import parse_text, read_json, write_json, write_text
from ..format.message import validate_stored_topic
from . import json_splice, topic_log

log = logging.getLogger(__name__)
MAX_QUEUES = 1024  # queues per topic, as `mkdir` under /topics/<t> and create_topic allow
_MAX_OFFSET = (1 << 63) - 1
_GROUP_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]{1,255}")
_TOPICS_FIX = ("move it aside or delete it: topics that hold messages are derived again "
               "from consumequeue/ at the next open")
_OFFSETS_FIX = ("restore it from a backup or delete it: consumer groups then start again "
                "from each queue's first message")


def validate_group(group: str) -> None:
    if not _GROUP_PATTERN.fullmatch(group):
        raise InvalidMessage(f"consumer group {group!r} must be 1-255 letters, digits or %|_-")


_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
               int: "a number", float: "a number", type(None): "null"}


def json_object(value: Any, what: str) -> dict:
    """value if it is a JSON object; ValueError naming `what` otherwise."""
    if not isinstance(value, dict):
        raise ValueError(f"has {what} that is {_JSON_TYPES[type(value)]}, not an object")
    return value


def json_int(value: Any, what: str, low: int, high: int) -> int:
    """value if it is a whole number in [low, high]; ValueError naming `what` otherwise."""
    if type(value) is not int:  # bool is an int subclass; true is not a queue count
        raise ValueError(f"has {what} = {json.dumps(value)[:40]}, not a whole number")
    if not low <= value <= high:
        raise ValueError(f"has {what} = {value}, " + (f"below {low}" if value < low else
                                                      f"above {high}"))
    return value


def queue_id_key(key: str, what: str) -> int:
    """A queue id written as an object key ("0" or fastjson's unquoted 0)."""
    if not (key.isascii() and key.isdigit()):
        raise ValueError(f"has {what} {key!r}, not a queue id")
    return json_int(int(key), what, 0, MAX_QUEUES - 1)


def checked_name(check: Callable[[str], None], name: str) -> None:
    """check(name) for a name read from a file: ValueError (the file's damage) on refusal."""
    try:
        check(name)
    except InvalidMessage as exc:
        raise ValueError(f"has an invalid name ({exc})") from None


def _topics_shape(data: Any) -> tuple[dict[str, int], int, dict]:
    """Queue count per topic, the data version counter (checked) and the document itself
    (kept whole: a write changes only what changed) of a topics.json document."""
    json_object(data, "a top level")
    table = json_object(data.get("topicConfigTable", {}), '"topicConfigTable"')
    queues: dict[str, int] = {}
    for name, cfg in table.items():
        checked_name(validate_stored_topic, name)
        json_object(cfg, f"topic {name!r}")
        counts = [json_int(cfg[field], f'{name!r} "{field}"', 0, MAX_QUEUES)
                  for field in ("writeQueueNums", "readQueueNums") if field in cfg]
        if not isinstance(cfg.get("topicName", name), str):
            raise ValueError(f'has {name!r} "topicName" that is not a string')
        queues[name] = max(counts, default=1)  # queues a consumer can read, even if not written
    version = json_object(data.get("dataVersion", {}), '"dataVersion"')
    counter = json_int(version.get("counter", 0), '"dataVersion" "counter"', 0, _MAX_OFFSET)
    return queues, counter, data


def _offsets_document(data: Any) -> tuple[dict[str, dict[int, int]], dict]:
    """_offsets_shape's table and the document itself (kept whole on write)."""
    return _offsets_shape(data), data


def _offsets_shape(data: Any) -> dict[str, dict[int, int]]:
    """topic@group -> queue -> offset of a consumerOffset.json document."""
    json_object(data, "a top level")
    table = json_object(data.get("offsetTable", {}), '"offsetTable"')
    out: dict[str, dict[int, int]] = {}
    for tg, queues in table.items():
        topic, at, group = tg.partition("@")
        if not at:
            raise ValueError(f"has the key {tg!r}, not topic@group")
        checked_name(validate_stored_topic, topic)
        checked_name(validate_group, group)
        json_object(queues, f"{tg!r}")
        out[tg] = {queue_id_key(q, f"{tg!r} queue"): json_int(o, f"{tg!r} queue {q} offset",
                                                               0, _MAX_OFFSET)
                   for q, o in queues.items()}
    return out


def _next_version(document: dict) -> dict:
    """The document's dataVersion moved on as RocketMQ's DataVersion.nextVersion does
    (counter + 1, timestamp now), its other fields kept."""
    version = dict(document.get("dataVersion") or {})
    version["counter"] = int(version.get("counter", 0)) + 1
    version.setdefault("stateVersion", 0)
    version["timestamp"] = int(time.time() * 1000)
    return version


def _new_topic_entry(name: str, queues: int) -> dict:
    """A topic mqfs makes, in the fields a broker's TopicConfig has."""
    return {"attributes": {}, "order": False, "perm": 6, "readQueueNums": queues,
            "topicFilterType": "SINGLE_TAG", "topicName": name, "topicSysFlag": 0,
            "writeQueueNums": queues}


class TopicTable:
    """Topics and their queue counts. topics.json is kept as it was read (every topic's
    perm, attributes and other fields, fields mqfs does not know, the order): a write changes
    only the topics mqfs made or grew. `keep_bak`: the file's .bak is the broker's own, left
    as it is (a store without mqfs.json); otherwise the previous version becomes the .bak."""

    def __init__(self, root: str, keep_bak: bool = False):
        self.root = root
        self.path = os.path.join(root, "config", "topics.json")
        self.lock = threading.Lock()
        self.keep_bak = keep_bak
        self.queues: dict[str, int]  # queue counts, as topics.json declares them
        self.queues, _, document = read_json(self.path, ({}, 0, {}), check=_topics_shape,
                                             fix=_TOPICS_FIX)
        # the document without its table, and the entries a write could not make again from
        # a name and a count (a broker's perm, attributes, ...): a table of topics all made
        # by mqfs costs nothing more than `queues`
        table = document.get("topicConfigTable") or {}
        self._document = {**document, "topicConfigTable": None}  # its place kept
        self._entries = {name: entry for name, entry in table.items()
                         if entry != _new_topic_entry(name, self.queues[name])}
        # a broker's file is changed in its own text (json_splice), when that text is the one read
        self._text = _broker_text(self.path, document) if keep_bak else None
        # changes since topics.json was written, in config/topics.log (see store/meta/topic_log.py)
        self.log_path = topic_log.log_path(root)
        self._logged = topic_log.replay(self.log_path, self.queues, MAX_QUEUES)
        self._batch: list[tuple[str, int, int | None]] | None = None
        self.found: dict[str, set[int]] = {}  # queues on disk that topics.json does not declare

    def ensure(self, topic: str, queue_id: int, persist: bool = True) -> bool:
        """Make sure topic exists with at least queue_id+1 queues (-1: the topic, with no
        queue yet, if it is new); True when it changed. A queue the table has costs a
        lookup (its name was checked when it came in): a put_batch over 80,000 queues asks
        80,000 times."""
        known = self.queues.get(topic)
        if known is not None and -1 <= queue_id < known:
            return False
        validate_stored_topic(topic)
        if not -1 <= queue_id < MAX_QUEUES:
            raise InvalidMessage(f"queue id {queue_id} of {topic} is not in 0..{MAX_QUEUES - 1}")
        with self.lock:
            if topic in self.queues and self.queues[topic] > queue_id:
                return False
            before = self.queues.get(topic)
            self.queues[topic] = queue_id + 1
            if persist and self._batch is not None:
                self._batch.append((topic, queue_id + 1, before))
                return True
        if persist:
            try:
                self._log([(topic, queue_id + 1)])
            except BaseException:  # not on disk: not visible either (mkdir -p took it as made)
                self._undo([(topic, before)])
                raise
        return True

    def _log(self, changes: list[tuple[str, int]]) -> None:
        """Make changes durable as lines of topics.log, folded into topics.json once the log
        is as long as the table: each change costs the same whatever the table holds."""
        topic_log.append(self.log_path, changes)
        self._logged += len(changes)
        if self._logged > max(1024, len(self.queues)):
            try:
                self.persist()
            except OSError as exc:  # the changes are durable in the log: fold them in later
                log.warning("could not fold %s into topics.json: %s", self.log_path, exc)

    def _undo(self, changes: list[tuple[str, int | None]]) -> None:
        """Take back changes that did not reach the disk (topic, count before or None)."""
        with self.lock:
            for topic, before in reversed(changes):
                if before is None:
                    self.queues.pop(topic, None)
                else:
                    self.queues[topic] = before

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Changes made inside are made durable together, in one append, at the end."""
        with self.lock:
            self._batch = []
        try:
            yield
        finally:
            with self.lock:
                changes, self._batch = self._batch or [], None
            if changes:
                try:
                    self._log([(t, n) for t, n, _ in changes])
                except BaseException:
                    self._undo([(t, before) for t, _, before in changes])
                    raise

    def compact(self) -> None:
        """Fold topics.log into topics.json (a clean close leaves topics.json complete)."""
        if self._logged or os.path.lexists(self.log_path):
            self.persist()

    def add_found(self, found: Iterable[tuple[str, int]]) -> None:
        """Add queues found as consumequeue/<topic>/<id> directories, in memory only and as
        they are: a store copied from a broker without its config/ (or one whose broker keeps
        metadata in RocksDB) has no topics.json, so its topics are known from the directories
        alone, and a broker's delay topic may hold queue 2 without queues 0 and 1."""
        for topic, qid in found:
            try:
                validate_stored_topic(topic)
                if not 0 <= qid < MAX_QUEUES:
                    raise InvalidMessage(f"queue id {qid} is not in 0..{MAX_QUEUES - 1}")
            except InvalidMessage as exc:
                raise StoreFormatError(
                    f"{os.path.join(self.root, 'consumequeue', topic, str(qid))} is not a queue "
                    f"this store can serve ({exc}); move it out of consumequeue/") from None
            if qid >= self.queues.get(topic, 0):
                self.found.setdefault(topic, set()).add(qid)

    def queue_ids(self, topic: str) -> list[int]:
        """The queues of a topic: those topics.json declares and those on disk."""
        ids = set(range(self.queues.get(topic, 0)))
        return sorted(ids.union(self.found.get(topic, ())))

    def has_topic(self, topic: str) -> bool:
        return topic in self.queues or topic in self.found

    def has(self, topic: str, queue_id: int) -> bool:
        return 0 <= queue_id < self.queues.get(topic, 0) or queue_id in self.found.get(topic, ())

    def counts(self) -> dict[str, int]:
        """Topic -> one past its highest queue id."""
        out = {t: max(ids) + 1 for t, ids in self.found.items()}
        for t, n in self.queues.items():
            out[t] = max(n, out.get(t, 0))
        return out

    def persist(self) -> None:
        """Write topics.json: the entries read, in their order, with the queue counts of the
        topics that grew; the topics made since after them; the document's other fields."""
        with self.lock:
            table = {}
            for name, n in self.queues.items():
                entry = self._entries.get(name)
                if entry is None:
                    table[name] = _new_topic_entry(name, n)
                elif n > max(entry.get("readQueueNums", 0), entry.get("writeQueueNums", 0)):
                    entry = self._entries[name] = {**entry, "readQueueNums": n, "writeQueueNums": n}
                    table[name] = entry
                else:
                    table[name] = entry
            self._document["dataVersion"] = _next_version(self._document)
            document = {**self._document, "topicConfigTable": table}
            text = None if self._text is None else json_splice.spliced_table(
                self._text, "topicConfigTable", table, document["dataVersion"])
            if text is not None and parse_text(text) != json.loads(json.dumps(document)):
                text = None  # a text the splice could not follow: the document whole
            if text is None:
                write_json(self.path, document, sort_keys=False, backup=not self.keep_bak)
            else:
                write_text(self.path, text, backup=not self.keep_bak)
            self._text = text
            topic_log.remove(self.log_path)
            self._logged = 0


class ConsumerOffsets:
    """topic@group -> queue id -> next offset to consume. consumerOffset.json is kept as it
    was read (dataVersion, groupTopicMap, every field and entry): a commit changes the
    offsets committed and moves dataVersion on. `keep_bak` as TopicTable's."""

    def __init__(self, root: str, keep_bak: bool = False):
        self.path = os.path.join(root, "config", "consumerOffset.json")
        self.lock = threading.Lock()
        self.keep_bak = keep_bak
        self.table: dict[str, dict[int, int]]
        self.table, document = read_json(self.path, ({}, {}), check=_offsets_document,
                                         fix=_OFFSETS_FIX)
        self._document = {**document, "offsetTable": None}  # `table` holds it, in its order
        # a broker's file is changed in its own text (json_splice), when that text is the one read
        self._text = _broker_text(self.path, document) if keep_bak else None

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.commit_queues(group, topic, {queue_id: offset})

    def commit_queues(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Commit several queues of a topic in one write of the file: all of them or none."""
        validate_group(group)
        validate_stored_topic(topic)
        for queue_id, offset in offsets.items():
            if not (0 <= offset <= _MAX_OFFSET and 0 <= queue_id < MAX_QUEUES):
                raise InvalidMessage(f"offset {offset} must not be negative and queue "
                                     f"{queue_id} must be in 0..{MAX_QUEUES - 1}")
        with self.lock:
            self.table.setdefault(f"{topic}@{group}", {}).update(offsets)
        self.persist()

    def get(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.table.get(f"{topic}@{group}", {}).get(queue_id)

    def groups(self) -> dict[str, dict[str, dict[int, int]]]:
        """group -> topic -> queue -> offset."""
        out: dict[str, dict[str, dict[int, int]]] = {}
        for tg, queues in self.table.items():
            topic, _, group = tg.rpartition("@")
            out.setdefault(group, {})[topic] = dict(queues)
        return out

    def persist(self) -> None:
        with self.lock:
            document = {**self._document, "offsetTable": {  # the file's order, new ones after
                tg: {str(q): o for q, o in qs.items()} for tg, qs in self.table.items()}}
            if "dataVersion" in document:
                document["dataVersion"] = self._document["dataVersion"] = _next_version(document)
            text = None if self._text is None else \
                json_splice.spliced(self._text, self.table, document.get("dataVersion"))
            if text is not None and parse_text(text) != json.loads(json.dumps(document)):
                text = None  # a text the splice could not follow: the document whole
            self._text = text
        if text is None:
            write_json(self.path, document, sort_keys=False, backup=not self.keep_bak)
        else:
            write_text(self.path, text, backup=not self.keep_bak)


def _broker_text(path: str, document: dict) -> str | None:
    """The file's text when it is what `document` was read from (not its .bak, not gone)."""
    try:
        text = safefs.read_bytes(path).decode()
        return text if parse_text(text) == document else None
    except (OSError, ValueError):
        return None
