"""The gate between mutating calls and undo: calls share it, an undo holds it alone."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

__all__ = ["Gate"]


class Gate:
    """Mutating calls share the gate; an undo holds it alone, so they wait for each other.

    Everything runs on one event loop, so the state is plain counters: a mutating call that
    finds the gate open enters without awaiting anything (an anyio.Condition would cost two
    trips through the loop per call); waiters sleep on an event set at each change."""

    def __init__(self) -> None:
        self._active = 0
        self._exclusive = False
        self._waiting = 0
        self._changed = anyio.Event()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    @asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        while self._exclusive or self._waiting:
            await self._changed.wait()
        self._active += 1
        try:
            yield
        finally:
            self._active -= 1
            if not self._active:
                self._notify()

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        self._waiting += 1
        try:
            while self._exclusive or self._active:
                await self._changed.wait()
        finally:
            self._waiting -= 1
            if not self._waiting:
                self._notify()  # mutating calls held back by this waiter may go (or re-check)
        self._exclusive = True
        try:
            yield
        finally:
            self._exclusive = False
            self._notify()
