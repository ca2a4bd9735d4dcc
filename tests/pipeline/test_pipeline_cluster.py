"""`mqfs pipeline --master spark://...` against a real standalone master and worker on
127.0.0.1: executors must run an interpreter that has mqfs, and failures are one line."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark")

from tests import REPO
from tests.pipeline.helpers import build_store, flip_body_byte  # noqa: E402
from tests.waits import eventually  # noqa: E402

pytestmark = pytest.mark.spark
SPARK_CLASS = os.path.join(os.path.dirname(__import__("pyspark").__file__), "bin", "spark-class")


def wait_for(path: str, pattern: str, proc: subprocess.Popen) -> re.Match:
    """The first match of pattern in a daemon's log, polling until it appears or the daemon dies."""
    def found() -> re.Match | None:
        with open(path, errors="replace") as f:
            return re.search(pattern, f.read())
    return eventually(found, f"{pattern!r} in {path}", interval=0.2, alive=lambda: proc.poll() is None)


def daemon(args: list[str], log: str, env: dict[str, str]) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen([SPARK_CLASS, *args], stdout=out, stderr=subprocess.STDOUT, env=env)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("cluster")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_WORKER_DIR=str(work / "worker"))
    env.pop("PYSPARK_PYTHON", None)  # as a user's shell has it: the CLI must set it
    env.pop("SPARK_CONF_DIR", None)  # the daemons log at INFO: readiness is read from their logs
    master_log, worker_log = str(work / "master.log"), str(work / "worker.log")
    master = daemon(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
                     "--webui-port", "0"], master_log, env)
    procs = [master]
    try:
        url = wait_for(master_log, r"Starting Spark master at (spark://127\.0\.0\.1:\d+)", master).group(1)
        worker = daemon(["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                         "--cores", "1", "--memory", "1g", "--webui-port", "0"], worker_log, env)
        procs.append(worker)
        wait_for(master_log, r"Registering worker", master)
        yield url
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            p.wait(30)


def run_jobs(master: str, work, *jobs: list[str]) -> list[tuple[int, str, str]]:
    """Each job's (exit code, stdout, stderr): `mqfs pipeline --master MASTER ...` run in one
    driver (cluster_driver.py), one application on the cluster for all of them."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    out = work / "jobs"
    out.mkdir()
    driver = os.path.join(os.path.dirname(__file__), "cluster_driver.py")
    proc = subprocess.run([sys.executable, driver, master, str(out),
                           *(json.dumps(["--master", master, *job]) for job in jobs)],
                          capture_output=True, text=True, env=env, timeout=1200, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]  # the driver's JVM's too
    return [(int((out / f"{i}.rc").read_text()), (out / f"{i}.out").read_text(), (out / f"{i}.err").read_text())
            for i in range(len(jobs))]


@pytest.mark.timeout(1500)  # three jobs; ~60 s on an idle machine, 265 s seen on a loaded one
def test_audit_and_export_run_on_a_standalone_cluster(cluster, tmp_path):
    store, damaged = str(tmp_path / "store"), str(tmp_path / "damaged")
    build_store(store, 600, seed=21)
    shutil.copytree(store, damaged)
    path, pos, commitlog_offset = flip_body_byte(damaged)  # fails in an executor's task
    audit, export, failed = run_jobs(cluster, tmp_path, ["audit", store], ["export", store, str(tmp_path / "parquet")],
                                     ["export", damaged, str(tmp_path / "again")])
    assert audit[0] == 0, audit[2][-2000:]
    assert "audit: 600 ConsumeQueue units" in audit[1] and ", 0 problems" in audit[1]
    assert export[0] == 0, export[2][-2000:]
    assert "exported 600 messages of 3 topics" in export[1]
    assert failed[0] == 1
    assert failed[2].strip().splitlines()[-1] == (
        f"mqfs pipeline export: damaged record at CommitLog offset {commitlog_offset} ({path} at byte {pos}): "
        "checksum mismatch; read with option damagedRecords=skip to skip it, `mqfs verify` "
        "for details")
    assert "Traceback" not in failed[2]
