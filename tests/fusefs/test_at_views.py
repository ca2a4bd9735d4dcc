"""Times in the tree through a real mount and the shell (issue 34): a topic's `at/<time>/`
(where a time falls on each queue), `at/<since>..<until>/` of a queue and of a topic (the
messages stored in a range), on a store mqfs wrote, on a broker's (every kind of queue) and
on one a broker is writing while the shell reads."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from mqfs.store import Message, MessageStore, StoreConfig
from tests import REPO
from tests.fusefs.helpers import SMALL, mounted, mqfs, needs_fuse, sh
from tests.waits import eventually

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z
SEC = 1000


def _orders(root: str) -> None:
    """Topic Orders: queue 0 a message a second from T0 (0..9), queue 1 one a second from
    T0 + 0.5 s (0..4), queue 2 none; tags even/odd."""
    mqfs("init", root, *SMALL)
    with MessageStore(root) as s:
        s.create_topic("Orders", 3)
        for at in range(0, 10 * SEC, SEC // 2):  # store times never go back: in time order
            q, i = at % SEC // (SEC // 2), at // SEC
            if q == 0 or i < 5:
                s.clock = lambda at=at: T0 + at
                s.put(Message.create("Orders", b"order %d-%d\n" % (q, i), queue_id=q,
                                     tags="odd" if i % 2 else "even"))


def iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


@needs_fuse
def test_where_a_time_falls_on_each_queue_and_what_a_range_holds(tmp_path):
    root, mnt = str(tmp_path / "s"), str(tmp_path / "mnt")
    _orders(root)
    with mounted(root, mnt):
        t = f"{mnt}/topics/Orders"

        def out(script: str) -> str:
            return sh(script).stdout.decode()

        def fails(script: str) -> bytes:
            proc = sh(script, check=False)
            assert proc.returncode != 0, script
            return proc.stderr

        assert out(f"ls {t}").split() == ["0", "1", "2"]  # at/ is not listed: globs find queues
        assert out(f"ls -A {t}/at") == ""
        # a time on every queue: one link per queue that has a message at or after it
        at3 = f"{t}/at/{iso(T0 + 3 * SEC)}"
        assert out(f"ls {at3}").split() == ["0", "1"]
        assert out(f"readlink {at3}/0 {at3}/1") == "../../0/3\n../../1/3\n"
        assert out(f"cat {at3}/*") == "order 0-3\norder 1-3\n"
        assert out(f"cd {t}/at/{T0 + 4 * SEC + 501} && ls && readlink 0") == "0\n../../0/5\n"
        assert out(f"for q in {t}/at/-200w/*; do readlink $q; done") == "../../0/0\n../../1/0\n"
        assert b"No such file" in fails(f"ls {t}/at/{T0 + 9 * SEC + 1}")  # after the newest
        assert b"No such file" in fails(f"stat {at3}/2")
        assert b"Invalid argument" in fails(f"ls {t}/at/soon")
        # a range: both ends inclusive, either left out
        q0 = f"{t}/0/at"
        assert out(f"ls {q0}/{T0 + 2 * SEC}..{T0 + 4 * SEC} | sort -n").split() == ["2", "3", "4"]
        assert out(f"cat {q0}/{iso(T0 + 8 * SEC)}../*") == "order 0-8\norder 0-9\n"
        assert out(f"ls {q0}/..{T0 + SEC} | sort -n").split() == ["0", "1"]
        assert out(f"readlink {q0}/{T0}..{T0}/0") == "../../0\n"
        assert out(f"ls -A {q0}/{T0 + 2001}..{T0 + 2999}") == ""  # none in it: empty, not gone
        assert out(f"find {q0}/{T0}.. -type l | wc -l").strip() == "10"
        assert out(f"ls {q0}/-200w..now | wc -l").strip() == "10"
        assert b"No such file" in fails(f"cat {q0}/{T0 + 2 * SEC}..{T0 + 4 * SEC}/5")
        assert b"Invalid argument" in fails(f"ls {q0}/{T0 + 4 * SEC}..{T0 + 2 * SEC}")
        assert b"Invalid argument" in fails(f"ls {q0}/-1h..later")
        # a topic's range: every queue's messages, named <q>:<offset>
        rng = f"{t}/at/{T0 + 3 * SEC}..{T0 + 4 * SEC}"
        assert out(f"ls {rng}").split() == ["0:3", "0:4", "1:3"]
        assert out(f"cat {rng}/*") == "order 0-3\norder 0-4\norder 1-3\n"
        assert out(f"readlink {rng}/1:3") == "../../1/3\n"
        assert out(f"ls {t}/at/{T0}.. | wc -l").strip() == "15"
        assert out(f"grep -l odd {t}/at/{T0}../* 2>/dev/null | wc -l").strip() == "0"  # bodies
        # relative names follow the clock and the store, never cached: what arrives now shows
        assert b"No such file" in fails(f"ls {t}/at/-1h")
        assert out(f"ls -A {t}/at/-1h..") == "" and out(f"ls -A {t}/2/at/-1h..") == ""
        sh(f"echo fresh > {t}/2/append")
        assert out(f"ls {t}/at/-1h") == "2\n"
        assert out(f"cat {t}/at/-1h/2 {t}/at/-1h../2:0 {t}/2/at/today../0") == "fresh\n" * 3
        assert out(f"ls {t}/2/at/-1h..") == "0\n"
    with MessageStore(root, StoreConfig(read_only=True), create=False) as s:  # nothing written
        assert [s.max_offset("Orders", q) for q in (0, 1, 2)] == [10, 5, 1]


def _truth(root: str, since: int, until: int) -> dict:
    """What at/ should show, from the messages' own store times (read through get_range,
    not the time search): per queue the first offset at or after `since`, and the offsets
    stored in [since, until]."""
    with MessageStore(root, StoreConfig(read_only=True), create=False) as s:
        out = {}
        for topic in s.topics():
            for q in s.queue_ids(topic):
                msgs = s.get_range(topic, q, s.min_offset(topic, q), 1 << 20, skip_damaged=True)
                first = next((m.queue_offset for m in msgs if m.store_timestamp >= since), None)
                inside = [m.queue_offset for m in msgs if since <= m.store_timestamp <= until]
                out[(topic, q)] = (first, inside)
        return out


def _layout(kind: str, root: str) -> None:
    from tests.store import broker_layouts
    from tests.store.broker_guard_layouts import layout_compaction
    from tests.store.test_broker_stores import _broker_workload, broker_store

    if kind == "transactions, delays, long topics":
        broker_store(root, _broker_workload)
    elif kind == "lmq":
        broker_layouts.lmq_store(root)
    elif kind == "batch cq":
        w = broker_layouts.BatchWorkload()
        broker_layouts.broker_store(root, w)
        w.write_units(root, 1 << 20)
    elif kind == "compaction":
        layout_compaction(root)
    else:  # the rest of the broker issue's layouts, as dump's tests build them
        from tests.fusefs.test_dump import _broker_kinds

        _broker_kinds()[kind](root)


@needs_fuse
@pytest.mark.parametrize("kind", ["transactions, delays, long topics", "lmq", "batch cq",
                                  "compaction", "compressed", "cq_ext", "rocksdb", "timer",
                                  "pop_kv", "ha_epoch"])
def test_a_broker_store_shows_times_as_its_messages_carry_them(tmp_path, kind):
    """Every queue of every topic: the topic's at/<time>/ and the queue's and topic's range
    listings are what the messages' store times say (a time in the middle of the store's)."""
    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    _layout(kind, root)
    with MessageStore(root, StoreConfig(read_only=True), create=False) as s:
        stamps = sorted(m.store_timestamp for t in s.topics() for q in s.queue_ids(t)
                        for m in s.get_range(t, q, s.min_offset(t, q), 1 << 20, skip_damaged=True))
    since, until = stamps[len(stamps) // 2], stamps[-1]
    truth = _truth(root, since, until)
    assert any(inside for _, inside in truth.values())
    with mounted(root, mnt, "-o", "ro"):
        for entry in sorted(os.listdir(f"{mnt}/topics")):
            t = f"{mnt}/topics/{entry}"
            mine = {k: v for k, v in truth.items() if _entry(k[0]) == entry}
            point = sh(f"cd '{t}/at/{since}' 2>/dev/null && for q in *; do echo $q $(readlink $q); done",
                       check=False).stdout.decode().split("\n")
            firsts = {int(q): int(link.rsplit("/", 1)[1]) for q, link in
                      (x.split() for x in point if x)}
            assert firsts == {q: first for (_, q), (first, _) in mine.items() if first is not None}, entry
            rng = sh(f"ls '{t}/at/{since}..{until}'").stdout.decode().split()
            assert sorted(tuple(map(int, x.split(":"))) for x in rng) == \
                sorted((q, o) for (_, q), (_, inside) in mine.items() for o in inside), entry
            for (_, q), (_, inside) in mine.items():
                listed = sh(f"ls '{t}/{q}/at/{iso(since)}..{iso(until)}' | sort -n").stdout.split()
                assert [int(x) for x in listed] == inside, (entry, q)
                if inside:  # the link leads to the message itself
                    body = sh(f"cat '{t}/{q}/at/{since}..{until}/{inside[-1]}'").stdout
                    assert body == sh(f"cat '{t}/{q}/{inside[-1]}'").stdout


def _entry(topic: str) -> str:
    from mqfs.fusefs.topicnames import topic_entry

    return topic_entry(topic)


COUNT, RATE = 300, 200


@needs_fuse
def test_times_follow_a_store_being_written_while_the_shell_reads(tmp_path):
    """A broker-like writer appends to topic Live while the shell lists `at/<t>..` of the
    queue and the topic: each listing is the messages from the first after t up to some
    point, never fewer than the one before; a time after the newest message is absent
    until a message arrives (never cached); at the end every message after t is there."""
    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    writer = subprocess.Popen([sys.executable, "-m", "tests.store.live_writer", root, str(COUNT),
                               str(RATE), str(32 << 10), "pause50"], cwd=REPO,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline() == "ready\n"
        while writer.stdout.readline().split()[1] != "50":
            pass
        with mounted(root, mnt, "-o", "ro"):
            eventually(lambda: os.path.exists(f"{mnt}/topics/Live/0/50"), "message 50 visible")
            after = time.time_ns() // 1_000_000 + 1  # after message 50, before 51
            t, q = f"{mnt}/topics/Live", f"{mnt}/topics/Live/0"
            assert sh(f"ls {t}/at/{after}", check=False).returncode != 0
            assert sh(f"ls -A {q}/at/{after}..").stdout == b""
            assert sh(f"readlink {t}/at/-1h/0").stdout == b"../../0/0\n"
            writer.stdin.write("go\n")
            writer.stdin.flush()
            seen = 0
            while writer.poll() is None or seen < COUNT - 51:
                listed = [int(x) for x in sh(f"ls {q}/at/{after}.. | sort -n").stdout.split()]
                assert listed == list(range(51, 51 + len(listed))) and len(listed) >= seen
                seen = len(listed)
                if seen and writer.poll() is None:
                    assert sh(f"readlink {t}/at/{after}/0").stdout == b"../../0/51\n"
                if writer.poll() is not None and seen < COUNT - 51:
                    eventually(lambda: os.path.exists(f"{q}/{COUNT - 1}"), "the last message")
            assert writer.wait() == 0
            topic = sh(f"ls {t}/at/{after}..").stdout.split()
            assert sorted(topic) == sorted(b"0:%d" % i for i in range(51, COUNT))
            assert sh(f"cat {t}/at/{after}../0:{COUNT - 1}").stdout == b"live message %d" % (COUNT - 1)
            assert sh(f"ls {t}/at/now", check=False).returncode != 0  # nothing after now
    finally:
        if writer.poll() is None:
            writer.kill()
        writer.wait()
