"""`mqfs dump` on a store RocketMQ itself cut (tests/store/java_stores/truncated.tar.gz: its
recovery stopped at a torn record and left valid records after it): every selection kind
prints what the broker served (Java's answers), none of the records past the cut
(`served_end`), with no damage reported, and no byte of the store changes; likewise on the
store the broker then wrote to over part of what it cut (resumed.tar.gz)."""

from __future__ import annotations

import json

import pytest

from mqfs.store import MessageStore, StoreConfig
from mqfs.store.integrity.served_end import served_end
from mqfs.store.offline.views import store_layout
from tests.fusefs.helpers import mqfs
from tests.store.java_stores import DELAY_LEVELS, answers, consumer_view, snapshot, unpack


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = unpack("truncated", str(tmp_path_factory.mktemp("truncated")))
    return root, snapshot(root)


def brokers(kind: str = "truncated") -> dict[tuple[str, int, int], dict]:
    """(topic, queue, offset) -> what the broker's consumer got there."""
    out = {}
    for queue in answers(kind)["queues"]:
        for answer in queue["messages"]:
            seen = consumer_view(queue, answer)
            out[(seen["topic"], seen["queue"], seen["offset"])] = seen
    return out


def dumped(root: str, *args: str) -> dict[tuple[str, int, int], dict]:
    done = mqfs("dump", root, "-f", "json", *args)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    out = {(j["topic"], j["queue_id"], j["queue_offset"]): j for j in lines}
    assert len(out) == len(lines)
    return out


def test_the_whole_store_is_what_the_broker_served(store):
    root, before = store
    want = brokers()
    got = dumped(root)
    assert sorted(got) == sorted(want)
    for key, j in got.items():
        assert j["commitlog_offset"] == want[key]["commitlog"], key
    assert ("Orders", 0, 40) not in got and ("Timed", 0, 2) not in got  # past the cut
    assert mqfs("dump", root, "-c").stdout == f"{len(want)}\n"
    assert snapshot(root) == before


@pytest.mark.parametrize("args", [["-t", "Orders"], ["-t", "Timed"], ["-t", "Timed,Orders", "-q", "0"],
                                  ["-q", "0"], ["--tag", "T0"], ["-k", "k0"], ["--since", "0"],
                                  ["--until", "2100-01-01T00:00Z"], ["--from-offset", "1"],
                                  ["-e", "."], ["-p", "region"], ["--each", "100"]])
def test_each_selection_kind_is_what_the_broker_served(store, args):
    root, before = store
    want = brokers()
    got = dumped(root, *args)
    assert got and set(got) <= set(want), args
    for key, j in got.items():
        assert j["commitlog_offset"] == want[key]["commitlog"], (args, key)
    if args in (["-t", "Timed"], ["-q", "0"], ["--since", "0"], ["-e", "."], ["--each", "100"]):
        chosen = {k for k in want if args != ["-t", "Timed"] or k[0] == "Timed"}
        assert set(got) == {k for k in chosen if args != ["-q", "0"] or k[1] == 0}, args
    count = mqfs("dump", root, "-c", *args)
    assert count.stdout == f"{len(got)}\n" and count.stderr == "", args
    assert snapshot(root) == before


@pytest.mark.parametrize("args", [[], ["-t", "Timed"], ["-t", "Orders", "-q", "0"], ["-k", "k0"], ["-e", "."]])
def test_the_store_the_broker_wrote_on_is_what_it_served(tmp_path, args):
    """Orders/0 offset 40 is the broker's new message (not the older one past its writes);
    Timed/0's unit 1, dropped by its recovery, points at that record and is not served."""
    root = unpack("resumed", str(tmp_path))
    before = snapshot(root)
    want = {k: v for k, v in brokers("resumed").items()
            if args[:1] != ["-t"] or (k[0] == args[1] and (len(args) == 2 or k[1] == 0))}
    got = dumped(root, *args)
    if args[:1] == ["-k"]:
        assert got and set(got) <= set(want)
    else:
        assert sorted(got) == sorted(want), args
    for key, j in got.items():
        assert j["commitlog_offset"] == want[key]["commitlog"], (args, key)
    assert snapshot(root) == before


@pytest.mark.parametrize("kind, end", [("truncated", 65873), ("resumed", 66070), ("clean", None)])
def test_the_walks_end_is_the_read_only_opens(tmp_path, kind, end):
    """One rule: where the walking readers stop (`served_end`) is where the read-only open
    ends the log (after the broker's recovery cut, or where its later writes end); no end is
    imposed on a store no broker cut."""
    root = unpack(kind, str(tmp_path))
    assert served_end(store_layout(root)) == end
    with MessageStore(root, StoreConfig(read_only=True, message_delay_level=DELAY_LEVELS), create=False) as s:
        assert end is None or s.commitlog.max_offset == end
