"""One distribution, one import name: the wheel puts `mqfs` (store, fusefs, pipeline under it)
and Spark's discovery hook `pyspark_mqfs` into site-packages, nothing generic like `store`;
the editable install scripts/setup makes shows the same names."""

from __future__ import annotations

import fcntl
import glob
import os
import subprocess
import sys
import textwrap
import tomllib
import zipfile

import pytest

from tests.waits import LIMIT

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = {"store": "mqfs.store", "fusefs": "mqfs.fusefs", "pipeline": "mqfs.pipeline",
           "pyspark_mqfs": "pyspark_mqfs"}


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> str:
    """This checkout's wheel, built once for the run: the xdist workers share it (through a
    lock in their common temporary directory). pip builds a source directory in place
    (build/, mqfs.egg-info): two builds at once in two workers would write the same files,
    and each compiles the four C modules."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    dist = shared / "wheel"
    with open(shared / "wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not glob.glob(str(dist / "mqfs-*.whl")):
            build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), ROOT],
                                   capture_output=True, text=True, timeout=LIMIT * 3)
            assert build.returncode == 0, build.stderr
    (found,) = glob.glob(str(dist / "mqfs-*.whl"))
    return found


def test_every_package_folder_is_listed_in_pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        tool = tomllib.load(f)["tool"]["setuptools"]
    found = set()
    for folder, name in FOLDERS.items():
        for init in glob.glob(os.path.join(ROOT, folder, "**", "__init__.py"), recursive=True):
            sub = os.path.relpath(os.path.dirname(init), os.path.join(ROOT, folder))
            found.add(name if sub == "." else f"{name}.{sub.replace(os.sep, '.')}")
    assert set(tool["packages"]) == found
    assert tool["package-dir"] == {name: folder for folder, name in FOLDERS.items()}


def _imports(python: str, module: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True, cwd="/",
                          env=env)


def test_the_editable_install_names_only_mqfs():
    assert _imports(sys.executable, "store").returncode != 0
    assert _imports(sys.executable, "fusefs").returncode != 0
    assert _imports(sys.executable, "pipeline").returncode != 0
    for module in ("mqfs.store", "mqfs.fusefs.cli", "mqfs.pipeline.source", "pyspark_mqfs"):
        proc = _imports(sys.executable, module)
        assert proc.returncode == 0, proc.stderr
    main = subprocess.run([sys.executable, "-m", "mqfs.fusefs", "--version"], capture_output=True,
                          text=True, cwd="/")
    assert main.returncode == 0 and main.stdout.startswith("mqfs "), main.stderr


@pytest.mark.spark
@pytest.mark.timeout(1800)  # a wheel build, a venv and a Spark JVM: minutes on a loaded machine
def test_the_wheel_installs_one_top_level_package_and_spark_finds_the_format(wheel, tmp_path):
    with zipfile.ZipFile(wheel) as whl:  # every C module (put, dispatch, JSON lines, dump), built for this platform
        for module in ("mqfs/store/format/_records.", "mqfs/store/files/_dispatch.",
                       "mqfs/store/format/_jsonl.", "mqfs/store/offline/_dump."):
            assert [n for n in whl.namelist() if n.startswith(module) and n.endswith(".so")], module
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    (site,) = glob.glob(str(venv / "lib" / "python3*" / "site-packages"))
    python = str(venv / "bin" / "python")
    # the wheel alone, as pip installs it; its dependencies come from this venv's site-packages
    # as a plain path entry (whose .pth files, our editable install among them, are not read)
    install = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel],
                             capture_output=True, text=True)
    assert install.returncode == 0, install.stderr
    deps = next(p for p in sys.path if p.endswith("site-packages") and os.path.isdir(os.path.join(p, "numpy")))
    with open(os.path.join(site, "deps.pth"), "w") as f:
        f.write(deps + "\n")
    ours = {d for d in os.listdir(site) if d.startswith("mqfs-") and d.endswith(".dist-info")}
    with open(os.path.join(site, *ours, "RECORD")) as f:
        installed = {line.split(",")[0].split("/")[0] for line in f if not line.startswith("../")}
    # and the .pth that gives Spark's workers this python (README, The Spark pipeline)
    assert installed - ours == {"mqfs", "pyspark_mqfs", "mqfs-pyspark-python.pth"}
    with open(os.path.join(site, *ours, "top_level.txt")) as f:
        assert sorted(f.read().split()) == ["mqfs", "pyspark_mqfs"]
    version = subprocess.run([str(venv / "bin" / "mqfs"), "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("mqfs "), version.stderr
    assert _imports(python, "store").returncode != 0
    for module in ("mqfs.store", "mqfs.fusefs.cli", "mqfs.pipeline.source"):
        proc = _imports(python, module)
        assert proc.returncode == 0, proc.stderr
        where = subprocess.run([python, "-c", f"import {module} as m; print(m.__file__)"],
                               capture_output=True, text=True, cwd="/").stdout
        assert where.startswith(site), where  # the wheel's copy, not this checkout's

    from tests.pipeline.helpers import build_store
    store = tmp_path / "store"
    build_store(str(store), 300)
    script = textwrap.dedent(f"""
        from pyspark.sql import SparkSession
        spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
        print("rows", spark.read.format("mqfs").load({str(store)!r}).count())
        spark.stop()
    """)
    assert os.path.exists(os.path.join(site, "mqfs-pyspark-python.pth"))
    proc = _plain_session(python, script, str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rows 300" in proc.stdout


def _plain_session(python: str, script: str, cwd: str) -> subprocess.CompletedProcess:
    """`python -c script` as a user runs it without activating anything: no PYSPARK_PYTHON,
    no VIRTUAL_ENV, a PATH whose `python3` is the system's (which has no mqfs)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "SPARK_CONF_DIR")}
    env.update(PATH="/usr/local/bin:/usr/bin:/bin", SPARK_LOCAL_IP="127.0.0.1")
    return subprocess.run([python, "-c", script], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=600)


@pytest.mark.spark
def test_a_plain_session_of_the_editable_install_finds_the_format(tmp_path):
    """The README's snippet with .venv/bin/python, not activated: Spark's workers get this
    python (mqfs-pyspark-python.pth), not `python3` from PATH, so format "mqfs" is found."""
    pytest.importorskip("pyspark")
    from tests.pipeline.helpers import build_store
    store = tmp_path / "store"
    build_store(str(store), 120)
    script = textwrap.dedent(f"""
        import os
        from pyspark.sql import SparkSession
        print("workers", os.environ["PYSPARK_PYTHON"])
        spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
        print("rows", spark.read.format("mqfs").load({str(store)!r}).count())
        spark.stop()
    """)
    proc = _plain_session(sys.executable, script, str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"workers {sys.executable}" in proc.stdout and "rows 120" in proc.stdout


def test_pip_install_of_the_wheel_brings_the_licence_manual_completions_and_units(wheel, tmp_path):
    """What `pip install mqfs` gives a user beside the code, seen through pip and man."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=LIMIT)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    subprocess.run([*pip, "install", "-q", "--no-deps", "--no-index", wheel], check=True,
                   capture_output=True, timeout=LIMIT)
    show = subprocess.run([*pip, "show", "-f", "mqfs"], capture_output=True, text=True, timeout=LIMIT).stdout
    from importlib.metadata import version
    assert f"Version: {version('mqfs')}" in show and "License-Expression: Apache-2.0" in show, show
    for path in ("licenses/LICENSE", "share/man/man1/mqfs.1", "share/bash-completion/completions/mqfs",
                 "share/zsh/site-functions/_mqfs", "share/mqfs/systemd/mqfs@.service",
                 "share/mqfs/systemd/mnt-mqfs.mount", "mqfs-pyspark-python.pth"):
        assert any(line.strip().endswith(path) for line in show.splitlines()), (path, show)
    with open(glob.glob(str(venv / "lib" / "python3*" / "site-packages" / "mqfs-*.dist-info" / "licenses" /
                            "LICENSE"))[0]) as f:
        assert "Apache License" in f.read(500)
    # man(1) looks in share/man beside each bin/ on PATH: the venv's, not activated otherwise
    env = {"PATH": f"{venv}/bin:/usr/bin:/bin", "MANPAGER": "cat", "MANWIDTH": "80", "HOME": str(tmp_path)}
    where = subprocess.run(["man", "-w", "mqfs"], capture_output=True, text=True, env=env, timeout=LIMIT)
    assert where.stdout.strip() == str(venv / "share" / "man" / "man1" / "mqfs.1"), where.stderr
    page = subprocess.run(["man", "mqfs"], capture_output=True, text=True, env=env, timeout=LIMIT)
    assert page.returncode == 0 and "mount" in page.stdout and "umount" in page.stdout, page.stderr
    subprocess.run([*pip, "uninstall", "-q", "-y", "mqfs"], check=True, capture_output=True, timeout=LIMIT)
    assert not (venv / "share" / "man" / "man1" / "mqfs.1").exists()
    assert not glob.glob(str(venv / "lib" / "python3*" / "site-packages" / "mqfs-pyspark-python.pth"))
