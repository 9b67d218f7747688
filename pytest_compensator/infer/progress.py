"""The running count of a check under way: examples done of how many, and seconds, as a bar
redrawn in place on a terminal and as plain lines (one per quarter) anywhere else."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["Ticker"]

BAR_WIDTH = 24
QUARTERS = 4


class Ticker:
    """Counts the examples of one check at a time. `begin` names the check and its total,
    `tick` counts one example, `end` closes it. A check that runs past its total is
    replaying a failure to shrink it, and says so instead of a count over 100%."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        prefix: str = "infer: ",
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = tty if tty is not None else _isatty(self.stream)
        self.clock = clock
        self.prefix = prefix
        self.label = ""
        self.total = 0
        self.done = 0
        self.began = 0.0
        self._quarter = 0
        self._drawn = False

    def begin(self, label: str, total: int) -> None:
        self.end()
        self.label, self.total, self.done = label, max(total, 1), 0
        self.began = self.clock()
        self._quarter = 0

    def tick(self) -> None:
        if not self.label:
            return
        self.done += 1
        if self.tty:
            self._draw()
            return
        quarter = min(self.done * QUARTERS // self.total, QUARTERS)
        if quarter > self._quarter and self.done <= self.total:
            self._quarter = quarter
            self._line(self._count())

    def end(self) -> None:
        self.clear()
        self.label = ""

    def clear(self) -> None:
        """Wipe the bar, so that a line printed now starts at the left; the next tick draws
        it again below that line."""
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False

    def _count(self) -> str:
        seconds = self.clock() - self.began
        if self.done > self.total:
            return f"{self.label}: {self.done} examples, {seconds:.0f} s (shrinking a failure)"
        return f"{self.label}: {self.done}/{self.total} examples, {seconds:.0f} s"

    def _draw(self) -> None:
        filled = min(self.done, self.total) * BAR_WIDTH // self.total
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        self.stream.write(f"\r\x1b[K{self.prefix}[{bar}] {self._count()}")
        self.stream.flush()
        self._drawn = True

    def _line(self, text: str) -> None:
        self.stream.write(f"{self.prefix}{text}\n")
        self.stream.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False
