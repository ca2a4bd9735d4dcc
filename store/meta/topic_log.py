"""config/topics.log: the topics created since topics.json was last written, one JSON line each
({"topic": name, "queues": count}), appended and synced per change.

Rewriting topics.json for every new topic made the 100,000th topic cost 100,000 times the
first. A line costs the same whatever the table holds; the log is folded into topics.json (and
removed) when it grows as long as the table, and at every close, so a closed store's
topics.json is complete, in the shape RocketMQ reads. Replaying is idempotent (a count only
grows), so a crash between writing topics.json and removing the log loses nothing; a torn last
line (a crash mid-append) held a change that was never acknowledged and is skipped.
"""

from __future__ import annotations

import json
import os

from ..errors import InvalidMessage, StoreFormatError
from ..files import safefs
from ..format.message import validate_stored_topic

NAME = "topics.log"
_FIX = ("move it aside: topics that hold messages are derived again from consumequeue/ at "
        "the next open")


def log_path(root: str) -> str:
    return os.path.join(root, "config", NAME)


def replay(path: str, queues: dict[str, int], max_queues: int) -> int:
    """Apply the log's lines to `queues` (topic -> count); how many lines it holds."""
    try:
        raw = safefs.read_bytes(path)
    except FileNotFoundError:
        return 0
    lines = raw.split(b"\n")
    complete = lines[:-1]  # after the last newline: a torn line, or nothing
    for i, line in enumerate(complete):
        try:
            item = json.loads(line)
            topic, n = item["topic"], item["queues"]
            validate_stored_topic(topic)
            if type(n) is not int or not 0 <= n <= max_queues:
                raise ValueError(f"queue count {n!r}")
        except (ValueError, TypeError, KeyError, InvalidMessage) as exc:
            raise StoreFormatError(f"{path} line {i + 1} is not a topic line ({exc}); {_FIX}") \
                from None
        queues[topic] = max(queues.get(topic, 0), n)
    return len(complete)


def append(path: str, changes: list[tuple[str, int]]) -> None:
    """Append one line per (topic, queue count) and make them durable."""
    data = "".join(json.dumps({"topic": t, "queues": n}) + "\n" for t, n in changes).encode()
    created = not os.path.lexists(path)
    if created:  # a broker's store may have no config/ yet (the broker makes it at its first save)
        safefs.makedirs(os.path.dirname(path))
    fd = safefs.open_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fdatasync(fd)
    finally:
        os.close(fd)
    if created:
        safefs.fsync_dir(os.path.dirname(path))


def remove(path: str) -> None:
    """Drop the log once topics.json holds everything in it."""
    if os.path.lexists(path):
        safefs.unlink(path)
        safefs.fsync_dir(os.path.dirname(path))
