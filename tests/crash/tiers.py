"""One crash case per call for tiers T0, T2 and T4 (T3 lives in crash_ext4). The pytest files
run a fixed sample of seeds; scripts/crash-campaign runs the same functions for a given time.
Every case returns a CaseResult whose label carries the seed and crash site to replay it."""

from __future__ import annotations

import os
import random
import shutil
import signal
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from mqfs.store import CorruptionError, MessageStore, StoreFormatError
from mqfs.store.crash_points import SITES
from mqfs.store.files.checkpoint import Checkpoint
from mqfs.store.files.index_file import ENTRY_SIZE, HEADER_SIZE
from mqfs.store.integrity.verify import verify_store
from mqfs.store.repair import apply_repair, plan_repair
from tests import REPO
from tests.crash.oracle import Expectation, crash_config, expected_message, full_check, read_acks
from tests.store.helpers import file_hashes, flip
from tests.waits import eventually

WRITER_SITES = tuple(s for s in SITES if not s.startswith(("recovery.", "repair.")))
RECOVERY_SITES = tuple(s for s in SITES if s.startswith("recovery."))
# what recovering a crashed or damaged store says: these tests provoke it on purpose
RECOVERY_LOGS = (r"^recovery: ", r"^scrub: ", r"^queue ends: ", r"^no abort file, but ",
                 r"the queues are listed from consumequeue/ instead$", r"; using .*\.bak$")


@dataclass
class CaseResult:
    label: str
    problems: list[str] = field(default_factory=list)
    reached: bool = True  # False when the case never got to its state (a clean run was checked)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        return f"{self.label}: " + ("OK" if self.ok else "; ".join(self.problems))


def check(result: CaseResult) -> None:
    """A tier's case passes only when it reached the state it names (its crash site passed,
    the writer killed while writing, the power cut after a durable ack, the damage made)
    and every promise held there: a case that checked a clean run instead fails."""
    assert result.reached, f"{result.label}: never reached the state it is meant to check"
    assert result.ok, str(result)


def write_in_process(root: str, seed: int, n: int, max_body: int, **cfg) -> Expectation:
    """Put n messages of producer 0 and close cleanly; all of them are durable."""
    exp = Expectation(seed, max_body, must="durable", exact=True)
    with MessageStore(root, crash_config(**cfg)) as s:
        for i in range(n):
            r = s.put(expected_message(seed, 0, i, max_body))
            exp.written[(0, i)] = (r.commitlog_offset, r.queue_offset)
            exp.durable.add((0, i))
    return exp


def _store_files(root: str, sub: str) -> list[str]:
    out = []
    for dirpath, _, names in os.walk(os.path.join(root, sub)):
        out += [os.path.join(dirpath, n) for n in names if n.isdigit()]
    return sorted(out)


def _overwrite(path: str, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        old = f.read(len(data))
        if old == data[: len(old)]:  # make sure the bytes really change
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        f.seek(pos)
        f.write(data[: len(old)])


# --- T0: corrupt tails of a cleanly closed store -----------------------------------------------

T0_KINDS = ("commitlog-append", "commitlog-overwrite", "zero16", "torn-properties", "cq-append",
            "cq-overwrite", "index-append")


T0_FLUSHED_KINDS = ("commitlog-overwrite", "zero16", "torn-properties")


def t0_case(workdir: str, seed: int, kind: str, abort: bool) -> CaseResult:
    """Damage the tail of one file. Bytes after the flushed end (commitlog-append) and
    derived files are recovered on open; damage inside the flushed CommitLog makes the open
    refuse without changing a byte, and `repair` then gives back exactly the intact prefix,
    the damaged message lost (EIO) with its offsets kept."""
    rng = random.Random(seed)
    root = os.path.join(workdir, f"t0-{seed}-{kind}-{int(abort)}")
    label = f"T0 seed={seed} kind={kind} abort={abort}"
    n, max_body = rng.randint(50, 100), 300
    exp = write_in_process(root, seed, n, max_body, commitlog_file_size=4096)
    last_phys, _ = exp.written[(0, n - 1)]
    with MessageStore(root, crash_config()) as s:
        last = s.commitlog.read(last_phys)
        last_end = last_phys + last.total_size
        cq_key = (last.topic, last.queue_id)
    cl_last = _store_files(root, "commitlog")[-1]
    file_from = int(os.path.basename(cl_last))
    garbage = rng.randbytes(rng.randint(1, 1024))
    if kind == "commitlog-append":
        _overwrite(cl_last, last_end - file_from, garbage)
    elif kind == "commitlog-overwrite":
        _overwrite(cl_last, rng.randrange(last_phys, last_end) - file_from, garbage)
        _drop_last(exp, n)
    elif kind == "zero16":  # RocketMQ testRecover: 16 zero bytes from the topic length byte
        topic_len_pos = last_end - 2 - len(_props(last)) - len(last.topic) - 1
        _overwrite(cl_last, topic_len_pos - file_from, bytes(16))
        _drop_last(exp, n)
    elif kind == "torn-properties":  # what T3 found: the page holding the tail never landed
        cut = rng.randint(1, len(_props(last)))
        _overwrite(cl_last, last_end - cut - file_from, bytes(cut))
        _drop_last(exp, n)
    elif kind in ("cq-append", "cq-overwrite"):
        cq_last = _store_files(root, os.path.join("consumequeue", *map(str, cq_key)))[-1]
        end = queue_count(exp, cq_key) * 20 - int(os.path.basename(cq_last))
        pos = end if kind == "cq-append" else end - rng.randint(1, min(end, 60))
        _overwrite(cq_last, pos, garbage)
    elif kind == "index-append":
        ix_last = _store_files(root, "index")[-1]
        count = struct.unpack_from(">i", open(ix_last, "rb").read(40), 36)[0]
        slots = crash_config().index_slots
        _overwrite(ix_last, HEADER_SIZE + slots * 4 + count * ENTRY_SIZE, garbage)
    if abort:
        with open(os.path.join(root, "abort"), "w") as f:
            f.write("12345")
    problems = []
    if kind in T0_FLUSHED_KINDS:
        before = file_hashes(root, skip=("lock",))
        problems += _expect_refused(root, "damage inside flushed CommitLog data")
        if file_hashes(root, skip=("lock",)) != before:
            problems.append("the refused open changed files")
        apply_repair(plan_repair(root))
    result = CaseResult(label, problems + full_check(root, exp))
    shutil.rmtree(root, ignore_errors=True)
    return result


def queue_count(exp: Expectation, key: tuple[str, int]) -> int:
    """How many acknowledged messages went to one queue."""
    msgs = (expected_message(exp.seed, p, s, exp.max_body) for (p, s) in exp.written)
    return sum(1 for m in msgs if (m.topic, m.queue_id) == key)


def _props(msg) -> bytes:
    from mqfs.store.format.message import encode_properties
    return encode_properties(msg.properties)


def _drop_last(exp: Expectation, n: int) -> None:
    exp.written.pop((0, n - 1))
    exp.durable.discard((0, n - 1))


# --- T2: the writer process killed ---------------------------------------------------------------

def _writer_cmd(root: str, acks: str, seed: int, mode: str, transient: bool, producers: int,
                count: int, max_body: int, zero_ahead: int | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "tests.crash.writer", root, acks, "--mode", mode,
           "--producers", str(producers), "--count", str(count), "--seed", str(seed),
           "--max-body", str(max_body)]
    return (cmd + (["--transient"] if transient else [])
            + (["--zero-ahead", str(zero_ahead)] if zero_ahead else []))


def run_crashing(cmd: list[str], site: str | None, timeout: float = 120) -> int:
    """Run to the end or to the crash site; return the exit status (137: the site was hit)."""
    env = dict(os.environ)
    env.pop("MQFS_CRASH_AT", None)
    if site:
        env["MQFS_CRASH_AT"] = site
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    if out.returncode not in (0, 137):
        raise RuntimeError(f"writer failed ({out.returncode}): {out.stderr[-2000:]}")
    return out.returncode


def run_killed(cmd: list[str], delay: float, on_ready=None, timeout: float = 120,
               started: Callable[[], object] | None = None) -> bool:
    """Start the writer, wait until it says ready (and `started` holds), let it write for
    `delay` seconds, then (with on_ready: freeze it, call on_ready, a power cut for T3)
    SIGKILL it. True when it was killed while still writing."""
    env = dict(os.environ)
    env.pop("MQFS_CRASH_AT", None)
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        if line.strip() != "ready":
            proc.wait(timeout)
            raise RuntimeError(f"writer did not start (exit {proc.returncode})")
        if started is not None:
            eventually(started, "the writer under way", interval=0.005,
                       alive=lambda: proc.poll() is None)
        try:
            proc.wait(delay)
        except subprocess.TimeoutExpired:
            pass
        writing = proc.poll() is None
        if on_ready is not None and proc.poll() is None:
            # A real power cut stops the writer with the disk. A writer left running would
            # log acks for syncs that return after the cut: an fdatasync in flight during
            # EXT4_IOC_SHUTDOWN can return 0 although the extent conversion it needed was
            # never committed (ext4 drops that error once shut down). Freeze every thread
            # first (waitpid WUNTRACED returns once the whole group is stopped); a sync still
            # in the kernel then finishes, but its put can no longer be acknowledged.
            os.kill(proc.pid, signal.SIGSTOP)
            os.waitpid(proc.pid, os.WUNTRACED)
        if on_ready is not None:
            on_ready()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout)
        proc.stdout.close()
    return writing


def t2_case(workdir: str, seed: int, site: str | None = None,
            recovery_site: str | None = None, mode: str | None = None) -> CaseResult:
    """Kill the writer at a site (`name:n`) or after a random delay; optionally crash the next
    recovery at `recovery_site`; every put that returned must be recovered intact. `mode`
    (sync or async flushing) is the seed's unless given: async writers call flush() every 10
    puts, so every run passes a checkpoint's sites many times."""
    rng = random.Random(seed)
    drawn = rng.choice(("sync", "async"))  # drawn either way: the seed's other draws stay
    mode = mode or drawn
    transient = rng.random() < 0.5
    producers = 3 if mode == "sync" else 2
    max_body = rng.choice((200, 600, 2000))
    root = os.path.join(workdir, f"t2-{seed}")
    acks = root + ".acks"
    label = (f"T2 seed={seed} site={site or 'random-kill'} recovery_site={recovery_site} "
             f"mode={mode} transient={transient}")
    result = CaseResult(label)
    try:
        if site is None:
            cmd = _writer_cmd(root, acks, seed, mode, transient, producers, 3000, max_body)
            result.reached = run_killed(cmd, rng.uniform(0.0, 0.4))
        else:
            cmd = _writer_cmd(root, acks, seed, mode, transient, producers, 60, max_body)
            result.reached = run_crashing(cmd, site) == 137
        if recovery_site is not None:
            rec = _writer_cmd(root, acks, seed, mode, transient, producers, 0, max_body)
            hit = run_crashing(rec + ["--recover-only"], recovery_site) == 137
            result.reached = result.reached and hit
        result.problems = full_check(root, read_acks(acks, seed, max_body, "written"))
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if os.path.exists(acks):
            os.unlink(acks)
    return result


# --- T4: offline mutilation ----------------------------------------------------------------------

T4_KINDS = ("unflushed-garbage", "unflushed-garbage-no-abort", "random-truncate", "bit-flip",
            "checkpoint-delete", "checkpoint-torn", "abort-create", "cq-file-delete",
            "cq-dir-delete", "cq-torn", "index-file-delete", "index-torn",
            "commitlog-newest-delete", "cq-middle-file-delete", "hand-rebuild",
            "config-restored", "crash-without-queue-ends", "config-of-another-store")
_T4_CONFIG = dict(flush_interval_ms=10**7, flush_cq_interval_ms=10**7,
                  flush_thorough_interval_ms=10**8)


def t4_case(workdir: str, seed: int, kind: str) -> CaseResult:
    rng = random.Random(seed)
    root = os.path.join(workdir, f"t4-{seed}-{kind}")
    label = f"T4 seed={seed} kind={kind}"
    max_body = rng.choice((200, 600, 2000))
    try:
        if kind.startswith("unflushed-garbage"):
            problems = _t4_unflushed(root, rng, seed, max_body, abort=not kind.endswith("no-abort"))
        elif kind in _T4_RESTORES:
            problems = _T4_RESTORES[kind](root, rng, seed, max_body)
        else:
            exp = write_in_process(root, seed, rng.randint(60, 300), max_body, **_T4_CONFIG)
            problems = _T4_MUTATIONS[kind](root, rng, exp)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return CaseResult(label, problems)


def _t4_unflushed(root: str, rng: random.Random, seed: int, max_body: int, abort: bool) -> list[str]:
    """Keep only what was flushed: copy an open store whose tail was never flushed, then put
    garbage, zeros or nothing over every file's unflushed part (what a power cut may leave)."""
    live = root + "-live"
    exp = Expectation(seed, max_body, must="durable")
    s = MessageStore(live, crash_config(**_T4_CONFIG)).open()
    try:
        n1, n2 = rng.randint(20, 200), rng.randint(1, 150)
        for i in range(n1 + n2):
            r = s.put(expected_message(seed, 0, i, max_body))
            exp.written[(0, i)] = (r.commitlog_offset, r.queue_offset)
            if i == n1 - 1:
                s.flush()
                exp.durable.update(exp.written)
        flushed = {mf.path: mf.flushed_position for mf in s.commitlog.queue.files}
        for cq in s.consume_queues.open_all().values():
            flushed.update({mf.path: mf.flushed_position for mf in cq.queue.files})
        flushed.update({f.path: f.mf.flushed_position for f in s.index.files})
        shutil.copytree(live, root, ignore=shutil.ignore_patterns("lock"))
    finally:
        s.close()
        shutil.rmtree(live, ignore_errors=True)
    for path, pos in flushed.items():
        copy = os.path.join(root, os.path.relpath(path, live))
        size = os.path.getsize(copy)
        if pos >= size or rng.random() < 0.25:
            continue  # fully flushed, or the kernel happened to write it back
        length = rng.randint(1, size - pos)
        data = bytes(length) if rng.random() < 0.5 else rng.randbytes(length)
        with open(copy, "r+b") as f:
            f.seek(pos)
            f.write(data)
    if not abort:
        os.unlink(os.path.join(root, "abort"))
    return full_check(root, exp)


def _expect_refused(root: str, what: str) -> list[str]:
    try:
        MessageStore(root, crash_config()).open().close()
    except (CorruptionError, StoreFormatError):
        return []
    return [f"{what}: the store opened without reporting it"]


def _random_truncate(root: str, rng: random.Random, exp: Expectation) -> list[str]:
    files = _store_files(root, "commitlog") + _store_files(root, "consumequeue") + \
        _store_files(root, "index")
    path = rng.choice(files)
    size = os.path.getsize(path)
    os.truncate(path, rng.randrange(size))
    try:
        MessageStore(root, crash_config()).open().close()
    except (CorruptionError, StoreFormatError):
        return []  # reported: a file of the wrong size or lost flushed data
    try:
        return full_check(root, exp)  # opened: then nothing may be lost
    except StoreFormatError as exc:
        if path in str(exc):  # a ConsumeQueue's file, reported at its queue's first use
            return []
        raise


def _bit_flip(root: str, rng: random.Random, exp: Expectation) -> list[str]:
    """Flip 1-8 bits in one record's body: verify must see it, and open must refuse, or cut
    only that (last) record and say so, or serve it as CorruptionError from get."""
    (p, s), (commitlog_offset, qoff) = rng.choice(sorted(exp.written.items()))
    msg = expected_message(exp.seed, p, s, exp.max_body)
    size = crash_config().commitlog_file_size
    path = os.path.join(root, "commitlog", f"{commitlog_offset - commitlog_offset % size:020d}")
    with MessageStore(root, crash_config()) as st:
        rec = st.commitlog.read(commitlog_offset)
        tail = 2 + len(_props(rec)) + len(rec.topic) + 1  # topic length, topic, properties
        body_pos = commitlog_offset % size + rec.total_size - tail - len(msg.body)
    for bit in rng.sample(range(len(msg.body) * 8), rng.randint(1, 8)):
        flip(path, body_pos + bit // 8, 1 << bit % 8)
    problems = []
    if verify_store(root).ok:
        problems.append(f"verify_store missed flipped bits in the record at {commitlog_offset}")
    st = MessageStore(root, crash_config())
    try:
        st.open()
    except CorruptionError:
        return problems
    try:
        if st.recovery.corruption and st.commitlog.max_offset == commitlog_offset:
            return problems  # the damaged last record was cut, and recovery said so
        try:
            st.get(msg.topic, msg.queue_id, qoff)
            problems.append(f"get() served the record at {commitlog_offset} despite flipped bits")
        except CorruptionError:
            pass
    finally:
        st.close()
    return problems


def _checkpoint_torn(root: str, rng: random.Random, exp: Expectation) -> list[str]:
    _overwrite(os.path.join(root, "checkpoint"), rng.randrange(60), rng.randbytes(rng.randint(1, 60)))
    return full_check(root, exp)


def _abort_create(root: str, rng: random.Random, exp: Expectation) -> list[str]:
    with open(os.path.join(root, "abort"), "w") as f:
        f.write("1")
    return full_check(root, exp)


def _cq_files(root: str) -> list[str]:
    return _store_files(root, "consumequeue")


def _cq_file_delete(root: str, rng: random.Random, exp: Expectation) -> list[str]:
    os.unlink(rng.choice(_cq_files(root)))
    return full_check(root, exp)


def _cq_dir_delete(root: str, rng: random.Random, exp: Expectation) -> list[str]:
    shutil.rmtree(os.path.dirname(rng.choice(_cq_files(root))))
    return full_check(root, exp)


def _torn(sub: str):
    """Overwrite one 512-byte sector of a random file under `sub` with garbage or zeros: a
    torn write or media damage in derived data. verify_store must report it, or recovery must
    make the store whole again."""
    def mutate(root: str, rng: random.Random, exp: Expectation) -> list[str]:
        path = rng.choice(_store_files(root, sub))
        size = os.path.getsize(path)
        pos = rng.randrange(0, size, 512)
        n = min(512, size - pos)
        _overwrite(path, pos, rng.randbytes(n) if rng.random() < .5 else bytes(n))
        try:
            if not verify_store(root).ok:
                return []
        except Exception as exc:  # verify must report damage, not die of it
            return [f"verify_store crashed on the damage: {exc!r}"]
        return full_check(root, exp)
    return mutate


def _index_file_delete(root: str, rng: random.Random, exp: Expectation) -> list[str]:
    os.unlink(rng.choice(_store_files(root, "index")))
    return full_check(root, exp)


def _commitlog_newest_delete(root: str, rng: random.Random, exp: Expectation) -> list[str]:
    os.unlink(_store_files(root, "commitlog")[-1])
    return _expect_refused(root, "the newest CommitLog file (flushed data) was deleted")


def _cq_middle_file_delete(root: str, rng: random.Random, seed: int, max_body: int) -> list[str]:
    """A ConsumeQueue file deleted between two others (by hand, or lost to a restore): files
    of 10 units, so every queue has several."""
    exp = _sessions(root, seed, max_body, [rng.randint(120, 300)], lambda i: None,
                    consume_queue_units=10)
    by_queue: dict[str, list[str]] = {}
    for path in _cq_files(root):
        by_queue.setdefault(os.path.dirname(path), []).append(path)
    middles = [files[1:-1] for files in by_queue.values() if len(files) >= 3]
    if not middles:
        return full_check(root, exp)
    os.unlink(rng.choice(rng.choice(middles)))
    return full_check(root, exp)


def _no_queue_record(root: str) -> None:
    """What a hand rebuild or a restore of an older config/ leaves: no record of the queues."""
    for name in ("dispatchState.json", "queueEnds.log"):
        path = os.path.join(root, "config", name)
        if os.path.exists(path):
            os.unlink(path)


def _hand_rebuild(root: str, rng: random.Random, exp: Expectation) -> list[str]:
    """RocketMQ's "delete consumequeue/ and restart", whole or for one topic or queue, with
    mqfs's record of the queues deleted too."""
    _no_queue_record(root)
    queues = sorted({os.path.dirname(p) for p in _cq_files(root)})
    what = rng.choice(("all", "topic", "queue"))
    target = os.path.join(root, "consumequeue") if what == "all" or not queues else \
        os.path.dirname(rng.choice(queues)) if what == "topic" else rng.choice(queues)
    shutil.rmtree(target, ignore_errors=True)
    return full_check(root, exp)


def _sessions(root: str, seed: int, max_body: int, counts: list[int], between,
              crash_last: bool = False, **cfg) -> Expectation:
    """Producer 0's messages put over several sessions, `between(i)` called after session
    i closed; the last session is killed (no close) when `crash_last`."""
    exp = Expectation(seed, max_body, must="durable", exact=True)
    seq = 0
    for i, n in enumerate(counts):
        s = MessageStore(root, crash_config(**_T4_CONFIG, **cfg)).open()
        for _ in range(n):
            r = s.put(expected_message(seed, 0, seq, max_body))
            exp.written[(0, seq)] = (r.commitlog_offset, r.queue_offset)
            exp.durable.add((0, seq))
            seq += 1
        if crash_last and i == len(counts) - 1:
            s.flush()  # every put durable, then the process "dies" with the store open
            s.flush_services.stop()
            s._release_files()
            s._lock_file.release()
        else:
            s.close()
        between(i)
    return exp


def _config_restored(root: str, rng: random.Random, seed: int, max_body: int) -> list[str]:
    """config/ copied after a first session and copied back after a second one (a restore
    from an older backup), with one queue's directory lost too."""
    saved = root + ".config"

    def between(i: int) -> None:
        if i == 0:
            shutil.copytree(os.path.join(root, "config"), saved)

    exp = _sessions(root, seed, max_body, [rng.randint(30, 150), rng.randint(30, 150)], between)
    shutil.rmtree(os.path.join(root, "config"))
    shutil.copytree(saved, os.path.join(root, "config"))
    shutil.rmtree(saved)
    queues = sorted({os.path.dirname(p) for p in _cq_files(root)})
    if queues and rng.random() < 0.5:
        shutil.rmtree(rng.choice(queues))
    return full_check(root, exp)


def _crash_without_queue_ends(root: str, rng: random.Random, seed: int, max_body: int) -> list[str]:
    """A crash (every put durable, the store left open) whose config/queueEnds.log is then
    missing, and one queue's directory with it."""
    exp = _sessions(root, seed, max_body, [rng.randint(30, 150), rng.randint(30, 150)],
                    lambda i: None, crash_last=True)
    path = os.path.join(root, "config", "queueEnds.log")
    if os.path.exists(path):
        os.unlink(path)
    queues = sorted({os.path.dirname(p) for p in _cq_files(root)})
    if queues:
        shutil.rmtree(rng.choice(queues))
    return full_check(root, exp)


def _config_of_another_store(root: str, rng: random.Random, seed: int, max_body: int) -> list[str]:
    """config/ restored from another store's backup over this one (after a clean close or a
    crash), one queue's directory lost too. The other store holds the same messages under
    other topics of the same length: its CommitLog ends where this one's does, so the
    offsets its records were written for match this store's checkpoint, and only its
    store id tells them apart; its records name none of this store's queues."""
    counts, crashed = [rng.randint(30, 150), rng.randint(30, 150)], rng.random() < 0.5
    exp = _sessions(root, seed, max_body, counts, lambda i: None, crash_last=crashed)
    other = root + ".other"
    seq = 0
    for n in counts:
        with MessageStore(other, crash_config(**_T4_CONFIG)) as s:
            for _ in range(n):
                m = expected_message(seed, 0, seq, max_body)
                s.put(m.replace(topic="Other" + m.topic[5:]))
                seq += 1
    ends = [Checkpoint.load(os.path.join(r, "checkpoint")).commitlog_flushed_offset
            for r in (root, other)]
    shutil.rmtree(os.path.join(root, "config"))
    shutil.copytree(os.path.join(other, "config"), os.path.join(root, "config"))
    shutil.rmtree(other)
    queues = sorted({os.path.dirname(p) for p in _cq_files(root)})
    if queues:
        shutil.rmtree(rng.choice(queues))
    reached = [] if ends[0] == ends[1] else [f"the other store ends at {ends[1]}, not {ends[0]}"]
    return reached + full_check(root, exp)


_T4_RESTORES = {
    "cq-middle-file-delete": _cq_middle_file_delete,
    "config-restored": _config_restored,
    "crash-without-queue-ends": _crash_without_queue_ends,
    "config-of-another-store": _config_of_another_store,
}


_T4_MUTATIONS = {
    "random-truncate": _random_truncate,
    "bit-flip": _bit_flip,
    "checkpoint-delete": lambda root, rng, exp: (os.unlink(os.path.join(root, "checkpoint")),
                                                 full_check(root, exp))[1],
    "checkpoint-torn": _checkpoint_torn,
    "abort-create": _abort_create,
    "cq-file-delete": _cq_file_delete,
    "cq-dir-delete": _cq_dir_delete,
    "cq-torn": _torn("consumequeue"),
    "index-file-delete": _index_file_delete,
    "index-torn": _torn("index"),
    "commitlog-newest-delete": _commitlog_newest_delete,
    "hand-rebuild": _hand_rebuild,
}
