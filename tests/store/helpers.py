"""Small-file store configs, message factories and file hashes shared by the store tests."""

import hashlib
import os
import random
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from unittest import mock

from mqfs.store import Message, MessageStore, StoreConfig
from mqfs.store.format import codec
from mqfs.store.format.message import StoredMessage
from mqfs.store.integrity.salvage import Damage, walk
from tests import REPO


def killed_writer(script: str, *args: str, timeout: float = 180, env: dict | None = None) -> None:
    """Run a writer (Python source) that prints "acknowledged" once its puts returned and then
    kill -9s itself: a real crash, at a point the test chose."""
    proc = subprocess.run([sys.executable, "-c", script, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env=env)
    assert proc.returncode == -signal.SIGKILL and proc.stdout == "acknowledged\n", proc.stderr


def small_config(**overrides) -> StoreConfig:
    """Files small enough that a few hundred messages roll CommitLog, CQ and index files."""
    values = dict(commitlog_file_size=64 * 1024, consume_queue_units=100, index_slots=64,
                  index_entries=200)
    values.update(overrides)
    return StoreConfig(**values)


def random_messages(rng: random.Random, n: int, topics=("TopicA", "TopicB"), queues=3,
                    max_body=3000) -> list[Message]:
    out = []
    for i in range(n):
        body = rng.randbytes(rng.randint(0, max_body))
        out.append(Message.create(rng.choice(topics), body, queue_id=rng.randrange(queues),
                                  keys=[f"key-{i}", f"shared-{i % 7}"], tags=f"tag{i % 3}"))
    return out


def files_in(root: str, sub: str) -> list[str]:
    path = os.path.join(root, sub)
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def data_files(root: str) -> dict[str, bytes]:
    """A store's CommitLog, ConsumeQueue and IndexFile bytes by path (the IndexFile under
    "index": its name is a time), to compare stores written two ways."""
    files = {}
    for sub in ("commitlog", "consumequeue", "index"):
        for top, _, names in os.walk(os.path.join(root, sub)):
            for name in names:
                path = os.path.join(top, name)
                with open(path, "rb") as f:
                    files["index" if sub == "index" else os.path.relpath(path, root)] = f.read()
    return files


def store_state(root: str) -> dict[str, str]:
    """Every directory and file under a store (sha256 of each file, its mode and link
    count), but the lock files a refused command may create and what a refused mount
    appends to a log the store already has: what a "nothing was changed" line promises
    stays the same (assert it around every refusal)."""
    out = {}
    for dirpath, dirs, names in os.walk(root):
        for d in dirs:
            out[os.path.relpath(os.path.join(dirpath, d), root) + "/"] = "dir"
        for n in names:
            path = os.path.join(dirpath, n)
            rel = os.path.relpath(path, root)
            if n in ("lock", "mqfs.lock"):
                continue
            if rel.startswith(os.path.join("logs", "mqfs.log")):
                out[rel] = "log"  # a refusal is logged there when the log exists already
                continue
            st = os.lstat(path)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            out[rel] = f"{digest} {st.st_mode:o} {st.st_nlink}"
    return out


def repair_refuses(root: str, why: str) -> None:
    """`mqfs repair` and `mqfs repair --yes` each refuse in one line that says `why`, and
    leave every file of the store as it was."""
    from tests.fusefs.helpers import MQFS

    before = store_state(root)
    for args in (["repair", root], ["repair", "--yes", root]):
        cli = subprocess.run([*MQFS, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        assert cli.returncode == 1 and why in cli.stderr, cli.stdout + cli.stderr
        assert cli.stderr.count("\n") == 1, cli.stderr
        assert store_state(root) == before


def flip(path: str, pos: int, mask: int = 0x10) -> None:
    """XOR the byte at `pos` of a file with `mask`: damage in place (a flipped bit)."""
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([byte ^ mask]))


def file_hashes(root, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """sha256 of every file under root (but names in `skip`): what "changes nothing" compares."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            if n in skip:
                continue
            path = os.path.join(dirpath, n)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def stored_records(store: MessageStore) -> tuple[list[StoredMessage], list[Damage]]:
    """Every record of an open store's CommitLog in order, read with the store's own walker
    (salvage.walk, the one verify and repair use), and every damaged range it met."""
    records, damages = [], []
    log = store.commitlog
    for item in walk(log.queue.files, store.flavor, log.file_size):
        (damages if isinstance(item, Damage) else records).append(item)
    return records, damages


def stamp_as_broker(s: MessageStore, stamps: Iterable[int]) -> None:
    """Stamp the store's next puts exactly `stamps`, as a broker whose clock steps back does
    (mqfs itself never stamps a record before the last one): through Python's put, since the
    one-call C put (`hot_put`) reads the clock itself."""
    ticks = iter(stamps)
    s._store_timestamp = lambda: next(ticks)  # type: ignore[method-assign]
    s.hot_put = None


CODECS = ["c", "python"]  # parametrize put tests over both encoders (store/format/compiled.py)


def use_codec(monkeypatch, which: str) -> None:
    """Make stores opened from here on encode with the C module ("c") or the Python codec
    ("python"). "c" fails when the module is not built (scripts/setup builds it) unless
    MQFS_PURE_PYTHON=1 asked for the Python codec everywhere."""
    from mqfs.store.format import codec, compiled

    if which == "python":
        monkeypatch.setattr(codec, "compiled_records", None)  # (and so no one-call put: hot_put)
        monkeypatch.setattr(compiled, "dispatch", None)  # read by the index files as they open
        monkeypatch.setattr(compiled, "jsonl", None)  # read by decode_lines at each call
        monkeypatch.setattr(compiled, "PURE", True)  # asked for: no "not built" line on stderr
    elif not compiled.PURE:
        assert compiled.records is not None, "the C record encoder is not built: run scripts/setup"
        assert compiled.dispatch is not None, "the C dispatch is not built: run scripts/setup"
        assert compiled.jsonl is not None, "the C JSON-lines decoder is not built: run scripts/setup"


@contextmanager
def unchecked_bodies() -> Iterator[None]:
    """Puts and encodes that keep a body SYSFLAG calls compressed though it does not inflate,
    as a broker's store may hold one (a Java producer's bad stream, a damaged record): mqfs's
    own puts refuse it (compression.put_refusal), so tests that build such stores lift it."""
    with mock.patch.object(codec, "put_refusal", lambda body, sys_flag: None):
        yield
