"""Turn a tool result in MCP wire form (plain dicts) into one value for expressions."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["parse_result", "result_text"]


def parse_result(
    structured: Any, content: Sequence[Mapping[str, Any]] | None, *, plain_text: bool = False
) -> Any:
    """`structured` if given; else the text blocks parsed as JSON, else as a string, else None.
    With `plain_text` (a registry's `plain_text: true`), the text blocks joined, as sent."""
    if plain_text:
        return result_text(content)
    if structured is not None:
        return structured
    texts = _texts(content)
    if not texts:
        return None
    text = "\n".join(texts)
    try:
        return json.loads(text)
    except ValueError:
        return text


def result_text(content: Sequence[Mapping[str, Any]] | None) -> str:
    """The text blocks of `content` joined by newlines; "" when there are none."""
    return "\n".join(_texts(content))


def _texts(content: Sequence[Mapping[str, Any]] | None) -> list[str]:
    blocks = content or ()
    return [b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str)]
