"""`mqfs pipeline <job>`: export, stats, audit, rebuild on local Spark or a cluster.

    mqfs pipeline export STORE OUT [-f parquet|jsonl|csv] [mqfs dump's selection options]
    mqfs pipeline stats STORE OUT_DIR [--top N] [--bucket SECONDS]
    mqfs pipeline audit STORE            (exit 1 when any entry disagrees with the CommitLog)
    mqfs pipeline rebuild STORE OUT

Local Spark by default (--master local[*]). On a cluster, submit this file; executors need
Spark 4, pyarrow and mqfs installed (or --py-files), and the store on storage they all read:
    spark-submit --master spark://host:7077 \
        "$(python -c 'import mqfs.pipeline.cli as c; print(c.__file__)')" audit /shared/store
"""

from __future__ import annotations

import argparse
import re
import sys

from mqfs.pipeline.jobs.export import FORMATS
from mqfs.pipeline.spark import progress, session
from mqfs.store.offline.selection import TIMES, add_arguments, glued, selection_of


class Parser(argparse.ArgumentParser):
    """As every mqfs command: usage errors in one line, --version on each (sub)command."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        from importlib.metadata import version

        self.add_argument("--version", action="version", version=f"mqfs {version('mqfs')}",
                          help="show the version and exit")

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="mqfs pipeline", description="Spark jobs over an mqfs store.")
    p.add_argument("--master", help="Spark master (default local[*], or spark-submit's)")
    sub = p.add_subparsers(dest="job", required=True, parser_class=Parser)

    def filters(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--topic", help="comma-separated topics")
        sp.add_argument("--queue", help="comma-separated queue ids")
        sp.add_argument("--start", help="store time from (epoch ms or ISO-8601, UTC)")
        sp.add_argument("--end", help="store time before (epoch ms or ISO-8601, UTC)")

    sp = sub.add_parser("export", help="messages to Parquet (partitioned by topic), or JSON "
                                       "lines or CSV as mqfs dump prints them",
                        epilog=TIMES)
    sp.add_argument("store", help="the store directory, where it is mounted, or a path in "
                                  "the mount (its whole store)")
    sp.add_argument("out")
    sp.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    sp.add_argument("-f", "--format", choices=FORMATS, default="parquet",
                    help="parquet (default: the message schema, topic=<name>/ directories), "
                         "jsonl or csv (part files of mqfs dump's JSON lines or CSV rows)")
    add_arguments(sp)
    sp.add_argument("--start", help="store time from (epoch ms or ISO-8601, UTC; as --since)")
    sp.add_argument("--end", help="store time before (exclusive; epoch ms or ISO-8601, UTC)")
    sp = sub.add_parser("stats", help="per topic/queue statistics, rate chart (PNG)")
    sp.add_argument("store")
    sp.add_argument("out", help="directory for stats.json and rate.png")
    sp.add_argument("--top", type=int, default=10, help="top keys per topic")
    sp.add_argument("--bucket", type=int, help="rate bucket in seconds (default: span/120)")
    filters(sp)
    sp = sub.add_parser("audit", help="check ConsumeQueues and IndexFiles against the CommitLog")
    sp.add_argument("store")
    sp = sub.add_parser("rebuild", help="regenerate ConsumeQueues and IndexFiles into a new store")
    sp.add_argument("store")
    sp.add_argument("out")
    return p


def _options(args: argparse.Namespace) -> dict[str, str]:
    """The source's options the filters spell (export's topics and queues are its selection's)."""
    names = {"start": "startTime", "end": "endTime"}
    if args.job != "export":
        names.update(topic="topic", queue="queue")
    return {opt: str(getattr(args, a)) for a, opt in names.items() if getattr(args, a, None)}


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _say(text: str) -> None:
    print(text, file=sys.stderr)


_RAISED = re.compile(r"^\s*(?:Caused by: )?(?:[\w.]+\.)?(\w*(?:Error|Exception|Record|Loss)): (.+)$")


def one_line(exc: BaseException) -> str:
    """The cause of a failure in one line. Spark wraps an error raised in a Python worker (or
    in the JVM reader: 'Caused by: ...DamagedRecord: text') in pages of JVM and Python
    traceback; the last 'SomeError: text' line is the one that says what went wrong."""
    text = str(exc)
    found = [m.group(2) for m in map(_RAISED.match, text.splitlines()) if m
             and not m.group(1).startswith(("Py4J", "Spark", "Analysis"))]
    if found:
        return found[-1].strip()
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    return first[:300]


def check_inputs(args: argparse.Namespace) -> str | None:
    """What is wrong with the arguments, found before Spark starts (a typo must not cost a
    Spark start-up, or leave an output directory behind); None when nothing is."""
    import os

    from mqfs.store.meta.features import unreadable
    from mqfs.store.meta.manifest import is_store

    for store in [p.strip() for p in args.store.split(",") if p.strip()] or [args.store]:
        try:
            if not is_store(store):
                return f"{store} holds no store (no mqfs.json and no commitlog/)"
            if (why := unreadable(os.path.realpath(store))) is not None:
                return why
        except PermissionError as exc:
            return f"{store}: {exc.strerror}"
    out = getattr(args, "out", None)
    if out is None or not os.path.exists(out):
        return None
    if not os.path.isdir(out):
        return f"{out} exists and is not a directory"
    if args.job == "export" and not args.overwrite:
        return f"{out} already exists; export writes a new directory (--overwrite replaces it)"
    if args.job == "rebuild" and os.listdir(out):
        return f"{out} already exists; {args.job} writes a new directory"
    return None


def resolved(store: str) -> str:
    """The store a path names, as `mqfs dump` takes it: a store directory, a mount point or a
    path inside a mount (its store, the mount flushed first). A list or glob of stores, or a
    path that is none of these (check_inputs says so), is left as given."""
    import glob

    from mqfs.store.errors import StoreError
    from mqfs.store.offline.located import store_root

    if "," in store or glob.has_magic(store):
        return store
    try:
        return store_root(store)
    except (StoreError, OSError):
        return store


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(glued(argv))
    args.store = resolved(args.store)
    problem = check_inputs(args)
    selection = None
    if problem is None and args.job == "export":
        if (args.since or args.until) and (args.start or args.end):
            problem = "give --since/--until or --start/--end, not both"
        try:
            selection = selection_of(args)
        except ValueError as exc:
            problem = problem or str(exc)
    if problem:
        _say(f"mqfs pipeline {args.job}: {problem}")
        return 2
    from pyspark.sql import SparkSession
    shared = SparkSession.getActiveSession() is not None  # e.g. tests: leave it running
    if sys.stderr.isatty() and not shared:  # a JVM's start-up takes seconds (a minute when busy)
        print(f"{args.job}: starting Spark ({args.master or 'local[*]'})", file=sys.stderr, flush=True)
    try:
        # failures are reported below in one line, not as the traces Spark logs at ERROR
        spark = session(args.master, app=f"mqfs {args.job}", log_level="fatal")
    except Exception as exc:  # no Java, bad master URL, ...
        _say(f"mqfs pipeline: cannot start Spark: {one_line(exc)}")
        return 2
    try:
        with progress(spark, args.job):
            if args.job == "export":
                from mqfs.pipeline.jobs import export
                r = export.run(spark, args.store, args.out, _options(args), args.overwrite,
                               args.format, selection)
                if not r["rows"]:
                    print(f"exported 0 messages: none matched; {r['out']} holds an empty export")
                elif r["topics"] is None:
                    print(f"exported {_count(r['rows'], 'message')} to {r['out']}")
                else:
                    print(f"exported {r['rows']} messages of {_count(len(r['topics']), 'topic')} to {r['out']}")
            elif args.job == "stats":
                from mqfs.pipeline.jobs import stats
                r = stats.run(spark, args.store, args.out, _options(args), args.top, args.bucket)
                for t in r["topics"]:
                    print(f"{t['topic']}: {_count(t['messages'], 'message')} in "
                          f"{_count(t['queues'], 'queue')}, {t['bytes']} bytes, {t['rate_per_s']:.1f} msg/s "
                          "(average over the store-time span, at least 1 s)")
                print(f"details in {r['json']}, chart in {r['chart']}")
            elif args.job == "audit":
                from mqfs.pipeline.jobs import audit
                r = audit.run(spark, args.store)
                for line in r["shown"]:
                    print(line)
                for note in r["notes"]:
                    print(f"audit: note: {note}")
                if r["live"]:
                    print("audit: the store is open (or was not closed cleanly): its ConsumeQueues and "
                          "IndexFiles are checked as far as they have reached")
                print(f"audit: {r['cq_units']} ConsumeQueue units, {r['index_entries']} index entries "
                      f"checked, {r['problems']} problems")
                return 1 if r["problems"] else 0
            elif args.job == "rebuild":
                from mqfs.pipeline.jobs import rebuild
                r = rebuild.run(spark, args.store, args.out)
                print(f"rebuilt {r['queues']} queues ({r['cq_units']} units) and "
                      f"{r['index_keys']} index entries into {r['out']}")
        return 0
    except Exception as exc:  # a job's failure, here or in any task: one line, no traceback
        _say(f"mqfs pipeline {args.job}: {one_line(exc)}")
        return 1
    finally:
        if not shared:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
