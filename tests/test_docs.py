"""The docs name what the code has. Every repository path and `mqfs.` module a doc names
exists; README's Layout lists every folder (and, where it lists a folder's modules, all of
them); docs/concurrency.md's threads are the store's threads and the classes, members and
functions it names are in the code; docs/store-api.md's limits are the code's and it names
every store module that reaches files around safefs. (tests/test_layers.py holds the names
store-api.md publishes to the imports.) A change that renames or moves something fails here
until the doc says so too."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import tomllib
from functools import cache
from pathlib import Path

import pytest

from mqfs.store.errors import InvalidMessage
from mqfs.store.format import message
from mqfs.store.meta import metadata

ROOT = Path(__file__).resolve().parent.parent
# CHANGELOG.md is history: it names what was, on purpose
DOCS = sorted(p.relative_to(ROOT).as_posix() for p in
              [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("*/README.md")]
              if not p.relative_to(ROOT).parts[0].startswith((".", "build")))
CONCURRENCY = ROOT / "docs" / "concurrency.md"
STORE_API = ROOT / "docs" / "store-api.md"
TOP = ("store", "fusefs", "pipeline", "pyspark_mqfs", "scripts", "tests", "docs", "share",
       "systemd")
PATH = re.compile(r"(?<![\w/.~$<-])((?:" + "|".join(TOP) + r")/[\w./@*{},$-]*)")
SOURCES = ("store", "fusefs", "pipeline", "pyspark_mqfs", "scripts", "tests")
MODULE = re.compile(r"(?<![\w/.-])(mqfs\.(?:store|fusefs|pipeline)(?:\.\w+)*)")
CODE = re.compile(r"`([^`\n]+)`")
FILE_NAME = re.compile(r"\.(py|json|log|md|java|jar|mount|service)$")


def tracked() -> list[str]:
    """The repository's files as git knows them (not build/, .venv or caches)."""
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def installed_dirs() -> list[str]:
    """Where pyproject's data-files go under an environment's prefix (`share/mqfs/systemd`):
    paths a doc may name that are no folder of the repository."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        return list(tomllib.load(f)["tool"]["setuptools"]["data-files"])


def missing_paths(text: str) -> list[str]:
    """The repository paths a text names that are not there. A pattern (`pipeline/*.java`,
    `scripts/bench_$what.py`) must match something; paths under an environment's prefix
    that pyproject installs (`share/mqfs/systemd/`) count as there."""
    missing = []
    for path in sorted({m.rstrip(".,") for m in PATH.findall(text)}):
        stem = re.split(r"[*{},$]", path)[0]
        if (ROOT / path).exists() or (stem != path and any(ROOT.glob(stem + "*"))):
            continue
        if any(path.rstrip("/") == d or path.startswith(d + "/") for d in installed_dirs()):
            continue
        missing.append(path)
    return missing


@pytest.mark.parametrize("doc", DOCS)
def test_every_path_a_doc_names_exists(doc):
    assert missing_paths((ROOT / doc).read_text()) == [], f"{doc} names paths that do not exist"


@pytest.mark.parametrize("tree", SOURCES)
def test_every_path_a_comment_names_exists(tree):
    """Docstrings and comments name modules as docs do (`store/files/safefs.py`)."""
    wrong = [f"{name}: {path}" for name in tracked() if name.startswith(tree + "/")
             and (name.endswith(".py") or tree == "scripts")
             for path in missing_paths((ROOT / name).read_text())]
    assert wrong == []


def resolves(dotted: str) -> bool:
    """Whether `mqfs.a.b.c` is a module, or names reached from the longest module prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 1, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


@pytest.mark.parametrize("doc", DOCS)
def test_every_module_a_doc_names_exists(doc):
    names = sorted({m.rstrip(".") for m in MODULE.findall((ROOT / doc).read_text())})
    assert [n for n in names if not resolves(n)] == [], f"{doc} names modules or names that do not exist"


def layout() -> dict[str, tuple[set[str], set[str]]]:
    """README's Layout block: each top folder with the sub-folders and the modules listed
    under it (an indented `name/` line, an indented `a.py, b.py` line)."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"\n## Layout\n+```\n(.*?)```", text, re.S)
    assert block, "README.md: no ``` block under ## Layout"
    folders: dict[str, tuple[set[str], set[str]]] = {}
    current = None
    for line in block.group(1).splitlines():
        if m := re.match(r"([\w.-]+)/(\s|$)", line):
            current = m.group(1)
            folders[current] = (set(), set())
        elif current and (m := re.match(r"\s+([\w.-]+)/(\s|$)", line)):
            folders[current][0].add(m.group(1))
        elif current and (m := re.match(r"\s+(\w+\.py(?:, \w+\.py)*)(\s|$)", line)):
            folders[current][1].update(m.group(1).split(", "))
    return folders


def test_readme_layout_lists_every_folder_and_only_those():
    listed = layout()
    files = tracked()
    top = {f.split("/")[0] for f in files if "/" in f and not f.startswith(".")}
    assert sorted(listed) == sorted(top), "README's Layout against the repository's folders"
    for folder, (subs, modules) in listed.items():
        real = {f.split("/")[1] for f in files
                if f.startswith(folder + "/") and f.count("/") >= 2 and f.endswith(".py")}
        assert sorted(subs) == sorted(real), f"README's Layout: the folders under {folder}/"
        if modules:  # a folder whose modules are listed has them all listed
            here = {f.split("/")[1] for f in files if f.startswith(folder + "/")
                    and f.count("/") == 1 and f.endswith(".py") and not f.endswith("__init__.py")}
            assert sorted(modules) == sorted(here), f"README's Layout: the modules of {folder}/"


@cache
def code_names() -> tuple[dict[str, set[str]], dict[str, set[str]], set[str]]:
    """Over store/ and fusefs/: each class's members (methods, class-level names, `self.x`
    assignments, with those of its bases defined here), each module's top-level names, and
    every name defined anywhere (functions, classes, assigned names and attributes)."""
    members: dict[str, set[str]] = {}
    bases: dict[str, list[str]] = {}
    modules: dict[str, set[str]] = {}
    defined: set[str] = set()
    for path in [*sorted((ROOT / "store").rglob("*.py")), *sorted((ROOT / "fusefs").rglob("*.py"))]:
        tree = ast.parse(path.read_text())
        top: set[str] = modules.setdefault(path.stem, set())
        for node in tree.body:
            top.update(_bound(node))
        for node in ast.walk(tree):
            defined.update(_bound(node))
            if isinstance(node, ast.ClassDef):
                own = members.setdefault(node.name, set())
                bases.setdefault(node.name, []).extend(
                    b.id for b in node.bases if isinstance(b, ast.Name))
                for child in node.body:
                    own.update(_bound(child))
                for child in ast.walk(node):
                    if (isinstance(child, ast.Attribute) and isinstance(child.ctx, ast.Store)
                            and isinstance(child.value, ast.Name) and child.value.id == "self"):
                        own.add(child.attr)
    for name in members:  # members of base classes defined here
        stack = list(bases[name])
        while stack:
            base = stack.pop()
            if base in members:
                members[name] |= members[base]
                stack.extend(bases[base])
    return members, modules, defined


def _bound(node: ast.AST) -> set[str]:
    """The names a statement defines."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    found = set()
    for t in targets:
        for leaf in ast.walk(t):
            if isinstance(leaf, ast.Name):
                found.add(leaf.id)
            elif isinstance(leaf, ast.Attribute):
                found.add(leaf.attr)
    return found


def named_in(text: str) -> set[str]:
    """The code names a doc shows in backticks: `Class.member`, `module.name`, `function()`,
    `snake_case` and `CamelCase` names (not options, paths, commands or Java names)."""
    found = set()
    for span in CODE.findall(text):
        span = span.removesuffix("()")
        if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", span) or FILE_NAME.search(span):
            continue
        if "." in span or "_" in span or re.fullmatch(r"[A-Z][a-z]+[A-Z]\w*", span):
            found.add(span)
    return found


def unknown_names(text: str) -> list[str]:
    members, modules, defined = code_names()
    wrong = []
    for name in sorted(named_in(text)):
        head, *rest = name.split(".")
        if not rest:
            known = head in defined
        elif head in members:
            known = rest[0] in members[head]
        elif head in modules:
            known = rest[0] in modules[head]
        else:
            continue  # an object of no class named here (`service.error`), or another library
        if not known:
            wrong.append(name)
    return wrong


def test_concurrency_names_the_classes_locks_and_functions_of_the_code():
    assert unknown_names(CONCURRENCY.read_text()) == []


def test_concurrency_lists_every_thread_the_store_starts():
    """Its threads table names each thread (`mqfs-...`), as py-spy and a log's %(threadName)s
    show it: every one the store starts, and no other."""
    started = set()
    for path in (ROOT / "store").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and re.fullmatch(r"mqfs-[a-z-]+", node.value):
                started.add(node.value)
    table = CONCURRENCY.read_text().split("\n## Threads\n", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(mqfs-[a-z-]+)`", table, re.M))
    assert started and sorted(documented) == sorted(started)


def test_store_api_states_the_name_limits_of_the_code():
    text = " ".join(STORE_API.read_text().split())
    assert f"Topic names: `[%|a-zA-Z0-9_-]{{1,{message.MAX_TOPIC_LEN}}}`" in text
    assert f"{message.MAX_RETRY_TOPIC_LEN} for a `%RETRY%` topic" in text
    longest = re.search(r"Group names: `\[%\|a-zA-Z0-9_-\]\{1,(\d+)\}`", text)
    assert longest, "store-api.md: no line on group names"
    metadata.validate_group("g" * int(longest.group(1)))
    with pytest.raises(InvalidMessage):
        metadata.validate_group("g" * (int(longest.group(1)) + 1))
    assert f"`{message.NAME_MAX}`" in text or f"NAME_MAX` ({message.NAME_MAX})" in text


# calls that reach a file by path; with `dir_fd=` they go through a directory safefs opened
_PATH_CALLS = {("os", "open"), ("os", "rename"), ("os", "replace"), ("os", "unlink"),
               ("os", "remove"), ("os", "mkdir"), ("os", "makedirs"), ("os", "rmdir"),
               ("os", "chmod"), ("os", "link"), ("os", "symlink"), ("os", "truncate"),
               ("shutil", "copytree"), ("shutil", "copyfile"), ("shutil", "copy"),
               ("shutil", "copy2"), ("shutil", "move"), ("shutil", "rmtree"), (None, "open")}


def _reaches_around_safefs(call: ast.Call) -> bool:
    f = call.func
    key = ((f.value.id if isinstance(f.value, ast.Name) else "?", f.attr)
           if isinstance(f, ast.Attribute) else (None, f.id) if isinstance(f, ast.Name) else None)
    if key not in _PATH_CALLS or any(k.arg == "dir_fd" for k in call.keywords):
        return False
    first = call.args[0] if call.args else None
    literal = first.value if isinstance(first, ast.Constant) else (
        first.values[0].value if isinstance(first, ast.JoinedStr) and first.values
        and isinstance(first.values[0], ast.Constant) else "")
    return not str(literal).startswith("/proc/")  # the kernel's files, not the store's


def test_store_api_names_every_module_that_reaches_files_around_safefs():
    """safefs is how store code opens, creates, renames and removes a store's files; the
    modules that do it otherwise are the ones store-api.md names, with why."""
    around = set()
    for path in (ROOT / "store").rglob("*.py"):
        if path.name == "safefs.py":
            continue
        if any(isinstance(n, ast.Call) and _reaches_around_safefs(n)
               for n in ast.walk(ast.parse(path.read_text()))):
            around.add("mqfs.store." + ".".join(path.relative_to(ROOT / "store").with_suffix("").parts))
    paragraphs = [" ".join(p.split()) for p in STORE_API.read_text().split("\n\n")]
    said = [p for p in paragraphs if "is the only way store code opens" in p and " by path" in p]
    assert said, "store-api.md: no paragraph saying safefs is the only way, and which modules reach files by path"
    named = set(MODULE.findall(said[0].split(" by path", 1)[1]))
    assert sorted(named) == sorted(around)
    # the finder finds: a call by path is one, the same call through a safefs directory is not
    assert _reaches_around_safefs(ast.parse("open(p, 'rb')").body[0].value)
    assert not _reaches_around_safefs(ast.parse("os.open(n, f, dir_fd=d)").body[0].value)
