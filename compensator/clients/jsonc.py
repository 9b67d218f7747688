"""JSON with comments and trailing commas (VS Code's JSONC), read so that the text of any one
value can be replaced and every other byte of the file kept.

Hand-written on purpose: json5 and commentjson parse JSONC, but neither says where a value
stands in the text, and `compensator wire` must edit one object of a user's file and leave
its comments, key order and formatting alone. The trick is small: comments and trailing
commas are blanked to spaces (offsets unchanged), the standard json module does the rest.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..errors import CompensatorError

__all__ = ["ConfigFileError", "blank", "loads", "span"]

_DECODER = json.JSONDecoder()
_SPACE = " \t\r\n"


class ConfigFileError(CompensatorError, ValueError):
    """A client configuration file that cannot be read or used; the message names it."""


def blank(text: str) -> str:
    """`text` with `//` and `/* */` comments and trailing commas replaced by spaces (newlines
    kept), so that it parses as JSON and every offset still points at the same character."""
    out = list(text)
    i, n = 0, len(text)
    last_comma: int | None = None  # a comma followed so far only by space or comments
    while i < n:
        c = text[i]
        if c == '"':
            i = _string_end(text, i)
            last_comma = None
            continue
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out[i:end] = " " * (end - i)
            i = end
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise ValueError(f"a /* comment that never ends (offset {i})")
            out[i : end + 2] = [ch if ch == "\n" else " " for ch in text[i : end + 2]]
            i = end + 2
            continue
        if c in "]}" and last_comma is not None:
            out[last_comma] = " "
        if c == ",":
            last_comma = i
        elif c not in _SPACE:
            last_comma = None
        i += 1
    return "".join(out)


def _string_end(text: str, start: int) -> int:
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == '"':
            return i + 1
        else:
            i += 1
    raise ValueError(f"a string that never ends (offset {start})")


def loads(text: str) -> Any:
    """Parse JSONC. Raises ValueError (json.JSONDecodeError has the line and column)."""
    return json.loads(blank(text))


def span(text: str, path: Sequence[str]) -> tuple[int, int] | None:
    """Where the value at `path` (object keys from the top) stands in `text`: (start, end)
    offsets, or None when some key on the way is missing. `text` must parse (see `loads`)."""
    clean = blank(text)
    start = _skip(clean, 0)
    end = _DECODER.raw_decode(clean, start)[1]
    for key in path:
        found = _member(clean, start, key)
        if found is None:
            return None
        start, end = found
    return start, end


def _member(clean: str, start: int, key: str) -> tuple[int, int] | None:
    """The span of member `key` of the object starting at `start` (the last one, as json
    keeps the last of duplicate keys), or None."""
    if clean[start] != "{":
        return None
    found = None
    i = _skip(clean, start + 1)
    while clean[i] != "}":
        name, i = _DECODER.raw_decode(clean, i)
        i = _skip(clean, i) + 1  # the colon
        value_start = _skip(clean, i)
        value_end = _DECODER.raw_decode(clean, value_start)[1]
        if name == key:
            found = (value_start, value_end)
        i = _skip(clean, value_end)
        if clean[i] == ",":
            i = _skip(clean, i + 1)
    return found


def _skip(clean: str, i: int) -> int:
    while i < len(clean) and clean[i] in _SPACE:
        i += 1
    return i
