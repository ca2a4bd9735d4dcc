"""`mqfs dump`'s arguments, apart from what runs it: `mqfs --help`, `mqfs dump --help` and every
other subcommand build this parser without importing the readers and writers behind it."""

from __future__ import annotations

import argparse

from mqfs.store.offline.selection import TIMES, add_arguments

FORMATS = ("json", "csv", "raw", "replay", "offsets")
EPILOG = """\
exit status: 0 when a message was selected, 1 when none was, 2 on an error (a store that
cannot be read, a bad argument) or when a damaged record was skipped (each one named on
stderr). """ + TIMES


def add_parser(sub) -> None:
    d = sub.add_parser("dump", help="print a store's messages as JSON lines, CSV or raw "
                                    "bodies (reads the files: mounted or not, a broker's, "
                                    "a live one; changes nothing)",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("store", help="the store directory, where it is mounted, or a path in "
                                 "the mount (its whole store)")
    add_arguments(d)
    d.add_argument("-f", "--format", choices=FORMATS, default="json",
                   help="json (default: one object per line), csv (with a header), raw "
                        "(bodies, each ending in a newline), replay (lines append.jsonl "
                        "publishes again: body, keys, tags, user properties, "
                        "ORIGIN_MESSAGE_ID), offsets (TOPIC QUEUE OFFSET STORE_MS per line)")
    d.add_argument("-n", "--max", type=int, metavar="N", help="stop after N messages")
    d.add_argument("--each", type=int, metavar="N",
                   help="at most N messages of each queue (--since T --each 1: where T "
                        "falls on every queue)")
    d.add_argument("-c", "--count", action="store_true",
                   help="print only how many messages are selected")
    d.add_argument("--all-versions", action="store_true",
                   help="compaction topics with every version the CommitLog holds (default: "
                        "the versions the broker serves, as consumers and a mount see them)")
