"""The pipeline's audit and rebuild agree with the store on repaired stores (issue 33, item 5).

For every corruption kind the crash tiers know (T5's), before `repair` and after it:
`pipeline audit` and `verify` give the same answer (before, audit counted a lost message's
filler unit as a problem, found nothing wrong with a store whose manifest or config file is
damaged, and crashed on IndexFiles of sizes a lost manifest no longer told). The repaired
store (fillers for lost messages, kept queue ends) is then rebuilt by `pipeline rebuild`:
every message is copied (a dump of every queue, lost messages reading as EIO, is the same),
the result passes verify and audit, and nothing in it is readable by others. The kinds that
damage records, units or index entries go into one store together (each its own message),
so their Spark jobs run once; a kind that damages the whole store (its manifest, its config,
its set of files) gets a store of its own."""

import os
import stat

import pytest

pytest.importorskip("pyspark")

from mqfs.pipeline.jobs import audit, rebuild  # noqa: E402
from mqfs.store import CorruptionError, MessageStore, NotFound, StoreError  # noqa: E402
from mqfs.store.integrity.verify import verify_store  # noqa: E402
from mqfs.store.repair import apply_repair, plan_repair  # noqa: E402
from tests.crash.corruption import SCRUB_KINDS, T5_KINDS, _Case, _mutate, _serves, _Skip  # noqa: E402
from tests.crash.oracle import crash_config, expected_message  # noqa: E402
from tests.crash.tiers import RECOVERY_LOGS  # noqa: E402
from tests.store.helpers import file_hashes  # noqa: E402

pytestmark = pytest.mark.allow_logs(*RECOVERY_LOGS)
WHOLE_STORE = ("manifest-delete", "manifest-null", "manifest-flavor", "files-swap",
               "missing-middle", "missing-oldest", "config-json")
ONE_STORE = tuple(k for k in T5_KINDS if k not in WHOLE_STORE)
REFUSED = ("config-json",)  # repair leaves a damaged config file to a person (.bak named)


def _dump(root: str) -> dict:
    """Every queue's every offset: (body) or 'EIO' for a message lost to damage."""
    out: dict = {}
    with MessageStore(root, crash_config(read_only=True), create=False) as s:
        for topic, n in sorted(s.topics().items()):
            for q in range(n):
                lo, hi = s.min_offset(topic, q), s.max_offset(topic, q)
                got: list = []
                for i in range(lo, hi):
                    try:
                        got.append(bytes(s.get(topic, q, i).body))
                    except CorruptionError:
                        got.append("EIO")
                    except NotFound:
                        got.append("ENOENT")
                out[(topic, q)] = (lo, got)
    return out


def _damaged(tmp_path, kind: str) -> _Case:
    for seed in range(20):  # the first seed whose damage the kind can make
        try:
            c = _Case(str(tmp_path / f"s{seed}"), seed, kind)
            _mutate(c)
            return c
        except _Skip:
            continue
    raise AssertionError(f"no seed of 20 makes {kind}")


def _agree(spark, root: str) -> bool:
    verified = verify_store(root)
    audited = audit.run(spark, root)
    assert verified.ok == (audited["problems"] == 0), (verified.lines, audited["shown"])
    return verified.ok


def _repaired_then_rebuilt(spark, tmp_path, c: _Case) -> dict:
    """Repair, audit against verify, rebuild, check the copy; the dump of the copy."""
    apply_repair(plan_repair(c.root))
    with MessageStore(c.root, crash_config()):  # the first open after a repair: kept ends in place
        pass
    assert _agree(spark, c.root)
    out = str(tmp_path / "rebuilt")
    rebuild.run(spark, c.root, out)
    assert verify_store(out).ok
    assert _agree(spark, out)
    dumped = _dump(out)
    assert dumped == _dump(c.root)
    problems: list[str] = []
    with MessageStore(out, crash_config(read_only=True), create=False) as s:
        _serves(s, c, problems, "the rebuilt store")  # every intact message where it was acked
    assert problems == []
    for dirpath, dirnames, names in os.walk(out):
        for name in [*dirnames, *names]:
            mode = os.lstat(os.path.join(dirpath, name)).st_mode
            assert not mode & (stat.S_IRWXG | stat.S_IRWXO), (name, oct(mode))
    assert not os.lstat(out).st_mode & (stat.S_IRWXG | stat.S_IRWXO)
    return dumped


@pytest.mark.parametrize("kind", WHOLE_STORE)
def test_a_store_damaged_whole_is_repaired_audited_as_verified_and_rebuilt(tmp_path, spark, kind):
    c = _damaged(tmp_path, kind)
    assert not _agree(spark, c.root)  # before repair too (a bad manifest: audit found nothing)
    if kind in REFUSED:
        with pytest.raises(StoreError):
            apply_repair(plan_repair(c.root))
        return
    _repaired_then_rebuilt(spark, tmp_path, c)


def test_records_units_and_index_entries_damaged_every_way_at_once(tmp_path, spark):
    """Each kind damages its own part of one long store (as long as the scrub kinds need); the
    messages a kind damaged read as EIO after repair, in the store and in its copy."""
    c = _Case(str(tmp_path / "s"), 0, SCRUB_KINDS[0])
    lost = {}
    for kind in ONE_STORE:
        before, had = file_hashes(c.root), set(c.damaged)
        c.kind = kind
        _mutate(c)
        assert file_hashes(c.root) != before, f"{kind} changed nothing"
        lost[kind] = c.damaged - had
    assert not _agree(spark, c.root)
    dumped = _repaired_then_rebuilt(spark, tmp_path, c)
    for kind, keys in lost.items():
        for key in keys:
            topic, q, offset = _where(c, key)
            lo, got = dumped[(topic, q)]
            assert got[offset - lo] == "EIO", f"{kind}: {topic}/{q}/{offset} is not lost"


def _where(c: _Case, key: tuple[int, int]) -> tuple[str, int, int]:
    """The queue and offset of the message a producer put as `key` (producer, sequence)."""
    m = expected_message(c.exp.seed, *key, c.exp.max_body)
    return m.topic, m.queue_id, c.exp.written[key][1]
