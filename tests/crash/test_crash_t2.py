"""T2: the writer process killed (SIGKILL at a random time, or os._exit at every named crash
site of store/crash_points.py, including inside recovery and around the abort file). The page
cache survives a process kill, so every put that returned must be recovered intact."""

import zlib

import pytest

from tests.crash.tiers import RECOVERY_LOGS, RECOVERY_SITES, WRITER_SITES, t2_case

pytestmark = [pytest.mark.crash, pytest.mark.allow_logs(*RECOVERY_LOGS)]
ONCE_PER_RUN = ("abort.create", "abort.delete")


@pytest.mark.parametrize("seed", range(100, 106), ids=lambda s: f"seed{s}")
def test_random_kill(tmp_path, seed):
    result = t2_case(str(tmp_path), seed)
    assert result.ok, str(result)


@pytest.mark.parametrize("site, n", [(s, n) for s in WRITER_SITES
                                     for n in ((1,) if s in ONCE_PER_RUN else (1, 4, 9))])
def test_crash_at_site(tmp_path, site, n):
    result = t2_case(str(tmp_path), seed=zlib.crc32(f"{site}:{n}".encode()) % 1000, site=f"{site}:{n}")
    assert result.ok, str(result)
    if n == 1:
        assert result.reached, f"{result.label}: the workload never passes {site}"


@pytest.mark.parametrize("first_crash", [None, "flush.after:6"], ids=["random-kill", "flush"])
@pytest.mark.parametrize("site, n", [("recovery.dispatch", 1), ("recovery.dispatch", 3),
                                     ("recovery.truncate", 1)])
def test_crash_during_recovery_then_recover_again(tmp_path, site, n, first_crash):
    assert site in RECOVERY_SITES
    result = t2_case(str(tmp_path), seed=200 + n, site=first_crash, recovery_site=f"{site}:{n}")
    assert result.ok, str(result)
