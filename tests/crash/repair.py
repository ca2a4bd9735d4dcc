"""T6: repair interrupted. A store damaged one of the T5 ways is repaired by a process that is
killed at a crash site (kill -9), fails with ENOSPC at a step, loses the power during or right
after the repair (loop-mounted ext4), or whose plan goes stale because the store was opened
and written between plan and apply. Then, each time: repair run again converges (its next
plan is empty), verify passes, every intact message is served at its acknowledged offsets
(including those written between plan and apply), and no queue offset is given out twice,
not even after a later crash that makes an open rebuild every queue from the records.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys

from mqfs.store import Message, MessageStore, StoreError
from mqfs.store.integrity.verify import verify_store
from mqfs.store.repair import apply_repair, plan_repair
from tests.crash.corruption import _Case, _mutate, _queue_ends, _serves, _Skip
from tests.crash.ext4 import MOUNT_OPTIONS
from tests.crash.oracle import crash_config, expected_message
from tests.crash.tiers import REPO, CaseResult, run_killed
from tests.store.helpers import store_state
from tests.waits import LIMIT

T6_KINDS = ("files-swap", "zero-page", "missing-middle", "missing-oldest", "manifest-flavor",
            "flip-body", "flip-queueoffset", "flip-topic", "flip-properties")
KILL_SITES = ("repair.journal", "repair.rename", "repair.filler", "repair.move",
              "recovery.dispatch", "cq.write", "index.write", "flush.before", "flush.after",
              "checkpoint.before", "checkpoint.after", "abort.create", "abort.delete")
ENOSPC_SITES = ("repair.journal", "repair.rename", "repair.filler", "repair.move")
MODES = ("kill", "enospc", "stale", "power-during", "power-after", "full-disk", "restore")
ON_IMAGE = ("power-during", "power-after", "full-disk")  # modes that need the ext4 image
_RUN = ("import sys\nfrom mqfs.store.repair import apply_repair, plan_repair\n"
        "print('ready', flush=True)\napply_repair(plan_repair(sys.argv[1]))\n")


def repair_cmd(root: str) -> list[str]:
    """A process that plans and applies a repair of `root` (says `ready` first)."""
    return [sys.executable, "-c", _RUN, root]


def run_repair(root: str, site: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("MQFS_CRASH_AT", None)
    if site:
        env["MQFS_CRASH_AT"] = site
    return subprocess.run(repair_cmd(root), cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=LIMIT)


def t6_case(workdir: str, seed: int, mode: str, image=None) -> CaseResult:
    """One interrupted repair; `image` (an Ext4Image) for the power-cut modes."""
    rng = random.Random(seed)
    kind = rng.choice(T6_KINDS)
    base = image.mnt if mode in ON_IMAGE else workdir
    label = f"T6 seed={seed} mode={mode} kind={kind}"
    if mode in ON_IMAGE:
        options = rng.choice(MOUNT_OPTIONS)
        image.mount(options)
        label += f" mount={options or 'default'}"
    try:
        c = _Case(base, seed, kind)
        _mutate(c)
    except _Skip:
        shutil.rmtree(os.path.join(base, f"t5-{seed}-{kind}"), ignore_errors=True)
        return CaseResult(label, reached=False)
    os.sync()  # the damage itself must not be undone by a power cut
    result = CaseResult(label)
    try:
        what, result.reached = _interrupt(c, rng, mode, image, result.problems)
        result.label = f"{result.label} {what}"
        _converge(c, result.problems)
    except Exception as exc:  # a case that blows up is a failed case, with its label
        result.problems.append(f"raised {exc!r}")
    finally:
        shutil.rmtree(c.root, ignore_errors=True)
    return result


def _interrupt(c: _Case, rng: random.Random, mode: str, image, problems: list[str]
               ) -> tuple[str, bool]:
    """Disturb one repair; (what was done, whether it hit the repair at all)."""
    if mode == "kill":
        site = f"{rng.choice(KILL_SITES)}:{rng.choice((1, 1, 2, 3, 5))}"
        out = run_repair(c.root, site)
        if out.returncode not in (0, 137):
            problems.append(f"killed repair failed otherwise: {out.stderr.strip()[-300:]}")
        return f"site={site}", out.returncode == 137
    if mode == "enospc":
        site = f"{rng.choice(ENOSPC_SITES)}:{rng.choice((1, 1, 2, 3))}:enospc"
        out = run_repair(c.root, site)
        hit = "injected" in out.stderr
        if hit and "Traceback" in out.stderr and "No space left" not in out.stderr:
            problems.append(f"ENOSPC gave: {out.stderr.strip()[-300:]}")
        return f"site={site}", hit
    if mode == "stale":
        return "concurrent write between plan and apply", _stale(c, rng, problems)
    if mode == "restore":
        return _restored(c, rng, problems)
    if mode == "full-disk":
        return _full_disk(c, rng, image, problems)
    if mode == "power-during":
        delay = rng.uniform(0.0, 0.6)
        run_killed(repair_cmd(c.root), delay, on_ready=image.power_cut)
        image.reboot()
        return f"cut_after={delay:.3f}s", True
    out = run_repair(c.root, None)  # power-after: the cut right after repair said OK
    if out.returncode != 0:
        problems.append(f"repair failed: {out.stderr.strip()[-300:]}")
    image.power_cut()
    image.reboot()
    after = verify_store(c.root)  # what repair said it did must be on disk: nothing to redo
    if not after.ok:
        problems.append("a power cut right after repair's OK undid it: " +
                        "; ".join(after.lines[:3]))
    return "cut right after OK", True


def _full_disk(c: _Case, rng: random.Random, image, problems: list[str]) -> tuple[str, bool]:
    """A real ENOSPC: fill the file system but for a few KiB, repair (it may fail anywhere),
    then free the space again."""
    ballast = os.path.join(image.mnt, "ballast")
    st = os.statvfs(image.mnt)
    room = rng.choice((0, 0, 4096, 16384, 65536))
    try:
        with open(ballast, "wb") as f:
            want = max(0, st.f_bavail * st.f_frsize - room)
            while want > 0:
                try:
                    os.posix_fallocate(f.fileno(), f.tell(), want)
                    break
                except OSError:  # the file system counts metadata too: ask for a bit less
                    want -= 1 << 20
        out = run_repair(c.root, None)
    finally:
        if os.path.exists(ballast):
            os.unlink(ballast)
    hit = out.returncode != 0
    if hit and "No space left" not in out.stderr and "free disk" not in out.stderr:
        problems.append(f"repair on a full disk failed otherwise: {out.stderr.strip()[-300:]}")
    return f"room={room}", hit


def _stale(c: _Case, rng: random.Random, problems: list[str]) -> bool:
    """Plan; then a writer opens the store and appends acknowledged messages (or, when the
    damage keeps a read-write open out, another repair runs); applying the old plan must
    refuse, changing nothing."""
    plan = plan_repair(c.root)
    try:
        with MessageStore(c.root, crash_config(), create=False) as s:
            for i in range(rng.randint(1, 20)):
                m = expected_message(c.exp.seed, 1, i, c.exp.max_body)
                r = s.put(m)
                c.exp.written[(1, i)] = (r.commitlog_offset, r.queue_offset)
    except StoreError:
        apply_repair(plan_repair(c.root))
    try:
        apply_repair(plan)
    except StoreError as exc:
        if "changed since" not in str(exc):
            problems.append(f"the stale plan was refused for another reason: {exc}")
        return True
    problems.append("a repair applied a plan made before the store changed")
    return True


def _restored(c: _Case, rng: random.Random, problems: list[str]) -> tuple[str, bool]:
    """Back up the damaged store, kill its repair at a site, restore the backup over the
    directory (`cp -a`: what only the directory holds, the journal and *.repair files,
    stays). The next read-write open either finishes the journal (it still describes the
    files) or refuses in one line changing nothing; then, as the line says, the journal
    and *.repair files go and the store is repaired as found."""
    backup = c.root + ".backup"
    shutil.copytree(c.root, backup, ignore=shutil.ignore_patterns("lock", "mqfs.lock"))
    site = f"{rng.choice(KILL_SITES)}:{rng.choice((1, 1, 2, 3, 5))}"
    try:
        out = run_repair(c.root, site)
        if out.returncode not in (0, 137):
            problems.append(f"killed repair failed otherwise: {out.stderr.strip()[-300:]}")
        for dirpath, _, names in os.walk(backup):
            rel = os.path.relpath(dirpath, backup)
            os.makedirs(os.path.join(c.root, rel), exist_ok=True)
            for n in names:
                shutil.copy2(os.path.join(dirpath, n), os.path.join(c.root, rel, n))
    finally:
        shutil.rmtree(backup, ignore_errors=True)
    before = store_state(c.root)
    try:
        MessageStore(c.root, crash_config(), create=False).open().close()
        return f"site={site} restored, finished", out.returncode == 137
    except StoreError as exc:
        line = str(exc)
        if store_state(c.root) != before:
            problems.append(f"a refused open of the restored store changed it: {line}")
        if "does not belong" not in line:
            return f"site={site} restored, refused: {line[:80]}", out.returncode == 137
        if "\n" in line or "nothing was changed" not in line:
            problems.append(f"the refusal is not one line saying nothing changed: {line}")
    os.unlink(os.path.join(c.root, "repair-journal.json"))
    for name in os.listdir(os.path.join(c.root, "commitlog")):
        if name.endswith(".repair"):
            os.unlink(os.path.join(c.root, "commitlog", name))
    return f"site={site} restored, journal refused", out.returncode == 137


def _converge(c: _Case, problems: list[str]) -> None:
    """Repair again until nothing is left to do (at most twice), then check everything."""
    for _ in range(2):
        plan = plan_repair(c.root)
        if not plan.needed:
            break
        apply_repair(plan)
    else:
        if plan_repair(c.root).needed:
            problems.append("repair does not converge: a third plan still has work")
    after = verify_store(c.root)
    if not after.ok:
        problems.append("verify after repair: " + "; ".join(after.lines[:4]))
    # a later crash that lost the checkpoint and the queues: they are rebuilt from the records,
    # and the offsets the repair kept taken must stay taken all the same
    shutil.rmtree(os.path.join(c.root, "consumequeue"), ignore_errors=True)
    os.unlink(os.path.join(c.root, "checkpoint"))
    with open(os.path.join(c.root, "abort"), "w") as f:
        f.write("1")
    with MessageStore(c.root, crash_config(), create=False) as s:
        _serves(s, c, problems, "after repair")
        for (topic, qid), end in _queue_ends(c).items():
            r = s.put(Message.create(topic, b"after repair", queue_id=qid))
            if r.queue_offset < end:
                problems.append(f"{topic}/{qid} gave out offset {r.queue_offset} again "
                                f"(offsets up to {end - 1} were acknowledged)")
