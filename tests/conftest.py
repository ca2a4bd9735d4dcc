"""Fixtures every test module can ask for by name, and the check that no test logs an
unexpected warning or error."""

from __future__ import annotations

import logging
import os
import random
import re
import sys
import threading

import pytest
from _pytest.runner import runtestprotocol

from tests import REPO, progress

# Every JVM the suite starts (the shared sessions, the CLI's and the test drivers' sessions
# through spark-submit, a standalone cluster's daemons) compiles with C1 alone, on the serial
# collector: each lives seconds to minutes on small stores, and C2's compiler threads then
# cost more CPU than they save (a session, its first read and 3 more: the JVM's CPU 19.2 ->
# 10.6 s; 12 reads of 20,000 messages: 24.0 -> 17.4 s). What the JVM computes is the same.
# A value the caller set is kept.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:CICompilerCount=1 -XX:+UseSerialGC"
JVM_OPTIONS_VARS = ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS")
for _name in JVM_OPTIONS_VARS:
    os.environ.setdefault(_name, TEST_JVM_OPTIONS)


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


@pytest.fixture(autouse=True, scope="session")
def private_jvm_temp(tmp_path_factory: pytest.TempPathFactory):
    """Every JVM the tests start keeps its temporary files in this run's temporary directory:
    Java takes /tmp whatever TMPDIR says, and a JVM that ends without its shutdown hooks (as
    a test session's does when Python exits, or a killed driver's) left Spark's spark-* and
    artifacts-* directories and lz4-java's library there, five or so a Spark test module,
    even under scripts/test. A java.io.tmpdir the caller set is kept."""
    flag = f"-Djava.io.tmpdir={tmp_path_factory.mktemp('jvm')}"
    old = {name: os.environ.get(name) for name in JVM_OPTIONS_VARS}
    for name, value in old.items():
        if "-Djava.io.tmpdir=" not in (value or ""):
            os.environ[name] = f"{value or ''} {flag}".strip()
    yield
    for name, value in old.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def pytest_configure(config: pytest.Config) -> None:
    stale = [] if os.environ.get("MQFS_PURE_PYTHON", "") not in ("", "0") else stale_c_modules()
    if stale:
        raise pytest.UsageError(f"{', '.join(stale)} older than their C source: run scripts/setup "
                                "(a stale module fails tests in ways that say nothing of it)")
    progress.pytest_configure(config)


def stale_c_modules(repo: str = REPO) -> list[str]:
    """The put path's C modules (store/**/_*.c, built in place) built before a change to
    their source or a header it includes: a pull or rebase since scripts/setup."""
    stale = []
    for folder, _, names in os.walk(os.path.join(repo, "store")):
        for name in sorted(n for n in names if n.startswith("_") and n.endswith(".c")):
            src = os.path.join(folder, name)
            built = [os.path.join(folder, n) for n in names
                     if n.startswith(name[:-2] + ".cpython-") and n.endswith(".so")]
            if not built:
                continue  # not built here: the Python path runs (and the tests that need C say so)
            with open(src) as f:
                deps = [src] + [os.path.normpath(os.path.join(folder, h))
                                for h in re.findall(r'^#include\s+"([^"]+)"', f.read(), re.M)]
            if min(map(os.path.getmtime, built)) < max(map(os.path.getmtime, filter(os.path.exists, deps))):
                stale.append(os.path.relpath(built[0], repo))
    return stale


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (--dist loadgroup), tests that share something run on one worker:
    those using the session's SparkSession (one JVM per worker otherwise), and the T3
    power-cut tests (one loop-mounted image per module). The fresh-clone setup (marker
    setup_clone, deselect it with -m) gets a group of its own. Spark tests that start their
    own JVMs (the standalone cluster, the CLI) run anywhere.

    Not in effect with pytest 9.2 and pytest-xdist 3.8: xdist's worker names the group in
    `item._nodeid`, which pytest 9.2 no longer reads (a node id is `str(item._id)`), so every
    test is its own unit and each worker starts its own JVM."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("spark"))
        elif item.get_closest_marker("loop_device"):
            item.add_marker(pytest.mark.xdist_group("loop"))
        elif item.get_closest_marker("setup_clone"):
            item.add_marker(pytest.mark.xdist_group("setup"))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=_long_modules_first(items).__getitem__)


def _long_modules_first(items: list[pytest.Item]) -> dict[pytest.Item, int]:
    """Each test's place under pytest-xdist: the modules of the fresh-clone setup first, then
    those with Spark tests, then those with mounts, then the rest, each module's tests
    together and in order (a sort by this is stable). xdist hands tests out in this order, a
    few at a time to whichever worker is free: a long test met at the end of the run (the
    clone's setup and the suite's own Spark test were last) leaves the other workers idle
    while it runs; met early, the other workers take the short tests meanwhile."""
    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("setup_clone"):
            return 0
        if item.get_closest_marker("spark") or "spark" in getattr(item, "fixturenames", ()):
            return 1
        return 2 if item.get_closest_marker("mount") else 3

    module: dict[object, int] = {}
    for item in items:
        module[item.path] = min(module.get(item.path, 3), rank(item))
    return {item: module[item.path] for item in items}


class _SharedSpark:
    """The run's one local SparkSession (start-up costs ~10 s), rebuilt when it may be broken:
    after a Spark test failed (pytest-timeout's exception lands inside a py4j call and leaves
    that connection out of step, so every later call on it fails) or when it no longer
    answers. Without this, one timeout failed every later Spark test of its worker."""

    def __init__(self) -> None:
        self.session = None
        self.suspect = False
        self.discarded = False

    def get(self):
        """The session; `discarded` says whether a broken one was killed on the way."""
        self.discarded = self.suspect or (self.session is not None and not self._answers())
        if self.discarded:
            self._discard()  # also a gateway a start-up cut short by a timeout left behind
        if self.session is None:
            from mqfs.pipeline.spark import session

            self.session = session("local[2]", app="mqfs-tests",
                                   conf={"spark.sql.shuffle.partitions": "4"})
        return self.session

    def _answers(self) -> bool:
        """A call whose answer is checked: a connection left out of step returns another one."""
        probe = random.randrange(1 << 30)
        try:
            return (self.session._jvm.java.lang.Math.addExact(probe, 7) == probe + 7
                    and not self.session.sparkContext._jsc.sc().isStopped())
        except Exception:
            return False

    def kill(self, limit: float) -> None:
        """End the JVM now: a py4j call waiting for it returns with an error at once."""
        from pyspark import SparkContext

        proc = getattr(SparkContext._gateway, "proc", None)
        if proc is not None:
            self.suspect = True
            print(f"conftest: the test is near its {limit:.0f} s timeout: its Spark JVM is killed",
                  file=sys.stderr, flush=True)
            proc.kill()

    def _discard(self) -> None:
        """Kill the JVM outright (stop() would speak over the suspect connection) and forget
        it, so the next session starts a new gateway."""
        from pyspark import SparkContext
        from pyspark.sql import SparkSession

        gateway = SparkContext._gateway
        if gateway is not None:
            # Python objects of this JVM freed from now on (a failed test's DataFrames, held
            # in the cycles of its traceback) would each tell it so; a call sent on a pooled
            # connection after the kill is logged by py4j at ERROR, failing the test then
            gateway._gateway_client.is_connected = False
        proc = getattr(gateway, "proc", None)
        if proc is not None:
            proc.kill()
            proc.wait()
        context = SparkContext._active_spark_context
        server = getattr(context, "_accumulatorServer", None)
        if server is not None:
            server.shutdown()
            server.server_close()
        if gateway is not None:
            try:
                gateway.close()
            except Exception:
                pass  # its sockets lead to the process just killed
        SparkContext._gateway = SparkContext._jvm = SparkContext._active_spark_context = None
        SparkSession._instantiatedSession = SparkSession._activeSession = None
        self.session = None
        self.suspect = False

    def stop(self) -> None:
        if self.suspect or (self.session is not None and not self._answers()):
            self._discard()
        elif self.session is not None:
            self.session.stop()


_shared_spark = _SharedSpark()
PY4J_LOST = r"^Exception while sending command\.$"  # py4j's record of a call the JVM never answered


@pytest.fixture(scope="session")
def _spark_run():
    yield _shared_spark
    _shared_spark.stop()


def _timeout_of(item: pytest.Item) -> float:
    """The test's pytest-timeout limit in seconds (0: none)."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and (marker.args or "timeout" in marker.kwargs):
        return float(marker.args[0] if marker.args else marker.kwargs["timeout"])
    return float(item.config.getini("timeout") or 0)


@pytest.fixture
def spark(_spark_run, request: pytest.FixtureRequest):
    """The run's local SparkSession, checked (and rebuilt if broken) before each test. Shortly
    before the test's timeout the JVM is killed: pytest-timeout's exception alone would leave
    the main thread in the next py4j call (pyspark's cleanup), waiting for a job that runs on."""
    session = _spark_run.get()
    if _spark_run.discarded:
        # a py4j call in flight when the old JVM was killed (another thread's, or an object
        # freed before the flag above was set) is logged at ERROR, here: seen once at load
        # 30, in the run again of a test that met Spark's worker timeout
        request.node.add_marker(pytest.mark.allow_logs(PY4J_LOST))
    limit = _timeout_of(request.node)
    watchdog = threading.Timer(limit * 0.9, _spark_run.kill, (limit,)) if limit else None
    if watchdog is not None:
        watchdog.daemon = True
        watchdog.start()
    yield session
    if watchdog is not None:
        watchdog.cancel()


# Spark starts a planner or streaming-source Python worker for each Python data source it
# plans, and waits a hard-coded 10 s for it to connect back (PythonWorkerFactory's
# createSimpleWorker; no setting changes it, and no setting plans without that worker). Under
# load 35+ on two cores, the worker's imports alone can take longer. That is the machine, not
# mqfs: such a test runs once more, whole (fresh fixtures), and the run says so in a warning.
SPARK_WORKER_TIMEOUT = "Python worker failed to connect back"


def _met_worker_timeout(reports: list[pytest.TestReport]) -> bool:
    return any(r.failed and SPARK_WORKER_TIMEOUT in r.longreprtext for r in reports)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool:
    """pytest's own protocol, with one more run of a test that failed on Spark's worker
    timeout; only the last run's reports count."""
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    reports = runtestprotocol(item, log=False, nextitem=nextitem)
    if _met_worker_timeout(reports):
        item.warn(pytest.PytestWarning(f"run again: the first run failed with Spark's {SPARK_WORKER_TIMEOUT!r}"))
        reports = runtestprotocol(item, log=False, nextitem=nextitem)
    for report in reports:
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.failed and "spark" in getattr(item, "fixturenames", ()):
        _shared_spark.suspect = True
    return report


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
