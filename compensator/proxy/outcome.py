"""What undo needs to know of a downstream call, without the MCP SDK: whether it worked and
what it returned, the caller type that sends compensating calls, and the state a read saw.
(`compensator undo` plans from the journal with these alone, before it starts any server.)"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["CallOutcome", "Caller", "observed_state"]


@dataclass(frozen=True, kw_only=True)
class CallOutcome:
    """A downstream call reduced to what undo needs: did it work, and its parsed result.

    `in_doubt` marks a failure after which the call may still have applied (no answer came);
    `error_when` is the registry's condition that judged an answer a failure, when one did."""

    ok: bool
    value: Any = None
    error: str | None = None
    in_doubt: bool = False
    error_when: str | None = None


Caller = Callable[[str, dict[str, Any]], Awaitable[CallOutcome]]
"""Calls a downstream tool by its exposed name; never raises for a failed call."""


def observed_state(outcome: CallOutcome) -> Any:
    """What a state read saw, for the drift check; None when the read itself failed.

    An error answer is a state too (after a delete, "not found" is what should be seen), so it
    is kept, marked; only a read that got no answer at all says nothing."""
    if outcome.ok:
        return {"content": outcome.value}
    if outcome.value is None:
        return None
    return {"isError": True, "content": outcome.value}
