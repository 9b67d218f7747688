"""The exception hierarchy: one root, and messages that name the offender and the fix."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "CompensatorError",
    "DownstreamError",
    "ExpressionError",
    "JournalError",
    "MetaArgumentError",
    "RegistryError",
    "did_you_mean",
]


def did_you_mean(name: str, choices: Iterable[str], fallback: str, *, prefix: str = "") -> str:
    """The fix for a misspelt `name`: "Did you mean '<prefix><closest choice>'?", or
    `fallback` when no choice is close."""
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f"Did you mean '{prefix}{close[0]}'?" if close else fallback


class CompensatorError(Exception):
    """Root of every error this package raises on purpose."""


class RegistryError(CompensatorError, ValueError):
    """A registry file is wrong; the message names file, line, key and the fix."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        key: str | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message)
        self.path = path
        self.line = line
        self.key = key
        self.fix = fix


class ExpressionError(CompensatorError, ValueError):
    """A template expression does not parse, or refers outside its context."""

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        where: str | None = None,
        detail: str | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message)
        self.source = source
        self.where = where
        self.detail = detail
        self.fix = fix


class JournalError(CompensatorError, RuntimeError):
    """The journal database cannot be opened, migrated or written."""


class DownstreamError(CompensatorError, RuntimeError):
    """A downstream server failed to start, or a call to it failed in transport.

    `maybe_applied` is True when the request may have reached the server (a timeout, the
    server dying mid-call, a cancellation): the call's effect is then in doubt. False means it
    was never sent, so nothing happened, unless `answered` is True: the server answered with a
    JSON-RPC error, which is its way of saying the call failed, like an isError result.
    """

    def __init__(
        self, message: str, *, maybe_applied: bool = False, answered: bool = False
    ) -> None:
        super().__init__(message)
        self.maybe_applied = maybe_applied
        self.answered = answered


class MetaArgumentError(CompensatorError, ValueError):
    """A meta tool was called with an argument it cannot accept."""
