"""scripts/setup in a fresh clone builds a .venv on the system Python that any user can run,
quietly, and leaves a /usr/local/bin/mqfs that is already there alone."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile

import pytest

from tests.waits import LIMIT

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.mark.setup_clone
def test_fresh_clone_setup_gives_a_venv_an_unprivileged_user_can_run():
    # a whole .venv (~1 GB) for a few minutes: in $TMPDIR (scripts/test's private directory,
    # which its exit removes whatever happens here; 0711, so the other user reaches the clone
    # by name), not under pytest's 0700 temporary directory
    base = tempfile.mkdtemp(prefix="mqfs-setup-")
    os.chmod(base, 0o755)
    clone = os.path.join(base, "mqfs")
    setup = None
    try:
        subprocess.run(["git", "clone", "-q", ROOT, clone], check=True, timeout=LIMIT)
        env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
        setup = subprocess.Popen(["scripts/setup"], cwd=clone, env={**env, "MQFS_NO_LINK": "1"},
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True)
        stdout, stderr = setup.communicate(timeout=900)
        assert setup.returncode == 0, stdout + stderr
        noise = [line for line in stderr.splitlines() if "is ignored: it is neither" not in line]
        assert noise == [], stderr  # (that one is this machine's pip.conf, not ours)
        assert "deprecat" not in (stdout + stderr).lower()
        with open(os.path.join(clone, ".venv", "pyvenv.cfg")) as f:
            assert "home = /usr/bin\n" in f.read()
        mqfs = os.path.join(clone, ".venv", "bin", "mqfs")
        proc = subprocess.run([*NOBODY, mqfs, "--version"], capture_output=True, text=True,
                              timeout=LIMIT, cwd="/")
        assert proc.returncode == 0, proc.stderr
        from importlib.metadata import version
        assert proc.stdout.strip() == f"mqfs {version('mqfs')}"
        # the put path's C modules were built (setup.py, optional) and any user loads them
        proc = subprocess.run([*NOBODY, os.path.join(clone, ".venv", "bin", "python"), "-c",
                               "import mqfs.store.format.compiled as c; "
                               "assert c.records is not None and c.dispatch is not None"],
                              capture_output=True, text=True, timeout=LIMIT, cwd="/")
        assert proc.returncode == 0, proc.stderr
    finally:  # also when pytest-timeout interrupts: no pip left writing into what is removed
        if setup is not None and setup.poll() is None:
            os.killpg(setup.pid, signal.SIGKILL)
            setup.wait()
        shutil.rmtree(base, ignore_errors=True)
