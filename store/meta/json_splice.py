"""A broker's JSON file changed in its own text: each changed value replaced where it stands, a
new member added before its object's closing brace, every other byte as the broker wrote it
(fastjson's tabs, unquoted integer keys, member order). The caller checks that the text parses
to the document it means (`spliced` and `spliced_table` return None where the text is not one
they can follow)."""

from __future__ import annotations

import json
import re
from typing import Any

from ..files.json_file import parse_text

_WS = " \t\r\n"
_UNQUOTED = re.compile(r"[{,]\s*-?\d+\s*:")  # fastjson writes Integer keys bare


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _string_end(text: str, i: int) -> int:
    i += 1
    while text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _value_end(text: str, i: int) -> int:
    if text[i] == '"':
        return _string_end(text, i)
    if text[i] in "{[":
        depth = 0
        while True:
            c = text[i]
            if c == '"':
                i = _string_end(text, i)
                continue
            if c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
    j = i
    while j < len(text) and text[j] not in ",}]" + _WS:
        j += 1
    return j


def members(text: str, i: int) -> tuple[dict[str, tuple[int, int]], int]:
    """The object at text[i] ('{'): key -> (value start, value end), and its '}' index."""
    if text[i] != "{":
        raise ValueError("not an object")
    out: dict[str, tuple[int, int]] = {}
    i = _skip(text, i + 1)
    while text[i] != "}":
        if text[i] == '"':
            end = _string_end(text, i)
            key = json.loads(text[i:end])
        else:
            end = i
            while text[end] not in ":" + _WS:
                end += 1
            key = text[i:end]
        i = _skip(text, end)
        if text[i] != ":":
            raise ValueError("no ':' after a key")
        start = _skip(text, i + 1)
        stop = _value_end(text, start)
        out[key] = (start, stop)
        i = _skip(text, stop)
        if text[i] == ",":
            i = _skip(text, i + 1)
    return out, i


def _queues_text(queues: dict[int, int], bare: bool, before_close: str = "") -> str:
    """An entry's value in the file's style (bare keys, the space before its '}')."""
    inner = ",".join(f"{q}:{o}" if bare else f'"{q}":{o}' for q, o in queues.items())
    return "{" + inner + before_close + "}"


def spliced(text: str, table: dict[str, dict[int, int]], version: dict | None) -> str | None:
    """consumerOffset.json's text with `table`'s changed and new topic@group entries and
    `version`'s counter and timestamp; None when the text is not an object with an
    offsetTable object (the caller writes the document whole)."""
    try:
        top, _ = members(text, _skip(text, 0))
        if "offsetTable" not in top:
            return None
        opening = top["offsetTable"][0]
        entries, close = members(text, opening)
        indent = text[opening + 1:_skip(text, opening + 1)]  # before each entry: "\n\t\t"
        edits: list[tuple[int, int, str]] = []
        added = []
        for tg, queues in table.items():
            if tg in entries:
                start, stop = entries[tg]
                old = text[start:stop]
                bare = bool(_UNQUOTED.search(old))
                if json.loads(re.sub(r"([{,]\s*)(-?\d+)(\s*:)", r'\1"\2"\3', old)) != \
                        {str(q): o for q, o in queues.items()}:
                    close_space = old[len(old[:-1].rstrip(_WS)):-1]
                    edits.append((start, stop, _queues_text(queues, bare, close_space)))
            else:
                bare = bool(_UNQUOTED.search(text))
                added.append(f"{json.dumps(tg)}:{_queues_text(queues, bare)}")
        edits += _after_last(entries, close, indent, added)
        edits += _version_edits(text, top, version)
    except (ValueError, IndexError):
        return None
    return _applied(text, edits)


def _after_last(entries: dict, close: int, indent: str, added: list[str]) -> list[tuple[int, int, str]]:
    """The edit that puts new entries after the last one, each on its line as the others."""
    if not added:
        return []
    at = max((stop for _, stop in entries.values()), default=close)
    lead = "," + indent if entries else indent
    return [(at, at, lead + ("," + indent).join(added))]


def _version_edits(text: str, top: dict[str, tuple[int, int]],
                   version: dict | None) -> list[tuple[int, int, str]]:
    """dataVersion's counter and timestamp set to `version`'s, its other fields left."""
    if version is None or "dataVersion" not in top:
        return []
    fields, _ = members(text, top["dataVersion"][0])
    return [(*fields[name], str(int(version[name])))
            for name in ("counter", "timestamp") if name in fields and name in version]


def _applied(text: str, edits: list[tuple[int, int, str]]) -> str:
    for start, stop, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[stop:]
    return text


def _rendered(value: Any, indent: str, unit: str) -> str:
    """A value as fastjson's pretty writer lays it out at `indent` (compact without one)."""
    if not isinstance(value, dict) or not value or "\n" not in indent:
        return json.dumps(value, separators=(",", ":"))
    inner = indent + unit
    return "{" + ",".join(f"{inner}{json.dumps(k)}:{_rendered(v, inner, unit)}"
                          for k, v in value.items()) + indent + "}"


def spliced_table(text: str, key: str, table: dict[str, dict],
                  version: dict | None) -> str | None:
    """The text with the object at top-level `key` saying `table` (topics.json's
    topicConfigTable): in a changed entry only the members whose value changed, new entries
    after the last one, laid out as the others; and `version`'s dataVersion counter and
    timestamp. None when the text has no such object or an entry `table` lacks."""
    try:
        top, _ = members(text, _skip(text, 0))
        if key not in top:
            return None
        opening = top[key][0]
        entries, close = members(text, opening)
        if not entries.keys() <= table.keys():
            return None
        indent = text[opening + 1:_skip(text, opening + 1)]  # before each entry: "\n\t\t"
        unit = "\t" if "\t" in indent else "  "
        edits: list[tuple[int, int, str]] = []
        added = []
        for name, value in table.items():
            if name not in entries:
                added.append(f"{json.dumps(name)}:{_rendered(value, indent, unit)}")
                continue
            start, stop = entries[name]
            old = parse_text(text[start:stop])
            if old == value:
                continue
            if not (isinstance(old, dict) and isinstance(value, dict) and old.keys() == value.keys()):
                edits.append((start, stop, _rendered(value, indent, unit)))
                continue
            fields, _ = members(text, start)
            edits += [(*fields[f], json.dumps(v, separators=(",", ":")))
                      for f, v in value.items() if old[f] != v]
        edits += _after_last(entries, close, indent, added)
        edits += _version_edits(text, top, version)
    except (ValueError, IndexError):
        return None
    return _applied(text, edits)
