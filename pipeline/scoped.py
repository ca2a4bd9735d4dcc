"""The JVM half of the `mqfs` format: ScopedScans.java, built once into a jar that
`spark.session()` puts on the driver's class path.

Spark 4.3 keeps the read a Python source planned with pushed filters on the relation, so a
later query of the same DataFrame with no filter (or the other side of a self-join) reads the
rows of another query's filters (pipeline/README.md, "Filter pushdown"). ScopedScans gives
every scan its own plan; the Python source takes filters by default only when it sees the
option ScopedScans adds (MARKER), so without the jar a read is never filtered by a plan made
for another query. ScopedScans also prunes columns: it gives the Python reader the schema of
the columns a query needs (pipeline/pruning.py), and hands it the filters it takes with that
schema (pipeline/carried.py). Built with the JDK's javac against the
installed pyspark's jars; without a javac, or when those classes differ from what it was
written for, there is no jar (pushdown stays opt-in and every column is read).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile

import pyspark

MARKER = "__mqfsScopedScans"  # = ScopedScans.MARKER
_SOURCE = os.path.join(os.path.dirname(__file__), "ScopedScans.java")
_SERVICE = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"


def _cache_dir() -> str | None:
    """~/.cache/mqfs (or $XDG_CACHE_HOME/mqfs), made private; None when it is not ours alone
    (a jar there is code our JVM runs)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "mqfs")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        return None
    return path


def _build(out: str) -> bool:
    """Compile ScopedScans.java against pyspark's jars into the jar `out`."""
    javac = shutil.which("javac")
    if javac is None:
        return False
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars", "*")
    with tempfile.TemporaryDirectory(prefix="mqfs-jvm-") as work:
        done = subprocess.run([javac, "-nowarn", "-d", work, "-cp", jars, _SOURCE],
                              capture_output=True, text=True)
        if done.returncode != 0:  # another Spark's classes: sessions still start, pushdown opt-in
            lines = done.stderr.strip().splitlines()
            print(f"mqfs: warning: javac failed on {_SOURCE} ({lines[0] if lines else done.returncode}); "
                  "filter pushdown stays opt-in and queries read every column", file=sys.stderr)
            return False
        tmp = f"{out}.{os.getpid()}"
        with zipfile.ZipFile(tmp, "w") as jar:
            jar.writestr(_SERVICE, "org.mqfs.spark.ScopedScans\n")
            for root, _, names in os.walk(work):
                for name in names:
                    full = os.path.join(root, name)
                    jar.write(full, os.path.relpath(full, work))
        os.replace(tmp, out)  # a concurrent start never sees a half-written jar
    return True


def scoped_scans_jar() -> str | None:
    """The jar's path, built on first use (named by the source and pyspark's version, so a
    change of either builds anew); None without a javac or a private cache directory."""
    directory = _cache_dir()
    if directory is None:
        return None
    with open(_SOURCE, "rb") as f:
        tag = hashlib.sha1(f.read() + pyspark.__version__.encode()).hexdigest()[:12]
    out = os.path.join(directory, f"mqfs-scoped-scans-{tag}.jar")
    if os.path.exists(out) or _build(out):
        return out
    return None
