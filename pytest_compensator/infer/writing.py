"""The registry infer writes: the person's file as it was, with the proven entries (each with
its evidence) and the unclassified tools (as comments saying what was tried) added at the end
of its `tools:` section; checked to parse, with every earlier entry intact, before it is
written."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from compensator.errors import CompensatorError
from compensator.registry.yamlnodes import load_with_lines

__all__ = [
    "InferError",
    "add_to_state",
    "add_to_tools",
    "comment_lines",
    "entry_lines",
    "verify_result",
]

_TOOLS = re.compile(r"^tools:(?P<rest>[^\r\n]*)(?=\r?\n|\Z)", re.MULTILINE)
_EMPTY = ("", "{}", "~", "null")


class InferError(CompensatorError, ValueError):
    """infer cannot run or cannot write its result."""


def add_to_tools(text: str, block: Sequence[str], *, path: str) -> str:
    """`text` with `block` (lines indented by two under `tools:`) after the last entry of its
    `tools:` section, indented as that section is; a `tools:` section is added when the file
    has none. Everything else stays as written, comments included."""
    if not block:
        return text
    newline = "\r\n" if "\r\n" in text else "\n"
    match = _TOOLS.search(text)
    if match is None:
        section = "".join(f"{line}{newline}" for line in block)
        return text.rstrip("\r\n") + f"{newline}{newline}tools:{newline}" + section
    value, _, comment = match.group("rest").partition("#")
    if value.strip() not in _EMPTY:
        raise InferError(
            f"{path}: `tools:` is written in flow style ({value.strip()[:40]}); infer adds "
            "entries to a block mapping. Fix: write each entry on its own lines under `tools:`."
        )
    if value.strip():  # `tools: {}` or `tools: ~`: a mapping from now on
        head = "tools:" + (f"  #{comment}" if comment else "")
        text = text[: match.start()] + head + text[match.end() :]
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("tools:"))
    last, indent = start, "  "
    for index in range(start + 1, len(lines)):
        line = lines[index]
        if line.strip() and not line[0].isspace():
            if line.lstrip().startswith("#"):
                continue  # a comment at the margin may introduce the next section
            break
        if line.strip() and not line.lstrip().startswith("#"):
            if last == start:
                indent = line[: len(line) - len(line.lstrip())]
            last = index
        elif line.strip() and last != start:
            last = index  # a comment inside the section, after an entry
    if not lines[last].endswith(("\n", "\r")):
        lines[last] += newline
    extra = indent[2:] if len(indent) >= 2 else ""
    spacer = [newline] if last != start else []
    added = [f"{extra}{line}{newline}" for line in block]
    return "".join(lines[: last + 1] + spacer + added + lines[last + 1 :])


_STATE = re.compile(r"^state:(?P<rest>[^\r\n]*)(?=\r?\n|\Z)", re.MULTILINE)


def add_to_state(text: str, probes: Sequence[Mapping[str, Any]], *, path: str) -> str:
    """`text` with the state probes infer chose at the end of its `state:` list, or in a new
    `state:` section before `tools:` (at the end when there is none), with a comment saying
    where they come from."""
    newline = "\r\n" if "\r\n" in text else "\n"
    dumped = yaml.safe_dump(list(probes), sort_keys=False, width=96, default_flow_style=None)
    intro = "# chosen by compensator infer: reads whose results show what the writes do"
    items = [f"  {intro}", *(f"  {line}" for line in dumped.splitlines())]
    match = _STATE.search(text)
    if match is not None:
        value = match.group("rest").partition("#")[0].strip()
        if value and value not in ("[]", "~", "null"):
            raise InferError(
                f"{path}: `state:` is written in flow style ({value[:40]}); infer adds probes "
                "to a block list. Fix: write each probe on its own lines under `state:`."
            )
        if value:
            text = text[: match.start()] + "state:" + text[match.end() :]
        lines = text.splitlines(keepends=True)
        start = next(i for i, line in enumerate(lines) if line.startswith("state:"))
        last = start
        for index in range(start + 1, len(lines)):
            line = lines[index]
            if line.strip() and not line[0].isspace() and not line.startswith("-"):
                if line.lstrip().startswith("#"):
                    continue
                break
            if line.strip():
                last = index
        if not lines[last].endswith(("\n", "\r")):
            lines[last] += newline
        added = [f"{line}{newline}" for line in items]
        return "".join(lines[: last + 1] + added + lines[last + 1 :])
    section = [f"state:{newline}", *(f"{line}{newline}" for line in items), newline]
    tools = _TOOLS.search(text)
    if tools is None:
        return text.rstrip("\r\n") + newline + newline + "".join(section)
    return text[: tools.start()] + "".join(section) + text[tools.start() :]


def verify_result(
    original: str, text: str, added: Mapping[str, Any], *, path: str, bug: bool = True
) -> None:
    """The written text must parse as the registry loader parses (duplicate keys refused),
    keep every top-level key and entry the original had as it was, and hold the added
    entries as they were proven."""
    try:
        before = load_with_lines(original, path)[0] or {}
        after = load_with_lines(text, path)[0] or {}
    except CompensatorError as exc:
        raise InferError(f"{path}: the result would not load ({exc})") from None
    old_tools: Mapping[str, Any] = before.get("tools") or {}
    new_tools: Mapping[str, Any] = after.get("tools") or {}
    lost = [k for k in before if k != "tools" and before[k] != after.get(k)]
    lost += [f"tools.{t}" for t, entry in old_tools.items() if new_tools.get(t) != entry]
    missing = [f"tools.{t}" for t, entry in added.items() if new_tools.get(t) != entry]
    if (lost or missing) and not bug:
        raise InferError(
            f"{path}: infer cannot add entries to this file's `tools:` section (it would "
            f"change {', '.join(lost) or 'nothing'}). Fix: write `tools:` as a block mapping "
            "at the margin, each entry on its own lines, indented by two or more spaces."
        )
    if lost or missing:
        raise InferError(
            f"{path}: adding to the file would change {', '.join(lost) or 'nothing'} and "
            f"leave out {', '.join(missing) or 'nothing'}; this is a bug in infer, please "
            "report it"
        )


def _printable(text: str) -> str:
    """Characters YAML refuses even in a comment (control characters, from server errors
    that echo their input), escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def entry_lines(tool: str, entry: Mapping[str, Any], evidence: Sequence[str]) -> list[str]:
    """An entry under `tools:`, with its evidence as comments above it."""
    dumped = yaml.safe_dump(
        {tool: dict(entry)}, sort_keys=False, default_flow_style=None, width=96, allow_unicode=True
    )
    return comment_lines(evidence) + [f"  {line}" for line in dumped.splitlines()]


def comment_lines(lines: Sequence[str]) -> list[str]:
    """Lines commented out under `tools:` (long ones kept whole: they are read, not parsed)."""
    return [f"  # {_printable(line)}".rstrip() for line in lines]
