"""A group's committed offset past its queue's end (store/integrity/committed.py): `verify`
reports it as a finding naming the group, queue, committed offset and end, on a real broker's
store that crashed, without failing (nothing in the store is damaged) and without changing a
byte."""

from __future__ import annotations

import json
import os

import pytest

from mqfs.store.integrity.verify import verify_store
from tests.fusefs.helpers import mqfs
from tests.store.java_stores import snapshot, unpack


def commit(root: str, table: dict[str, dict[str, int]]) -> None:
    """consumerOffset.json as a broker writes it."""
    doc = {"dataVersion": {"counter": 3, "stateVersion": 0, "timestamp": 1790000000000},
           "offsetTable": table}
    with open(os.path.join(root, "config", "consumerOffset.json"), "w") as f:
        json.dump(doc, f, indent=4)


@pytest.fixture
def killed(tmp_path) -> str:
    """The Java-written store of a broker halted after dispatch (abort file left): Orders/0
    holds offsets 0..40, Orders/1 0..39."""
    return unpack("killed", str(tmp_path))


def test_a_commit_past_the_end_is_a_finding_with_group_queue_and_offsets(killed):
    commit(killed, {"Orders@billing": {"0": 45, "1": 40, "2": 7}, "Gone@audit": {"0": 9}})
    before = snapshot(killed)
    report = verify_store(killed)
    found = [line for line in report.lines if line.startswith("FINDING ")]
    assert report.findings == 1 and len(found) == 1, report.lines
    assert found[0].startswith("FINDING group billing committed offset 45 on Orders/0, past "
                               "the queue's end 41: offsets 41..44 went to messages")
    assert f"mqfs group reset {killed} billing Orders --to 41 -q 0" in found[0]
    # the end itself (Orders/1) is no finding, nor a queue the store holds nothing of (Gone/0)
    assert report.ok and report.lines[-1] == "OK: no damage, but 1 finding above"
    assert snapshot(killed) == before


def test_verify_lists_it_and_exits_0(killed):
    """A broker store may have it after any crash that cut its tail: not a failed verify."""
    commit(killed, {"Timed@t": {"0": 4}})
    done = mqfs("verify", killed)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("FINDING group t committed offset 4 on Timed/0, past the "
                               "queue's end 3: offset 3 went to a message") for line in lines)
    assert "OK: no damage, but 1 finding above" in lines


def test_commits_at_or_below_the_end_are_no_finding(killed):
    commit(killed, {"Orders@billing": {"0": 41, "1": 0, "2": 40}})
    report = verify_store(killed)
    assert report.findings == 0 and report.lines[-1] == "OK", report.lines


def test_group_show_warns_where_it_says_lag_0(killed):
    commit(killed, {"Orders@billing": {"0": 45, "1": 40}})
    shown = mqfs("group", "show", killed)
    assert shown.stdout.splitlines() == ["billing Orders 0 45 0", "billing Orders 1 40 0"]
    assert shown.stderr.splitlines() == [
        "mqfs: group billing committed offset 45 on Orders/0, past the queue's end 41: offsets "
        "lost in a crash (`mqfs verify` says more)"]
