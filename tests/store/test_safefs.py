"""mqfs.store.files.safefs, with the kernel's openat2 and with the walk one directory at a time it
falls back to: a link anywhere, a FIFO, or a directory others can write is refused."""

from __future__ import annotations

import os

import pytest

from mqfs.store import UntrustedStore
from mqfs.store.files import safefs


@pytest.fixture(params=["openat2", "walk"])
def mode(request, monkeypatch) -> str:
    if request.param == "walk":
        monkeypatch.setattr(safefs, "_openat2_works", [False])
    return request.param


def test_links_fifos_and_writable_directories_are_refused(tmp_path, mode):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("keep")
    store = tmp_path / "store"
    (store / "config").mkdir(parents=True)
    (store / "config" / "topics.json").write_text("{}")
    os.symlink(outside, store / "staging")
    os.symlink(outside / "victim", store / "lock")
    os.mkfifo(store / "checkpoint")
    for path, flags in ((store / "staging" / "victim", os.O_RDONLY),
                        (store / "staging" / "new", os.O_WRONLY | os.O_CREAT),
                        (store / "lock", os.O_RDWR | os.O_CREAT),
                        (store / "lock", os.O_RDONLY),
                        (store / "checkpoint", os.O_RDONLY)):
        with pytest.raises(UntrustedStore, match="symbolic link"):
            safefs.open_file(str(path), flags)
    with pytest.raises(UntrustedStore):
        safefs.listdir(str(store / "staging"))
    with pytest.raises(UntrustedStore):
        safefs.makedirs(str(store / "staging" / "sub"))
    with pytest.raises(UntrustedStore):
        safefs.unlink(str(store / "staging" / "victim"))
    assert (outside / "victim").read_text() == "keep" and os.listdir(outside) == ["victim"]
    os.close(safefs.open_file(str(store / "config" / "topics.json")))  # a real file opens
    os.chmod(store / "config", 0o777)
    with pytest.raises(UntrustedStore, match="chmod go-w"):
        safefs.write_new(str(store / "config" / "topics.json"), b"{}")
    os.chmod(store / "config", 0o700)
    safefs.write_new(str(store / "config" / "new.json"), b"{}")
    assert os.stat(store / "config" / "new.json").st_mode & 0o777 == safefs.FILE_MODE
    safefs.makedirs(str(store / "a" / "b"))
    assert os.stat(store / "a" / "b").st_mode & 0o777 == safefs.DIR_MODE
