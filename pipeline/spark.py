"""SparkSession set-up shared by the jobs, tests and bench: the right Python for workers,
loopback networking, no UI, quiet logs, the `mqfs` format available, and task progress on
stderr. Under spark-submit the session already exists and its settings win."""

from __future__ import annotations

import hashlib
import os
import pkgutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

from .scoped import scoped_scans_jar

_LOG4J = """rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n
logger.spark.name = org.apache.spark
logger.spark.level = {level}
"""
_CONF_PREFIX = f"mqfs-spark-conf-{os.getuid()}"


def _quiet_conf_dir(level: str) -> str:
    """A SPARK_CONF_DIR whose log4j2.properties logs Spark at `level` (SparkContext.setLogLevel
    cannot lower it: it sets only the root logger); named by content, so configs never mix."""
    text = _LOG4J.format(level=level)
    tag = hashlib.sha1(text.encode()).hexdigest()[:8]
    directory = os.path.join(tempfile.gettempdir(), f"{_CONF_PREFIX}-{tag}")
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "log4j2.properties")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)  # a concurrent start never reads a half-written file
    return directory


def session(master: str | None = None, app: str = "mqfs",
            conf: dict[str, str] | None = None, log_level: str = "error") -> SparkSession:
    """A SparkSession that can read and write format "mqfs". Without a master: local[*], or
    whatever spark-submit was given (it starts Python with PYSPARK_GATEWAY_PORT set). Spark
    logs at `log_level` unless SPARK_CONF_DIR names a configuration of the user's."""
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if master is None and not submitted:
        master = "local[*]"
    if not submitted:
        # Python workers, local or on a cluster's executors, must run an interpreter that has
        # mqfs installed: this one unless PYSPARK_PYTHON names another (the path must exist on
        # every executor machine; a cluster installed like this one has it).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master and master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if os.path.basename(os.environ.get("SPARK_CONF_DIR", _CONF_PREFIX)).startswith(_CONF_PREFIX):
        os.environ["SPARK_CONF_DIR"] = _quiet_conf_dir(log_level)
    builder = SparkSession.builder if master is None else SparkSession.builder.master(master)
    builder = (builder.appName(app)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               # the mqfs reader pushes filters down; Spark refuses such readers without this
               .config("spark.sql.python.filterPushdown.enabled", "true"))
    conf = dict(conf or {})
    jar = None if submitted else scoped_scans_jar()
    if jar:  # every scan its own planned read, so filters are pushed by default (scoped.py)
        conf["spark.driver.extraClassPath"] = os.pathsep.join(
            p for p in (conf.get("spark.driver.extraClassPath"), jar) if p)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level.upper())
    if not any(m.name == "pyspark_mqfs" for m in pkgutil.iter_modules()):
        # Spark finds `pyspark_mqfs` only on a plain sys.path entry (a regular or compat-mode
        # editable install); under setuptools' default editable finder, register by hand.
        from .source import MqfsDataSource
        spark.dataSource.register(MqfsDataSource)
    return spark


def _tasks(tracker, group: str) -> tuple[int, int, int]:
    """(completed tasks, tasks, stages) of the jobs of a job group so far."""
    done = total = stages = 0
    for jid in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(jid)
        for sid in job.stageIds if job else ():
            info = tracker.getStageInfo(sid)
            if info:
                done, total, stages = done + info.numCompletedTasks, total + info.numTasks, stages + 1
    return done, total, stages


def _since_process_start() -> float:
    """Seconds since this process started (Python's and Spark's start-up included): what the
    user waited for, not just the job."""
    with open("/proc/self/stat") as f:
        started_ticks = int(f.read().rpartition(")")[2].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - started_ticks / os.sysconf("SC_CLK_TCK")


@contextmanager
def progress(spark: SparkSession, label: str, interval: float = 0.5) -> Iterator[None]:
    """A tqdm bar of the job's Spark tasks on stderr while the block runs (on a terminal
    only), then '<label>: N tasks in S stages, done in T s' if it succeeded, T counted from
    the start of the process (the command), the job's own part after it. The block's
    Spark jobs run in a job group of their own, which is what is counted."""
    from tqdm import tqdm

    sc = spark.sparkContext
    tracker = sc.statusTracker()
    group = f"mqfs-{label}-{os.getpid()}-{time.monotonic_ns()}"
    sc.setJobGroup(group, label)
    stop = threading.Event()

    def report() -> None:
        with tqdm(total=0, desc=label, unit="task", disable=None, file=sys.stderr,
                  dynamic_ncols=True, leave=False) as bar:
            while not stop.wait(interval):
                done, total, _ = _tasks(tracker, group)
                bar.total = total
                bar.update(done - bar.n)

    thread = threading.Thread(target=report, daemon=True)
    started = time.monotonic()
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    _, tasks, stages = _tasks(tracker, group)
    print(f"{label}: {tasks} tasks in {stages} stages, done in {_since_process_start():.1f} s "
          f"(the job {time.monotonic() - started:.1f} s)", file=sys.stderr)
