"""`mqfs group show|reset` on an unmounted store: the tree's positions and refusals
(groups/<g>/<t>/all), one write of config/consumerOffset.json, broker stores of each layout."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from mqfs.fusefs.topicnames import topic_entry
from mqfs.store import Message, MessageStore, StoreConfig
from mqfs.store.files.json_file import parse_text
from mqfs.store.meta import features
from tests.fusefs.helpers import SMALL, fuse_usable, mounted, mqfs, needs_fuse, sh
from tests.fusefs.test_dump import _broker_kinds
from tests.store import broker_guard_layouts
from tests.store.helpers import REPO, file_hashes
from tests.store.java_stores import answers, unpack

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z
OFFSETS = os.path.join("config", "consumerOffset.json")
DLEDGER_KINDS = ("dledger", "dledger-killed")  # RocketMQ's DLedgerCommitLog wrote them


def _store(root: str) -> None:
    """Topic T: ten messages a minute apart on queue 0, two on queue 1; group g at 4 on 0."""
    mqfs("init", root, *SMALL)
    with MessageStore(root) as s:
        s.create_topic("T", 2)
        for i in range(10):
            s.clock = lambda i=i: T0 + 60_000 * i
            s.put(Message.create("T", b"m%d" % i))
            if i < 2:
                s.put(Message.create("T", b"q1 m%d" % i, queue_id=1))
        s.commit_offset("g", "T", 0, 4)


def _shown(root: str) -> bytes:
    """`<q> <offset>` per queue of g on T, as `cat groups/g/T/all` reads."""
    rows = [line.split() for line in mqfs("group", "show", root, "g", "T").stdout.splitlines()]
    return "".join(f"{q} {offset}\n" for _, _, q, offset, _ in rows).encode()


POSITIONS = ["latest", "earliest", "2", "2023-11-14T22:16:20Z", f"@{T0 + 60_000 * 7 - 1}",
             "-1h", "-200w", "today"]


@needs_fuse
def test_each_position_moves_the_queues_as_the_trees_all_does(tmp_path):
    """The same positions written to a mount's groups/g/T/all and given to `mqfs group
    reset` on a copy of the store leave the group where `cat all` and `group show` agree;
    a position past queue 1's end is ERANGE there and status 3 here, a typo EINVAL and 2,
    and both leave every queue (and here every byte) where it was."""
    tree, cli, mnt = str(tmp_path / "tree"), str(tmp_path / "cli"), str(tmp_path / "mnt")
    _store(tree)
    shutil.copytree(tree, cli)
    with mounted(tree, mnt):
        all_ = f"{mnt}/groups/g/T/all"
        for pos in POSITIONS:
            text = pos if pos in ("latest", "earliest", "2") or pos.startswith("@") else f"@{pos}"
            sh(f"echo '{text}' > {all_}")
            done = mqfs("group", "reset", cli, "g", "T", "--to", pos)
            assert sh(f"cat {all_}").stdout == _shown(cli), pos
            assert done.stdout.count("\n") == 2 and "T/0: " in done.stdout
        assert _shown(cli) == b"0 10\n1 2\n"  # today began after every message: latest
        before = file_hashes(cli)
        for pos, errno_text, status in (("5", b"out of range", 3), ("soon", b"Invalid argument", 2),
                                        ("first", b"Invalid argument", 2)):
            tree_refused = sh(f"echo {pos} > {all_}", check=False)
            assert tree_refused.returncode != 0 and errno_text in tree_refused.stderr
            refused = mqfs("group", "reset", cli, "g", "T", "--to", pos, check=False)
            assert refused.returncode == status and refused.stdout == ""
            assert refused.stderr.count("\n") == 1 and "no queue moved" in refused.stderr
        assert file_hashes(cli) == before
        assert sh(f"cat {all_}").stdout == _shown(cli)


def test_one_queue_a_dry_run_and_show(tmp_path):
    root = str(tmp_path / "s")
    _store(root)
    before = file_hashes(root)
    dry = mqfs("group", "reset", root, "g", "T", "--to", "latest", "--dry-run")
    assert dry.stdout == "T/0: 4 -> 10\nT/1: none -> 2\ndry run: nothing written\n"
    assert file_hashes(root) == before
    assert mqfs("group", "show", root).stdout == "g T 0 4 6\n"  # committed queues, with lag
    assert mqfs("group", "show", root, "g", "T").stdout == "g T 0 4 6\ng T 1 0 2\n"
    assert mqfs("group", "reset", root, "g", "T", "-q", "1", "--to", "1").stdout == "T/1: none -> 1\n"
    assert mqfs("group", "show", root, "g", "T").stdout == "g T 0 4 6\ng T 1 1 1\n"
    proc = mqfs("group", "reset", root, "g", "T", "--to", "1", "-q", "2", check=False)
    assert proc.returncode == 2 and "T has no queue 2" in proc.stderr
    proc = mqfs("group", "reset", root, "g", "NoSuch", "--to", "1", check=False)
    assert proc.returncode == 2 and "no topic 'NoSuch'" in proc.stderr
    proc = mqfs("group", "show", root, "g", "NoSuch", check=False)
    assert proc.returncode == 2 and "no topic 'NoSuch'" in proc.stderr and proc.stdout == ""
    with open(os.path.join(root, OFFSETS)) as f:
        assert json.load(f)["offsetTable"] == {"T@g": {"0": 4, "1": 1}}


@needs_fuse
def test_a_mounted_store_is_refused_naming_the_write_that_resets_it(tmp_path):
    root, mnt = str(tmp_path / "s"), str(tmp_path / "mnt")
    _store(root)
    with mounted(root, mnt):
        daemons = ("mqfs.log", "scrub.json")  # what the mount's daemon writes meanwhile
        before = file_hashes(root, skip=daemons)
        for path in (root, mnt):  # the store or its mount point
            proc = mqfs("group", "reset", path, "g", "T", "--to", "-10m", check=False)
            assert proc.returncode == 1 and proc.stderr.count("\n") == 1
            assert f"is mounted on {mnt}" in proc.stderr
            assert f"echo @-10m > {mnt}/groups/g/T/all" in proc.stderr
        assert mqfs("group", "show", mnt, "g", "T").stdout == "g T 0 4 6\ng T 1 0 2\n"
        assert file_hashes(root, skip=daemons) == before


_HOLD = """import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
print("held", flush=True)
sys.stdin.read()
"""


def test_a_store_a_broker_is_writing_is_refused_and_shown_as_it_grows(tmp_path):
    """A broker holds STORE/lock (FileChannel.tryLock(0, 1)) while it writes: reset is
    refused in one line naming it and changes nothing; show and --dry-run read the store
    live, as info does, and see the messages it adds; once it stops, the reset is made."""
    root = str(tmp_path / "store")
    writer = subprocess.Popen([sys.executable, "-m", "tests.store.live_writer", root, "80", "500",
                               str(32 << 10), "pause50"], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    holder = None
    try:
        assert writer.stdout.readline() == "ready\n"
        while writer.stdout.readline().split()[1] != "50":
            pass
        holder = subprocess.Popen([sys.executable, "-c", _HOLD, os.path.join(root, "lock")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline() == "held\n"
        before = file_hashes(root)
        proc = mqfs("group", "reset", root, "g", "Live", "--to", "latest", check=False)
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1
        assert f"held by pid {holder.pid}" in proc.stderr
        assert file_hashes(root) == before
        assert mqfs("group", "reset", root, "g", "Live", "--to", "latest", "-n").stdout.startswith(
            "Live/0: none -> 51\n")
        writer.stdin.write("go\n")
        writer.stdin.flush()
        assert writer.wait() == 0
        assert mqfs("group", "show", root, "g", "Live").stdout == "g Live 0 0 80\n"
        holder.stdin.close()
        assert holder.wait() == 0
        assert mqfs("group", "reset", root, "g", "Live", "--to", "latest").stdout == \
            "Live/0: none -> 80\n"
    finally:
        for p in (writer, holder):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def _rocksdb_cq_json_config(root: str) -> None:
    """A RocksDB ConsumeQueue whose broker still keeps topics and offsets in JSON (its config
    not yet moved to RocksDB): the offsets file is the one the broker reads."""
    broker_guard_layouts.layout_rocksdb(root)
    for name in ("topics", "consumerOffsets", "subscriptionGroups"):
        shutil.rmtree(os.path.join(root, "config", name))


def _java_store(kind: str):
    """A builder of the store RocketMQ's own broker wrote (tests/store/java_stores.py) at root."""
    def build(root: str) -> None:
        os.rename(unpack(kind, os.path.dirname(root)), root)
    return build


def _kinds() -> dict:
    kinds = _broker_kinds()
    kinds["plain"] = broker_guard_layouts.broker_store  # the broker's config files, nothing else
    kinds["rocksdb_cq_json_config"] = _rocksdb_cq_json_config
    for kind in DLEDGER_KINDS:  # read through the entries (a read-write mount refuses them)
        kinds[kind] = _java_store(kind)
    return kinds


@pytest.mark.parametrize("kind", sorted(_kinds()))
def test_every_broker_layout_resets_in_its_own_offsets_file_alone(tmp_path, kind):
    """Each layout of the broker issue: every queue of a topic moved to latest, then one
    queue to earliest, through the CLI; the store then reads those offsets (as the broker
    will); consumerOffset.json keeps every other field and entry as the broker wrote them
    and its .bak is the broker's still; no other file of the broker's changes. Where a mount
    may write the layout, its tree's `all` and queue files move another group alike. A store
    that keeps its offsets in RocksDB is refused in one line with no file made."""
    root = str(tmp_path / "store")
    _kinds()[kind](root)
    with MessageStore(root, StoreConfig(read_only=True), create=False) as s:
        topic = sorted(t for t in s.topics() if s.queue_ids(t) and not t.startswith("rmq_sys"))[0]
        ends = {q: s.max_offset(topic, q) for q in s.queue_ids(topic)}
        starts = {q: s.min_offset(topic, q) for q in s.queue_ids(topic)}
    before = file_hashes(root)
    path = os.path.join(root, OFFSETS)
    old = _document(path)
    old_text = _text(path) if old is not None else ""
    proc = mqfs("group", "reset", root, "ops", topic, "--to", "latest", check=False)
    if kind == "rocksdb":
        assert proc.returncode == 1 and "RocksDB" in proc.stderr and proc.stderr.count("\n") == 1
        assert file_hashes(root) == before
        return
    assert proc.returncode == 0, proc.stderr
    first = min(ends)
    mqfs("group", "reset", root, "ops", topic, "--to", "earliest", "--queue", str(first))
    want = {**ends, first: starts[first]}
    with MessageStore(root, StoreConfig(read_only=True), create=False) as s:
        assert {q: s.committed_offset("ops", topic, q) for q in ends} == want
    shown = mqfs("group", "show", root, "ops", topic).stdout.splitlines()
    assert [int(line.split()[3]) for line in shown] == [want[q] for q in sorted(want)]
    after = file_hashes(root)
    assert {f for f in set(before) | set(after) if before.get(f) != after.get(f)} <= \
        {OFFSETS, os.path.join("config", "mqfs.lock")}
    new = _document(path)
    assert new["offsetTable"].pop(f"{topic}@ops") == {str(q): o for q, o in want.items()}
    if old is not None:  # the broker's file: its entries, fields and order as they were
        assert new["offsetTable"] == old["offsetTable"] and list(new) == list(old)
        assert {k: v for k, v in new.items() if k != "dataVersion"} == \
            {k: v for k, v in old.items() if k != "dataVersion"} | {"offsetTable": old["offsetTable"]}
        assert new["dataVersion"]["counter"] == old["dataVersion"]["counter"] + 2
        assert before[OFFSETS + ".bak"] == after[OFFSETS + ".bak"]
        # and in bytes: the broker's text (tabs, bare integer keys) but for the new entry
        # and dataVersion's counter and timestamp
        assert _masked(_text(path)) == _masked(old_text)
    if fuse_usable() and features.recognise(root).refusal() is None:  # a mount may write it:
        mnt = str(tmp_path / "mnt")  # the tree's all moves another group alike
        with mounted(root, mnt):
            sh(f"echo earliest > '{mnt}/groups/ops2/{topic_entry(topic)}/all'")
            sh(f"echo {ends[first]} > '{mnt}/groups/ops2/{topic_entry(topic)}/{first}'")
        with MessageStore(root, StoreConfig(read_only=True), create=False) as s:
            assert {q: s.committed_offset("ops2", topic, q) for q in ends} == \
                {**starts, first: ends[first]}
            assert {q: s.committed_offset("ops", topic, q) for q in ends} == want


def _text(path: str) -> str:
    with open(path) as f:
        return f.read()


def _masked(text: str) -> str:
    text = re.sub(r'"(counter|timestamp)":\d+', r'"\1":N', text)
    return re.sub(r',\s*"[^"]*@ops":\{[^}]*\}', "", text)


def _document(path: str) -> dict | None:
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return parse_text(f.read())


@pytest.mark.parametrize("kind", DLEDGER_KINDS)
def test_a_dledger_store_resets_to_a_time_and_its_broker_lock_is_checked(tmp_path, kind):
    """A store on DLedger (its records inside DLedger entries, read by the read-only open):
    while a process holds its broker's lock the reset is refused in one line naming it, and
    no byte changes; once released, `--to` a time moves every queue of Orders to the first
    message the broker stored at or after it (Java's answers), and consumerOffset.json and
    mqfs's lock file are the only files that change."""
    root = unpack(kind, str(tmp_path))
    orders = [q for q in answers(kind)["queues"] if q["topic"] == "Orders"]
    when = orders[1]["messages"][20]["stored"]
    want = {q["queue"]: next((m["at"] for m in q["messages"] if m["stored"] >= when), q["max"])
            for q in orders}
    assert all(0 < want[q["queue"]] < q["max"] for q in orders)  # neither end: a time's own
    before = file_hashes(root)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, os.path.join(root, "lock")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        proc = mqfs("group", "reset", root, "ops", "Orders", "--to", f"@{when}", check=False)
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1
        assert f"held by pid {holder.pid}" in proc.stderr
        assert file_hashes(root) == before
    finally:
        holder.stdin.close()
        holder.wait()
    done = mqfs("group", "reset", root, "ops", "Orders", "--to", f"@{when}")
    assert done.stdout == "".join(f"Orders/{q}: none -> {o}\n" for q, o in sorted(want.items()))
    with MessageStore(root, StoreConfig(read_only=True), create=False) as s:
        assert {q: s.committed_offset("ops", "Orders", q) for q in want} == want
    after = file_hashes(root)
    assert {f for f in set(before) | set(after) if before.get(f) != after.get(f)} == \
        {OFFSETS, os.path.join("config", "mqfs.lock")}


@needs_fuse
def test_a_read_only_mount_is_refused_naming_the_umount_not_a_write_it_refuses(tmp_path):
    """A DLedger store mounts read-only alone (as does any store with `-o ro`): its groups/
    takes no write (EROFS), so the reset is refused in one line naming `mqfs umount`, not an
    `echo` into the tree, and no byte changes."""
    root, mnt = unpack("dledger", str(tmp_path)), str(tmp_path / "mnt")
    with mounted(root, mnt, "-o", "ro"):
        before = file_hashes(root)
        written = sh(f"echo latest > {mnt}/groups/g/Orders/all", check=False)
        assert written.returncode != 0 and b"Read-only file system" in written.stderr
        proc = mqfs("group", "reset", root, "g", "Orders", "--to", "latest", check=False)
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
        assert f"is mounted read-only on {mnt}" in proc.stderr and f"`mqfs umount {mnt}`" in proc.stderr
        assert "echo" not in proc.stderr
        assert file_hashes(root) == before
