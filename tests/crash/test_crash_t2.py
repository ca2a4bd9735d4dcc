"""T2: the writer process killed (SIGKILL at a random time, or os._exit at every named crash
site of store/crash_points.py, including inside recovery and around the abort file). The page
cache survives a process kill, so every put that returned must be recovered intact.

Every case must reach its crash: a site is tested at its n-th pass only where every run passes
it that often (each put passes the write and sync sites; an async writer's flush() every 10
puts passes the checkpoint's sites); a random kill must find the writer still writing."""

import zlib

import pytest

from tests.crash.tiers import RECOVERY_LOGS, RECOVERY_SITES, WRITER_SITES, check, t2_case

pytestmark = [pytest.mark.crash, pytest.mark.allow_logs(*RECOVERY_LOGS)]
EVERY_PUT = ("commitlog.before_write", "commitlog.after_write", "flush.before", "flush.after",
             "cq.write", "index.write")
EVERY_FLUSH = ("checkpoint.before", "checkpoint.after", "ends.append")
CASES = [(s, n, None) for s in WRITER_SITES for n in ((1, 4, 9) if s in EVERY_PUT else (1,))] + \
    [(s, n, "async") for s in EVERY_FLUSH for n in (4, 9)]


def test_every_writer_site_is_tested():
    assert set(EVERY_PUT + EVERY_FLUSH) <= set(WRITER_SITES) == {s for s, _, _ in CASES}


@pytest.mark.parametrize("seed", range(100, 106), ids=lambda s: f"seed{s}")
def test_random_kill(tmp_path, seed):
    check(t2_case(str(tmp_path), seed))


@pytest.mark.parametrize("site, n, mode", CASES)
def test_crash_at_site(tmp_path, site, n, mode):
    check(t2_case(str(tmp_path), seed=zlib.crc32(f"{site}:{n}".encode()) % 1000, site=f"{site}:{n}",
                  mode=mode))


@pytest.mark.parametrize("first_crash", ["cq.write:25", "flush.after:6"], ids=["unit", "flush"])
@pytest.mark.parametrize("site, n", [("recovery.dispatch", 1), ("recovery.dispatch", 3),
                                     ("recovery.truncate", 1)])
def test_crash_during_recovery_then_recover_again(tmp_path, site, n, first_crash):
    """The first crash leaves records past the checkpoint (a record without its unit, or
    records after a sync), so the next open's recovery passes its sites."""
    assert site in RECOVERY_SITES
    check(t2_case(str(tmp_path), seed=200 + n, site=first_crash, recovery_site=f"{site}:{n}"))
