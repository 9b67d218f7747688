"""The registry infer writes: the person's file as it was, with the proven entries (each with
its evidence) and the unclassified tools (as comments saying what was tried) added to its
`tools:` section."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from compensator.errors import CompensatorError

__all__ = ["InferError", "add_to_tools", "comment_lines", "entry_lines"]

_TOOLS = re.compile(r"^tools:[ \t]*(?P<rest>[^#\n]*?)[ \t]*(?:#.*)?$", re.MULTILINE)
_TOP_LEVEL = re.compile(r"^[^\s#]", re.MULTILINE)


class InferError(CompensatorError, ValueError):
    """infer cannot run or cannot write its result."""


def add_to_tools(text: str, block: Sequence[str], *, path: str) -> str:
    """`text` with `block` (lines indented under `tools:`) at the end of its `tools:`
    section, which is added when the file has none. Everything else stays as written."""
    if not block:
        return text
    added = "".join(f"{line}\n" for line in block)
    match = _TOOLS.search(text)
    if match is None:
        return text.rstrip("\n") + "\n\ntools:\n" + added
    rest = match.group("rest")
    if rest not in ("", "{}"):
        raise InferError(
            f"{path}: `tools:` is written in flow style ({rest[:40]}...); infer adds entries "
            "to a block mapping. Fix: write each entry on its own lines under `tools:`."
        )
    head = text[: match.start()] + "tools:" + text[match.end() :]
    start = match.start() + len("tools:")
    following = _TOP_LEVEL.search(head, start + 1)
    end = following.start() if following else len(head)
    section = head[start:end].rstrip("\n")
    tail = head[end:]
    joined = head[:start] + section + "\n" + ("\n" if section.strip() else "") + added
    return joined + ("\n" + tail if tail else "")


def entry_lines(tool: str, entry: Mapping[str, Any], evidence: Sequence[str]) -> list[str]:
    """An entry under `tools:`, with its evidence as comments above it."""
    dumped = yaml.safe_dump(
        {tool: dict(entry)}, sort_keys=False, default_flow_style=None, width=96, allow_unicode=True
    )
    return [f"  # {line}" for line in evidence] + [f"  {line}" for line in dumped.splitlines()]


def comment_lines(lines: Sequence[str]) -> list[str]:
    """Lines commented out under `tools:` (long ones kept whole: they are read, not parsed)."""
    return [f"  # {line}".rstrip() for line in lines]
