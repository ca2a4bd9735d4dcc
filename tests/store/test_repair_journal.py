"""Repair as a transaction: a journal before the first change, rolled forward by the next repair
or read-write open wherever a kill -9 or ENOSPC stopped it; a CommitLog file left between
two names is never taken for missing data; the offsets of messages lost to damage stay taken;
a plan applies only to the store it was made for."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from mqfs.store import CorruptionError, Message, MessageStore, StoreError
from mqfs.store.integrity.repair_journal import NAME
from mqfs.store.integrity.verify import verify_store
from mqfs.store.meta.log_start import recorded_min_offset
from mqfs.store.repair import apply_repair, plan_repair
from tests.crash.repair import run_repair
from tests.crash.tiers import RECOVERY_LOGS
from tests.fusefs.helpers import MQFS
from tests.store.helpers import flip, repair_refuses, small_config, store_state

pytestmark = pytest.mark.allow_logs(*RECOVERY_LOGS)
SIZE = 4096


def _config(**kw):
    return small_config(commitlog_file_size=SIZE, **kw)


def _store(root: str) -> list:
    """20 messages on T/0 then 10 on U/0, over several CommitLog files."""
    with MessageStore(root, _config()) as s:
        return [s.put(Message.create("T" if i < 20 else "U", b"body %03d " % i * 40))
                for i in range(30)]


def _flip_body(root: str, r) -> None:
    path = os.path.join(root, "commitlog", f"{r.commitlog_offset - r.commitlog_offset % SIZE:020d}")
    flip(path, r.commitlog_offset % SIZE + 100, 0x01)


def _swap_files(root: str) -> None:
    names = sorted(os.listdir(os.path.join(root, "commitlog")))
    a, b = (os.path.join(root, "commitlog", n) for n in names[1:3])
    os.rename(a, a + ".x")
    os.rename(b, a)
    os.rename(a + ".x", b)


def _serves_all(root: str, results, lost=()) -> None:
    with MessageStore(root, _config(), create=False) as s:
        for i in range(len(results)):
            topic, qoff = ("T", i) if i < 20 else ("U", i - 20)
            if i in lost:
                with pytest.raises(CorruptionError):
                    s.get(topic, 0, qoff)
            else:
                assert bytes(s.get(topic, 0, qoff).body) == b"body %03d " % i * 40


@pytest.mark.parametrize("nth", (1, 2, 3, 4))
def test_kill_between_rename_passes_loses_nothing(tmp_path, nth):
    """Issue 20 item 1: killed after its nth rename, the next `mqfs repair --yes` finishes the
    swap from the journal instead of taking a *.repair file for a missing one."""
    root = str(tmp_path / "s")
    results = _store(root)
    _swap_files(root)
    assert run_repair(root, f"repair.rename:{nth}").returncode == 137
    out = subprocess.run([*MQFS, "repair", "--yes", root], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "finished an interrupted repair" in out.stdout
    assert not [n for n in os.listdir(os.path.join(root, "commitlog")) if n.endswith(".repair")]
    assert verify_store(root).ok and not os.path.exists(os.path.join(root, NAME))
    _serves_all(root, results)


def test_a_repair_file_with_no_journal_is_refused_changing_nothing(tmp_path):
    root = str(tmp_path / "s")
    _store(root)
    path = os.path.join(root, "commitlog", sorted(os.listdir(os.path.join(root, "commitlog")))[1])
    os.rename(path, path + ".repair")
    before = store_state(root)
    with pytest.raises(StoreError, match=r"\.repair is a CommitLog file an interrupted repair"):
        plan_repair(root)
    assert any(".repair is a CommitLog file" in line for line in verify_store(root).lines)
    assert store_state(root) == before


@pytest.mark.parametrize("site", ("repair.journal:1", "repair.filler:1", "repair.move:1",
                                  "repair.move:3", "recovery.dispatch:1", "cq.write:1",
                                  "checkpoint.before:1", "repair.move:1:enospc",
                                  "repair.move:3:enospc", "repair.filler:1:enospc"))
@pytest.mark.parametrize("finisher", ("open", "repair"))
def test_interrupted_repair_keeps_a_lost_message_offset_taken(tmp_path, site, finisher):
    """Issue 20 item 2: the last message of T is damaged; however the repair is stopped, the
    next open or repair finishes it and T's next message gets offset 20, not 19 again."""
    root = str(tmp_path / "s")
    results = _store(root)
    _flip_body(root, results[19])
    out = run_repair(root, site)
    assert out.returncode == 137 or "injected" in out.stderr, out.stderr
    assert os.path.exists(os.path.join(root, NAME))
    if finisher == "repair":
        before = store_state(root)
        plan = plan_repair(root)  # the plan reads only: the journal is still to finish
        assert plan.interrupted and plan.needed and store_state(root) == before
        assert "finished an interrupted repair" in apply_repair(plan)[0]
    with MessageStore(root, _config(), create=False) as s:
        assert s.put(Message.create("T", b"next")).queue_offset == 20
    assert verify_store(root).ok and not os.path.exists(os.path.join(root, NAME))
    _serves_all(root, results, lost={19})


def test_a_read_only_open_refuses_a_half_done_repair(tmp_path):
    root = str(tmp_path / "s")
    results = _store(root)
    _flip_body(root, results[5])
    assert run_repair(root, "repair.move:1").returncode == 137
    before = store_state(root)
    with pytest.raises(StoreError, match="interrupted repair"):
        MessageStore(root, _config(read_only=True), create=False).open()
    report = verify_store(root)
    assert not report.ok and any(NAME in line for line in report.lines)
    assert store_state(root) == before


def test_a_damaged_journal_is_refused_in_one_line(tmp_path):
    root = str(tmp_path / "s")
    _store(root)
    with open(os.path.join(root, NAME), "w") as f:
        f.write('{"format": 1, "step": "fillers", "renames": [["../../etc/passwd", "x"]]}')
    with pytest.raises(StoreError, match="not 20 digits"):
        MessageStore(root, _config(), create=False).open()


def test_a_plan_made_before_the_store_changed_is_refused(tmp_path):
    """Issue 20 item 3: the plan is shown, then the store is opened and written; applying
    the old plan refuses and changes nothing, and a new plan keeps the new messages."""
    root = str(tmp_path / "s")
    results = _store(root)
    _flip_body(root, results[5])
    plan = plan_repair(root)
    with MessageStore(root, _config(), create=False) as s:  # a damaged body: the open serves
        added = [s.put(Message.create("U", b"added %d" % i)) for i in range(50)]
    before = store_state(root)
    with pytest.raises(StoreError, match="changed since this repair was planned"):
        apply_repair(plan)
    assert store_state(root) == before
    apply_repair(plan_repair(root))
    assert verify_store(root).ok
    _serves_all(root, results, lost={5})
    with MessageStore(root, _config(), create=False) as s:
        assert [bytes(s.get("U", 0, r.queue_offset).body) for r in added] == \
            [b"added %d" % i for i in range(50)]


@pytest.mark.parametrize("loss", ("consumequeue", "checkpoint"))
def test_offsets_a_repair_kept_stay_taken_after_a_later_rebuild(tmp_path, loss):
    """The queue units that keep lost offsets taken are derived data; when a later open
    rebuilds the queue from the records (its files deleted, or a crash that lost the
    checkpoint), config/keptQueueEnds.json still keeps offset 19 of T taken."""
    root = str(tmp_path / "s")
    results = _store(root)
    _flip_body(root, results[19])
    apply_repair(plan_repair(root))
    if loss == "consumequeue":
        shutil.rmtree(os.path.join(root, "consumequeue", "T"))
    else:
        os.unlink(os.path.join(root, "checkpoint"))
        with open(os.path.join(root, "abort"), "w") as f:
            f.write("1")
    with MessageStore(root, _config(), create=False) as s:
        assert s.put(Message.create("T", b"next")).queue_offset == 20
    assert verify_store(root).ok
    _serves_all(root, results, lost={19})


@pytest.mark.parametrize("forged", (
    ("config/keptQueueEnds.json", '{"T": {"0": {"end": 1000000000000, "filler": [0, 92]}}}',
     "more messages than the CommitLog could ever have held"),
    (NAME, '{"format": 1, "step": "fillers", "damages": [{"start": 4000, "end": 9000, '
     '"file": "x", "storeTs": 0}]}', "crosses a CommitLog file's end")))
def test_a_forged_kept_end_or_journal_is_refused_in_one_line(tmp_path, forged):
    """The store directory is input: a kept end past anything the CommitLog could hold
    would make an open write units until the disk is full."""
    root = str(tmp_path / "s")
    _store(root)
    name, text, message = forged
    with open(os.path.join(root, name), "w") as f:
        f.write(text)
    with pytest.raises(StoreError, match=message):
        MessageStore(root, _config(), create=False).open()


def _restore(backup: str, root: str) -> None:
    """Copy a backup over the store directory, as `cp -a backup/. store/` does: files of the
    backup replace their namesakes, what only the directory holds (the journal, a *.repair
    file an interrupted repair left) stays."""
    for dirpath, _, names in os.walk(backup):
        rel = os.path.relpath(dirpath, backup)
        os.makedirs(os.path.join(root, rel), exist_ok=True)
        for n in names:
            shutil.copy2(os.path.join(dirpath, n), os.path.join(root, rel, n))


def _open_refused(root: str, says: str) -> dict[str, str]:
    """A read-write open refuses the journal in one line that `says` so and changes nothing;
    the store's state, for the refusals that follow."""
    before = store_state(root)
    with pytest.raises(StoreError, match="does not belong to the store as it is now") as refused:
        MessageStore(root, _config(), create=False).open()
    assert "\n" not in str(refused.value) and says in str(refused.value)
    assert store_state(root) == before
    return before


@pytest.mark.parametrize("site", ("repair.rename:1", "repair.rename:3", "repair.filler:1",
                                  "repair.move:1"))
def test_a_journal_is_never_rolled_into_a_store_restored_over_it(tmp_path, site):
    """Issue 33, item 3: a repair of swapped and damaged files is interrupted, then the store
    is restored from a backup over the directory. The journal no longer describes the files:
    a read-write open, `repair` (with or without --yes) and a read-only open each refuse in
    one line, changing nothing; with the journal moved out, the restored store is whole."""
    root, backup = str(tmp_path / "s"), str(tmp_path / "backup")
    results = _store(root)
    shutil.copytree(root, backup)
    _swap_files(root)
    _flip_body(root, results[25])
    out = run_repair(root, site)
    assert out.returncode == 137, out.stderr
    assert os.path.exists(os.path.join(root, NAME))
    _restore(backup, root)
    before = _open_refused(root, "nothing was changed")
    with pytest.raises(StoreError, match="does not belong"):
        plan_repair(root)
    assert store_state(root) == before
    repair_refuses(root, "does not belong")
    with pytest.raises(StoreError, match="interrupted repair"):
        MessageStore(root, _config(read_only=True), create=False).open()
    assert store_state(root) == before
    os.unlink(os.path.join(root, NAME))  # as the line says: the journal and *.repair out
    for name in os.listdir(os.path.join(root, "commitlog")):
        if name.endswith(".repair"):
            os.unlink(os.path.join(root, "commitlog", name))
    assert verify_store(root).ok
    _serves_all(root, results)


def test_a_journal_of_this_store_is_still_finished_by_a_plain_repair(tmp_path):
    """The check lets the store's own journal through at every step: a kill anywhere in a
    swap-and-fill repair is finished by `repair --yes`, the plan before it changing nothing."""
    root = str(tmp_path / "s")
    results = _store(root)
    _swap_files(root)
    _flip_body(root, results[25])
    for nth in (1, 2, 3, 4):
        assert run_repair(root, f"repair.rename:{nth}").returncode == 137
        before = store_state(root)
        plan = plan_repair(root)
        assert plan.interrupted and store_state(root) == before
        break
    out = subprocess.run([*MQFS, "repair", "--yes", root], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert verify_store(root).ok
    _serves_all(root, results, lost={25})


def test_the_plan_names_the_messages_a_repair_would_lose(tmp_path):
    """Not 'about 2 messages lost': which ones, by queue and offset, so their owner can
    look for them elsewhere before saying yes."""
    root = str(tmp_path / "s")
    results = _store(root)
    for i in (3, 4, 22):
        _flip_body(root, results[i])
    plan = plan_repair(root)
    lines = plan.lines()
    assert "lose T/0 offsets 3-4" in lines and "lose U/0 offset 2" in lines, lines
    assert any("3 messages the ConsumeQueues name lost" in line for line in lines), lines


def _oldest_file_lost(root: str) -> str:
    """Delete the oldest CommitLog file (a loss repair accepts: the log starts after it)."""
    oldest = os.path.join(root, "commitlog", sorted(os.listdir(os.path.join(root, "commitlog")))[0])
    os.unlink(oldest)
    return oldest


def test_a_restore_that_undid_the_head_step_has_it_written_again(tmp_path):
    """A repair that accepts a lost oldest file is killed after its `head` step wrote the new
    log start to config/retention.json; a backup of the damaged store restored over the
    directory puts the old retention.json back, which the journal's fingerprints do not
    cover. The next read-write open writes the log start again (a refused open would have
    quarantined the derived files and left a journal no repair could finish)."""
    root, backup = str(tmp_path / "s"), str(tmp_path / "backup")
    results = _store(root)
    _oldest_file_lost(root)
    shutil.copytree(root, backup)
    assert run_repair(root, "repair.move:1").returncode == 137
    assert recorded_min_offset(root) == SIZE
    _restore(backup, root)
    assert recorded_min_offset(root) != SIZE
    with MessageStore(root, _config(), create=False) as s:
        assert s.commitlog.min_offset == SIZE
        lost = [i for i, r in enumerate(results) if r.commitlog_offset < SIZE]
        assert lost and all(bytes(s.get("T", 0, i).body) == b"body %03d " % i * 40
                            for i in range(len(lost), 20))
    assert recorded_min_offset(root) == SIZE and not os.path.exists(os.path.join(root, NAME))
    assert verify_store(root).ok and not plan_repair(root).needed


def test_a_journal_that_drops_files_a_restore_brought_back_is_refused(tmp_path):
    """The same journal over a backup taken before the file went: it would record files that
    are there as lost. A read-write open refuses it in one line and changes nothing."""
    root, backup = str(tmp_path / "s"), str(tmp_path / "backup")
    _store(root)
    shutil.copytree(root, backup)
    _oldest_file_lost(root)
    assert run_repair(root, "repair.move:1").returncode == 137
    _restore(backup, root)
    _open_refused(root, "accepts the loss")


def test_a_restore_that_undid_the_manifest_step_has_it_written_again(tmp_path):
    """The same for the `manifest` step: mqfs.json names the wrong flavor, repair writes it
    again from the records and is killed later; the backup restored over the directory puts
    the wrong mqfs.json back, and the next read-write open writes it again and opens."""
    root, backup = str(tmp_path / "s"), str(tmp_path / "backup")
    results = _store(root)
    manifest = os.path.join(root, "mqfs.json")
    with open(manifest) as f:
        data = json.load(f)
    right = data["flavor"]
    data["flavor"] = "rocketmq" if right == "xxhash" else "xxhash"
    with open(manifest, "w") as f:
        json.dump(data, f)
    shutil.copytree(root, backup)
    assert run_repair(root, "repair.move:1").returncode == 137
    _restore(backup, root)
    with open(manifest) as f:
        assert json.load(f)["flavor"] != right
    _serves_all(root, results)
    with open(manifest) as f:
        assert json.load(f)["flavor"] == right
    assert not os.path.exists(os.path.join(root, NAME)) and verify_store(root).ok


def _wrong_flavor(root: str) -> None:
    manifest = os.path.join(root, "mqfs.json")
    with open(manifest) as f:
        data = json.load(f)
    data["flavor"] = "rocketmq" if data["flavor"] == "xxhash" else "xxhash"
    with open(manifest, "w") as f:
        json.dump(data, f)


def _damaged_json(name: str):
    def damage(root: str) -> None:
        with open(os.path.join(root, "config", name), "w") as f:
            f.write("{not json")
    return damage


def _stray_commitlog_file(root: str) -> None:
    """A short file after the newest CommitLog file (no journal step covers it)."""
    directory = os.path.join(root, "commitlog")
    newest = max(int(n) for n in os.listdir(directory) if n.isdigit())
    with open(os.path.join(directory, f"{newest + SIZE:020d}"), "wb") as f:
        f.write(b"x" * 10)


REFUSALS = {"stray-commitlog-file": (_stray_commitlog_file, "bytes but this store's files",
                                     None),
            "manifest-flavor": (_wrong_flavor, "says flavor", "mqfs.json"),  # not a journal step
            "topics-json": (_damaged_json("topics.json"), "topics.json", "config/topics.json"),
            "kept-ends": (_damaged_json("keptQueueEnds.json"), "keptQueueEnds.json",
                          "config/keptQueueEnds.json")}


@pytest.mark.parametrize("why", sorted(REFUSALS))
def test_an_open_that_refuses_takes_no_step_of_an_interrupted_repair_first(tmp_path, why):
    """A read-write open checks everything it can refuse for before it rolls an interrupted
    repair forward: a refusal (a manifest the journal does not rewrite, a damaged config
    file the open reads) leaves every file as it was and says "nothing was changed"; once
    the cause is gone the next open finishes the repair. Before, the open did the journal's
    file steps first (the derived files went to quarantine/) and then refused."""
    root = str(tmp_path / "s")
    results = _store(root)
    _flip_body(root, results[25])
    assert run_repair(root, "repair.move:1").returncode == 137
    damage, said, damaged = REFUSALS[why]
    names = set(os.listdir(os.path.join(root, "commitlog")))
    path = os.path.join(root, damaged) if damaged else ""
    kept = open(path, "rb").read() if damaged and os.path.exists(path) else None
    damage(root)
    before = store_state(root)
    with pytest.raises(StoreError, match=said) as refused:
        MessageStore(root, _config(), create=False).open()
    assert "\n" not in str(refused.value) and "nothing more was changed" not in str(refused.value)
    assert store_state(root) == before
    if not damaged:
        for name in set(os.listdir(os.path.join(root, "commitlog"))) - names:
            os.unlink(os.path.join(root, "commitlog", name))
    elif kept is None:
        os.unlink(path)
    else:
        with open(path, "wb") as f:
            f.write(kept)
    _serves_all(root, results, lost={25})
    assert not os.path.exists(os.path.join(root, NAME)) and verify_store(root).ok


@pytest.mark.parametrize("site", ("repair.filler:1", "repair.move:1"))
def test_damage_the_journal_does_not_cover_is_refused_before_any_step(tmp_path, site):
    """Issue 33, item 3: a record damaged after a repair was interrupted (the journal does not
    cover it). The open used to do the journal's file steps (fillers, the derived files to
    quarantine/) and then refuse for the new damage, and `repair` refused the same way
    forever. Now the open refuses before any step, in one line that is true (every file
    hashes the same), and `repair --yes` adds the damage to the journal and finishes."""
    root = str(tmp_path / "s")
    results = _store(root)
    _flip_body(root, results[25])
    assert run_repair(root, site).returncode == 137
    _flip_body(root, results[5])
    before = store_state(root)
    with pytest.raises(StoreError, match="does not cover all the damage") as refused:
        MessageStore(root, _config(), create=False).open()
    assert "\n" not in str(refused.value) and "nothing was changed" in str(refused.value)
    assert store_state(root) == before
    plan = plan_repair(root)
    assert store_state(root) == before
    assert any("found since it was planned" in line for line in plan.lines()), plan.lines()
    out = subprocess.run([*MQFS, "repair", "--yes", root], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert verify_store(root).ok and not os.path.exists(os.path.join(root, NAME))
    _serves_all(root, results, lost={5, 25})


@pytest.mark.parametrize("bad", ("crosses", "too-small"))
def test_a_journal_range_no_filler_replaces_is_refused_before_any_step(tmp_path, bad):
    """A journal naming a damaged range no filler record can replace (one that crosses a
    file's end, or is shorter than the smallest record) stopped the fillers step half-way,
    after the renames, saying "nothing was changed". Now it is refused before any step."""
    root = str(tmp_path / "s")
    results = _store(root)
    _flip_body(root, results[25])
    assert run_repair(root, "repair.filler:1").returncode == 137
    path = os.path.join(root, NAME)
    with open(path) as f:
        data = json.load(f)
    d = dict(data["damages"][0])
    d["fingerprint"] = None
    d["start"], d["end"] = ((SIZE - 8, SIZE + 8) if bad == "crosses" else (SIZE + 8, SIZE + 16))
    data["damages"].append(d)
    with open(path, "w") as f:
        json.dump(data, f)
    before = store_state(root)
    with pytest.raises(StoreError, match="crosses a CommitLog file's end|too small") as refused:
        MessageStore(root, _config(), create=False).open()
    assert "\n" not in str(refused.value) and "nothing was changed" in str(refused.value)
    assert store_state(root) == before


@pytest.mark.parametrize("site", ("repair.rename:2", "repair.filler:1", "repair.move:2"))
def test_a_full_disk_in_a_repair_step_says_how_far_it_got(tmp_path, site):
    """ENOSPC in one of the journal's file steps: the line was the bare OSError, saying
    neither what had changed nor what keeps the rest. Now one line names the step it stopped
    in, what the steps change, and the journal that keeps the rest; run again, it finishes."""
    root = str(tmp_path / "s")
    results = _store(root)
    _swap_files(root)
    _flip_body(root, results[25])
    env = dict(os.environ, MQFS_CRASH_AT=f"{site}:enospc")
    out = subprocess.run([*MQFS, "repair", "--yes", root], env=env, capture_output=True, text=True)
    assert out.returncode == 1, out.stdout + out.stderr
    line = out.stderr.strip()
    assert "\n" not in line and "No space left on device" in line, line
    step = {"rename": "rename-", "filler": "fillers", "move": "derived"}[site.split(".")[1][:-2]]
    assert f"stopped in its step {step}" in line and f"{NAME} keeps the rest" in line, line
    assert "nothing was changed" not in line and os.path.exists(os.path.join(root, NAME))
    out = subprocess.run([*MQFS, "repair", "--yes", root], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert verify_store(root).ok
    _serves_all(root, results, lost={25})


def test_a_refusal_after_the_steps_names_every_change_they_made(tmp_path, monkeypatch):
    """A refusal that can only come after an interrupted repair's file steps (recovery finds
    the disk too full to index the rebuilt queues): the line says what the steps changed and
    where the evidence is, and every file that differs from before the open is one it names
    (the CommitLog file its filler went into, the derived files now in quarantine/, the
    journal's step, the bytes the filler replaced, copied to quarantine/)."""
    import collections

    from mqfs.store.integrity import recovery

    root = str(tmp_path / "s")
    results = _store(root)
    _flip_body(root, results[25])
    assert run_repair(root, "repair.filler:1").returncode == 137
    before = store_state(root)
    full = collections.namedtuple("full", "f_bavail f_frsize")(0, 4096)
    monkeypatch.setattr(recovery.os, "statvfs", lambda path: full)
    with pytest.raises(StoreError, match="free disk") as refused:
        MessageStore(root, _config(), create=False).open()
    monkeypatch.undo()
    line = str(refused.value)
    assert "\n" not in line and "nothing was changed" not in line, line
    assert "nothing more was changed (the interrupted repair's file steps ran" in line, line
    assert "filler records at CommitLog offsets " + str(results[25].commitlog_offset) in line
    assert "moved to quarantine/" in line and f"{NAME} keeps the rest" in line, line
    after = store_state(root)
    changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
    filled = f"commitlog/{results[25].commitlog_offset - results[25].commitlog_offset % SIZE:020d}"
    derived = ("consumequeue", "index", "checkpoint", "config/dispatchState.json",
               "config/queueEnds.log", "abort")
    unnamed = {p for p in changed if p != filled and not p.startswith("quarantine/")
               and not p.startswith(NAME) and not any(p == d or p.startswith(d + "/")
                                                      for d in derived)}
    assert not unnamed, unnamed
    assert filled in changed and any(p.startswith("quarantine/") and "damaged" in p
                                     for p in changed)
    _serves_all(root, results, lost={25})  # the disk has room again: the next open finishes


def test_a_plan_with_no_damaged_range_says_no_bytes_go_to_quarantine(tmp_path):
    """A repair that only accepts a lost oldest file copies no CommitLog bytes: its plan
    said '0 messages ... in 0 damaged ranges (0 bytes, copied to quarantine/)'."""
    root = str(tmp_path / "s")
    _store(root)
    _oldest_file_lost(root)
    plan = plan_repair(root)
    assert plan.needed and not plan.damages
    lines = plan.lines()
    assert not any("quarantine" in line or "damaged range" in line for line in lines), lines
    assert any(line.startswith("keep ") and "rebuild every ConsumeQueue" in line for line in lines), lines


def test_a_symbolic_link_for_a_consume_queue_file_is_refused_as_one(tmp_path):
    """A ConsumeQueue file replaced by a symbolic link: repair refused it as '... is 7 bytes
    but this store's files are N bytes; check the file sizes in mqfs.json' (the link's own
    size), sending its owner to a config that is right."""
    root = str(tmp_path / "s")
    _store(root)
    qdir = os.path.join(root, "consumequeue", "T", "0")
    name = sorted(os.listdir(qdir))[0]
    os.rename(os.path.join(qdir, name), os.path.join(root, "elsewhere"))
    os.symlink("../../../elsewhere", os.path.join(qdir, name))
    repair_refuses(root, f"{os.path.join(qdir, name)} is a symbolic link")
