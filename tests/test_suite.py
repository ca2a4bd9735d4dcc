"""The suite itself, run on small made-up test files through tests/conftest.py: a Spark test
killed by pytest-timeout inside a py4j call leaves the next Spark test a working session, and
a run on a terminal says every few seconds which test file runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.waits import LIMIT

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def inner_pytest(tmp_path, files: dict[str, str], *args: str, env: dict[str, str] | None = None,
                 terminal: bool = False) -> subprocess.CompletedProcess:
    """pytest on `files` (written to tmp_path) with this suite's conftest as a plugin."""
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.conftest",
               "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), *args, str(tmp_path)]
    if terminal:  # util-linux script(1): a real pseudo-terminal
        command = ["script", "-qec", " ".join(command), "/dev/null"]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=LIMIT * 3,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


KILLED_IN_PY4J = """
import time
import pytest


def test_the_session_starts(spark):  # outside the next test's timeout: start-up is slow
    assert spark.range(1).count() == 1


@pytest.mark.timeout(15, method="signal")
def test_a_spark_job_outlives_its_timeout(spark):
    spark.range(2, numPartitions=2).rdd.map(lambda x: time.sleep(3600)).count()


def test_the_next_spark_test_has_a_working_session(spark):
    assert spark.range(5).count() == 5
    assert [r.id for r in spark.range(3).collect()] == [0, 1, 2]
"""


@pytest.mark.spark
def test_a_spark_test_killed_by_its_timeout_leaves_the_next_one_a_working_session(tmp_path):
    pytest.importorskip("pyspark")
    # native tracebacks: the failure is formatted within the test's timeout, which is only
    # 1.5 s after the kill (pytest's own style parses pyspark's sources: longer under load)
    proc = inner_pytest(tmp_path, {"test_killed.py": KILLED_IN_PY4J}, "-n", "0", "-q", "--tb=native")
    out = proc.stdout + proc.stderr
    assert "near its 15 s timeout: its Spark JVM is killed" in out, out
    assert re.search(r"FAILED \S*test_killed.py::test_a_spark_job_outlives_its_timeout", out), out
    assert "1 failed, 2 passed" in out, out


SLOW = """
import time


def test_quick():
    pass


def test_slow_work():
    time.sleep(4)  # stands for a long test: the progress line must name it while it runs
"""


def test_a_run_on_a_terminal_says_which_file_runs(tmp_path):
    proc = inner_pytest(tmp_path, {"test_slow_one.py": SLOW}, "-n", "2", "-q",
                        env={"MQFS_TEST_PROGRESS": "1"}, terminal=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if "tests done" in line]
    assert lines, proc.stdout
    assert any("/2 tests done, 0 failed; running: test_slow_one.py (test_slow_work, " in line
               for line in lines), lines


FAILS_EARLY = """
import time


def test_fails_first():
    assert False, "the failure a long run should name before it ends"


def test_slow_work():
    time.sleep(4)  # stands for a long test running after the failure
"""


def test_a_progress_line_names_a_failure_before_the_run_ends(tmp_path):
    proc = inner_pytest(tmp_path, {"test_fails_early.py": FAILS_EARLY}, "-n", "2", "-q",
                        env={"MQFS_TEST_PROGRESS": "1"}, terminal=True)
    lines = proc.stdout.splitlines()
    named = [i for i, line in enumerate(lines)
             if line.startswith("FAILED so far: test_fails_early.py::test_fails_first (call)")]
    ticks = [i for i, line in enumerate(lines) if "running: test_fails_early.py (test_slow_work" in line]
    assert named and ticks and named[0] < ticks[-1], proc.stdout


WORKER_TIMEOUT = """
import os
import pytest

RUNS = os.environ["MQFS_TEST_RUNS"]


def ran(name):
    with open(os.path.join(RUNS, name), "a") as f:
        f.write("x")
    with open(os.path.join(RUNS, name)) as f:
        return len(f.read())


@pytest.fixture
def fresh(tmp_path):
    assert not (tmp_path / "used").exists(), "a run again got the first run's fixture"
    (tmp_path / "used").touch()


def test_a_worker_timeout_once(fresh):
    if ran("once") == 1:
        raise RuntimeError("[STREAM_FAILED] terminated with exception: Python worker failed to connect back.")


def test_a_worker_timeout_every_time(fresh):
    ran("every")
    raise RuntimeError("Python worker failed to connect back.")


def test_another_failure(fresh):
    ran("other")
    assert False, "a failure of the test's own"
"""


@pytest.mark.parametrize("workers", ["0", "1"])
def test_a_test_that_met_sparks_worker_timeout_runs_once_more_and_no_other_does(tmp_path, workers):
    runs = tmp_path / "runs"
    runs.mkdir()
    proc = inner_pytest(tmp_path, {"test_timeouts.py": WORKER_TIMEOUT}, "-n", workers, "-rA",
                        env={"MQFS_TEST_RUNS": str(runs)})
    out = proc.stdout + proc.stderr
    assert {p.name: len(p.read_text()) for p in runs.iterdir()} == {"once": 2, "every": 2, "other": 1}, out
    assert re.search(r"PASSED \S*::test_a_worker_timeout_once", out), out
    assert re.search(r"FAILED \S*::test_a_worker_timeout_every_time", out), out
    assert re.search(r"FAILED \S*::test_another_failure", out), out
    assert "2 failed, 1 passed" in out, out
    assert out.count("run again: the first run failed with Spark's") == 2, out


def test_a_c_module_older_than_its_source_or_a_header_it_includes_is_named(tmp_path):
    """After a pull or rebase without scripts/setup, a C module built from an older source
    failed tests with errors that did not say so ("function takes at most 11 arguments"):
    the run now refuses to start and names it."""
    from tests.conftest import stale_c_modules

    folder = tmp_path / "store" / "format"
    folder.mkdir(parents=True)
    (tmp_path / "store" / "files").mkdir()
    src, header = folder / "_m.c", tmp_path / "store" / "files" / "_h.h"
    src.write_text('#include <Python.h>\n#include "../files/_h.h"\n')
    header.write_text("")
    (folder / "_plain.c").write_text("")  # never built: not stale
    built = folder / "_m.cpython-311-x86_64-linux-gnu.so"
    built.write_bytes(b"")
    for path, at in ((src, 100), (header, 100), (built, 200)):
        os.utime(path, (at, at))
    assert stale_c_modules(str(tmp_path)) == []
    os.utime(header, (300, 300))
    named = [os.path.relpath(built, tmp_path)]
    assert stale_c_modules(str(tmp_path)) == named
    os.utime(header, (100, 100))
    os.utime(src, (300, 300))
    assert stale_c_modules(str(tmp_path)) == named
