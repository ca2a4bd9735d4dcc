"""The man page and the shell completions are generated from the parsers (scripts/gen-docs):
the committed files are what the generator writes now, the page renders without warnings,
and bash really completes commands and options from the completion file."""

from __future__ import annotations

import importlib.util
import os
import subprocess

import pytest

from tests.waits import LIMIT

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", os.path.join(ROOT, "scripts", "gen_docs.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen_docs():
    return _gen_docs()


def test_committed_man_page_and_completions_match_the_parsers(gen_docs):
    for kind, text in gen_docs.render().items():
        with open(os.path.join(ROOT, gen_docs.OUTPUTS[kind])) as f:
            assert f.read().rstrip("\n") == text.rstrip("\n"), \
                f"{gen_docs.OUTPUTS[kind]} is stale: run scripts/gen-docs"


def test_man_page_renders_every_command_and_option(gen_docs):
    page = os.path.join(ROOT, gen_docs.OUTPUTS["man"])
    proc = subprocess.run(["man", "--warnings", "-l", page], capture_output=True, text=True,
                          env={**os.environ, "MANWIDTH": "100", "MAN_KEEP_FORMATTING": ""},
                          timeout=LIMIT)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    text = " ".join(proc.stdout.split())
    for command in ("mount", "umount", "init", "info", "verify", "repair", "pipeline export",
                    "pipeline stats", "pipeline audit", "pipeline rebuild"):
        assert f"COMMAND 'mqfs {command}'" in text, command
    for option in ("--debug", "--version", "--flavor", "retention_hours=H", "--master"):
        assert option in text, option


def _bash_complete(words: list[str], gen_docs) -> list[str]:
    script = (f"source {gen_docs.OUTPUTS['bash']}; COMP_WORDS=({' '.join(words)}); "
              f"COMP_CWORD={len(words) - 1}; COMP_LINE='{' '.join(words)}'; "
              "COMP_POINT=${#COMP_LINE}; _shtab_mqfs; printf '%s\\n' \"${COMPREPLY[@]}\"")
    proc = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=LIMIT)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_bash_completes_commands_options_and_pipeline_jobs(gen_docs):
    assert _bash_complete(["mqfs", "ver"], gen_docs) == ["verify"]
    assert set(_bash_complete(["mqfs", "''"], gen_docs)) >= {"mount", "umount", "init", "info",
                                                             "verify", "repair", "pipeline"}
    assert _bash_complete(["mqfs", "mount", "--deb"], gen_docs) == ["--debug"]
    assert _bash_complete(["mqfs", "pipeline", "st"], gen_docs) == ["stats"]


def test_zsh_completion_parses_and_names_every_command(gen_docs):
    path = os.path.join(ROOT, gen_docs.OUTPUTS["zsh"])
    proc = subprocess.run(["zsh", "-n", path], capture_output=True, text=True, timeout=LIMIT)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    with open(path) as f:
        text = f.read()
    assert text.startswith("#compdef mqfs")
    for command in ("mount", "umount", "init", "info", "verify", "repair", "pipeline", "stats"):
        assert f"    {command}:'" in text, command
