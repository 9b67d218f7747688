"""Terminal output: when to colour, tables that fit the width, a y/N question, and the logging
and options every subcommand shares."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

__all__ = [
    "Cell",
    "Column",
    "Rule",
    "Styler",
    "confirm",
    "render_table",
    "terminal_width",
    "truncate",
    "wants_colour",
    "wrap",
]

_CODES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}
_GAP = "  "


def wants_colour(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set to anything (no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def terminal_width(default: int = 100) -> int:
    """$COLUMNS, else the terminal's width, else `default` (output to a pipe or file)."""
    return shutil.get_terminal_size((default, 24)).columns


@dataclass(frozen=True, kw_only=True)
class Styler:
    """Wraps text in ANSI codes when enabled; a no-op otherwise, so callers never branch."""

    enabled: bool

    @classmethod
    def for_stream(cls, stream: TextIO) -> Styler:
        return cls(enabled=wants_colour(stream))

    def __call__(self, text: str, *styles: str | None) -> str:
        codes = [_CODES[style] for style in styles if style]
        if not self.enabled or not codes or not text:
            return text
        return f"\x1b[{';'.join(codes)}m{text}\x1b[0m"


def truncate(text: str, width: int) -> str:
    """`text` on one line, cut to `width` characters with an ellipsis when longer."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    return flat[: max(width - 1, 0)] + "…"


def wrap(text: str, width: int) -> list[str]:
    """`text` wrapped to `width`; its own line breaks are kept; words longer than it are cut."""
    lines: list[str] = []
    for paragraph in text.splitlines() or [""]:
        lines.extend(textwrap.wrap(paragraph, width=max(width, 1), break_on_hyphens=False) or [""])
    return lines


@dataclass(frozen=True, kw_only=True)
class Column:
    """A table column. `overflow` is what a too-wide cell does: keep, truncate or wrap; a
    column that truncates or wraps keeps at least `min_width` (or its header's width)."""

    header: str
    overflow: str = "keep"
    min_width: int = 8
    style: str | None = None


@dataclass(frozen=True, kw_only=True)
class Cell:
    """A cell whose style or overflow differs from its column's."""

    text: str
    style: str | None = None
    overflow: str | None = None


@dataclass(frozen=True, kw_only=True)
class Rule:
    """A line of its own across the table, e.g. a separator between groups of rows."""

    text: str
    style: str | None = None


Row = Sequence["str | Cell"]


def render_table(
    columns: Sequence[Column],
    rows: Sequence[Row | Rule],
    *,
    width: int,
    style: Styler | None = None,
) -> list[str]:
    """The header and rows as lines no wider than `width` (when the kept columns allow).

    Columns that truncate or wrap give up width, the rightmost first, when the table would
    be wider than `width`; colour is applied after padding, so alignment never shifts."""
    paint = style or Styler(enabled=False)
    cells = [[_cell(value) for value in row] for row in rows if not isinstance(row, Rule)]
    widths = _fit(columns, cells, width)
    lines = [paint(_join([c.header for c in columns], widths), "bold")]
    for row in rows:
        if isinstance(row, Rule):
            lines.append(paint(truncate(row.text, width), row.style))
        else:
            lines.extend(_render_row(columns, [_cell(v) for v in row], widths, paint))
    return lines


def _cell(value: str | Cell) -> Cell:
    return value if isinstance(value, Cell) else Cell(text=value)


def _fit(columns: Sequence[Column], rows: list[list[Cell]], width: int) -> list[int]:
    natural = [
        max([len(column.header), *(_longest(row[i].text) for row in rows)])
        for i, column in enumerate(columns)
    ]
    excess = sum(natural) + len(_GAP) * (len(columns) - 1) - width
    for i in reversed(range(len(columns))):
        if excess <= 0:
            break
        if columns[i].overflow == "keep":
            continue
        floor = max(columns[i].min_width, len(columns[i].header))
        give = min(excess, max(natural[i] - floor, 0))
        natural[i] -= give
        excess -= give
    return natural


def _longest(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def _render_row(
    columns: Sequence[Column], row: list[Cell], widths: list[int], paint: Styler
) -> list[str]:
    parts = [
        _lines(cell.overflow or column.overflow, cell.text, w)
        for column, cell, w in zip(columns, row, widths, strict=True)
    ]
    styles = [cell.style or column.style for column, cell in zip(columns, row, strict=True)]
    lines = []
    for index in range(max(len(part) for part in parts)):
        texts = [part[index] if index < len(part) else "" for part in parts]
        # Pad outside the colour codes, so they never count towards the width.
        pieces = [
            paint(t, s) + " " * (w - len(t)) for t, s, w in zip(texts, styles, widths, strict=True)
        ]
        lines.append(_GAP.join(pieces).rstrip())
    return lines


def _lines(overflow: str, text: str, width: int) -> list[str]:
    if overflow == "wrap":
        return wrap(text, width)
    if overflow == "truncate":
        return [truncate(line, width) for line in text.splitlines() or [""]]
    return text.splitlines() or [""]


def _join(texts: Sequence[str], widths: Sequence[int]) -> str:
    return _GAP.join(text.ljust(width) for text, width in zip(texts, widths, strict=True)).rstrip()


def confirm(question: str, *, stdin: TextIO | None = None, stdout: TextIO | None = None) -> bool:
    """Ask `question [y/N]`; only y or yes (any case) is a yes, end of input is a no."""
    out, given = stdout or sys.stdout, stdin or sys.stdin
    out.write(f"{question} [y/N] ")
    out.flush()
    answer = given.readline()
    if not answer:
        out.write("\n")
    return answer.strip().lower() in ("y", "yes")


LOG_FORMAT = "compensator %(levelname)s %(name)s: %(message)s"


def log_to_stderr(level: int | str = logging.WARNING) -> None:
    """Every subcommand logs to stderr in one format; stdout is for its output (or the wire)."""
    logging.basicConfig(stream=sys.stderr, level=level, format=LOG_FORMAT)


def add_startup_timeout(parser: argparse.ArgumentParser, default: float, what: str) -> None:
    """`--startup-timeout SECONDS` for the subcommands that start the registry's servers."""
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=default,
        metavar="SECONDS",
        help=f"how long each server gets to {what} (default {default:g})",
    )
