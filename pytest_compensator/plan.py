"""What the generated checks call: the undoable tools, the state builders, the reads, the
argument strategies, worked out once per test from the tools the servers offer."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from compensator.names import META_TOOLS
from compensator.registry import Registry
from compensator.wire import sdk

from .harness import Harness
from .strategies import arguments

__all__ = ["Plan", "checked_reads", "exercised_tools", "left_out", "state_builders"]


def exercised_tools(registry: Registry, offered: Iterable[str] | None = None) -> list[str]:
    """The registered tools the generated checks call, as their classification says, sorted;
    only those a server really offers when `offered` is given."""
    known = None if offered is None else set(offered)
    return sorted(
        name
        for name, policy in registry.tools.items()
        if policy.classification.behaviour.exercised and (known is None or name in known)
    )


def state_builders(registry: Registry, tools: list[str]) -> list[str]:
    """The tools among `tools` that building a pre-state prefers (see `Behaviour`)."""
    return [t for t in tools if registry.tools[t].classification.behaviour.builds_state]


def checked_reads(harness: Harness) -> list[str]:
    """The offered tools the proxy forwards without journaling, sorted: those classified
    `read`, and unregistered ones annotated readOnlyHint when `trust_read_only_hint` is on.
    The checks call them and require that the state stays as it was."""
    registry = harness.registry
    reads = []
    for name, tool in harness.tools.items():
        policy = registry.policy(name)
        if name in META_TOOLS:
            continue
        if policy is not None:
            if not policy.classification.behaviour.journaled:
                reads.append(name)
        elif registry.defaults.trust_read_only_hint and _read_only_hint(tool):
            reads.append(name)
    return sorted(reads)


def _read_only_hint(tool: Any) -> bool:
    annotations = sdk.tool_to_wire(tool).get("annotations") or {}
    return annotations.get("readOnlyHint") is True


def left_out(harness: Harness) -> dict[str, str]:
    """Tools the generated checks do not call, with the reason."""
    reads = set(checked_reads(harness))
    out: dict[str, str] = {}
    for name, policy in harness.registry.tools.items():
        if name in reads:
            continue
        if not policy.classification.behaviour.exercised:
            out[name] = policy.classification.value
        elif name not in harness.tools:
            out[name] = "no server offers it"
    for name in harness.tools:
        unregistered = harness.registry.policy(name) is None and name not in META_TOOLS
        if unregistered and name not in reads:
            out[name] = "unknown: not in the registry"
    return out


@dataclass(frozen=True)
class Plan:
    """What the generated checks call, worked out once per test from the offered tools."""

    tools: Sequence[str]  # the undoable tools
    builders: Sequence[str]  # those preferred when building a pre-state
    reads: Sequence[str]  # called only to check that they change nothing
    strategies: Mapping[str, st.SearchStrategy]
    free_text: Mapping[str, frozenset[str]]  # string arguments that may take seen values

    @classmethod
    def of(cls, harness: Harness, also: Iterable[str] = ()) -> Plan:
        tools = exercised_tools(harness.registry, harness.tools)
        reads = checked_reads(harness)
        called = sorted({*tools, *reads, *also})
        return cls(
            tools=tools,
            builders=state_builders(harness.registry, tools),
            reads=reads,
            strategies={
                tool: arguments(tool, harness.input_schema(tool), harness.registry.policy(tool))
                for tool in called
            },
            free_text={tool: _free_text(harness, tool) for tool in called},
        )


def _free_text(harness: Harness, tool: str) -> frozenset[str]:
    """Arguments declared as plain strings (names, paths, keys), which may be drawn from the
    strings earlier results and states showed, so that calls meet what exists: in the
    registry's `test.schema` when the tool has one (an enum or pattern there is its author's
    choice of values, and stays so), else in the inputSchema."""
    policy = harness.registry.policy(tool)
    schema: Mapping[str, Any] = harness.input_schema(tool)
    if policy is not None and policy.test is not None and policy.test.schema is not None:
        schema = policy.test.schema
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return frozenset()
    constrained = {"enum", "const", "pattern", "format"}
    return frozenset(
        name
        for name, schema in properties.items()
        if isinstance(schema, Mapping)
        and schema.get("type") == "string"
        and not constrained & schema.keys()
    )
