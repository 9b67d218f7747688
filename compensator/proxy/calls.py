"""A downstream call as the proxy judges it: how the registry classifies it, whether it
worked, and the caller that undo sends its compensating calls through."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ..classification import Classification
from ..errors import CompensatorError, DownstreamError
from ..registry import Expression, Registry
from ..wire import DownstreamPool, parse_result, result_text, sdk
from .outcome import Caller, CallOutcome, observed_state

__all__ = [
    "CallOutcome",
    "Caller",
    "call_outcome",
    "classify",
    "observed_state",
    "undo_caller",
]

log = logging.getLogger(__name__)


def classify(
    registry: Registry,
    pool: DownstreamPool,
    name: str,
    arguments: Mapping[str, Any] | None = None,
) -> Classification:
    """How a call to `name` with `arguments` is treated; `arguments=None` ignores
    `mutating_when` (the tool's classification in general)."""
    policy = registry.policy(name)
    if policy is None:
        routed = pool.route(name)
        hint = routed is not None and routed.annotations.get("readOnlyHint") is True
        if hint and registry.defaults.trust_read_only_hint:
            return Classification.READ
        return Classification.UNKNOWN
    gate = policy.mutating_when
    # When the condition cannot be evaluated, journaling is the safe side.
    if gate is not None and arguments is not None:
        mutating = _holds(gate, {"args": arguments}, default=True)
        return policy.classification if mutating else Classification.READ
    return policy.classification


def call_outcome(
    registry: Registry, name: str, arguments: Mapping[str, Any], result: sdk.ToolResult
) -> CallOutcome:
    """Parse a result and decide whether the call worked (isError, then `error_when`)."""
    structured, content, is_error = sdk.result_parts(result)
    policy = registry.policy(name)
    value = parse_result(structured, content, plain_text=policy is not None and policy.plain_text)
    if is_error:
        return CallOutcome(ok=False, value=value, error=result_text(content) or "isError")
    failed = policy.error_when if policy is not None else None
    # A condition that cannot be evaluated counts the call as done, so it stays undoable.
    context = {"result": value, "args": dict(arguments)}
    if failed is not None and _holds(failed, context, default=False):
        error = _error_text(value, content)
        return CallOutcome(ok=False, value=value, error=error, error_when=failed.source)
    return CallOutcome(ok=True, value=value)


def undo_caller(registry: Registry, pool: DownstreamPool) -> Caller:
    """The `Caller` an `Undoer` gets: a transport failure is a failed outcome, never raised."""

    async def call(name: str, arguments: dict[str, Any]) -> CallOutcome:
        try:
            result = await pool.call(name, arguments)
        except DownstreamError as exc:
            return CallOutcome(ok=False, error=str(exc), in_doubt=exc.maybe_applied)
        return call_outcome(registry, name, arguments, result)

    return call


def _holds(condition: Expression, context: Mapping[str, Any], *, default: bool) -> bool:
    try:
        return condition.truthy(context)
    except CompensatorError as exc:
        log.warning("%s; taking it as %s", exc, default)
        return default


def _error_text(value: Any, content: Sequence[Mapping[str, Any]]) -> str:
    if isinstance(value, Mapping):
        for key in ("error", "message"):
            if isinstance(value.get(key), str):
                return str(value[key])
    return result_text(content) or "error_when matched the result"
