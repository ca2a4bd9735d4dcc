"""An `-o ro` mount follows a running broker from any state: opened in the middle of a file
while the broker's next CommitLog file is already made (zeros), or on a store with no record
yet; through rolls into the made-ahead files. The writer (tests/store/live_writer.py) writes as a
broker does and says when each message is acknowledged."""

import functools
import json
import os
import subprocess
import sys
import time

import pytest

from tests import REPO
from tests.fusefs.helpers import mounted, needs_fuse
from tests.waits import eventually

COUNT, RATE = 600, 200  # three seconds of puts
FILE_SIZE = 32 << 10  # about 270 messages a file: the run rolls twice


def _writer(root: str, start: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "tests.store.live_writer", root, str(COUNT), str(RATE),
                             str(FILE_SIZE), start], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    return proc


def _visible(mnt: str, offset: int, end: int) -> bool:
    """Message `offset` is listed and the follower has checked the log up to its end."""
    with open(f"{mnt}/status.json") as f:
        read_to = json.load(f)["live"]["commitlog_read_to"]
    return read_to >= end and os.path.exists(f"{mnt}/topics/Live/0/{offset}")


@needs_fuse
@pytest.mark.parametrize("start", ["mid-file", "empty"])
def test_a_read_only_mount_lists_every_acknowledged_message_of_a_running_broker(tmp_path, start):
    """Each acknowledged message shows in the mount: after every 50th acknowledgement the test
    polls until that message's file is there and status.json's `commitlog_read_to` has reached
    its record's end (the lag each took is printed, not asserted: timing belongs to
    scripts/bench); at the end every message is listed and read whole."""
    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    writer = _writer(root, "wait" if start == "empty" else "pause50")
    acked, end = -1, 0
    try:
        if start == "mid-file":
            while acked < 50:
                acked, end = map(int, writer.stdout.readline().split()[1:])
        with mounted(root, mnt, "-o", "ro"):
            queue = f"{mnt}/topics/Live/0"
            if start == "empty":
                assert os.listdir(f"{mnt}/topics") in ([], ["Live"])
            else:  # the log ends in the first file, not where the made-ahead one starts
                with open(f"{mnt}/status.json") as f:
                    assert json.load(f)["live"]["commitlog_read_to"] == end
                assert sorted(int(n) for n in os.listdir(queue) if n.isdigit()) == list(range(51))
            writer.stdin.write("go\n")
            writer.stdin.flush()
            lags = []
            for line in writer.stdout:
                acked, end = map(int, line.split()[1:])
                if acked % 50 == 0:
                    t = time.monotonic()
                    eventually(functools.partial(_visible, mnt, acked, end), f"message {acked} visible")
                    lags.append(time.monotonic() - t)
            assert writer.wait() == 0 and acked == COUNT - 1
            eventually(lambda: _visible(mnt, acked, end), "the last message visible")
            names = sorted(int(n) for n in os.listdir(queue) if n.isdigit())
            assert names == list(range(COUNT))
            for n in range(0, COUNT, 37):
                with open(f"{queue}/{n}", "rb") as f:
                    assert f.read() == b"live message %d" % n
            with open(f"{mnt}/status.json") as f:
                live = json.load(f)["live"]
            assert live["commitlog_read_to"] == end > 2 * FILE_SIZE and live["refresh_failures"] == 0
            print(f"lag after acknowledgement ({start}): max {max(lags):.3f} s, "
                  f"median {sorted(lags)[len(lags) // 2]:.3f} s over {len(lags)} samples")
    finally:
        if writer.poll() is None:
            writer.kill()


@needs_fuse
@pytest.mark.parametrize("stop", ["clean", "kill-9"])
def test_a_read_only_mount_follows_a_broker_across_its_restart(tmp_path, stop):
    """The writer stops (at its end, or killed mid-run) and a new one opens the same store:
    it takes the log's end from the records, deletes the made-ahead file past it and goes on
    in that file, rolling into files made anew. Every message either writer acknowledged
    shows in the mount (polled for, never timed), and at the end every one is listed and read
    whole, the log checked to its end."""
    from tests.waits import eventually

    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    first = _writer(root, "pause50")
    acked, end = -1, 0
    try:
        while acked < 50:
            acked, end = map(int, first.stdout.readline().split()[1:])
        with mounted(root, mnt, "-o", "ro"):
            first.stdin.write("go\n")
            first.stdin.flush()
            for line in first.stdout:
                acked, end = map(int, line.split()[1:])
                if stop == "kill-9" and acked == 400:  # mid-file, past a roll
                    first.kill()
                    break
            first.wait()
            eventually(lambda: _visible(mnt, acked, end), f"message {acked} of the first writer")
            second = subprocess.Popen([sys.executable, "-m", "tests.store.live_writer", root, "300",
                                       str(RATE), str(FILE_SIZE), "restart"], cwd=REPO,
                                      stdout=subprocess.PIPE, text=True)
            try:
                assert second.stdout.readline() == "ready\n"
                for line in second.stdout:
                    acked, end = map(int, line.split()[1:])
                    if acked % 50 == 0:
                        eventually(lambda a=acked, e=end: _visible(mnt, a, e), f"message {acked} after the restart")
                assert second.wait() == 0
            finally:
                if second.poll() is None:
                    second.kill()
            eventually(lambda: _visible(mnt, acked, end), f"the last message, {acked}")
            queue = f"{mnt}/topics/Live/0"
            assert sorted(int(n) for n in os.listdir(queue) if n.isdigit()) == list(range(acked + 1))
            for n in range(0, acked + 1, 23):
                with open(f"{queue}/{n}", "rb") as f:
                    assert f.read() == b"live message %d" % n
            with open(f"{mnt}/status.json") as f:
                live = json.load(f)["live"]
            assert live["commitlog_read_to"] == end and live["refresh_failures"] == 0
    finally:
        if first.poll() is None:
            first.kill()
