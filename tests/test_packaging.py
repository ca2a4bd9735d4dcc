"""One distribution, one import name: the wheel puts `mqfs` (store, fusefs, pipeline under it)
and Spark's discovery hook `pyspark_mqfs` into site-packages, nothing generic like `store`;
the editable install scripts/setup makes shows the same names."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import textwrap
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = {"store": "mqfs.store", "fusefs": "mqfs.fusefs", "pipeline": "mqfs.pipeline",
           "pyspark_mqfs": "pyspark_mqfs"}


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
def test_the_wheel_installs_one_top_level_package_and_spark_finds_the_format(tmp_path):
    dist = tmp_path / "dist"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), ROOT],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    (wheel,) = glob.glob(str(dist / "mqfs-*.whl"))
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
    assert installed - ours == {"mqfs", "pyspark_mqfs"}
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

    from tests.spark_helpers import build_store
    store = tmp_path / "store"
    build_store(str(store), 300)
    script = textwrap.dedent(f"""
        from pyspark.sql import SparkSession
        spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
        print("rows", spark.read.format("mqfs").load({str(store)!r}).count())
        spark.stop()
    """)
    env = {**os.environ, "PYSPARK_PYTHON": python, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("VIRTUAL_ENV", None)
    proc = subprocess.run([python, "-c", script], capture_output=True, text=True, cwd=str(tmp_path),
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rows 300" in proc.stdout
