"""When the proxy takes a checkpoint by itself: before a session's first mutating call, and
before the first mutating call after a quiet spell (close to one per agent turn)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..registry import AutoCheckpoints

__all__ = ["SESSION_START", "Turns", "idle_label"]

SESSION_START = "session start"
"""The label of the checkpoint before a session's first mutating call."""


def idle_label(seconds: float) -> str:
    """The label of a checkpoint taken after `seconds` without calls: `after 300 s idle`."""
    return f"after {seconds:g} s idle"


class Turns:
    """Watches the tool calls of one proxy session and says when a mutating call should have
    a checkpoint of its own taken just before it.

    Quiet means no tool call at all (reads and meta tools count) was running or arrived; it is
    measured from the end of the last call, or from the start of the session."""

    def __init__(
        self, settings: AutoCheckpoints, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._running = 0
        self._last = clock()
        self._mutated = False

    @contextmanager
    def call(self) -> Iterator[float | None]:
        """Around every tool call; yields the seconds the proxy was quiet before it (None when
        another call was running)."""
        quiet = None if self._running else self._clock() - self._last
        self._running += 1
        try:
            yield quiet
        finally:
            self._running -= 1
            self._last = self._clock()

    def checkpoint_before(self, quiet: float | None) -> str | None:
        """The label of the checkpoint to take before this mutating call, or None. Called once
        per mutating call, before anything of it is journaled."""
        first, self._mutated = not self._mutated, True
        if first and self._settings.on_session_start:
            return SESSION_START
        after = self._settings.after_idle
        if after is not None and quiet is not None and quiet >= after:
            return idle_label(after)
        return None
