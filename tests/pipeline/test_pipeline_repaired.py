"""The pipeline's audit and rebuild agree with the store on repaired stores (issue 33, item 5).

For every corruption kind the crash tiers know (T5's), after `repair`: `pipeline audit` and
`verify` give the same answer (before, audit counted a lost message's filler unit as a
problem). The repaired store (fillers for
lost messages, kept queue ends) is then rebuilt by `pipeline rebuild`: every message is
copied (a dump of every queue, lost messages reading as EIO, is the same), the result passes
verify and audit, and nothing in it is readable by others."""

import os
import stat

import pytest

pytest.importorskip("pyspark")

from mqfs.pipeline.jobs import audit, rebuild  # noqa: E402
from mqfs.store import CorruptionError, MessageStore, NotFound, StoreError  # noqa: E402
from mqfs.store.integrity.verify import verify_store  # noqa: E402
from mqfs.store.repair import apply_repair, plan_repair  # noqa: E402
from tests.crash.corruption import T5_KINDS, _Case, _mutate, _Skip  # noqa: E402
from tests.crash.oracle import crash_config  # noqa: E402
from tests.crash.tiers import RECOVERY_LOGS  # noqa: E402

pytestmark = pytest.mark.allow_logs(*RECOVERY_LOGS)


def _dump(root: str) -> dict:
    """Every queue's every offset: (body) or 'EIO' for a message lost to damage."""
    out: dict = {}
    with MessageStore(root, crash_config(read_only=True), create=False) as s:
        for topic, n in sorted(s.topics().items()):
            for q in range(n):
                lo, hi = s.min_offset(topic, q), s.max_offset(topic, q)
                got = []
                for i in range(lo, hi):
                    try:
                        got.append(bytes(s.get(topic, q, i).body))
                    except CorruptionError:
                        got.append("EIO")
                    except NotFound:
                        got.append("ENOENT")
                out[(topic, q)] = (lo, got)
    return out


def _damaged(tmp_path, kind: str) -> str:
    for seed in range(20):  # the first seed whose damage the kind can make
        try:
            c = _Case(str(tmp_path / f"s{seed}"), seed, kind)
            _mutate(c)
            return c.root
        except _Skip:
            continue
    raise AssertionError(f"no seed of 20 makes {kind}")


def _agree(spark, root: str) -> bool:
    verified = verify_store(root)
    audited = audit.run(spark, root)
    assert verified.ok == (audited["problems"] == 0), (verified.lines, audited["shown"])
    return verified.ok


@pytest.mark.parametrize("kind", T5_KINDS)
def test_audit_agrees_with_verify_and_rebuild_copies_a_repaired_store(tmp_path, spark, kind):
    root = _damaged(tmp_path, kind)
    try:
        apply_repair(plan_repair(root))
    except StoreError:
        return  # (a kind repair refuses)
    with MessageStore(root, crash_config()):  # the first open after a repair: kept ends in place
        pass
    assert _agree(spark, root)
    out = str(tmp_path / "rebuilt")
    rebuild.run(spark, root, out)
    assert verify_store(out).ok
    assert _agree(spark, out)
    assert _dump(out) == _dump(root)
    for dirpath, dirnames, names in os.walk(out):
        for name in [*dirnames, *names]:
            mode = os.lstat(os.path.join(dirpath, name)).st_mode
            assert not mode & (stat.S_IRWXG | stat.S_IRWXO), (name, oct(mode))
    assert not os.lstat(out).st_mode & (stat.S_IRWXG | stat.S_IRWXO)
