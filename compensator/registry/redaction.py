"""Redaction: the `redact:` paths of a policy, and the copies of args and results made with the
values at those paths replaced, before anything is journaled."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from typing import Any

from .model import RedactPath

__all__ = ["REDACTED", "parse_redact_path", "redact"]

REDACTED = "[redacted]"

_STEP = re.compile(r"\.?([A-Za-z_][A-Za-z0-9_]*)|\[(\*|\d+)\]")


def parse_redact_path(text: str) -> RedactPath | None:
    """`result.items[*].token` -> a path rooted at args or result; None when `text` is not
    such a path (malformed, another root, or the root alone)."""
    parts: list[str | int] = []
    position = 0
    while position < len(text):
        match = _STEP.match(text, position)
        if match is None or (position == 0) != (text[position] not in ".["):
            return None
        name, index = match.groups()
        parts.append(name if name is not None else ("*" if index == "*" else int(index)))
        position = match.end()
    if len(parts) < 2 or parts[0] not in ("args", "result"):
        return None
    return RedactPath(source=text, root=str(parts[0]), parts=tuple(parts[1:]))


def redact(value: Any, root: str, paths: Iterable[RedactPath]) -> Any:
    """A copy of `value` (the call's `root`: args or result) with every value at `paths`
    replaced by REDACTED; `value` itself is left untouched."""
    chosen = [path.parts for path in paths if path.root == root]
    if not chosen:
        return value
    cleaned = copy.deepcopy(value)
    for parts in chosen:
        cleaned = _replace(cleaned, parts)
    return cleaned


def _replace(node: Any, parts: tuple[str | int, ...]) -> Any:
    if not parts:
        return REDACTED
    head, rest = parts[0], parts[1:]
    if head == "*":
        if isinstance(node, list):
            return [_replace(item, rest) for item in node]
        return node
    if isinstance(head, int):
        if isinstance(node, list) and -len(node) <= head < len(node):
            node[head] = _replace(node[head], rest)
        return node
    if isinstance(node, dict) and head in node:
        node[head] = _replace(node[head], rest)
    return node
