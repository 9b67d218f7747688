"""Redaction: values a registry marks secret are replaced before anything is journaled."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from .registry import RedactPath

__all__ = ["REDACTED", "redact"]

REDACTED = "[redacted]"


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
