"""Topic table (config/topics.json) and consumer offsets (config/consumerOffset.json),
in the shapes RocketMQ's TopicConfigManager and ConsumerOffsetManager persist."""

from __future__ import annotations

import os
import re
import threading
import time

from .codec import validate_topic
from .errors import InvalidMessage
from .json_file import read_json, write_json

_GROUP_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]{1,255}")


def validate_group(group: str) -> None:
    if not _GROUP_PATTERN.fullmatch(group):
        raise InvalidMessage(f"consumer group {group!r} must be 1-255 letters, digits or %|_-")


def _data_version(counter: int) -> dict:
    return {"counter": counter, "stateVersion": 0, "timestamp": int(time.time() * 1000)}


class TopicTable:
    """Topics and their queue counts."""

    def __init__(self, root: str):
        self.path = os.path.join(root, "config", "topics.json")
        self.lock = threading.Lock()
        data = read_json(self.path, {}) or {}
        table = data.get("topicConfigTable", {})
        self.queues: dict[str, int] = {
            name: int(cfg.get("writeQueueNums", cfg.get("readQueueNums", 1)))
            for name, cfg in table.items()
        }
        self._counter = int(data.get("dataVersion", {}).get("counter", 0))

    def ensure(self, topic: str, queue_id: int, persist: bool = True) -> bool:
        """Make sure topic exists with at least queue_id+1 queues; True when it changed."""
        validate_topic(topic)
        with self.lock:
            if self.queues.get(topic, 0) > queue_id:
                return False
            self.queues[topic] = queue_id + 1
        if persist:
            self.persist()
        return True

    def persist(self) -> None:
        with self.lock:
            self._counter += 1
            table = {
                name: {"topicName": name, "readQueueNums": n, "writeQueueNums": n, "perm": 6,
                       "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False,
                       "attributes": {}}
                for name, n in sorted(self.queues.items())
            }
            data = {"topicConfigTable": table, "dataVersion": _data_version(self._counter)}
        write_json(self.path, data)


class ConsumerOffsets:
    """topic@group -> queue id -> next offset to consume."""

    def __init__(self, root: str):
        self.path = os.path.join(root, "config", "consumerOffset.json")
        self.lock = threading.Lock()
        data = read_json(self.path, {}) or {}
        self.table: dict[str, dict[int, int]] = {
            tg: {int(q): int(o) for q, o in queues.items()}
            for tg, queues in data.get("offsetTable", {}).items()
        }

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        validate_group(group)
        validate_topic(topic)
        if offset < 0 or queue_id < 0:
            raise InvalidMessage(f"offset {offset} and queue {queue_id} must not be negative")
        with self.lock:
            self.table.setdefault(f"{topic}@{group}", {})[queue_id] = offset
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
            data = {"offsetTable": {tg: {str(q): o for q, o in sorted(qs.items())}
                                    for tg, qs in sorted(self.table.items())}}
        write_json(self.path, data)
