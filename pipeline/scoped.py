"""The JVM half of the `mqfs` format: pipeline/*.java, built at install (scripts/setup runs
`python -m mqfs.pipeline.scoped install`) into `mqfs-spark.jar` in pyspark's own jars
directory, which is on the class path of every session this pyspark starts (a plain
`SparkSession`, spark-submit, pyspark's shell), driver and local executors alike.

The jar registers format `mqfs` on the JVM (META-INF/services), which takes precedence over
the Python source of the same name: ScopedScans.java gives every scan its own planned read
(Spark 4.3 otherwise lets a later query of the same DataFrame, or the other side of a
self-join, read the rows of another query's filters: pipeline/README.md, "Filter pushdown"),
takes Spark's filters, prunes columns, and reads batch scans and streams' micro-batches in the
JVM (RecordScan.java, RecordStream.java, planned by the Python reader: pipeline/jvmplan.py);
its optimizer rule (StreamPruning.java, loaded by every session) prunes streams' columns. The
Python source takes filters by default only when it sees the option ScopedScans adds (MARKER). Without a javac, or when
pyspark's classes differ from what the Java was written for, there is no jar: setup says so
in one line, and reads go through Python workers (the source says so once).
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

import pyspark

MARKER = "__mqfsScopedScans"  # = ScopedScans.MARKER
JAR = "mqfs-spark.jar"
_HERE = os.path.dirname(os.path.realpath(__file__))
_TAG = "META-INF/mqfs-source"
_said = False
_SERVICE = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"
# every session loads the jar's optimizer rule that prunes streams' columns (StreamPruning.java)
_EXTENSIONS = "META-INF/services/org.apache.spark.sql.SparkSessionExtensionsProvider"


def installed_jar() -> str:
    """Where the jar lives: pyspark's jars directory, on every session's class path."""
    return os.path.join(os.path.dirname(pyspark.__file__), "jars", JAR)


def _tag() -> str:
    """The Java sources and pyspark's version, hashed: the jar records what it was built from."""
    h = hashlib.sha1(pyspark.__version__.encode())
    for path in _sources():
        with open(path, "rb") as f:
            h.update(os.path.basename(path).encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


def _sources() -> list[str]:
    return sorted(glob.glob(os.path.join(_HERE, "*.java")))


def _built_from(jar_path: str) -> str | None:
    try:
        with zipfile.ZipFile(jar_path) as jar:
            return jar.read(_TAG).decode()
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def _build(out: str) -> str | None:
    """Compile pipeline/*.java against pyspark's jars into the jar `out`; None, or why not."""
    javac = shutil.which("javac")
    if javac is None:
        return "no javac on PATH (install a JDK, e.g. openjdk-17-jdk-headless, then run scripts/setup)"
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars", "*")
    with tempfile.TemporaryDirectory(prefix="mqfs-jvm-") as work:
        done = subprocess.run([javac, "-nowarn", "-d", work, "-cp", jars, *_sources()],
                              capture_output=True, text=True)
        if done.returncode != 0:  # another Spark's classes
            lines = done.stderr.strip().splitlines()
            return f"javac failed ({lines[0] if lines else done.returncode})"
        tmp = f"{out}.{os.getpid()}"
        with zipfile.ZipFile(tmp, "w") as jar:
            jar.writestr(_SERVICE, "org.mqfs.spark.ScopedScans\n")
            jar.writestr(_EXTENSIONS, "org.mqfs.spark.StreamPruning$Provider\n")
            jar.writestr(_TAG, _tag())
            for root, _, names in os.walk(work):
                for name in names:
                    full = os.path.join(root, name)
                    jar.write(full, os.path.relpath(full, work))
        os.replace(tmp, out)  # a session starting now never sees a half-written jar
    return None


def install() -> int:
    """Build the jar into pyspark's jars unless the one there was built from these sources."""
    out = installed_jar()
    if _built_from(out) == _tag():
        return 0
    why = _build(out)
    if why is not None:
        print(f"mqfs: no JVM reader: {why}; format mqfs reads through Python workers, without "
              "pushdown or column pruning", file=sys.stderr)
        return 1
    print(f"mqfs: built {out}")
    return 0


def scoped_scans_jar() -> str | None:
    """The installed jar's path; None (and a line saying so, once) when it is missing or was
    built from other sources than these (scripts/setup builds it)."""
    global _said
    out = installed_jar()
    if _built_from(out) == _tag():
        return out
    if not _said:
        _said = True
        state = "is missing" if not os.path.exists(out) else "was built from other sources"
        print(f"mqfs: warning: {out} {state}: run scripts/setup (reads go through Python workers)",
              file=sys.stderr)
    return None


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        sys.exit("usage: python -m mqfs.pipeline.scoped install")
    sys.exit(install())
