"""Write the man page and the bash and zsh completions of `mqfs` from its argument parsers
(the mqfs command's, with the pipeline's grafted in as `mqfs pipeline`), so none can drift
from the options the command takes. Run by scripts/gen-docs; tests/test_cli_docs.py checks
the committed files are what this writes."""

from __future__ import annotations

import argparse
import os
import sys

import shtab
from argparse_manpage.manpage import Manpage

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTPUTS = {
    "man": "share/man/man1/mqfs.1",
    "bash": "share/bash-completion/completions/mqfs",
    "zsh": "share/zsh/site-functions/_mqfs",
}
DESCRIPTION = (
    "mqfs mounts a RocketMQ-format message store (CommitLog, ConsumeQueues, IndexFiles) as a "
    "filesystem: topics and queues are directories, messages are files named by their queue "
    "offset, writing to a queue's append file stores a message, and /keys, /groups and "
    "/status.json show the index, consumer offsets and the store's state. The same command "
    "creates, checks and repairs stores and runs the PySpark pipeline jobs over them. "
    "See the README of the source tree for the whole contract.")


def full_parser() -> argparse.ArgumentParser:
    from mqfs.fusefs.cli import build_parser
    from mqfs.pipeline.cli import build_parser as pipeline_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    pipeline = pipeline_parser()
    pipeline.prog = "mqfs pipeline"
    sub.choices["pipeline"] = pipeline
    for p in _all(parser):  # stores, mount points and outputs are directories
        for action in p._actions:
            if action.dest in ("store", "mountpoint", "out"):
                action.complete = shtab.DIRECTORY  # type: ignore[attr-defined]
    return parser


def _all(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    out = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                out += _all(child)
    return out


def man_page(parser: argparse.ArgumentParser, version: str) -> str:
    parser.description = DESCRIPTION
    page = Manpage(parser)
    page.date = "2026"  # fixed: regenerating on another day changes nothing
    page.source = f"mqfs {version}"
    page.manual = "mqfs manual"
    page.description = "a RocketMQ-format message store as a Linux filesystem"
    return str(page)


def render() -> dict[str, str]:
    from importlib.metadata import version

    parser = full_parser()
    return {"man": man_page(parser, version("mqfs")),
            "bash": shtab.complete(parser, shell="bash"),
            "zsh": shtab.complete(parser, shell="zsh")}


def main() -> int:
    for kind, text in render().items():
        path = os.path.join(ROOT, OUTPUTS[kind])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text if text.endswith("\n") else text + "\n")
        print(f"wrote {OUTPUTS[kind]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
