"""Fixtures every test module can ask for by name, and the check that no test logs an
unexpected warning or error."""

from __future__ import annotations

import logging
import os
import re

import pytest


@pytest.fixture(autouse=True, scope="session")
def private_state_home(tmp_path_factory: pytest.TempPathFactory):
    """Read-only mounts log to $XDG_STATE_HOME/mqfs/: point it at this run's temporary
    directory, so no test leaves a log in the user's ~/.local/state."""
    old = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    yield
    if old is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = old


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (--dist loadgroup), tests that share something run on one worker:
    those using the session's SparkSession (one JVM per worker otherwise), and the T3
    power-cut tests (one loop-mounted image per module). Spark tests that start their own
    JVMs (the standalone cluster, the CLI) run anywhere."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("spark"))
        elif item.get_closest_marker("loop_device"):
            item.add_marker(pytest.mark.xdist_group("loop"))


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole run (start-up costs ~10 s)."""
    from mqfs.pipeline.spark import session

    s = session("local[2]", app="mqfs-tests", conf={"spark.sql.shuffle.partitions": "4"})
    yield s
    s.stop()


class _Collector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(autouse=True)
def check_logs(request: pytest.FixtureRequest):
    """Fail a test during which anything in this process (any thread) logged a WARNING or
    worse that the test did not declare with `@pytest.mark.allow_logs("regex", ...)`: a
    swallowed error or an unplanned recovery must not pass unnoticed (S3QL's checklogs)."""
    collector = _Collector()
    root = logging.getLogger()
    root.addHandler(collector)
    try:
        yield
    finally:
        root.removeHandler(collector)
    allowed = [re.compile(p) for mark in request.node.iter_markers("allow_logs") for p in mark.args]
    unexpected = [r for r in collector.records
                  if not any(p.search(r.getMessage()) for p in allowed)]
    if unexpected:
        lines = "\n".join(f"{r.levelname} {r.name}: {r.getMessage()}" for r in unexpected[:10])
        pytest.fail(f"unexpected log records (declare them with allow_logs):\n{lines}",
                    pytrace=False)
