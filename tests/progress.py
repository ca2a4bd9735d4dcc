"""A pytest plugin that says what runs: every MQFS_TEST_PROGRESS seconds (30 by default, 0
turns it off) one line with the tests done, failed and the files whose tests are running,
each with its longest-running test and for how long, after a line naming each test that
failed since the last. xdist's dots alone can stay silent for minutes while a Spark or crash
test runs, and name no failure until the end; these lines say which."""

from __future__ import annotations

import os
import threading
import time

import pytest


class Progress:
    def __init__(self, config: pytest.Config, interval: float) -> None:
        self.config = config
        self.interval = interval
        self.started = time.monotonic()
        self.total: int | None = None
        self.done = self.failed = 0
        self.running: dict[str, float] = {}  # node id -> when it started
        self.new_failures: list[str] = []  # "node id (phase)" not yet reported
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._report, name="mqfs-progress", daemon=True)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.total = len(session.items) or self.total

    def pytest_xdist_node_collection_finished(self, node, ids: list[str]) -> None:
        self.total = len(ids)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.thread.start()

    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        with self.lock:
            self.running[nodeid] = time.monotonic()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        with self.lock:
            if report.failed:
                self.failed += 1
                self.new_failures.append(f"{report.nodeid} ({report.when})")
            if report.when == "teardown":
                self.running.pop(report.nodeid, None)
                self.done += 1

    def pytest_sessionfinish(self) -> None:
        self.stop.set()  # before the summary: the last word is pytest's

    def line(self) -> str:
        now = time.monotonic()
        with self.lock:
            longest: dict[str, tuple[float, str]] = {}
            for nodeid, since in self.running.items():
                path, _, name = nodeid.partition("::")
                if path not in longest or since < longest[path][0]:
                    longest[path] = (since, name)
            done, failed = self.done, self.failed
            news, self.new_failures = self.new_failures, []
        of = f"/{self.total}" if self.total else ""
        files = ", ".join(f"{path} ({name}, {now - since:.0f} s)"
                          for path, (since, name) in sorted(longest.items(), key=lambda x: x[1][0]))
        return "".join(f"FAILED so far: {name}\n" for name in news) + (
            f"[{now - self.started:.0f} s] {done}{of} tests done, {failed} failed; "
            f"running: {files or 'nothing'}")

    def _report(self) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        while not self.stop.wait(self.interval):
            if reporter is not None:
                if reporter._tw.width_of_current_line:  # after xdist's dots: a line of its own
                    reporter._tw.line()
                for text in self.line().splitlines():
                    reporter.write_line(text)


def pytest_configure(config: pytest.Config) -> None:
    """Registered by tests/conftest.py; only the process that reports (not an xdist worker)."""
    interval = float(os.environ.get("MQFS_TEST_PROGRESS", "30"))
    if interval > 0 and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Progress(config, interval), "mqfs-progress")
