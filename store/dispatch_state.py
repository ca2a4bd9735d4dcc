"""What a clean close leaves for the next open to check: every queue's entry count and every
IndexFile's entry count. Normal recovery trusts the ConsumeQueue and IndexFile files, and
nothing in RocketMQ's format records how many entries a queue had, so a file deleted while the
store was closed would otherwise go unnoticed. Only read after a clean close."""

from __future__ import annotations

import os

from .json_file import read_json, write_json

NAME = "dispatchState.json"


def _path(root: str) -> str:
    return os.path.join(root, "config", NAME)


def save(store) -> None:
    queues: dict[str, dict[str, int]] = {}
    for (topic, qid), cq in store.consume_queues.items():
        queues.setdefault(topic, {})[str(qid)] = cq.max_offset
    index = {os.path.basename(f.path): f.index_count for f in store.index.files}
    write_json(_path(store.root), {"queues": queues, "indexFiles": index})


def lost_since_close(store) -> tuple[list[tuple[str, int]], bool]:
    """Queues with fewer entries than at the last clean close, and whether IndexFiles went."""
    try:
        state = read_json(_path(store.root))
    except Exception:  # a damaged state file only costs the check
        return [], False
    if not isinstance(state, dict):
        return [], False
    short = []
    for topic, queues in state.get("queues", {}).items():
        for qid, count in queues.items():
            cq = store.consume_queues.get((topic, int(qid)))
            if (cq.max_offset if cq is not None else 0) < int(count):
                short.append((topic, int(qid)))
    present = {os.path.basename(f.path): f.index_count for f in store.index.files}
    recorded = state.get("indexFiles", {})
    index_lost = any(present.get(name, 0) < int(count) for name, count in recorded.items())
    return short, index_lost
