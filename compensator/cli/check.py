"""`compensator check`: start a registry's servers and lint the registry against the tools
they really offer (the rules are in compensator/registry/lint.py)."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

import anyio

from ..errors import CompensatorError
from ..limits import STARTUP_TIMEOUT
from ..names import CLIENT_NAME, MAX_NAME_LENGTH
from ..registry import Registry, load_registry, registry_environment
from ..registry.lint import Finding, LiveTool, LiveView, lint, locate, summary
from ..wire import DownstreamPool, RoutedTool, sdk
from .common import plural
from .terminal import add_startup_timeout, log_to_stderr

__all__ = ["add_check_arguments", "observe", "run_check"]


_WIDTH = 100
_SEVERITY_WIDTH = 9
_TOOL_WIDTH = 36
"""The widest tool column; a longer name gets a line of its own."""


async def observe(registry: Registry, startup_timeout: float = STARTUP_TIMEOUT) -> LiveView:
    """Start the registry's servers, list their tools, and stop them again."""
    async with DownstreamPool(registry.servers.values(), startup_timeout=startup_timeout) as pool:
        tools = {name: _live_tool(routed) for name, routed in pool.routes.items()}
        return LiveView(tools=tools, failures=dict(pool.failures), hidden=dict(pool.hidden))


def _live_tool(routed: RoutedTool) -> LiveTool:
    wire = sdk.tool_to_wire(routed.original)
    schema = wire.get("inputSchema")
    return LiveTool(
        name=routed.name,
        server=routed.server,
        input_schema=schema if isinstance(schema, Mapping) else {},
        annotations=wire.get("annotations"),
    )


def render_table(findings: list[Finding], path: Path) -> str:
    """A plain-text table (severity, tool, problem) and a one-line summary."""
    errors, warnings = summary(findings)
    lines = [f"compensator check: {path}", ""]
    if findings:
        fitting = [len(f.tool or "-") for f in findings if len(f.tool or "-") <= _TOOL_WIDTH - 2]
        width = max([len("TOOL"), *fitting]) + 2
        lines.append(_row("SEVERITY", "TOOL", "PROBLEM", width))
        lines.extend(_row(f.severity.value, f.tool or "-", _problem(f), width) for f in findings)
        lines.append("")
    else:
        lines.extend(["No problems found.", ""])
    lines.append(f"{plural(errors, 'error')}, {plural(warnings, 'warning')}")
    return "\n".join(lines)


def _problem(finding: Finding) -> str:
    if finding.key is None:
        return finding.message
    where = finding.key if finding.line is None else f"{finding.key} (line {finding.line})"
    if finding.file is not None:
        line = "" if finding.line is None else f", line {finding.line}"
        where = f"{finding.key} ({finding.file}{line})"
    return f"{where}: {finding.message}"


def _row(severity: str, tool: str, problem: str, width: int) -> str:
    indent = _SEVERITY_WIDTH + width
    head = f"{severity:<{_SEVERITY_WIDTH}}{tool:<{width}}"
    wrapped = textwrap.wrap(
        problem, width=_WIDTH - indent, break_long_words=False, break_on_hyphens=False
    )
    if len(tool) > width - 2:
        return "\n".join([head.rstrip(), *(" " * indent + part for part in wrapped)])
    rest = [" " * indent + part for part in wrapped[1:]]
    return "\n".join([head + wrapped[0], *rest])


def render_json(findings: list[Finding], path: Path) -> str:
    errors, warnings = summary(findings)
    document = {
        "registry": str(path),
        "findings": [finding.to_json() for finding in findings],
        "errors": errors,
        "warnings": warnings,
    }
    return json.dumps(document, indent=2, ensure_ascii=False)


def add_check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, type=Path, help="the registry YAML file")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.add_argument(
        "--client-name",
        default=CLIENT_NAME,
        help="the name your MCP client knows the proxy by (Claude Code shows its tools as "
        f"mcp__<name>__server__tool, at most {MAX_NAME_LENGTH} characters; "
        f"default {CLIENT_NAME})",
    )
    add_startup_timeout(parser, STARTUP_TIMEOUT, "start and list its tools")


def run_check(args: argparse.Namespace) -> int:
    """Exit 1 when the registry does not load or any finding is an error, else 0."""
    log_to_stderr()
    try:
        registry = load_registry(args.config, environ=registry_environment())
        live = anyio.run(observe, registry, args.startup_timeout)
    except CompensatorError as exc:
        print(f"compensator: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    findings = locate(lint(registry, live, args.client_name), registry.path, registry.origins)
    render = render_json if args.json else render_table
    print(render(findings, registry.path))
    return 1 if summary(findings)[0] else 0
