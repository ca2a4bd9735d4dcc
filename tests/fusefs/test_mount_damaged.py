"""A damaged store through a real mount: a read-write mount refuses in one line and changes
nothing; `-o ro` serves every intact message and EIO for the damaged one; after
`mqfs repair --yes` a read-write mount serves the rest at their offsets."""

from __future__ import annotations

import os

import pytest

from mqfs.store import Message, MessageStore
from tests.fusefs.helpers import MQFS, SMALL, mounted, mqfs, needs_fuse, sh
from tests.store.helpers import flip, store_state

pytestmark = [pytest.mark.mount, needs_fuse]


def test_damaged_store_refuses_rw_serves_ro_and_repairs(tmp_path):
    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    os.makedirs(mnt)
    mqfs("init", root, *SMALL)
    with MessageStore(root) as s:
        results = [s.put(Message.create("T", b"message %d\n" % i, keys=[f"k{i}"], tags="t0"))
                   for i in range(30)]
    damaged = results[12]
    size = int(SMALL[1])
    start = damaged.commitlog_offset - damaged.commitlog_offset % size
    path = os.path.join(root, "commitlog", f"{start:020d}")
    # one flipped bit in the TAGS property of message 12
    flip(path, damaged.commitlog_offset % size + damaged.size - 30, 0x04)
    before = store_state(root)

    refused = mqfs("mount", root, mnt, check=False)
    assert refused.returncode != 0 and refused.stderr.count("\n") == 1
    assert "CommitLog offset" in refused.stderr and "mqfs repair" in refused.stderr
    assert not os.path.ismount(mnt) and store_state(root) == before

    with mounted(root, mnt, "-o", "ro"):
        assert sh(f"cat {mnt}/topics/T/0/11").stdout == b"message 11\n"
        assert sh(f"cat {mnt}/topics/T/0/29").stdout == b"message 29\n"
        bad = sh(f"cat {mnt}/topics/T/0/12", check=False)
        assert bad.returncode != 0 and b"Input/output error" in bad.stderr
    assert store_state(root) == before

    assert mqfs("repair", root, check=False).returncode == 1  # no terminal, no --yes: nothing
    assert store_state(root) == before
    mqfs("repair", root, "--yes")
    assert mqfs("verify", root).returncode == 0
    with mounted(root, mnt):
        assert sh(f"cat {mnt}/topics/T/0/13").stdout == b"message 13\n"
        assert sh(f"cat {mnt}/topics/T/0/12", check=False).returncode != 0
        sh(f"echo new > {mnt}/topics/T/0/append")
        assert sh(f"cat {mnt}/topics/T/0/30").stdout == b"new\n"
    assert any(n.endswith("-damaged") for n in os.listdir(os.path.join(root, "quarantine")))


def test_a_stale_interactive_repair_plan_is_refused_after_a_mount_wrote(tmp_path):
    """Issue 20 item 3, as a person meets it: `mqfs repair` shows its plan and waits for y at
    a terminal; meanwhile the store is mounted and 200 messages appended and synced; the y
    then refuses in one line and changes nothing, and the next repair keeps all 200."""
    import pty

    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    mqfs("init", root, *SMALL)
    with MessageStore(root) as s:  # 100 KiB each: the damaged one is in an older file
        damaged = [s.put(Message.create("T", b"%d\n" % i * 30000)) for i in range(100)][12]
    size = int(SMALL[1])
    start = damaged.commitlog_offset - damaged.commitlog_offset % size
    # a bit of the body: the mount serves
    flip(os.path.join(root, "commitlog", f"{start:020d}"), damaged.commitlog_offset % size + 100, 0x01)
    pid, fd = pty.fork()
    if pid == 0:  # the child: `mqfs repair` at a terminal
        os.execv(MQFS[0], [*MQFS, "repair", root])
    out = b""
    while b"apply? [y/N]" not in out:
        try:
            out += os.read(fd, 4096)
        except OSError:
            raise AssertionError(f"repair did not ask: {out!r}") from None
    with mounted(root, mnt):
        sh(f"for i in $(seq 100 299); do echo message $i > {mnt}/topics/T/0/append; done; "
           f"sync {mnt}/topics/T/0")
    before = store_state(root)
    os.write(fd, b"y\n")
    rest = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child is gone: EIO on the pty
            break
        if not chunk:
            break
        rest += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) != 0
    assert b"changed since this repair was planned" in rest and rest.count(b"mqfs:") == 1
    assert store_state(root) == before
    mqfs("repair", root, "--yes")
    with MessageStore(root, create=False) as s:
        assert [bytes(s.get("T", 0, i).body) for i in range(100, 300)] == \
            [b"message %d\n" % i for i in range(100, 300)]
