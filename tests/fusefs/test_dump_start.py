"""What `mqfs dump` loads before its first record: a key, a tag or an hour imports none of
dataclasses, orjson, numpy, inspect, ast or typing (each a share of what such a selection costs), as
the command runs it (a process of its own, `-X importtime`); JSON lines Python prints take
orjson only after ORJSON_AFTER of them, the bytes the same on both sides of the switch; and
the other subcommands still run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mqfs.fusefs.dump import writer
from mqfs.store import Message, MessageStore, StoreConfig
from mqfs.store.format.jsonl import envelope, replay_line
from tests.fusefs.test_dump import T0
from tests.store.helpers import small_config

HEAVY = {"dataclasses", "orjson", "numpy", "inspect", "ast", "typing"}  # typing: modules on
# dump's path import it under `TYPE_CHECKING = False` (mypy reads it; the command does not)
N = 700
# bodies JSON escapes, or does not, or cannot hold as text (base64)
BODIES = [b'say "hi"\\\t\n\x00\x1f\x7f \xc3\xa9 \xe2\x80\xa8 \xf0\x9f\x98\x80', b"plain order", b"\xff\xfe"]
RUN = ("import sys; from mqfs.fusefs.cli import main; sys.argv[0] = 'mqfs'; sys.exit(main())")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """N messages a minute apart on three queues: tags t0..t3, a key each (o-N) and one of
    seven shared (c-N), bodies and properties with what JSON escapes, two born hosts."""
    root = str(tmp_path_factory.mktemp("start") / "store")
    with MessageStore(root, small_config()) as s:
        clock = [T0]
        s.clock = lambda: clock[0]
        for i in range(N):
            s.put(Message.create("Orders", BODIES[i % 3] + b" %d" % i, queue_id=i % 3,
                                 keys=[f"o-{i}", f"c-{i % 7}"], tags=f"t{i % 4}",
                                 properties={"NOTE": 'a "b"\\\n\u00e9', "N": str(i)},
                                 born_host=("::1", 9) if i % 2 else ("10.0.0.1", 5)))
            clock[0] += 60_000
    return root


def _imports(store: str, *args: str, run: str = RUN) -> tuple[set[str], subprocess.CompletedProcess]:
    """The modules `mqfs dump STORE ARGS` imports, and its run."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", run, "dump", store, *args],
                          capture_output=True, timeout=120)
    names = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.decode().splitlines()
             if line.startswith("import time:") and "|" in line}
    return names, proc


HOUR = [f"--since={T0 + 60 * 60_000}", f"--until={T0 + 120 * 60_000 - 1}"]


@pytest.mark.parametrize("args, lines", [
    (["-k", "o-5"], 1), (["--tag", "t1"], N // 4), (HOUR, 60), (["-t", "Orders", "-q", "1"], N // 3),
    (["--tag", "t1", "-f", "csv"], None), (["--tag", "t1", "-f", "raw"], None),
    (["-k", "o-5", "-f", "replay"], 1), ([*HOUR, "-f", "offsets"], 60), (["--tag", "t2", "-c"], 1)])
def test_a_narrow_selection_imports_none_of_the_heavy_modules(store, args, lines):
    names, proc = _imports(store, *args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert lines is None or len(proc.stdout.splitlines()) == lines
    assert names & HEAVY == set(), args
    assert {"mqfs.fusefs.dump.command", "mqfs.store.offline.selection"} <= names  # it did look


SWITCH = 30  # ORJSON_AFTER in these runs: a key shared by N/7 messages passes it


def test_many_lines_python_prints_switch_to_orjson_with_the_same_bytes(store):
    """A key shared by N/7 messages (a key selection is printed by Python alone): the lines
    before and after the switch are json.dumps of the envelope, byte for byte."""
    run = f"import mqfs.fusefs.dump.writer as w; w.ORJSON_AFTER = {SWITCH}; " + RUN
    names, proc = _imports(store, "-k", "c-3", run=run)
    assert proc.returncode == 0 and "orjson" in names  # it did switch
    assert "orjson" not in _imports(store, "-k", "c-3")[0]  # not at the default: 100 lines
    with MessageStore(store, StoreConfig(read_only=True), create=False) as s:
        msgs = [s.get("Orders", i % 3, i // 3) for i in range(3, N, 7)]
    ref = [json.dumps(envelope(m), ensure_ascii=False, separators=(",", ":")).encode() for m in msgs]
    assert proc.stdout.splitlines() == ref
    assert len(msgs) == N // 7 > SWITCH + 10 and writer.ORJSON_AFTER > N // 7
    replay = subprocess.run([sys.executable, "-c", run, "dump", store, "-k", "c-3", "-f", "replay"],
                            capture_output=True, timeout=120)
    assert replay.stdout.splitlines() == [
        json.dumps(replay_line(m), ensure_ascii=False, separators=(",", ":")).encode() for m in msgs]


def test_the_other_subcommands_still_run(store, tmp_path):
    def mqfs(*args: str, code: int = 0) -> bytes:
        proc = subprocess.run([sys.executable, "-c", RUN, *args], capture_output=True, timeout=120)
        assert proc.returncode == code, (args, proc.stderr)
        return proc.stdout

    assert b"dump" in mqfs("--help") and b"--since" in mqfs("dump", "--help")
    assert mqfs("--version").startswith(b"mqfs ") and mqfs("dump", "--version").startswith(b"mqfs ")
    assert json.loads(mqfs("info", "--json", store))["messages"] == N
    mqfs("verify", store)
    made = os.path.join(tmp_path, "new")
    mqfs("init", made)
    assert mqfs("dump", made, "-c", code=1) == b"0\n"  # grep: 1 when none is selected
    bad = subprocess.run([sys.executable, "-c", RUN, "dump", store, "--since", "soonish"],
                         capture_output=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith(b"mqfs: ") and bad.stderr.count(b"\n") == 1
