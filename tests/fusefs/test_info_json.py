"""`mqfs info --json`: a store's state for scripts and monitoring, without a mount, read
through jq as a script would, on a closed, a mounted and a broker-written store."""

from __future__ import annotations

import json

from mqfs.store import Message, MessageStore, StoreConfig
from tests.fusefs.helpers import MQFS, mounted, needs_fuse, sh
from tests.store.helpers import file_hashes, small_config
from tests.store.test_broker_stores import _broker_workload, broker_store

CMD = " ".join(MQFS)
T0 = 1_790_000_000_000


def _info(root: str) -> dict:
    return json.loads(sh(f"{CMD} info --json {root}").stdout)


def _store(root: str) -> dict[tuple[str, int], list[int]]:
    """Messages a second apart on two queues; each queue's record sizes."""
    sizes: dict[tuple[str, int], list[int]] = {}
    with MessageStore(root, small_config()) as s:
        for i in range(50):
            s.clock = lambda i=i: T0 + 1000 * i
            r = s.put(Message.create("Orders", b"x" * i, queue_id=i % 2))
            sizes.setdefault(("Orders", i % 2), []).append(r.size)
        s.create_topic("Empty", 1)
        s.commit_offset("billing", "Orders", 0, 10)
        s.commit_offset("billing", "Orders", 1, 25)  # all consumed
        s.commit_offset("audit", "Orders", 1, 0)
    return sizes


def test_queues_groups_and_lag_as_json(tmp_path):
    root = str(tmp_path / "s")
    sizes = _store(root)
    before = file_hashes(root)
    state = _info(root)
    assert file_hashes(root) == before  # a read-only open: nothing written
    queues = {(q["topic"], q["queue_id"]): q for q in state["queues"]}
    assert queues[("Orders", 0)] == {
        "topic": "Orders", "queue_id": 0, "min_offset": 0, "max_offset": 25, "count": 25,
        "first_store_timestamp": T0, "last_store_timestamp": T0 + 48_000,
        "record_bytes": sum(sizes[("Orders", 0)])}
    assert queues[("Orders", 1)]["first_store_timestamp"] == T0 + 1000
    assert queues[("Empty", 0)]["count"] == 0 and queues[("Empty", 0)]["record_bytes"] == 0
    assert sorted((g["group"], g["queue_id"], g["lag"]) for g in state["groups"]) == \
        [("audit", 1, 25), ("billing", 0, 15), ("billing", 1, 0)]
    assert (state["messages"], state["lag"], state["clean_close"], state["mounted_on"]) == \
        (50, 40, True, None)
    # the shell way: what monitoring would graph
    assert sh(f"{CMD} info --json {root} | jq '[.groups[] | select(.group == \"billing\") "
              "| .lag] | add'").stdout == b"15\n"


@needs_fuse
def test_a_mounted_store_shows_what_the_daemon_wrote(tmp_path):
    root, mnt = str(tmp_path / "s"), str(tmp_path / "mnt")
    _store(root)
    with mounted(root, mnt):
        sh(f"echo more > {mnt}/topics/Orders/0/append && echo 12 > {mnt}/groups/billing/Orders/0")
        # the mount point, or a path in the mount, names its store; the mount is flushed
        # first, so what the daemon holds in memory (units, group offsets) is counted
        state = _info(f"{mnt}/topics/Orders")
        assert _info(mnt) == state == _info(root)
        assert state["mounted_on"] == mnt
        q0 = next(q for q in state["queues"] if (q["topic"], q["queue_id"]) == ("Orders", 0))
        assert q0["count"] == 26
        billing0 = next(g for g in state["groups"] if (g["group"], g["queue_id"]) == ("billing", 0))
        assert (billing0["committed_offset"], billing0["lag"]) == (12, 14)


def test_a_broker_store(tmp_path):
    root = str(tmp_path / "store")
    broker_store(root, _broker_workload)
    state = _info(root)
    orders = [q for q in state["queues"] if q["topic"] == "Orders"]
    assert [(q["queue_id"], q["count"]) for q in orders] == [(0, 3)]
    assert state["flavor"] == "rocketmq" and state["groups"] == []
    with MessageStore(root, StoreConfig(read_only=True), create=False) as s:
        assert state["messages"] == sum(s.max_offset(t, q) - s.min_offset(t, q)
                                        for t in s.topics() for q in s.queue_ids(t))


def test_a_store_a_broker_is_writing_counts_what_it_acknowledged(tmp_path):
    """A broker-like writer (no lock taken from it) stopped after message 50, then finishing:
    info --json counts the messages it acknowledged each time, as dump does, and the queue's
    last store time moves on; neither changes a byte of the store."""
    import subprocess
    import sys

    from tests.store.helpers import REPO

    root = str(tmp_path / "store")
    writer = subprocess.Popen([sys.executable, "-m", "tests.store.live_writer", root, "80", "500",
                               str(32 << 10), "pause50"], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdin is not None
        assert writer.stdout.readline() == "ready\n"
        while writer.stdout.readline().split()[1] != "50":
            pass
        before = file_hashes(root)
        paused = _info(root)
        assert file_hashes(root) == before
        assert paused["messages"] == 51 == int(sh(f"{CMD} dump {root} --count").stdout)
        writer.stdin.write("go\n")
        writer.stdin.flush()
        assert writer.wait() == 0
        done = _info(root)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert done["messages"] == 80
    [q0] = [q for q in done["queues"] if q["topic"] == "Live"]
    [p0] = [q for q in paused["queues"] if q["topic"] == "Live"]
    assert q0["last_store_timestamp"] > p0["last_store_timestamp"]
