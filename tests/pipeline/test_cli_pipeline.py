"""`mqfs pipeline ...` runs the pipeline as its own program (fusefs never imports it): what
the user sees is the pipeline CLI's help, exit codes and errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests import REPO

ROOT = Path(REPO)


def mqfs(*args: str, cwd: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "mqfs.fusefs", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=600)  # a Spark job


def test_mqfs_pipeline_help_is_the_pipeline_help(tmp_path):
    proc = mqfs("pipeline", "--help", cwd=str(tmp_path))
    assert proc.returncode == 0
    assert proc.stdout.startswith("usage: mqfs pipeline")
    assert "{export,stats,audit,rebuild}" in proc.stdout


def test_mqfs_pipeline_passes_arguments_and_exit_codes(tmp_path):
    proc = mqfs("pipeline", "rebuild", "--help", cwd=str(tmp_path))
    assert proc.returncode == 0 and "usage: mqfs pipeline rebuild" in proc.stdout
    proc = mqfs("pipeline", "nosuchjob", cwd=str(tmp_path))
    assert proc.returncode == 2 and "invalid choice: 'nosuchjob'" in proc.stderr


def test_a_pipeline_directory_where_mqfs_runs_is_not_run(tmp_path):
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "pipeline" / "__init__.py").write_text("")
    (tmp_path / "pipeline" / "__main__.py").write_text("raise SystemExit(99)\n")
    assert mqfs("pipeline", "--help", cwd=str(tmp_path)).returncode == 0
