"""The conftest check: a test that logs an unexpected warning fails, a declared one passes."""

from __future__ import annotations

from pathlib import Path

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py").read_text()


def test_unexpected_warnings_fail_and_declared_ones_pass(pytester, monkeypatch):
    monkeypatch.setenv("MQFS_TEST_PROGRESS", "0")  # the progress line would break outcome parsing
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent.parent))  # the copy imports tests.*
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_logs='''
        import logging
        import threading

        import pytest

        log = logging.getLogger("store.somewhere")

        def test_quiet():
            log.info("routine")

        def test_warns():
            log.warning("recovery: rebuilt something")

        def test_errors_in_a_thread():
            t = threading.Thread(target=log.error, args=("flush failed",))
            t.start()
            t.join()

        @pytest.mark.allow_logs(r"^recovery: ")
        def test_declared():
            log.warning("recovery: rebuilt something")

        @pytest.mark.allow_logs(r"^recovery: ")
        def test_declared_other():
            log.warning("retention: deleted a file")
    ''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W",
                                           "ignore::pytest.PytestUnknownMarkWarning")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 5 and outcomes.get("errors") == 3, outcomes
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_warns*",
                                 "*ERROR at teardown of test_errors_in_a_thread*",
                                 "*ERROR at teardown of test_declared_other*"])
