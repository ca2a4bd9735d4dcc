"""scripts/setup in a fresh clone builds a .venv on the system Python that any user can run,
quietly, and leaves a /usr/local/bin/mqfs that is already there alone."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def test_fresh_clone_setup_gives_a_venv_an_unprivileged_user_can_run():
    # in /var/tmp, not under pytest's 0700 temporary directory: the other user must reach
    # the clone (it holds a whole .venv, ~1 GB, for a minute: removed at the end)
    base = tempfile.mkdtemp(prefix="mqfs-setup-", dir="/var/tmp")
    os.chmod(base, 0o755)
    clone = os.path.join(base, "mqfs")
    try:
        subprocess.run(["git", "clone", "-q", ROOT, clone], check=True, timeout=120)
        env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
        setup = subprocess.run(["scripts/setup"], cwd=clone, env={**env, "MQFS_NO_LINK": "1"},
                               capture_output=True, text=True, timeout=900)
        assert setup.returncode == 0, setup.stdout + setup.stderr
        noise = [line for line in setup.stderr.splitlines() if "is ignored: it is neither" not in line]
        assert noise == [], setup.stderr  # (that one is this machine's pip.conf, not ours)
        assert "deprecat" not in (setup.stdout + setup.stderr).lower()
        with open(os.path.join(clone, ".venv", "pyvenv.cfg")) as f:
            assert "home = /usr/bin\n" in f.read()
        mqfs = os.path.join(clone, ".venv", "bin", "mqfs")
        proc = subprocess.run([*NOBODY, mqfs, "--version"], capture_output=True, text=True,
                              timeout=60, cwd="/")
        assert proc.returncode == 0, proc.stderr
        from importlib.metadata import version
        assert proc.stdout.strip() == f"mqfs {version('mqfs')}"
    finally:
        shutil.rmtree(base, ignore_errors=True)
