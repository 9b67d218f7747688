"""`compensator explain`: what undo would and would not do after a tool, asked from a terminal.

It answers what the `explain_blast_radius` meta tool answers. The registry's servers are
started for their tool annotations; a server that fails only leaves its annotations out.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..classification import Classification
from ..errors import CompensatorError
from ..limits import STARTUP_TIMEOUT
from .common import compact
from .terminal import Styler, add_startup_timeout, log_to_stderr, terminal_width, wrap

if TYPE_CHECKING:
    from ..registry import Registry

__all__ = [
    "EXPLAIN_EPILOG",
    "add_explain_arguments",
    "explain",
    "render_explanation",
    "run_explain",
]

_LABEL = 13


async def explain(registry: Registry, tool: str, startup_timeout: float) -> dict[str, Any]:
    """The explanation of `tool`, with the annotations of its server when it starts."""
    # Imported here: they load the MCP SDK, which `explain --help` does not need.
    from ..proxy import explain_tool
    from ..wire import DownstreamPool

    async with DownstreamPool(registry.servers.values(), startup_timeout=startup_timeout) as pool:
        known = pool.route(tool) is not None or registry.policy(tool) is not None
        offered = list(pool.routes)
        explained = explain_tool(registry, pool, tool) if known else None
        failures = dict(pool.failures)
    if explained is None:
        raise CompensatorError(_unknown_tool(tool, [*offered, *registry.tools]))
    server = registry.server_for(tool)
    if server is not None and server in failures:
        print(
            f"compensator explain: server {server!r} did not start, so its annotations "
            "are left out; the rest comes from the registry.",
            file=sys.stderr,
        )
    return explained


def _unknown_tool(tool: str, known: list[str]) -> str:
    names = sorted(set(known))
    close = difflib.get_close_matches(tool, names, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    listed = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    offered = f" Known tools: {listed}." if names else ""
    return (
        f"no tool named {tool!r}: no server offers it and the registry has no entry.{hint}{offered}"
    )


def render_explanation(explained: Mapping[str, Any], *, width: int, style: Styler) -> str:
    classification = str(explained["classification"])
    head = f"{style(str(explained['tool']), 'bold')}: "
    lines = [head + style(classification, _tone(Classification.named(classification)))]
    lines += _field("journaled", _yes(explained["journaled"]), width)
    lines += _field("undoable", _yes(explained["undoable"]), width)
    snapshot = explained.get("snapshot")
    if snapshot:
        lines += _field("snapshot", f"{snapshot['tool']} {compact(snapshot['args'])}", width)
    for index, step in enumerate(explained.get("inverse") or [], start=1):
        when = f"\n   when {step['when']}" if "when" in step else ""
        label = "inverse" if index == 1 else ""
        lines += _field(label, f"{index}. {step['tool']} {compact(step['args'])}{when}", width)
    guard = explained.get("guardrails") or {}
    if guard.get("deny"):
        lines += _field("denied", _guard_value(guard["deny"], "always"), width)
    if guard.get("approve"):
        lines += _field("asks first", _guard_value(guard["approve"], "every call"), width)
    lines.append("")
    lines.extend(wrap(str(explained["explanation"]), width))
    return "\n".join(lines)


def _guard_value(value: Any, always: str) -> str:
    """`true` reads as `always`; a reason or a `when ...` condition as it is."""
    return always if value is True else str(value)


def _tone(kind: Classification) -> str:
    """Green when undo covers the tool (nothing to undo, or undoable), red when the registry
    says it cannot be undone, yellow when nobody said (unknown)."""
    if kind.behaviour.undoable or not kind.behaviour.journaled:
        return "green"
    return "red" if kind.behaviour.in_registry else "yellow"


def _field(label: str, value: str, width: int) -> list[str]:
    wrapped = wrap(value, max(width - _LABEL, 20))
    first = f"  {label:<{_LABEL - 2}}{wrapped[0]}"
    return [first, *(" " * _LABEL + line for line in wrapped[1:])]


def _yes(value: Any) -> str:
    return "yes" if value else "no"


# -- command line -------------------------------------------------------------------------

EXPLAIN_EPILOG = """\
examples:
  compensator explain --config compensators.yaml tasks__delete_task
  compensator explain --config compensators.yaml tasks__purge_completed --json

The same answer as the `explain_blast_radius` meta tool: the tool's classification, whether
it is journaled and undoable, the snapshot taken before it, the compensating calls, and what
undo cannot restore. Exit 1 when no server offers the tool and the registry does not name it.
"""


def add_explain_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("tool", metavar="TOOL", help="an exposed tool name, e.g. tasks__add_task")
    parser.add_argument("--config", required=True, type=Path, help="the registry YAML file")
    parser.add_argument("--json", action="store_true", help="print the raw explanation as JSON")
    add_startup_timeout(parser, STARTUP_TIMEOUT, "start")


def run_explain(args: argparse.Namespace) -> int:
    log_to_stderr()
    try:
        from ..registry import load_registry, registry_environment  # YAML: when run

        registry = load_registry(args.config, environ=registry_environment())
        import anyio  # with the SDK, only when servers are started

        explained = anyio.run(explain, registry, args.tool, args.startup_timeout)
    except CompensatorError as exc:
        print(f"compensator explain: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    if args.json:
        print(json.dumps(explained, indent=2, ensure_ascii=False))
    else:
        width = min(terminal_width(), 100)
        print(render_explanation(explained, width=width, style=Styler.for_stream(sys.stdout)))
    return 0
