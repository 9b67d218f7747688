"""Observed state: run a registry's `state:` probes and compare what they saw."""

from __future__ import annotations

import difflib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from compensator.errors import CompensatorError
from compensator.registry import Registry, StateProbe

__all__ = ["NoStateProbes", "ProbeFailed", "diff_states", "observe_state", "state_labels"]

Caller = Callable[[str, Mapping[str, Any]], Awaitable[Any]]
"""Calls a tool and returns (is_error, parsed value, text)."""


class NoStateProbes(CompensatorError, ValueError):
    """The registry has no `state:` section, so there is nothing to compare."""


class ProbeFailed(CompensatorError, RuntimeError):
    """A state probe's read call failed."""


_NO_STATE = (
    "{path} has no `state:` section, so undo cannot be checked. Add read calls that show "
    "what the mutating tools change, e.g.\n"
    "state:\n"
    "  - tool: server__list_things\n"
    "    select: items        # optional JMESPath over the parsed result\n"
    "    unordered: true      # compare lists as multisets"
)


_LABEL_ARGS = 80  # characters of a repeated probe's arguments shown in its label


def state_labels(probes: Sequence[StateProbe]) -> list[str]:
    """One readable, unique label per probe: the tool name, with its arguments when several
    probes call the same tool (`read_query {"query": "SELECT * FROM t1"}`)."""
    repeated = {p.tool for p in probes if sum(q.tool == p.tool for q in probes) > 1}
    labels: list[str] = []
    for probe in probes:
        label = probe.tool
        if probe.tool in repeated:
            args = json.dumps(probe.args.render({}), sort_keys=True, ensure_ascii=False)
            label = f"{probe.tool} {args[:_LABEL_ARGS]}"
        while label in labels:
            label = f"{label}#{len(labels)}"
        labels.append(label)
    return labels


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _normalise(probe: StateProbe, value: Any) -> Any:
    if probe.select is not None:
        value = probe.select.evaluate(value)
    if probe.unordered and isinstance(value, list):
        value = sorted(value, key=canonical)
    return value


async def observe_state(registry: Registry, call: Caller) -> dict[str, Any]:
    """Run every probe; `call(tool, args)` returns a ToolReply-like object."""
    if not registry.state:
        raise NoStateProbes(_NO_STATE.format(path=registry.path))
    observed: dict[str, Any] = {}
    for label, probe in zip(state_labels(registry.state), registry.state, strict=True):
        reply = await call(probe.tool, probe.args.render({}))
        if reply.is_error:
            raise ProbeFailed(f"state probe {probe.tool} failed: {reply.text}")
        observed[label] = _normalise(probe, reply.value)
    return observed


def diff_states(expected: Any, observed: Any) -> str:
    """A unified diff of two observed states, as indented JSON."""
    lines_a = json.dumps(expected, indent=2, sort_keys=True, default=str).splitlines()
    lines_b = json.dumps(observed, indent=2, sort_keys=True, default=str).splitlines()
    diff = difflib.unified_diff(lines_a, lines_b, "expected", "observed", lineterm="", n=2)
    return "\n".join(diff)
