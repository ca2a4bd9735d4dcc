"""A narrow selection's reader (a tag, an hour: the units read without numpy, a record at a
time; `queue_spans` and `records`) against the columnar reader it stands in for: the same
messages, bytes and order, and the same damage named in the same order, over generated
stores, every broker layout and damaged files (CommitLog bytes, units pointing anywhere,
invalid and pre-blank units, a lost first CommitLog file)."""

from __future__ import annotations

import argparse
import io
import os
import struct
import subprocess
import sys

import pytest

from mqfs.fusefs.dump import arguments, command, queue_spans
from mqfs.fusefs.dump.writer import Writer
from mqfs.store import Message, MessageStore
from mqfs.store.offline.located import layout_at
from mqfs.store.offline.selection import glued
from tests.fusefs.test_dump import SCHEDULE, T0, _broker_kinds, _broker_workload, broker_store
from tests.store.helpers import REPO, small_config

UNIT = struct.Struct(">qiq")


def _store(root: str, n: int = 500) -> None:
    """Two topics on three queues, tags t0..t3, a minute apart: files small enough to roll."""
    with MessageStore(root, small_config()) as s:
        clock = [T0]
        s.clock = lambda: clock[0]
        for i in range(n):
            s.put(Message.create("Orders" if i % 3 else "Pay", b"order %d %s" % (i, b"x" * (i % 50)),
                                 queue_id=i % 3, keys=[f"o-{i}"], tags=f"t{i % 4}",
                                 properties={"ORDER_ID": str(i)}))
            clock[0] += 60_000


def _run(root: str, args: list[str], few: int, monkeypatch, json_lines: bool = False
         ) -> tuple[bytes, list]:
    """(the JSON lines, the damage named) of a dump with this FEW (0: the columnar reader);
    `json_lines`: C writes the lines it can (test_dump_c), as `mqfs dump -f json` does."""
    monkeypatch.setattr(queue_spans, "FEW", few)
    p = argparse.ArgumentParser()
    arguments.add_parser(p.add_subparsers())
    a = p.parse_args(glued(["dump", root, *args]))
    from mqfs.store.offline.selection import selection_of

    damage: list = []
    out = io.BytesIO()
    w = Writer(out, "json")
    for msg in command.selected(layout_at(root), selection_of(a), lambda o, what: damage.append((o, what)),
                                a.each, a.all_versions, json_lines=json_lines):
        w.write(msg)
    w.flush()
    return out.getvalue(), damage


def _same(root: str, args: list[str], monkeypatch) -> tuple[bytes, list]:
    cols = _run(root, args, 0, monkeypatch)
    few = _run(root, args, 10**9, monkeypatch)
    assert few == cols, args
    return cols


SELECTIONS = [["--tag", "t1"], ["--tag", "t1", "--tag", "t3", "-q", "2"], ["--tag", "nope"],
              ["--since", str(T0 + 30 * 60_000), "--until", str(T0 + 95 * 60_000)],
              ["--since", str(T0 + 200 * 60_000)], ["--until", str(T0 + 10 * 60_000)],
              ["-t", "Pay", "--from-offset", "5", "--to-offset", "40"],
              ["--tag", "t2", "-e", "order 1[0-9]"], ["--tag", "t0", "-p", "ORDER_ID=40"],
              ["--since", str(T0 + 60 * 60_000), "--each", "1"], ["-q", "1", "--each", "3"],
              ["--tag", "t1", "--each", "2"], ["-t", "Orders", "-k", "o-7"],
              ["-t", "Orders", "-q", "1", "--tag", "t2"], ["-t", "Orders", "-q", "1", "--until", str(T0 + 60 * 60_000)]]


def _damaged(root: str, how: str) -> None:
    """Damage of one kind in a generated store's files."""
    cq = os.path.join(root, "consumequeue", "Orders", "1")
    first_cq = os.path.join(cq, sorted(os.listdir(cq))[0])
    log = os.path.join(root, "commitlog")
    with open(first_cq, "r+b") as f:
        units = f.read()
        offsets = [UNIT.unpack_from(units, i)[0] for i in range(0, 20 * 30, 20)]
        if how == "cq_points_mid_record":
            f.seek(20 * 3)
            f.write(struct.pack(">q", offsets[3] + 7))
        elif how == "cq_invalid_unit":  # units after it are not written, as RocketMQ reads
            f.seek(20 * 9 + 8)
            f.write(struct.pack(">i", 0))
        elif how == "cq_negative_offset":
            f.seek(20 * 12)
            f.write(struct.pack(">q", -5))
        elif how == "cq_pre_blank":
            for i in range(4):
                f.seek(20 * i)
                f.write(UNIT.pack(0, 0x7FFFFFFF, 0))
        elif how == "cq_past_the_log":
            f.seek(20 * 5)
            f.write(struct.pack(">q", 10**12))
    if how == "commitlog_flip":  # a body byte: its record fails its checksum
        with open(os.path.join(log, "0" * 20), "r+b") as f:
            f.seek(offsets[2] + 200)
            b = f.read(1)
            f.seek(offsets[2] + 200)
            f.write(bytes([b[0] ^ 1]))
    elif how == "commitlog_header":
        with open(os.path.join(log, "0" * 20), "r+b") as f:
            f.seek(offsets[4] + 4)
            f.write(b"\0\0\0\0")
    elif how == "first_commitlog_lost":
        os.unlink(os.path.join(log, "0" * 20))


DAMAGE = ["cq_points_mid_record", "cq_invalid_unit", "cq_negative_offset", "cq_pre_blank",
          "cq_past_the_log", "commitlog_flip", "commitlog_header", "first_commitlog_lost"]


@pytest.mark.parametrize("how", ["none", *DAMAGE])
def test_a_generated_stores_narrow_selections_are_the_columnar_readers(tmp_path, monkeypatch, how):
    root = str(tmp_path / "s")
    _store(root)
    if how != "none":
        _damaged(root, how)
    runs = [_same(root, args, monkeypatch) for args in SELECTIONS]
    assert all(out for out, _ in runs[:2])
    named = [d for _, damage in runs for d in damage]
    assert bool(named) == (how not in ("none", "cq_invalid_unit", "cq_negative_offset", "cq_pre_blank")), named


@pytest.mark.parametrize("kind", sorted(_broker_kinds()))
def test_every_broker_layouts_narrow_selections_are_the_columnar_readers(tmp_path, monkeypatch, kind):
    root = str(tmp_path / "store")
    _broker_kinds()[kind](root)
    every = _run(root, [], 10**9, monkeypatch)[0]
    assert every
    stamps = sorted(int(line.split(b'"store_timestamp":')[1].split(b",")[0]) for line in every.splitlines())
    mid = stamps[len(stamps) // 2]
    tags = {line.split(b'"tags":')[1].split(b",")[0] for line in every.splitlines()} - {b"null"}
    for args in (["--since", str(mid)], ["--until", str(mid)], ["--since", str(mid), "--each", "1"],
                 *(["--tag", t.strip(b'"').decode()] for t in sorted(tags)[:4])):
        assert not _same(root, args, monkeypatch)[1]


def test_a_broker_stores_delayed_and_transaction_records(tmp_path, monkeypatch):
    root = str(tmp_path / "store")
    broker_store(root, _broker_workload)
    for args in (["--tag", "TagA"], ["-t", SCHEDULE, "--tag", "x"], ["-t", SCHEDULE], ["--since", "0"]):
        _same(root, args, monkeypatch)


def test_a_tag_key_or_time_selection_starts_without_numpy(tmp_path):
    """The point of the narrow reader: the process never imports numpy, for JSON lines or
    a count."""
    root = str(tmp_path / "s")
    _store(root)
    code = ("import sys; from mqfs.fusefs.cli import main; rc = main(sys.argv[1:]); "
            "assert 'numpy' not in sys.modules, 'numpy imported'; sys.exit(rc)")
    for args, lines in ((["--tag", "t1"], 125), (["-k", "o-7"], 1), (["--tag", "t2", "-c"], 1),
                        (["--since", str(T0 + 30 * 60_000), "--until", str(T0 + 40 * 60_000)], 11)):
        proc = subprocess.run([sys.executable, "-c", code, "dump", root, *args], capture_output=True,
                              cwd=REPO, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.count(b"\n") == lines, (args, proc.stdout[-200:])
        assert proc.stdout == b"125\n" if "-c" in args else b'"o-7"' in proc.stdout or "-k" not in args
