"""The store directory is untrusted input (issue 20, items 5 and 6): root mounts a store an
unprivileged user owns, that user plants links where the daemon writes, and no file outside
the store changes; a store another user owns or can write is refused with one line; what mqfs
creates is private; `rm STORE/lock` does not let a second daemon in."""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import stat
import subprocess

import pytest

from mqfs.store import UntrustedStore
from mqfs.store.files import quarantine, safefs
from tests.fusefs.helpers import SMALL, mounted, mqfs, needs_fuse, sh

USER = "mqfs-test"
pytestmark = [pytest.mark.mount, needs_fuse,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown to another user")]


@pytest.fixture(scope="module")
def uid() -> int:
    """The unprivileged owner of the attacked stores (created once, as `useradd` does)."""
    try:
        return pwd.getpwnam(USER).pw_uid
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        USER], check=True, capture_output=True)
        return pwd.getpwnam(USER).pw_uid


def chown_tree(path: str, owner: int) -> None:
    for dirpath, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.chown(os.path.join(dirpath, name), owner, owner, follow_symlinks=False)
    os.chown(path, owner, owner)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> str:
    """A store with a message, a topics.json and a logs/ directory, made through a mount once
    for the module: each test attacks a copy of it."""
    work = tmp_path_factory.mktemp("made")
    root = str(work / "store")
    mqfs("init", root, *SMALL)
    with mounted(root, str(work / "mnt")) as _:
        sh(f"mkdir -p {work}/mnt/topics/orders/0 && printf hello > {work}/mnt/topics/orders/0/append")
    return root


@pytest.fixture
def store(made, tmp_path, uid) -> str:
    """A copy of the made store (modes and times kept), owned by USER."""
    root = str(tmp_path / "store")
    shutil.copytree(made, root, symlinks=True)
    chown_tree(root, uid)
    return root


@pytest.fixture
def outside(tmp_path) -> str:
    """Files only root may write, which the attacks aim at."""
    d = tmp_path / "outside"
    (d / "dir").mkdir(parents=True)
    (d / "victim").write_text("root's file\n")
    (d / "secret").write_bytes(b"root only " * 100)
    os.chmod(d / "secret", 0o600)
    for i in range(3):
        (d / "dir" / f"keep{i}").write_text(f"keep {i}\n")
    return str(d)


def fingerprint(path: str) -> dict[str, tuple]:
    """Content hash, size, mode and mtime of every file under `path`."""
    found = {}
    for dirpath, _, files in os.walk(path):
        for name in files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            with open(p, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            found[p] = (digest, st.st_size, stat.S_IMODE(st.st_mode), st.st_mtime_ns)
    return found


def plant(root: str, name: str, target: str, uid: int) -> None:
    """As the store's owner would: replace STORE/name by a link to target."""
    path = os.path.join(root, name)
    if os.path.isdir(path) and not os.path.islink(path):
        os.rename(path, path + ".real")
    elif os.path.lexists(path):
        os.unlink(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.symlink(target, path)
    os.chown(path, uid, uid, follow_symlinks=False)


def first_commitlog(root: str) -> str:
    return "commitlog/" + sorted(os.listdir(os.path.join(root, "commitlog")))[0]


LINKS = ["lock", "abort", "checkpoint", "mqfs.json.tmp", "config/topics.json.tmp",
         "config/topics.json.bak", "logs/mqfs.log", "staging", "commitlog/FIRST",
         "consumequeue/orders", "index"]


@pytest.mark.parametrize("command", ["mount", "repair"])
@pytest.mark.parametrize("name", LINKS)
def test_root_follows_no_link_the_owner_plants(store, outside, tmp_path, uid, name, command):
    target = os.path.join(outside, "dir" if name in ("staging", "consumequeue/orders", "index")
                          else "secret" if name == "commitlog/FIRST" else "victim")
    if name == "commitlog/FIRST":
        name = first_commitlog(store)
    plant(store, name, target, uid)
    before = fingerprint(outside)
    mnt = str(tmp_path / "mnt")
    os.makedirs(mnt)
    if command == "mount" and name == "consumequeue/orders":
        # a clean close recorded the queues: the mount opens none, and the first use of
        # the queue is what meets the link, and refuses
        log = str(tmp_path / "mqfs.log")
        with mounted(store, mnt, "--trust-owner", USER, log=log), pytest.raises(OSError):
            open(f"{mnt}/topics/orders/0/0", "rb").read()
        assert "symbolic link" in open(log).read()
        assert fingerprint(outside) == before
        return
    args = [store, mnt] if command == "mount" else [store, "--yes"]
    proc = mqfs(command, "--trust-owner", USER, *args, check=False)
    assert proc.returncode == 1 and not os.path.ismount(mnt)
    assert proc.stderr.count("\n") == 1 and "symbolic link" in proc.stderr, proc.stderr
    assert fingerprint(outside) == before
    assert not os.path.exists(os.path.join(store, "quarantine"))


def owners(path: str) -> dict[str, tuple[int, int]]:
    """(uid, link count) of every file under `path`."""
    return {os.path.join(d, n): (os.lstat(os.path.join(d, n)).st_uid,
                                 os.lstat(os.path.join(d, n)).st_nlink)
            for d, _, files in os.walk(path) for n in files}


HARD_LINKS = ["lock", "logs/mqfs.log", "config/topics.json", "checkpoint"]


@pytest.mark.parametrize("command", ["mount", "repair"])
@pytest.mark.parametrize("name", HARD_LINKS)
def test_root_writes_through_no_hard_link_the_owner_plants(store, outside, tmp_path, uid, name,
                                                          command):
    """A second name for a root-owned file outside, planted where the daemon writes (what
    the owner can do where fs.protected_hardlinks=0): never written, never chowned."""
    path = os.path.join(store, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    victim = os.path.join(outside, "victim")
    if os.path.lexists(path):
        os.unlink(path)
    os.link(victim, path)
    before, before_owners = fingerprint(outside), owners(outside)
    mnt = str(tmp_path / "mnt")
    os.makedirs(mnt)
    proc = mqfs(command, "--trust-owner", USER, store, *([mnt] if command == "mount" else
                                                          ["--yes"]), check=False)
    if proc.returncode == 0 and command == "mount":
        mqfs("umount", mnt)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "hard link" in proc.stderr, proc.stderr
    assert fingerprint(outside) == before
    assert owners(outside) == before_owners and owners(outside)[victim][0] == 0


def test_a_root_owned_file_found_in_a_trusted_store_is_not_given_away(store, outside, tmp_path):
    """Only what root creates goes to the store's owner: a file root owns already (a hard
    link the owner made to one, on a machine with fs.protected_hardlinks=0) stays root's."""
    found = os.path.join(store, "config", "root-owned.json")
    with open(found, "w") as f:
        f.write("{}")
    os.chmod(found, 0o600)
    safefs.trust_owner(os.stat(store).st_uid)
    try:
        os.close(safefs.open_file(found, os.O_RDWR | os.O_CREAT))
        assert os.stat(found).st_uid == 0
        made = os.path.join(store, "config", "made.json")
        os.close(safefs.open_file(made, os.O_RDWR | os.O_CREAT))
        assert os.stat(made).st_uid == os.stat(store).st_uid
        os.link(os.path.join(outside, "victim"), os.path.join(store, "config", "linked"))
        with pytest.raises(UntrustedStore, match="hard link"):
            safefs.open_file(os.path.join(store, "config", "linked"), os.O_RDWR | os.O_CREAT)
    finally:
        safefs._trusted.discard(os.stat(store).st_uid)
    assert os.stat(os.path.join(outside, "victim")).st_uid == 0


def test_a_link_to_the_store_is_the_administrators(store, tmp_path):
    link = str(tmp_path / "link")
    os.symlink(store, link)
    mnt = str(tmp_path / "mnt")
    with mounted(link, mnt, "--trust-owner", USER):
        assert sh(f"cat {mnt}/topics/orders/0/0").stdout == b"hello"
    assert "ok" in mqfs("verify", "--trust-owner", USER, link).stdout.lower()


def test_links_planted_while_mounted_are_not_followed(store, outside, tmp_path, uid):
    mnt = str(tmp_path / "mnt")
    before = fingerprint(outside)
    with mounted(store, mnt, "--trust-owner", USER):
        # a new topic is a line appended to config/topics.log (store/meta/topic_log.py)
        plant(store, "config/topics.log", os.path.join(outside, "victim"), uid)
        made = sh(f"mkdir -p {mnt}/topics/fresh/0", check=False)
        assert made.returncode != 0  # the topic table cannot be written: refused, not followed
        assert not os.path.exists(f"{mnt}/topics/fresh")  # and what was not saved is not shown
        plant(store, "staging", os.path.join(outside, "dir"), uid)  # the daemon holds the real one
        q = f"{mnt}/topics/orders/0"
        sh(f"printf body > {q}/tmp/x && mv {q}/tmp/x {q}/")
        assert sh(f"cat {mnt}/topics/orders/0/1").stdout == b"body"
    assert fingerprint(outside) == before


def test_a_store_another_user_owns_or_can_write_is_refused(store, tmp_path, uid):
    mnt = str(tmp_path / "mnt")
    os.makedirs(mnt)
    before = fingerprint(store)
    proc = mqfs("mount", store, mnt, check=False)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert f"owned by {USER}" in proc.stderr and "--trust-owner" in proc.stderr
    for command in ("info", "verify"):
        assert f"owned by {USER}" in mqfs(command, store, check=False).stderr
    chown_tree(store, 0)
    os.chmod(os.path.join(store, "config"), 0o770)
    proc = mqfs("mount", store, mnt, check=False)
    assert proc.returncode == 1 and "writable by group or others" in proc.stderr
    assert "chmod go-w" in proc.stderr
    os.chmod(os.path.join(store, "config"), 0o700)
    assert {p: v[0] for p, v in fingerprint(store).items()} == \
        {p: v[0] for p, v in before.items()}  # refused before a byte was written


def test_what_root_makes_in_a_trusted_store_belongs_to_its_owner(store, tmp_path, uid):
    mnt = str(tmp_path / "mnt")
    with mounted(store, mnt, "--trust-owner", USER):
        sh(f"mkdir -p {mnt}/topics/fresh/0 && printf new > {mnt}/topics/fresh/0/append")
        assert sh(f"cat {mnt}/topics/fresh/0/0").stdout == b"new"
    owners = {}
    for dirpath, dirs, files in os.walk(store):
        for name in [*dirs, *files]:
            owners[os.path.relpath(os.path.join(dirpath, name), store)] = \
                os.lstat(os.path.join(dirpath, name)).st_uid
    assert "consumequeue/fresh/0" in owners and "config/topics.json" in owners
    assert {n: o for n, o in owners.items() if o != uid} == {}


def test_removing_the_lock_file_does_not_let_a_second_daemon_in(store, tmp_path):
    mnt, other = str(tmp_path / "mnt"), str(tmp_path / "other")
    os.makedirs(other)
    with mounted(store, mnt, "--trust-owner", USER):
        os.unlink(os.path.join(store, "lock"))
        proc = mqfs("mount", "--trust-owner", USER, store, other, check=False)
        assert proc.returncode == 1 and "in use" in proc.stderr, proc.stderr
        assert not os.path.ismount(other)
        sh(f"printf still-mine > {mnt}/topics/orders/0/append")
        assert sh(f"cat {mnt}/topics/orders/0/1").stdout == b"still-mine"


def test_what_mqfs_creates_is_private(tmp_path):
    root = str(tmp_path / "store")
    mqfs("init", root, *SMALL)
    mnt = str(tmp_path / "mnt")
    with mounted(root, mnt, "-o", "umask=077"):
        sh(f"mkdir -p {mnt}/topics/t/0 && printf secret > {mnt}/topics/t/0/append")
    saved = quarantine.save_bytes(root, "evidence", b"bytes")
    assert stat.S_IMODE(os.stat(saved).st_mode) == 0o600
    modes = {}
    for dirpath, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            modes[os.path.relpath(os.path.join(dirpath, name), root)] = \
                stat.S_IMODE(os.lstat(os.path.join(dirpath, name)).st_mode)
    assert "logs/mqfs.log" in modes and "commitlog" in modes
    assert {n: m for n, m in modes.items() if m & 0o077} == {}
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700


@pytest.mark.parametrize("name", ["config/topics.log", "config/consumerOffset.json"])
def test_hard_links_planted_while_mounted_are_not_written_through(store, outside, tmp_path, uid,
                                                                 name):
    """Issue 33, item 8, while mounted: the owner replaces a file the daemon writes next (a
    new topic's line, a group's offset) by a second name of a root-owned file outside. The
    daemon's writes never reach that file, and it stays root's."""
    mnt = str(tmp_path / "mnt")
    victim = os.path.join(outside, "victim")
    before = fingerprint(outside)
    with mounted(store, mnt, "--trust-owner", USER):
        path = os.path.join(store, name)
        if os.path.lexists(path):
            os.unlink(path)
        os.link(victim, path)
        sh(f"mkdir -p {mnt}/topics/fresh/0", check=False)
        sh(f"mkdir -p {mnt}/groups/g && echo 1 > {mnt}/groups/g/orders/0", check=False)
    assert fingerprint(outside) == before
    assert os.stat(victim).st_uid == 0
