"""A registry compared with the tools its servers really offer (`compensator check`).

`lint` takes what the servers said as plain data (`LiveView`) and finds:

- error: a tool the registry names (`tools:`, `state:`, `reset:`, `snapshot_tool`, inverse
  steps) that no server offers; tools of a server that failed to start are not reported, the
  failed server is the error. A tool whose name in Claude Code, `mcp__<client>__server__tool`
  (client name `compensator` unless --client-name says otherwise), is over 64 characters is an
  error too: the client rejects it.
- error: an expression reading `args.NAME` that the entry's own tool does not declare (first
  field after `args` only, and only when the schema lists `properties`): it is always null.
- error: literal argument mappings (inverse steps, `snapshot_args`, state probes, resets) that
  leave out a property the target's inputSchema requires, or set one it does not list. An
  unlisted property is an error even without `additionalProperties: false`: servers either
  reject it or (FastMCP) silently drop it, and a dropped argument is an undo that quietly
  restores less. `additionalProperties: true` (or a schema) and `patternProperties` allow it.
- warning: an offered tool with no entry and no `readOnlyHint: true` (journaled as unknown,
  undo refuses it); that may be deliberate, so it does not fail the check.
- warning: a `read` tool whose annotations, when present, say destructive (readOnlyHint
  defaults to false, destructiveHint to true). Annotations are untrusted hints and the author
  may know better, so not an error; but a read is never journaled, so it deserves a look.
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import CompensatorError, did_you_mean
from ..names import CLIENT_NAME, MAX_NAME_LENGTH, client_tool_name, resolve, too_long
from .expressions import Expression, Template
from .model import Registry, ToolPolicy
from .yamlnodes import line_of, load_with_lines

__all__ = [
    "Finding",
    "LiveTool",
    "LiveView",
    "Severity",
    "accepts",
    "lint",
    "locate",
    "missing_arguments",
    "summary",
    "unknown_arguments",
    "unknown_reads",
]


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One problem: how bad, which tool, where in the registry, what is wrong and the fix."""

    severity: Severity
    tool: str | None
    key: str | None
    message: str
    line: int | None = None
    file: str | None = None
    """The included file `line` is in; None: the registry itself."""

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "severity": self.severity.value}


@dataclass(frozen=True, kw_only=True)
class LiveTool:
    """What a running server says about one tool, under its exposed name."""

    name: str
    server: str
    input_schema: Mapping[str, Any]
    annotations: Mapping[str, Any] | None


@dataclass(frozen=True, kw_only=True)
class LiveView:
    """The tools the registry's servers offer, and the servers that did not start."""

    tools: Mapping[str, LiveTool]
    failures: Mapping[str, str]
    hidden: Mapping[str, str] = field(default_factory=dict)
    """The unprefixed server's tools left out, with what takes each one's name."""


@dataclass(frozen=True, kw_only=True)
class _Reference:
    """A place in the registry that calls `tool`, with the literal args it sends, if any."""

    tool: str
    key: str
    args: Template | None


# -- schema fit: pure functions over a JSON Schema ----------------------------------------


def accepts(schema: Mapping[str, Any], name: str) -> bool:
    """Whether `schema` lets an argument be called `name`; True when it lists no properties."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or name in properties:
        return True
    extra = schema.get("additionalProperties")
    if extra is True or isinstance(extra, Mapping):
        return True
    patterns = schema.get("patternProperties")
    return isinstance(patterns, Mapping) and any(_matches(p, name) for p in patterns)


def missing_arguments(args: Any, schema: Mapping[str, Any]) -> list[str]:
    """Required properties that the literal mapping `args` leaves out ([] if not a mapping)."""
    required = schema.get("required")
    if not isinstance(args, Mapping) or not isinstance(required, list):
        return []
    return [name for name in required if isinstance(name, str) and name not in args]


def unknown_arguments(args: Any, schema: Mapping[str, Any]) -> list[str]:
    """Keys of the literal mapping `args` that `schema` does not accept."""
    if not isinstance(args, Mapping):
        return []
    return [str(name) for name in args if not accepts(schema, str(name))]


def unknown_reads(expression: Expression, schema: Mapping[str, Any]) -> list[str]:
    """The NAMEs of `args.NAME` paths in `expression` that `schema` does not accept."""
    names = [path[1] for path in expression.root_paths() if path[0] == "args" and len(path) > 1]
    return [name for name in dict.fromkeys(names) if not accepts(schema, name)]


def _matches(pattern: str, name: str) -> bool:
    try:
        return re.search(pattern, name) is not None
    except re.error:
        return False


def _suggest(name: str, choices: Iterable[str], prefix: str = "") -> str:
    options = sorted(choices)
    takes = f"It takes: {', '.join(options)}." if options else "It takes no arguments."
    return did_you_mean(name, options, takes, prefix=prefix)


def _properties(schema: Mapping[str, Any]) -> list[str]:
    properties = schema.get("properties")
    return [str(name) for name in properties] if isinstance(properties, Mapping) else []


# -- the lint --------------------------------------------------------------------------


def lint(registry: Registry, live: LiveView, client: str = CLIENT_NAME) -> list[Finding]:
    """Every finding for `registry` against `live`, errors first; `client` is the name the
    client knows the proxy by, part of the tool names it shows."""
    findings = [*_failed_servers(registry, live), *_long_names(registry, live, client)]
    findings.extend(_hidden(registry, live))
    prefixes = registry.prefixes
    for reference in _references(registry):
        findings.extend(_check_reference(reference, live, prefixes))
    for policy in registry.tools.values():
        findings.extend(_check_reads(policy, live))
        findings.extend(_check_annotations(policy, live))
    findings.extend(_unregistered(registry, live))
    return sorted(findings, key=lambda f: f.severity is not Severity.ERROR)


def _order(finding: Finding) -> tuple[bool, float, str]:
    line = float("inf") if finding.line is None else finding.line
    return finding.severity is not Severity.ERROR, line, finding.tool or ""


def _error(tool: str | None, key: str | None, message: str) -> Finding:
    return Finding(severity=Severity.ERROR, tool=tool, key=key, message=message)


def _warning(tool: str | None, key: str | None, message: str) -> Finding:
    return Finding(severity=Severity.WARNING, tool=tool, key=key, message=message)


def _failed_servers(registry: Registry, live: LiveView) -> Iterator[Finding]:
    for server, reason in live.failures.items():
        spec = registry.servers.get(server)
        if spec is not None and spec.url is not None:
            how = "Check that the server is running and answers MCP at its url"
        else:
            how = "Run its command by hand to see why"
        message = (
            f"server '{server}' failed to start: {reason}. None of its tools could be checked. "
            f"{how}, then fix servers.{server}."
        )
        yield _error(None, f"servers.{server}", message)


def _long_names(registry: Registry, live: LiveView, client: str) -> Iterator[Finding]:
    for name, length in too_long(live.tools, client).items():
        tool = live.tools[name]
        spec = registry.servers.get(tool.server)
        prefix = spec.exposed_prefix if spec is not None else tool.server
        excess = length - MAX_NAME_LENGTH
        fix = f"Set a prefix: on servers.{tool.server} at least {excess} shorter than '{prefix}'."
        if excess >= len(prefix):  # even a one-letter prefix is too long
            fix = "Have the server rename the tool, or leave this server out."
        message = (
            f"the exposed name is {len(name)} characters, and Claude Code shows it as "
            f"{client_tool_name(name, client)}: {length} characters, over {MAX_NAME_LENGTH} "
            f"(the most it accepts). {fix}"
        )
        yield _error(name, f"servers.{tool.server}", message)


def _hidden(registry: Registry, live: LiveView) -> Iterator[Finding]:
    server = next((s.name for s in registry.servers.values() if not s.exposed_prefix), None)
    for name, why in live.hidden.items():
        message = (
            f"server '{server}' (prefix: \"\") offers {name}, but {why} takes that name, so the "
            f"proxy leaves the tool out and clients cannot call it. Give servers.{server} a "
            "prefix: to offer it, or have the server rename it."
        )
        yield _error(name, f"servers.{server}.prefix", message)


def _references(registry: Registry) -> Iterator[_Reference]:
    for name in registry.tools:
        yield _Reference(tool=name, key=f"tools.{name}", args=None)
    for index, probe in enumerate(registry.state):
        yield _Reference(tool=probe.tool, key=f"state[{index}].tool", args=probe.args)
    for index, call in enumerate(registry.reset):
        yield _Reference(tool=call.tool, key=f"reset[{index}].tool", args=call.args)
    for policy in registry.tools.values():
        yield from _policy_references(policy)


def _policy_references(policy: ToolPolicy) -> Iterator[_Reference]:
    base = f"tools.{policy.name}"
    if policy.snapshot_tool is not None:
        key = f"{base}.snapshot_tool"
        yield _Reference(tool=policy.snapshot_tool, key=key, args=policy.snapshot_args)
    if policy.verify_names_its_read:
        assert policy.verify_tool is not None
        key = f"{base}.verify.tool"
        yield _Reference(tool=policy.verify_tool, key=key, args=policy.verify_args)
    for index, step in enumerate(policy.inverse):
        single = step.args.where == f"{base}.inverse_args"
        key = f"{base}.inverse_tool" if single else f"{base}.inverse[{index}].tool"
        yield _Reference(tool=step.tool, key=key, args=step.args)


def _check_reference(
    reference: _Reference, live: LiveView, prefixes: Mapping[str, str]
) -> list[Finding]:
    target = live.tools.get(reference.tool)
    if target is not None:
        return [] if reference.args is None else _check_fit(reference.args, target)
    resolved = resolve(reference.tool, prefixes)
    if resolved is not None and prefixes[resolved[0]] in live.failures:
        return []  # the failed server is reported once, as its own error
    close = difflib.get_close_matches(reference.tool, list(live.tools), n=1)
    fix = f"Did you mean '{close[0]}'?" if close else "Fix the name, or remove what uses it."
    message = f"no server offers {reference.tool}. {fix}"
    return [_error(reference.tool, reference.key, message)]


def _check_fit(args: Template, target: LiveTool) -> list[Finding]:
    schema, where = target.input_schema, args.where
    findings = []
    for name in missing_arguments(args.source, schema):
        message = f"{target.name} requires argument '{name}', but these args leave it out. Add it."
        findings.append(_error(target.name, where, message))
    for name in unknown_arguments(args.source, schema):
        message = (
            f"{target.name} takes no argument '{name}' (servers reject or silently drop it). "
            f"{_suggest(name, _properties(schema))}"
        )
        findings.append(_error(target.name, f"{where}.{name}", message))
    return findings


def _check_reads(policy: ToolPolicy, live: LiveView) -> Iterator[Finding]:
    tool = live.tools.get(policy.name)
    if tool is None:
        return
    for expression in _policy_expressions(policy):
        for name in unknown_reads(expression, tool.input_schema):
            fix = _suggest(name, _properties(tool.input_schema), prefix="args.")
            message = (
                f"`{expression.source}` reads args.{name}, but {policy.name} takes no argument "
                f"'{name}', so it is always null. {fix}"
            )
            yield _error(policy.name, expression.where, message)


def _policy_expressions(policy: ToolPolicy) -> Iterator[Expression]:
    if policy.snapshot_args is not None:
        yield from policy.snapshot_args.expressions()
    if policy.verify_names_its_read and policy.verify_args is not None:
        yield from policy.verify_args.expressions()
    yield from policy.step_expressions()
    if policy.error_when is not None:
        yield policy.error_when
    if policy.mutating_when is not None:
        yield policy.mutating_when
    for guard in (policy.approve_when, policy.deny_when):  # a misspelt argument disarms these
        if guard is not None:
            yield guard


def _check_annotations(policy: ToolPolicy, live: LiveView) -> Iterator[Finding]:
    tool = live.tools.get(policy.name)
    if policy.classification.behaviour.journaled or tool is None:
        return
    if tool.annotations is None or not _destructive(tool.annotations):
        return
    message = (
        f"classified {policy.classification.value}, but its server annotates it destructive "
        "(readOnlyHint false, destructiveHint true), and reads are never journaled. Classify "
        "it reversible, compensable or irreversible, unless you know it only reads."
    )
    yield _warning(policy.name, f"tools.{policy.name}.classification", message)


def _destructive(annotations: Mapping[str, Any]) -> bool:
    """MCP defaults: readOnlyHint false, destructiveHint true."""
    read_only = annotations.get("readOnlyHint", False) is True
    return not read_only and annotations.get("destructiveHint", True) is True


def _unregistered(registry: Registry, live: LiveView) -> Iterator[Finding]:
    for tool in live.tools.values():
        if tool.name in registry.tools or (tool.annotations or {}).get("readOnlyHint") is True:
            continue
        message = (
            "not in the registry and not annotated readOnlyHint: true, so its calls are "
            "journaled as unknown and undo refuses them. Add it under tools: with its "
            "classification (read if it only reads)."
        )
        yield _warning(tool.name, None, message)


def locate(
    findings: Iterable[Finding], path: Path, origins: Mapping[str, tuple[Path, str]] | None = None
) -> list[Finding]:
    """The findings with the line of their key in `path`, or, for a key within an entry
    written elsewhere (`origins`, see Registry), in that file; errors first, then in file
    order."""
    cache: dict[Path, dict[str, int]] = {}

    def lines_of(file: Path) -> dict[str, int]:
        if file not in cache:
            try:
                _, cache[file] = load_with_lines(file.read_text(encoding="utf-8"), str(file))
            except (OSError, UnicodeDecodeError, CompensatorError):
                cache[file] = {}
        return cache[file]

    located = []
    for finding in findings:
        file, key = _written_at(finding.key or "", origins or {})
        lines = lines_of(file or path)
        if finding.key and lines:
            finding = replace(finding, line=line_of(lines, key))
        if file is not None and file != path:
            finding = replace(finding, file=str(file))
        located.append(finding)
    return sorted(located, key=_order)


def _written_at(key: str, origins: Mapping[str, tuple[Path, str]]) -> tuple[Path | None, str]:
    """The file and key there of the entry holding `key` (None: this file, as it is)."""
    found = [e for e in origins if key == e or key.startswith((f"{e}.", f"{e}["))]
    if not found:
        return None, key
    entry = max(found, key=len)
    file, own = origins[entry]
    return file, own + key[len(entry) :]


def summary(findings: Iterable[Finding]) -> tuple[int, int]:
    """(errors, warnings)."""
    severities = [f.severity for f in findings]
    return severities.count(Severity.ERROR), severities.count(Severity.WARNING)
